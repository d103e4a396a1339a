//! The fault driver of the scenarios on the library's primitives (18–21): one fault at a time,
//! chosen at random, with calm spells in between — one or two masters killed and restarted after
//! more than a TTL (empty, or from their AOF when the setup has one), two paused, two or three
//! partitioned away, or every master slowed down; and, in an election, the leader cut off from
//! every master.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::ctl::Ctl;
use super::election::{self, Board};
use super::ran::Ran;
use super::Check;

/// The least and most latency added each way while the masters are slow (below the node
/// timeout).
const LATENCY_MS: (u64, u64) = (2, 5);

/// In an election, one fault in this many is the leader cut off, the fifth one first.
const CUT_OFF_EVERY: usize = 10;

/// The kinds of fault every scenario gets; the next one is the leader cut off.
const CUT_OFF_KIND: usize = 5;

/// The mixed faults, until the run stops; with the `board` of an election, its leader cut off
/// as well.
pub(super) async fn faults(mut ctl: Ctl, board: Option<Arc<Board>>) -> io::Result<()> {
    let masters = ctl.cluster.addrs().len();
    let ttl = ctl.setup.ttl;
    let mut struck = CUT_OFF_EVERY / 2;
    ctl.go();
    loop {
        if !ctl.sleep_ms(50, 250).await {
            return Ok(());
        }
        // In an election, every tenth fault cuts the leader off (each costs a TTL without one).
        struck += 1;
        let cut_off = board.is_some() && struck.is_multiple_of(CUT_OFF_EVERY);
        let kind = if cut_off {
            CUT_OFF_KIND
        } else {
            ctl.rng.random_range(0..CUT_OFF_KIND)
        };
        let go_on = match kind {
            0 => {
                let victims = ctl.pick_up_to(2);
                for &i in &victims {
                    ctl.kill(i).await?;
                }
                let back = if ctl.setup.aof {
                    "restarted from their AOF"
                } else {
                    "restarted empty"
                };
                let id = ctl.fault(format!("masters {victims:?} killed, {back} after a TTL"));
                let down = ttl + ctl.ms(20, 100);
                tokio::time::sleep(down).await;
                for &i in &victims {
                    ctl.restart(i).await?;
                }
                ctl.heal(id);
                true
            }
            1 => {
                let victims = ctl.pick(2);
                for &i in &victims {
                    ctl.pause(i)?;
                }
                let id = ctl.fault(format!("masters {victims:?} paused"));
                let go_on = ctl.sleep_ms(50, 200).await;
                ctl.heal(id);
                for &i in &victims {
                    ctl.resume(i)?;
                }
                go_on
            }
            k @ (2 | 3) => {
                let victims = ctl.pick(k);
                for &i in &victims {
                    ctl.network(i)?.iter().for_each(|p| p.blackhole());
                }
                let side = if k == 3 { "majority" } else { "minority" };
                let id = ctl.fault(format!("masters {victims:?} partitioned away ({side})"));
                let go_on = ctl.sleep_ms(50, 200).await;
                ctl.heal(id);
                for &i in &victims {
                    ctl.network(i)?.iter().for_each(|p| p.heal());
                }
                go_on
            }
            4 => {
                let mut delays = Vec::new();
                for i in 0..masters {
                    let (lo, hi) = LATENCY_MS;
                    let (up, down) = (ctl.ms(lo, hi), ctl.ms(lo, hi));
                    for proxy in ctl.network(i)? {
                        proxy.delay(up, down, Duration::from_millis(1));
                    }
                    delays.push(format!("{}+{}", up.as_millis(), down.as_millis()));
                }
                let id = ctl.fault(format!(
                    "latency (up+down ms, ±1 ms each) {}",
                    delays.join(" ")
                ));
                let go_on = ctl.sleep_ms(200, 500).await;
                ctl.heal(id);
                for i in 0..masters {
                    ctl.network(i)?.iter().for_each(|p| p.pass());
                }
                go_on
            }
            _ => match &board {
                Some(board) => election::cut_off_the_leader(&mut ctl, board).await,
                None => true,
            },
        };
        if !go_on {
            return Ok(());
        }
    }
}

/// Every kind of fault the driver injects struck at least once; leaders cut off too, with
/// `cut_offs` (in an election).
pub(super) fn every_kind_of_fault_struck(ran: &Ran, cut_offs: bool) -> Check {
    let faults = ran.history.faults();
    let mut kinds = vec![
        ("killed", "kills"),
        ("paused", "pauses"),
        ("(minority)", "minority partitions"),
        ("(majority)", "majority partitions"),
        ("latency", "slowdowns"),
    ];
    if cut_offs {
        kinds.push((election::CUT_OFF, "leaders cut off"));
    }
    let counts: Vec<(usize, &str)> = kinds
        .iter()
        .map(|(marker, what)| {
            let n = faults
                .iter()
                .filter(|f| f.description.contains(marker))
                .count();
            (n, *what)
        })
        .collect();
    Check::new(
        "every kind of fault struck",
        counts.iter().all(|(n, _)| *n > 0),
        counts
            .iter()
            .map(|(n, what)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

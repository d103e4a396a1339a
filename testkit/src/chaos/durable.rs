//! Scenarios 22 and 23: voters that fail over while locks are held, with and without durable
//! votes.
//!
//! Three voters, each a primary with an asynchronous replica that replicates through a fault
//! proxy (the replication link); clients reach each voter through another proxy (its virtual
//! IP). Separate clients contend for a few resources. Over and over, the fault driver freezes
//! the replication of two voters, lets the clients go on until both frozen primaries hold a
//! grant their replicas lack (a lock held long, when there is one; at most [`LONGEST_FREEZE`]),
//! then kills both primaries, promotes both replicas and moves the virtual IPs to them: two
//! failovers in the same window, which breaks the rule `f ≥ q − N + k` for any holder (q = 2,
//! N = 3, k ≤ 3). The dead primaries come back empty as the replicas of the promoted ones, ready
//! for the next round.
//!
//! * 22, the negative control ([`Durability::Answered`]): grants made while the replication was
//!   frozen are lost with their primaries, and a second client takes a lock its first holder
//!   still holds. The checker must find these overlaps.
//! * 23 ([`Durability::Replicas(1)`](Durability::Replicas)): a grant counts only once the
//!   replica acknowledged it, so a frozen voter's grants never count, and what counted is on the
//!   promoted replica. 0 violations.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{Durability, Redlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::contenders::{contend, Contention, Holds};
use super::{percentiles, ChaosRun, Check, Length, Scenario};
use crate::failover::{blocking, Pair};
use crate::History;

const VOTERS: usize = 3;
const CLIENTS: usize = 16;
const RESOURCES: usize = 12;
const TTL: Duration = Duration::from_secs(1);
/// Long enough for `WAIT` to hear from a live replica on a loaded machine (it waits about half
/// of it); a frozen one never answers within it. Short, because a failover brings back the
/// line of the replica's copy, whose stale entries hold the line up for one entry lease (ten
/// node timeouts) like waiters that died.
const NODE_TIMEOUT: Duration = Duration::from_millis(150);
/// Most holds are short; one in [`LONG_HOLD_ONE_IN`] lasts long enough that a double failover
/// often strikes while it is held.
const SHORT_HOLD: Duration = Duration::from_millis(10);
const LONG_HOLD: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(80)..=Duration::from_millis(200);
const LONG_HOLD_ONE_IN: u32 = 5;

/// Runs scenario 22 or 23 (see the module docs) for `length` with `seed`.
///
/// # Errors
///
/// When a server or proxy cannot be started, or a failover step fails.
pub(super) async fn run(scenario: Scenario, length: Length, seed: u64) -> io::Result<ChaosRun> {
    let started = Instant::now();
    let durability = match scenario {
        Scenario::FailoverDurable => Durability::Replicas(1),
        _ => Durability::Answered,
    };
    let pairs: Vec<Pair> = blocking(|| (0..VOTERS).map(|_| Pair::start()).collect()).await?;
    let urls: Vec<String> = pairs.iter().map(|p| p.vip.url()).collect();
    let history = Arc::new(History::new());
    let shared = Arc::new(Shared {
        rounds_struck: AtomicUsize::new(0),
        clients: Arc::default(),
    });
    let holds = Holds {
        resources: RESOURCES,
        ttl: TTL,
        short: SHORT_HOLD,
        long: LONG_HOLD,
        long_one_in: LONG_HOLD_ONE_IN,
    };
    let target = length.target();
    let time_limit = match length {
        Length::Short => Duration::from_secs(150),
        Length::Long => Duration::from_secs(600),
    };

    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let rl = Redlock::builder(urls.clone())
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(Duration::from_millis(500))
            .retry_delay(Duration::from_millis(10))
            .retry_jitter(Duration::from_millis(10))
            .acquire_timeout(Duration::from_secs(5))
            .durability(durability)
            .build()
            .map_err(io::Error::other)?;
        let rng = StdRng::seed_from_u64(seed ^ (client as u64 + 1).wrapping_mul(0x9E37_79B9));
        clients.push(tokio::spawn(contend(
            rl,
            client,
            rng,
            holds.clone(),
            Arc::clone(&history),
            Arc::clone(&shared.clients),
        )));
    }

    let driver = tokio::spawn(fail_over_in_pairs(
        pairs,
        StdRng::seed_from_u64(seed),
        Arc::clone(&history),
        Arc::clone(&shared),
    ));
    let min_rounds = min_rounds(length);
    while (shared.clients.acquisitions.load(Ordering::Relaxed) < target
        || shared.rounds_struck.load(Ordering::Relaxed) < min_rounds)
        && started.elapsed() < time_limit
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shared.clients.stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    let rounds = driver.await.map_err(io::Error::other)??;

    let report = history.check();
    let mut latencies = std::mem::take(&mut *crate::mutex::lock(&shared.clients.latencies));
    let (p50, p99) = percentiles(&mut latencies);
    let lost: usize = rounds.iter().map(|r| r.keys_lost).sum();
    let struck = rounds.iter().filter(|r| r.struck).count();
    let checks = vec![
        Check::new(
            "two voters failed over in one window while both held a grant their replicas lacked",
            struck >= min_rounds,
            format!(
                "{struck} of {} rounds of two failovers (at least {min_rounds})",
                rounds.len()
            ),
        ),
        Check::new(
            "failovers took keys their replicas never got",
            lost > 0,
            format!("{lost} keys on a dying primary and not on its replica"),
        ),
    ];
    Ok(ChaosRun {
        scenario,
        seed,
        length,
        acquisitions: shared.clients.acquisitions.load(Ordering::Relaxed),
        failures: shared.clients.failures.load(Ordering::Relaxed),
        violations: report.violations.len(),
        p50,
        p99,
        elapsed: started.elapsed(),
        report,
        checks,
    })
}

/// Rounds of double failovers a run must go through, striking a grant on both voters.
fn min_rounds(length: Length) -> usize {
    match length {
        Length::Short => 30,
        Length::Long => 100,
    }
}

struct Shared {
    /// Rounds whose failovers struck a grant on both voters.
    rounds_struck: AtomicUsize,
    /// The clients' (see `contenders`); the fault driver strikes their long holds first.
    clients: Arc<Contention>,
}

/// One round of the fault driver.
struct Round {
    /// Lock keys a dying primary held that its replica did not.
    keys_lost: usize,
    /// Whether both primaries held a grant their replicas lacked when the failovers began.
    struck: bool,
}

/// How long the replication of the two voters stays frozen at most, waiting for a grant to
/// strike.
const LONGEST_FREEZE: Duration = Duration::from_millis(400);

/// Until the clients stop: freeze the replication of two voters, wait, fail both over, rebuild
/// them, rest.
async fn fail_over_in_pairs(
    mut pairs: Vec<Pair>,
    mut rng: StdRng,
    history: Arc<History>,
    shared: Arc<Shared>,
) -> io::Result<Vec<Round>> {
    let mut rounds = Vec::new();
    while !shared.clients.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(800..=1_600))).await;
        let first = rng.random_range(0..VOTERS);
        let second = (first + rng.random_range(1..VOTERS)) % VOTERS;
        let victims = [first, second];
        let fault = history.fault(format!(
            "replication of voters {first} and {second} frozen, then both failed over"
        ));
        for &v in &victims {
            pairs[v].freeze_replication();
        }
        // Strike once both frozen primaries hold a grant their replicas lack, of a lock held
        // long at best (a lock taken during the freeze, counted or not).
        let frozen_at = Instant::now();
        let long_holds = Arc::clone(&shared);
        let (back, struck) = blocking(move || {
            let struck = loop {
                let lost = victims.map(|v| tokens_only_on_the_primary(&pairs[v]));
                let on_both: Vec<&String> =
                    lost[0].iter().filter(|t| lost[1].contains(*t)).collect();
                let held_long = {
                    let long = crate::mutex::lock(&long_holds.clients.long_holds);
                    on_both.iter().any(|t| long.contains_key(*t))
                };
                let waited = frozen_at.elapsed();
                if held_long || (!on_both.is_empty() && waited >= LONGEST_FREEZE / 2) {
                    break true;
                }
                if waited >= LONGEST_FREEZE {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            Ok((pairs, struck))
        })
        .await?;
        let (back, keys_lost) = blocking(move || {
            let mut pairs = back;
            let mut keys_lost = 0;
            for &v in &victims {
                keys_lost += tokens_only_on_the_primary(&pairs[v]).len();
                pairs[v].fail_over()?;
            }
            // Both at once: a voter without a replica cannot confirm a durable grant.
            std::thread::scope(|scope| {
                let rebuilding: Vec<_> = pairs
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| victims.contains(i))
                    .map(|(_, pair)| scope.spawn(move || pair.rebuild()))
                    .collect();
                rebuilding.into_iter().try_for_each(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a rebuild panicked")))
                })
            })?;
            Ok((pairs, keys_lost))
        })
        .await?;
        pairs = back;
        history.heal(fault);
        if struck {
            shared.rounds_struck.fetch_add(1, Ordering::Relaxed);
        }
        rounds.push(Round { keys_lost, struck });
    }
    Ok(rounds)
}

/// The tokens of the lock keys on `pair`'s primary that its replica lacks.
fn tokens_only_on_the_primary(pair: &Pair) -> Vec<String> {
    let held = |server: &crate::RedisServer| -> Vec<Option<String>> {
        crate::direct::query(server.addr(), Duration::from_millis(500), |c| {
            let mut mget = redis::cmd("MGET");
            for r in 0..RESOURCES {
                mget.arg(quorumlock::resource_key("", &Holds::resource(r)));
            }
            mget.query(c)
        })
        .unwrap_or_default()
    };
    let (primary, replica) = (held(&pair.master), held(&pair.replica));
    primary
        .into_iter()
        .enumerate()
        .filter_map(|(i, token)| {
            let token = token?;
            (replica.get(i).cloned().flatten().as_ref() != Some(&token)).then_some(token)
        })
        .collect()
}

//! The explorer's fault driver: runs a plan's schedule through the engine's [`Ctl`], each fault
//! in a task of its own at its time, so that faults overlap as the schedule has them.
//!
//! Faults that meet on one master are combined, not undone by each other: a master paused
//! twice resumes when both pauses end, a partition's end restores the latency still due, a
//! master is not killed twice, and a clock running at another rate is neither killed (a
//! restart would step it back to its offset) nor given a second rate or a strobe. Every clock
//! change keeps the clock where it is (a new rate starts from the current reading), but for
//! the steps the schedule asks for.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::ctl::Ctl;
use super::plan::{Action, FaultKind, Plan, Planned};
use crate::mutex;
use quorumlock_testkit::clock::Clock;

/// A fault that struck: its kind and what it did.
#[derive(Clone, Debug)]
pub(super) struct Struck {
    pub(super) kind: FaultKind,
    pub(super) description: String,
}

/// What the driver knows of one master.
#[derive(Debug)]
struct Master {
    killed: bool,
    pauses: usize,
    partitions: usize,
    /// The latency it is under, and the fault that set it.
    delay: Option<(usize, Duration, Duration, Duration)>,
    /// Its clock: the offset (ms, from the real clock) at the process start and the rate, as
    /// libfaketime reads them: `start + offset + rate × (now − start)`.
    offset_ms: f64,
    rate: f64,
    /// When its process started (libfaketime's `start`).
    started: Instant,
    /// A rate or a strobe runs on it.
    clock_busy: bool,
}

impl Master {
    /// How far its clock is from the real one now, in ms.
    fn displacement(&self, now: Instant) -> f64 {
        self.offset_ms + (self.rate - 1.0) * (now - self.started).as_secs_f64() * 1e3
    }

    fn clock(&self) -> Clock {
        clock(self.offset_ms, self.rate)
    }
}

/// A clock `offset_ms` from the real one at the process start, running at `rate`.
fn clock(offset_ms: f64, rate: f64) -> Clock {
    let by = Duration::from_secs_f64(offset_ms.abs() / 1e3);
    let clock = if offset_ms < 0.0 {
        Clock::behind(by)
    } else {
        Clock::ahead(by)
    };
    clock.running_at(rate)
}

/// The masters' state, shared by the fault tasks.
type Masters = Arc<Mutex<Vec<Master>>>;

/// Runs `plan`'s schedule: the skew before the clients start, every other fault at its time.
/// Faults still on when the run stops end at once.
pub(super) async fn drive(
    mut ctl: Ctl,
    plan: Arc<Plan>,
    struck: Arc<Mutex<Vec<Struck>>>,
) -> io::Result<()> {
    let now = Instant::now();
    let masters: Vec<Master> = (0..ctl.cluster.addrs().len())
        .map(|i| Master {
            killed: false,
            pauses: 0,
            partitions: 0,
            delay: None,
            offset_ms: 0.0,
            rate: 1.0,
            started: process_start(&ctl, i).unwrap_or(now),
            clock_busy: false,
        })
        .collect();
    let masters: Masters = Arc::new(Mutex::new(masters));

    for fault in plan.active_faults().filter(|f| f.kind == FaultKind::Skew) {
        if let Action::Skew { offsets_ms } = &fault.action {
            for (i, offset) in offsets_ms.iter().enumerate() {
                let clock = {
                    let mut all = mutex::lock(&masters);
                    let Some(m) = all.get_mut(i) else { continue };
                    m.offset_ms = *offset as f64;
                    m.clock()
                };
                ctl.set_clock(i, clock).await?;
            }
            // Lasts the whole run: never healed.
            ctl.fault(format!("skew: {}", fault.action));
            note(&struck, fault);
        }
    }

    ctl.go();
    let start = Instant::now();
    let ctl = Arc::new(ctl);
    let tasks: Vec<_> = plan
        .active_faults()
        .filter(|f| f.kind != FaultKind::Skew)
        .cloned()
        .enumerate()
        .map(|(id, fault)| {
            tokio::spawn(strike(
                Arc::clone(&ctl),
                Arc::clone(&masters),
                Arc::clone(&struck),
                start,
                id,
                fault,
            ))
        })
        .collect();
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            Err(e) => {
                failed.get_or_insert(io::Error::other(e));
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

fn note(struck: &Mutex<Vec<Struck>>, fault: &Planned) {
    mutex::lock(struck).push(Struck {
        kind: fault.kind,
        description: fault.action.to_string(),
    });
}

/// When master `i`'s process started, from `/proc` (its age, in clock ticks); `None` where
/// that cannot be read.
fn process_start(ctl: &Ctl, i: usize) -> Option<Instant> {
    let pid = ctl.cluster.servers().iter().nth(i)?.pid()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    // Field 22, counted after the command name (which may hold spaces) closes.
    let after = stat.rsplit_once(')')?.1;
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // Linux's USER_HZ is 100 on every architecture it runs this on.
    let age = (up - ticks / 100.0).max(0.0);
    Instant::now().checked_sub(Duration::from_secs_f64(age))
}

/// One fault: waits for its time, strikes, lasts, ends.
async fn strike(
    ctl: Arc<Ctl>,
    masters: Masters,
    struck: Arc<Mutex<Vec<Struck>>>,
    start: Instant,
    id: usize,
    fault: Planned,
) -> io::Result<()> {
    let due = start + fault.at;
    if !ctl
        .sleep(due.saturating_duration_since(Instant::now()))
        .await
    {
        return Ok(());
    }
    match &fault.action {
        Action::Kill {
            masters: victims,
            down,
        } => {
            let victims: Vec<usize> = {
                let mut all = mutex::lock(&masters);
                victims
                    .iter()
                    .copied()
                    .filter(|i| match all.get_mut(*i) {
                        Some(m) if !m.killed && !m.clock_busy => {
                            m.killed = true;
                            true
                        }
                        _ => false,
                    })
                    .collect()
            };
            if victims.is_empty() {
                return Ok(());
            }
            for &i in &victims {
                ctl.kill(i).await?;
            }
            let how = if ctl.setup.aof {
                "restarted from their AOF"
            } else {
                "restarted empty"
            };
            let fault_id = ctl.fault(format!(
                "masters {victims:?} killed, {how} after {}",
                super::plan::secs(*down)
            ));
            note_as(&struck, fault.kind, &format!("masters {victims:?} killed"));
            ctl.sleep(*down).await;
            for &i in &victims {
                ctl.restart(i).await?;
                if let Some(m) = mutex::lock(&masters).get_mut(i) {
                    m.killed = false;
                    m.pauses = 0;
                    m.started = Instant::now();
                }
            }
            ctl.heal(fault_id);
        }
        Action::Pause {
            masters: victims,
            lasts,
        } => {
            let paused: Vec<usize> = {
                let mut all = mutex::lock(&masters);
                let mut paused = Vec::new();
                for &i in victims {
                    let Some(m) = all.get_mut(i) else { continue };
                    if m.killed {
                        continue;
                    }
                    m.pauses += 1;
                    if m.pauses == 1 {
                        ctl.pause(i)?;
                    }
                    paused.push(i);
                }
                paused
            };
            if paused.is_empty() {
                return Ok(());
            }
            let fault_id = ctl.fault(format!("masters {paused:?} paused"));
            note(&struck, &fault);
            ctl.sleep(*lasts).await;
            ctl.heal(fault_id);
            let mut all = mutex::lock(&masters);
            for &i in &paused {
                let Some(m) = all.get_mut(i) else { continue };
                m.pauses = m.pauses.saturating_sub(1);
                if m.pauses == 0 && !m.killed {
                    ctl.resume(i)?;
                }
            }
        }
        Action::Partition {
            masters: victims,
            lasts,
        } => {
            {
                let mut all = mutex::lock(&masters);
                for &i in victims {
                    let Some(m) = all.get_mut(i) else { continue };
                    m.partitions += 1;
                    if m.partitions == 1 {
                        ctl.network(i)?.iter().for_each(|p| p.blackhole());
                    }
                }
            }
            let side = if victims.len() > ctl.cluster.addrs().len() / 2 {
                "majority"
            } else {
                "minority"
            };
            let fault_id = ctl.fault(format!("masters {victims:?} partitioned away ({side})"));
            note(&struck, &fault);
            ctl.sleep(*lasts).await;
            ctl.heal(fault_id);
            let mut all = mutex::lock(&masters);
            for &i in victims {
                let Some(m) = all.get_mut(i) else { continue };
                m.partitions = m.partitions.saturating_sub(1);
                if m.partitions == 0 {
                    for proxy in ctl.network(i)? {
                        proxy.heal();
                        if let Some((_, up, down, jitter)) = m.delay {
                            proxy.delay(up, down, jitter);
                        }
                    }
                }
            }
        }
        Action::Delay {
            masters: victims,
            up,
            down,
            jitter,
            lasts,
        } => {
            {
                let mut all = mutex::lock(&masters);
                for &i in victims {
                    let Some(m) = all.get_mut(i) else { continue };
                    m.delay = Some((id, *up, *down, *jitter));
                    if m.partitions == 0 {
                        ctl.network(i)?
                            .iter()
                            .for_each(|p| p.delay(*up, *down, *jitter));
                    }
                }
            }
            let fault_id = ctl.fault(format!("latency: {}", fault.action));
            note(&struck, &fault);
            ctl.sleep(*lasts).await;
            ctl.heal(fault_id);
            let mut all = mutex::lock(&masters);
            for &i in victims {
                let Some(m) = all.get_mut(i) else { continue };
                if m.delay.is_some_and(|(by, ..)| by == id) {
                    m.delay = None;
                    if m.partitions == 0 {
                        ctl.network(i)?
                            .iter()
                            .for_each(|p| p.delay(Duration::ZERO, Duration::ZERO, Duration::ZERO));
                    }
                }
            }
        }
        Action::Skew { .. } => {}
        Action::Bump {
            masters: victims,
            by_ms,
        } => {
            for &i in victims {
                let clock = {
                    let mut all = mutex::lock(&masters);
                    let Some(m) = all.get_mut(i) else { continue };
                    m.offset_ms += *by_ms as f64;
                    m.clock()
                };
                ctl.set_clock(i, clock).await?;
            }
            ctl.fault(format!("clock step: {}", fault.action));
            note(&struck, &fault);
        }
        Action::Strobe {
            master,
            by_ms,
            every,
            lasts,
        } => {
            let i = *master;
            if !claim_clock(&masters, i) {
                return Ok(());
            }
            let fault_id = ctl.fault(format!("clock strobe: {}", fault.action));
            note(&struck, &fault);
            let until = Instant::now() + *lasts;
            let mut flapped = false;
            while Instant::now() < until {
                flapped = !flapped;
                let clock = {
                    let all = mutex::lock(&masters);
                    let Some(m) = all.get(i) else { break };
                    let flap = if flapped { *by_ms as f64 } else { 0.0 };
                    clock(m.offset_ms + flap, m.rate)
                };
                ctl.set_clock(i, clock).await?;
                if !ctl.sleep(*every).await {
                    break;
                }
            }
            let clock = {
                let mut all = mutex::lock(&masters);
                let Some(m) = all.get_mut(i) else {
                    return Ok(());
                };
                m.clock_busy = false;
                m.clock()
            };
            ctl.set_clock(i, clock).await?;
            ctl.heal(fault_id);
        }
        Action::Rate {
            master,
            rate,
            lasts,
        } => {
            let i = *master;
            if !claim_clock(&masters, i) {
                return Ok(());
            }
            let clock = {
                let mut all = mutex::lock(&masters);
                let Some(m) = all.get_mut(i) else {
                    return Ok(());
                };
                let now = Instant::now();
                let here = m.displacement(now);
                m.rate = *rate;
                m.offset_ms = here - (rate - 1.0) * (now - m.started).as_secs_f64() * 1e3;
                m.clock()
            };
            ctl.set_clock(i, clock).await?;
            let fault_id = ctl.fault(format!("clock rate: {}", fault.action));
            note(&struck, &fault);
            ctl.sleep(*lasts).await;
            let clock = {
                let mut all = mutex::lock(&masters);
                let Some(m) = all.get_mut(i) else {
                    return Ok(());
                };
                let here = m.displacement(Instant::now());
                m.rate = 1.0;
                m.offset_ms = here;
                m.clock_busy = false;
                m.clock()
            };
            ctl.set_clock(i, clock).await?;
            ctl.heal(fault_id);
        }
    }
    Ok(())
}

/// Marks master `i`'s clock as taken by a rate or a strobe; `false` if it is taken already or
/// the master is down.
fn claim_clock(masters: &Masters, i: usize) -> bool {
    let mut all = mutex::lock(masters);
    match all.get_mut(i) {
        Some(m) if !m.clock_busy && !m.killed => {
            m.clock_busy = true;
            true
        }
        _ => false,
    }
}

fn note_as(struck: &Mutex<Vec<Struck>>, kind: FaultKind, description: &str) {
    mutex::lock(struck).push(Struck {
        kind,
        description: description.to_owned(),
    });
}

/// How many faults of each kind struck.
pub(super) fn by_kind(struck: &[Struck]) -> BTreeMap<FaultKind, usize> {
    let mut counts = BTreeMap::new();
    for s in struck {
        *counts.entry(s.kind).or_default() += 1;
    }
    counts
}

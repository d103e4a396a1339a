//! A run's configuration, drawn from its seed: the masters, the clients and what each does, and
//! the faults with the simulated instant each strikes at. A plan is a pure function of its seed,
//! and every fault it draws stays within the README's bounds (a master that restarts empty
//! stays down longer than any TTL, clocks run within the drift allowance), so that a run must
//! find no violation; a violation is a defect.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A run: who does what, and which faults strike when.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The seed everything here and in the run is drawn from.
    pub seed: u64,
    /// How many masters (3 or 5).
    pub masters: usize,
    /// How long the clients work, in simulated time.
    pub duration: Duration,
    /// The resources the clients contend for.
    pub resources: Vec<String>,
    /// The clients (one simulated process each).
    pub workers: Vec<WorkerPlan>,
    /// The faults, by the simulated time they strike at, in order.
    pub faults: Vec<(Duration, Fault)>,
    /// The network's own latency bound (turmoil's), each message drawn below it.
    pub max_latency: Duration,
    /// How far each master's clock runs ahead of the simulation's from the start (fencing
    /// plans: their spread stays below the fleet's fencing grace, rates included).
    pub clock_ahead: Vec<Duration>,
}

/// One client process.
#[derive(Clone, Debug)]
pub struct WorkerPlan {
    /// What kind of client.
    pub kind: WorkerKind,
    /// The resource it takes (an index into [`Plan::resources`]).
    pub resource: usize,
    /// The TTL it asks for.
    pub ttl: Duration,
    /// Its per-request timeout on each master.
    pub node_timeout: Duration,
    /// Its pause between retries.
    pub retry_delay: Duration,
    /// How long one acquire may wait.
    pub acquire_timeout: Duration,
    /// How it uses a lock it got.
    pub hold: Hold,
    /// Pause between one hold and the next attempt.
    pub idle: Duration,
    /// With fencing, the fencing grace it configures.
    pub fence_grace: Option<Duration>,
}

/// The kinds of client a run mixes on the same names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerKind {
    /// `Redlock::acquire`, extend, release.
    Mutex,
    /// `Redlock::acquire_as` under this owner id (shared with another worker: they take the
    /// lock over from each other, and their holds of one owner may overlap by design).
    Owner(String),
    /// A client written as every other Redlock client is: `SET NX PX`, compare-and-delete,
    /// compare-and-`PEXPIRE … GT`.
    Foreign,
}

/// How a client uses a lock it got.
#[derive(Clone, Debug, PartialEq)]
pub enum Hold {
    /// Works for this share of its validity, then releases.
    Share(f64),
    /// Works until the deadline the lock reports, to its last millisecond, then releases.
    ToTheDeadline,
    /// Extends (or renews) with `ttl` halfway to its deadline, `times` times in a row (a
    /// holder that keeps its lock alive), then works until the last deadline.
    Extend {
        /// The TTL of each extension.
        ttl: Duration,
        /// How many extensions.
        times: u32,
    },
    /// Works for this share of its validity, then walks away without releasing.
    Abandon(f64),
}

/// What can go wrong, each with its undo.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// A master crashes; it comes back after `down`, with its data (AOF) or empty.
    Crash {
        /// Which master.
        master: usize,
        /// Whether it keeps its data.
        keep_data: bool,
        /// How long it stays down.
        down: Duration,
    },
    /// A master fails over to a replica that lacks its writes of the last `lost`.
    LossyFailover {
        /// Which master.
        master: usize,
        /// How far behind the replica was.
        lost: Duration,
        /// How long the failover takes.
        down: Duration,
    },
    /// The clients and a master cannot reach each other for `heal_after`.
    Partition {
        /// Which master.
        master: usize,
        /// How long.
        heal_after: Duration,
    },
    /// Every connection a worker has open to a master holds its requests for `for_` (a stalled
    /// route): the worker gives up on it and connects again, and the held requests land late,
    /// after those of the new connection.
    HoldConnections {
        /// Which worker.
        worker: usize,
        /// Which master.
        master: usize,
        /// How long.
        for_: Duration,
    },
    /// From now on, the next time a master runs a takeover by one of the worker's attempts of
    /// the value of another worker, one that renews its locks, the worker's connections to
    /// every master hold their requests for `for_` from then on, as
    /// [`Fault::HoldConnections`] does. Held routes struck at the moment that matters: the
    /// attempt likely fails, its rollback lands late, perhaps after the key it took would have
    /// expired, while the lock it took the key from still renews.
    HoldAfterTakeover {
        /// Which worker.
        worker: usize,
        /// How long.
        for_: Duration,
    },
    /// A worker's link to a master gets these latencies from now on, each direction its own.
    Latency {
        /// Which worker.
        worker: usize,
        /// Which master.
        master: usize,
        /// Client to master.
        up: Duration,
        /// Master to client.
        down: Duration,
    },
    /// A master's clock runs at `rate` from now on (within the drift allowance).
    ClockRate {
        /// Which master.
        master: usize,
        /// Its rate.
        rate: f64,
    },
    /// A worker process crashes (its futures dropped where they stand) and a new one starts
    /// with the same configuration after `restart_after`.
    CrashWorker {
        /// Which worker.
        worker: usize,
        /// When its successor starts.
        restart_after: Duration,
    },
}

impl Fault {
    /// Whether the fault loses a master's writes (a restart empty, a lossy failover).
    fn loses_data(&self) -> bool {
        matches!(
            self,
            Fault::Crash {
                keep_data: false,
                ..
            } | Fault::LossyFailover { .. }
        )
    }
}

impl Plan {
    /// The plan of `seed`: `duration` of work.
    pub fn from_seed(seed: u64, duration: Duration) -> Plan {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // One plan in three is an owner's race: the owner's workers contend for one resource
        // with slow routes and long node timeouts, so that an attempt's requests land after
        // it lost and after the owner's next grant (what the takeovers must survive).
        if rng.random_bool(1.0 / 3.0) {
            return Plan::owner_race(seed, duration, &mut rng);
        }
        // One plan in four of the others fences: see [`Plan::fence`].
        let fenced = rng.random_bool(0.25);
        let masters = if rng.random_bool(0.6) { 5 } else { 3 };
        let resources: Vec<String> = (0..rng.random_range(1..=3))
            .map(|i| format!("r{i}"))
            .collect();
        let mut workers = Vec::new();
        let count = rng.random_range(3..=8);
        for i in 0..count {
            let kind = match rng.random_range(0..10) {
                0..=5 => WorkerKind::Mutex,
                6..=7 => WorkerKind::Owner(format!("owner-{}", i % 2)),
                _ => WorkerKind::Foreign,
            };
            workers.push(draw_worker(&mut rng, kind, resources.len()));
        }
        // Always one foreign client on the first resource beside the others, often enough
        // that what another library does to a key meets the line.
        if !workers.iter().any(|w| w.kind == WorkerKind::Foreign) && rng.random_bool(0.5) {
            workers.push(draw_worker(&mut rng, WorkerKind::Foreign, resources.len()));
        }
        let max_latency = Duration::from_micros(rng.random_range(200..=3_000));
        let faults = draw_faults(
            &mut rng,
            duration,
            masters,
            workers.len(),
            max_ttl(&workers),
        );
        let plan = Plan {
            seed,
            masters,
            duration,
            resources,
            workers,
            faults,
            max_latency,
            clock_ahead: vec![Duration::ZERO; masters],
        };
        if fenced {
            plan.fence(&mut rng)
        } else {
            plan
        }
    }

    /// This plan with fencing (the README's bounds for it): its `acquire` clients fenced with
    /// one grace for the fleet (1–1.5 s); in most of these plans every client pauses for half the
    /// grace to twice the grace between holds, so that names fall idle and counters lapse
    /// between holders; one master ahead of the others by up to the grace less what the
    /// masters' rates may add over the run (most often near that bound); and no fault that loses
    /// a master's data (fencing asks for AOF).
    fn fence(mut self, rng: &mut ChaCha8Rng) -> Plan {
        let grace = Duration::from_millis(rng.random_range(1_000..=1_500));
        let sparse = rng.random_bool(0.7);
        for w in &mut self.workers {
            if w.kind == WorkerKind::Mutex && rng.random_bool(0.8) {
                w.fence_grace = Some(grace);
            }
            if sparse {
                w.idle = Duration::from_millis(
                    rng.random_range(grace.as_millis() as u64 / 2..=2 * grace.as_millis() as u64),
                );
            }
        }
        // Two rates at the allowance's ends part by 0.8 % of the run.
        let rates = self.duration.mul_f64(0.008) + Duration::from_millis(10);
        let spread = grace.saturating_sub(rates).as_millis() as u64;
        let ahead = rng.random_range(spread / 2..spread.max(1));
        let first = rng.random_range(0..self.masters);
        // One master ahead, the others near the simulation's time: a quorum without it grants
        // by clocks up to `ahead` behind the fences it gave.
        self.clock_ahead = (0..self.masters)
            .map(|m| {
                if m == first {
                    Duration::from_millis(ahead)
                } else {
                    Duration::from_millis(rng.random_range(0..=ahead / 8))
                }
            })
            .collect();
        self.faults.retain(|(_, f)| !f.loses_data());
        self
    }

    /// An owner's race (see [`Plan::from_seed`]): three masters, one resource, two to four
    /// workers of one owner id beside one or two plain ones, node timeouts long enough to wait
    /// out slow routes, and more of the faults that make requests late.
    fn owner_race(seed: u64, duration: Duration, rng: &mut ChaCha8Rng) -> Plan {
        let mut workers = Vec::new();
        for _ in 0..rng.random_range(2..=4) {
            let mut w = draw_worker(rng, WorkerKind::Owner("owner-0".to_owned()), 1);
            // Long enough to wait out most slow routes: a reply read after the attempt lost
            // still comes back, and its takeover request may go out.
            w.node_timeout = Duration::from_millis(rng.random_range(20..=300));
            w.ttl = Duration::from_millis(rng.random_range(400..=1_500));
            if rng.random_bool(0.5) {
                w.hold = Hold::Extend {
                    ttl: Duration::from_millis(rng.random_range(400..=1_500)),
                    times: rng.random_range(2..=6),
                };
            }
            workers.push(w);
        }
        for _ in 0..rng.random_range(1..=2) {
            workers.push(draw_worker(rng, WorkerKind::Mutex, 1));
        }
        let mut faults = draw_faults(rng, duration, 3, workers.len(), max_ttl(&workers));
        // Slow routes, each from one worker to one master, sometimes longer than a request may
        // wait, and held connections.
        for _ in 0..rng.random_range(20..=80) {
            let at = Duration::from_millis(rng.random_range(0..duration.as_millis().max(1) as u64));
            let worker = rng.random_range(0..workers.len());
            let master = rng.random_range(0..3);
            let fault = if rng.random_bool(0.6) {
                Fault::Latency {
                    worker,
                    master,
                    up: Duration::from_micros(rng.random_range(0..=250_000)),
                    down: Duration::from_micros(rng.random_range(0..=60_000)),
                }
            } else {
                // Held sometimes longer than a TTL: a rollback that lands after the key it
                // took over would have expired.
                Fault::HoldConnections {
                    worker,
                    master,
                    for_: Duration::from_millis(rng.random_range(1..=2_000)),
                }
            };
            faults.push((at, fault));
        }
        // One race in four, drawn from a generator of its own, so that the races without it
        // stay as they were (in one in two, the late-win patch took 789 runs to find, not 374).
        let mut late = ChaCha8Rng::seed_from_u64(seed ^ LATE_ROLLBACK_STREAM);
        if late.random_bool(0.25) {
            late_rollbacks(&mut late, duration, &mut workers, &mut faults);
        }
        faults.sort_by_key(|(at, _)| *at);
        let max_latency = Duration::from_micros(rng.random_range(200..=3_000));
        // Two races in three fence: an attempt that won its quorum then fails for its fences
        // (a later attempt of the owner took a key it was granted before its raise), and its
        // requests still out must take nothing over from then on. Fencing asks for AOF.
        if rng.random_bool(2.0 / 3.0) {
            let grace = Duration::from_millis(rng.random_range(1_000..=1_500));
            for w in &mut workers {
                w.fence_grace = Some(grace);
            }
            faults.retain(|(_, f)| !f.loses_data());
        }
        Plan {
            seed,
            masters: 3,
            duration,
            resources: vec!["r0".to_owned()],
            workers,
            faults,
            max_latency,
            clock_ahead: vec![Duration::ZERO; 3],
        }
    }
}

/// Mixed into a seed for the draws of [`late_rollbacks`].
const LATE_ROLLBACK_STREAM: u64 = 0x6c61_7465_2d72_6f6c;

/// Turns an owner's race into one where an attempt's rollback lands after the key it took
/// over would have expired, while the lock it took the key from still renews: what the
/// renewal's keeping of a taken key (`keep_taken` in `lua/extend.lua`) is for. The owner's
/// workers take keys for a short TTL and renew what they win, often, for a longer one; their
/// requests go out on routes of different lengths (so that an attempt's first takeover lands
/// while its others are on the way); and a few of their routes are held the moment they take
/// over a key of a renewing lock, for longer than the key they wrote lives.
fn late_rollbacks(
    rng: &mut ChaCha8Rng,
    duration: Duration,
    workers: &mut [WorkerPlan],
    faults: &mut Vec<(Duration, Fault)>,
) {
    let owners: Vec<usize> = (0..workers.len())
        .filter(|&i| matches!(workers[i].kind, WorkerKind::Owner(_)))
        .collect();
    for &i in &owners {
        let w = &mut workers[i];
        w.ttl = Duration::from_millis(rng.random_range(150..=400));
        w.node_timeout = Duration::from_millis(rng.random_range(60..=300));
        w.hold = Hold::Extend {
            ttl: Duration::from_millis(rng.random_range(400..=900)),
            times: rng.random_range(8..=16),
        };
        for master in 0..3 {
            faults.push((
                Duration::ZERO,
                Fault::Latency {
                    worker: i,
                    master,
                    up: Duration::from_micros(rng.random_range(0..=30_000)),
                    down: Duration::from_micros(rng.random_range(0..=5_000)),
                },
            ));
        }
    }
    // A master that loses writes still stays down longer than any lease it granted lasts.
    let lossy_down = max_ttl(workers) + Duration::from_millis(50);
    for (_, fault) in faults.iter_mut() {
        if let Fault::Crash {
            keep_data: false,
            down,
            ..
        }
        | Fault::LossyFailover { down, .. } = fault
        {
            *down = (*down).max(lossy_down);
        }
    }
    for _ in 0..rng.random_range(2..=6) {
        let at = Duration::from_millis(rng.random_range(0..duration.as_millis().max(1) as u64));
        let worker = owners[rng.random_range(0..owners.len())];
        let for_ = Duration::from_millis(rng.random_range(500..=2_500));
        faults.push((at, Fault::HoldAfterTakeover { worker, for_ }));
    }
}

/// The longest TTL any worker gives a key, its extensions' included: a master that loses its
/// data stays down longer than that.
fn max_ttl(workers: &[WorkerPlan]) -> Duration {
    workers
        .iter()
        .map(|w| match w.hold {
            Hold::Extend { ttl, .. } => w.ttl.max(ttl),
            _ => w.ttl,
        })
        .max()
        .unwrap_or_default()
}

fn draw_worker(rng: &mut ChaCha8Rng, kind: WorkerKind, resources: usize) -> WorkerPlan {
    let ttl = Duration::from_millis(rng.random_range(120..=600));
    // The node timeout must leave the TTL most of its length (the library refuses a TTL not
    // above the drift allowance plus the node timeout).
    let node_timeout = Duration::from_millis(rng.random_range(5..=40));
    let hold = match rng.random_range(0..20) {
        0..=10 => Hold::Share(rng.random_range(0.0..0.2)),
        11..=13 => Hold::ToTheDeadline,
        14..=17 => Hold::Extend {
            ttl: Duration::from_millis(rng.random_range(120..=900)),
            times: rng.random_range(1..=4),
        },
        _ => Hold::Abandon(rng.random_range(0.0..0.5)),
    };
    WorkerPlan {
        kind,
        resource: rng.random_range(0..resources),
        ttl,
        node_timeout,
        retry_delay: Duration::from_millis(rng.random_range(5..=60)),
        acquire_timeout: Duration::from_millis(rng.random_range(0..=1_500)),
        hold,
        idle: Duration::from_millis(rng.random_range(0..=20)),
        fence_grace: None,
    }
}

fn draw_faults(
    rng: &mut ChaCha8Rng,
    duration: Duration,
    masters: usize,
    workers: usize,
    max_ttl: Duration,
) -> Vec<(Duration, Fault)> {
    let mut faults = Vec::new();
    let count = rng.random_range(4..=40);
    let span = duration.as_millis() as u64;
    // A master that loses writes stays down longer than any lease it granted lasts.
    let lossy_down = max_ttl + Duration::from_millis(50);
    for _ in 0..count {
        let at = Duration::from_millis(rng.random_range(0..span.max(1)));
        let master = rng.random_range(0..masters);
        let worker = rng.random_range(0..workers);
        let fault = match rng.random_range(0..100) {
            0..=11 => Fault::Crash {
                master,
                keep_data: true,
                down: Duration::from_millis(rng.random_range(1..=400)),
            },
            12..=19 => Fault::Crash {
                master,
                keep_data: false,
                down: lossy_down + Duration::from_millis(rng.random_range(0..=300)),
            },
            20..=25 => Fault::LossyFailover {
                master,
                lost: Duration::from_millis(rng.random_range(1..=200)),
                down: lossy_down + Duration::from_millis(rng.random_range(0..=300)),
            },
            26..=40 => Fault::Partition {
                master,
                heal_after: Duration::from_millis(rng.random_range(1..=800)),
            },
            41..=65 => Fault::HoldConnections {
                worker,
                master,
                for_: Duration::from_millis(rng.random_range(1..=1_000)),
            },
            66..=85 => Fault::Latency {
                worker,
                master,
                up: Duration::from_micros(rng.random_range(0..=30_000)),
                down: Duration::from_micros(rng.random_range(0..=30_000)),
            },
            86..=92 => Fault::ClockRate {
                master,
                // Within the drift allowance (1 % of the TTL plus 2 ms).
                rate: 1.0 + rng.random_range(-0.004..0.004),
            },
            _ => Fault::CrashWorker {
                worker,
                restart_after: Duration::from_millis(rng.random_range(0..=500)),
            },
        };
        faults.push((at, fault));
    }
    faults.sort_by_key(|(at, _)| *at);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_a_function_of_its_seed() {
        let a = Plan::from_seed(7, Duration::from_secs(5));
        let b = Plan::from_seed(7, Duration::from_secs(5));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let c = Plan::from_seed(8, Duration::from_secs(5));
        assert_ne!(format!("{a:?}"), format!("{c:?}"));
    }

    #[test]
    fn a_master_that_loses_writes_stays_down_longer_than_any_ttl() {
        for seed in 0..200 {
            let plan = Plan::from_seed(seed, Duration::from_secs(10));
            let max_ttl = max_ttl(&plan.workers);
            for (_, fault) in &plan.faults {
                if let Fault::Crash {
                    keep_data: false,
                    down,
                    ..
                }
                | Fault::LossyFailover { down, .. } = fault
                {
                    assert!(*down > max_ttl, "seed {seed}: {fault:?}");
                }
            }
        }
    }
}

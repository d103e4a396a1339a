//! What a comparison run measures: its settings, the cases of the report, and the plan of
//! measurements the chosen cases need.

use std::time::Duration;

use crate::support::{env_or, Kind};

/// The latency the proxy adds to one master, per round trip (half each way).
pub const SLOW_BY: Duration = Duration::from_millis(20);
/// Workers on the one resource of the contended case.
pub const CONTENDED_WORKERS: usize = 8;
/// How long a contended worker waits after its release before it tries again.
pub const CONTENDED_PAUSE: Duration = Duration::from_millis(1);
/// Workers on the one resource of the separate-clients case, each with its own client.
pub const SEPARATE_WORKERS: usize = 8;
/// Clients on the one resource of the many-clients case.
pub const MANY_CLIENTS: usize = 32;
/// OS processes of the multi-process variants of the separate-clients cases.
pub const SEPARATE_PROCESSES: usize = 4;
/// The work inside the critical section of the "1 ms of work" variants, in microseconds.
pub const SEPARATE_WORK_US: u32 = 1000;
/// Master counts of the scaling case.
pub const SCALING: [usize; 4] = [1, 3, 5, 7];
/// The master count of every case but scaling.
pub const NODES: usize = 5;

/// The settings of one run, from the environment (see the table in `main.rs`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The measured window of one measurement, seconds.
    pub secs: f64,
    /// Warm-up before each window, seconds.
    pub warmup: f64,
    /// Paused case: time between the pause and the window, seconds.
    pub settle: f64,
    /// How long in-flight cycles may run past a window, seconds.
    pub grace: f64,
    /// Interleaved runs.
    pub runs: usize,
    /// The "many workers" count.
    pub workers: usize,
    /// The cases to run, in the order given.
    pub cases: Vec<Case>,
}

impl Config {
    pub fn from_env() -> Config {
        let quick = env_or("QUORUMLOCK_BENCH_QUICK", 0u8) == 1;
        let cases: String = env_or("QUORUMLOCK_BENCH_CASES", "1,2,3,4,5,6,7,8".to_owned());
        Config {
            secs: env_or("QUORUMLOCK_BENCH_SECS", if quick { 0.5 } else { 2.0 }),
            warmup: env_or("QUORUMLOCK_BENCH_WARMUP", if quick { 0.2 } else { 0.5 }),
            settle: env_or("QUORUMLOCK_BENCH_SETTLE", if quick { 0.5 } else { 1.0 }),
            grace: env_or("QUORUMLOCK_BENCH_GRACE", 5.0),
            runs: env_or("QUORUMLOCK_BENCH_RUNS", if quick { 1 } else { 3 }),
            workers: env_or("QUORUMLOCK_BENCH_WORKERS", 32),
            cases: cases
                .split(',')
                .map(|c| {
                    c.trim()
                        .parse()
                        .ok()
                        .and_then(Case::numbered)
                        .unwrap_or_else(|| panic!("QUORUMLOCK_BENCH_CASES: numbers 1-8, not {c:?}"))
                })
                .collect(),
        }
    }

    pub fn has(&self, case: Case) -> bool {
        self.cases.contains(&case)
    }

    /// The worker counts every case but the contended one runs with: one, and many.
    pub fn worker_counts(&self) -> [usize; 2] {
        [1, self.workers]
    }

    /// [`worker_counts`](Config::worker_counts) without a repeat: with
    /// `QUORUMLOCK_BENCH_WORKERS=1` the report shows one worker once.
    pub fn distinct_worker_counts(&self) -> Vec<usize> {
        let [one, many] = self.worker_counts();
        if one == many {
            vec![one]
        } else {
            vec![one, many]
        }
    }

    /// The measurements of one run: what the chosen cases need, each once, in the order of
    /// [`Case::ALL`] (which keeps a case's own no-fault baseline ahead of it).
    pub fn plan(&self) -> Vec<Point> {
        let mut plan = Vec::new();
        for case in Case::ALL.into_iter().filter(|&c| self.has(c)) {
            for point in case.points(self.worker_counts()) {
                if !plan.contains(&point) {
                    plan.push(point);
                }
            }
        }
        plan
    }
}

/// One numbered section of the report, and what it needs measured. `QUORUMLOCK_BENCH_CASES`
/// chooses them by number.
///
/// To add a case: a variant here with its number and its [`points`](Case::points), a
/// [`Setup`] if none of the existing ones fits (and how `measure` runs it), and its section in
/// `report.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// 1: nothing wrong, five masters; also times the masters' reply spread.
    Uncontended,
    /// 2: one master of five slowed by [`SLOW_BY`].
    SlowMaster,
    /// 3: one master of five paused for the whole window.
    PausedMaster,
    /// 4: [`CONTENDED_WORKERS`] workers on one resource.
    Contended,
    /// 5: nothing wrong, over each master count of [`SCALING`].
    Scaling,
    /// 6: client and masters' CPU per cycle, from the uncontended measurements.
    ClientCpu,
    /// 7: [`SEPARATE_WORKERS`] workers on one resource, each with its own client, in one
    /// process and in [`SEPARATE_PROCESSES`] processes; empty critical section and 1 ms of work.
    SeparateClients,
    /// 8: as 7, with [`MANY_CLIENTS`] clients.
    ManyClients,
}

impl Case {
    /// Every case, in the order the plan measures them.
    pub const ALL: [Case; 8] = [
        Case::Uncontended,
        Case::SlowMaster,
        Case::PausedMaster,
        Case::Contended,
        Case::Scaling,
        Case::ClientCpu,
        Case::SeparateClients,
        Case::ManyClients,
    ];

    /// The case's number in the report and in `QUORUMLOCK_BENCH_CASES`.
    pub fn number(self) -> u8 {
        match self {
            Case::Uncontended => 1,
            Case::SlowMaster => 2,
            Case::PausedMaster => 3,
            Case::Contended => 4,
            Case::Scaling => 5,
            Case::ClientCpu => 6,
            Case::SeparateClients => 7,
            Case::ManyClients => 8,
        }
    }

    /// The case numbered `number`, if any.
    pub fn numbered(number: u8) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.number() == number)
    }

    /// The measurements this case reports on, for the worker counts `[one, many]`. A fault
    /// case also needs the same workers without the fault, its own baseline.
    pub fn points(self, worker_counts: [usize; 2]) -> Vec<Point> {
        let each = |setup: Setup, nodes: usize| {
            worker_counts.map(|workers| Point {
                setup,
                nodes,
                workers,
            })
        };
        match self {
            Case::Uncontended | Case::ClientCpu => each(Setup::Healthy, NODES).to_vec(),
            Case::SlowMaster => [each(Setup::Healthy, NODES), each(Setup::Slow, NODES)].concat(),
            Case::PausedMaster => {
                [each(Setup::Healthy, NODES), each(Setup::Paused, NODES)].concat()
            }
            Case::Contended => vec![Point {
                setup: Setup::Contended,
                nodes: NODES,
                workers: CONTENDED_WORKERS,
            }],
            // The five-master point first: the other cases measure it too.
            Case::Scaling => std::iter::once(NODES)
                .chain(SCALING.into_iter().filter(|&n| n != NODES))
                .flat_map(|n| each(Setup::Healthy, n))
                .collect(),
            Case::SeparateClients => Setup::separate_variants()
                .map(|setup| Point {
                    setup,
                    nodes: NODES,
                    workers: SEPARATE_WORKERS,
                })
                .to_vec(),
            Case::ManyClients => Setup::separate_variants()
                .map(|setup| Point {
                    setup,
                    nodes: NODES,
                    workers: MANY_CLIENTS,
                })
                .to_vec(),
        }
    }

    /// The worker count of a separate-clients case.
    pub fn separate_workers(self) -> Option<usize> {
        match self {
            Case::SeparateClients => Some(SEPARATE_WORKERS),
            Case::ManyClients => Some(MANY_CLIENTS),
            _ => None,
        }
    }
}

/// What one measurement runs against: the state of the masters, and whether the workers share
/// one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setup {
    /// Nothing wrong; each worker on a resource of its own.
    Healthy,
    /// Master 0 behind a proxy adding [`SLOW_BY`].
    Slow,
    /// Master 0 paused with `SIGSTOP` during the window.
    Paused,
    /// Every worker on one resource, pausing [`CONTENDED_PAUSE`] after each release.
    Contended,
    /// Every worker on one resource with a client of its own, spread over `processes` OS
    /// processes of this bench binary, holding the lock for `work_us` microseconds (asleep) and
    /// trying again at once after each release.
    Separate { processes: usize, work_us: u32 },
}

impl Setup {
    /// The clients measured in this setup. The raw floor has no way to wait for a lock, so it
    /// sits out contention.
    pub fn kinds(self) -> &'static [Kind] {
        match self {
            Setup::Contended | Setup::Separate { .. } => &[Kind::Quorumlock, Kind::Rslock],
            // The bare early-quorum client is the reference of the healthy cases only.
            Setup::Healthy => &Kind::WITH_BARE,
            _ => &Kind::ALL,
        }
    }

    /// The four variants of a separate-clients case: one process and [`SEPARATE_PROCESSES`],
    /// each with an empty critical section and with [`SEPARATE_WORK_US`] of work.
    pub fn separate_variants() -> [Setup; 4] {
        [
            Setup::Separate {
                processes: 1,
                work_us: 0,
            },
            Setup::Separate {
                processes: 1,
                work_us: SEPARATE_WORK_US,
            },
            Setup::Separate {
                processes: SEPARATE_PROCESSES,
                work_us: 0,
            },
            Setup::Separate {
                processes: SEPARATE_PROCESSES,
                work_us: SEPARATE_WORK_US,
            },
        ]
    }
}

/// One measurement of the plan, whichever client runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Point {
    pub setup: Setup,
    /// How many masters, the first `nodes` of those started.
    pub nodes: usize,
    pub workers: usize,
}

impl Point {
    /// This point, measured with `kind`.
    pub fn with(self, kind: Kind) -> Key {
        Key {
            setup: self.setup,
            nodes: self.nodes,
            workers: self.workers,
            kind,
        }
    }
}

/// What a measurement's results are filed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub setup: Setup,
    pub nodes: usize,
    pub workers: usize,
    pub kind: Kind,
}

impl Key {
    pub fn new(setup: Setup, nodes: usize, workers: usize, kind: Kind) -> Key {
        Key {
            setup,
            nodes,
            workers,
            kind,
        }
    }
}

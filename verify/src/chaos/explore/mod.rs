//! The explorer: chaos that draws its configuration, not only its schedule, from the seed.
//!
//! Where a [`Scenario`](super::Scenario) runs one fixed configuration under one fault pattern,
//! an exploration draws everything from its seed ([`Plan::draw`]): three or five masters
//! (`valkey-server` under libfaketime, so that their clocks can be set), with or without AOF;
//! clients each configured on their own — TTLs of 1–30 s mixed on one resource, node timeout,
//! retry delay and jitter, drift factor, fencing grace down to its least (1 s), how long they
//! wait in line, how they extend (to other TTLs than their own), how long they hold and pause —
//! using quorumlock's mutex (fenced or not, under owner ids or not), rslock's lock on the same
//! names, a semaphore, a read-write lock and an election; and a schedule of overlapping faults:
//! kills (masters back from their AOF) or restarts empty, pauses, partitions and latency
//! through the proxies, and clock faults — skew, bump, strobe, rate.
//!
//! The clients are the chaos suite's own workloads ([`Locks`](super::locks),
//! [`SharedSemaphore`](super::semaphore), [`SharedRwLock`](super::rwlock),
//! [`Board`](super::election)) and rslock's ([`foreign`]), run side by side by the engine
//! through a [`Mix`](super::mix), and everything goes into one history, checked by the one
//! checker ([`History::check`](quorumlock_testkit::History::check)): no two validity windows overlap,
//! foreign holders' counted; fences and terms strictly increase; a semaphore never exceeds its
//! permits; no writer beside anyone; never two leaders; and the witnesses and registers. Beside
//! it, the line's liveness ([`liveness`]): quorumlock's mutex clients wait in line without
//! spinning, each attempt counted against the calls, wake-ups and polls that allow it.
//!
//! Every fault is judged against the bounds the README states ([`bounds`]): a plan that is
//! not a negative control stays within them, and must end with 0 violations; a
//! [`Control`] adds one fault beyond them, and the explorer must report the violation it
//! causes. [`shrink`] re-runs a failing plan with one kind of fault taken away at a time and
//! keeps what still fails.
//!
//! Nothing here prints; `examples/explore.rs` prints the plan first, then the table.
//!
//! # Layout
//!
//! * `plan` — [`Plan`], what a run does, and its parts; drawn by `config` (the clients and
//!   their tunings) and `schedule` (the faults), each from a random source of its own;
//! * `bounds` — each fault judged against the README's bounds, and [`Guarantee::of`] a
//!   violation;
//! * `driver` — the fault driver that runs a schedule through the engine's `Ctl`;
//! * `foreign` — rslock's workload;
//! * `liveness` — the line's no-spinning check, client by client;
//! * this module — [`run`], [`Explored`] and its [`Verdict`], [`shrink`].

mod bounds;
mod config;
mod draw;
mod driver;
mod foreign;
mod liveness;
mod plan;
mod schedule;

pub use bounds::{judge, Guarantee, Judged};
pub use plan::{Control, FaultKind, Options, Plan};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::election::{Board, ELECTION};
use super::engine;
use super::locks::{self, Locks};
use super::mix::{Group, Mix, Part};
use super::reentrant::Ledger;
use super::rwlock::{SharedRwLock, RW_LOCK};
use super::semaphore::{slot_name, SharedSemaphore};
use super::setup::{Setup, Tuning};
use super::workload::Workload;
use crate::mutex;
use driver::Struck;
use plan::{Primitive, Role};
use quorumlock_testkit::{OpKind, Report};

/// Environment variable naming the `valkey-server` binary the explorer's masters run (they need
/// one that runs under libfaketime; see [`quorumlock_testkit::clock`]).
pub const VALKEY_SERVER_ENV: &str = "QUORUMLOCK_VALKEY_SERVER";

/// The `valkey-server` to run: [`VALKEY_SERVER_ENV`], else `target/valkey/valkey-server` in
/// the current directory or in the workspace (where `scripts/ensure-valkey-server.sh` puts it).
///
/// # Errors
///
/// [`io::ErrorKind::NotFound`] naming where it looked, and how to get one.
pub fn valkey_server() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os(VALKEY_SERVER_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates = [
        PathBuf::from("target/valkey/valkey-server"),
        workspace.join("target/valkey/valkey-server"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no valkey-server at {}: run scripts/ensure-valkey-server.sh (make explore \
                     does), or set {VALKEY_SERVER_ENV}",
                    candidates
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            )
        })
}

/// How a run ended, against the bounds its faults kept to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Within the bounds, no violation.
    Clean,
    /// A violation of a guarantee whose bounds every fault kept to: a defect.
    Failed,
    /// A negative control, and the checker reported the violation its fault causes.
    Caught,
    /// A negative control, and no violation was seen: the run proves nothing.
    Missed,
    /// Not a control, yet a fault went beyond a guarantee's bounds, and that guarantee (only)
    /// was violated.
    Beyond,
}

impl Verdict {
    /// Whether the run is what it should be (a clean run, or a control caught).
    pub fn ok(self) -> bool {
        matches!(self, Verdict::Clean | Verdict::Caught)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Clean => "ok",
            Verdict::Failed => "FAILED",
            Verdict::Caught => "caught",
            Verdict::Missed => "MISSED",
            Verdict::Beyond => "beyond",
        })
    }
}

/// What one exploration found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Explored {
    /// The plan's seed.
    pub seed: u64,
    /// The plan's one-line summary.
    pub summary: String,
    /// The negative control it was, if one.
    pub control: Option<Control>,
    /// The kinds taken away from the plan.
    pub removed: BTreeSet<FaultKind>,
    /// Successful acquisitions (every primitive, rslock's included) ...
    pub acquisitions: usize,
    /// ... of which rslock's.
    pub foreign: usize,
    /// Failed acquire calls.
    pub failures: usize,
    /// Faults that struck, by kind ...
    pub faults: BTreeMap<FaultKind, usize>,
    /// ... and each of them, in the order they struck.
    pub struck: Vec<(FaultKind, String)>,
    /// Each fault judged against the bounds.
    pub judged: Vec<Judged>,
    /// Violations, by the guarantee they break.
    pub violations: BTreeMap<Guarantee, usize>,
    /// The verdict.
    pub verdict: Verdict,
    /// The checker's report.
    pub report: Report,
    /// The line's liveness: a summary, then each count past its bound (empty without
    /// quorumlock mutex clients).
    pub liveness: Vec<String>,
    /// Lock keys seen without any TTL.
    pub immortal_keys: Vec<String>,
    /// Wall time, servers included.
    pub elapsed: Duration,
}

impl Explored {
    /// Every violation.
    pub fn violation_count(&self) -> usize {
        self.violations.values().sum()
    }

    /// The guarantees some fault went beyond the bounds of, with the first reason.
    pub fn beyond(&self) -> BTreeMap<Guarantee, String> {
        let mut beyond = BTreeMap::new();
        for judged in &self.judged {
            for (g, why) in &judged.beyond {
                beyond
                    .entry(*g)
                    .or_insert_with(|| format!("{}: {why}", judged.kind));
            }
        }
        beyond
    }

    /// The header of the table [`row`](Explored::row) prints.
    pub fn header() -> String {
        format!(
            "{:<20} {:<92} {:>6} {:<46} {:<16} {}",
            "seed", "configuration", "acq", "faults by kind", "violations", "verdict"
        )
    }

    /// One line: seed, configuration, acquisitions, faults by kind, violations, verdict.
    pub fn row(&self) -> String {
        let faults = if self.faults.is_empty() {
            "none".to_owned()
        } else {
            self.faults
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let violations = match self.violation_count() {
            0 => "0".to_owned(),
            n => format!(
                "{n} ({})",
                self.violations
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(g, n)| format!("{g} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let bounds = if self.beyond().is_empty() {
            "within bounds"
        } else {
            "beyond bounds"
        };
        format!(
            "{:<20} {:<92} {:>6} {:<46} {:<16} {} ({bounds})",
            format!("{:#x}", self.seed),
            self.summary,
            self.acquisitions,
            faults,
            violations,
            self.verdict
        )
    }
}

impl fmt::Display for Explored {
    /// The row, the bounds gone beyond, then the checker's report.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", Self::header())?;
        writeln!(f, "{}", self.row())?;
        writeln!(
            f,
            "  {} acquisitions ({} rslock), {} failed acquires, {:.1}s",
            self.acquisitions,
            self.foreign,
            self.failures,
            self.elapsed.as_secs_f64()
        )?;
        for (g, why) in self.beyond() {
            writeln!(f, "  beyond the bounds of {g}: {why}")?;
        }
        for line in &self.liveness {
            writeln!(f, "  {line}")?;
        }
        if !self.immortal_keys.is_empty() {
            writeln!(f, "  keys without a TTL: {}", self.immortal_keys.join("; "))?;
        }
        write!(f, "{}", self.report)
    }
}

/// Runs `plan` over fresh masters running `server`, and judges what happened.
///
/// # Errors
///
/// When a server, a proxy or a fault cannot be started; never for what the clients observe.
pub async fn run(plan: &Plan, server: &Path) -> io::Result<Explored> {
    let plan = Arc::new(plan.clone());
    let (groups, parts, foreign_clients, waiting) = workloads(&plan);
    let mix = Arc::new(Mix::new(groups, parts));
    let setup = Setup {
        masters: plan.masters,
        aof: plan.aof,
        server: Some(server.to_owned()),
        clocks: true,
        proxied: true,
        clients: mix.clients(),
        resources: 0,
        // What the key monitor lets pass: a clock set back makes a key's TTL read longer.
        ttl: plan.longest_ttl() + Duration::from_secs(10),
        target: usize::MAX,
        time_limit: plan.duration,
        ..Setup::default()
    };
    let struck: Arc<Mutex<Vec<Struck>>> = Arc::default();
    let workload: Arc<dyn Workload> = mix;
    let ran = engine::run(setup, workload, plan.seed, {
        let (plan, struck) = (Arc::clone(&plan), Arc::clone(&struck));
        move |ctl| driver::drive(ctl, plan, struck)
    })
    .await?;

    let report = ran.history.check();
    let ops = ran.history.ops();
    let foreign = ops
        .iter()
        .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
        .filter(|op| is_mutex_name(&op.resource) && foreign_clients.contains(&op.client))
        .count();
    let judged = judge(&plan);
    let mut violations: BTreeMap<Guarantee, usize> = BTreeMap::new();
    for v in &report.violations {
        *violations.entry(Guarantee::of(v)).or_default() += 1;
    }
    let spinning = waiting.map(|(locks, clients, others)| {
        let counted = locks.observed().counted_by_client;
        liveness::waiters_do_not_spin(&ops, is_mutex_name, &clients, &others, &counted)
    });
    if let Some(spinning) = spinning.as_ref().filter(|s| !s.violations.is_empty()) {
        violations.insert(Guarantee::Liveness, spinning.violations.len());
    }
    let verdict = verdict(&plan, &judged, &violations);
    let struck = std::mem::take(&mut *mutex::lock(&struck));
    Ok(Explored {
        seed: plan.seed,
        summary: plan.summary(),
        control: plan.control,
        removed: plan.removed.clone(),
        acquisitions: report.acquires.ok,
        foreign,
        failures: report.acquires.failed,
        faults: driver::by_kind(&struck),
        struck: struck
            .into_iter()
            .map(|s| (s.kind, s.description))
            .collect(),
        judged,
        violations,
        verdict,
        immortal_keys: ran
            .immortal_keys
            .iter()
            .filter(|k| k.ends_with("pttl -1"))
            .cloned()
            .collect(),
        report,
        liveness: spinning
            .map(|s| std::iter::once(s.summary).chain(s.violations).collect())
            .unwrap_or_default(),
        elapsed: ran.elapsed,
    })
}

/// Whether `name` is one of the mutex group's (`r<i>`).
fn is_mutex_name(name: &str) -> bool {
    name.strip_prefix('r')
        .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// The verdict on a run of `plan` whose faults were `judged` and whose history broke each
/// guarantee `violations` times. Fences and terms order holders one after another: where a fault
/// is beyond exclusion's bounds, two may hold at once, and their fences have no order to keep
/// (an election's term check orders every leader by when it was elected, which only two
/// leaderships at once can make go backwards), so fencing is judged within its bounds only
/// where exclusion's hold too.
fn verdict(plan: &Plan, judged: &[Judged], violations: &BTreeMap<Guarantee, usize>) -> Verdict {
    let within = |g: Guarantee| {
        judged.iter().all(|j| {
            j.within_for(g) && (g != Guarantee::Fencing || j.within_for(Guarantee::Exclusion))
        })
    };
    let broken: Vec<Guarantee> = violations
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(g, _)| *g)
        .collect();
    if broken.iter().any(|g| within(*g)) {
        return Verdict::Failed;
    }
    match (plan.control, broken.is_empty()) {
        (Some(_), false) => Verdict::Caught,
        (Some(_), true) => Verdict::Missed,
        (None, false) => Verdict::Beyond,
        (None, true) => Verdict::Clean,
    }
}

/// quorumlock's mutex workload, its clients' numbers within the mutex group with their
/// tunings, and the reentrant clients' (who wait in the same lines): for the line's liveness.
type Waiting = (Arc<Locks>, Vec<(usize, Tuning)>, Vec<(usize, Tuning)>);

/// The engine's groups and parts for `plan`'s clients, the rslock clients' numbers within the
/// mutex group, and quorumlock's mutex workload with its clients.
fn workloads(plan: &Plan) -> (Vec<Group>, Vec<Part>, BTreeSet<usize>, Option<Waiting>) {
    let mut groups = Vec::new();
    let mut parts = Vec::new();
    let mut foreign = BTreeSet::new();
    let mut waiting = None;
    for (g, group) in plan.groups.iter().enumerate() {
        let tunings: Vec<_> = group.clients.iter().map(|(_, t)| t.clone()).collect();
        let setup = Setup {
            clients: tunings.len(),
            resources: group.resources,
            ttl: tunings.iter().map(|t| t.ttl).max().unwrap_or_default(),
            fencing: tunings.iter().any(|t| t.fencing),
            retry_delay: tunings
                .iter()
                .map(|t| t.retry_delay)
                .max()
                .unwrap_or_default(),
            retry_jitter: tunings
                .iter()
                .map(|t| t.retry_jitter)
                .max()
                .unwrap_or_default(),
            tunings,
            ..Setup::default()
        };
        let role_range = |role: Role| {
            let at: Vec<usize> = (0..group.clients.len())
                .filter(|c| group.clients[*c].0 == role)
                .collect();
            at.first().copied().unwrap_or(0)..at.last().map_or(0, |l| l + 1)
        };
        let (lock_name, workloads): (Box<dyn Fn(usize) -> String + Send + Sync>, Vec<_>) =
            match group.primitive {
                Primitive::Mutex => {
                    let locks = Arc::new(Locks::new(locks::Config {
                        stale_chance: 0.01,
                        crash_chance: 0.01,
                        ..locks::Config::default()
                    }));
                    let tuned = |want: Role| {
                        let clients = group.clients.iter().enumerate();
                        clients
                            .filter(|(_, (role, _))| *role == want)
                            .map(|(c, (_, tuning))| (c, tuning.clone()))
                            .collect()
                    };
                    waiting = Some((
                        Arc::clone(&locks),
                        tuned(Role::Mutex),
                        tuned(Role::Reentrant),
                    ));
                    let ours: Arc<dyn Workload> = locks;
                    let theirs: Arc<dyn Workload> = Arc::new(foreign::Rslock);
                    let rslock = role_range(Role::Rslock);
                    foreign.extend(rslock.clone());
                    let nested: Arc<dyn Workload> = Arc::new(Ledger::default());
                    (
                        Box::new(Setup::resource),
                        vec![
                            (role_range(Role::Mutex), ours),
                            (rslock, theirs),
                            (role_range(Role::Reentrant), nested),
                        ],
                    )
                }
                Primitive::Semaphore { permits } => {
                    let sem: Arc<dyn Workload> = Arc::new(SharedSemaphore::new(permits));
                    (Box::new(slot_name), vec![(0..group.clients.len(), sem)])
                }
                Primitive::RwLock => {
                    let rw: Arc<dyn Workload> = Arc::new(SharedRwLock::default());
                    (
                        Box::new(|_| RW_LOCK.to_owned()),
                        vec![(0..group.clients.len(), rw)],
                    )
                }
                Primitive::Election => {
                    let board: Arc<dyn Workload> = Arc::new(Board::default());
                    (
                        Box::new(|_| ELECTION.to_owned()),
                        vec![(0..group.clients.len(), board)],
                    )
                }
            };
        for (clients, workload) in workloads {
            if !clients.is_empty() {
                parts.push(Part {
                    group: g,
                    clients,
                    workload,
                });
            }
        }
        groups.push(Group { setup, lock_name });
    }
    (groups, parts, foreign, waiting)
}

/// One step of [`shrink`]: the kinds taken away, and what the run found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Step {
    /// Taken away in this run.
    pub removed: BTreeSet<FaultKind>,
    /// Whether it still failed.
    pub still_fails: bool,
    /// What it found.
    pub explored: Explored,
}

/// What shrinking found: the smallest set of kinds that still fails, and every run it made.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Shrunk {
    /// The kinds of fault the plan injected.
    pub kinds: BTreeSet<FaultKind>,
    /// The fewest that still failed.
    pub smallest: BTreeSet<FaultKind>,
    /// Every re-run, in order.
    pub steps: Vec<Step>,
}

/// Re-runs `plan` with one kind of fault taken away at a time (the seed's configuration and
/// the rest of its schedule unchanged), keeping each removal after which `fails` still holds,
/// and returns the smallest set of kinds that still failed. `progress` sees every step as it
/// ends. Timing on a real machine is not seeded: a re-run follows the same schedule, not the
/// same interleaving, so a removal that passes is tried twice before its kind is kept, and a
/// kind kept may still be one whose removal only happened to pass.
///
/// # Errors
///
/// As [`run`].
pub async fn shrink(
    plan: &Plan,
    server: &Path,
    fails: impl Fn(&Explored) -> bool,
    progress: impl FnMut(&Step),
) -> io::Result<Shrunk> {
    shrink_with(plan, |plan| run_owned(plan, server), fails, progress).await
}

async fn run_owned(plan: Plan, server: &Path) -> io::Result<Explored> {
    run(&plan, server).await
}

/// [`shrink`], each re-run made by `run`.
async fn shrink_with<F, Fut>(
    plan: &Plan,
    mut run: F,
    fails: impl Fn(&Explored) -> bool,
    mut progress: impl FnMut(&Step),
) -> io::Result<Shrunk>
where
    F: FnMut(Plan) -> Fut,
    Fut: std::future::Future<Output = io::Result<Explored>>,
{
    let kinds = plan.kinds();
    let mut removed: BTreeSet<FaultKind> = plan.removed().clone();
    let mut steps = Vec::new();
    for kind in &kinds {
        let mut trial = removed.clone();
        trial.insert(*kind);
        let mut explored = run(plan.without(&trial)).await?;
        let mut still_fails = fails(&explored);
        if !still_fails {
            // Once more before the kind is kept: a pass may be the interleaving's luck.
            explored = run(plan.without(&trial)).await?;
            still_fails = fails(&explored);
        }
        if still_fails {
            removed = trial.clone();
        }
        let step = Step {
            removed: trial,
            still_fails,
            explored,
        };
        progress(&step);
        steps.push(step);
    }
    let smallest = kinds.difference(&removed).copied().collect();
    Ok(Shrunk {
        kinds,
        smallest,
        steps,
    })
}

/// A fresh seed, from the clock and the process.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = nanos ^ (u64::from(std::process::id()) << 32);
    // splitmix64, so that seeds drawn a moment apart differ in every bit.
    let mut z = mixed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run of `plan` would find if exactly the plans that still have every kind of
    /// `needed` failed.
    fn outcome(plan: &Plan, needed: &BTreeSet<FaultKind>) -> Explored {
        let fails = needed.is_subset(&plan.kinds());
        Explored {
            seed: plan.seed,
            summary: plan.summary(),
            control: plan.control,
            removed: plan.removed.clone(),
            acquisitions: 1,
            foreign: 0,
            failures: 0,
            faults: BTreeMap::new(),
            struck: Vec::new(),
            judged: Vec::new(),
            violations: BTreeMap::from([(Guarantee::Exclusion, usize::from(fails))]),
            verdict: if fails {
                Verdict::Failed
            } else {
                Verdict::Clean
            },
            report: Report::new(std::time::Instant::now(), &[], Vec::new()),
            liveness: Vec::new(),
            immortal_keys: Vec::new(),
            elapsed: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn shrinking_keeps_exactly_the_kinds_the_failure_needs() {
        // A plan with many kinds of fault.
        let plan = (0..)
            .map(|seed| Plan::draw(seed, &Options::default()))
            .find(|p| p.kinds().len() >= 5)
            .unwrap();
        let kinds: Vec<FaultKind> = plan.kinds().into_iter().collect();
        let needed = BTreeSet::from([kinds[1], kinds[3]]);
        let mut seen = 0;
        let shrunk = shrink_with(
            &plan,
            |p| {
                let explored = outcome(&p, &needed);
                async move { Ok(explored) }
            },
            |e| e.violation_count() > 0,
            |_| seen += 1,
        )
        .await
        .unwrap();
        assert_eq!(shrunk.smallest, needed);
        assert_eq!(shrunk.steps.len(), kinds.len());
        assert_eq!(seen, kinds.len());
        assert_eq!(shrunk.kinds, plan.kinds());
    }

    #[test]
    fn the_verdict_holds_violations_against_the_bounds_of_their_guarantee() {
        let plan = Plan::draw(1, &Options::default());
        let within = vec![Judged {
            kind: FaultKind::Pause,
            description: String::new(),
            beyond: Vec::new(),
        }];
        let skewed = vec![Judged {
            kind: FaultKind::Skew,
            description: String::new(),
            beyond: vec![(Guarantee::Fencing, "apart".into())],
        }];
        let none = BTreeMap::new();
        let fences = BTreeMap::from([(Guarantee::Fencing, 2)]);
        let overlaps = BTreeMap::from([(Guarantee::Exclusion, 1)]);
        let ordinary = Plan {
            control: None,
            ..plan.clone()
        };
        let control = Plan {
            control: Some(Control::SkewBeyondGrace),
            ..plan
        };
        assert_eq!(verdict(&ordinary, &within, &none), Verdict::Clean);
        assert_eq!(verdict(&ordinary, &within, &fences), Verdict::Failed);
        assert_eq!(verdict(&ordinary, &skewed, &fences), Verdict::Beyond);
        assert_eq!(verdict(&control, &skewed, &fences), Verdict::Caught);
        assert_eq!(verdict(&control, &skewed, &none), Verdict::Missed);
        // A skew beyond the grace excuses broken fences, not two holders.
        assert_eq!(verdict(&control, &skewed, &overlaps), Verdict::Failed);
        // A jump beyond the drift allowance excuses two holders, and the order of their fences.
        let jumped = vec![Judged {
            kind: FaultKind::Bump,
            description: String::new(),
            beyond: vec![(Guarantee::Exclusion, "a step forward".into())],
        }];
        let jump = Plan {
            control: Some(Control::ClockJump),
            ..ordinary.clone()
        };
        let both = BTreeMap::from([(Guarantee::Exclusion, 6), (Guarantee::Fencing, 1)]);
        assert_eq!(verdict(&jump, &jumped, &both), Verdict::Caught);
        assert_eq!(verdict(&ordinary, &jumped, &fences), Verdict::Beyond);
    }

    #[test]
    fn mutex_names_are_r_and_a_number() {
        assert!(is_mutex_name("r0") && is_mutex_name("r12"));
        assert!(!is_mutex_name("rw") && !is_mutex_name("r") && !is_mutex_name("leader"));
    }
}

//! One run: the masters as turmoil hosts running the simulated master, the clients as one
//! host (every client a task of its own, a process with its own connections), the fault
//! schedule applied between the simulation's steps, then the history checked and digested.

use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use quorumlock_sim::{lock, shared, Clock, Master, SharedMaster, Snapshot};
use quorumlock_testkit::{check_fence_order, check_overlaps, Op, OpKind, Outcome, Violation};

use super::net::{self, SharedLinks};
use super::owner_keys::{self, Executed, LostKey};
use super::plan::{Fault, Hold, Plan};
use super::quorum::{self, KeyLog, QuorumLoss};
use super::takeovers::{late_takeovers, LateTakeover};
use super::workload::{self, Ops};

/// The simulation's epoch: a fixed wall-clock time, so that a run reads the same times.
const EPOCH_SECS: u64 = 1_800_000_000;

/// What one run saw.
#[derive(Debug)]
pub struct RunReport {
    /// The plan's seed.
    pub seed: u64,
    /// Every operation the clients recorded, in the order they ended.
    pub ops: Vec<Op>,
    /// The exclusion violations found (overlapping validities of two holders).
    pub violations: Vec<Violation>,
    /// The locks whose value was on fewer than a quorum of masters while they were valid.
    pub quorum_losses: Vec<QuorumLoss>,
    /// The takeovers named by attempts of an owner already decided.
    pub late_takeovers: Vec<LateTakeover>,
    /// The keys of owners' locks that held another value while the lock's lease there lasted.
    pub lost_keys: Vec<LostKey>,
    /// A digest of the history: two runs of one seed must print the same.
    pub digest: u64,
    /// Successful acquisitions.
    pub acquisitions: usize,
    /// How many faults struck.
    pub faults: usize,
    /// The simulated time the run took.
    pub simulated: Duration,
    /// Whether the simulation itself failed (a host's error), and why.
    pub error: Option<String>,
    /// Where virtual time started, to print the history's times as offsets.
    origin: std::time::Instant,
}

impl RunReport {
    /// The first violation (an overlap, else a lock short of its quorum, else a late
    /// takeover, else an owner's key lost), its times in ms from the run's start.
    pub fn first_violation(&self) -> Option<String> {
        self.violations
            .first()
            .map(|v| v.display_from(self.origin).to_string())
            .or_else(|| self.quorum_losses.first().map(ToString::to_string))
            .or_else(|| self.late_takeovers.first().map(ToString::to_string))
            .or_else(|| self.lost_keys.first().map(ToString::to_string))
    }

    /// Whether a checker found a violation (an overlap, a fence out of order, a lock short of
    /// its quorum, a late takeover, an owner's key lost).
    pub fn violated(&self) -> bool {
        self.violation_count() > 0
    }

    /// How many violations the checkers found.
    pub fn violation_count(&self) -> usize {
        self.violations.len()
            + self.quorum_losses.len()
            + self.late_takeovers.len()
            + self.lost_keys.len()
    }

    /// Whether the run found nothing wrong.
    pub fn is_clean(&self) -> bool {
        !self.violated() && self.error.is_none()
    }

    /// The history around the first violation: every operation on its resource (on every
    /// resource, for a late takeover) within a second of it, times in ms from the run's start.
    pub fn around_first_violation(&self) -> String {
        let mut out = String::new();
        let heading = |out: &mut String, what: &str, lines: &[String]| {
            let _ = writeln!(out, "{what}:");
            for line in lines {
                let _ = writeln!(out, "  {line}");
            }
            let _ = writeln!(out, "the clients:");
        };
        let (resource, from) = match (
            self.violations.first(),
            self.quorum_losses.first(),
            self.late_takeovers.first(),
        ) {
            (Some(Violation::Overlap { resource, from, .. }), _, _) => (Some(resource), *from),
            (
                Some(Violation::FenceOrder {
                    resource, later, ..
                }),
                _,
                _,
            ) => (Some(resource), later.start),
            (_, Some(loss), _) => {
                let what = "the key on the masters, from the lock's attempt on";
                heading(&mut out, what, &loss.changes);
                (Some(&loss.resource), self.origin + loss.at)
            }
            (_, _, Some(late)) => {
                let what = "the attempt's requests, as they left its client";
                heading(&mut out, what, &late.requests);
                (None, self.origin + late.sent)
            }
            _ => match self.lost_keys.first() {
                Some(lost) => {
                    let what = "the owners' commands on the key, as the master ran them";
                    heading(&mut out, what, &lost.commands);
                    (None, self.origin + lost.at)
                }
                None => return out,
            },
        };
        let window = Duration::from_secs(1);
        for op in &self.ops {
            if resource.is_some_and(|r| op.resource != *r)
                || op.end + window < from
                || op.start > from + window
            {
                continue;
            }
            let ms = |t: std::time::Instant| {
                t.saturating_duration_since(self.origin).as_secs_f64() * 1e3
            };
            let outcome = match &op.outcome {
                Outcome::Ok {
                    valid_until: Some(v),
                } => format!("ok, valid until {:.3}", ms(*v)),
                Outcome::Ok { valid_until: None } => "ok".to_owned(),
                Outcome::Failed { reason } => format!("failed: {reason}"),
                _ => "?".to_owned(),
            };
            let _ = writeln!(
                out,
                "  client {:>4} {} {:>7} {:>10.3}..{:>10.3} ms  {outcome}",
                op.client,
                op.token_fingerprint(),
                op.kind,
                ms(op.start),
                ms(op.end)
            );
        }
        out
    }
}

/// Runs `plan` to its end.
pub fn run(plan: &Plan) -> RunReport {
    let plan = Rc::new(plan.clone());
    let masters: Vec<SharedMaster> = plan.clock_ahead.iter().map(|&a| new_master(a)).collect();
    let executed: Executed = Arc::default();
    for (i, master) in masters.iter().enumerate() {
        lock(master).set_monitor(Some(owner_keys::monitor(i, executed.clone())));
    }
    let links: SharedLinks = Arc::default();
    let ops: Ops = Ops::default();
    let origin: Rc<std::cell::Cell<Option<std::time::Instant>>> = Rc::default();

    quorumlock::simulation::reset();
    quorumlock::simulation::seed_rng(plan.seed);
    quorumlock::simulation::set_wall_clock(|| {
        UNIX_EPOCH + Duration::from_secs(EPOCH_SECS) + turmoil::sim_elapsed().unwrap_or_default()
    });
    {
        let links = links.clone();
        quorumlock::simulation::set_connector(move |host, _port| {
            let (links, host) = (links.clone(), host.to_owned());
            Box::pin(async move {
                let stream = net::connect(links, host).await?;
                Ok(Box::new(stream) as Box<dyn quorumlock::simulation::Stream>)
            })
        });
    }
    workload::LINKS.with(|l| *l.borrow_mut() = Some(links.clone()));
    workload::reset();

    let mut sim = turmoil::Builder::new()
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_SECS))
        .simulation_duration(plan.duration * 4 + Duration::from_secs(30))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_micros(50))
        .max_message_latency(plan.max_latency)
        .rng_seed(plan.seed)
        .build();

    for (i, master) in masters.iter().enumerate() {
        let master = master.clone();
        sim.host(net::master_host(i), move || serve_master(master.clone()));
    }
    {
        let (plan, ops, origin) = (plan.clone(), ops.clone(), origin.clone());
        sim.client("clients", async move {
            clients(plan, ops, origin).await;
            Ok(())
        });
    }

    DRIVER_TIME.with(|t| t.set(Duration::ZERO));
    let mut faults = Faults::new(&plan, masters.clone(), links.clone(), executed.clone());
    let mut error = None;
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => faults.strike(&mut sim),
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let simulated = sim.elapsed();
    drop(sim);
    let owner_requests = net::locked(&links).owner_requests().to_vec();
    quorumlock::simulation::reset();
    workload::LINKS.with(|l| *l.borrow_mut() = None);

    let ops = std::mem::take(&mut *ops.borrow_mut());
    let ended = with_owner_releases(&plan, &ops);
    let violations = violations_of(&plan, &ended);
    let origin = origin.get().unwrap_or_else(std::time::Instant::now);
    let quorum_losses = quorum::quorum_losses(&plan, &ended, &faults.log, origin);
    let late_takeovers = late_takeovers(&owner_requests, &ops, origin);
    let executed = std::mem::take(&mut *net::locked(&executed));
    let lost_keys = owner_keys::lost_keys(&executed, &ended, &faults.log, origin);
    RunReport {
        seed: plan.seed,
        acquisitions: ops
            .iter()
            .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
            .count(),
        digest: digest(&ops, origin),
        ops,
        violations,
        quorum_losses,
        late_takeovers,
        lost_keys,
        faults: faults.struck,
        simulated,
        error,
        origin,
    }
}

/// The history with the releases an owner's locks saw: the workers of one owner id are one
/// holder (one client in the history), and a release by one of them ends, too, the owner's
/// other locks of that resource that come before it (stamped earlier, see `later` in
/// `lua/line.lua`) and whose attempts started before the release. An attempt takes the lock
/// over from every earlier one of its owner (`Redlock::acquire_as`: two live processes with one
/// owner id take the lock from each other), even from one that returns after it: such an
/// attempt's hold is lost, as its extend would find, and the release frees the keys it counted.
/// A lock stamped later than the releasing one keeps its hold: the release must leave its keys
/// alone.
fn with_owner_releases(plan: &Plan, ops: &[Op]) -> Vec<Op> {
    let owners = owners(plan);
    let mut all: Vec<Op> = ops.to_vec();
    for release in ops
        .iter()
        .filter(|op| op.kind == OpKind::Release && owners.contains(&op.client))
    {
        let granted = ops
            .iter()
            .any(|op| op.kind == OpKind::Acquire && op.succeeded() && op.token == release.token);
        if !granted {
            continue;
        }
        let earlier: std::collections::BTreeSet<&str> = ops
            .iter()
            .filter(|op| {
                op.client == release.client
                    && op.resource == release.resource
                    && op.token != release.token
                    && op.kind == OpKind::Acquire
                    && op.succeeded()
                    && op.start < release.end
                    && op.token.get(3..35) < release.token.get(3..35)
            })
            .map(|op| op.token.as_str())
            .collect();
        for token in earlier {
            all.push(Op {
                token: token.to_owned(),
                ..release.clone()
            });
        }
    }
    all.sort_by_key(|op| op.end);
    all
}

/// The history clients of the owners' workers.
fn owners(plan: &Plan) -> Vec<usize> {
    (0..plan.workers.len())
        .map(|i| workload::client_of(plan, i))
        .filter(|c| *c >= 1000)
        .collect()
}

/// The checker: overlapping validities of two holders of one resource in `ended` (see
/// [`with_owner_releases`]), and fencing tokens that do not increase in real-time order. An
/// owner's workers take the lock over from each other by design: their overlaps are not counted.
fn violations_of(plan: &Plan, ended: &[Op]) -> Vec<Violation> {
    let owners = owners(plan);
    check_overlaps(ended)
        .into_iter()
        .chain(check_fence_order(ended))
        .filter(|v| match v {
            Violation::Overlap { first, second, .. } => {
                !(first.client == second.client && owners.contains(&first.client))
            }
            _ => true,
        })
        .collect()
}

/// FNV-1a over the history: each operation's client, kind, resource, token, times (ns from
/// the run's start) and outcome.
fn digest(ops: &[Op], origin: std::time::Instant) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    let ns = |t: std::time::Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    for op in ops {
        eat(&(op.client as u64).to_le_bytes());
        eat(op.kind.to_string().as_bytes());
        eat(op.resource.as_bytes());
        eat(op.token.as_bytes());
        eat(&ns(op.start).to_le_bytes());
        eat(&ns(op.end).to_le_bytes());
        match &op.outcome {
            Outcome::Ok { valid_until } => {
                eat(b"ok");
                eat(&valid_until.map(ns).unwrap_or(0).to_le_bytes());
            }
            Outcome::Failed { reason } => {
                eat(b"failed");
                eat(reason.as_bytes());
            }
            _ => eat(b"?"),
        }
        eat(&op.fence.unwrap_or(0).to_le_bytes());
    }
    hash
}

thread_local! {
    /// The simulation's time as the driver last saw it, for a master's clock read between steps
    /// (a fault that changes its rate): turmoil answers only inside a host, and a clock that read
    /// zero there would fold a jump into its offset.
    static DRIVER_TIME: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// A master whose clock runs `ahead` of the simulation's.
fn new_master(ahead: Duration) -> SharedMaster {
    let mut clock = Clock::new(|| {
        let elapsed = turmoil::sim_elapsed().unwrap_or_else(|| DRIVER_TIME.with(|t| t.get()));
        Duration::from_secs(EPOCH_SECS) + elapsed
    });
    clock.set_offset(ahead.as_nanos() as i128);
    match Master::new(clock) {
        Ok(master) => shared(master),
        // The embedded Lua starts the same way every time; a failure here is the harness's.
        Err(e) => unreachable_master(&e.to_string()),
    }
}

#[allow(clippy::panic)]
fn unreachable_master(why: &str) -> SharedMaster {
    panic!("the simulated master cannot start: {why}")
}

/// A master host: accepts connections and serves each on the master's state, which outlives
/// the host (a crash that keeps data, or not, is applied to it by [`Faults`]).
async fn serve_master(master: SharedMaster) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", net::PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let master = master.clone();
        tokio::task::spawn_local(async move {
            let _ = quorumlock_sim::serve(master, stream).await;
        });
    }
}

/// The clients' host: every worker, crashed and restarted as the plan says.
async fn clients(
    plan: Rc<Plan>,
    ops: Ops,
    origin: Rc<std::cell::Cell<Option<std::time::Instant>>>,
) {
    let start = workload::now();
    origin.set(Some(start));
    let end = start + plan.duration;
    let local = tokio::task::LocalSet::new();
    let held = workload::Held::default();
    local
        .run_until(async move {
            let mut handles = Vec::new();
            for i in 0..plan.workers.len() {
                handles.push(tokio::task::spawn_local(workload::run_worker(
                    plan.clone(),
                    i,
                    end,
                    ops.clone(),
                    held.clone(),
                )));
            }
            // Worker crashes: the task is aborted where it stands, a new one starts later.
            for (at, fault) in plan.faults.iter() {
                if let Fault::CrashWorker {
                    worker,
                    restart_after,
                } = fault
                {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(start + *at)).await;
                    if let Some(h) = handles.get(*worker) {
                        h.abort();
                        workload::crashed(
                            *worker,
                            workload::client_of(&plan, *worker),
                            &held,
                            &ops,
                        );
                    }
                    tokio::time::sleep(*restart_after).await;
                    if workload::now() < end {
                        handles[*worker] = tokio::task::spawn_local(workload::run_worker(
                            plan.clone(),
                            *worker,
                            end,
                            ops.clone(),
                            held.clone(),
                        ));
                    }
                }
            }
            for h in handles {
                let _ = h.await;
            }
            // Let the last releases and their stragglers land.
            tokio::time::sleep(Duration::from_secs(2)).await;
        })
        .await;
}

/// How far back a lossy failover may go: the masters' snapshots are kept this long.
const SNAPSHOTS_KEPT: Duration = Duration::from_millis(300);

/// The masters' and the network's faults, applied between the simulation's steps.
struct Faults {
    schedule: Vec<(Duration, Fault)>,
    next: usize,
    masters: Vec<SharedMaster>,
    links: SharedLinks,
    /// Undo actions: at this simulated time, do this.
    undo: Vec<(Duration, Undo)>,
    /// Each master's state a while ago, for a lossy failover.
    snapshots: Vec<Vec<(Duration, Snapshot)>>,
    struck: usize,
    /// The resources' keys on every master, read after every step (see [`quorum`]).
    log: KeyLog,
    /// The owners' commands the masters ran, and how many of them were looked at.
    executed: Executed,
    seen: usize,
    /// Held routes waiting for their worker's next takeover: (worker, how long).
    armed: Vec<(usize, Duration)>,
    /// The workers that renew their locks.
    renewing: Vec<usize>,
}

enum Undo {
    Restart(usize),
    Heal(usize),
}

impl Faults {
    fn new(
        plan: &Plan,
        masters: Vec<SharedMaster>,
        links: SharedLinks,
        executed: Executed,
    ) -> Faults {
        Faults {
            schedule: plan.faults.clone(),
            next: 0,
            snapshots: vec![Vec::new(); masters.len()],
            masters,
            links,
            undo: Vec::new(),
            struck: 0,
            log: KeyLog::new(plan),
            executed,
            seen: 0,
            armed: Vec::new(),
            renewing: (plan.workers.iter().enumerate())
                .filter(|(_, w)| matches!(w.hold, Hold::Extend { .. }))
                .map(|(i, _)| i)
                .collect(),
        }
    }

    fn strike(&mut self, sim: &mut turmoil::Sim<'_>) {
        let now = sim.elapsed();
        DRIVER_TIME.with(|t| t.set(now));
        // Keep a snapshot of each master every 10 ms for the last 300 ms, once a lossy
        // failover of it is that close (no other fault reads them, and copying every keyspace
        // so often is a good part of a run's time).
        if now.as_millis() % 10 == 0 {
            for (i, m) in self.masters.iter().enumerate() {
                let snaps = &mut self.snapshots[i];
                if self.schedule[self.next..]
                    .iter()
                    .take_while(|(at, _)| at.saturating_sub(now) <= SNAPSHOTS_KEPT)
                    .any(|(_, f)| matches!(f, Fault::LossyFailover { master, .. } if *master == i))
                {
                    snaps.push((now, lock(m).snapshot()));
                }
                snaps.retain(|(t, _)| now.saturating_sub(*t) <= SNAPSHOTS_KEPT);
            }
        }
        let mut i = 0;
        while i < self.undo.len() {
            if self.undo[i].0 <= now {
                let (_, undo) = self.undo.remove(i);
                match undo {
                    Undo::Restart(m) => sim.bounce(net::master_host(m)),
                    Undo::Heal(m) => sim.repair("clients", net::master_host(m)),
                }
            } else {
                i += 1;
            }
        }
        while let Some((at, fault)) = self.schedule.get(self.next) {
            if *at > now {
                break;
            }
            let fault = fault.clone();
            self.next += 1;
            self.struck += 1;
            self.apply(sim, now, fault);
        }
        self.hold_after_takeovers(now);
        self.log.observe(now, &self.masters);
    }

    /// Holds the routes armed by [`Fault::HoldAfterTakeover`] whose worker took over the value
    /// of a renewing worker on a master since the last step: its attempt may still be waiting
    /// for the other masters (and now waits longer), so its rollback, if it fails, is held too.
    fn hold_after_takeovers(&mut self, now: Duration) {
        let executed = net::locked(&self.executed);
        let new = executed.get(self.seen..).unwrap_or_default();
        self.seen = executed.len();
        if self.armed.is_empty() {
            return;
        }
        let mut links = net::locked(&self.links);
        let worker_of = |links: &net::Links, token: &[u8]| {
            let requests = links.owner_requests();
            requests.iter().find(|r| r.token == token).map(|r| r.worker)
        };
        for c in new {
            let Some(named) = c.taken_over() else {
                continue;
            };
            let (worker, from) = (worker_of(&links, &c.token), worker_of(&links, named));
            let renews = from.is_some_and(|w| self.renewing.contains(&w));
            let Some(worker) = worker.filter(|w| renews && Some(*w) != from) else {
                continue;
            };
            let Some(i) = self.armed.iter().position(|(w, _)| *w == worker) else {
                continue;
            };
            let (_, for_) = self.armed.remove(i);
            for master in 0..self.masters.len() {
                links.hold(worker, master, now + for_);
            }
        }
    }

    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, now: Duration, fault: Fault) {
        match fault {
            Fault::Crash {
                master,
                keep_data,
                down,
            } => {
                if !sim.is_host_running(net::master_host(master)) {
                    return;
                }
                sim.crash(net::master_host(master));
                lock(&self.masters[master]).crash(keep_data);
                if !keep_data {
                    self.log.data_lost(now, master);
                }
                self.undo.push((now + down, Undo::Restart(master)));
            }
            Fault::LossyFailover { master, lost, down } => {
                if !sim.is_host_running(net::master_host(master)) {
                    return;
                }
                sim.crash(net::master_host(master));
                let snapshot = self.snapshots[master]
                    .iter()
                    .rev()
                    .find(|(t, _)| now.saturating_sub(*t) >= lost)
                    .map(|(_, s)| s.clone());
                let mut m = lock(&self.masters[master]);
                match snapshot {
                    Some(s) => m.restore_from(&s),
                    None => m.crash(false),
                }
                drop(m);
                self.log.data_lost(now, master);
                self.undo.push((now + down, Undo::Restart(master)));
            }
            Fault::Partition { master, heal_after } => {
                sim.partition("clients", net::master_host(master));
                self.undo.push((now + heal_after, Undo::Heal(master)));
            }
            Fault::HoldConnections {
                worker,
                master,
                for_,
            } => {
                if let Ok(mut links) = self.links.lock() {
                    links.hold(worker, master, now + for_);
                }
            }
            Fault::HoldAfterTakeover { worker, for_ } => self.armed.push((worker, for_)),
            Fault::Latency {
                worker,
                master,
                up,
                down,
            } => {
                if let Ok(mut links) = self.links.lock() {
                    links.set_latency(worker, master, up, down);
                }
            }
            Fault::ClockRate { master, rate } => {
                lock(&self.masters[master]).clock_mut().set_rate(rate);
            }
            Fault::CrashWorker { .. } => {
                // Applied inside the clients' host, which owns the workers' tasks.
            }
        }
    }
}

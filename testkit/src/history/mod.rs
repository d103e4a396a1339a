//! Recording what chaos-test clients did, and checking it afterwards.
//!
//! A chaos test runs client tasks that contend for locks while faults are injected. Each client
//! records every acquire / extend / release attempt as an [`Op`] in a shared [`History`]; the fault
//! driver records each fault with [`History::fault`] / [`History::heal`]. At the end
//! [`History::check`] runs every checker and returns a [`Report`] whose `Display` is meant to be
//! printed as the test's failure message.
//!
//! Two kinds of evidence are checked:
//!
//! * **Protocol level**, from the clients' own timestamps and reported validities:
//!   [`check_overlaps`] (two holders' leases on one resource never overlap),
//!   [`check_fence_order`] (fencing tokens increase in real-time order); for a semaphore,
//!   [`check_max_holders`] (never more holders of its permits at once than it has permits); for a
//!   read-write lock, [`check_rw_exclusion`] (a writer's lease never overlaps a reader's); for an
//!   election, [`check_term_order`] (terms grow in the order leaders were elected) and
//!   [`check_leader_reads`] (a quorum read of the leader names one that led during the read);
//!   after a lock's last hold is released, [`check_left_behind`] (no master that confirmed the
//!   release still holds the lock).
//! * **Effect level**, from witnesses the clients call inside their critical sections, which trust
//!   no client timestamp: [`OccupancyWitness`] (never two holders inside at once; never more than
//!   a semaphore's permits, [made with a capacity](OccupancyWitness::with_capacity)),
//!   [`ReadWriteWitness`] (never a writer inside with anybody else),
//!   [`LostUpdateRegister`] (a read–sleep–write counter that loses updates when two holders
//!   interleave) and [`FencedRegister`] (storage that rejects stale fencing tokens).
//!
//! Everything here is plain data and `std` synchronisation; nothing talks to Redis. Lock tokens are
//! never printed: `Debug`, `Display` and the report show a [`TokenFingerprint`] instead.
//!
//! # Layout
//!
//! * this module — the [`History`] recorder;
//! * `record` — what is recorded: [`Op`], [`Fault`] and their parts;
//! * `checks` — the protocol-level checkers;
//! * `capacity` — the semaphore checker, [`check_max_holders`];
//! * `rw` — the read-write lock checker and witness, [`check_rw_exclusion`] and
//!   [`ReadWriteWitness`];
//! * `election` — the election checkers, [`check_term_order`] and [`check_leader_reads`];
//! * `leftover` — the leak checker, [`check_left_behind`];
//! * `witness` — the effect-level witnesses;
//! * `violation` — [`Violation`], what every checker and witness reports;
//! * `report` — [`Report`], the verdict on a whole history.

mod capacity;
mod checks;
mod election;
mod leftover;
mod record;
mod report;
mod rw;
#[cfg(test)]
mod testing;
mod violation;
mod witness;

pub use capacity::{check_max_holders, is_permit_of, peak_holders, PermitLease};
pub use checks::{check_fence_order, check_overlaps, Acquisition, Lease};
pub use election::{check_leader_reads, check_term_order, LeaderRead};
pub use leftover::{check_left_behind, ReleaseAudit};
pub use record::{Fault, FaultId, Op, OpKind, Outcome, Releasing, TokenFingerprint};
pub use report::{OpCounts, Report};
pub use rw::{
    check_rw_exclusion, peak_readers, readers_of, Access, ReadWriteGuard, ReadWriteWitness,
    READERS_SUFFIX,
};
pub use violation::Violation;
pub use witness::{
    FencedCounts, FencedRegister, LostUpdateRegister, OccupancyGuard, OccupancyWitness, Occupant,
    Stale,
};

use std::sync::{Arc, Mutex};
use std::time::Instant;

// A recorder must keep working (and keep its evidence) when one client task panics.
use crate::mutex::lock;

/// A thread-safe recorder of operations and faults, shared by the client tasks of one chaos run.
///
/// Cheap to clone: every clone records into the same history. It remembers the [`Instant`] it was
/// created at (its [`origin`](History::origin)); the report prints times as offsets from it.
///
/// # Example
///
/// ```
/// use quorumlock_testkit::{History, Op, OpKind, Outcome};
/// use std::time::{Duration, Instant};
///
/// let history = History::new();
/// let witness = history.occupancy_witness("orders:42");
///
/// // A client task:
/// let start = Instant::now();
/// // ... acquire the lock with a 1 s TTL; the library reported 990 ms of validity ...
/// let valid_until = start + Duration::from_millis(990);
/// history.record(Op {
///     client: 0,
///     resource: "orders:42".into(),
///     token: "3f1c0a9e-secret".into(),
///     kind: OpKind::Acquire,
///     start,
///     end: Instant::now(),
///     outcome: Outcome::Ok { valid_until: Some(valid_until) },
///     fence: Some(1),
/// });
/// {
///     let _inside = witness.enter(0);
///     // ... the critical section ...
/// }
///
/// // The fault driver:
/// let paused = history.fault("node 2 paused");
/// history.heal(paused);
///
/// let report = history.check();
/// assert!(report.is_clean(), "{report}");
/// ```
#[derive(Clone, Debug)]
pub struct History {
    origin: Instant,
    inner: Arc<Mutex<Recorded>>,
}

#[derive(Debug, Default)]
struct Recorded {
    ops: Vec<Op>,
    faults: Vec<Fault>,
    witnesses: Vec<Witness>,
    /// Semaphores whose permits [`check_max_holders`] counts: name and permits.
    semaphores: Vec<(String, usize)>,
    /// Read-write locks [`check_rw_exclusion`] checks.
    rw_locks: Vec<String>,
    /// Elections [`check_term_order`] and [`check_leader_reads`] check.
    elections: Vec<String>,
    /// Quorum reads of elections' leaders.
    leader_reads: Vec<LeaderRead>,
    /// What the masters held just after releases.
    audits: Vec<ReleaseAudit>,
}

/// A witness created through a [`History`], so that [`History::check`] includes its verdict.
#[derive(Clone, Debug)]
enum Witness {
    Occupancy(OccupancyWitness),
    ReadWrite(ReadWriteWitness),
    LostUpdate(LostUpdateRegister),
    Fenced(FencedRegister),
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            inner: Arc::new(Mutex::new(Recorded::default())),
        }
    }

    /// When this history was created; the report prints every time as an offset from it.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Records one finished operation (successful or not).
    pub fn record(&self, op: Op) {
        lock(&self.inner).ops.push(op);
    }

    /// Records that a fault starts now (for example `"node 2 paused"`) and returns its id, to be
    /// passed to [`heal`](History::heal) when the fault ends. A fault never healed lasts until the
    /// end of the run.
    pub fn fault(&self, description: impl Into<String>) -> FaultId {
        let start = Instant::now();
        let mut recorded = lock(&self.inner);
        let id = FaultId(recorded.faults.len());
        recorded.faults.push(Fault {
            id,
            description: description.into(),
            start,
            end: None,
        });
        id
    }

    /// Records that the fault `id` ends now. Healing a fault twice keeps the first end; an id from
    /// another history is ignored.
    pub fn heal(&self, id: FaultId) {
        let now = Instant::now();
        if let Some(fault) = lock(&self.inner).faults.get_mut(id.0) {
            fault.end.get_or_insert(now);
        }
    }

    /// A copy of every operation recorded so far, in recording order.
    pub fn ops(&self) -> Vec<Op> {
        lock(&self.inner).ops.clone()
    }

    /// A copy of every fault recorded so far, in the order they started.
    pub fn faults(&self) -> Vec<Fault> {
        lock(&self.inner).faults.clone()
    }

    /// A new [`OccupancyWitness`] for `resource` whose violations [`check`](History::check) reports.
    pub fn occupancy_witness(&self, resource: impl Into<String>) -> OccupancyWitness {
        let witness = OccupancyWitness::new(resource);
        self.include(Witness::Occupancy(witness.clone()));
        witness
    }

    /// A new [`OccupancyWitness`] for the semaphore `resource`, which admits `capacity` clients
    /// at once (see [`OccupancyWitness::with_capacity`]); [`check`](History::check) reports its
    /// violations.
    pub fn capacity_witness(
        &self,
        resource: impl Into<String>,
        capacity: usize,
    ) -> OccupancyWitness {
        let witness = OccupancyWitness::with_capacity(resource, capacity);
        self.include(Witness::Occupancy(witness.clone()));
        witness
    }

    /// Has [`check`](History::check) run [`check_max_holders`] on the semaphore `semaphore` with
    /// `permits` permits: over the ops on its slots (`<semaphore>:permit:<i>`) and on its name.
    pub fn watch_semaphore(&self, semaphore: impl Into<String>, permits: usize) {
        lock(&self.inner)
            .semaphores
            .push((semaphore.into(), permits));
    }

    /// Has [`check`](History::check) treat `resource` as a read-write lock, its writers recorded
    /// under its name and its readers under [`readers_of`] it: readers are left out of
    /// [`check_overlaps`] (they share the lock), and [`check_rw_exclusion`] keeps writers apart
    /// from readers.
    pub fn watch_rw_lock(&self, resource: impl Into<String>) {
        lock(&self.inner).rw_locks.push(resource.into());
    }

    /// A new [`ReadWriteWitness`] for the read-write lock `resource`, whose violations
    /// [`check`](History::check) reports.
    pub fn read_write_witness(&self, resource: impl Into<String>) -> ReadWriteWitness {
        let witness = ReadWriteWitness::new(resource);
        self.include(Witness::ReadWrite(witness.clone()));
        witness
    }

    /// Has [`check`](History::check) run [`check_term_order`] on the election `name`, and
    /// [`check_leader_reads`] on the reads of it [recorded](History::record_leader_read).
    pub fn watch_election(&self, name: impl Into<String>) {
        lock(&self.inner).elections.push(name.into());
    }

    /// Records one finished quorum read of an election's leader.
    pub fn record_leader_read(&self, read: LeaderRead) {
        lock(&self.inner).leader_reads.push(read);
    }

    /// A copy of every leader read recorded so far, in recording order.
    pub fn leader_reads(&self) -> Vec<LeaderRead> {
        lock(&self.inner).leader_reads.clone()
    }

    /// Records what the masters held just after a lock's last hold was released;
    /// [`check`](History::check) runs [`check_left_behind`] on every audit.
    pub fn record_audit(&self, audit: ReleaseAudit) {
        lock(&self.inner).audits.push(audit);
    }

    /// A copy of every release audit recorded so far, in recording order.
    pub fn audits(&self) -> Vec<ReleaseAudit> {
        lock(&self.inner).audits.clone()
    }

    /// A new [`LostUpdateRegister`] for `resource`; [`check`](History::check) runs
    /// [`LostUpdateRegister::check`] on it with its own [`commits`](LostUpdateRegister::commits)
    /// as the expected count.
    pub fn lost_update_register(&self, resource: impl Into<String>) -> LostUpdateRegister {
        let register = LostUpdateRegister::new(resource);
        self.include(Witness::LostUpdate(register.clone()));
        register
    }

    /// A new [`FencedRegister`] for `resource`; [`check`](History::check) reports its violations
    /// and the report counts its accepted and rejected writes.
    pub fn fenced_register(&self, resource: impl Into<String>) -> FencedRegister {
        let register = FencedRegister::new(resource);
        self.include(Witness::Fenced(register.clone()));
        register
    }

    /// Has [`check`](History::check) include `witness`'s verdict.
    fn include(&self, witness: Witness) {
        lock(&self.inner).witnesses.push(witness);
    }

    /// Runs every checker over what has been recorded so far — [`check_overlaps`] (readers of
    /// [watched read-write locks](History::watch_rw_lock) left out), [`check_fence_order`],
    /// [`check_max_holders`] on every [watched semaphore](History::watch_semaphore),
    /// [`check_rw_exclusion`] on every watched read-write lock, [`check_term_order`] and
    /// [`check_leader_reads`] on every [watched election](History::watch_election),
    /// [`check_left_behind`] on every [release audit](History::record_audit), and the
    /// witnesses created through this history — and returns the report.
    pub fn check(&self) -> Report {
        let recorded = {
            let recorded = lock(&self.inner);
            Recorded {
                ops: recorded.ops.clone(),
                faults: recorded.faults.clone(),
                witnesses: recorded.witnesses.clone(),
                semaphores: recorded.semaphores.clone(),
                rw_locks: recorded.rw_locks.clone(),
                elections: recorded.elections.clone(),
                leader_reads: recorded.leader_reads.clone(),
                audits: recorded.audits.clone(),
            }
        };
        let ops = &recorded.ops;
        let mut report = Report::new(self.origin, ops, recorded.faults);
        let shared: Vec<String> = recorded.rw_locks.iter().map(|r| readers_of(r)).collect();
        let exclusive: Vec<Op> = ops
            .iter()
            .filter(|op| !shared.contains(&op.resource))
            .cloned()
            .collect();
        report.add_violations(check_overlaps(&exclusive));
        report.add_violations(check_fence_order(ops));
        for (semaphore, permits) in &recorded.semaphores {
            report.add_violations(check_max_holders(semaphore, ops, *permits));
        }
        report.add_violations(check_left_behind(&recorded.audits));
        for resource in &recorded.rw_locks {
            report.add_violations(check_rw_exclusion(resource, ops));
        }
        for election in &recorded.elections {
            report.add_violations(check_term_order(election, ops));
            report.add_violations(check_leader_reads(election, ops, &recorded.leader_reads));
        }
        for witness in &recorded.witnesses {
            match witness {
                Witness::Occupancy(witness) => report.add_violations(witness.violations()),
                Witness::ReadWrite(witness) => report.add_violations(witness.violations()),
                Witness::LostUpdate(register) => {
                    report.add_violations(register.check(register.commits()));
                }
                Witness::Fenced(register) => {
                    let totals = register.totals();
                    let entry = report
                        .fenced_writes
                        .entry(register.resource().to_owned())
                        .or_default();
                    entry.accepted += totals.accepted;
                    entry.rejected += totals.rejected;
                    report.add_violations(register.violations());
                }
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{failed, Clock};
    use super::*;
    use std::time::Duration;

    #[test]
    fn report_counts_ops_and_includes_witnesses_made_by_the_history() {
        let history = History::new();
        let c = Clock(history.origin());
        history.record(c.acquire(0, "tok-a", (0, 5), 100, Some(1)));
        history.record(c.extend(0, "tok-a", (30, 35), 130));
        history.record(c.release(0, "tok-a", (50, 55)));
        history.record(failed(c.acquire(1, "tok-b", (10, 15), 110, None)));
        let register = history.lost_update_register("r");
        let fenced = history.fenced_register("r");
        let witness = history.occupancy_witness("r");
        let clean = history.check();
        assert!(clean.is_clean(), "{clean}");

        let guard = witness.enter(0);
        drop(witness.enter(1));
        drop(guard);
        let v = register.read();
        register.write(v);
        fenced.write(2, 0).unwrap();
        fenced.write(1, 1).unwrap_err();

        let report = history.check();
        assert_eq!(report.acquires, OpCounts { ok: 1, failed: 1 });
        assert_eq!(report.extends, OpCounts { ok: 1, failed: 0 });
        assert_eq!(report.releases, OpCounts { ok: 1, failed: 0 });
        assert_eq!(report.acquired.get("r"), Some(&1));
        assert_eq!(
            report.fenced_writes.get("r"),
            Some(&FencedCounts {
                accepted: 1,
                rejected: 1
            })
        );
        // The double occupancy, the stale write and the lost update.
        assert_eq!(report.violations.len(), 3, "{report}");
        let text = report.to_string();
        assert!(text.contains("two holders inside"), "{text}");
        assert!(text.contains("1 accepted, 1 rejected"), "{text}");
    }

    #[test]
    fn check_counts_the_holders_of_a_watched_semaphore() {
        let history = History::new();
        let c = Clock(history.origin());
        for (i, token) in ["tok-a", "tok-b", "tok-c"].into_iter().enumerate() {
            let mut op = c.acquire(i, token, (i as u64, 5), 100, None);
            op.resource = format!("jobs:permit:{i}");
            history.record(op);
        }
        let witness = history.capacity_witness("jobs", 3);
        let inside: Vec<OccupancyGuard> = (0..3).map(|i| witness.enter(i)).collect();
        drop(inside);
        assert!(history.check().is_clean(), "{}", history.check());

        history.watch_semaphore("jobs", 2);
        let report = history.check();
        assert_eq!(report.violations.len(), 1, "{report}");
        assert!(matches!(
            &report.violations[0],
            Violation::TooManyHolders { permits: 2, holders, .. } if holders.len() == 3
        ));
        assert!(
            report.to_string().contains("more than its 2 permits"),
            "{report}"
        );
    }

    #[test]
    fn check_lets_the_readers_of_a_watched_rw_lock_share_it_and_keeps_writers_apart() {
        let history = History::new();
        let c = Clock(history.origin());
        for (i, token) in ["tok-a", "tok-b"].into_iter().enumerate() {
            let mut op = c.acquire(i, token, (i as u64, i as u64 + 1), 100, None);
            op.resource = readers_of("rw");
            history.record(op);
        }
        // Unwatched, two readers' leases on one name are an overlap like any other.
        assert_eq!(history.check().violations.len(), 1);

        history.watch_rw_lock("rw");
        let witness = history.read_write_witness("rw");
        drop((
            witness.enter(0, Access::Read),
            witness.enter(1, Access::Read),
        ));
        assert!(history.check().is_clean(), "{}", history.check());

        let mut writer = c.acquire(2, "tok-c", (50, 51), 150, Some(1));
        writer.resource = "rw".into();
        history.record(writer);
        let report = history.check();
        assert_eq!(report.violations.len(), 2, "{report}");
        assert!(report
            .violations
            .iter()
            .all(|v| matches!(v, Violation::ReadWriteOverlap { .. })));
    }

    #[test]
    fn check_runs_the_election_checks_on_a_watched_election_and_audits_releases() {
        let history = History::new();
        let c = Clock(history.origin());
        let mut terms = Vec::new();
        for (i, (span, term)) in [((0, 10), 5), ((0, 30), 4)].into_iter().enumerate() {
            let mut op = c.acquire(
                i,
                &format!("tok-{i}:host-{i}"),
                span,
                span.1 + 10,
                Some(term),
            );
            op.resource = "lead".into();
            terms.push(op.clone());
            history.record(op);
        }
        history.record_leader_read(LeaderRead::naming(
            9,
            "lead",
            c.at(40),
            c.at(41),
            Some((
                "host-0",
                &quorumlock::LockToken::fingerprint_of("tok-0:host-0"),
            )),
        ));
        history.record_audit(ReleaseAudit::new(
            0,
            "r",
            "tok-0",
            c.at(50),
            (3, 3),
            vec![1],
        ));
        // Unwatched, the election is two leases that do not overlap, and the audit.
        assert_eq!(history.check().violations.len(), 1, "{}", history.check());

        history.watch_election("lead");
        let report = history.check();
        let kinds: Vec<&str> = report
            .violations
            .iter()
            .map(|v| match v {
                Violation::TermOrder { .. } => "term",
                Violation::LeaderRead { .. } => "read",
                Violation::LeftBehind { .. } => "leak",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["leak", "term", "read"], "{report}");
        assert_eq!(history.leader_reads().len(), 1);
        assert_eq!(history.audits().len(), 1);
    }

    #[test]
    fn heal_ends_a_fault_once() {
        let history = History::new();
        let id = history.fault("node 0 paused");
        let open = history.faults();
        assert_eq!(open[0].end, None);
        history.heal(id);
        let end = history.faults()[0].end;
        assert!(end.is_some());
        history.heal(id);
        assert_eq!(history.faults()[0].end, end);
        assert_eq!(history.faults()[0].description, "node 0 paused");
    }

    /// The `History` doc example, kept compiling and passing here.
    #[test]
    fn the_documented_example_is_clean() {
        let history = History::new();
        let witness = history.occupancy_witness("orders:42");
        let start = Instant::now();
        let valid_until = start + Duration::from_millis(990);
        history.record(Op {
            client: 0,
            resource: "orders:42".into(),
            token: "3f1c0a9e-secret".into(),
            kind: OpKind::Acquire,
            start,
            end: Instant::now(),
            outcome: Outcome::Ok {
                valid_until: Some(valid_until),
            },
            fence: Some(1),
        });
        {
            let _inside = witness.enter(0);
        }
        let paused = history.fault("node 2 paused");
        history.heal(paused);
        let report = history.check();
        assert!(report.is_clean(), "{report}");
    }
}

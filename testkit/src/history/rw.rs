//! The read-write lock checker and witness: a writer never holds a read-write lock while anybody
//! else does; readers share it.
//!
//! A read-write lock's holders are recorded under two names: writers under the lock's own name,
//! as a mutex's holders would be (so [`check_overlaps`](super::check_overlaps) keeps writers
//! apart from each other), and readers under [`readers_of`] it, `<resource>:readers`. Readers'
//! leases overlap by design: a [`History`](crate::History) that
//! [watches the lock](crate::History::watch_rw_lock) leaves them out of `check_overlaps` and runs
//! [`check_rw_exclusion`] instead, which reports every writer's lease that overlaps a reader's.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::capacity::peak_open;
use super::checks::{earlier_end, leases};
use super::{lock, Lease, Occupant, Op, Violation};

/// What the readers of a read-write lock are recorded under, after the lock's name.
pub const READERS_SUFFIX: &str = ":readers";

/// The name the readers of the read-write lock `resource` are recorded under:
/// `<resource>:readers`.
///
/// ```
/// use quorumlock_testkit::history::readers_of;
///
/// assert_eq!(readers_of("catalog"), "catalog:readers");
/// ```
pub fn readers_of(resource: &str) -> String {
    format!("{resource}{READERS_SUFFIX}")
}

/// Which side of a read-write lock a holder is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Access {
    /// A reader: shares the lock with other readers.
    Read,
    /// A writer: holds the lock alone.
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "reader",
            Access::Write => "writer",
        })
    }
}

/// Checks that no writer of the read-write lock `resource` held a lease while a reader did:
/// over the ops on `resource` (writers) and on [`readers_of`]`(resource)` (readers), other
/// resources ignored. Writers overlapping each other are [`check_overlaps`]'s to report, and
/// readers overlapping each other are what a read-write lock is for.
///
/// Leases are those of [`check_overlaps`]: from the end of a successful acquire to the
/// reported validity (extends included), cut at the start of a release. A lease that ends at
/// the instant another starts does not overlap it.
///
/// Returns one [`Violation::ReadWriteOverlap`] per overlapping pair of a writer's and a
/// reader's token.
///
/// [`check_overlaps`]: super::check_overlaps
///
/// ```
/// use std::time::{Duration, Instant};
/// use quorumlock_testkit::history::{check_rw_exclusion, readers_of};
/// use quorumlock_testkit::{Op, OpKind, Outcome};
///
/// let t0 = Instant::now();
/// let ms = |n| t0 + Duration::from_millis(n);
/// let held = |client: usize, resource: String, from: u64, until: u64| Op {
///     client,
///     resource,
///     token: format!("token-{client}"),
///     kind: OpKind::Acquire,
///     start: ms(from),
///     end: ms(from),
///     outcome: Outcome::Ok { valid_until: Some(ms(until)) },
///     fence: None,
/// };
/// // Two readers share the lock; a writer that starts before the second leaves overlaps it.
/// let readers = vec![
///     held(0, readers_of("catalog"), 0, 100),
///     held(1, readers_of("catalog"), 10, 100),
/// ];
/// assert_eq!(check_rw_exclusion("catalog", &readers), vec![]);
/// let mut ops = readers;
/// ops.push(held(2, "catalog".into(), 100, 200));
/// assert_eq!(check_rw_exclusion("catalog", &ops), vec![]);
/// ops.push(held(3, "catalog".into(), 50, 60));
/// assert_eq!(check_rw_exclusion("catalog", &ops).len(), 2);
/// ```
pub fn check_rw_exclusion(resource: &str, ops: &[Op]) -> Vec<Violation> {
    let readers = readers_of(resource);
    let mut held: Vec<(Access, &str, Lease)> = leases(
        ops.iter()
            .filter(|op| op.resource == resource || op.resource == readers),
    )
    .into_iter()
    .map(|(name, token, lease)| {
        let access = if name == resource {
            Access::Write
        } else {
            Access::Read
        };
        (access, token, lease)
    })
    .collect();
    held.sort_by_key(|(_, _, lease)| lease.start);

    let mut violations = Vec::new();
    let mut reported: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (i, (access_a, token_a, a)) in held.iter().enumerate() {
        for (access_b, token_b, b) in &held[i + 1..] {
            if !a.covers(b.start) {
                break; // sorted by start: every later lease starts after `a` ended
            }
            if access_a == access_b {
                continue;
            }
            let ((writer_token, writer), (reader_token, reader)) = match access_a {
                Access::Write => ((token_a, a), (token_b, b)),
                Access::Read => ((token_b, b), (token_a, a)),
            };
            if !reported.insert((writer_token, reader_token)) {
                continue;
            }
            violations.push(Violation::ReadWriteOverlap {
                resource: resource.to_owned(),
                writer: writer.clone(),
                reader: reader.clone(),
                from: b.start,
                until: earlier_end(a.end, b.end),
            });
        }
    }
    violations
}

/// The most readers of the read-write lock `resource` that held a lease at one instant (0 when
/// none did), counted from the ops on [`readers_of`]`(resource)` as [`check_rw_exclusion`]
/// counts leases: the evidence that readers did share the lock.
pub fn peak_readers(resource: &str, ops: &[Op]) -> usize {
    let readers = readers_of(resource);
    let held: Vec<(&str, Lease)> = leases(ops.iter().filter(|op| op.resource == readers))
        .into_iter()
        .map(|(name, _, lease)| (name, lease))
        .collect();
    peak_open(&held)
}

/// Watches the critical section of one read-write lock and records a violation whenever a
/// writer enters while anybody is inside, or a reader enters while a writer is. Trusts no
/// client timestamp.
///
/// Clients call [`enter`](ReadWriteWitness::enter) right after acquiring and keep the returned
/// guard until just before releasing. Cheap to clone; clones share the state. Like the
/// [`OccupancyWitness`](crate::OccupancyWitness), it holds its mutex only while a client enters
/// or leaves.
#[derive(Clone, Debug)]
pub struct ReadWriteWitness {
    inner: Arc<RwShared>,
}

#[derive(Debug)]
struct RwShared {
    resource: String,
    state: Mutex<RwState>,
}

#[derive(Debug, Default)]
struct RwState {
    next_id: u64,
    reads: u64,
    writes: u64,
    inside: Vec<(u64, Access, Occupant)>,
    /// The most readers inside at once.
    peak_readers: usize,
    violations: Vec<Violation>,
}

impl ReadWriteWitness {
    /// A witness for the read-write lock `resource` with nobody inside. Use
    /// [`History::read_write_witness`](crate::History::read_write_witness) to have
    /// [`History::check`](crate::History::check) include its verdict.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(RwShared {
                resource: resource.into(),
                state: Mutex::new(RwState::default()),
            }),
        }
    }

    /// The read-write lock this witness watches.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// `client` enters with `access`; it leaves when the returned guard is dropped. A writer
    /// entering while anybody is inside, or a reader entering while a writer is, records a
    /// [`Violation::ReadWriteOccupancy`] naming everybody inside.
    pub fn enter(&self, client: usize, access: Access) -> ReadWriteGuard {
        let entered = Instant::now();
        let mut state = lock(&self.inner.state);
        let id = state.next_id;
        state.next_id += 1;
        match access {
            Access::Read => state.reads += 1,
            Access::Write => state.writes += 1,
        }
        let clash = match access {
            Access::Write => !state.inside.is_empty(),
            Access::Read => state.inside.iter().any(|(_, a, _)| *a == Access::Write),
        };
        let intruder = Occupant { client, entered };
        if clash {
            let inside = state
                .inside
                .iter()
                .map(|(_, a, o)| (*a, o.clone()))
                .collect();
            state.violations.push(Violation::ReadWriteOccupancy {
                resource: self.inner.resource.clone(),
                inside,
                intruder: (access, intruder.clone()),
            });
        }
        state.inside.push((id, access, intruder));
        let readers = state
            .inside
            .iter()
            .filter(|(_, a, _)| *a == Access::Read)
            .count();
        state.peak_readers = state.peak_readers.max(readers);
        ReadWriteGuard {
            inner: Arc::clone(&self.inner),
            id,
        }
    }

    /// How many times a reader entered, and a writer.
    pub fn entries(&self) -> (u64, u64) {
        let state = lock(&self.inner.state);
        (state.reads, state.writes)
    }

    /// The most readers that were inside at once.
    pub fn peak_readers(&self) -> usize {
        lock(&self.inner.state).peak_readers
    }

    /// Every clash seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.inner.state).violations.clone()
    }
}

/// Proof of being inside a [`ReadWriteWitness`]'s critical section; dropping it leaves.
#[must_use = "the client leaves the critical section when the guard is dropped"]
pub struct ReadWriteGuard {
    inner: Arc<RwShared>,
    id: u64,
}

impl fmt::Debug for ReadWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteGuard")
            .field("resource", &self.inner.resource)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for ReadWriteGuard {
    fn drop(&mut self) {
        lock(&self.inner.state)
            .inside
            .retain(|(id, _, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testing::{failed, Clock};
    use crate::history::TokenFingerprint;

    /// A successful acquire by `client` (token `t<client>`) of `resource`, returned at `from` ms
    /// and valid until `until` ms.
    fn on(c: &Clock, resource: &str, client: usize, (from, until): (u64, u64)) -> Op {
        let mut op = c.acquire(client, &format!("t{client}"), (from, from), until, None);
        op.resource = resource.to_owned();
        op
    }

    fn reader(c: &Clock, client: usize, span: (u64, u64)) -> Op {
        on(c, "rw:readers", client, span)
    }

    fn writer(c: &Clock, client: usize, span: (u64, u64)) -> Op {
        on(c, "rw", client, span)
    }

    #[test]
    fn readers_share_and_writers_between_them_pass() {
        let c = Clock::new();
        let ops = vec![
            reader(&c, 0, (0, 100)),
            reader(&c, 1, (10, 120)),
            reader(&c, 2, (20, 50)),
            writer(&c, 3, (120, 200)),
            reader(&c, 4, (200, 300)),
        ];
        assert_eq!(check_rw_exclusion("rw", &ops), vec![]);
        assert_eq!(peak_readers("rw", &ops), 3);
    }

    #[test]
    fn a_writer_inside_a_readers_lease_is_reported_with_both_and_the_overlap() {
        let c = Clock::new();
        let ops = vec![reader(&c, 0, (0, 100)), writer(&c, 1, (60, 200))];
        let violations = check_rw_exclusion("rw", &ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::ReadWriteOverlap {
            resource,
            writer,
            reader,
            from,
            until,
        } = &violations[0]
        else {
            panic!("not a read-write overlap: {violations:?}");
        };
        assert_eq!(resource, "rw");
        assert_eq!((writer.client, reader.client), (1, 0));
        assert_eq!(writer.token, TokenFingerprint::of("t1"));
        assert_eq!((*from, *until), (c.at(60), Some(c.at(100))));
        let text = violations[0].to_string();
        assert!(
            text.contains("writer client 1") && text.contains("reader client 0"),
            "{text}"
        );
        assert!(!text.contains("t1"), "a token was printed: {text}");
    }

    #[test]
    fn a_reader_that_starts_inside_a_writers_lease_is_reported() {
        let c = Clock::new();
        let ops = vec![writer(&c, 0, (0, 100)), reader(&c, 1, (50, 150))];
        let violations = check_rw_exclusion("rw", &ops);
        assert!(
            matches!(
                violations.as_slice(),
                [Violation::ReadWriteOverlap { writer, reader, .. }]
                    if writer.client == 0 && reader.client == 1
            ),
            "{violations:?}"
        );
    }

    #[test]
    fn a_release_ends_a_readers_lease_before_the_writer() {
        let c = Clock::new();
        let mut release = c.release(0, "t0", (40, 45));
        release.resource = "rw:readers".into();
        let ops = vec![reader(&c, 0, (0, 100)), release, writer(&c, 1, (45, 100))];
        assert_eq!(check_rw_exclusion("rw", &ops), vec![]);
    }

    #[test]
    fn writers_against_writers_other_locks_and_failures_are_not_this_checks() {
        let c = Clock::new();
        let ops = vec![
            writer(&c, 0, (0, 100)),
            writer(&c, 1, (50, 150)),
            on(&c, "other:readers", 2, (0, 100)),
            on(&c, "rw2:readers", 3, (0, 100)),
            failed(reader(&c, 4, (10, 100))),
        ];
        assert_eq!(check_rw_exclusion("rw", &ops), vec![]);
        assert_eq!(peak_readers("rw", &ops), 0);
    }

    #[test]
    fn the_witness_lets_readers_share_and_reports_a_writer_among_them() {
        let witness = ReadWriteWitness::new("rw");
        let a = witness.enter(0, Access::Read);
        let b = witness.enter(1, Access::Read);
        assert_eq!(witness.violations(), vec![]);
        assert_eq!(witness.peak_readers(), 2);
        drop(witness.enter(2, Access::Write));
        drop((a, b));
        let w = witness.enter(3, Access::Write);
        drop(witness.enter(4, Access::Read));
        drop(w);
        drop(witness.enter(5, Access::Write));
        assert_eq!(witness.entries(), (3, 3));

        let violations = witness.violations();
        assert_eq!(violations.len(), 2, "{violations:?}");
        let Violation::ReadWriteOccupancy {
            inside, intruder, ..
        } = &violations[0]
        else {
            panic!("not a read-write occupancy: {violations:?}");
        };
        assert_eq!((intruder.0, intruder.1.client), (Access::Write, 2));
        let inside: Vec<(Access, usize)> = inside.iter().map(|(a, o)| (*a, o.client)).collect();
        assert_eq!(inside, [(Access::Read, 0), (Access::Read, 1)]);
        let text = violations[1].to_string();
        assert!(
            text.contains("reader client 4 entered \"rw\"")
                && text.contains("writer client 3 (entered at"),
            "{text}"
        );
    }
}

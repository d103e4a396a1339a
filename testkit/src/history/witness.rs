//! Effect-level witnesses: called by the clients inside their critical sections, they trust no
//! client timestamp.

use super::{lock, Violation};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The resource a witness watches and its state, shared by all clones of the witness.
#[derive(Debug)]
struct Shared<S> {
    resource: String,
    state: Mutex<S>,
}

impl<S: Default> Shared<S> {
    fn new(resource: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            resource: resource.into(),
            state: Mutex::new(S::default()),
        })
    }
}

impl<S> Shared<S> {
    fn state(&self) -> MutexGuard<'_, S> {
        lock(&self.state)
    }
}

/// A client inside a critical section, as seen by an [`OccupancyWitness`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Occupant {
    /// The client.
    pub client: usize,
    /// When it entered.
    pub entered: Instant,
}

/// Counts the clients inside the critical section of one resource and records a violation
/// whenever a client enters while another is still inside (or, for a semaphore's witness made
/// [`with_capacity`](OccupancyWitness::with_capacity), while as many as it admits are inside).
/// Trusts no client timestamp.
///
/// Clients call [`enter`](OccupancyWitness::enter) right after acquiring and keep the returned
/// guard until just before releasing. Cheap to clone; clones share the count.
///
/// The occupants are kept under a `std` mutex rather than in a bare atomic counter so a violation
/// can name every client that was inside. The mutex is held only while entering and leaving, never
/// across the critical section, so it cannot hide an overlap; the guard is `Send` and fine to hold
/// across `.await`.
#[derive(Clone, Debug)]
pub struct OccupancyWitness {
    inner: Arc<Shared<OccupancyState>>,
}

#[derive(Debug, Default)]
struct OccupancyState {
    /// How many may be inside at once; 0 stands for 1 (a mutex), the default.
    capacity: usize,
    next_id: u64,
    entries: u64,
    inside: Vec<(u64, Occupant)>,
    /// The most inside at once.
    peak: usize,
    violations: Vec<Violation>,
}

impl OccupancyWitness {
    /// A witness for `resource` with nobody inside. Use
    /// [`History::occupancy_witness`](crate::History::occupancy_witness) to have
    /// [`History::check`](crate::History::check) include its verdict.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Shared::new(resource),
        }
    }

    /// A witness for the critical section of a semaphore `resource` that admits `capacity`
    /// clients at once (its permits), with nobody inside. Use
    /// [`History::capacity_witness`](crate::History::capacity_witness) to have
    /// [`History::check`](crate::History::check) include its verdict.
    pub fn with_capacity(resource: impl Into<String>, capacity: usize) -> Self {
        let witness = Self::new(resource);
        witness.inner.state().capacity = capacity.max(1);
        witness
    }

    /// The resource this witness watches.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// How many clients may be inside at once: 1 unless made
    /// [`with_capacity`](OccupancyWitness::with_capacity).
    pub fn capacity(&self) -> usize {
        self.inner.state().capacity.max(1)
    }

    /// `client` enters the critical section; it leaves when the returned guard is dropped. If
    /// anybody is already inside, a [`Violation::DoubleOccupancy`] naming them is recorded; for a
    /// witness with a capacity above 1, a [`Violation::OverCapacity`] when that many are inside.
    pub fn enter(&self, client: usize) -> OccupancyGuard {
        let entered = Instant::now();
        let mut state = self.inner.state();
        let id = state.next_id;
        state.next_id += 1;
        state.entries += 1;
        let intruder = Occupant { client, entered };
        let capacity = state.capacity.max(1);
        if state.inside.len() >= capacity {
            let holders = state.inside.iter().map(|(_, o)| o.clone()).collect();
            let resource = self.inner.resource.clone();
            let intruder = intruder.clone();
            state.violations.push(if capacity == 1 {
                Violation::DoubleOccupancy {
                    resource,
                    holders,
                    intruder,
                }
            } else {
                Violation::OverCapacity {
                    resource,
                    capacity,
                    holders,
                    intruder,
                }
            });
        }
        state.inside.push((id, intruder));
        state.peak = state.peak.max(state.inside.len());
        OccupancyGuard {
            inner: Arc::clone(&self.inner),
            id,
        }
    }

    /// How many clients are inside now.
    pub fn occupants(&self) -> usize {
        self.inner.state().inside.len()
    }

    /// How many times a client entered.
    pub fn entries(&self) -> u64 {
        self.inner.state().entries
    }

    /// The most clients that were inside at once.
    pub fn peak(&self) -> usize {
        self.inner.state().peak
    }

    /// Every double occupancy seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.inner.state().violations.clone()
    }
}

/// Proof of being inside an [`OccupancyWitness`]'s critical section; dropping it leaves.
#[must_use = "the client leaves the critical section when the guard is dropped"]
pub struct OccupancyGuard {
    inner: Arc<Shared<OccupancyState>>,
    id: u64,
}

impl fmt::Debug for OccupancyGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OccupancyGuard")
            .field("resource", &self.inner.resource)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for OccupancyGuard {
    fn drop(&mut self) {
        self.inner.state().inside.retain(|(id, _)| *id != self.id);
    }
}

/// A read–sleep–write counter that loses updates when two critical sections interleave.
///
/// Each client does, inside its critical section, `let v = reg.read(); /* sleep */ reg.write(v + 1);`.
/// With mutual exclusion every write raises the value by one. When two holders interleave —
/// read(A) read(B) write(A) write(B) — B's write carries a value not above the current one: that
/// write is recorded as a [`Violation::StaleWrite`] the moment it happens, and the final value ends
/// below the number of writes ([`Violation::LostUpdate`], from [`check`](LostUpdateRegister::check)).
///
/// Designed for that increment protocol only. Cheap to clone; clones share the register.
#[derive(Clone, Debug)]
pub struct LostUpdateRegister {
    inner: Arc<Shared<RegisterState>>,
}

#[derive(Debug, Default)]
struct RegisterState {
    value: u64,
    commits: u64,
    stale: Vec<Violation>,
}

impl LostUpdateRegister {
    /// A register for `resource` holding 0. Use
    /// [`History::lost_update_register`](crate::History::lost_update_register) to have
    /// [`History::check`](crate::History::check) include its verdict.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Shared::new(resource),
        }
    }

    /// The resource this register belongs to.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// The current value.
    pub fn read(&self) -> u64 {
        self.inner.state().value
    }

    /// Replaces the value (last writer wins, like plain storage) and counts one commit. A value
    /// not above the current one means another critical section committed since this writer read:
    /// a [`Violation::StaleWrite`] is recorded.
    pub fn write(&self, value: u64) {
        let at = Instant::now();
        let mut state = self.inner.state();
        state.commits += 1;
        if value <= state.value {
            let overwritten = state.value;
            state.stale.push(Violation::StaleWrite {
                resource: self.inner.resource.clone(),
                written: value,
                overwritten,
                at,
            });
        }
        state.value = value;
    }

    /// How many writes were made.
    pub fn commits(&self) -> u64 {
        self.inner.state().commits
    }

    /// The stale writes seen so far, plus a [`Violation::LostUpdate`] if the final value differs
    /// from `expected_commits` — the number of critical sections that completed their write (pass
    /// [`commits`](LostUpdateRegister::commits), or the clients' own count).
    pub fn check(&self, expected_commits: u64) -> Vec<Violation> {
        let state = self.inner.state();
        let mut violations = state.stale.clone();
        if state.value != expected_commits {
            violations.push(Violation::LostUpdate {
                resource: self.inner.resource.clone(),
                final_value: state.value,
                expected: expected_commits,
                writes: state.commits,
            });
        }
        violations
    }
}

/// Accepted and rejected writes to a [`FencedRegister`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedCounts {
    /// Writes whose fence was accepted.
    pub accepted: u64,
    /// Writes refused as stale.
    pub rejected: u64,
}

/// A write refused by a [`FencedRegister`] because its fence is below one already accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stale {
    /// The refused fence.
    pub fence: u64,
    /// The highest fence accepted so far.
    pub highest: u64,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fencing token {} (highest accepted is {})",
            self.fence, self.highest
        )
    }
}

impl std::error::Error for Stale {}

/// Storage that rejects stale fencing tokens, as a fencing-aware resource behind the lock would.
///
/// [`write`](FencedRegister::write) is accepted iff its fence is ≥ the highest accepted so far.
/// Equal is allowed because one holder writes several times under the same fence. Real storage
/// cannot tell who presents a fence; this model can, so an equal fence from a *different* client
/// is still accepted but recorded as a [`Violation::SharedFence`] (two holders were handed the same
/// fence). Rejections are not violations: they are fencing doing its job, and are counted per
/// client. Cheap to clone; clones share the register.
#[derive(Clone, Debug)]
pub struct FencedRegister {
    inner: Arc<Shared<FencedState>>,
}

#[derive(Debug, Default)]
struct FencedState {
    /// The highest accepted fence and the client that first wrote with it.
    highest: Option<(u64, usize)>,
    counts: BTreeMap<usize, FencedCounts>,
    violations: Vec<Violation>,
}

impl FencedRegister {
    /// An empty register for `resource`. Use
    /// [`History::fenced_register`](crate::History::fenced_register) to have
    /// [`History::check`](crate::History::check) include it.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Shared::new(resource),
        }
    }

    /// The resource this register belongs to.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// `client` writes under `fence`: accepted iff `fence` ≥ the highest fence accepted so far.
    ///
    /// # Errors
    ///
    /// [`Stale`] if a higher fence was already accepted.
    pub fn write(&self, fence: u64, client: usize) -> Result<(), Stale> {
        let at = Instant::now();
        let mut state = self.inner.state();
        match state.highest {
            Some((highest, _)) if fence < highest => {
                state.counts.entry(client).or_default().rejected += 1;
                return Err(Stale { fence, highest });
            }
            Some((highest, first_client)) if fence == highest => {
                if client != first_client {
                    state.violations.push(Violation::SharedFence {
                        resource: self.inner.resource.clone(),
                        fence,
                        first_client,
                        second_client: client,
                        at,
                    });
                }
            }
            _ => state.highest = Some((fence, client)),
        }
        state.counts.entry(client).or_default().accepted += 1;
        Ok(())
    }

    /// The highest fence accepted so far.
    pub fn highest(&self) -> Option<u64> {
        self.inner.state().highest.map(|(fence, _)| fence)
    }

    /// Accepted and rejected writes per client.
    pub fn counts(&self) -> BTreeMap<usize, FencedCounts> {
        self.inner.state().counts.clone()
    }

    /// Accepted and rejected writes over all clients.
    pub fn totals(&self) -> FencedCounts {
        self.inner
            .state()
            .counts
            .values()
            .fold(FencedCounts::default(), |sum, c| FencedCounts {
                accepted: sum.accepted + c.accepted,
                rejected: sum.rejected + c.rejected,
            })
    }

    /// Every shared fence seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.inner.state().violations.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::thread;

    #[test]
    fn occupancy_witness_reports_two_holders_inside_at_once() {
        let witness = OccupancyWitness::new("r");
        let both_inside = Arc::new(Barrier::new(2));
        let handles: Vec<_> = [0, 1]
            .into_iter()
            .map(|client| {
                let witness = witness.clone();
                let both_inside = Arc::clone(&both_inside);
                thread::spawn(move || {
                    let _guard = witness.enter(client);
                    // Neither leaves before both have entered.
                    both_inside.wait();
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let violations = witness.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::DoubleOccupancy {
            holders, intruder, ..
        } = &violations[0]
        else {
            panic!("not a double occupancy: {violations:?}");
        };
        assert_eq!(holders.len(), 1);
        let mut clients = [holders[0].client, intruder.client];
        clients.sort_unstable();
        assert_eq!(clients, [0, 1]);
        assert_eq!(witness.occupants(), 0);
        assert_eq!(witness.entries(), 2);
    }

    #[test]
    fn occupancy_witness_is_quiet_for_sequential_holders() {
        let witness = OccupancyWitness::new("r");
        let first_left = Arc::new(Barrier::new(2));
        let a = {
            let witness = witness.clone();
            let first_left = Arc::clone(&first_left);
            thread::spawn(move || {
                drop(witness.enter(0));
                first_left.wait();
            })
        };
        let b = {
            let witness = witness.clone();
            let first_left = Arc::clone(&first_left);
            thread::spawn(move || {
                first_left.wait();
                drop(witness.enter(1));
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(witness.violations(), vec![]);
        assert_eq!(witness.entries(), 2);
    }

    #[test]
    fn a_witness_with_capacity_admits_that_many_and_reports_one_more() {
        let witness = OccupancyWitness::with_capacity("jobs", 2);
        assert_eq!(witness.capacity(), 2);
        let a = witness.enter(0);
        let b = witness.enter(1);
        assert_eq!(witness.violations(), vec![]);
        drop(witness.enter(2));
        drop((a, b));
        let _d = witness.enter(3);
        assert_eq!((witness.peak(), witness.occupants()), (3, 1));
        let violations = witness.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::OverCapacity {
            capacity,
            holders,
            intruder,
            ..
        } = &violations[0]
        else {
            panic!("not over capacity: {violations:?}");
        };
        assert_eq!((*capacity, holders.len(), intruder.client), (2, 2, 2));
        let text = violations[0].to_string();
        assert!(
            text.contains("3 holders inside \"jobs\", which admits 2"),
            "{text}"
        );
        assert_eq!(OccupancyWitness::new("r").capacity(), 1);
    }

    #[test]
    fn lost_update_register_detects_read_read_write_write() {
        let register = LostUpdateRegister::new("r");
        let a = register.read();
        let b = register.read();
        register.write(a + 1);
        register.write(b + 1);
        assert_eq!(register.commits(), 2);
        let violations = register.check(register.commits());
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(matches!(
            violations[0],
            Violation::StaleWrite {
                written: 1,
                overwritten: 1,
                ..
            }
        ));
        assert!(matches!(
            violations[1],
            Violation::LostUpdate {
                final_value: 1,
                expected: 2,
                ..
            }
        ));
    }

    #[test]
    fn lost_update_register_is_quiet_for_sequential_critical_sections() {
        let register = LostUpdateRegister::new("r");
        for _ in 0..3 {
            let v = register.read();
            register.write(v + 1);
        }
        assert_eq!(register.check(3), vec![]);
        assert_eq!(register.check(4).len(), 1);
    }

    #[test]
    fn fenced_register_rejects_a_lower_fence() {
        let register = FencedRegister::new("r");
        assert_eq!(register.write(5, 0), Ok(()));
        assert_eq!(register.write(5, 0), Ok(()), "the same holder may rewrite");
        assert_eq!(
            register.write(4, 1),
            Err(Stale {
                fence: 4,
                highest: 5
            })
        );
        assert_eq!(register.write(6, 1), Ok(()));
        assert_eq!(register.highest(), Some(6));
        let counts = register.counts();
        assert_eq!(
            (counts[&0].accepted, counts[&0].rejected),
            (2, 0),
            "{counts:?}"
        );
        assert_eq!((counts[&1].accepted, counts[&1].rejected), (1, 1));
        assert_eq!(register.violations(), vec![]);
    }

    #[test]
    fn fenced_register_reports_one_fence_shared_by_two_clients() {
        let register = FencedRegister::new("r");
        register.write(3, 0).unwrap();
        register.write(3, 1).unwrap();
        let violations = register.violations();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(matches!(
            violations[0],
            Violation::SharedFence {
                fence: 3,
                first_client: 0,
                second_client: 1,
                ..
            }
        ));
    }
}

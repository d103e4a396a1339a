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
//!   [`check_overlaps`] (two holders' leases on one resource never overlap) and
//!   [`check_fence_order`] (fencing tokens increase in real-time order).
//! * **Effect level**, from witnesses the clients call inside their critical sections, which trust
//!   no client timestamp: [`OccupancyWitness`] (never two holders inside at once),
//!   [`LostUpdateRegister`] (a read–sleep–write counter that loses updates when two holders
//!   interleave) and [`FencedRegister`] (storage that rejects stale fencing tokens).
//!
//! Everything here is plain data and `std` synchronisation; nothing talks to Redis. Lock tokens are
//! never printed: `Debug`, `Display` and the report show a [`TokenFingerprint`] instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Locks a mutex, carrying on with the data if another thread panicked while holding it: a
/// recorder must keep working (and keep its evidence) when one client task panics.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------------------------

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
}

/// A witness created through a [`History`], so that [`History::check`] includes its verdict.
#[derive(Clone, Debug)]
enum Witness {
    Occupancy(OccupancyWitness),
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
        lock(&self.inner)
            .witnesses
            .push(Witness::Occupancy(witness.clone()));
        witness
    }

    /// A new [`LostUpdateRegister`] for `resource`; [`check`](History::check) runs
    /// [`LostUpdateRegister::check`] on it with its own [`commits`](LostUpdateRegister::commits)
    /// as the expected count.
    pub fn lost_update_register(&self, resource: impl Into<String>) -> LostUpdateRegister {
        let register = LostUpdateRegister::new(resource);
        lock(&self.inner)
            .witnesses
            .push(Witness::LostUpdate(register.clone()));
        register
    }

    /// A new [`FencedRegister`] for `resource`; [`check`](History::check) reports its violations
    /// and the report counts its accepted and rejected writes.
    pub fn fenced_register(&self, resource: impl Into<String>) -> FencedRegister {
        let register = FencedRegister::new(resource);
        lock(&self.inner)
            .witnesses
            .push(Witness::Fenced(register.clone()));
        register
    }

    /// Runs every checker over what has been recorded so far — [`check_overlaps`],
    /// [`check_fence_order`] and the witnesses created through this history — and returns the
    /// report.
    pub fn check(&self) -> Report {
        let (ops, faults, witnesses) = {
            let recorded = lock(&self.inner);
            (
                recorded.ops.clone(),
                recorded.faults.clone(),
                recorded.witnesses.clone(),
            )
        };
        let mut report = Report::new(self.origin, &ops, faults);
        report.add_violations(check_overlaps(&ops));
        report.add_violations(check_fence_order(&ops));
        for witness in &witnesses {
            match witness {
                Witness::Occupancy(witness) => report.add_violations(witness.violations()),
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

/// Identifies a fault recorded by [`History::fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultId(usize);

impl fmt::Display for FaultId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A fault injected during the run: active from `start` until `end`, or until the end of the run
/// when it was never healed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fault {
    /// The id [`History::fault`] returned.
    pub id: FaultId,
    /// What happened, e.g. `"node 2 paused"`.
    pub description: String,
    /// When the fault started.
    pub start: Instant,
    /// When it was healed; `None` if it lasted until the end of the run.
    pub end: Option<Instant>,
}

impl Fault {
    /// Whether the fault was active at some point of the closed window `[from, until]`
    /// (`until == None`: the window runs to the end of the run).
    pub fn active_during(&self, from: Instant, until: Option<Instant>) -> bool {
        let started_in_time = until.is_none_or(|until| self.start <= until);
        let not_yet_healed = self.end.is_none_or(|end| end > from);
        started_in_time && not_yet_healed
    }
}

/// One finished acquire, extend or release attempt of one client.
#[derive(Clone, PartialEq, Eq)]
pub struct Op {
    /// Which client task made the attempt.
    pub client: usize,
    /// The locked resource name.
    pub resource: String,
    /// The lock's token (opaque and secret: never printed, see [`TokenFingerprint`]).
    pub token: String,
    /// What was attempted.
    pub kind: OpKind,
    /// When the attempt started (before the first request was sent).
    pub start: Instant,
    /// When the attempt returned to the client.
    pub end: Instant,
    /// What the client was told.
    pub outcome: Outcome,
    /// The fencing token the acquire returned, if fencing is on.
    pub fence: Option<u64>,
}

impl Op {
    /// Whether the attempt succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(self.outcome, Outcome::Ok { .. })
    }

    /// The reported end of validity of a successful attempt (`None` if it failed or reported none).
    pub fn valid_until(&self) -> Option<Instant> {
        match self.outcome {
            Outcome::Ok { valid_until } => valid_until,
            Outcome::Failed { .. } => None,
        }
    }

    /// A short, printable fingerprint of the token.
    pub fn token_fingerprint(&self) -> TokenFingerprint {
        TokenFingerprint::of(&self.token)
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("client", &self.client)
            .field("resource", &self.resource)
            .field("token", &self.token_fingerprint())
            .field("kind", &self.kind)
            .field("start", &self.start)
            .field("end", &self.end)
            .field("outcome", &self.outcome)
            .field("fence", &self.fence)
            .finish()
    }
}

/// What an [`Op`] attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OpKind {
    /// Take the lock.
    Acquire,
    /// Push the lock's deadline further.
    Extend,
    /// Give the lock up.
    Release,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Acquire => "acquire",
            OpKind::Extend => "extend",
            OpKind::Release => "release",
        })
    }
}

/// What the client was told about an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The attempt succeeded.
    Ok {
        /// For an acquire or extend: the start of the attempt plus the validity the library
        /// reported, i.e. the deadline as the client computed it. `None` for a release. A
        /// successful acquire or extend without one is taken to hold until it is released.
        valid_until: Option<Instant>,
    },
    /// The attempt failed.
    Failed {
        /// Why, for the report.
        reason: String,
    },
}

/// A short fingerprint of a lock token, printed instead of the token itself.
///
/// 32 bits of a FNV-1a hash, shown as `#` and eight hex digits. Only for reading reports: the
/// checkers always compare full tokens.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenFingerprint(u32);

impl TokenFingerprint {
    /// The fingerprint of `token`.
    pub fn of(token: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in token.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Fold the 64-bit hash so every input bit affects the 32 shown.
        Self(((hash >> 32) ^ hash) as u32)
    }
}

impl fmt::Display for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:08x}", self.0)
    }
}

impl fmt::Debug for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------------------------
// Protocol-level checkers
// ---------------------------------------------------------------------------------------------

/// One stretch of time during which a holder believed it held a resource, as reported in a
/// [`Violation::Overlap`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The holder.
    pub client: usize,
    /// The lock's token fingerprint.
    pub token: TokenFingerprint,
    /// The fence its acquire returned, if any.
    pub fence: Option<u64>,
    /// When the lease began (the end of the successful acquire, or of an extend that started after
    /// the previous stretch had already expired).
    pub start: Instant,
    /// When it ended; `None` if it never did (no validity reported and never released).
    pub end: Option<Instant>,
}

impl Lease {
    fn covers(&self, at: Instant) -> bool {
        self.end.is_none_or(|end| at < end)
    }
}

/// The later of two lease ends, where `None` means "never".
fn later_end(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    Some(a?.max(b?))
}

/// The earlier of two lease ends, where `None` means "never".
fn earlier_end(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The leases of one token on one resource, from its ops sorted by start.
///
/// * A successful acquire or extend grants `[op.end, valid_until)`. If the token's current stretch
///   still covered the op's start, the grant extends that stretch to the later of the two ends;
///   otherwise (an extend after the lease had already expired) it starts a new stretch, so the gap
///   in between is not counted as held.
/// * A release — successful **or failed** — ends the current stretch at the release's **start**:
///   the holder stops using the lock the moment it calls release, and a "failed" release (say, its
///   replies were held back) may still have deleted the keys, so another client may legitimately
///   acquire right after it. Cutting at the release's end would report a false overlap whenever
///   the next holder's acquire completes while the release's replies are still in flight.
fn token_leases(ops: &[&Op]) -> Vec<Lease> {
    let mut leases: Vec<Lease> = Vec::new();
    let mut holder: Option<(usize, Option<u64>)> = None;
    for op in ops {
        match op.kind {
            OpKind::Acquire | OpKind::Extend if op.succeeded() => {
                if op.kind == OpKind::Acquire {
                    holder = Some((op.client, op.fence));
                }
                let until = op.valid_until();
                match leases.last_mut() {
                    Some(current) if current.covers(op.start) => {
                        current.end = later_end(current.end, until);
                    }
                    _ => {
                        if until.is_none_or(|until| until > op.end) {
                            let (client, fence) = holder.unwrap_or((op.client, None));
                            leases.push(Lease {
                                client,
                                token: op.token_fingerprint(),
                                fence,
                                start: op.end,
                                end: until,
                            });
                        }
                    }
                }
            }
            OpKind::Release => {
                if let Some(current) = leases.last_mut() {
                    if current.start >= op.start {
                        leases.pop();
                    } else if current.covers(op.start) {
                        current.end = Some(op.start);
                    }
                }
            }
            _ => {}
        }
    }
    leases
}

/// Sorts ops of one token by start; at equal starts an acquire comes before an extend before a
/// release.
fn by_start(ops: &mut [&Op]) {
    ops.sort_by_key(|op| (op.start, op.kind));
}

/// Checks that, per resource, the leases of different tokens never overlap.
///
/// A lease is the protocol-level holding period of a successful acquire: from the acquire's end to
/// the latest `valid_until` reached by it and its successful extends (same resource and token),
/// cut short at the **start** of the first release of that token (see below). An extend that
/// starts after the lease had already expired begins a new stretch rather than covering the gap. A
/// successful acquire or extend that reported no `valid_until` is taken to hold until released.
///
/// The release cut uses the release's start, and applies to failed releases too: the holder stops
/// using the lock when it calls release, and a release reported as failed (its replies held back
/// or lost) may nevertheless have deleted the keys, after which another client may acquire.
///
/// Returns one [`Violation::Overlap`] per overlapping pair of tokens, the earlier lease first.
pub fn check_overlaps(ops: &[Op]) -> Vec<Violation> {
    let mut by_token: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_token
            .entry((op.resource.as_str(), op.token.as_str()))
            .or_default()
            .push(op);
    }

    let mut by_resource: BTreeMap<&str, Vec<(&str, Lease)>> = BTreeMap::new();
    for ((resource, token), mut token_ops) in by_token {
        by_start(&mut token_ops);
        let leases = by_resource.entry(resource).or_default();
        leases.extend(
            token_leases(&token_ops)
                .into_iter()
                .map(|lease| (token, lease)),
        );
    }

    let mut violations = Vec::new();
    for (resource, mut leases) in by_resource {
        leases.sort_by_key(|(_, lease)| lease.start);
        let mut reported: BTreeSet<(&str, &str)> = BTreeSet::new();
        for (i, (token_a, a)) in leases.iter().enumerate() {
            for (token_b, b) in &leases[i + 1..] {
                if !a.covers(b.start) {
                    break; // sorted by start: every later lease starts after `a` ended
                }
                let pair = ((*token_a).min(*token_b), (*token_a).max(*token_b));
                if token_a == token_b || !reported.insert(pair) {
                    continue;
                }
                violations.push(Violation::Overlap {
                    resource: resource.to_owned(),
                    first: a.clone(),
                    second: b.clone(),
                    from: b.start,
                    until: earlier_end(a.end, b.end),
                });
            }
        }
    }
    violations
}

/// A successful acquire as reported in a [`Violation::FenceOrder`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquisition {
    /// The client that acquired.
    pub client: usize,
    /// The lock's token fingerprint.
    pub token: TokenFingerprint,
    /// The fencing token it was given.
    pub fence: u64,
    /// When the acquire started.
    pub start: Instant,
    /// When it returned (the lease's start).
    pub end: Instant,
}

impl Acquisition {
    fn of(op: &Op, fence: u64) -> Self {
        Self {
            client: op.client,
            token: op.token_fingerprint(),
            fence,
            start: op.start,
            end: op.end,
        }
    }
}

/// Checks that, per resource, fencing tokens of successful acquires strictly increase in real-time
/// order: whenever acquire A returned (`A.end`) before acquire B started (`B.start`),
/// `fence(A) < fence(B)`. Acquires that overlap in time are not ordered; ops without a fence are
/// ignored.
///
/// Returns at most one [`Violation::FenceOrder`] per later acquire B, naming the earlier acquire
/// with the highest fence among those that precede B.
pub fn check_fence_order(ops: &[Op]) -> Vec<Violation> {
    let mut by_resource: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for op in ops {
        if let (OpKind::Acquire, true, Some(fence)) = (op.kind, op.succeeded(), op.fence) {
            by_resource
                .entry(op.resource.as_str())
                .or_default()
                .push((op, fence));
        }
    }

    let mut violations = Vec::new();
    for (resource, mut acquires) in by_resource {
        // `by_end[..k]` are the acquires that returned before some instant; `best[k - 1]` is the
        // one with the highest fence among them (the earliest such on ties).
        let mut by_end = acquires.clone();
        by_end.sort_by_key(|(op, _)| (op.end, op.start));
        let mut best: Vec<usize> = Vec::with_capacity(by_end.len());
        for (i, (_, fence)) in by_end.iter().enumerate() {
            let keep = match best.last() {
                Some(&b) if by_end[b].1 >= *fence => b,
                _ => i,
            };
            best.push(keep);
        }

        acquires.sort_by_key(|(op, _)| (op.start, op.end));
        for (later, later_fence) in acquires {
            let preceding = by_end.partition_point(|(op, _)| op.end < later.start);
            let Some(&b) = preceding.checked_sub(1).and_then(|k| best.get(k)) else {
                continue;
            };
            let (earlier, earlier_fence) = by_end[b];
            if earlier_fence >= later_fence {
                violations.push(Violation::FenceOrder {
                    resource: resource.to_owned(),
                    earlier: Acquisition::of(earlier, earlier_fence),
                    later: Acquisition::of(later, later_fence),
                });
            }
        }
    }
    violations
}

// ---------------------------------------------------------------------------------------------
// Effect-level witnesses
// ---------------------------------------------------------------------------------------------

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
/// whenever a client enters while another is still inside. Trusts no client timestamp.
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
    inner: Arc<OccupancyInner>,
}

#[derive(Debug)]
struct OccupancyInner {
    resource: String,
    state: Mutex<OccupancyState>,
}

#[derive(Debug, Default)]
struct OccupancyState {
    next_id: u64,
    entries: u64,
    inside: Vec<(u64, Occupant)>,
    violations: Vec<Violation>,
}

impl OccupancyWitness {
    /// A witness for `resource` with nobody inside. Use [`History::occupancy_witness`] to have
    /// [`History::check`] include its verdict.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(OccupancyInner {
                resource: resource.into(),
                state: Mutex::new(OccupancyState::default()),
            }),
        }
    }

    /// The resource this witness watches.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// `client` enters the critical section; it leaves when the returned guard is dropped. If
    /// anybody is already inside, a [`Violation::DoubleOccupancy`] naming them is recorded.
    pub fn enter(&self, client: usize) -> OccupancyGuard {
        let entered = Instant::now();
        let mut state = lock(&self.inner.state);
        let id = state.next_id;
        state.next_id += 1;
        state.entries += 1;
        let intruder = Occupant { client, entered };
        if !state.inside.is_empty() {
            let holders = state.inside.iter().map(|(_, o)| o.clone()).collect();
            state.violations.push(Violation::DoubleOccupancy {
                resource: self.inner.resource.clone(),
                holders,
                intruder: intruder.clone(),
            });
        }
        state.inside.push((id, intruder));
        OccupancyGuard {
            inner: Arc::clone(&self.inner),
            id,
        }
    }

    /// How many clients are inside now.
    pub fn occupants(&self) -> usize {
        lock(&self.inner.state).inside.len()
    }

    /// How many times a client entered.
    pub fn entries(&self) -> u64 {
        lock(&self.inner.state).entries
    }

    /// Every double occupancy seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.inner.state).violations.clone()
    }
}

/// Proof of being inside an [`OccupancyWitness`]'s critical section; dropping it leaves.
#[must_use = "the client leaves the critical section when the guard is dropped"]
pub struct OccupancyGuard {
    inner: Arc<OccupancyInner>,
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
        lock(&self.inner.state)
            .inside
            .retain(|(id, _)| *id != self.id);
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
    inner: Arc<RegisterInner>,
}

#[derive(Debug)]
struct RegisterInner {
    resource: String,
    state: Mutex<RegisterState>,
}

#[derive(Debug, Default)]
struct RegisterState {
    value: u64,
    commits: u64,
    stale: Vec<Violation>,
}

impl LostUpdateRegister {
    /// A register for `resource` holding 0. Use [`History::lost_update_register`] to have
    /// [`History::check`] include its verdict.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(RegisterInner {
                resource: resource.into(),
                state: Mutex::new(RegisterState::default()),
            }),
        }
    }

    /// The resource this register belongs to.
    pub fn resource(&self) -> &str {
        &self.inner.resource
    }

    /// The current value.
    pub fn read(&self) -> u64 {
        lock(&self.inner.state).value
    }

    /// Replaces the value (last writer wins, like plain storage) and counts one commit. A value
    /// not above the current one means another critical section committed since this writer read:
    /// a [`Violation::StaleWrite`] is recorded.
    pub fn write(&self, value: u64) {
        let at = Instant::now();
        let mut state = lock(&self.inner.state);
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
        lock(&self.inner.state).commits
    }

    /// The stale writes seen so far, plus a [`Violation::LostUpdate`] if the final value differs
    /// from `expected_commits` — the number of critical sections that completed their write (pass
    /// [`commits`](LostUpdateRegister::commits), or the clients' own count).
    pub fn check(&self, expected_commits: u64) -> Vec<Violation> {
        let state = lock(&self.inner.state);
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
    inner: Arc<FencedInner>,
}

#[derive(Debug)]
struct FencedInner {
    resource: String,
    state: Mutex<FencedState>,
}

#[derive(Debug, Default)]
struct FencedState {
    /// The highest accepted fence and the client that first wrote with it.
    highest: Option<(u64, usize)>,
    counts: BTreeMap<usize, FencedCounts>,
    violations: Vec<Violation>,
}

impl FencedRegister {
    /// An empty register for `resource`. Use [`History::fenced_register`] to have
    /// [`History::check`] include it.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(FencedInner {
                resource: resource.into(),
                state: Mutex::new(FencedState::default()),
            }),
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
        let mut state = lock(&self.inner.state);
        match state.highest {
            Some((highest, _)) if fence < highest => {
                state.counts.entry(client).or_default().rejected += 1;
                return Err(Stale { fence, highest });
            }
            Some((highest, first_client)) if fence == highest && client != first_client => {
                state.violations.push(Violation::SharedFence {
                    resource: self.inner.resource.clone(),
                    fence,
                    first_client,
                    second_client: client,
                    at,
                });
            }
            Some((highest, _)) if fence == highest => {}
            _ => state.highest = Some((fence, client)),
        }
        state.counts.entry(client).or_default().accepted += 1;
        Ok(())
    }

    /// The highest fence accepted so far.
    pub fn highest(&self) -> Option<u64> {
        lock(&self.inner.state).highest.map(|(fence, _)| fence)
    }

    /// Accepted and rejected writes per client.
    pub fn counts(&self) -> BTreeMap<usize, FencedCounts> {
        lock(&self.inner.state).counts.clone()
    }

    /// Accepted and rejected writes over all clients.
    pub fn totals(&self) -> FencedCounts {
        lock(&self.inner.state)
            .counts
            .values()
            .fold(FencedCounts::default(), |sum, c| FencedCounts {
                accepted: sum.accepted + c.accepted,
                rejected: sum.rejected + c.rejected,
            })
    }

    /// Every shared fence seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.inner.state).violations.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Verdict
// ---------------------------------------------------------------------------------------------

/// One safety violation found by a checker or a witness.
///
/// `Display` prints times in milliseconds from the violation's own first instant;
/// [`display_from`](Violation::display_from) (used by the [`Report`]) prints them from a given
/// origin instead.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Two leases of different tokens on one resource overlap ([`check_overlaps`]).
    Overlap {
        /// The resource.
        resource: String,
        /// The lease that started first.
        first: Lease,
        /// The lease that started while `first` was still held.
        second: Lease,
        /// Start of the overlap.
        from: Instant,
        /// End of the overlap; `None` if it never ended.
        until: Option<Instant>,
    },
    /// An acquire that began after another had returned got a fence that is not higher
    /// ([`check_fence_order`]).
    FenceOrder {
        /// The resource.
        resource: String,
        /// The acquire that returned first.
        earlier: Acquisition,
        /// The acquire that started after `earlier` returned.
        later: Acquisition,
    },
    /// A client entered a critical section while others were inside ([`OccupancyWitness`]).
    DoubleOccupancy {
        /// The resource.
        resource: String,
        /// Who was inside.
        holders: Vec<Occupant>,
        /// Who entered.
        intruder: Occupant,
    },
    /// A write did not raise a [`LostUpdateRegister`]: its writer read before another critical
    /// section committed.
    StaleWrite {
        /// The resource.
        resource: String,
        /// The value written.
        written: u64,
        /// The value it replaced.
        overwritten: u64,
        /// When it was written.
        at: Instant,
    },
    /// A [`LostUpdateRegister`] ended below the number of committed critical sections.
    LostUpdate {
        /// The resource.
        resource: String,
        /// The register's final value.
        final_value: u64,
        /// How many critical sections committed.
        expected: u64,
        /// How many writes the register saw.
        writes: u64,
    },
    /// Two clients wrote to a [`FencedRegister`] under the same fence.
    SharedFence {
        /// The resource.
        resource: String,
        /// The shared fence.
        fence: u64,
        /// The client that first wrote with it.
        first_client: usize,
        /// Another client writing with it.
        second_client: usize,
        /// When the second client wrote.
        at: Instant,
    },
}

impl Violation {
    /// The resource involved.
    pub fn resource(&self) -> &str {
        match self {
            Violation::Overlap { resource, .. }
            | Violation::FenceOrder { resource, .. }
            | Violation::DoubleOccupancy { resource, .. }
            | Violation::StaleWrite { resource, .. }
            | Violation::LostUpdate { resource, .. }
            | Violation::SharedFence { resource, .. } => resource,
        }
    }

    /// The closed time window the violation concerns, used to find the faults active during it;
    /// `None` when it is a whole-run verdict ([`Violation::LostUpdate`]). The window's end is
    /// `None` when it runs to the end of the run.
    ///
    /// Overlap: the overlap itself. Fence order: from the earlier acquire's start to the later one's
    /// end. Double occupancy: from the first holder's entry to the intruder's. Stale write and
    /// shared fence: the instant of the offending write.
    pub fn window(&self) -> Option<(Instant, Option<Instant>)> {
        match self {
            Violation::Overlap { from, until, .. } => Some((*from, *until)),
            Violation::FenceOrder { earlier, later, .. } => {
                Some((earlier.start.min(later.start), Some(later.end)))
            }
            Violation::DoubleOccupancy {
                holders, intruder, ..
            } => {
                let first = holders
                    .iter()
                    .map(|h| h.entered)
                    .min()
                    .map_or(intruder.entered, |e| e.min(intruder.entered));
                Some((first, Some(intruder.entered)))
            }
            Violation::StaleWrite { at, .. } | Violation::SharedFence { at, .. } => {
                Some((*at, Some(*at)))
            }
            Violation::LostUpdate { .. } => None,
        }
    }

    /// The earliest instant the violation mentions.
    fn first_instant(&self) -> Option<Instant> {
        match self {
            Violation::Overlap { first, second, .. } => Some(first.start.min(second.start)),
            _ => self.window().map(|(from, _)| from),
        }
    }

    /// Displays the violation with times in milliseconds from `origin`.
    pub fn display_from(&self, origin: Instant) -> impl fmt::Display + '_ {
        ViolationFrom {
            violation: self,
            origin,
        }
    }

    fn write_from(&self, f: &mut fmt::Formatter<'_>, origin: Instant) -> fmt::Result {
        let at = |t: Instant| Ms { origin, t };
        let until = |t: Option<Instant>| Until { origin, t };
        match self {
            Violation::Overlap {
                resource,
                first,
                second,
                from,
                until: end,
            } => {
                write!(f, "overlapping leases on {resource:?}: ")?;
                write_lease(f, first, origin)?;
                f.write_str(" and ")?;
                write_lease(f, second, origin)?;
                write!(f, "; overlap [{}, {})", at(*from), until(*end))
            }
            Violation::FenceOrder {
                resource,
                earlier,
                later,
            } => {
                let how = if earlier.fence == later.fence {
                    "repeated"
                } else {
                    "went backwards"
                };
                write!(f, "fence {how} on {resource:?}: ")?;
                write_acquisition(f, earlier, origin)?;
                f.write_str(" returned before ")?;
                write_acquisition(f, later, origin)?;
                write!(f, " started, yet {} ≥ {}", earlier.fence, later.fence)
            }
            Violation::DoubleOccupancy {
                resource,
                holders,
                intruder,
            } => {
                write!(
                    f,
                    "two holders inside {resource:?}: client {} entered at {} while ",
                    intruder.client,
                    at(intruder.entered)
                )?;
                for (i, holder) in holders.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(
                        f,
                        "client {} (entered at {})",
                        holder.client,
                        at(holder.entered)
                    )?;
                }
                f.write_str(" was inside")
            }
            Violation::StaleWrite {
                resource,
                written,
                overwritten,
                at: when,
            } => write!(
                f,
                "stale write to {resource:?} at {}: wrote {written} over {overwritten}, \
                 so its writer read before another critical section committed",
                at(*when)
            ),
            Violation::LostUpdate {
                resource,
                final_value,
                expected,
                writes,
            } => write!(
                f,
                "lost update on {resource:?}: final value {final_value}, \
                 but {expected} critical sections committed ({writes} writes)"
            ),
            Violation::SharedFence {
                resource,
                fence,
                first_client,
                second_client,
                at: when,
            } => write!(
                f,
                "shared fence on {resource:?}: client {second_client} wrote with fence {fence} \
                 at {}, already used by client {first_client}",
                at(*when)
            ),
        }
    }
}

fn write_lease(f: &mut fmt::Formatter<'_>, lease: &Lease, origin: Instant) -> fmt::Result {
    write!(f, "client {} (token {}", lease.client, lease.token)?;
    if let Some(fence) = lease.fence {
        write!(f, ", fence {fence}")?;
    }
    write!(
        f,
        ") held [{}, {})",
        Ms {
            origin,
            t: lease.start
        },
        Until {
            origin,
            t: lease.end
        }
    )
}

fn write_acquisition(
    f: &mut fmt::Formatter<'_>,
    acquisition: &Acquisition,
    origin: Instant,
) -> fmt::Result {
    write!(
        f,
        "client {} (token {}, fence {}, acquire [{}, {}])",
        acquisition.client,
        acquisition.token,
        acquisition.fence,
        Ms {
            origin,
            t: acquisition.start
        },
        Ms {
            origin,
            t: acquisition.end
        }
    )
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.first_instant().unwrap_or_else(Instant::now);
        self.write_from(f, origin)
    }
}

struct ViolationFrom<'a> {
    violation: &'a Violation,
    origin: Instant,
}

impl fmt::Display for ViolationFrom<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.violation.write_from(f, self.origin)
    }
}

/// An instant printed as signed milliseconds from an origin.
struct Ms {
    origin: Instant,
    t: Instant,
}

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.t.checked_duration_since(self.origin) {
            Some(after) => write!(f, "{:.1}ms", after.as_secs_f64() * 1e3),
            None => write!(f, "-{:.1}ms", (self.origin - self.t).as_secs_f64() * 1e3),
        }
    }
}

/// The end of a window, or "end of run" when it has none.
struct Until {
    origin: Instant,
    t: Option<Instant>,
}

impl fmt::Display for Until {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.t {
            Some(t) => Ms {
                origin: self.origin,
                t,
            }
            .fmt(f),
            None => f.write_str("end of run"),
        }
    }
}

/// Successful and failed attempts of one [`OpKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpCounts {
    /// Attempts that succeeded.
    pub ok: usize,
    /// Attempts that failed.
    pub failed: usize,
}

impl fmt::Display for OpCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ok / {} failed", self.ok, self.failed)
    }
}

/// The verdict on a history: every violation found plus counts for context.
///
/// `Display` prints a summary, the faults, and each violation with the pair involved and the faults
/// active during its window; print it as the chaos test's failure message.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The history's origin; times are printed as offsets from it.
    pub origin: Instant,
    /// Acquire attempts.
    pub acquires: OpCounts,
    /// Extend attempts.
    pub extends: OpCounts,
    /// Release attempts.
    pub releases: OpCounts,
    /// Successful acquires per resource.
    pub acquired: BTreeMap<String, usize>,
    /// Writes to the [`FencedRegister`]s created through the history, per resource.
    pub fenced_writes: BTreeMap<String, FencedCounts>,
    /// Every fault recorded.
    pub faults: Vec<Fault>,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// A report with the counts of `ops`, the given faults and no violations yet; add them with
    /// [`add_violations`](Report::add_violations). [`History::check`] builds one for you.
    pub fn new(origin: Instant, ops: &[Op], faults: Vec<Fault>) -> Self {
        let mut report = Self {
            origin,
            acquires: OpCounts::default(),
            extends: OpCounts::default(),
            releases: OpCounts::default(),
            acquired: BTreeMap::new(),
            fenced_writes: BTreeMap::new(),
            faults,
            violations: Vec::new(),
        };
        for op in ops {
            let counts = match op.kind {
                OpKind::Acquire => &mut report.acquires,
                OpKind::Extend => &mut report.extends,
                OpKind::Release => &mut report.releases,
            };
            if op.succeeded() {
                counts.ok += 1;
                if op.kind == OpKind::Acquire {
                    *report.acquired.entry(op.resource.clone()).or_default() += 1;
                }
            } else {
                counts.failed += 1;
            }
        }
        report
    }

    /// Adds violations found elsewhere (for example by a witness not created through the history).
    pub fn add_violations(&mut self, violations: impl IntoIterator<Item = Violation>) {
        self.violations.extend(violations);
    }

    /// Whether no violation was found.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// The faults active at some point of `violation`'s [window](Violation::window).
    pub fn active_faults(&self, violation: &Violation) -> Vec<&Fault> {
        match violation.window() {
            Some((from, until)) => self
                .faults
                .iter()
                .filter(|fault| fault.active_during(from, until))
                .collect(),
            None => Vec::new(),
        }
    }

    fn write_fault(&self, f: &mut fmt::Formatter<'_>, fault: &Fault) -> fmt::Result {
        write!(
            f,
            "{} {} [{}, {})",
            fault.id,
            fault.description,
            Ms {
                origin: self.origin,
                t: fault.start
            },
            Until {
                origin: self.origin,
                t: fault.end
            }
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops = self.acquires.ok
            + self.acquires.failed
            + self.extends.ok
            + self.extends.failed
            + self.releases.ok
            + self.releases.failed;
        writeln!(
            f,
            "history: {ops} ops (acquire {}, extend {}, release {}), {} fault(s); times in ms from the start",
            self.acquires,
            self.extends,
            self.releases,
            self.faults.len()
        )?;
        if !self.acquired.is_empty() {
            f.write_str("acquired:")?;
            for (resource, n) in &self.acquired {
                write!(f, " {resource:?} {n}")?;
            }
            writeln!(f)?;
        }
        for (resource, counts) in &self.fenced_writes {
            writeln!(
                f,
                "fenced writes to {resource:?}: {} accepted, {} rejected as stale",
                counts.accepted, counts.rejected
            )?;
        }
        for fault in &self.faults {
            f.write_str("fault ")?;
            self.write_fault(f, fault)?;
            writeln!(f)?;
        }
        if self.is_clean() {
            return writeln!(f, "violations: 0");
        }
        writeln!(f, "violations: {}", self.violations.len())?;
        for (i, violation) in self.violations.iter().enumerate() {
            writeln!(f, "{:>3}. {}", i + 1, violation.display_from(self.origin))?;
            if violation.window().is_some() {
                let active = self.active_faults(violation);
                if active.is_empty() {
                    writeln!(f, "     faults active: none")?;
                } else {
                    writeln!(f, "     faults active:")?;
                    for fault in active {
                        f.write_str("       ")?;
                        self.write_fault(f, fault)?;
                        writeln!(f)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::thread;
    use std::time::Duration;

    /// Instants at millisecond offsets from a common base.
    struct Clock(Instant);

    impl Clock {
        fn new() -> Self {
            Clock(Instant::now())
        }

        fn at(&self, ms: u64) -> Instant {
            self.0 + Duration::from_millis(ms)
        }

        /// A successful acquire over `[start, end]` ms, valid until `valid_until` ms.
        fn acquire(
            &self,
            client: usize,
            token: &str,
            (start, end): (u64, u64),
            valid_until: u64,
            fence: Option<u64>,
        ) -> Op {
            Op {
                client,
                resource: "r".into(),
                token: token.into(),
                kind: OpKind::Acquire,
                start: self.at(start),
                end: self.at(end),
                outcome: Outcome::Ok {
                    valid_until: Some(self.at(valid_until)),
                },
                fence,
            }
        }

        fn extend(&self, client: usize, token: &str, (start, end): (u64, u64), until: u64) -> Op {
            Op {
                kind: OpKind::Extend,
                fence: None,
                ..self.acquire(client, token, (start, end), until, None)
            }
        }

        fn release(&self, client: usize, token: &str, (start, end): (u64, u64)) -> Op {
            Op {
                kind: OpKind::Release,
                outcome: Outcome::Ok { valid_until: None },
                fence: None,
                ..self.acquire(client, token, (start, end), end, None)
            }
        }
    }

    fn failed(op: Op) -> Op {
        Op {
            outcome: Outcome::Failed {
                reason: "no quorum".into(),
            },
            ..op
        }
    }

    #[test]
    fn non_overlapping_leases_pass() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(2)),
            c.acquire(2, "tok-c", (200, 203), 300, Some(3)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn overlapping_leases_of_two_tokens_are_reported_with_both() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (50, 60), 150, Some(2)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::Overlap {
            first,
            second,
            from,
            until,
            ..
        } = &violations[0]
        else {
            panic!("not an overlap: {violations:?}");
        };
        assert_eq!((first.client, first.fence), (0, Some(1)));
        assert_eq!(first.token, TokenFingerprint::of("tok-a"));
        assert_eq!((second.client, second.fence), (1, Some(2)));
        assert_eq!(second.token, TokenFingerprint::of("tok-b"));
        assert_eq!((*from, *until), (c.at(60), Some(c.at(100))));
    }

    #[test]
    fn leases_of_one_token_never_overlap_themselves() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.extend(0, "tok-a", (30, 35), 130),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn an_extend_that_pushes_a_lease_into_a_later_holders_lease_is_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.extend(0, "tok-a", (90, 95), 190),
            // B acquires after A's original deadline but inside the extended one.
            c.acquire(1, "tok-b", (120, 125), 220, Some(2)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::Overlap {
            first,
            second,
            until,
            ..
        } = &violations[0]
        else {
            panic!("not an overlap: {violations:?}");
        };
        assert_eq!((first.client, first.end), (0, Some(c.at(190))));
        assert_eq!(second.client, 1);
        assert_eq!(*until, Some(c.at(190)));
    }

    #[test]
    fn an_extend_after_expiry_does_not_cover_the_gap() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            // B holds [105, 140) while A's lease has lapsed ...
            c.acquire(1, "tok-b", (100, 105), 200, Some(2)),
            c.release(1, "tok-b", (140, 145)),
            // ... then A's (buggy) extend succeeds after B released.
            c.extend(0, "tok-a", (150, 155), 250),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_failed_extend_does_not_lengthen_the_lease() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            failed(c.extend(0, "tok-a", (90, 95), 190)),
            c.acquire(1, "tok-b", (120, 125), 220, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_release_ends_the_lease() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.release(0, "tok-a", (40, 45)),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_lease_ends_when_release_is_called_even_if_the_release_reports_failure() {
        let c = Clock::new();
        // The release's replies were held back: it failed at 80, but B got in at 50.
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            failed(c.release(0, "tok-a", (40, 80))),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_lease_still_held_when_the_next_release_starts_is_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
            c.release(0, "tok-a", (60, 65)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            matches!(&violations[0], Violation::Overlap { until, .. } if *until == Some(c.at(60)))
        );
    }

    #[test]
    fn a_successful_acquire_without_validity_is_held_until_released() {
        let c = Clock::new();
        let mut a = c.acquire(0, "tok-a", (0, 5), 0, Some(1));
        a.outcome = Outcome::Ok { valid_until: None };
        let ops = vec![a, c.acquire(1, "tok-b", (500, 505), 600, Some(2))];
        assert_eq!(check_overlaps(&ops).len(), 1);
    }

    #[test]
    fn failed_acquires_and_other_resources_hold_no_lease() {
        let c = Clock::new();
        let mut other = c.acquire(1, "tok-b", (10, 15), 100, Some(1));
        other.resource = "other".into();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            other,
            failed(c.acquire(2, "tok-c", (20, 25), 120, None)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn fences_that_go_backwards_in_real_time_order_are_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(7)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(5)),
        ];
        let violations = check_fence_order(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::FenceOrder { earlier, later, .. } = &violations[0] else {
            panic!("not a fence violation: {violations:?}");
        };
        assert_eq!((earlier.client, earlier.fence), (0, 7));
        assert_eq!((later.client, later.fence), (1, 5));
        assert!(violations[0].to_string().contains("went backwards"));
    }

    #[test]
    fn fences_that_repeat_in_real_time_order_are_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(3)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(4)),
            c.acquire(2, "tok-c", (200, 205), 300, Some(4)),
        ];
        let violations = check_fence_order(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::FenceOrder { earlier, later, .. } = &violations[0] else {
            panic!("not a fence violation: {violations:?}");
        };
        assert_eq!((earlier.client, later.client), (1, 2));
        assert!(violations[0].to_string().contains("repeated"));
    }

    #[test]
    fn increasing_fences_pass_and_unfenced_or_failed_acquires_are_ignored() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(3)),
            c.acquire(1, "tok-b", (100, 105), 200, None),
            failed(c.acquire(2, "tok-c", (150, 155), 250, Some(1))),
            c.acquire(3, "tok-d", (200, 205), 300, Some(9)),
        ];
        assert_eq!(check_fence_order(&ops), vec![]);
    }

    #[test]
    fn concurrent_acquires_are_not_ordered_by_fence() {
        let c = Clock::new();
        // B started before A returned: either order of fences is acceptable.
        let ops = vec![
            c.acquire(0, "tok-a", (0, 10), 100, Some(2)),
            c.acquire(1, "tok-b", (5, 15), 100, Some(1)),
        ];
        assert_eq!(check_fence_order(&ops), vec![]);
    }

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

    #[test]
    fn report_display_names_the_faults_active_at_a_violation() {
        let history = History::new();
        let c = Clock(history.origin());
        {
            let mut recorded = lock(&history.inner);
            for (description, start, end) in [
                ("node 1 killed", 0, Some(20)),
                ("node 2 paused", 30, Some(80)),
                ("node 3 partitioned", 90, None),
                ("node 4 slow", 300, None),
            ] {
                let id = FaultId(recorded.faults.len());
                recorded.faults.push(Fault {
                    id,
                    description: description.into(),
                    start: c.at(start),
                    end: end.map(|end| c.at(end)),
                });
            }
        }
        history.record(c.acquire(0, "tok-a-secret", (0, 5), 100, Some(1)));
        history.record(c.acquire(1, "tok-b-secret", (50, 60), 150, Some(2)));

        let report = history.check();
        assert!(!report.is_clean());
        let text = report.to_string();
        let (_, violation) = text.split_once("violations: 1").unwrap();
        // The overlap is [60, 100): node 2 (until 80) and node 3 (from 90) were active.
        assert!(violation.contains("node 2 paused"), "{text}");
        assert!(violation.contains("node 3 partitioned"), "{text}");
        assert!(!violation.contains("node 1 killed"), "{text}");
        assert!(!violation.contains("node 4 slow"), "{text}");
        assert!(violation.contains("[60.0ms, 100.0ms)"), "{text}");
        assert!(violation.contains("client 0") && violation.contains("client 1"));
        assert!(violation.contains(&TokenFingerprint::of("tok-a-secret").to_string()));
        assert!(violation.contains("fence 1") && violation.contains("fence 2"));
        assert!(!text.contains("secret"), "a token was printed: {text}");
    }

    #[test]
    fn ops_print_a_fingerprint_instead_of_the_token() {
        let c = Clock::new();
        let op = c.acquire(0, "tok-a-secret", (0, 5), 100, Some(1));
        let debug = format!("{op:?}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(debug.contains(&op.token_fingerprint().to_string()));
    }

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

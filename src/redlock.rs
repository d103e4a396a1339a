//! `Redlock`: the client. Fans each operation out to every node and decides on a quorum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::error::{ConfigError, Error, NodeError, NodeErrorKind};
use crate::fanout::Cleanup;
use crate::inner::Inner;
use crate::keys::{Acquired, AttemptInput, HandOff, Keys, Takeovers};
use crate::lock::Lock;
use crate::node::Node;
use crate::quorum::{self, Decision, Lease};
use crate::release::Rollback;
use crate::retry::DEFAULT_ACQUIRE_TIMEOUT;
use crate::seam;
use crate::stats::{Counters, Stats};
use crate::task_holds::TaskId;
use crate::telemetry::{Holding, Waiting};
use crate::token::LockToken;
use crate::wakeup::{Renewal, Waiter};

/// A distributed lock client over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside): share one per process. Connections to the nodes open on
/// first use, one multiplexed connection per node, and reconnect on their own.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # async fn run() -> Result<(), quorumlock::Error> {
/// let rl = Redlock::builder([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .build()?;
/// let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
/// // ... the critical section, finished well within lock.remaining() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    inner: Arc<Inner>,
}

/// Why one acquire attempt failed.
pub(crate) enum Failure {
    NotGranted {
        granted: usize,
        nodes: Vec<NodeError>,
    },
    Late {
        elapsed: Duration,
        ttl: Duration,
    },
}

impl Failure {
    /// `true` when a node refused because another token holds a key.
    pub(crate) fn is_contention(&self) -> bool {
        match self {
            Failure::NotGranted { nodes, .. } => nodes.iter().any(NodeError::is_contention),
            Failure::Late { .. } => false,
        }
    }
}

/// How an acquire loop goes on after a failed attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One attempt, never in line.
    Once,
    /// Within the acquire timeout and the retry count, in line once contended.
    Retry,
    /// As `Retry`, in line from the first attempt.
    Line,
    /// In line once contended, until it wins.
    UntilWon,
}

/// How many nodes answered [`Redlock::connect`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Health {
    /// Nodes that answered.
    pub reachable: usize,
    /// The nodes that did not, and why.
    pub unreachable: Vec<NodeError>,
}

impl Redlock {
    pub(crate) fn new(inner: Inner) -> Self {
        Redlock {
            inner: Arc::new(inner),
        }
    }

    /// The client's state, for the features built on the client.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// A snapshot of this client's counters (shared by all its clones): attempts, grants,
    /// contention, wake-ups, renewals, lost locks, and errors per node. Cheap: a handful of
    /// relaxed atomic loads, no I/O.
    pub fn stats(&self) -> Stats {
        self.inner.counters().snapshot(self.nodes())
    }

    /// How many nodes must agree: ⌊N/2⌋ + 1 of the **configured** nodes, however many are up.
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// How many nodes are configured.
    pub fn node_count(&self) -> usize {
        self.inner.all_nodes().len()
    }

    /// The nodes as `host:port`, in configuration order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.inner.all_nodes().iter().map(Node::id)
    }

    /// Connects to every node now, instead of on first use, and checks that no server is listed
    /// twice under different names (by its `run_id`), nor one Redis Cluster (by its nodes' ids).
    ///
    /// # Errors
    ///
    /// [`ConfigError::DuplicateNode`] when two nodes report the same `run_id`, or are nodes of
    /// one cluster;
    /// [`Error::Unavailable`] when fewer than a quorum answer. A minority down is not an error:
    /// it is reported in [`Health::unreachable`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn connect(&self) -> Result<Health, Error> {
        let answers =
            futures::future::join_all(self.inner.all_nodes().iter().map(Node::identities)).await;
        let mut seen: Vec<(String, &str)> = Vec::new();
        let mut unreachable = Vec::new();
        let mut reachable = 0;
        for (node, answer) in self.inner.all_nodes().iter().zip(answers) {
            match answer {
                Ok(identities) => {
                    for identity in identities {
                        if let Some((_, first)) = seen.iter().find(|(id, _)| *id == identity) {
                            return Err(ConfigError::DuplicateNode {
                                first: (*first).to_owned(),
                                second: node.id().to_owned(),
                                why: if identity.starts_with("cluster") {
                                    "the same Redis Cluster"
                                } else {
                                    "same run_id"
                                },
                            }
                            .into());
                        }
                        seen.push((identity, node.id()));
                    }
                    reachable += 1;
                }
                Err(e) => unreachable.push(e),
            }
        }
        if reachable < self.inner.quorum() {
            return Err(Error::Unavailable {
                reachable,
                quorum: self.inner.quorum(),
                nodes: unreachable,
            });
        }
        for e in &unreachable {
            tracing::warn!(error = %e, "node unreachable");
        }
        Ok(Health {
            reachable,
            unreachable,
        })
    }

    /// Acquires `resource` for `ttl`, waiting in line while it is held.
    ///
    /// The first attempt is a plain one. If it finds the resource held, this call takes a place
    /// in the resource's line on every master (ordered by arrival, the same on every master, and
    /// shared with every other client) and attempts again each time a release hands the lock to
    /// it — one waiter per release, across all clients — and at least every
    /// [retry delay](crate::RedlockBuilder::retry_delay) as a fallback. Attempts that lose to
    /// the line or to the holder do not use up the retry count: waiting is bounded by time.
    ///
    /// It returns [`Error::NotAcquired`] (or [`Error::ValidityExhausted`]) when
    /// * the [acquire timeout](crate::RedlockBuilder::acquire_timeout) (default
    ///   [`DEFAULT_ACQUIRE_TIMEOUT`](crate::DEFAULT_ACQUIRE_TIMEOUT)) has passed and the last
    ///   attempt failed: no attempt starts after it; or
    /// * [retry count](crate::RedlockBuilder::retry_count) + 1 attempts have failed for other
    ///   reasons than the line or the holder: nodes down, too slow, or a quorum granting too late.
    ///
    /// On success the lock is valid for [`Lock::remaining`]: the TTL minus the time the
    /// successful attempt took, minus the clock-drift allowance. Finish the critical section
    /// within it, or [`extend`](Lock::extend) it. A lock a release handed to this call in line
    /// comes with no attempt at all, valid for what the hand-off proved (at least about two
    /// thirds of the entry lease), and renews itself to the TTL in the background once a third
    /// of that has passed (see [`Lock::deadline`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] / [`Error::InvalidTtl`] for bad input (no node is contacted);
    /// [`Error::NotAcquired`] with every node's outcome when the last attempt failed to gather
    /// a quorum; [`Error::ValidityExhausted`] when a quorum answered too late to leave validity.
    /// Every failed attempt has been rolled back on all nodes.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped mid-attempt, the partial acquisition is released in the
    /// background (when a tokio runtime is running); no lock is returned. A place in line is
    /// given up in the background too; if that fails it lapses within the entry lease.
    pub async fn acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.inner.lease(ttl)?;
        let keys = Keys::One(self.inner.key(resource)?);
        self.acquire_keys(resource, &keys, &lease, true).await
    }

    /// Makes exactly one attempt to acquire `resource` for `ttl`. It never takes a place in
    /// line: while others wait for the resource, it fails like any held resource's attempt.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Redlock::acquire), with `attempts` = 1.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Redlock::acquire).
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.inner.lease(ttl)?;
        let keys = Keys::One(self.inner.key(resource)?);
        self.acquire_keys(resource, &keys, &lease, false).await
    }

    /// The attempt loop of [`acquire`](Redlock::acquire) (`retry`) and
    /// [`try_acquire`](Redlock::try_acquire). `label` names the lock in errors and logs.
    pub(crate) async fn acquire_keys(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
        retry: bool,
    ) -> Result<Lock, Error> {
        let mode = if retry { Mode::Retry } else { Mode::Once };
        self.acquire_loop(label, keys, lease, mode).await
    }

    /// As [`acquire_keys`](Redlock::acquire_keys) with retries, but the first attempt is
    /// already a waiter's, in line: for a caller that knows the keys are contended (a
    /// semaphore whose every slot refused a plain attempt).
    pub(crate) async fn acquire_keys_in_line(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
    ) -> Result<Lock, Error> {
        self.acquire_loop(label, keys, lease, Mode::Line).await
    }

    /// As [`acquire_keys`](Redlock::acquire_keys) with retries, but with no acquire timeout
    /// and no retry count: a campaign waits in line until it wins, keeping its place (its
    /// arrival) all along, and fails only for what no retry can mend.
    pub(crate) async fn acquire_keys_until_won(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
    ) -> Result<Lock, Error> {
        self.acquire_loop(label, keys, lease, Mode::UntilWon).await
    }

    async fn acquire_loop(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
        mode: Mode,
    ) -> Result<Lock, Error> {
        let (retry, in_line) = (mode != Mode::Once, mode == Mode::Line);
        let span = tracing::debug_span!("acquire", resource = label, ttl = ?lease.ttl);
        let waiting = Waiting::start(keys.primitive());
        // A waiter's place in line is its arrival, not the end of its first attempt.
        let arrived = seam::wall_clock();
        let acquired = async move {
            if retry {
                // (A single attempt cannot wait for itself: it reports the contention.)
                self.not_held_by_this_task(label, keys)?;
            }
            let policy = self.inner.settings().retry;
            let wait = self
                .inner
                .settings()
                .acquire_timeout
                .unwrap_or(DEFAULT_ACQUIRE_TIMEOUT);
            let deadline = match mode {
                Mode::UntilWon => None,
                _ => seam::now().checked_add(wait),
            };
            // In line, a waiter attempts at least this often: each attempt renews its entry.
            let poll = lease.entry_lease() / 3;
            let (mut attempts, mut failures) = (0, 0);
            let enlist = || {
                let reserve = HandOff::for_lease(lease).reserve;
                let nodes = self.inner.nodes();
                let node_timeout = lease.node_timeout;
                let wakeup = self.inner.wakeup();
                wakeup.enlist(nodes, keys, arrived, reserve, node_timeout)
            };
            // A resource this client waited on lately is likely contended again: the first
            // attempt takes the place in line, instead of a plain attempt the line refuses (for
            // a read-write lock: it listens for releases from the first attempt on).
            let mut waiter: Option<Waiter> = None;
            let contended = in_line || self.inner.wakeup().waited_lately(keys);
            if retry && contended {
                waiter = enlist();
            }
            loop {
                attempts += 1;
                // A waiter that acquires leaves the other lines as it is dropped.
                // The first attempt of an acquire that retries may be a bare SET NX PX (see
                // `Node::set_nx`); a single attempt takes the script's way, which can tell a key
                // kept only for a line nobody waits in any more from a held one.
                let bare = retry && attempts == 1;
                let failure = match self
                    .attempt(label, keys, lease, waiter.as_ref(), bare)
                    .await
                {
                    Ok(lock) => return Ok(lock),
                    Err(failure) => failure,
                };
                let in_the_way = failure.is_contention();
                if !in_the_way {
                    failures += 1;
                }
                let out_of_retries = mode != Mode::UntilWon && failures >= policy.attempts();
                if !retry || out_of_retries {
                    return Err(self.give_up(label, failure, attempts));
                }
                let now = seam::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Err(self.give_up(label, failure, attempts));
                }
                if in_the_way && waiter.is_none() {
                    waiter = enlist();
                    if waiter.is_some() {
                        // Take the place in line (or, for a read-write lock, listen) and attempt
                        // now: the holder may have released before anything here could hear it.
                        continue;
                    }
                }
                let mut delay = seam::with_rng(|rng| policy.delay(rng));
                if waiter.is_some() && keys.waits_in_line() {
                    delay = delay.min(poll);
                }
                let until = now.checked_add(delay).unwrap_or(now);
                // The retry waits until the delay ends, or the acquire deadline if that is sooner.
                let last = deadline.filter(|d| *d <= until);
                let woken = match waiter.as_ref() {
                    Some(waiter) => waiter.wait_until(last.unwrap_or(until)).await,
                    // Nothing can cut the wait short: give up now rather than sleep to the end.
                    None if last.is_some() => false,
                    None => {
                        tokio::time::sleep_until(until.into()).await;
                        false
                    }
                };
                if woken {
                    Counters::bump(&self.inner.counters().wakeups);
                    if let Some(lock) = waiter
                        .as_ref()
                        .and_then(|w| self.hold_handed(label, keys, lease, w))
                    {
                        return Ok(lock);
                    }
                    tracing::debug!(attempts, "handed the lock by a release; attempting now");
                } else if last.is_some() {
                    return Err(self.give_up(label, failure, attempts));
                }
            }
        }
        .instrument(span)
        .await;
        waiting.end(&acquired);
        acquired
    }

    /// Refuses an acquire of a key this very task already holds through this client: it would
    /// wait for a release that only the waiting task could send. (Another task's acquire
    /// waits as usual; a lock taken under an owner id is reentrant by that id.)
    fn not_held_by_this_task(&self, label: &str, keys: &Keys) -> Result<(), Error> {
        if keys.held_by_id() {
            return Ok(());
        }
        let task = TaskId::current();
        let holds = self.inner.task_holds();
        match keys.iter().any(|key| holds.holds(key, task)) {
            true => Err(Error::AlreadyHeld {
                resource: label.to_owned(),
            }),
            false => Ok(()),
        }
    }

    pub(crate) fn give_up(&self, resource: &str, failure: Failure, attempts: u32) -> Error {
        match failure {
            Failure::NotGranted { granted, nodes } => Error::NotAcquired {
                resource: resource.to_owned(),
                granted,
                configured: self.inner.all_nodes().len(),
                quorum: self.inner.quorum(),
                attempts,
                nodes,
            },
            Failure::Late { elapsed, ttl } => Error::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed,
                ttl,
                attempts,
            },
        }
    }

    /// One attempt of the algorithm: fan out, decide early, check validity, fence, or roll back.
    /// A `waiter`'s attempt goes through the line of each key (see `wakeup`).
    pub(crate) async fn attempt(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
        waiter: Option<&Waiter>,
        bare: bool,
    ) -> Result<Lock, Failure> {
        // A read-write lock's waiter is woken by its releases but has no place in a line.
        let in_line = waiter.filter(|_| keys.waits_in_line()).map(Waiter::ticket);
        // What the replies tell of each master's clock, to judge a later hand-off by.
        let masters = waiter.filter(|_| in_line.is_some()).map(Waiter::masters);
        let token = keys.attempt_token(self.inner.stamps());
        let settings = self.inner.settings();
        let fenced = keys.fenced(settings.fencing, settings.fence_grace);
        // Armed until the lock is handed out: a dropped future releases on every node in the
        // background.
        Counters::bump(&self.inner.counters().attempts);
        let start = seam::now();
        let entry_lease = lease.entry_lease();
        // Under an owner id: where the attempt names a value for a takeover, and so where its
        // rollback puts back what it took.
        let takeovers = matches!(keys, Keys::Owned { .. }).then(|| {
            Arc::new(Takeovers::new(
                lease.ttl,
                token.clone(),
                self.inner.stamps().clone(),
            ))
        });
        let hand_off = HandOff {
            waiter: in_line.cloned(),
            requeue: in_line.map(|_| entry_lease),
            takeovers: takeovers.clone(),
            ..HandOff::for_lease(lease)
        };
        // By `start + ttl` every SET of the attempt that ran as it was sent has expired.
        let rollback = Rollback::new(
            &self.inner,
            keys,
            &token,
            hand_off.clone(),
            lease.node_timeout,
            start + lease.ttl,
        );

        let (ttl_ms, node_timeout) = (lease.ttl_ms, lease.node_timeout);
        let judge = |grant| match grant {
            Acquired::Granted(fences) => Ok(fences),
            Acquired::Held(_) => Err(NodeErrorKind::Held),
            Acquired::Line(_) => Err(NodeErrorKind::Line),
        };
        let (mut outcome, mut stragglers) = self
            .inner
            .fan_out(
                |rl, i| {
                    let (keys, token) = (keys.clone(), token.clone());
                    let ticket = in_line.cloned();
                    let masters = masters.cloned();
                    let takeovers = takeovers.clone();
                    async move {
                        let node = rl.node(i);
                        let in_line = ticket.as_ref().map(|t| (t, entry_lease));
                        let sent = seam::now();
                        if let Some(masters) = &masters {
                            masters.sending(i);
                        }
                        let reply = keys
                            .acquire_on(
                                node,
                                &AttemptInput {
                                    fenced,
                                    token: token.expose(),
                                    ttl_ms,
                                    in_line,
                                    takeovers: takeovers.as_deref(),
                                    bare,
                                },
                                node_timeout,
                            )
                            .await;
                        if let Some(masters) = &masters {
                            match &reply {
                                Ok(Acquired::Held(ran) | Acquired::Line(ran)) => {
                                    masters.answered(i, sent, *ran);
                                }
                                // This attempt's own token replaced whatever was handed there.
                                Ok(Acquired::Granted(_)) => masters.answered(i, sent, None),
                                Err(_) => masters.unanswered(i),
                            }
                        }
                        reply
                    }
                },
                judge,
                None,
            )
            .await;
        if let Some(takeovers) = &takeovers {
            // Its requests still out run late from here on: after a loss they take nothing
            // over; after a win only what the attempt named before it won, never a value it had
            // not seen (a grant of the same owner won since, perhaps by another process).
            takeovers.decided(outcome.decision == Decision::Won);
        }
        if waiter.is_some() && outcome.decision != Decision::Won {
            // A waiter that lost is going to wait anyway: hearing every node out first spares
            // the rollback the nodes that refused (all of them, when the key is held).
            stragglers.hear_out(&mut outcome, judge).await;
        }

        let failure = match outcome.decision {
            Decision::Won => {
                let fences = match fenced {
                    None => Ok(None),
                    Some(grace_ms) => self
                        .settle_fence(keys, &token, &outcome.yes, grace_ms, lease)
                        .await
                        .map(Some),
                };
                let elapsed = seam::elapsed(start);
                match (fences, quorum::validity(lease.ttl, elapsed, lease.drift)) {
                    (Ok(fences), Some(validity)) => {
                        rollback.disarm();
                        let deadline = start + elapsed + validity;
                        // A lock under an owner id is reentrant by that id: no task owns it.
                        let task = (!keys.held_by_id())
                            .then(|| self.inner.task_holds().enter(keys.iter(), deadline));
                        if let Some(waiter) = waiter {
                            waiter.granted_by(outcome.yes.iter().map(|(index, _)| *index));
                        }
                        Counters::bump(&self.inner.counters().acquired);
                        tracing::debug!(?elapsed, ?validity, "acquired");
                        let gate = stragglers.finish_before_release(Cleanup {
                            inner: self.inner.clone(),
                            keys: keys.clone(),
                            token: token.clone(),
                            node_timeout: lease.node_timeout,
                            hand_off: HandOff::for_lease(lease),
                        });
                        return Ok(Lock {
                            inner: self.inner.clone(),
                            resource: label.to_owned(),
                            keys: keys.clone(),
                            token,
                            lease: *lease,
                            deadline,
                            fences,
                            gate,
                            release_done: false,
                            task,
                            _holding: Holding::start(keys.primitive()),
                            renewal: None,
                        });
                    }
                    (Err(nodes), _) => Failure::NotGranted {
                        granted: outcome.yes.len(),
                        nodes,
                    },
                    (Ok(_), None) => Failure::Late {
                        elapsed,
                        ttl: lease.ttl,
                    },
                }
            }
            Decision::Lost | Decision::Pending => Failure::NotGranted {
                granted: outcome.yes.len(),
                nodes: outcome.no,
            },
        };
        if let Some(takeovers) = &takeovers {
            // A win that came too late or without its fences is a loss: its requests still out
            // take nothing more over (its rollback puts back what they took).
            takeovers.decided(false);
        }
        if failure.is_contention() {
            Counters::bump(&self.inner.counters().contended);
        }
        tracing::debug!(
            elapsed = ?seam::elapsed(start),
            granted = outcome.yes.len(),
            contended = failure.is_contention(),
            "attempt failed; rolling back"
        );
        stragglers.finish_then_release(Cleanup {
            inner: self.inner.clone(),
            keys: keys.clone(),
            token: token.clone(),
            node_timeout: lease.node_timeout,
            hand_off: hand_off.without_requeue(),
        });
        // A node that refused set nothing: only the others need the rollback.
        rollback.release_now(&outcome.refused).await;
        Err(failure)
    }

    /// The lock the releases handed to `waiter`, held without an attempt when a quorum of
    /// masters announced it since the waiter's last attempt and enough of it is left to renew
    /// (see `wakeup/handed.rs`); its renewal to the full TTL starts in the background. `None`
    /// when the waiter should attempt instead: too few announcements, too little left, or a
    /// lock the hand-off cannot give (anything but a plain mutex without fencing or durable
    /// votes).
    fn hold_handed(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
        waiter: &Waiter,
    ) -> Option<Lock> {
        let settings = self.inner.settings();
        if !matches!(keys, Keys::One(_)) || settings.fencing || settings.durable {
            return None;
        }
        let Some(deadline) = waiter.handed_until(settings.drift_factor) else {
            tracing::debug!(masters = ?waiter.masters(), "too few hand-offs to hold on");
            return None;
        };
        let left = deadline.saturating_duration_since(seam::now());
        if left < lease.node_timeout {
            tracing::debug!(?left, "too little of the hand-off left to hold on");
            return None;
        }
        waiter.holds_what_was_handed();
        let token = LockToken::handed(waiter.handed_token());
        let mark = self.inner.task_holds().enter(keys.iter(), deadline);
        let renewal = Arc::new(Renewal::default());
        crate::sync::spawn(renew_handed(
            self.inner.clone(),
            keys.clone(),
            token.clone(),
            *lease,
            (deadline, mark),
            Arc::downgrade(&renewal),
        ));
        Counters::bump(&self.inner.counters().acquired);
        tracing::debug!(remaining = ?deadline.saturating_duration_since(seam::now()), "handed the lock by a release");
        Some(Lock {
            inner: self.inner.clone(),
            resource: label.to_owned(),
            keys: keys.clone(),
            token,
            lease: *lease,
            deadline,
            fences: None,
            gate: None,
            release_done: false,
            task: Some(mark),
            _holding: Holding::start(keys.primitive()),
            renewal: Some(renewal),
        })
    }

    /// Makes the fence T = max of the granted counters safe to hand out (per key, for a lock
    /// over several keys): unless a quorum of nodes already holds T, raise the counter to T on
    /// the granting nodes that hold less, where this token is still present, until a quorum
    /// holds at least T. Then any later majority overlaps one of them, and its next fence goes
    /// past T (see `next_fence` in `lua/line.lua`: one above the counter, at least the master's
    /// clock floor, so that a counter that expired still yields a greater fence).
    async fn settle_fence(
        &self,
        keys: &Keys,
        token: &LockToken,
        granted: &[(usize, Vec<u64>)],
        grace_ms: u64,
        lease: &Lease,
    ) -> Result<Vec<u64>, Vec<NodeError>> {
        let fence: Vec<u64> = (0..keys.len())
            .map(|k| {
                granted
                    .iter()
                    .filter_map(|(_, f)| f.get(k).copied())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let at_fence = granted.iter().filter(|(_, f)| *f == fence).count();
        if at_fence >= self.inner.quorum() {
            return Ok(fence);
        }
        let behind: Vec<usize> = granted
            .iter()
            .filter(|(_, f)| *f != fence)
            .map(|(i, _)| *i)
            .collect();
        let raised = futures::future::join_all(behind.iter().map(|&i| {
            keys.raise_fence_on(
                self.inner.node(i),
                token.expose(),
                &fence,
                grace_ms,
                lease.node_timeout,
            )
        }))
        .await;
        let mut nodes = Vec::new();
        let mut holding = at_fence;
        for (&i, result) in behind.iter().zip(raised) {
            match result {
                Ok(true) => holding += 1,
                Ok(false) => nodes.push(NodeError::new(
                    self.inner.node(i).id(),
                    NodeErrorKind::TokenGone,
                )),
                Err(e) => nodes.push(e),
            }
        }
        if holding >= self.inner.quorum() {
            Ok(fence)
        } else {
            Err(nodes)
        }
    }
}

/// Renews a lock a release handed over (valid until `deadline`) to its full TTL, on a quorum
/// before that deadline, and tells `renewal` (and the task holds, through `mark`) the new
/// deadline. It waits a third of that validity first, as a hold renews at a third of its TTL:
/// most locks are released before, and need no renewal at all. Nothing is renewed once the lock
/// is gone (released or dropped), or was extended by its holder (`renewal` is gone with it then).
/// A renewal that fails leaves the first deadline: the holder sees it in [`Lock::remaining`], as
/// after any failed extend.
async fn renew_handed(
    inner: Arc<Inner>,
    keys: Keys,
    token: LockToken,
    lease: Lease,
    (deadline, mark): (Instant, crate::task_holds::HoldMark),
    renewal: std::sync::Weak<Renewal>,
) {
    let now = seam::now();
    let due = now + deadline.saturating_duration_since(now) / 3;
    tokio::time::sleep_until(due.into()).await;
    if renewal.strong_count() == 0 {
        return;
    }
    let start = seam::now();
    let outcome = crate::lock::extend_on_quorum(&inner, &keys, &token, &lease, deadline).await;
    let elapsed = seam::elapsed(start);
    let validity = quorum::validity(lease.ttl, elapsed, lease.drift);
    match (outcome.decision, validity) {
        (Decision::Won, Some(validity)) => {
            let won = start + elapsed + validity;
            let Some(renewal) = renewal.upgrade() else {
                return;
            };
            renewal.set(won);
            inner.task_holds().renew(mark, won);
            Counters::bump(&inner.counters().renewals);
        }
        _ => tracing::debug!(renewed = outcome.yes.len(), "a handed lock was not renewed"),
    }
}

//! `Lock`: a held lease on a resource, and the random token that proves whose it is.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::error::{Error, NodeErrorKind};
use crate::fanout::{Outcome, ReleaseGate};
use crate::inner::Inner;
use crate::keys::HandOff;
use crate::keys::Keys;
use crate::quorum::Lease;
use crate::quorum::{self, Decision};
use crate::release::spawn_release;
use crate::release::Released;
use crate::seam;
use crate::stats::Counters;
use crate::task_holds::HoldMark;
use crate::telemetry::Holding;
use crate::token::LockToken;
use crate::wakeup::Renewal;

/// A lock held on a quorum of nodes until [`deadline`](Lock::deadline).
///
/// Release it with [`release`](Lock::release). A `Lock` dropped without release is released in
/// the background when a tokio runtime is running; otherwise its keys expire at the TTL. A
/// release (explicit or from `Drop`) hands the lock to the first client waiting in line.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
/// let mut lock = rl.acquire("reports:nightly", Duration::from_secs(30)).await?;
/// println!("holding {} for {:?}", lock.resource(), lock.remaining());
/// lock.extend(Duration::from_secs(30)).await?;
/// lock.release().await?;
/// # Ok(()) }
/// ```
// The fields are crate-visible so that the attempt that won builds the lock in one struct literal,
// handing over everything it learned.
pub struct Lock {
    pub(crate) inner: Arc<Inner>,
    /// The resource name; for a lock over several keys, their names joined by `", "`.
    pub(crate) resource: String,
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) lease: Lease,
    pub(crate) deadline: Instant,
    /// One fencing token per key, when fencing is on.
    pub(crate) fences: Option<Vec<u64>>,
    /// Shared with the background task finishing this lock's straggling acquire requests, if
    /// any were still in flight when the quorum granted.
    pub(crate) gate: Option<Arc<ReleaseGate>>,
    /// Set once [`release`](Lock::release) has heard from a quorum, so that `Drop` sends the
    /// release again only when it was cancelled midway.
    pub(crate) release_done: bool,
    /// The task that acquired the lock, noted in the client's `TaskHolds` until the lock is
    /// released or dropped (none for a lock taken under an owner id).
    pub(crate) task: Option<HoldMark>,
    /// Counts the lock in the held gauge until it is dropped (see `telemetry`): kept for its
    /// `Drop` alone.
    pub(crate) _holding: Holding,
    /// For a lock a release handed over, valid at first only as long as the hand-off could
    /// prove: the renewal to the full TTL that runs in the background once a third of that has
    /// passed (see `wakeup/handed.rs`). Dropping it calls the renewal off.
    pub(crate) renewal: Option<Arc<Renewal>>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resource", &self.resource)
            .field("token", &self.token)
            .field("remaining", &self.remaining())
            .field("fence", &self.fences)
            .finish()
    }
}

impl Lock {
    /// The client's state.
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// One fencing token per key, in key order, when fencing is on.
    pub(crate) fn fences(&self) -> Option<&[u64]> {
        self.fences.as_deref()
    }

    /// The resource name this lock holds.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// This holder's token.
    pub fn token(&self) -> &LockToken {
        &self.token
    }

    /// The fencing token, when the client was built with
    /// [`fencing(true)`](crate::RedlockBuilder::fencing): strictly greater than that of every
    /// earlier holder of the resource. Pass it to the storage you protect and let it reject
    /// writes carrying a smaller one.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fences.as_ref().and_then(|f| f.first().copied())
    }

    /// The TTL of the last acquire or extend, in whole milliseconds.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    /// The instant the lock stops being valid: the start of the acquire (or extend) that set it,
    /// plus the TTL, minus the clock-drift allowance. A lock a release handed over in line is
    /// valid at first for what the hand-off proved (at least about two thirds of the line's
    /// entry lease), and renews itself to the TTL once a third of that has passed.
    pub fn deadline(&self) -> Instant {
        let renewed = self.renewal.as_ref().and_then(|r| r.won());
        renewed.map_or(self.deadline, |won| won.max(self.deadline))
    }

    /// Validity left; [`Duration::ZERO`] once expired.
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(seam::now())
    }

    /// `true` while validity is left.
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Renews the lock for `ttl` from now, on a quorum of nodes, before the current deadline.
    ///
    /// An extend never shortens the lock: each key keeps the later of its expiry and `ttl`
    /// from when the node runs the request (`PEXPIRE … GT`), and on success the deadline
    /// becomes the later of the old one and `start + ttl − drift`, `start` being when this
    /// extend began. So a request that runs late on a node (a dropped extend's, one on a
    /// connection retired while it was under way, a handed lock's background renewal) can never
    /// cut a key below what a later request proved: every deadline this lock reports holds
    /// whatever runs after it.
    ///
    /// On failure nothing is deleted on any node, and the deadline stays as it was.
    ///
    /// # Errors
    ///
    /// [`Error::Expired`] when the lock's validity has already run out (no node is contacted);
    /// [`Error::InvalidTtl`] for an unusable TTL; [`Error::NotExtended`] when fewer than a
    /// quorum of nodes confirmed before the current deadline, with every node's outcome.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if dropped, the deadline is as after a failure. Nodes that received the
    /// request may still renew the key, which only delays other clients.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.extend_telling(ttl, |_| ()).await
    }

    /// [`extend`](Lock::extend), calling `moved` with the new deadline when a win moves it, so
    /// that a wrapper sharing the deadline (a [`ReentrantLock`](crate::ReentrantLock)'s holds)
    /// sees what the lock sees.
    pub(crate) async fn extend_telling(
        &mut self,
        ttl: Duration,
        moved: impl Fn(Instant),
    ) -> Result<(), Error> {
        let lease = self.inner.lease(ttl)?;
        // What a hand-off's renewal won so far counts (no request shortens a key), and the
        // renewal stops here: this extend takes over.
        if let Some(renewal) = self.renewal.take() {
            self.deadline = self.deadline.max(renewal.won().unwrap_or(self.deadline));
        }
        if !self.is_valid() {
            return Err(Error::Expired {
                resource: self.resource.clone(),
            });
        }
        let span = tracing::debug_span!("extend", resource = %self.resource, ttl = ?lease.ttl);
        let start = seam::now();
        // Confirmations that arrive after the current deadline do not count: by then another
        // client may hold the lock.
        let outcome = extend_on_quorum(&self.inner, &self.keys, &self.token, &lease, self.deadline)
            .instrument(span.clone())
            .await;
        let elapsed = seam::elapsed(start);
        if outcome.decision == Decision::Won {
            if let Some(validity) = quorum::validity(lease.ttl, elapsed, lease.drift) {
                self.lease = lease;
                // The keys of the old quorum still live to the old deadline: a win can only
                // add to it.
                self.deadline = self.deadline.max(start + elapsed + validity);
                self.renew_task();
                moved(self.deadline);
                Counters::bump(&self.inner.counters().renewals);
                span.in_scope(|| tracing::debug!(?elapsed, ?validity, "extended"));
                return Ok(());
            }
        }
        span.in_scope(|| tracing::debug!(?elapsed, extended = outcome.yes.len(), "not extended"));
        Err(Error::NotExtended {
            resource: self.resource.clone(),
            extended: outcome.yes.len(),
            quorum: self.inner.quorum(),
            nodes: outcome.no,
        })
    }

    /// Releases the lock on every node (compare-and-delete: a key that expired or was taken by
    /// another holder is left alone). Returns once a quorum has confirmed; the releases still in
    /// flight then finish in the background, each bounded by the node timeout.
    ///
    /// # Errors
    ///
    /// [`Error::NotReleased`] when fewer than a quorum of nodes confirmed; those that did not
    /// answer keep the key until its TTL runs out.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway, the release is sent again in the background from `Drop`.
    pub async fn release(mut self) -> Result<Released, Error> {
        self.leave_task();
        // Nodes whose acquire request is still in flight are released once it has completed.
        let behind = self
            .gate
            .as_ref()
            .map(|gate| gate.close_for_release())
            .unwrap_or_default();
        let span = tracing::debug_span!("release", resource = %self.resource);
        let (released, nodes) = self
            .inner
            .release_at_quorum(
                &self.keys,
                &self.token,
                &HandOff::for_lease(&self.lease),
                self.lease.node_timeout,
                behind,
            )
            .instrument(span)
            .await;
        self.release_done = true;
        let confirmed = released.deleted + released.absent;
        let quorum = self.inner.quorum();
        if confirmed >= quorum {
            Ok(released)
        } else {
            Err(Error::NotReleased {
                resource: std::mem::take(&mut self.resource),
                confirmed,
                quorum,
                nodes,
            })
        }
    }

    /// Takes the lock out of its task's holds: from now on that task may acquire it again
    /// (and wait for it).
    fn leave_task(&mut self) {
        if let Some(mark) = self.task.take() {
            self.inner.task_holds().leave(mark);
        }
    }

    /// Tells the client's task holds the new deadline.
    fn renew_task(&self) {
        if let Some(mark) = self.task {
            self.inner.task_holds().renew(mark, self.deadline);
        }
    }

    /// Closes the gate to the background task finishing the acquire requests still in flight,
    /// and returns those nodes: the task releases each once its request has completed.
    fn close_gate(&self) -> Vec<usize> {
        self.gate
            .as_ref()
            .map(|gate| gate.close())
            .unwrap_or_default()
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.leave_task();
        // Always: a late acquire request must not leave its key behind, valid or not.
        let in_flight = self.close_gate();
        // Expired or not: a key a master still keeps past the deadline (the drift allowance)
        // is released now and handed to the line, instead of making the line wait out its TTL.
        if !self.release_done {
            spawn_release(
                self.inner.clone(),
                self.keys.clone(),
                self.token.clone(),
                HandOff::for_lease(&self.lease),
                self.lease.node_timeout,
                in_flight,
            );
        }
    }
}

/// Compare-and-`PEXPIRE` of `keys` for `lease` on every node, decided on a quorum; confirmations
/// after `deadline` do not count. Nodes still answering after the decision finish in the
/// background. Shared by [`Lock::extend`] and the renewal of a lock a release handed over.
pub(crate) async fn extend_on_quorum(
    inner: &Arc<Inner>,
    keys: &Keys,
    token: &LockToken,
    lease: &Lease,
    deadline: Instant,
) -> Outcome<()> {
    let (ttl_ms, node_timeout) = (lease.ttl_ms, lease.node_timeout);
    let (outcome, stragglers) = inner
        .fan_out(
            |rl, i| {
                let (keys, token) = (keys.clone(), token.clone());
                async move {
                    keys.extend_on(rl.node(i), token.expose(), ttl_ms, node_timeout)
                        .await
                }
            },
            |renewed| match renewed {
                true => Ok(()),
                false => Err(NodeErrorKind::TokenGone),
            },
            Some(deadline),
        )
        .await;
    stragglers.finish();
    outcome
}

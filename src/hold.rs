//! Holding a lock for as long as the work takes: [`Redlock::with_lock`] acquires, renews the
//! lease in the background, signals its loss, and releases at the end.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::watch;
use tracing::Instrument;

use crate::error::{Error, LossReason, NodeError};
use crate::lock::Lock;
use crate::redlock::Redlock;
use crate::seam;
use crate::stats::Counters;
use crate::token::LockToken;

/// How [`Redlock::with_lock_opts`] holds a lock. The defaults suit most uses; every setter is
/// optional and none can fail (the combination is checked when the lock is taken).
///
/// ```
/// use std::time::Duration;
/// use quorumlock::HoldOptions;
///
/// let opts = HoldOptions::new()
///     .max_hold(Duration::from_secs(600)) // never hold it longer than ten minutes
///     .grace(Duration::from_millis(500)); // give the body half a second to stop on its own
/// ```
#[derive(Debug, Clone, Default)]
pub struct HoldOptions {
    max_hold: Option<Duration>,
    renew_every: Option<Duration>,
    loss_margin: Option<Duration>,
    grace: Duration,
}

impl HoldOptions {
    /// The defaults: no hold limit, renewal every TTL / 3, loss signalled TTL / 10 before the
    /// deadline, no grace.
    pub fn new() -> Self {
        HoldOptions::default()
    }

    /// The longest the lock is held. Once this much time has passed since it was acquired, the
    /// body is stopped as on a loss, the lock released, and `with_lock` returns
    /// [`Error::Lost`] with [`LossReason::HoldLimit`]. Default: no limit.
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// How long after a successful acquire or renewal the next renewal is sent. Default: a
    /// third of the TTL. It must leave room for a renewal before the loss margin.
    pub fn renew_every(mut self, interval: Duration) -> Self {
        self.renew_every = Some(interval);
        self
    }

    /// How long before the lease's deadline the loss signal fires when no renewal has reached a
    /// quorum by then. Default: a tenth of the TTL. It bounds how late the body's last effects
    /// may land and still be inside the lease. A first lease shorter than twice the margin (a
    /// lock a release handed over in line, valid at first for what the hand-off proved) uses
    /// half of itself instead, so that its first renewal has time to run.
    pub fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// After the loss signal, how long the body may keep running to stop on its own (for
    /// example, to stop a child process) before it is dropped. Whatever it returns is discarded:
    /// `with_lock` returns [`Error::Lost`] all the same. Default: zero, the body is dropped at
    /// once. Keep it within the loss margin if the body must not outlive the lease.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

/// The handle a [`with_lock`](Redlock::with_lock) body gets: what it holds, for how long, and
/// the signal that it no longer does.
///
/// Cheap to clone (an `Arc` inside), `Send`, `Sync` and `'static`: hand clones to tasks the
/// body spawns, and let them stop on [`lost`](Held::lost).
#[derive(Clone)]
pub struct Held {
    shared: Arc<Shared>,
}

struct Shared {
    resource: String,
    token: LockToken,
    fence: Option<u64>,
    status: watch::Sender<Status>,
}

#[derive(Debug, Clone, Copy)]
struct Status {
    deadline: Instant,
    renewals: u32,
    phase: Phase,
}

/// Where a hold is in its life. It only moves forward: from `Holding` to one of the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Holding,
    /// `with_lock` finished and released the lock.
    Ended,
    /// The lease ended early, for this reason.
    Lost(LossReason),
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = *self.shared.status.borrow();
        f.debug_struct("Held")
            .field("resource", &self.shared.resource)
            .field("token", &self.shared.token)
            .field("fence", &self.shared.fence)
            .field("remaining", &self.remaining())
            .field("renewals", &status.renewals)
            .field("phase", &status.phase)
            .finish()
    }
}

impl Held {
    fn new(lock: &Lock) -> Self {
        Held {
            shared: Arc::new(Shared {
                resource: lock.resource().to_owned(),
                token: lock.token().clone(),
                fence: lock.fencing_token(),
                status: watch::Sender::new(Status {
                    deadline: lock.deadline(),
                    renewals: 0,
                    phase: Phase::Holding,
                }),
            }),
        }
    }

    /// The resource held.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// This holder's token.
    pub fn token(&self) -> &LockToken {
        &self.shared.token
    }

    /// The fencing token, when the client was built with
    /// [`fencing(true)`](crate::RedlockBuilder::fencing). Renewals keep it.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.fence
    }

    /// The deadline of the current lease (moved by every renewal).
    pub fn deadline(&self) -> Instant {
        self.shared.status.borrow().deadline
    }

    /// Validity left; [`Duration::ZERO`] once the hold is over (lost or ended).
    pub fn remaining(&self) -> Duration {
        let status = *self.shared.status.borrow();
        match status.phase {
            Phase::Holding => status.deadline.saturating_duration_since(seam::now()),
            Phase::Ended | Phase::Lost(_) => Duration::ZERO,
        }
    }

    /// How many renewals have succeeded.
    pub fn renewals(&self) -> u32 {
        self.shared.status.borrow().renewals
    }

    /// `true` while the lock is held: not lost, and `with_lock` has not finished.
    pub fn is_held(&self) -> bool {
        self.shared.status.borrow().phase == Phase::Holding
    }

    /// Why the lock was lost, once it has been; `None` while held and after a normal end.
    pub fn loss(&self) -> Option<LossReason> {
        match self.shared.status.borrow().phase {
            Phase::Lost(reason) => Some(reason),
            Phase::Holding | Phase::Ended => None,
        }
    }

    /// Completes once this handle no longer guards a held lock: the lease was lost (see
    /// [`loss`](Held::loss); this fires before the lease's deadline), or `with_lock` finished
    /// and released it. Completes at once if that has already happened.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches; call it again to keep waiting.
    pub async fn lost(&self) {
        let mut status = self.shared.status.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = status.wait_for(|s| s.phase != Phase::Holding).await;
    }

    fn renewed(&self, deadline: Instant) {
        self.shared.status.send_modify(|s| {
            s.deadline = deadline;
            s.renewals = s.renewals.saturating_add(1);
        });
    }

    /// Moves the hold to `phase`, unless it has already ended.
    fn end(&self, phase: Phase) {
        self.shared.status.send_if_modified(|s| {
            let first = s.phase == Phase::Holding;
            if first {
                s.phase = phase;
            }
            first
        });
    }
}

/// Ends the hold's handles when dropped, unless `with_lock` ended them itself first: a
/// `with_lock` future dropped midway tells its body's subtasks that the lock is gone
/// ([`LossReason::Cancelled`]) before the lock's own `Drop` starts the release.
struct EndOnDrop<'a>(&'a Held);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.0.end(Phase::Lost(LossReason::Cancelled));
    }
}

/// The timing of one hold, checked against the lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    ttl: Duration,
    node_timeout: Duration,
    every: Duration,
    margin: Duration,
    max_hold: Option<Duration>,
    grace: Duration,
}

impl Plan {
    pub(crate) fn new(redlock: &Redlock, ttl: Duration, opts: &HoldOptions) -> Result<Plan, Error> {
        let lease = redlock.inner().lease(ttl)?;
        let every = opts.renew_every.unwrap_or(lease.ttl / 3);
        let margin = opts.loss_margin.unwrap_or(lease.ttl / 10);
        let invalid = |reason: String| Error::InvalidTtl { ttl, reason };
        if every.is_zero() {
            return Err(invalid(
                "the renewal interval must be greater than zero".into(),
            ));
        }
        // The first renewal must have time for one round to the nodes before the loss margin.
        if every + margin + lease.node_timeout + lease.drift >= lease.ttl {
            return Err(invalid(format!(
                "renewing every {every:?} with a loss margin of {margin:?} leaves no time to renew \
                 within it (node timeout {:?}, drift {:?})",
                lease.node_timeout, lease.drift
            )));
        }
        Ok(Plan {
            ttl: lease.ttl,
            node_timeout: lease.node_timeout,
            every,
            margin,
            max_hold: opts.max_hold,
            grace: opts.grace,
        })
    }
}

/// How the body's run ended.
enum Ending<T> {
    Finished(std::thread::Result<T>),
    Lost {
        reason: LossReason,
        /// The node errors of the last renewal that failed.
        nodes: Vec<NodeError>,
        /// The panic payload, if the body panicked during its grace period.
        panic: Option<Box<dyn std::any::Any + Send>>,
    },
}

impl Redlock {
    /// Acquires `resource` for `ttl` (with the retry policy), runs `body` while renewing the
    /// lease in the background, and releases the lock when the body is done. The default
    /// [`HoldOptions`]: renewal every `ttl / 3`, loss signalled `ttl / 10` before the deadline.
    ///
    /// The body gets a [`Held`] handle: the resource, token, fencing token, remaining validity,
    /// and the loss signal [`Held::lost`]. If no renewal reaches a quorum before the lease's
    /// deadline minus the loss margin, or a quorum no longer holds the token, the signal fires,
    /// **the body future is dropped** at its next `.await` (continuing without the lock would be
    /// unsafe; see [`HoldOptions::grace`] to let it stop on its own), the lock is released where
    /// it is still held, and `with_lock` returns [`Error::Lost`].
    ///
    /// The body runs inside this future, not on a task of its own: it must not block the thread
    /// (use `tokio::task::spawn_blocking` for blocking work), or the renewals stall with it.
    ///
    /// A lock handed over in line starts with a short lease (what the hand-off proved): it is
    /// renewed to the TTL before the body starts, so the body starts with about `ttl` left
    /// however the lock was acquired.
    ///
    /// A body that returns an error is the caller's business: its output `T` (for example a
    /// `Result`) is returned as is, after the release.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// let report = rl
    ///     .with_lock("reports:nightly", Duration::from_secs(30), |held| async move {
    ///         // Runs as long as it needs: the lease is renewed every 10 s.
    ///         println!("holding {} (fence {:?})", held.resource(), held.fencing_token());
    ///         "done"
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Everything [`acquire`](Redlock::acquire) returns when the lock is not acquired (the body
    /// does not run); [`Error::InvalidTtl`] when the TTL leaves no time to renew;
    /// [`Error::Lost`] when the lease ended before the body finished. A failed release at the
    /// end is not an error (it is logged; the keys expire at their TTL).
    ///
    /// # Panics
    ///
    /// A panic in the body is caught, the lock released (awaited), and the panic resumed: it
    /// propagates to the caller as if the body had been called directly.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped, the body is dropped with it, renewals stop, and the lock is
    /// released in the background.
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        body: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock_opts(resource, ttl, HoldOptions::default(), body)
            .await
    }

    /// As [`with_lock`](Redlock::with_lock), held by `opts`: a hold limit, the renewal
    /// interval, the loss margin, and the grace given to the body after a loss.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::HoldOptions;
    ///
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// let opts = HoldOptions::new().max_hold(Duration::from_secs(3600));
    /// rl.with_lock_opts("migrations", Duration::from_secs(20), opts, |held| async move {
    ///     tokio::select! {
    ///         _ = held.lost() => {} // the lease is gone: stop touching the resource
    ///         _ = tokio::time::sleep(Duration::from_secs(120)) => {} // the work
    ///     }
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Redlock::with_lock); [`Error::Lost`] with [`LossReason::HoldLimit`]
    /// when the hold limit is reached first, and [`Error::InvalidTtl`] when the renewal
    /// interval and loss margin leave no time to renew.
    ///
    /// # Panics
    ///
    /// As [`with_lock`](Redlock::with_lock): a panic in the body propagates after the release.
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Redlock::with_lock).
    pub async fn with_lock_opts<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        opts: HoldOptions,
        body: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = Plan::new(self, ttl, &opts)?;
        let lock = self.acquire(resource, ttl).await?;
        self.hold_by_plan(lock, plan, body).await
    }

    /// Holds a lock already acquired — a mutex, a [`Permit`](crate::Permit) turned
    /// [`into_lock`](crate::Permit::into_lock), a read or write hold of an
    /// [`RwLock`](crate::RwLock), a leader's term — while `body` runs, by `opts`: what
    /// [`with_lock_opts`](Redlock::with_lock_opts) does once it has acquired. The lease is
    /// renewed for the lock's TTL.
    ///
    /// # Errors
    ///
    /// As [`with_lock_opts`](Redlock::with_lock_opts) once the lock is held; when the options
    /// leave no time to renew, [`Error::InvalidTtl`] after the lock is released.
    ///
    /// # Panics
    ///
    /// A panic in the body propagates after the release.
    ///
    /// # Cancel safety
    ///
    /// As [`with_lock`](Redlock::with_lock).
    pub async fn hold<F, Fut, T>(&self, lock: Lock, opts: HoldOptions, body: F) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = match Plan::new(self, lock.ttl(), &opts) {
            Ok(plan) => plan,
            Err(e) => {
                release_quietly(lock, &tracing::Span::current()).await;
                return Err(e);
            }
        };
        self.hold_by_plan(lock, plan, body).await
    }

    /// Holds `lock` while `body` runs, by `plan`: the part of [`with_lock_opts`] after the
    /// acquire, shared with the other primitives' `with_*` (a permit is a lock on one slot).
    ///
    /// [`with_lock_opts`]: Redlock::with_lock_opts
    pub(crate) async fn hold_by_plan<F, Fut, T>(
        &self,
        mut lock: Lock,
        plan: Plan,
        body: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let resource = lock.resource().to_owned();
        let resource = resource.as_str();
        let acquired = seam::now();
        renew_a_short_first_lease(&mut lock, plan).await;
        let held = Held::new(&lock);
        // Declared after `lock`, so dropped before it: on cancellation the handles end first.
        let _end_on_drop = EndOnDrop(&held);
        let span = tracing::debug_span!("with_lock", resource);

        let ending = {
            let body = AssertUnwindSafe(body(held.clone())).catch_unwind();
            let renewals = keep_alive(&mut lock, &held, plan, acquired).instrument(span.clone());
            tokio::pin!(body, renewals);
            tokio::select! {
                biased;
                out = &mut body => Ending::Finished(out),
                (reason, nodes) = &mut renewals => {
                    held.end(Phase::Lost(reason));
                    let mut panic = None;
                    if !plan.grace.is_zero() {
                        // The body may see the signal and stop on its own; a panic still
                        // propagates, anything else is discarded.
                        if let Ok(Err(payload)) = tokio::time::timeout(plan.grace, &mut body).await {
                            panic = Some(payload);
                        }
                    }
                    Ending::Lost { reason, nodes, panic }
                }
            }
            // The body and the renewals are dropped here, before the release is sent: no
            // renewal can follow the release (and a renewal could not re-create a deleted key
            // anyway: extend is compare-and-PEXPIRE).
        };
        held.end(Phase::Ended);

        match ending {
            Ending::Finished(Ok(out)) => {
                release_quietly(lock, &span).await;
                Ok(out)
            }
            Ending::Finished(Err(panic)) => {
                release_quietly(lock, &span).await;
                std::panic::resume_unwind(panic)
            }
            Ending::Lost {
                reason,
                nodes,
                panic,
            } => {
                Counters::bump(&self.inner().counters().lost);
                span.in_scope(|| tracing::warn!(%reason, renewals = held.renewals(), "lock lost"));
                release_quietly(lock, &span).await;
                if let Some(panic) = panic {
                    std::panic::resume_unwind(panic);
                }
                Err(Error::Lost {
                    resource: resource.to_owned(),
                    reason,
                    renewals: held.renewals(),
                    nodes,
                })
            }
        }
    }
}

/// A lock handed over in line is valid at first only for what the hand-off proved (see
/// `wakeup/handed.rs`): no longer than the releasing holder's entry lease (a fraction of *its*
/// TTL) nor the rest of the waiter's, which can be shorter than the body's loss margin, or than
/// what a body that acts on the deadline (a watchdog that kills by it) needs. Such a lease is renewed to the TTL before the body starts, so that the
/// body sees the lease its TTL promises. A renewal that fails leaves the lease as it was:
/// `keep_alive` goes on trying, and reports the loss by the deadline.
async fn renew_a_short_first_lease(lock: &mut Lock, plan: Plan) {
    if lock.remaining() >= plan.margin * 2 {
        return;
    }
    let give_up = lock.deadline().checked_sub(lock.remaining() / 2);
    let give_up = give_up.unwrap_or_else(seam::now);
    match tokio::time::timeout_at(give_up.into(), lock.extend(plan.ttl)).await {
        Ok(Ok(())) => tracing::debug!(remaining = ?lock.remaining(), "renewed a short first lease"),
        Ok(Err(e)) => tracing::debug!(error = %e, "could not renew a short first lease"),
        Err(_elapsed) => tracing::debug!("could not renew a short first lease in time"),
    }
}

/// Releases at the end of a hold; a failure is logged, not returned (the keys expire).
async fn release_quietly(lock: Lock, span: &tracing::Span) {
    if let Err(e) = lock.release().instrument(span.clone()).await {
        span.in_scope(|| tracing::warn!(error = %e, "release after with_lock failed"));
    }
}

/// Renews `lock` every `plan.every` until the lease is lost: returns why, with the node errors
/// of the last failed renewal. Each renewal is bounded by the last-chance instant (deadline −
/// margin), so the loss is reported by then even if nodes hang.
async fn keep_alive(
    lock: &mut Lock,
    held: &Held,
    plan: Plan,
    acquired: Instant,
) -> (LossReason, Vec<NodeError>) {
    let limit = plan.max_hold.and_then(|m| acquired.checked_add(m));
    // After a failed renewal, try again this soon (still bounded by the last chance).
    let retry = (plan.every / 4).max(Duration::from_millis(1));
    let mut due = acquired.checked_add(plan.every).unwrap_or(acquired);
    let mut failed = Vec::new();
    // A first lease still short (a handed lock whose renewal before the body failed, see
    // `renew_a_short_first_lease`) leaves half of itself for the first renewal: with the whole
    // margin its last chance would be over before it began. Every renewed lease has the plan's
    // margin.
    let mut margin = plan.margin.min(lock.remaining() / 2);
    loop {
        let last_chance = lock
            .deadline()
            .checked_sub(margin)
            .unwrap_or_else(seam::now);
        let stop = limit.map_or(last_chance, |l| l.min(last_chance));
        // However the schedule falls (a slow acquire, a long interval), leave one node timeout
        // for a renewal before the last chance.
        let latest = last_chance
            .checked_sub(plan.node_timeout)
            .unwrap_or(last_chance);
        tokio::time::sleep_until(due.min(latest).min(stop).into()).await;
        let now = seam::now();
        if limit.is_some_and(|l| now >= l) {
            return (LossReason::HoldLimit, Vec::new());
        }
        if now >= last_chance {
            return (LossReason::NotRenewed, failed);
        }
        match tokio::time::timeout_at(stop.into(), lock.extend(plan.ttl)).await {
            Ok(Ok(())) => {
                held.renewed(lock.deadline());
                margin = plan.margin;
                failed.clear();
                due = now.checked_add(plan.every).unwrap_or(now);
                tracing::debug!(remaining = ?lock.remaining(), "renewed");
            }
            Ok(Err(Error::NotExtended { nodes, .. })) if token_gone(lock, &nodes) => {
                return (LossReason::TokenGone, nodes);
            }
            Ok(Err(Error::NotExtended { nodes, .. })) => {
                tracing::debug!(failed = nodes.len(), "renewal failed; retrying");
                failed = nodes;
                due = seam::now() + retry;
            }
            // Expired (or any other refusal): nothing left to renew.
            Ok(Err(_)) => return (LossReason::NotRenewed, failed),
            // The last chance (or the hold limit) passed while renewing: the next turn decides.
            Err(_elapsed) => {}
        }
    }
}

/// `true` when so many nodes no longer hold the token that no renewal can reach a quorum.
fn token_gone(lock: &Lock, nodes: &[NodeError]) -> bool {
    let inner = lock.inner();
    let gone = nodes.iter().filter(|n| n.is_token_gone()).count();
    gone > inner.all_nodes().len() - inner.quorum()
}

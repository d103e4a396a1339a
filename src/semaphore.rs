//! `Semaphore`: at most K holders of a resource at a time, as K slots that are each an ordinary
//! quorum lock.
//!
//! # Why slots, and not a count per master
//!
//! The tempting design counts holders on every master and grants a permit where a quorum of
//! masters has room. It is unsafe: with K = 2 on masters A, B, C, holder 1 counts itself on
//! {A, B} and holder 2 on {B, C}. B is full, but A and C each count one holder, so holder 3
//! gets {A, C}, a quorum: three holders of two permits. Quorums of *different* holders need
//! not overlap on a master that is full.
//!
//! A permit here is one of K slots, slot `i` being the lock `<resource>:permit:<i>`. Two holders
//! of one slot would be two holders of one lock, which the mutex rules out; K slots therefore
//! hold at most K holders. Every guarantee of the mutex carries over to each permit unchanged:
//! validity, rollback, fencing (per slot), extend, the wait line, and the failover rule.
//!
//! An acquire tries the slots once each, from a random one (so that clients spread over the
//! slots instead of all contending for slot 0); if every slot is held, it waits in every slot's
//! line at once and takes the first slot a release hands it, leaving the other lines.

use std::future::Future;
use std::time::Duration;

use futures::future::{select_ok, BoxFuture};
use rand::Rng;

use crate::error::Error;
use crate::hold::{Held, HoldOptions, Plan};
use crate::keys::Keys;
use crate::lock::Lock;
use crate::quorum::Lease;
use crate::redlock::Redlock;
use crate::release::Released;
use crate::seam;
use crate::token::LockToken;

/// The most permits a semaphore can have: each is a lock, and a waiter waits in every slot's line.
pub const MAX_PERMITS: u32 = 1024;

/// A counting semaphore over the quorum: at most `permits` holders of `resource` at a time.
///
/// Made by [`Redlock::semaphore`]. Every client of one semaphore must use the same number of
/// permits: a client that believes there are more takes slots the others never use.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
/// // At most 4 exports run at once, across every process.
/// let exports = rl.semaphore("exports", 4)?;
/// let permit = exports.acquire(Duration::from_secs(30)).await?;
/// println!("slot {} of {}", permit.slot(), exports.permits());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    rl: Redlock,
    resource: String,
    /// The slots' resource names and keys, slot `i` at index `i`.
    slots: Vec<(String, Keys)>,
}

/// One of a [`Semaphore`]'s permits: a lock on one slot.
///
/// Release it with [`release`](Permit::release); a permit dropped without release is released
/// in the background, like a [`Lock`].
#[derive(Debug)]
pub struct Permit {
    lock: Lock,
    slot: u32,
}

impl Redlock {
    /// A counting semaphore: at most `permits` holders of `resource` at a time, across every
    /// client of these masters. No node is contacted until a permit is asked for.
    ///
    /// Slot `i` is the lock `<resource>:permit:<i>`: `quorumlock status` and
    /// [`inspect`](Redlock::inspect) show each slot by that name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPermits`] unless 1 ≤ `permits` ≤ [`MAX_PERMITS`];
    /// [`Error::InvalidResource`] for a name that cannot be locked.
    pub fn semaphore(&self, resource: &str, permits: u32) -> Result<Semaphore, Error> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidPermits {
                permits,
                max: MAX_PERMITS,
            });
        }
        // Checked on its own: a slot's name could be valid where the resource's is not.
        self.inner().key(resource)?;
        let slots = (0..permits)
            .map(|i| {
                let name = slot_name(resource, i);
                let key = self.inner().key(&name)?;
                Ok((name, Keys::Slot(key)))
            })
            .collect::<Result<_, Error>>()?;
        Ok(Semaphore {
            rl: self.clone(),
            resource: resource.to_owned(),
            slots,
        })
    }
}

/// The resource name of slot `slot` of the semaphore `resource`.
fn slot_name(resource: &str, slot: u32) -> String {
    format!("{resource}:permit:{slot}")
}

impl Semaphore {
    /// The semaphore's resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many permits it has: its most holders at a time.
    pub fn permits(&self) -> u32 {
        // At most MAX_PERMITS slots, checked on creation.
        u32::try_from(self.slots.len()).unwrap_or(MAX_PERMITS)
    }

    /// Takes a permit for `ttl`, waiting while all are held.
    ///
    /// It makes one attempt on each slot, from a random one, and returns the first it gets. If
    /// every slot is held, it waits in every slot's line and takes the first slot handed to it;
    /// if masters are down or too slow, it tries again by the client's
    /// [retry policy](crate::RedlockBuilder::retry_count). Waiting is bounded by the client's
    /// [acquire timeout](crate::RedlockBuilder::acquire_timeout), as for
    /// [`Redlock::acquire`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`] for an unusable TTL (no node is contacted); otherwise the error of
    /// the last slot to give up, as [`Redlock::acquire`] returns it, naming that slot.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::acquire`]: a dropped future releases what it had taken and leaves every
    /// line in the background.
    pub async fn acquire(&self, ttl: Duration) -> Result<Permit, Error> {
        // Slots this client waited for lately are likely all held again: one plain attempt
        // per slot would only be refused, one after the other.
        let wakeup = self.rl.inner().wakeup();
        if self
            .slots
            .iter()
            .any(|(_, keys)| wakeup.waited_lately(keys))
        {
            return self.wait_in_every_line(ttl).await;
        }
        let policy = self.rl.inner().settings().retry;
        let mut failures = 0;
        loop {
            match self.try_each(ttl).await {
                Err(e) if e.is_contention() => return self.wait_in_every_line(ttl).await,
                // Masters down or slow: the retry policy of any acquire, before giving up.
                Err(e) if e.is_retriable() && failures + 1 < policy.attempts() => {
                    failures += 1;
                    let delay = seam::with_rng(|rng| policy.delay(rng));
                    tokio::time::sleep(delay).await;
                }
                done => return done,
            }
        }
    }

    /// Makes one attempt on each slot, from a random one, and never waits.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Semaphore::acquire): when every slot refused, the last slot's error,
    /// [`Error::is_contention`] when they are all held.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit, Error> {
        self.try_each(ttl).await
    }

    /// Takes a permit for `ttl`, runs `body` while renewing it, and releases it: as
    /// [`Redlock::with_lock`], on one slot.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// let crawlers = rl.semaphore("crawlers", 8)?;
    /// crawlers
    ///     .with_permit(Duration::from_secs(10), |held| async move {
    ///         println!("crawling as {}", held.resource()); // "crawlers:permit:<slot>"
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Semaphore::acquire) when no permit is taken (the body does not run);
    /// as [`Redlock::with_lock`] once it is: [`Error::Lost`] when the permit's lease ended
    /// before the body finished.
    ///
    /// # Panics
    ///
    /// A panic in the body propagates after the release, as with [`Redlock::with_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::with_lock`].
    pub async fn with_permit<F, Fut, T>(&self, ttl: Duration, body: F) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = Plan::new(&self.rl, ttl, &HoldOptions::default())?;
        let permit = self.acquire(ttl).await?;
        self.rl.hold_by_plan(permit.lock, plan, body).await
    }

    /// One plain attempt per slot, from a random one; the first permit, or the last error.
    async fn try_each(&self, ttl: Duration) -> Result<Permit, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        let start = seam::with_rng(|rng| rng.random_range(0..self.slots.len()));
        let mut last = self.try_slot(start, &lease).await;
        for slot in (start + 1..self.slots.len()).chain(0..start) {
            match last {
                Err(e) if e.is_contention() => last = self.try_slot(slot, &lease).await,
                // A permit, or a failure that is not contention (masters down), which the
                // other slots would meet too.
                done => return done,
            }
        }
        last
    }

    async fn try_slot(&self, slot: usize, lease: &Lease) -> Result<Permit, Error> {
        let (name, keys) = &self.slots[slot];
        let lock = self.rl.acquire_keys(name, keys, lease, false).await?;
        Ok(self.permit(lock, slot))
    }

    /// Waits in every slot's line at once; the first slot acquired wins, and the other waits
    /// are dropped, which leaves their lines (and releases a slot taken in the same instant).
    async fn wait_in_every_line(&self, ttl: Duration) -> Result<Permit, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        let waits: Vec<BoxFuture<'_, Result<Permit, Error>>> = self
            .slots
            .iter()
            .enumerate()
            .map(|(slot, (name, keys))| {
                let lease = &lease;
                Box::pin(async move {
                    // Every slot refused already: the first attempt takes the place in line.
                    let lock = self.rl.acquire_keys_in_line(name, keys, lease).await?;
                    Ok(self.permit(lock, slot))
                }) as BoxFuture<'_, _>
            })
            .collect();
        select_ok(waits).await.map(|(permit, _others)| permit)
    }

    fn permit(&self, lock: Lock, slot: usize) -> Permit {
        Permit {
            lock,
            slot: u32::try_from(slot).unwrap_or(MAX_PERMITS),
        }
    }
}

impl Permit {
    /// Which slot this permit holds, in `0..permits`.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The slot's resource name, `<resource>:permit:<slot>`.
    pub fn resource(&self) -> &str {
        self.lock.resource()
    }

    /// This holder's token.
    pub fn token(&self) -> &LockToken {
        self.lock.token()
    }

    /// The slot's fencing token, when fencing is on: it grows with each holder of this slot,
    /// not across slots.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token()
    }

    /// The instant the permit stops being valid (see [`Lock::deadline`]).
    pub fn deadline(&self) -> std::time::Instant {
        self.lock.deadline()
    }

    /// Validity left; [`Duration::ZERO`] once expired.
    pub fn remaining(&self) -> Duration {
        self.lock.remaining()
    }

    /// `true` while validity is left.
    pub fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }

    /// Renews the permit for `ttl` from now: [`Lock::extend`] on its slot.
    ///
    /// # Errors
    ///
    /// As [`Lock::extend`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::extend`].
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.lock.extend(ttl).await
    }

    /// The permit as the lock on its slot: to hold it with [`Redlock::hold`], say.
    pub fn into_lock(self) -> Lock {
        self.lock
    }

    /// Gives the permit back: [`Lock::release`] on its slot, which hands the slot to the first
    /// waiter in its line.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::release`].
    pub async fn release(self) -> Result<Released, Error> {
        self.lock.release().await
    }
}

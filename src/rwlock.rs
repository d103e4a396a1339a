//! `RwLock`: many readers or one writer, over the quorum.
//!
//! # How it is kept
//!
//! On each master, a writer holds the resource's own key (as a mutex holder would), and readers
//! hold entries in the sorted set `<resource>:readers`, each scored by the instant its hold
//! expires on that master's clock. A reader is granted where no writer holds the key and no
//! writer waits; a writer where no reader's entry is live and the key is free. Both need a
//! quorum within their validity, and failed attempts are rolled back, as for the mutex.
//!
//! Why a reader and a writer never overlap: each was granted by a quorum, and two quorums of
//! the same N masters share a master. On that master one of the two ran first, and the other
//! saw it (the writer's key, or the reader's live entry) and was refused. Readers never refuse
//! each other, so they share the resource freely.
//!
//! Writers are not starved: a writer refused because of readers (or another writer) notes
//! itself in `<resource>:writers` on that master, and while such a note is live new readers
//! are refused there. Each attempt of a waiting writer renews its note; a writer that gives up
//! or dies leaves a note that lapses within a few retry delays. A single attempt that does not
//! wait ([`RwLock::try_write`], or [`RwLock::write`] with an acquire timeout of zero) leaves no
//! note: it would hold readers back for nobody.
//!
//! Holds of a read-write lock take no place in the mutex's wait line (a release cannot name one
//! of many readers). A refused hold waits for the masters' announcements on the lock's channel
//! instead: every writer's release, and the last reader's while a writer waits (only the
//! waiting writers hear that one). Each wakes every waiting hold of the kind it concerns, which
//! attempts again at once; the [retry delay](crate::RedlockBuilder::retry_delay) remains the
//! fallback for an announcement lost or a note lapsed. A writer's release also takes its note
//! away on every master: on one that refused its winning attempt, the note would otherwise hold
//! new readers back there for its whole lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::hold::{Held, HoldOptions, Plan};
use crate::keys::Keys;
use crate::lock::Lock;
use crate::quorum::Lease;
use crate::redlock::Redlock;
use crate::token::LockToken;

/// Waiting writers renew their note at every attempt; it lasts this many retry periods
/// (delay + jitter) plus one node timeout, so that a live writer's note never lapses between
/// two of its attempts.
const WRITER_NOTE_RETRY_PERIODS: u32 = 3;

/// A read-write lock over the quorum: many readers at a time, or one writer.
///
/// Made by [`Redlock::rw_lock`]. A read or write hold is a [`Lock`]: extend it, release it,
/// or let its drop release it in the background. A writer's lock carries a fencing token when
/// fencing is on; a reader's does not (readers share the resource, so a fence would order
/// nothing).
///
/// Do not lock the same resource as a mutex too: a mutex acquire does not look at readers.
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
/// let catalog = rl.rw_lock("catalog")?;
/// let reading = catalog.read(Duration::from_secs(10)).await?; // many at once
/// reading.release().await?;
/// let writing = catalog.write(Duration::from_secs(10)).await?; // alone
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    rl: Redlock,
    resource: String,
    key: Arc<str>,
}

impl Redlock {
    /// A read-write lock on `resource`: many readers or one writer at a time, across every
    /// client of these masters. No node is contacted until a hold is asked for.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a name that cannot be locked.
    pub fn rw_lock(&self, resource: &str) -> Result<RwLock, Error> {
        Ok(RwLock {
            key: self.inner().key(resource)?,
            rl: self.clone(),
            resource: resource.to_owned(),
        })
    }
}

impl RwLock {
    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Takes a read hold for `ttl`, waiting while a writer holds the resource or waits for it
    /// (woken by the writer's release, retrying as a fallback); bounded by the client's
    /// [acquire timeout](crate::RedlockBuilder::acquire_timeout).
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire`]; [`Error::is_contention`] when a writer held or awaited it until
    /// the timeout.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::acquire`]: a dropped future releases what it had taken.
    pub async fn read(&self, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        let keys = Keys::Read(self.key.clone());
        self.rl
            .acquire_keys(&self.resource, &keys, &lease, true)
            .await
    }

    /// One attempt at a read hold; never waits.
    ///
    /// # Errors
    ///
    /// As [`read`](RwLock::read), after one attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`read`](RwLock::read).
    pub async fn try_read(&self, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        let keys = Keys::Read(self.key.clone());
        self.rl
            .acquire_keys(&self.resource, &keys, &lease, false)
            .await
    }

    /// Takes the write hold for `ttl`, waiting while readers or another writer hold the
    /// resource (woken by the last reader's release or the writer's, retrying as a fallback).
    /// From its first refused attempt on, new readers wait behind it; with an
    /// [acquire timeout](crate::RedlockBuilder::acquire_timeout) of zero it makes one attempt
    /// and, like [`try_write`](RwLock::try_write), leaves nothing behind.
    ///
    /// # Errors
    ///
    /// As [`Redlock::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::acquire`]. A dropped writer's note holds readers back until it lapses, a
    /// few retry delays later.
    pub async fn write(&self, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        // With an acquire timeout of zero this is one attempt that does not wait: as
        // `try_write`, it leaves no note.
        let waits = self.rl.inner().settings().acquire_timeout != Some(Duration::ZERO);
        let keys = self.writer(&lease, waits);
        self.rl
            .acquire_keys(&self.resource, &keys, &lease, true)
            .await
    }

    /// One attempt at the write hold; never waits. A refused attempt leaves nothing behind: no
    /// note holds new readers back for a writer that is not coming back.
    ///
    /// # Errors
    ///
    /// As [`write`](RwLock::write), after one attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](RwLock::write).
    pub async fn try_write(&self, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.rl.inner().lease(ttl)?;
        let keys = self.writer(&lease, false);
        self.rl
            .acquire_keys(&self.resource, &keys, &lease, false)
            .await
    }

    /// Runs `body` under a read hold, renewed meanwhile: as [`Redlock::with_lock`].
    ///
    /// # Errors
    ///
    /// As [`Redlock::with_lock`].
    ///
    /// # Panics
    ///
    /// A panic in the body propagates after the release.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::with_lock`].
    pub async fn with_read<F, Fut, T>(&self, ttl: Duration, body: F) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = Plan::new(&self.rl, ttl, &HoldOptions::default())?;
        let lock = self.read(ttl).await?;
        self.rl.hold_by_plan(lock, plan, body).await
    }

    /// Runs `body` under the write hold, renewed meanwhile: as [`Redlock::with_lock`].
    ///
    /// # Errors
    ///
    /// As [`Redlock::with_lock`].
    ///
    /// # Panics
    ///
    /// A panic in the body propagates after the release.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::with_lock`].
    pub async fn with_write<F, Fut, T>(&self, ttl: Duration, body: F) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = Plan::new(&self.rl, ttl, &HoldOptions::default())?;
        let lock = self.write(ttl).await?;
        self.rl.hold_by_plan(lock, plan, body).await
    }

    /// A writer's keys, with an id of its own for the note it leaves while it `waits`. A writer
    /// that does not wait sends a zero note (1 ms once sent), which the script never writes; a
    /// waiting writer's note lasts at least 2 ms.
    fn writer(&self, lease: &Lease, waits: bool) -> Keys {
        let retry = self.rl.inner().settings().retry;
        let period = retry.delay.saturating_add(retry.jitter);
        let wait = match waits {
            true => period
                .saturating_mul(WRITER_NOTE_RETRY_PERIODS)
                .saturating_add(lease.node_timeout)
                .max(Duration::from_millis(2)),
            false => Duration::ZERO,
        };
        Keys::Write {
            key: self.key.clone(),
            writer: LockToken::generate().expose().into(),
            wait,
        }
    }
}

//! Reentrant ownership, two ways: nested holds of one lock in one process
//! ([`Lock::into_reentrant`] / [`ReentrantLock::nested`]), and a lock taken under an owner id
//! that the same owner can take again, from any process ([`Redlock::acquire_as`]).
//!
//! Nested holds count on the client, not on the masters: the masters hold one key with one
//! token, so no per-master counter can drift apart across masters when some of them miss an
//! update. The key goes when the last guard is released.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::keys::Keys;
use crate::lock::Lock;
use crate::redlock::Redlock;
use crate::release::Released;
use crate::seam;
use crate::sync;
use crate::token::LockToken;

/// The longest owner id [`Redlock::acquire_as`] takes, in bytes.
pub const MAX_OWNER_LEN: usize = 256;

/// A lock shared by nested holders in one process: each guard is one hold, and the lock is
/// released when the last guard is.
///
/// Made by [`Lock::into_reentrant`]; [`nested`](ReentrantLock::nested) takes one more hold.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
/// let outer = rl.acquire("ledger", Duration::from_secs(30)).await?.into_reentrant();
/// let inner = outer.nested(); // e.g. handed to a helper that "takes the lock" again
/// assert_eq!(outer.holds(), 2);
/// assert!(inner.release().await?.is_none()); // the outer hold remains: the key stays
/// assert!(outer.release().await?.is_some()); // the last hold: released on the masters
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ReentrantLock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The lock, extended by one guard at a time.
    lock: tokio::sync::Mutex<Lock>,
    resource: String,
    token: LockToken,
    fence: Option<u64>,
    /// The lock's deadline, readable without waiting for an extend in progress.
    deadline: std::sync::Mutex<Instant>,
}

impl Lock {
    /// Turns this lock into the first hold of a [`ReentrantLock`], which nested holders can
    /// share.
    pub fn into_reentrant(self) -> ReentrantLock {
        ReentrantLock {
            shared: Arc::new(Shared {
                resource: self.resource().to_owned(),
                token: self.token().clone(),
                fence: self.fencing_token(),
                deadline: std::sync::Mutex::new(self.deadline()),
                lock: tokio::sync::Mutex::new(self),
            }),
        }
    }
}

impl ReentrantLock {
    /// One more hold of the same lock: same resource, token and fencing token. The lock stays
    /// until every hold is released or dropped.
    pub fn nested(&self) -> ReentrantLock {
        ReentrantLock {
            shared: Arc::clone(&self.shared),
        }
    }

    /// How many holds there are now, this one included (at least 1).
    pub fn holds(&self) -> usize {
        Arc::strong_count(&self.shared)
    }

    /// The resource name.
    pub fn resource(&self) -> &str {
        &self.shared.resource
    }

    /// The token every hold shares.
    pub fn token(&self) -> &LockToken {
        &self.shared.token
    }

    /// The fencing token, when fencing is on (see [`Lock::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.fence
    }

    /// The instant the lock stops being valid, for every hold.
    pub fn deadline(&self) -> Instant {
        *sync::lock(&self.shared.deadline)
    }

    /// Validity left; [`Duration::ZERO`] once expired.
    pub fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(seam::now())
    }

    /// Renews the lock for `ttl` from now, for every hold: [`Lock::extend`]. Extends from
    /// several holds run one after the other.
    ///
    /// # Errors
    ///
    /// As [`Lock::extend`].
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::extend`].
    pub async fn extend(&self, ttl: Duration) -> Result<(), Error> {
        let mut lock = self.shared.lock.lock().await;
        // Every move, the one made before the requests go out included: a shortening extend
        // dropped midway may still shorten the keys, and every hold must see that at once.
        let deadline = &self.shared.deadline;
        lock.extend_telling(ttl, |moved| *sync::lock(deadline) = moved)
            .await
    }

    /// Ends this hold. The last hold releases the lock on the masters and returns what they
    /// said; any other returns `Ok(None)` and leaves the key in place.
    ///
    /// When several holds end at the same time, exactly one of them is the last.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`], for the last hold.
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::release`]: a last hold dropped midway releases in the background.
    pub async fn release(self) -> Result<Option<Released>, Error> {
        match Arc::into_inner(self.shared) {
            Some(shared) => shared.lock.into_inner().release().await.map(Some),
            None => Ok(None),
        }
    }
}

impl Redlock {
    /// Acquires `resource` for `ttl` under `owner`, an id the caller chooses. Each master
    /// grants where the key is free **or already holds a lock of `owner`**, which it then takes
    /// over. The quorum, validity and rollback rules are those of
    /// [`acquire`](Redlock::acquire), and so is the waiting in line.
    ///
    /// The use case: a worker that restarts under the same owner id takes its own lock back at
    /// once, instead of waiting for the old lease to run out.
    ///
    /// Each attempt still writes a value of its own: the owner id behind a fresh nonce (see
    /// [`LockToken::expose`]), so the returned lock's extend and release act on this acquisition
    /// alone. A takeover is a compare-and-swap of the value a master named, which never brings
    /// the key's expiry forward; **an attempt that fails, or is dropped, puts back every value
    /// it took over**, instead of deleting it: it costs no other lock of the owner a key, even
    /// one still held. Once an attempt has lost, its
    /// requests still on their way take nothing over. **Two live processes (or tasks) using one
    /// owner id take the lock from each other**: the later acquire takes over the keys, and the
    /// earlier holder's extend then fails (its hold is lost) while its release leaves the keys
    /// alone. Give each worker an id of its own, stable across its restarts (a hostname plus a
    /// slot number, say).
    ///
    /// "Later" is the order of the attempts' stamps, whatever order their requests land in: each
    /// attempt's nonce begins with its stamp (the wall clock in µs, above every stamp this
    /// client drew or saw), and an attempt takes over only a value of the owner stamped before
    /// it. Two attempts racing can both win; the one stamped later holds, the other's extend
    /// fails and its release leaves the later one's keys alone. An attempt that finds a value of
    /// the owner stamped after its own (a previous process whose clock ran ahead) is refused
    /// there, and this client's next attempt is stamped after that value: with an
    /// `acquire_timeout`, a retry takes the lock over; with a single attempt (no
    /// `acquire_timeout`), the next call does. A value stamped more than a day ahead of this
    /// client's clock is not followed (it would drag every later stamp of the owner with it): it
    /// is waited out, as another holder's would be.
    ///
    /// A taken-over key lives at least as long as the lock it was taken from had left, and at
    /// least this lock's TTL. Each master notes which attempt took its key from which value
    /// (the resource's `:took` companion): a rollback puts back what the attempt took even
    /// after another failed attempt took the key from it in turn, and where the lock it took
    /// the key from was released meanwhile, the rollback releases the key instead; a rollback
    /// that runs before its takeover (whose request is late) keeps that takeover from taking
    /// anything, for the attempt's TTL. Until a failed attempt's rollback lands, the masters it
    /// took hold its value, of the same owner: nobody else gets in, but the earlier lock's
    /// extend may fail meanwhile.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// // After a crash, the restarted worker-7 gets its lock back without waiting for the TTL.
    /// let lock = rl.acquire_as("shard:7", "worker-7@host-a", Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOwner`] for an empty owner id, one longer than [`MAX_OWNER_LEN`], or one
    /// starting with `~` (kept for the line's reservations); otherwise as
    /// [`acquire`](Redlock::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Redlock::acquire).
    pub async fn acquire_as(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        check_owner(owner)?;
        let lease = self.inner().lease(ttl)?;
        let keys = Keys::Owned {
            key: self.inner().key(resource)?,
            owner: owner.into(),
        };
        self.acquire_keys(resource, &keys, &lease, true).await
    }
}

fn check_owner(owner: &str) -> Result<(), Error> {
    let reason = if owner.is_empty() {
        "it is empty"
    } else if owner.len() > MAX_OWNER_LEN {
        "it is longer than 256 bytes"
    } else if owner.starts_with('~') {
        // Every value a line writes (`RESERVED_PREFIX`) starts so: no owner can equal one.
        "it starts with '~', which marks a key reserved for a waiter"
    } else {
        return Ok(());
    };
    Err(Error::InvalidOwner { reason })
}

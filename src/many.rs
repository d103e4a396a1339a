//! Multi-resource locks: [`Redlock::acquire_many`] takes several resources at once, all or
//! nothing on each node in one script call, and [`MultiLock`] extends and releases them
//! together.

use std::time::{Duration, Instant};

use crate::error::Error;
use crate::keys::Keys;
use crate::lock::Lock;
use crate::redlock::Redlock;
use crate::release::Released;
use crate::token::LockToken;

/// A lock held on several resources at once, from [`Redlock::acquire_many`].
///
/// On each node every key carries the same token and TTL: they were set together by one
/// script, and are extended and released together. Released in the background when dropped,
/// like [`Lock`].
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
/// let lock = rl.acquire_many(&["acct:1", "acct:2"], Duration::from_secs(5)).await?;
/// // ... move money from acct:1 to acct:2 ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MultiLock {
    lock: Lock,
    resources: Vec<String>,
}

impl MultiLock {
    /// The resources held, in the order given.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// This holder's token (the same on every key).
    pub fn token(&self) -> &LockToken {
        self.lock.token()
    }

    /// One fencing token per resource, in the order of [`resources`](MultiLock::resources),
    /// when the client was built with [`fencing(true)`](crate::RedlockBuilder::fencing). Each
    /// is strictly greater than that of every earlier holder of its resource, whether that
    /// holder took it alone or with others.
    pub fn fencing_tokens(&self) -> Option<&[u64]> {
        self.lock.fences()
    }

    /// The TTL of the last acquire or extend, in whole milliseconds.
    pub fn ttl(&self) -> Duration {
        self.lock.ttl()
    }

    /// The instant the lock stops being valid (see [`Lock::deadline`]).
    pub fn deadline(&self) -> Instant {
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

    /// Renews every resource for `ttl` from now, on a quorum of nodes. On each node it is all
    /// or nothing: a node where any key lost this token renews none of them.
    ///
    /// # Errors
    ///
    /// As [`Lock::extend`]; the error's `resource` lists the resources separated by `", "`.
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::extend`].
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.lock.extend(ttl).await
    }

    /// Releases every resource on every node (compare-and-delete per key), and announces it to
    /// the clients waiting for any of them.
    ///
    /// # Errors
    ///
    /// As [`Lock::release`]. [`Released`] counts nodes: a node counts as `deleted` when it
    /// still held at least one of the keys.
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::release`].
    pub async fn release(self) -> Result<Released, Error> {
        self.lock.release().await
    }
}

impl Redlock {
    /// Acquires every one of `resources` for `ttl`, or none, retrying by the configured policy.
    ///
    /// On each node one script sets every key or, if any is held, none; the lock needs a quorum
    /// of nodes that set them all. Validity, rollback and fencing follow the same rules as
    /// [`acquire`](Redlock::acquire). Two clients asking for overlapping sets in different
    /// orders cannot deadlock: no node ever holds part of a set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] when the list is empty, a name is empty, or a name is listed
    /// twice; otherwise as [`acquire`](Redlock::acquire), where an error's `resource` lists the
    /// resources separated by `", "`.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Redlock::acquire): a dropped attempt is released in the background.
    pub async fn acquire_many<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<MultiLock, Error> {
        self.many(resources, ttl, true).await
    }

    /// Makes exactly one attempt to acquire every one of `resources` for `ttl`, or none.
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Redlock::acquire_many), with `attempts` = 1.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Redlock::acquire).
    pub async fn try_acquire_many<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
    ) -> Result<MultiLock, Error> {
        self.many(resources, ttl, false).await
    }

    async fn many<S: AsRef<str>>(
        &self,
        resources: &[S],
        ttl: Duration,
        retry: bool,
    ) -> Result<MultiLock, Error> {
        let lease = self.inner().lease(ttl)?;
        let resources: Vec<String> = resources.iter().map(|r| r.as_ref().to_owned()).collect();
        if resources.is_empty() {
            return Err(Error::InvalidResource {
                reason: "no resources given",
            });
        }
        let mut keys = Vec::with_capacity(resources.len());
        for resource in &resources {
            let key = self.inner().key(resource)?.to_string();
            if keys.contains(&key) {
                return Err(Error::InvalidResource {
                    reason: "a resource is listed twice",
                });
            }
            keys.push(key);
        }
        let label = resources.join(", ");
        let lock = self
            .acquire_keys(&label, &Keys::Many(keys.into()), &lease, retry)
            .await?;
        Ok(MultiLock { lock, resources })
    }
}

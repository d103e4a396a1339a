//! `Keys`: the Redis keys one lock holds — one for [`Redlock::acquire`](crate::Redlock::acquire),
//! several for [`Redlock::acquire_many`](crate::Redlock::acquire_many) — and the per-node
//! requests on them. The algorithm in `redlock.rs` and `lock.rs` is written once against this
//! type, so single- and multi-resource locks share acquire, rollback, fencing, extend and
//! release.

use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeError;
use crate::node::{Grant, Node};
use crate::scripts;

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) enum Keys {
    /// One resource: plain `SET NX PX` on the hot path.
    One(Arc<str>),
    /// Several resources, taken all or nothing by one script per node.
    Many(Arc<[String]>),
}

/// What a node said to an acquire request.
pub(crate) enum Acquired {
    /// Every key was set; with fencing, each key's new counter value, in key order (empty
    /// without fencing).
    Granted(Vec<u64>),
    /// At least one key is held by another token; nothing was set.
    Held,
}

impl Keys {
    /// The keys, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            Keys::One(key) => (Some(&**key), None),
            Keys::Many(keys) => (None, Some(keys.iter().map(String::as_str))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        match self {
            Keys::One(_) => 1,
            Keys::Many(keys) => keys.len(),
        }
    }

    /// The channels releases of these keys are announced on.
    pub(crate) fn channels(&self) -> Vec<String> {
        self.iter().map(scripts::release_channel).collect()
    }

    /// Sets every key (or none) to `token` for `ttl_ms`, advancing the fencing counters when
    /// `fenced`.
    pub(crate) async fn acquire_on(
        &self,
        node: &Node,
        fenced: bool,
        token: &str,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<Acquired, NodeError> {
        match self {
            Keys::One(key) => {
                let fence_key = fenced.then(|| fence_key(key));
                let grant = node
                    .acquire(key, fence_key.as_deref(), token, ttl_ms, timeout)
                    .await?;
                Ok(match grant {
                    Grant::Granted { fence } => Acquired::Granted(fence.into_iter().collect()),
                    Grant::Held => Acquired::Held,
                })
            }
            Keys::Many(keys) => {
                let mut call = scripts::ACQUIRE_MANY.prepare_invoke();
                for key in keys.iter() {
                    call.key(key.as_str());
                }
                if fenced {
                    for key in keys.iter() {
                        call.key(fence_key(key));
                    }
                }
                call.arg(token).arg(ttl_ms).arg(keys.len());
                let fences: Option<Vec<u64>> = node.invoke(call, timeout).await?;
                Ok(fences.map_or(Acquired::Held, Acquired::Granted))
            }
        }
    }

    /// Compare-and-delete of every key; `Ok(true)` when at least one was deleted. With
    /// `announce`, each deletion is published for the waiters.
    pub(crate) async fn release_on(
        &self,
        node: &Node,
        token: &str,
        announce: bool,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        match self {
            Keys::One(key) => node.release(key, token, announce, timeout).await,
            Keys::Many(keys) => {
                let deleted = node.release_all(keys, token, announce, timeout).await?;
                Ok(deleted > 0)
            }
        }
    }

    /// Compare-and-PEXPIRE of every key, all or nothing; `Ok(true)` when renewed.
    pub(crate) async fn extend_on(
        &self,
        node: &Node,
        token: &str,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        match self {
            Keys::One(key) => node.extend(key, token, ttl_ms, timeout).await,
            Keys::Many(keys) => {
                let mut call = scripts::EXTEND.prepare_invoke();
                for key in keys.iter() {
                    call.key(key.as_str());
                }
                call.arg(token).arg(ttl_ms);
                let renewed: i64 = node.invoke(call, timeout).await?;
                Ok(renewed == 1)
            }
        }
    }

    /// Raises each key's fencing counter to its entry in `fences` where `token` still holds
    /// every key; `Ok(true)` when every counter now holds at least its fence.
    pub(crate) async fn raise_fence_on(
        &self,
        node: &Node,
        token: &str,
        fences: &[u64],
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        match (self, fences) {
            (Keys::One(key), [fence]) => {
                node.raise_fence(key, &fence_key(key), token, *fence, timeout)
                    .await
            }
            _ => {
                let mut call = scripts::RAISE_FENCE.prepare_invoke();
                for key in self.iter() {
                    call.key(key);
                }
                for key in self.iter() {
                    call.key(fence_key(key));
                }
                call.arg(token);
                for fence in fences {
                    call.arg(*fence);
                }
                let raised: i64 = node.invoke(call, timeout).await?;
                Ok(raised == 1)
            }
        }
    }
}

/// The Redis key of a resource's fencing counter.
pub(crate) fn fence_key(key: &str) -> String {
    format!("{key}:fence")
}

/// The suffixes of the keys and channels kept beside a lock's own key, each with the reason a
/// resource whose key ends with it is refused. The lock key is `<prefix><resource>` and its
/// auxiliary keys are the lock key plus a suffix, so a resource named `x:fence` would *be*
/// the fencing counter of `x`: acquiring it would overwrite the counter and releasing it would
/// delete it. Refusing these names keeps every existing key where it is, so masters in use keep
/// their counters.
pub(crate) const RESERVED_SUFFIXES: [(&str, &str); 4] = [
    (
        ":fence",
        "it ends with \":fence\", reserved for the fencing counter of the resource it extends",
    ),
    (
        ":released",
        "it ends with \":released\", reserved for the release channel of the resource it extends",
    ),
    (
        ":queue",
        "it ends with \":queue\", reserved for the wait queue of the resource it extends",
    ),
    (
        ":holder",
        "it ends with \":holder\", reserved for the holder description of the resource it extends",
    ),
];

/// Why `key` cannot be a lock key: `Some` when it ends with a reserved suffix.
pub(crate) fn reserved(key: &str) -> Option<&'static str> {
    RESERVED_SUFFIXES
        .iter()
        .find(|(suffix, _)| key.ends_with(suffix))
        .map(|(_, reason)| *reason)
}

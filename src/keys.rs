//! `Keys`: the Redis keys one lock holds — one for [`Redlock::acquire`](crate::Redlock::acquire),
//! several for [`Redlock::acquire_many`](crate::Redlock::acquire_many) — and the per-node
//! requests on them. The algorithm in `redlock.rs` and `lock.rs` is written once against this
//! type, so single- and multi-resource locks share acquire, rollback, fencing, extend and
//! release.

use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeError;
use redis::{Cmd, RedisWrite, ToRedisArgs};

use crate::node::{Grant, Node, ScriptInput};
use crate::quorum::Lease;
use crate::scripts;
use crate::token::LockToken;
use crate::wakeup::hub::Ticket;

/// The keys of one lock.
#[derive(Debug, Clone)]
pub(crate) enum Keys {
    /// One resource: plain `SET NX PX` on the hot path.
    One(Arc<str>),
    /// One slot of a [`Semaphore`](crate::Semaphore): a [`One`](Keys::One) in every respect
    /// but the name metrics give it.
    Slot(Arc<str>),
    /// Several resources, taken all or nothing by one script per node.
    Many(Arc<[String]>),
    /// One resource taken under an owner id instead of a fresh token
    /// ([`Redlock::acquire_as`](crate::Redlock::acquire_as)): a node where the key already
    /// holds that id grants by renewing it.
    /// With `always_fenced`, every grant advances the fencing counter whatever the client's
    /// setting: a leader's fence is its term (see `election`).
    Owned {
        key: Arc<str>,
        owner: LockToken,
        always_fenced: bool,
    },
    /// A reader's hold of a read-write lock ([`RwLock`](crate::RwLock)): the token in the
    /// sorted set `<key>:readers`, refused while a writer holds `key` or waits for it.
    Read(Arc<str>),
    /// A writer's hold of a read-write lock: `key` itself, taken only while no reader holds
    /// it. Every refused attempt notes `writer` in `<key>:writers` for `wait`, which holds new
    /// readers back.
    Write {
        key: Arc<str>,
        writer: Arc<str>,
        wait: Duration,
    },
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
            Keys::One(key)
            | Keys::Slot(key)
            | Keys::Owned { key, .. }
            | Keys::Read(key)
            | Keys::Write { key, .. } => (Some(&**key), None),
            Keys::Many(keys) => (None, Some(keys.iter().map(String::as_str))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        match self {
            Keys::One(_)
            | Keys::Slot(_)
            | Keys::Owned { .. }
            | Keys::Read(_)
            | Keys::Write { .. } => 1,
            Keys::Many(keys) => keys.len(),
        }
    }

    /// The owner id an acquire of these keys stores, instead of a fresh token.
    pub(crate) fn owner(&self) -> Option<&LockToken> {
        match self {
            Keys::Owned { owner, .. } => Some(owner),
            _ => None,
        }
    }

    /// The primitive these keys are, as metrics label it (see `telemetry`).
    pub(crate) fn primitive(&self) -> &'static str {
        match self {
            Keys::One(_) => "mutex",
            Keys::Slot(_) => "permit",
            Keys::Many(_) => "multi",
            Keys::Owned {
                always_fenced: true,
                ..
            } => "leader",
            Keys::Owned { .. } => "owned",
            Keys::Read(_) => "read",
            Keys::Write { .. } => "write",
        }
    }

    /// Whether an acquire of these keys may wait in their line (see `wakeup`). The line's
    /// scripts know nothing of readers: the holds of a read-write lock wait by retrying.
    pub(crate) fn waits_in_line(&self) -> bool {
        !matches!(self, Keys::Read(_) | Keys::Write { .. })
    }

    /// Whether an acquire advances the fencing counters, the client's setting being
    /// `configured`: never for a reader, which shares the resource; always for a leader.
    pub(crate) fn fenced(&self, configured: bool) -> bool {
        match self {
            Keys::Read(_) => false,
            Keys::Owned { always_fenced, .. } => configured || *always_fenced,
            _ => configured,
        }
    }

    /// The channels hand-offs of these keys to the client `client`'s waiters are announced on;
    /// for a read-write lock, the channels its releases are announced on to every client (a
    /// writer's release to all, the last reader's to writers only).
    pub(crate) fn channels(&self, client: &str) -> Vec<String> {
        match self {
            Keys::Read(key) => vec![scripts::rw_channel(key)],
            Keys::Write { key, .. } => {
                vec![scripts::rw_channel(key), scripts::drained_channel(key)]
            }
            _ => self
                .iter()
                .map(|key| scripts::release_channel(key, client))
                .collect(),
        }
    }

    /// Sets every key (or none) to `token` for `ttl_ms`, advancing the fencing counters when
    /// `fenced`. With a place in the line, the attempt is a waiter's (see `wakeup`): it renews
    /// the waiter's entry, and takes the keys only if they are free and the waiter heads each
    /// line, or they are reserved for it.
    pub(crate) async fn acquire_on(
        &self,
        node: &Node,
        fenced: bool,
        token: &str,
        ttl_ms: u64,
        in_line: Option<(&Ticket, Duration)>,
        timeout: Duration,
    ) -> Result<Acquired, NodeError> {
        match (self, in_line) {
            (Keys::One(key) | Keys::Slot(key), None) => {
                let fence_key = fenced.then(|| fence_key(key));
                let grant = node
                    .acquire(key, fence_key.as_deref(), token, ttl_ms, timeout)
                    .await?;
                Ok(match grant {
                    Grant::Granted { fence } => Acquired::Granted(fence.into_iter().collect()),
                    Grant::Held => Acquired::Held,
                })
            }
            (Keys::Owned { key, .. }, None) => {
                let mut call = scripts::ACQUIRE_OWNED.prepare_invoke();
                call.key(&**key);
                if fenced {
                    call.key(fence_key(key));
                }
                call.arg(token).arg(ttl_ms);
                let grant: u64 = node.invoke(call, timeout).await?;
                Ok(match grant {
                    0 => Acquired::Held,
                    fence if fenced => Acquired::Granted(vec![fence]),
                    _ => Acquired::Granted(Vec::new()),
                })
            }
            (Keys::Read(key), _) => {
                let mut call = scripts::ACQUIRE_READ.prepare_invoke();
                call.key(&**key).key(readers_key(key)).key(writers_key(key));
                call.arg(token).arg(ttl_ms);
                let granted: i64 = node.invoke(call, timeout).await?;
                Ok(match granted {
                    1 => Acquired::Granted(Vec::new()),
                    _ => Acquired::Held,
                })
            }
            (Keys::Write { key, writer, wait }, _) => {
                let mut call = scripts::ACQUIRE_WRITE.prepare_invoke();
                call.key(&**key).key(readers_key(key)).key(writers_key(key));
                if fenced {
                    call.key(fence_key(key));
                }
                call.arg(token)
                    .arg(ttl_ms)
                    .arg(&**writer)
                    .arg(millis(*wait));
                let grant: u64 = node.invoke(call, timeout).await?;
                Ok(match grant {
                    0 => Acquired::Held,
                    fence if fenced => Acquired::Granted(vec![fence]),
                    _ => Acquired::Granted(Vec::new()),
                })
            }
            (Keys::Many(keys), None) => {
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
            (_, Some((ticket, entry_lease))) => {
                let mut call = scripts::ACQUIRE_QUEUED.prepare_invoke();
                self.line_keys(&mut call);
                if fenced {
                    for key in self.iter() {
                        call.key(fence_key(key));
                    }
                }
                call.arg(token)
                    .arg(ttl_ms)
                    .arg(self.len())
                    .arg(&ticket.id)
                    .arg(ticket.order)
                    .arg(millis(entry_lease));
                let fences: Option<Vec<u64>> = node.invoke(call, timeout).await?;
                Ok(fences.map_or(Acquired::Held, Acquired::Granted))
            }
        }
    }

    /// Adds the keys, their lines and their lines' leases, the first keys of the line scripts.
    fn line_keys(&self, call: &mut redis::ScriptInvocation<'_>) {
        for key in self.iter() {
            call.key(key);
        }
        for key in self.iter() {
            call.key(Suffixed(key, LINE_SUFFIX));
        }
        for key in self.iter() {
            call.key(Suffixed(key, LEASES_SUFFIX));
        }
    }

    /// Removes the waiter `id` from the line of every key on `node`, passing on a key reserved
    /// for it.
    pub(crate) async fn dequeue_on(
        &self,
        node: &Node,
        id: &str,
        reserve: Duration,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        let mut call = scripts::DEQUEUE.prepare_invoke();
        self.line_keys(&mut call);
        call.arg(id).arg(millis(reserve)).arg(self.len());
        let _: i64 = node.invoke(call, timeout).await?;
        Ok(())
    }

    /// Compare-and-delete of every key, handing each to the head of its line if anybody waits
    /// (see `lua/release.lua`); `Ok(true)` when at least one key was released.
    pub(crate) async fn release_on(
        &self,
        node: &Node,
        token: &str,
        hand_off: &HandOff,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        match self {
            Keys::Read(key) => {
                let mut call = scripts::RELEASE_READ.prepare_invoke();
                call.key(readers_key(key)).key(writers_key(key));
                call.arg(token).arg(scripts::drained_channel(key));
                let released: i64 = node.invoke(call, timeout).await?;
                return Ok(released == 1);
            }
            Keys::Write { key, writer, .. } => {
                let mut call = scripts::RELEASE_WRITE.prepare_invoke();
                call.key(&**key).key(writers_key(key));
                call.arg(token).arg(scripts::rw_channel(key)).arg(&**writer);
                let released: i64 = node.invoke(call, timeout).await?;
                return Ok(released == 1);
            }
            _ => {}
        }
        let input = ReleaseInput {
            keys: self,
            token,
            hand_off,
        };
        node.release(&input, hand_off.requeue.is_none(), timeout)
            .await
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
            Keys::One(key)
            | Keys::Slot(key)
            | Keys::Owned { key, .. }
            | Keys::Write { key, .. } => node.extend(key, token, ttl_ms, timeout).await,
            Keys::Read(key) => {
                let mut call = scripts::EXTEND_READ.prepare_invoke();
                call.key(readers_key(key)).arg(token).arg(ttl_ms);
                let renewed: i64 = node.invoke(call, timeout).await?;
                Ok(renewed == 1)
            }
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
            (
                Keys::One(key)
                | Keys::Slot(key)
                | Keys::Owned { key, .. }
                | Keys::Write { key, .. },
                [fence],
            ) => {
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

/// What a key reserved for a waiter holds before the waiter's id (see `lua/release.lua`). No
/// token can equal such a value.
pub(crate) const RESERVED_PREFIX: &str = "~queued:";

/// What an elected leader's key holds before its token, once the leader marked it (see
/// `lua/confirm_leader.lua`): the holder's extend, fence and release scripts accept the token
/// in either form. No token or owner id starts with `~`, so none can equal such a value.
pub(crate) const ELECTED_PREFIX: &str = "~elected:";

/// How a release passes a key on to the line.
#[derive(Debug, Clone)]
pub(crate) struct HandOff {
    /// How long a key reserved for the head of its line stays reserved: the entry lease.
    pub(crate) reserve: Duration,
    /// For the rollback of a waiter's failed attempt: the waiter and its entry lease, put back
    /// in each line before the head is chosen, so that it keeps its place.
    pub(crate) requeue: Option<(Ticket, Duration)>,
}

impl HandOff {
    /// How a release of `lease` passes the keys on: reserved for the head of each line for one
    /// entry lease, but never longer than the lock itself could have lived.
    pub(crate) fn for_lease(lease: &Lease) -> Self {
        HandOff::to_line(lease.entry_lease().min(lease.ttl))
    }

    /// A release that puts nobody back in line.
    pub(crate) fn to_line(reserve: Duration) -> Self {
        HandOff {
            reserve,
            requeue: None,
        }
    }
}

/// The input of `lua/release.lua`: each lock key, then their lines, then their leases; the
/// token, how long a reservation lasts and the key count, then the waiter put back in line by a
/// rollback.
struct ReleaseInput<'a> {
    keys: &'a Keys,
    token: &'a str,
    hand_off: &'a HandOff,
}

impl ScriptInput for ReleaseInput<'_> {
    fn args(&self) -> usize {
        1 + 3 * self.keys.len()
            + 3
            + if self.hand_off.requeue.is_some() {
                3
            } else {
                0
            }
    }

    fn bytes(&self) -> usize {
        let keys: usize = self.keys.iter().map(|key| 3 * key.len() + 16).sum();
        keys + self.token.len() + 64
    }

    fn write(&self, cmd: &mut Cmd) {
        let keys = self.keys;
        cmd.arg(3 * keys.len());
        for key in keys.iter() {
            cmd.arg(key);
        }
        for key in keys.iter() {
            cmd.arg(Suffixed(key, LINE_SUFFIX));
        }
        for key in keys.iter() {
            cmd.arg(Suffixed(key, LEASES_SUFFIX));
        }
        cmd.arg(self.token)
            .arg(millis(self.hand_off.reserve))
            .arg(keys.len());
        if let Some((ticket, entry_lease)) = &self.hand_off.requeue {
            cmd.arg(&ticket.id)
                .arg(ticket.order)
                .arg(millis(*entry_lease));
        }
    }
}

/// A key name with a suffix, written into a command without building the name first.
struct Suffixed<'a>(&'a str, &'static str);

impl ToRedisArgs for Suffixed<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(format_args!("{}{}", self.0, self.1));
    }
}

/// Whole milliseconds, at least 1, as the scripts take them.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The Redis key of a resource's fencing counter.
pub(crate) fn fence_key(key: &str) -> String {
    format!("{key}:fence")
}

/// The Redis key of a read-write lock's readers: tokens scored by when their hold expires.
pub(crate) fn readers_key(key: &str) -> String {
    format!("{key}:readers")
}

/// The Redis key of a read-write lock's waiting writers: ids scored by when the note lapses.
pub(crate) fn writers_key(key: &str) -> String {
    format!("{key}:writers")
}

/// What a resource's line key adds to its lock key.
const LINE_SUFFIX: &str = ":queue";

/// What the key of a resource's line leases adds to its lock key.
const LEASES_SUFFIX: &str = ":leases";

/// The Redis key of a resource's line of waiters: a sorted set of waiter ids by order.
pub(crate) fn line_key(key: &str) -> String {
    format!("{key}{LINE_SUFFIX}")
}

/// The Redis key of the leases of a resource's line entries: waiter ids by the master's time
/// (ms) at which each entry lapses.
pub(crate) fn leases_key(key: &str) -> String {
    format!("{key}{LEASES_SUFFIX}")
}

/// The suffixes of the keys and channels kept beside a lock's own key, each with the reason a
/// resource whose key ends with it is refused. The lock key is `<prefix><resource>` and its
/// auxiliary keys are the lock key plus a suffix, so a resource named `x:fence` would *be*
/// the fencing counter of `x`: acquiring it would overwrite the counter and releasing it would
/// delete it. Refusing these names keeps every existing key where it is, so masters in use keep
/// their counters.
pub(crate) const RESERVED_SUFFIXES: [(&str, &str); 7] = [
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
        ":leases",
        "it ends with \":leases\", reserved for the wait queue's leases of the resource it extends",
    ),
    (
        ":readers",
        "it ends with \":readers\", reserved for the readers of the read-write lock it extends",
    ),
    (
        ":writers",
        "it ends with \":writers\", reserved for the waiting writers of the read-write lock it extends",
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

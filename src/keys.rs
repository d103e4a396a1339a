//! `Keys`: the Redis keys one lock holds — one for [`Redlock::acquire`](crate::Redlock::acquire),
//! several for [`Redlock::acquire_many`](crate::Redlock::acquire_many) — and the per-node
//! requests on them. The algorithm in `redlock.rs` and `lock.rs` is written once against this
//! type, so single- and multi-resource locks share acquire, rollback, fencing, extend and
//! release.

mod by_slot;

use std::sync::Arc;
use std::time::Duration;

use crate::error::{NodeError, NodeErrorKind};
use redis::Cmd;

use crate::node::{Companion, Node, ScriptInput};
use crate::quorum::Lease;
use crate::scripts;
use crate::sync;
use crate::token::{comes_after, AttemptStamps, LockToken};
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
    /// One resource taken under an owner id
    /// ([`Redlock::acquire_as`](crate::Redlock::acquire_as)): a node where the key holds an
    /// earlier attempt of the same owner grants by taking it over (see
    /// [`LockToken::for_owner`]).
    Owned { key: Arc<str>, owner: Arc<str> },
    /// One term of an election (see `election`): a [`One`](Keys::One) whose tokens carry the
    /// value the leader announces, and whose every grant advances the fencing counter whatever
    /// the client's setting: a leader's fence is its term.
    Term { key: Arc<str>, value: Arc<str> },
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
    /// At least one key is held by another token; nothing was set. A waiter's attempt learns
    /// the master's time (ms) with it (see `wakeup/handed.rs`).
    Held(Option<u64>),
    /// Others wait in line for a key: an attempt with no place in the line is refused, so that
    /// a key that fell free goes to the head of its line; nothing was set. As `Held`, with the
    /// master's time for a waiter's attempt.
    Line(Option<u64>),
}

impl Keys {
    /// The keys, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            Keys::One(key)
            | Keys::Slot(key)
            | Keys::Owned { key, .. }
            | Keys::Term { key, .. }
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
            | Keys::Term { .. }
            | Keys::Read(_)
            | Keys::Write { .. } => 1,
            Keys::Many(keys) => keys.len(),
        }
    }

    /// A fresh token for one attempt on these keys: no two attempts write the same value, so
    /// a cleanup (which compares the whole value) only ever removes its own attempt's keys.
    /// Under an owner id the token carries the attempt's stamp, drawn from `stamps`.
    pub(crate) fn attempt_token(&self, stamps: &AttemptStamps) -> LockToken {
        match self {
            Keys::Owned { owner, .. } => LockToken::for_owner(owner, stamps.next()),
            Keys::Term { value, .. } => LockToken::for_term(value),
            _ => LockToken::generate(),
        }
    }

    /// Whether a lock on these keys belongs to an id rather than to the task that acquired
    /// it: an owner's (reentrant by its id) or an election term's (renewed by whoever runs the
    /// campaign). Such a lock is not one of its task's holds.
    pub(crate) fn held_by_id(&self) -> bool {
        matches!(self, Keys::Owned { .. } | Keys::Term { .. })
    }

    /// The primitive these keys are, as metrics label it (see `telemetry`).
    pub(crate) fn primitive(&self) -> &'static str {
        match self {
            Keys::One(_) => "mutex",
            Keys::Slot(_) => "permit",
            Keys::Many(_) => "multi",
            Keys::Term { .. } => "leader",
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

    /// How long a fencing counter lasts after its last grant, in ms, when an acquire advances
    /// the counters; the client's fencing setting being `configured`: never for a reader, which
    /// shares the resource; always for a leader. The grace, plus the second the clock floor of
    /// `next_fence` (`lua/line.lua`) rounds away: a counter that lapsed then leaves its master's
    /// clock more than the grace past its last write, and the floor above every earlier token
    /// while no master's clock runs ahead of another's by the grace.
    pub(crate) fn fenced(&self, configured: bool, grace: Duration) -> Option<u64> {
        let fenced = match self {
            Keys::Read(_) => false,
            Keys::Term { .. } => true,
            _ => configured,
        };
        fenced.then(|| millis(grace.saturating_add(FENCE_FLOOR_ROUNDING)))
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

    /// Sets every key (or none) to the attempt's token for its TTL, advancing the fencing
    /// counters (each lasting `fenced` ms after it) when fenced. With a place in the line, the
    /// attempt is a waiter's (see `wakeup`): it renews the waiter's entry, and takes the keys
    /// only if they are free and the waiter heads each line, or they are reserved for it.
    pub(crate) async fn acquire_on(
        &self,
        node: &Node,
        attempt: &AttemptInput<'_>,
        timeout: Duration,
    ) -> Result<Acquired, NodeError> {
        if let Some(groups) = by_slot::groups(self, node) {
            return by_slot::acquire(groups, node, attempt, timeout).await;
        }
        let AttemptInput {
            fenced,
            token,
            ttl_ms,
            in_line,
            takeovers,
            bare,
        } = *attempt;
        match (self, in_line) {
            (Keys::One(key) | Keys::Slot(key), None)
                if bare && fenced.is_none() && !node.confirms_grants() =>
            {
                // The plain mutex's first attempt: what every Redlock client writes.
                let set = node.set_nx(key, token, ttl_ms, timeout).await?;
                Ok(match set {
                    true => Acquired::Granted(Vec::new()),
                    false => Acquired::Held(None),
                })
            }
            (Keys::One(key) | Keys::Slot(key) | Keys::Term { key, .. }, None)
                if !node.confirms_grants() =>
            {
                // The hot path of a plain mutex: the command written in one piece.
                let input = AcquireInput {
                    key,
                    fenced,
                    token,
                    ttl_ms,
                };
                let grant = node.acquire(&input, timeout).await?;
                Ok(plain_grant(grant, fenced))
            }
            (Keys::One(_) | Keys::Slot(_) | Keys::Term { .. }, None) => {
                let mut call = scripts::ACQUIRE.prepare_invoke();
                self.line_keys(&mut call);
                if fenced.is_some() {
                    self.fence_keys(&mut call);
                }
                call.arg(token).arg(ttl_ms);
                if let Some(grace) = fenced {
                    call.arg(grace);
                }
                let grant: i64 = node.invoke_granting(call, timeout, |g| *g > 0).await?;
                Ok(plain_grant(grant, fenced))
            }
            (Keys::Owned { owner, .. }, None) => {
                self.acquire_owned_on(node, owner, attempt, timeout).await
            }
            (Keys::Read(key), _) => {
                let mut call = scripts::ACQUIRE_READ.prepare_invoke();
                call.key(&**key).key(readers_key(key)).key(writers_key(key));
                call.arg(token).arg(ttl_ms);
                let granted: i64 = node.invoke_granting(call, timeout, |g| *g == 1).await?;
                Ok(match granted {
                    1 => Acquired::Granted(Vec::new()),
                    _ => Acquired::Held(None),
                })
            }
            (Keys::Write { key, writer, wait }, _) => {
                let mut call = scripts::ACQUIRE_WRITE.prepare_invoke();
                call.key(&**key).key(readers_key(key)).key(writers_key(key));
                if fenced.is_some() {
                    call.key(fence_key(key));
                }
                call.arg(token)
                    .arg(ttl_ms)
                    .arg(&**writer)
                    .arg(millis(*wait));
                if let Some(grace) = fenced {
                    call.arg(grace);
                }
                let grant: u64 = node.invoke_granting(call, timeout, |g| *g > 0).await?;
                Ok(match grant {
                    0 => Acquired::Held(None),
                    fence if fenced.is_some() => Acquired::Granted(vec![fence]),
                    _ => Acquired::Granted(Vec::new()),
                })
            }
            (Keys::Many(keys), None) => {
                let mut call = scripts::ACQUIRE_MANY.prepare_invoke();
                self.line_keys(&mut call);
                if fenced.is_some() {
                    self.fence_keys(&mut call);
                }
                call.arg(token).arg(ttl_ms).arg(keys.len());
                if let Some(grace) = fenced {
                    call.arg(grace);
                }
                let reply: redis::Value = node.invoke_granting(call, timeout, is_grant).await?;
                fences_or_refusal(node, reply)
            }
            (_, Some((ticket, entry_lease))) => {
                // Under an owner id, a key holding another attempt of the owner is taken over
                // as by a plain attempt: named by the master, then compared and swapped.
                let owner = match self {
                    Keys::Owned { owner, .. } => Some(owner),
                    _ => None,
                };
                owner_attempt(node, takeovers, |expected| {
                    let mut call = scripts::ACQUIRE_QUEUED.prepare_invoke();
                    self.line_keys(&mut call);
                    if let Keys::Owned { key, .. } = self {
                        call.key(Companion(key, TOOK_SUFFIX));
                    }
                    if fenced.is_some() {
                        self.fence_keys(&mut call);
                    }
                    call.arg(token)
                        .arg(ttl_ms)
                        .arg(self.len())
                        .arg(&ticket.id)
                        .arg(ticket.order)
                        .arg(millis(entry_lease))
                        .arg(fenced.unwrap_or(0));
                    if let Some(owner) = owner {
                        call.arg(&**owner).arg(expected);
                    }
                    async move {
                        let reply: redis::Value =
                            node.invoke_granting(call, timeout, is_grant).await?;
                        Ok(match owned_value(&reply) {
                            Some((now, value)) => OwnerReply::Owned(now, value),
                            None => OwnerReply::Answer(fences_or_refusal(node, reply)?),
                        })
                    }
                })
                .await
            }
        }
    }

    /// An attempt under the owner id `owner` (`lua/acquire_owned.lua`), in one request or two
    /// (see [`owner_attempt`]).
    async fn acquire_owned_on(
        &self,
        node: &Node,
        owner: &str,
        attempt: &AttemptInput<'_>,
        timeout: Duration,
    ) -> Result<Acquired, NodeError> {
        let AttemptInput {
            fenced,
            token,
            ttl_ms,
            takeovers,
            ..
        } = *attempt;
        owner_attempt(node, takeovers, |expected| {
            let mut call = scripts::ACQUIRE_OWNED.prepare_invoke();
            self.line_keys(&mut call);
            if let Keys::Owned { key, .. } = self {
                call.key(Companion(key, TOOK_SUFFIX));
            }
            if fenced.is_some() {
                self.fence_keys(&mut call);
            }
            call.arg(token).arg(ttl_ms).arg(owner).arg(expected);
            if let Some(grace) = fenced {
                call.arg(grace);
            }
            async move {
                let granted = |reply: &redis::Value| matches!(reply, redis::Value::Int(1..));
                let reply: redis::Value = node.invoke_granting(call, timeout, granted).await?;
                match reply {
                    redis::Value::Int(grant) => Ok(OwnerReply::Answer(plain_grant(grant, fenced))),
                    redis::Value::BulkString(value) => Ok(OwnerReply::Owned(None, value)),
                    other => Err(unexpected(node, &other)),
                }
            }
        })
        .await
    }

    /// Adds the keys, their lines, their lines' leases and their records (see `stretch` in
    /// `lua/line.lua`), the first keys of the line scripts.
    fn line_keys(&self, call: &mut redis::ScriptInvocation<'_>) {
        for key in self.iter() {
            call.key(key);
        }
        for suffix in [LINE_SUFFIX, LEASES_SUFFIX, HELD_SUFFIX] {
            for key in self.iter() {
                call.key(Companion(key, suffix));
            }
        }
    }

    /// Adds the keys' fencing counters, in key order.
    fn fence_keys(&self, call: &mut redis::ScriptInvocation<'_>) {
        for key in self.iter() {
            call.key(fence_key(key));
        }
    }

    /// Removes the waiter `id` from the line of every key on `node`, passing on a key reserved
    /// for it, unless it is `holding` the lock that key is part of (see `wakeup/handed.rs`).
    pub(crate) async fn dequeue_on(
        &self,
        node: &Node,
        id: &str,
        reserve: Duration,
        holding: bool,
        timeout: Duration,
    ) -> Result<(), NodeError> {
        if let Some(groups) = by_slot::groups(self, node) {
            let answers = by_slot::each(&groups, |g| {
                g.keys.dequeue_on(node, id, reserve, holding, timeout)
            });
            return answers.await.into_iter().collect();
        }
        let mut call = scripts::DEQUEUE.prepare_invoke();
        self.line_keys(&mut call);
        call.arg(id).arg(millis(reserve)).arg(self.len());
        if holding {
            call.arg("holding");
        }
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
        if let Some(groups) = by_slot::groups(self, node) {
            let answers = by_slot::each(&groups, |g| {
                g.keys.release_on(node, token, hand_off, timeout)
            });
            return by_slot::all_ok(answers.await).map(|released| released.contains(&true));
        }
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
        let named = hand_off
            .takeovers
            .as_ref()
            .filter(|t| t.named_on(node.id()));
        if let (Keys::Owned { key, .. }, Some(takeovers)) = (self, named) {
            // The rollback of an owner's takeover here: what it took goes back.
            let input = RestoreInput {
                key,
                token,
                ttl: takeovers.ttl,
                hand_off,
            };
            return node.restore(&input, timeout).await;
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
        if let Some(groups) = by_slot::groups(self, node) {
            let answers =
                by_slot::each(&groups, |g| g.keys.extend_on(node, token, ttl_ms, timeout));
            return by_slot::all_ok(answers.await).map(|renewed| !renewed.contains(&false));
        }
        match self {
            Keys::One(key) | Keys::Slot(key) | Keys::Owned { key, .. } => {
                // A key that others may wait for: its record comes too (see `lua/extend.lua`);
                // under an owner id, its takeovers: a key another attempt took over from this
                // lock is kept alive until that attempt's rollback gives it back.
                let mut call = scripts::EXTEND.prepare_invoke();
                call.key(&**key).key(held_key(key));
                if matches!(self, Keys::Owned { .. }) {
                    call.key(Companion(key, TOOK_SUFFIX));
                }
                call.arg(token).arg(ttl_ms).arg(1);
                let renewed: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
                Ok(renewed == 1)
            }
            Keys::Write { key, .. } => {
                // A writer's key has no line of its own (its waiting writers are noted apart):
                // it is never stretched, and has no record.
                let mut call = scripts::EXTEND.prepare_invoke();
                call.key(&**key).arg(token).arg(ttl_ms);
                let renewed: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
                Ok(renewed == 1)
            }
            Keys::Term { key, .. } => {
                // The term was won and marked on a quorum: a renewal marks it where the mark
                // missed.
                let mut call = scripts::EXTEND.prepare_invoke();
                call.key(&**key)
                    .key(held_key(key))
                    .arg(token)
                    .arg(ttl_ms)
                    .arg(1)
                    .arg("mark");
                call.arg(scripts::elected_channel(key));
                let renewed: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
                Ok(renewed == 1)
            }
            Keys::Read(key) => {
                let mut call = scripts::EXTEND_READ.prepare_invoke();
                call.key(readers_key(key)).arg(token).arg(ttl_ms);
                let renewed: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
                Ok(renewed == 1)
            }
            Keys::Many(keys) => {
                let mut call = scripts::EXTEND.prepare_invoke();
                for key in keys.iter() {
                    call.key(key.as_str());
                }
                for key in keys.iter() {
                    call.key(held_key(key));
                }
                call.arg(token).arg(ttl_ms).arg(keys.len());
                let renewed: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
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
        grace_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        if let Some(groups) = by_slot::groups(self, node) {
            let answers = by_slot::each(&groups, |g| async move {
                let fences = g.fences(fences);
                g.keys
                    .raise_fence_on(node, token, &fences, grace_ms, timeout)
                    .await
            });
            return by_slot::all_ok(answers.await).map(|raised| !raised.contains(&false));
        }
        match (self, fences) {
            (
                Keys::One(key)
                | Keys::Slot(key)
                | Keys::Owned { key, .. }
                | Keys::Term { key, .. }
                | Keys::Write { key, .. },
                [fence],
            ) => {
                node.raise_fence(key, &fence_key(key), token, *fence, grace_ms, timeout)
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
                call.arg(token).arg(grace_ms);
                for fence in fences {
                    call.arg(*fence);
                }
                let raised: i64 = node.invoke_granting(call, timeout, |r| *r == 1).await?;
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
    /// For the cleanup of a waiter's failed attempt: the waiter. A key handed back to it is
    /// reserved without announcing it: the waiter already knows, and a wake-up would send it
    /// straight back against the same holder.
    pub(crate) waiter: Option<Ticket>,
    /// For the rollback of a waiter's failed attempt while it still waits: its entry lease. It
    /// is put back in each line before the head is chosen, so that it keeps its place. Never
    /// for a cleanup that may run after the waiter left the line (a retried rollback, a
    /// straggler's): that would put it back in line.
    pub(crate) requeue: Option<Duration>,
    /// For the rollback of an attempt under an owner id: the nodes where it named a value for a
    /// takeover, where what it took goes back (`lua/restore.lua`) instead of being released.
    pub(crate) takeovers: Option<Arc<Takeovers>>,
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
            waiter: None,
            requeue: None,
            takeovers: None,
        }
    }

    /// This hand-off as a cleanup that may run after its waiter left the line: it does not put
    /// the waiter back.
    pub(crate) fn without_requeue(&self) -> Self {
        HandOff {
            requeue: None,
            ..self.clone()
        }
    }
}

/// The input of `lua/release.lua`: each lock key, then their lines, their leases and their
/// records (under an owner id, its takeovers); the token, how long a reservation lasts and the
/// key count, then the waiter put back in line by a rollback.
struct ReleaseInput<'a> {
    keys: &'a Keys,
    token: &'a str,
    hand_off: &'a HandOff,
}

impl ReleaseInput<'_> {
    /// Each key, its line, its leases and its record; under an owner id, its takeovers too.
    fn key_count(&self) -> usize {
        4 * self.keys.len() + usize::from(matches!(self.keys, Keys::Owned { .. }))
    }
}

impl ScriptInput for ReleaseInput<'_> {
    fn args(&self) -> usize {
        1 + self.key_count()
            + 3
            + match (&self.hand_off.waiter, self.hand_off.requeue) {
                (None, _) => 0,
                (Some(_), None) => 1,
                (Some(_), Some(_)) => 3,
            }
    }

    fn bytes(&self) -> usize {
        let keys: usize = self.keys.iter().map(|key| 4 * key.len() + 24).sum();
        keys + self.token.len() + 64
    }

    fn write(&self, cmd: &mut Cmd) {
        let keys = self.keys;
        cmd.arg(self.key_count());
        for key in keys.iter() {
            cmd.arg(key);
        }
        for key in keys.iter() {
            cmd.arg(Companion(key, LINE_SUFFIX));
        }
        for key in keys.iter() {
            cmd.arg(Companion(key, LEASES_SUFFIX));
        }
        for key in keys.iter() {
            cmd.arg(Companion(key, HELD_SUFFIX));
        }
        if let Keys::Owned { key, .. } = keys {
            cmd.arg(Companion(key, TOOK_SUFFIX));
        }
        cmd.arg(self.token)
            .arg(millis(self.hand_off.reserve))
            .arg(keys.len());
        if let Some(ticket) = &self.hand_off.waiter {
            cmd.arg(&ticket.id);
            if let Some(entry_lease) = self.hand_off.requeue {
                cmd.arg(ticket.order).arg(millis(entry_lease));
            }
        }
    }
}

/// What one attempt sends every node: its token and TTL in ms, how long the fence counters last
/// after a grant when fenced, the waiter's place in line with its entry lease, and, under an
/// owner id, its takeovers.
#[derive(Clone, Copy)]
pub(crate) struct AttemptInput<'a> {
    pub(crate) fenced: Option<u64>,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) in_line: Option<(&'a Ticket, Duration)>,
    pub(crate) takeovers: Option<&'a Takeovers>,
    /// The first attempt of an acquire that retries: a plain mutex's is then a bare `SET NX PX`
    /// (see [`Node::set_nx`]).
    pub(crate) bare: bool,
}

/// The input of `lua/restore.lua`, the rollback of an owner's takeover on one key: the key, its
/// line, its line's leases, its takeovers and its record; the token, how long a reservation
/// lasts, the attempt's TTL, and the waiter put back in line.
struct RestoreInput<'a> {
    key: &'a str,
    token: &'a str,
    ttl: Duration,
    hand_off: &'a HandOff,
}

impl RestoreInput<'_> {
    fn requeued(&self) -> Option<(&Ticket, Duration)> {
        self.hand_off.waiter.as_ref().zip(self.hand_off.requeue)
    }
}

impl ScriptInput for RestoreInput<'_> {
    fn args(&self) -> usize {
        1 + 5 + 3 + if self.requeued().is_some() { 3 } else { 0 }
    }

    fn bytes(&self) -> usize {
        5 * self.key.len() + self.token.len() + 104
    }

    fn write(&self, cmd: &mut Cmd) {
        let key = self.key;
        cmd.arg(5)
            .arg(key)
            .arg(Companion(key, LINE_SUFFIX))
            .arg(Companion(key, LEASES_SUFFIX))
            .arg(Companion(key, TOOK_SUFFIX))
            .arg(Companion(key, HELD_SUFFIX));
        cmd.arg(self.token)
            .arg(millis(self.hand_off.reserve))
            .arg(millis(self.ttl));
        if let Some((ticket, entry_lease)) = self.requeued() {
            cmd.arg(&ticket.id)
                .arg(ticket.order)
                .arg(millis(entry_lease));
        }
    }
}

/// The input of `lua/acquire.lua`, the plain attempt on one key: the key, its line, its
/// line's leases, its record and (fenced) its fence counter; the token, the TTL and (fenced) the
/// counter's grace.
struct AcquireInput<'a> {
    key: &'a str,
    fenced: Option<u64>,
    token: &'a str,
    ttl_ms: u64,
}

impl ScriptInput for AcquireInput<'_> {
    fn args(&self) -> usize {
        if self.fenced.is_some() {
            9
        } else {
            7
        }
    }

    fn bytes(&self) -> usize {
        5 * self.key.len() + self.token.len() + 72
    }

    fn write(&self, cmd: &mut Cmd) {
        let key = self.key;
        cmd.arg(if self.fenced.is_some() { 5 } else { 4 });
        cmd.arg(key)
            .arg(Companion(key, LINE_SUFFIX))
            .arg(Companion(key, LEASES_SUFFIX))
            .arg(Companion(key, HELD_SUFFIX));
        if self.fenced.is_some() {
            cmd.arg(Companion(key, FENCE_SUFFIX));
        }
        cmd.arg(self.token).arg(self.ttl_ms);
        if let Some(grace) = self.fenced {
            cmd.arg(grace);
        }
    }
}

/// What the plain attempt's reply says: -1 refused for the line, 0 held, else granted (the
/// new fence when `fenced`).
fn plain_grant(grant: i64, fenced: Option<u64>) -> Acquired {
    match u64::try_from(grant) {
        Err(_) => Acquired::Line(None),
        Ok(0) => Acquired::Held(None),
        Ok(fence) if fenced.is_some() => Acquired::Granted(vec![fence]),
        Ok(_) => Acquired::Granted(Vec::new()),
    }
}

/// What one request of an attempt under an owner id came to: the node's answer, or the value
/// of another attempt of the owner that holds the key (with the master's time, when the script
/// tells it), which the next request may name to take the key over.
enum OwnerReply {
    Answer(Acquired),
    Owned(Option<u64>, Vec<u8>),
}

/// An attempt under an owner id on `node`, `request(expected)` sending one request that names
/// `expected` (empty for none): where the key holds another attempt of the owner, the node names
/// that value and a second request takes the key over if it still holds exactly that value (a
/// compare-and-swap, whatever the clocks of the processes sharing the id). Two round trips on
/// that node, then; one otherwise.
///
/// The value named is noted in `takeovers` before the request that names it goes out, so that
/// the attempt's rollback, even of an attempt dropped mid-way, puts it back (`lua/restore.lua`):
/// the lock it belongs to, perhaps still held, keeps its key. And once the attempt is decided,
/// its requests still out run late: after a loss they take nothing over (the attempt has no use
/// for the key); after a win only a value the attempt named before it won (the lock it raced,
/// as on the other masters), never one it had not seen: that may be a grant of the same owner
/// won since, perhaps by another process, whose lock the takeover, then this lock's release,
/// would cost that key. Nor is a value of the owner stamped after this attempt ever named (see
/// [`AttemptStamps`]): an attempt this one raced that started later keeps every key it won,
/// whichever of the two wins first.
async fn owner_attempt<F, Fut>(
    node: &Node,
    takeovers: Option<&Takeovers>,
    mut request: F,
) -> Result<Acquired, NodeError>
where
    F: FnMut(&[u8]) -> Fut,
    Fut: std::future::Future<Output = Result<OwnerReply, NodeError>>,
{
    let mut expected: Vec<u8> = Vec::new();
    for takeover in [false, true] {
        match request(&expected).await? {
            OwnerReply::Answer(answer) => return Ok(answer),
            OwnerReply::Owned(now, value) if !takeover => match takeovers {
                Some(takeovers) if takeovers.note(node.id(), &value) => expected = value,
                // Decided against it (see above), or no rollback would know to put the value
                // back: held.
                _ => return Ok(Acquired::Held(now)),
            },
            // It changed hands between the two requests, to yet another attempt of the owner:
            // held, as by anyone else.
            OwnerReply::Owned(now, _) => return Ok(Acquired::Held(now)),
        }
    }
    Ok(Acquired::Held(None))
}

/// The takeovers of one attempt under an owner id: the nodes where it named a value, whose
/// rollback puts back what it took over there (see [`owner_attempt`]), the values it named, and
/// whether the attempt is decided; and the attempt's TTL, for as long as a rollback that ran
/// ahead of its takeover keeps that takeover from taking anything (`lua/restore.lua`).
#[derive(Debug)]
pub(crate) struct Takeovers {
    ttl: Duration,
    /// The attempt's token: it takes over only attempts of the owner it comes after.
    token: LockToken,
    stamps: Arc<AttemptStamps>,
    named: std::sync::Mutex<Named>,
}

#[derive(Debug, Default)]
struct Named {
    /// `None` while the attempt is under way, then whether it won.
    won: Option<bool>,
    /// Node ids.
    nodes: Vec<String>,
    /// The values named before the attempt was decided.
    values: Vec<Vec<u8>>,
}

impl Takeovers {
    /// The takeovers of the attempt `token` for `ttl`, its client's stamps `stamps`.
    pub(crate) fn new(ttl: Duration, token: LockToken, stamps: Arc<AttemptStamps>) -> Self {
        Takeovers {
            ttl,
            token,
            stamps,
            named: std::sync::Mutex::default(),
        }
    }

    /// Notes that the attempt names `value` on node `node`; `false` (nothing noted, nothing to
    /// name) for an attempt of the owner stamped after this one (which this client's next
    /// attempt comes after, see [`AttemptStamps`]), and once the attempt has lost, or has won
    /// and never named that value before.
    fn note(&self, node: &str, value: &[u8]) -> bool {
        if !comes_after(self.token.expose().as_bytes(), value) {
            self.stamps.saw(value);
            return false;
        }
        let mut named = sync::lock(&self.named);
        let known = named.values.iter().any(|v| v == value);
        match (named.won, known) {
            (Some(false), _) | (Some(true), false) => return false,
            (None, false) => named.values.push(value.to_vec()),
            _ => {}
        }
        if !named.nodes.iter().any(|n| n == node) {
            named.nodes.push(node.to_owned());
        }
        true
    }

    /// The attempt is decided: `won` or lost. Its requests still out run late from now on (see
    /// [`owner_attempt`]).
    pub(crate) fn decided(&self, won: bool) {
        sync::lock(&self.named).won = Some(won);
    }

    /// Whether the attempt named a value on `node`.
    fn named_on(&self, node: &str) -> bool {
        sync::lock(&self.named).nodes.iter().any(|n| n == node)
    }
}

/// The value a waiter's attempt under an owner id was refused for, with the master's time:
/// another attempt of the same owner, `{-3, t, value}` (`lua/acquire_queued.lua`), which it may
/// take over by naming it.
fn owned_value(reply: &redis::Value) -> Option<(Option<u64>, Vec<u8>)> {
    match reply {
        redis::Value::Array(items) => match items.as_slice() {
            [redis::Value::Int(-3), redis::Value::Int(now), redis::Value::BulkString(value)] => {
                Some((u64::try_from(*now).ok(), value.clone()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether a reply read by [`fences_or_refusal`] granted.
fn is_grant(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Array(fences) => !matches!(fences.first(), Some(redis::Value::Int(..0))),
        _ => false,
    }
}

/// The reply of a script that grants several keys at once (`lua/acquire_many.lua`,
/// `lua/acquire_queued.lua`): the new fence counters in key order; when refused, nil (a key is
/// held) or -1 (refused for the line alone), or from a waiter's attempt {-2, t} or {-1, t}, t
/// being the master's time in ms.
fn fences_or_refusal(node: &Node, reply: redis::Value) -> Result<Acquired, NodeError> {
    match reply {
        redis::Value::Int(-1) => Ok(Acquired::Line(None)),
        redis::Value::Nil => Ok(Acquired::Held(None)),
        redis::Value::Array(reply) => match reply.as_slice() {
            [redis::Value::Int(-2), redis::Value::Int(now)] => {
                Ok(Acquired::Held(u64::try_from(*now).ok()))
            }
            [redis::Value::Int(-1), redis::Value::Int(now)] => {
                Ok(Acquired::Line(u64::try_from(*now).ok()))
            }
            fences => fences
                .iter()
                .map(|fence| match fence {
                    redis::Value::Int(fence) => u64::try_from(*fence).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<u64>>>()
                .map(Acquired::Granted)
                .ok_or_else(|| unexpected(node, &fences)),
        },
        other => Err(unexpected(node, &other)),
    }
}

/// A reply no script returns, as `node`'s error.
fn unexpected(node: &Node, reply: &impl std::fmt::Debug) -> NodeError {
    NodeError::new(
        node.id(),
        NodeErrorKind::UnexpectedReply(format!("{reply:?}")),
    )
}

/// Whole milliseconds, at least 1, as the scripts take them.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

// The companions of a lock key (see `node::layout`): every suffix here is one of
// `COMPANION_SUFFIXES`.

/// What the clock floor of a fence leaves out: it counts whole seconds (`next_fence` in
/// `lua/line.lua`), so that masters granting within one second agree on the token.
const FENCE_FLOOR_ROUNDING: Duration = Duration::from_secs(1);

/// What a resource's fencing counter's key adds to its lock key.
const FENCE_SUFFIX: &str = ":fence";

/// What a resource's line key adds to its lock key. The line's scripts name the resource's
/// channels after the line key's base (`lua/line.lua`, `channel_base`), so its length is theirs.
const LINE_SUFFIX: &str = ":queue";

/// What the key of a resource's line leases adds to its lock key.
const LEASES_SUFFIX: &str = ":leases";

/// What the record of a lock key stretched for its line adds to the lock key: its holder's own
/// lease (see `stretch` in `lua/line.lua`).
const HELD_SUFFIX: &str = ":held";

/// What the key of an owner's takeovers adds to its lock key: a hash of the attempts that took
/// the key over, each to the value it replaced (see `lua/restore.lua`).
const TOOK_SUFFIX: &str = ":took";

/// The Redis key of a resource's fencing counter.
pub(crate) fn fence_key(key: &str) -> String {
    crate::companion_key(key, FENCE_SUFFIX)
}

/// The Redis key of a read-write lock's readers: tokens scored by when their hold expires.
pub(crate) fn readers_key(key: &str) -> String {
    crate::companion_key(key, ":readers")
}

/// The Redis key of a read-write lock's waiting writers: ids scored by when the note lapses.
pub(crate) fn writers_key(key: &str) -> String {
    crate::companion_key(key, ":writers")
}

/// The Redis key of a resource's line of waiters: a sorted set of waiter ids by order.
pub(crate) fn line_key(key: &str) -> String {
    crate::companion_key(key, LINE_SUFFIX)
}

/// The Redis key of the leases of a resource's line entries: waiter ids by the master's time
/// (ms) at which each entry lapses.
pub(crate) fn leases_key(key: &str) -> String {
    crate::companion_key(key, LEASES_SUFFIX)
}

/// The Redis key of the record of a lock key stretched for its line: the holder's token and
/// lease (see `stretch` in `lua/line.lua`).
pub(crate) fn held_key(key: &str) -> String {
    crate::companion_key(key, HELD_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_companion_suffix_here_is_a_reserved_one() {
        for name in [
            fence_key("k"),
            readers_key("k"),
            writers_key("k"),
            line_key("k"),
            leases_key("k"),
            held_key("k"),
            crate::companion_key("k", TOOK_SUFFIX),
        ] {
            assert!(crate::is_companion_key(&name), "{name}");
        }
    }
}

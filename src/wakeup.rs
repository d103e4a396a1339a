//! Waiting without polling: a waiter retries as soon as a release of the resource it waits for
//! is handed to it, and the jittered retry delay is only the fallback for a missed announcement.
//!
//! * A release by the holder (not the rollback of a failed attempt) publishes the release's id
//!   — a short fingerprint of the token, the same on every node — on the channel
//!   `<key>:released` of every node where it deleted the key (`lua/release.lua`).
//! * Each client keeps **one** subscriber connection per node, opened on first need by a
//!   background task, shared by every waiter of every resource in the process. The task
//!   subscribes to a channel while at least one waiter wants it and unsubscribes when the last
//!   one leaves; it ends when the client is dropped, and reconnects (with backoff) when its
//!   connection breaks.
//! * `acquire` subscribes only after an attempt met contention, so the uncontended path never
//!   waits for a subscription. A waiter that joins a channel already subscribed in this process
//!   costs no I/O at all.
//!
//! # Hand-off
//!
//! * Each release wakes **one** waiter of the client: the one that has waited longest for the
//!   resource (first come, first served; a waiter keeps its place across its failed attempts).
//!   The others keep waiting: woken together they would only split the vote and roll back.
//! * The nodes' copies of one release carry the same id, so only the first copy heard hands it
//!   over. A later copy goes back to the same waiter, if it still waits, and to nobody else:
//!   woken by the first copy, that waiter may have tried before the other nodes had deleted the
//!   key, and tries again. A channel remembers its last `RECENT_IDS` releases. A payload that
//!   is not an id (an older client's release) cannot be matched, and counts every time.
//! * A release is handed to the longest waiter whatever it is doing: a parked waiter wakes at
//!   once; one in the middle of an attempt retries at once should that attempt fail (it may
//!   have been refused before the release). As the channel always has a longest waiter, a
//!   release is never left for "whoever waits next", who could be a newcomer about to attempt
//!   anyway while the waiter that needed the release sleeps on.
//! * A hand-off is used up by the waiter's next attempt. A waiter that leaves before that
//!   attempt ends (its acquire cancelled, or out of attempts) passes it on to the next in
//!   line. One that acquires drops it: the lock is taken, and its own release will be
//!   announced next.
//! * The first confirmed subscription of a channel counts as a release: one that happened while
//!   the subscription was being set up would otherwise be missed, and the longest waiter would
//!   sleep out the whole retry delay.
//! * A lock over several keys waits in the line of each key's channel, and wakes on a hand-off
//!   from any of them.
//! * A woken attempt that won some nodes but no quorum most likely split the vote with a waiter
//!   of another client, woken by the same release: it retries once after a short random pause
//!   (see `RetryPolicy::collision_delay`) instead of waiting out the retry delay.
//!
//! Announcements only shorten a wait; they never decide anything. A lost, late or spurious
//! message costs at most one retry delay or one extra attempt.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::PubSub;
use tokio::sync::{watch, Notify};

use tracing::Instrument;

use crate::error::Error;
use crate::keys::Keys;
use crate::lock::Lock;
use crate::redlock::{Lease, Redlock, WeakRedlock};
use crate::stats::Counters;

/// Bound on one `SUBSCRIBE` / `UNSUBSCRIBE` round trip; past it the connection is replaced.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);
/// First pause before reconnecting a subscriber; doubled on each failure, up to the maximum.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How many release ids a channel remembers. The copies of one release arrive within a few
/// round trips of each other, during which only a handful of other releases can happen.
const RECENT_IDS: usize = 16;

/// The wake-up hub of one client.
#[derive(Debug)]
pub(crate) struct Wakeup {
    hub: Arc<Hub>,
}

#[derive(Debug)]
struct Hub {
    /// How many channels have waiters: lets `join` skip the lock when nobody waits.
    watched: AtomicUsize,
    registry: Mutex<Registry>,
    /// Per node, the signal that tells its subscriber task to bring its subscriptions in line
    /// with the registry's channels; `None`, or closed, while no task runs.
    subscribers: Box<[Mutex<Option<watch::Sender<()>>>]>,
}

/// The channels waited on and their waiters, under one lock so that a hand-off sees every
/// waiter's state as it is.
#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<String, Channel>,
    waiters: HashMap<u64, Slot>,
    next_id: u64,
}

#[derive(Debug, Default)]
struct Channel {
    /// The waiters, longest first.
    line: VecDeque<u64>,
    recent: RecentIds,
    /// Whether a node has confirmed the subscription since the channel was added.
    confirmed: bool,
}

/// One waiter's hand-offs, by channel.
#[derive(Debug, Default)]
struct Slot {
    /// Hand-offs its next attempt is to answer: its next wait returns at once.
    received: Vec<String>,
    /// Hand-offs the attempt in flight answers.
    answering: Vec<String>,
    wake: Arc<Notify>,
}

/// The last releases heard on one channel: their ids, each with the waiter it went to.
#[derive(Debug, Default)]
struct RecentIds {
    releases: VecDeque<(u32, u64)>,
}

/// One waiter's place in the line of each channel of a lock's keys. Dropping it leaves the
/// lines.
pub(crate) struct Waiter {
    hub: Arc<Hub>,
    id: u64,
    channels: Vec<String>,
    /// Notified on each hand-off. It keeps one permit, so a hand-off that arrives while the
    /// waiter is not parked is still noticed by its next wait.
    wake: Arc<Notify>,
    /// Whether leaving passes the releases it holds on to the next in line.
    pass_on: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wakeup {
    pub(crate) fn new(node_count: usize) -> Self {
        Wakeup {
            hub: Arc::new(Hub {
                watched: AtomicUsize::new(0),
                registry: Mutex::new(Registry::default()),
                subscribers: (0..node_count).map(|_| Mutex::new(None)).collect(),
            }),
        }
    }

    /// Joins the waiters of `keys` if every one of their channels is already subscribed in
    /// this process; `None` otherwise. No I/O; one atomic load when nobody waits.
    pub(crate) fn join(&self, keys: &Keys) -> Option<Waiter> {
        if self.hub.watched.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.hub
            .enlist(keys.channels(), false)
            .map(|(waiter, _)| waiter)
    }

    /// Waits for releases of `keys`: subscribes on every node (in the background) unless
    /// already subscribed. `None` without a tokio runtime to run the subscribers on.
    pub(crate) fn watch(&self, redlock: &Redlock, keys: &Keys) -> Option<Waiter> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (waiter, added) = self.hub.enlist(keys.channels(), true)?;
        for (index, slot) in self.hub.subscribers.iter().enumerate() {
            let mut slot = lock(slot);
            match slot.as_ref() {
                Some(signal) if !signal.is_closed() => {
                    if added {
                        signal.send_modify(|_| ());
                    }
                }
                // No task yet, or its runtime is gone: start one; it subscribes as it starts.
                _ => {
                    let (signal, changes) = watch::channel(());
                    let hub = Arc::downgrade(&self.hub);
                    runtime.spawn(subscriber(redlock.downgrade(), hub, index, changes));
                    *slot = Some(signal);
                }
            }
        }
        Some(waiter)
    }
}

impl Redlock {
    /// The attempt loop of [`acquire`](Redlock::acquire) (`retry`) and
    /// [`try_acquire`](Redlock::try_acquire): after a failed attempt, wait for the jittered
    /// delay — or less, when a release of one of the keys is handed to this waiter (see
    /// `wakeup.rs`). `label` names the lock in errors and logs.
    pub(crate) async fn acquire_keys(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
        retry: bool,
    ) -> Result<Lock, Error> {
        let span = tracing::debug_span!("acquire", resource = label, ttl = ?lease.ttl);
        async move {
            let policy = self.settings().retry;
            let max_attempts = if retry { policy.attempts() } else { 1 };
            let deadline = self
                .settings()
                .acquire_timeout
                .and_then(|t| Instant::now().checked_add(t));
            // Joins waiters already subscribed to these keys in this process (free: no I/O);
            // subscribing is left until an attempt has met contention.
            let mut waiter = retry.then(|| self.wakeup().join(keys)).flatten();
            let (mut attempts, mut woken) = (0, false);
            loop {
                attempts += 1;
                if let Some(waiter) = waiter.as_mut() {
                    waiter.mark_seen();
                }
                let started = Instant::now();
                let failure = match self.attempt(label, keys, lease).await {
                    Ok(lock) => {
                        if let Some(waiter) = waiter.take() {
                            waiter.acquired();
                        }
                        return Ok(lock);
                    }
                    Err(failure) => failure,
                };
                if let Some(waiter) = waiter.as_mut() {
                    waiter.answered();
                }
                if attempts >= max_attempts {
                    return Err(self.give_up(label, failure, attempts));
                }
                let now = Instant::now();
                // An attempt woken by a release that won some nodes but no quorum most likely
                // split the vote with waiters of other clients, woken by the same release: retry
                // once after a short random pause, so that one of them goes first, rather than
                // all waiting out the retry delay.
                let delay = match woken && failure.granted() > 0 {
                    true => policy.collision_delay(now - started, &mut rand::rng()),
                    false => policy.delay(&mut rand::rng()),
                };
                let until = now.checked_add(delay).unwrap_or(now);
                // The retry waits until the delay ends, or the acquire deadline if that is sooner.
                let last = deadline.filter(|d| *d <= until);
                if waiter.is_none() && failure.is_contention() {
                    waiter = self.wakeup().watch(self, keys);
                }
                woken = match waiter.as_mut() {
                    Some(waiter) => waiter.wait_until(last.unwrap_or(until)).await,
                    // Nothing can cut the wait short: give up now rather than sleep to the end.
                    None if last.is_some() => false,
                    None => {
                        tokio::time::sleep_until(until.into()).await;
                        false
                    }
                };
                if woken {
                    Counters::bump(&self.counters().wakeups);
                    tracing::debug!(attempts, "a release was handed over; retrying now");
                } else if last.is_some() {
                    return Err(self.give_up(label, failure, attempts));
                } else {
                    tracing::debug!(attempts, ?delay, "not acquired; retried after the delay");
                }
            }
        }
        .instrument(span)
        .await
    }
}

impl Hub {
    /// Puts a new waiter at the end of the line of each channel in `names`. A missing channel
    /// is added when `add`, and makes it give up (`None`) otherwise. Also tells whether a
    /// channel was added.
    fn enlist(self: &Arc<Self>, names: Vec<String>, add: bool) -> Option<(Waiter, bool)> {
        let mut registry = lock(&self.registry);
        if !add && !names.iter().all(|n| registry.channels.contains_key(n)) {
            return None;
        }
        let id = registry.next_id;
        registry.next_id = id.wrapping_add(1);
        let mut added = false;
        for name in &names {
            let channel = registry.channels.entry(name.clone()).or_insert_with(|| {
                added = true;
                self.watched.fetch_add(1, Ordering::Relaxed);
                Channel::default()
            });
            channel.line.push_back(id);
        }
        let wake = Arc::new(Notify::new());
        let slot = Slot {
            wake: wake.clone(),
            ..Slot::default()
        };
        registry.waiters.insert(id, slot);
        let waiter = Waiter {
            hub: self.clone(),
            id,
            channels: names,
            wake,
            pass_on: true,
        };
        Some((waiter, added))
    }

    /// The channels some waiter wants.
    fn wanted(&self) -> HashSet<String> {
        lock(&self.registry).channels.keys().cloned().collect()
    }

    /// A node announced a release on `channel` with `payload`: the first copy of a release
    /// goes to the longest waiter, the other nodes' copies back to that same waiter only.
    fn announce(&self, channel: &str, payload: &[u8]) {
        let mut registry = lock(&self.registry);
        let Some(entry) = registry.channels.get(channel) else {
            return;
        };
        let Some(id) = parse_release_id(payload) else {
            // Cannot be matched with its other copies (an older client's release): each copy
            // counts as a release.
            registry.hand_off(channel);
            return;
        };
        match entry.recent.handed_to(id) {
            // Woken by the first copy, that waiter may have tried before the other nodes had
            // deleted the key: it tries again if so. Anybody else would split the vote with it.
            Some(waiter) => {
                registry.give(channel, waiter);
            }
            None => {
                let waiter = registry.hand_off(channel);
                if let (Some(waiter), Some(entry)) = (waiter, registry.channels.get_mut(channel)) {
                    entry.recent.remember(id, waiter);
                }
            }
        }
    }

    /// A node confirmed its subscription to `channel`: the first confirmation counts as a
    /// release, in case one slipped by while subscribing.
    fn confirmed(&self, channel: &str) {
        let mut registry = lock(&self.registry);
        let Some(entry) = registry.channels.get_mut(channel) else {
            return;
        };
        if !entry.confirmed {
            entry.confirmed = true;
            registry.hand_off(channel);
        }
    }

    /// Tells every running subscriber task to bring its subscriptions up to date.
    fn resubscribe(&self) {
        for slot in self.subscribers.iter() {
            if let Some(signal) = lock(slot).as_ref() {
                signal.send_modify(|_| ());
            }
        }
    }
}

impl Registry {
    /// Hands one release of `channel` to its longest waiter.
    ///
    /// It goes to that waiter even in the middle of an attempt, and stays on its slot until
    /// an attempt that starts later answers it. `Notify::notify_one` would instead leave a
    /// permit for whoever waits next when nobody is parked: a newcomer about to attempt anyway
    /// could take it and the longest waiter's turn with it, and a permit taken by a waiter
    /// that then left would be lost to everyone. Here only the longest waiter can use the
    /// release, and it passes the release on if it leaves without answering it (`Drop`).
    ///
    /// Returns the waiter it went to; `None` when nobody waits.
    fn hand_off(&mut self, channel: &str) -> Option<u64> {
        let waiter = *self.channels.get(channel)?.line.front()?;
        self.give(channel, waiter).then_some(waiter)
    }

    /// Hands a release of `channel` to `waiter`; `false` if it has left.
    fn give(&mut self, channel: &str, waiter: u64) -> bool {
        let Some(slot) = self.waiters.get_mut(&waiter) else {
            return false;
        };
        // Several releases before the waiter's next attempt are all answered by that attempt.
        if !slot.received.iter().any(|c| c == channel) {
            slot.received.push(channel.to_owned());
        }
        slot.wake.notify_one();
        true
    }
}

impl RecentIds {
    /// The waiter the release `id` went to; `None` if it was not heard of (lately).
    fn handed_to(&self, id: u32) -> Option<u64> {
        let mut releases = self.releases.iter();
        releases
            .find(|(seen, _)| *seen == id)
            .map(|(_, waiter)| *waiter)
    }

    /// Remembers that the release `id` went to `waiter`, forgetting the oldest beyond
    /// `RECENT_IDS`.
    fn remember(&mut self, id: u32, waiter: u64) {
        if self.releases.len() == RECENT_IDS {
            self.releases.pop_front();
        }
        self.releases.push_back((id, waiter));
    }
}

/// A release id as `lua/release.lua` publishes it: 8 hex digits.
fn parse_release_id(payload: &[u8]) -> Option<u32> {
    if payload.len() != 8 || !payload.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(payload).ok()?, 16).ok()
}

impl Waiter {
    /// An attempt starts: it answers every release handed to this waiter so far, so the next
    /// wait returns early only for a later one.
    pub(crate) fn mark_seen(&mut self) {
        self.with_slot(|slot| {
            let received = std::mem::take(&mut slot.received);
            slot.answering.extend(received);
        });
    }

    /// The attempt started by [`mark_seen`](Waiter::mark_seen) failed: the releases it
    /// answered are used up.
    pub(crate) fn answered(&mut self) {
        self.with_slot(|slot| slot.answering.clear());
    }

    /// The attempt got the lock: leaves the lines and passes nothing on. Every release handed
    /// over so far is used up: the resource is taken, and this waiter's own release will be
    /// announced next.
    pub(crate) fn acquired(mut self) {
        self.pass_on = false;
    }

    /// Waits until `until`, or until a release of one of the keys is handed to this waiter;
    /// `true` when a hand-off cut the wait short (or came during the last attempt).
    pub(crate) async fn wait_until(&mut self, until: Instant) -> bool {
        let sleep = tokio::time::sleep_until(until.into());
        tokio::pin!(sleep);
        loop {
            if self.handed() {
                return true;
            }
            tokio::select! {
                () = &mut sleep => return self.handed(),
                () = self.wake.notified() => {}
            }
        }
    }

    /// Whether a release is waiting for this waiter's next attempt.
    fn handed(&self) -> bool {
        self.with_slot(|slot| !slot.received.is_empty())
            .unwrap_or(false)
    }

    fn with_slot<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        lock(&self.hub.registry).waiters.get_mut(&self.id).map(f)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut removed = false;
        {
            let mut registry = lock(&self.hub.registry);
            let slot = registry.waiters.remove(&self.id);
            for name in &self.channels {
                if let Some(channel) = registry.channels.get_mut(name) {
                    channel.line.retain(|id| *id != self.id);
                    if channel.line.is_empty() {
                        registry.channels.remove(name);
                        self.hub.watched.fetch_sub(1, Ordering::Relaxed);
                        removed = true;
                    }
                }
            }
            // Releases this waiter will not answer (its acquire was cancelled, or gave up) go to
            // the next in line. Leaving under the same lock as the hand-offs, so none can come
            // in between and be lost.
            if let Some(slot) = slot.filter(|_| self.pass_on) {
                for name in slot.received.iter().chain(&slot.answering) {
                    registry.hand_off(name);
                }
            }
        }
        if removed {
            self.hub.resubscribe();
        }
    }
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("id", &self.id)
            .field("channels", &self.channels)
            .finish()
    }
}

/// How a subscriber connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Served {
    /// The client is gone: stop.
    Closed,
    /// The connection broke or stopped answering: reconnect.
    Broken,
}

/// The subscriber task of one node: holds its connection while channels are wanted, and
/// reconnects after failures. Ends when the client is dropped.
async fn subscriber(
    redlock: WeakRedlock,
    hub: Weak<Hub>,
    index: usize,
    mut changes: watch::Receiver<()>,
) {
    let Some(node) = redlock.upgrade().map(|rl| rl.node(index).id().to_owned()) else {
        return;
    };
    let mut backoff = RECONNECT_MIN;
    loop {
        // Connect only while something is wanted.
        loop {
            match hub.upgrade() {
                None => return,
                Some(hub) if hub.watched.load(Ordering::Relaxed) > 0 => break,
                Some(_) => {}
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
        let connected = match redlock.upgrade() {
            Some(rl) => rl.node(index).subscriber().await,
            None => return,
        };
        match connected {
            Ok(pubsub) => {
                tracing::debug!(node, "subscriber connected");
                backoff = RECONNECT_MIN;
                if serve(&node, pubsub, &hub, &mut changes).await == Served::Closed {
                    return;
                }
                tracing::debug!(node, "subscriber connection lost; reconnecting");
            }
            Err(e) => tracing::debug!(node, error = %e.kind(), ?backoff, "cannot subscribe"),
        }
        if !pause(&mut changes, backoff).await {
            return;
        }
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// Sleeps for `pause`; `false` if the client went away meanwhile.
async fn pause(changes: &mut watch::Receiver<()>, pause: Duration) -> bool {
    let sleep = tokio::time::sleep(pause);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return true,
            changed = changes.changed() => if changed.is_err() { return false },
        }
    }
}

/// Keeps one connection's subscriptions equal to the wanted channels and forwards its messages
/// to the waiters.
async fn serve(
    node: &str,
    pubsub: PubSub,
    hub: &Weak<Hub>,
    changes: &mut watch::Receiver<()>,
) -> Served {
    let (mut sink, mut messages) = pubsub.split();
    let mut subscribed: HashSet<String> = HashSet::new();
    loop {
        let Some(wanted) = hub.upgrade().map(|hub| hub.wanted()) else {
            return Served::Closed;
        };
        let add: Vec<String> = wanted.difference(&subscribed).cloned().collect();
        let remove: Vec<String> = subscribed.difference(&wanted).cloned().collect();
        if !add.is_empty() {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&add)).await {
                Ok(Ok(())) => {
                    if let Some(hub) = hub.upgrade() {
                        for channel in &add {
                            hub.confirmed(channel);
                        }
                    }
                    subscribed.extend(add);
                }
                Ok(Err(e)) => {
                    // Most often an ACL without `+subscribe` or the channel pattern: waiting
                    // still works, by polling at the retry delay, but the operator should know.
                    tracing::warn!(node, error = %e, "SUBSCRIBE refused; waiters fall back to the retry delay");
                    return Served::Broken;
                }
                Err(_timeout) => return Served::Broken,
            }
        }
        if !remove.is_empty() {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.unsubscribe(&remove)).await {
                Ok(Ok(())) => {
                    for channel in &remove {
                        subscribed.remove(channel);
                    }
                }
                _ => return Served::Broken,
            }
        }
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => {
                    if let Some(hub) = hub.upgrade() {
                        hub.announce(message.get_channel_name(), message.get_payload_bytes());
                    }
                }
                None => return Served::Broken,
            },
            changed = changes.changed() => if changed.is_err() {
                return Served::Closed;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "r:released";

    /// A hub without nodes (no subscriber task ever starts), and a way to line up waiters on it.
    fn hub() -> Arc<Hub> {
        Wakeup::new(0).hub
    }

    fn waiter(hub: &Arc<Hub>, channels: &[&str]) -> Waiter {
        let names = channels.iter().map(|c| (*c).to_owned()).collect();
        match hub.enlist(names, true) {
            Some((waiter, _)) => waiter,
            None => unreachable!("enlisting with `add` always succeeds"),
        }
    }

    /// Which of `waiters` have a release to answer.
    fn handed(waiters: &[&Waiter]) -> Vec<bool> {
        waiters.iter().map(|w| w.handed()).collect()
    }

    #[test]
    fn a_release_is_remembered_until_sixteen_newer_ones_push_it_out() {
        let mut recent = RecentIds::default();
        recent.remember(0xa, 1);
        recent.remember(0xb, 2);
        for id in 0..15 {
            recent.remember(0x100 + id, 3);
        }
        assert_eq!(
            recent.handed_to(0xa),
            None,
            "pushed out by sixteen newer ones"
        );
        assert_eq!(
            recent.handed_to(0xb),
            Some(2),
            "still among the last sixteen"
        );
        assert_eq!(recent.handed_to(0x10e), Some(3));
        assert_eq!(recent.releases.len(), RECENT_IDS);
    }

    #[test]
    fn a_release_id_is_eight_hex_digits() {
        assert_eq!(parse_release_id(b"0000000a"), Some(0xa));
        assert_eq!(parse_release_id(b"DEADBEEF"), Some(0xdead_beef));
        for payload in [
            &b""[..],
            b"1",
            b"0000000g",
            b"000000001",
            b"+0000001",
            b" 0000001",
        ] {
            assert_eq!(parse_release_id(payload), None, "{payload:?}");
        }
    }

    #[test]
    fn a_payload_that_is_not_a_release_id_hands_over_a_release_every_time() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        let second = waiter(&hub, &[CHANNEL]);
        hub.announce(CHANNEL, b"1");
        first.mark_seen();
        hub.announce(CHANNEL, b"1");
        first.answered();
        assert_eq!(handed(&[&first, &second]), [true, false]);
        drop(first);
        hub.announce(CHANNEL, b"");
        assert!(second.handed());
    }

    #[test]
    fn each_release_goes_to_the_longest_waiter_and_the_other_copies_wake_nobody() {
        let hub = hub();
        let (first, second, third) = (
            waiter(&hub, &[CHANNEL]),
            waiter(&hub, &[CHANNEL]),
            waiter(&hub, &[CHANNEL]),
        );
        for _node in 0..5 {
            hub.announce(CHANNEL, b"0000000a");
        }
        assert_eq!(handed(&[&first, &second, &third]), [true, false, false]);

        // The first acquires and leaves: the release was used, nobody else is woken.
        let mut first = first;
        first.mark_seen();
        first.acquired();
        assert_eq!(handed(&[&second, &third]), [false, false]);

        // The next release goes to the next in line.
        hub.announce(CHANNEL, b"0000000b");
        assert_eq!(handed(&[&second, &third]), [true, false]);
    }

    #[test]
    fn a_later_copy_of_a_release_goes_back_to_its_waiter_only_while_it_waits() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        let second = waiter(&hub, &[CHANNEL]);
        hub.announce(CHANNEL, b"0000000a");
        first.mark_seen();
        // Refused by a node that had not deleted the key yet, whose copy comes later.
        hub.announce(CHANNEL, b"0000000a");
        first.answered();
        assert_eq!(handed(&[&first, &second]), [true, false], "try again");

        // Gone with the lock: the last copies wake nobody.
        first.mark_seen();
        first.acquired();
        hub.announce(CHANNEL, b"0000000a");
        assert!(!second.handed());
    }

    #[test]
    fn a_waiter_keeps_its_place_across_failed_attempts() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        let second = waiter(&hub, &[CHANNEL]);
        hub.announce(CHANNEL, b"0000000a");
        first.mark_seen();
        first.answered();
        hub.announce(CHANNEL, b"0000000b");
        assert_eq!(handed(&[&first, &second]), [true, false]);
    }

    #[test]
    fn a_release_during_an_attempt_is_kept_for_the_next_wait_unless_the_attempt_acquired() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        let second = waiter(&hub, &[CHANNEL]);
        first.mark_seen();
        hub.announce(CHANNEL, b"0000000a");
        assert_eq!(handed(&[&first, &second]), [true, false]);
        first.answered();
        assert!(first.handed(), "refused before the release: retry at once");

        first.mark_seen();
        hub.announce(CHANNEL, b"0000000b");
        first.acquired();
        assert!(!second.handed(), "taken by the first: nothing to pass on");
    }

    #[test]
    fn a_waiter_that_leaves_without_answering_a_release_passes_it_on() {
        let hub = hub();
        let first = waiter(&hub, &[CHANNEL]);
        let mut second = waiter(&hub, &[CHANNEL]);
        let mut third = waiter(&hub, &[CHANNEL]);
        let fourth = waiter(&hub, &[CHANNEL]);

        // Cancelled while parked.
        hub.announce(CHANNEL, b"0000000a");
        drop(first);
        assert_eq!(handed(&[&second, &third, &fourth]), [true, false, false]);

        // Cancelled in the middle of the attempt that answers it.
        second.mark_seen();
        drop(second);
        assert_eq!(handed(&[&third, &fourth]), [true, false]);

        // Giving up after a failed attempt: what it answered is used up, what came during the
        // attempt is passed on.
        third.mark_seen();
        hub.announce(CHANNEL, b"0000000b");
        third.answered();
        drop(third);
        assert!(fourth.handed());
    }

    #[test]
    fn the_first_confirmation_counts_as_one_release() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        let second = waiter(&hub, &[CHANNEL]);
        hub.confirmed(CHANNEL);
        assert_eq!(handed(&[&first, &second]), [true, false]);
        first.mark_seen();
        first.answered();
        for _node in 1..5 {
            hub.confirmed(CHANNEL);
        }
        assert_eq!(handed(&[&first, &second]), [false, false]);
    }

    #[test]
    fn the_last_waiter_to_leave_removes_the_channel_and_its_memory() {
        let hub = hub();
        let (first, second) = (waiter(&hub, &[CHANNEL]), waiter(&hub, &["s:released"]));
        assert_eq!(hub.watched.load(Ordering::Relaxed), 2);
        hub.announce(CHANNEL, b"0000000a");
        drop(first);
        assert_eq!(hub.wanted(), HashSet::from(["s:released".to_owned()]));
        assert_eq!(hub.watched.load(Ordering::Relaxed), 1);
        drop(second);
        assert_eq!(hub.watched.load(Ordering::Relaxed), 0);
        assert!(lock(&hub.registry).waiters.is_empty());

        // A new waiter starts afresh: the channel no longer knows that id.
        let again = waiter(&hub, &[CHANNEL]);
        hub.announce(CHANNEL, b"0000000a");
        assert!(again.handed());
    }

    #[tokio::test]
    async fn a_parked_waiter_over_several_keys_wakes_on_a_release_of_any_of_them() {
        let hub = hub();
        let mut many = waiter(&hub, &["a:released", "b:released"]);
        let one = waiter(&hub, &["b:released"]);
        let far = Instant::now() + Duration::from_secs(3600);
        let parked = tokio::spawn(async move {
            let woken = many.wait_until(far).await;
            (woken, many)
        });
        tokio::task::yield_now().await;
        hub.announce("b:released", b"0000000a");
        let waited = tokio::time::timeout(Duration::from_secs(10), parked).await;
        let Ok(Ok((woken, many))) = waited else {
            panic!("the waiter did not wake: {waited:?}");
        };
        assert!(woken);
        assert!(!one.handed(), "one release, one waiter");
        // Gone before its attempt: the release goes to the next in line on that channel.
        drop(many);
        assert!(one.handed());
    }

    #[tokio::test]
    async fn a_wait_returns_at_once_for_a_release_handed_over_during_the_attempt() {
        let hub = hub();
        let mut first = waiter(&hub, &[CHANNEL]);
        first.mark_seen();
        hub.announce(CHANNEL, b"0000000a");
        first.answered();
        let far = Instant::now() + Duration::from_secs(3600);
        let woken = tokio::time::timeout(Duration::from_secs(10), first.wait_until(far)).await;
        assert_eq!(woken, Ok(true));

        // Answered by the next attempt: a later wait runs to its end.
        first.mark_seen();
        first.answered();
        let soon = Instant::now() + Duration::from_millis(20);
        assert!(!first.wait_until(soon).await);
    }
}

//! Waiting without polling: a waiter retries as soon as any node announces a release of the
//! resource it waits for, and the jittered retry delay is only the fallback for a missed
//! announcement.
//!
//! * A release by the holder (not the rollback of a failed attempt) publishes on the channel
//!   `<key>:released` of every node where it deleted the key (`lua/release.lua`).
//! * Each client keeps **one** subscriber connection per node, opened on first need by a
//!   background task, shared by every waiter of every resource in the process. The task
//!   subscribes to a channel while at least one waiter wants it and unsubscribes when the last
//!   one leaves; it ends when the client is dropped, and reconnects (with backoff) when its
//!   connection breaks.
//! * `acquire` subscribes only after an attempt met contention, so the uncontended path never
//!   waits for a subscription. A waiter that joins a channel already subscribed in this process
//!   costs no I/O at all.
//! * The first confirmed subscription of a channel also counts as an announcement: a release
//!   that happened while the subscription was being set up would otherwise be missed, and the
//!   waiter would sleep out the whole retry delay.
//!
//! * A woken attempt that won some nodes but no quorum most likely split the vote with other
//!   waiters woken by the same release: it retries once after a short random pause (see
//!   `RetryPolicy::collision_delay`) instead of waiting out the retry delay.
//!
//! Announcements only shorten a wait; they never decide anything. A lost, late or spurious
//! message costs at most one retry delay or one extra attempt.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::aio::PubSub;
use tokio::sync::watch;

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

/// The wake-up hub of one client.
#[derive(Debug)]
pub(crate) struct Wakeup {
    hub: Arc<Hub>,
}

#[derive(Debug)]
struct Hub {
    /// How many channels have waiters: lets `join` skip the lock when nobody waits.
    watched: AtomicUsize,
    channels: Mutex<HashMap<String, Channel>>,
    /// Per node, the signal that tells its subscriber task to bring its subscriptions in line
    /// with `channels`; `None`, or closed, while no task runs.
    subscribers: Box<[Mutex<Option<watch::Sender<()>>>]>,
}

#[derive(Debug)]
struct Channel {
    waiters: usize,
    /// Counts announcements; each waiter holds a receiver.
    announced: watch::Sender<u64>,
    /// Whether a node has confirmed the subscription since the channel was added.
    confirmed: bool,
}

/// One waiter's interest in the channels of a lock's keys. Dropping it leaves the channels.
pub(crate) struct Waiter {
    hub: Arc<Hub>,
    channels: Vec<(String, watch::Receiver<u64>)>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wakeup {
    pub(crate) fn new(node_count: usize) -> Self {
        Wakeup {
            hub: Arc::new(Hub {
                watched: AtomicUsize::new(0),
                channels: Mutex::new(HashMap::new()),
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
        let names = keys.channels();
        let mut channels = lock(&self.hub.channels);
        if !names.iter().all(|name| channels.contains_key(name)) {
            return None;
        }
        let receivers = names
            .into_iter()
            .filter_map(|name| {
                let channel = channels.get_mut(&name)?;
                channel.waiters += 1;
                let receiver = channel.announced.subscribe();
                Some((name, receiver))
            })
            .collect();
        Some(Waiter {
            hub: self.hub.clone(),
            channels: receivers,
        })
    }

    /// Waits for releases of `keys`: subscribes on every node (in the background) unless
    /// already subscribed. `None` without a tokio runtime to run the subscribers on.
    pub(crate) fn watch(&self, redlock: &Redlock, keys: &Keys) -> Option<Waiter> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let mut added = false;
        let receivers = {
            let mut channels = lock(&self.hub.channels);
            keys.channels()
                .into_iter()
                .map(|name| {
                    let channel = channels.entry(name.clone()).or_insert_with(|| {
                        added = true;
                        self.hub.watched.fetch_add(1, Ordering::Relaxed);
                        Channel {
                            waiters: 0,
                            announced: watch::Sender::new(0),
                            confirmed: false,
                        }
                    });
                    channel.waiters += 1;
                    (name, channel.announced.subscribe())
                })
                .collect()
        };
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
        Some(Waiter {
            hub: self.hub.clone(),
            channels: receivers,
        })
    }
}

impl Redlock {
    /// The attempt loop of [`acquire`](Redlock::acquire) (`retry`) and
    /// [`try_acquire`](Redlock::try_acquire): after a failed attempt, wait for the jittered
    /// delay — or less, when a node announces a release of one of the keys (see `wakeup.rs`).
    /// `label` names the lock in errors and logs.
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
                    Ok(lock) => return Ok(lock),
                    Err(failure) => failure,
                };
                if attempts >= max_attempts {
                    return Err(self.give_up(label, failure, attempts));
                }
                let now = Instant::now();
                // An attempt woken by a release that won some nodes but no quorum most likely
                // split the vote with other waiters: retry once after a short random pause, so
                // that one of them goes first, rather than all waiting out the retry delay.
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
                    tracing::debug!(attempts, "a node announced a release; retrying now");
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
    /// The channels some waiter wants.
    fn wanted(&self) -> HashSet<String> {
        lock(&self.channels).keys().cloned().collect()
    }

    /// Wakes the waiters of `channel`.
    fn announce(&self, channel: &str) {
        if let Some(channel) = lock(&self.channels).get(channel) {
            channel.announced.send_modify(|n| *n += 1);
        }
    }

    /// A node confirmed its subscription to `channel`: the first confirmation wakes the waiters
    /// once, in case a release slipped by while subscribing.
    fn confirmed(&self, channel: &str) {
        if let Some(channel) = lock(&self.channels).get_mut(channel) {
            if !channel.confirmed {
                channel.confirmed = true;
                channel.announced.send_modify(|n| *n += 1);
            }
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

impl Waiter {
    /// Forgets the announcements seen so far: the next wait returns early only for a newer one.
    /// Called before each attempt, so that a release announced during the attempt still counts.
    pub(crate) fn mark_seen(&mut self) {
        for (_, receiver) in &mut self.channels {
            receiver.borrow_and_update();
        }
    }

    /// Waits until `until`, or until a node announces a release of one of the keys; `true` when
    /// an announcement cut the wait short.
    pub(crate) async fn wait_until(&mut self, until: Instant) -> bool {
        tokio::select! {
            () = tokio::time::sleep_until(until.into()) => false,
            () = self.announced() => true,
        }
    }

    async fn announced(&mut self) {
        match self.channels.as_mut_slice() {
            [] => futures::future::pending().await,
            [(_, receiver)] => changed(receiver).await,
            many => {
                let waits = many.iter_mut().map(|(_, r)| Box::pin(changed(r)));
                futures::future::select_all(waits).await;
            }
        }
    }
}

/// Completes on the next announcement; never, if the channel is gone.
async fn changed(receiver: &mut watch::Receiver<u64>) {
    if receiver.changed().await.is_err() {
        futures::future::pending::<()>().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut removed = false;
        {
            let mut channels = lock(&self.hub.channels);
            for (name, _) in &self.channels {
                if let Some(channel) = channels.get_mut(name) {
                    channel.waiters = channel.waiters.saturating_sub(1);
                    if channel.waiters == 0 {
                        channels.remove(name);
                        self.hub.watched.fetch_sub(1, Ordering::Relaxed);
                        removed = true;
                    }
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
        let channels: Vec<&str> = self.channels.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Waiter")
            .field("channels", &channels)
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
                        hub.announce(message.get_channel_name());
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

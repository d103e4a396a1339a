//! Waiting in line: one hand-off per release, across every client, in arrival order.
//!
//! # The line
//!
//! * A waiter that met contention takes a place in a per-key line on every master: a sorted set
//!   `<key>:queue` of waiter ids, scored by an order the *client* chose once (its enqueue time,
//!   plus a random tiebreak; see [`Ticket`]), with each entry's lease in `<key>:leases`. As the
//!   score travels with the id, every master that has the entry orders the same waiters the same
//!   way.
//! * Its attempts run `lua/acquire_queued.lua`, which renews the entry and takes the key only
//!   when it is free **and** the waiter heads the live entries, or when the key is reserved for
//!   this waiter. Entries whose lease ran out are dropped by the scripts themselves.
//! * The holder's release (`lua/release.lua`) does not just delete the key when somebody waits:
//!   it hands it to the head of the line, writing `~queued:<id>` in its place (a value no
//!   attempt's token can equal, so `SET NX`, extend and release treat it as held by somebody
//!   else), takes the head out of the line, and publishes `<id>:<now>:<expires>` on
//!   `<key>:released:<client>`, the channel of the head's own client (a waiter's id starts with
//!   its client's). Only that waiter's client hears it: one hand-off per release, however many
//!   clients wait. A release with nobody in line deletes the key and publishes nothing.
//! * The value written is the head's lock token: once a quorum of masters announced it, the
//!   head holds the lock with no attempt of its own, for as long as it can prove from its own
//!   attempts, and renews it to the full TTL in the background (`handed.rs`: the bound and the
//!   safety argument). A head that heard fewer, or cannot hold a lock this way (fencing, durable
//!   votes, an owner id, several keys, a semaphore slot, an election's term), attempts, and its
//!   attempt takes the key handed to it.
//! * A waiter renews its entry with each attempt; while it waits it attempts at least every
//!   third of its entry lease, and at once when its id is published. It leaves the line when it
//!   acquires (the granting script removes it), and on giving up, cancellation or drop (in the
//!   background; a key reserved for it passes to the next in line). A waiter that crashes blocks
//!   the line for at most one entry lease: its entry lapses, and so does a key handed to it.
//! * The entry lease is ten node timeouts, and at least 50 ms (`Lease::entry_lease`).
//!
//! # Why the line cannot break mutual exclusion
//!
//! The line decides who *tries*, and a release decides who is handed the key next, but never
//! beside a holder: a token is still granted on a master only where the key is free or handed
//! to that waiter (never where another token is), a lock still needs a quorum of such grants or
//! hand-offs within its validity, and release and extend still compare the token. A hand-off is
//! written only in place of the releasing token's own key, so it never hides another holder. A
//! master that lost its line (a restart, a failover) may order waiters differently from the
//! others, which can split one hand-off's vote and cost an attempt, but it cannot grant a second
//! holder: the safety argument is that of the quorum lock, unchanged.
//!
//! # In this process
//!
//! Each client keeps one subscriber connection per master (`subscriber.rs`), subscribed to the
//! channels its waiters wait on, and a [`Hub`] that wakes the waiter a hand-off names once a
//! quorum of masters has announced it (or a short grace after the first announcement; see
//! `hub.rs`). `acquire` joins the line only after an attempt met contention, so the uncontended
//! path neither subscribes nor touches a line — unless this client waited on the resource in
//! the last [`LINGER`](hub::LINGER): its first attempt then takes its place in line at once.
//! Announcements only shorten a wait; a lost one costs at most one poll interval.
//!
//! The holds of a read-write lock take no place in a line: many readers may go at once, so a
//! release cannot name one. A client whose read or write was refused waits as a [`Waiter`]
//! without a place, on the lock's channels: `<key>:rw`, where the masters announce every
//! writer's release, and for a writer also `<key>:rw:drained`, where they announce the last
//! reader's release while a writer waits. Each announcement wakes every waiter on its channel,
//! which attempts again (see `rwlock`).

mod handed;
pub(crate) mod hub;
mod subscriber;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{watch, Notify};

pub(crate) use handed::{Masters, Renewal};
pub(crate) use hub::Ticket;

use crate::keys::Keys;
use crate::node::Node;
use crate::seam;
use crate::sync::lock;
use hub::{hand_off_grace, Hub};

/// The wake-up side of one client: its hub and its subscriber tasks.
#[derive(Debug)]
pub(crate) struct Wakeup {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    hub: Arc<Hub>,
    /// This client's id: the first half of its waiters' ids, and the end of its hand-off
    /// channels.
    client: String,
    /// How many masters must announce a hand-off before its waiter attempts.
    quorum: usize,
    /// Per node, the signal that tells its subscriber task to bring its subscriptions in line
    /// with the hub's channels; `None`, or closed, while no task runs.
    subscribers: Box<[Mutex<Option<watch::Sender<()>>>]>,
}

/// A waiter in the line of each of a lock's keys. Dropping it leaves the lines: locally at
/// once, on the masters in the background.
pub(crate) struct Waiter {
    shared: Arc<Shared>,
    ticket: Ticket,
    channels: Vec<String>,
    /// Notified on each hand-off to this waiter. It keeps one permit, so a hand-off that arrives
    /// during an attempt is still noticed by the next wait.
    wake: Arc<Notify>,
    /// What leaving the masters' lines needs.
    nodes: Weak<[Node]>,
    keys: Keys,
    /// How long a key reserved for the next waiter stays reserved.
    reserve: Duration,
    node_timeout: Duration,
    /// The masters (by index) whose lines a successful attempt left: no need to leave again.
    granted: Mutex<Vec<usize>>,
    /// What this waiter knows of each master's clock and hand-offs (see `handed.rs`).
    masters: Arc<Masters>,
    /// Set once it holds the lock a release handed to it (see `handed.rs`).
    holding: AtomicBool,
}

impl Wakeup {
    pub(crate) fn new(node_count: usize) -> Self {
        Wakeup {
            shared: Arc::new(Shared {
                hub: Arc::new(Hub::default()),
                client: hub::client_id(seam::random_u64()),
                quorum: crate::quorum::quorum(node_count),
                subscribers: (0..node_count).map(|_| Mutex::new(None)).collect(),
            }),
        }
    }

    /// This client's id: the first 16 characters of each of its waiters' ids.
    pub(crate) fn client(&self) -> &str {
        &self.shared.client
    }

    /// A new waiter for `keys` that arrived at `arrived`, registered to be woken by hand-offs;
    /// the subscriber tasks are started or told about new channels (they subscribe in the
    /// background). `None` without a tokio runtime to run them on. The waiter takes its place on
    /// the masters with its first attempt, ordered by its arrival.
    pub(crate) fn enlist(
        &self,
        nodes: &Arc<[Node]>,
        keys: &Keys,
        arrived: SystemTime,
        reserve: Duration,
        node_timeout: Duration,
    ) -> Option<Waiter> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let now_us = arrived
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let ticket = Ticket::new(&self.shared.client, now_us, seam::random_u64());
        let channels = keys.channels(&self.shared.client);
        let wake = Arc::new(Notify::new());
        let masters = Masters::new(nodes.len());
        let hub = &self.shared.hub;
        let added = hub.join(&ticket, &channels, wake.clone(), masters.clone());
        for (index, slot) in self.shared.subscribers.iter().enumerate() {
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
                    let hub = Arc::downgrade(&self.shared.hub);
                    runtime.spawn(subscriber::subscriber(
                        Arc::downgrade(nodes),
                        hub,
                        index,
                        changes,
                    ));
                    *slot = Some(signal);
                }
            }
        }
        Some(Waiter {
            shared: self.shared.clone(),
            ticket,
            channels,
            wake,
            nodes: Arc::downgrade(nodes),
            keys: keys.clone(),
            reserve,
            node_timeout,
            granted: Mutex::new(Vec::new()),
            masters,
            holding: AtomicBool::new(false),
        })
    }

    /// Whether this client waited on `keys` within the last [`LINGER`](hub::LINGER), its
    /// subscriptions still live: then a new acquire of them takes its place in line with its
    /// first attempt, rather than after a plain attempt that the line would refuse anyway.
    pub(crate) fn waited_lately(&self, keys: &Keys) -> bool {
        // The uncontended path: nothing subscribed, so neither a lock nor channel names.
        let hub = &self.shared.hub;
        hub.is_watched() && hub.is_live(&keys.channels(&self.shared.client))
    }
}

impl Waiter {
    /// This waiter's place in the lines.
    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Waits until `until`, or until the masters hand the keys to this waiter; `true` when a
    /// hand-off cut the wait short (or came during the last attempt): a quorum of masters
    /// announced it, or the grace after the first announcement ran out before `until`.
    pub(crate) async fn wait_until(&self, until: Instant) -> bool {
        let hub = &self.shared.hub;
        let until = tokio::time::Instant::from_std(until);
        let mut end = until;
        let handed = loop {
            // Biased (a fixed order, for a deterministic simulation): a hand-off heard as the
            // wait ends is weighed before the end is.
            tokio::select! {
                biased;
                () = self.wake.notified() => {
                    let heard = hub.heard(&self.ticket.id);
                    if heard.enough(self.shared.quorum) {
                        break true;
                    }
                    if heard.masters() > 0 && end == until {
                        let grace = hand_off_grace(self.node_timeout);
                        end = until.min(tokio::time::Instant::now() + grace);
                    }
                }
                () = tokio::time::sleep_until(end) => break end < until,
            }
        };
        if handed {
            hub.take_heard(&self.ticket.id);
        }
        handed
    }

    /// The attempt with this ticket won on `masters` (by index): their scripts took the
    /// waiter out of their lines.
    pub(crate) fn granted_by(&self, masters: impl IntoIterator<Item = usize>) {
        lock(&self.granted).extend(masters);
    }

    /// What this waiter's attempts and hand-offs tell of each master (see `handed.rs`).
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.masters
    }

    /// Until when the lock handed to this waiter by the releases it heard is held, by what the
    /// waiter can prove; `None` unless a quorum of masters handed it over since its last
    /// attempt (see `handed.rs`).
    pub(crate) fn handed_until(&self, drift_factor: f64) -> Option<Instant> {
        self.masters.held_until(self.shared.quorum, drift_factor)
    }

    /// The token of the lock handed to this waiter: the value the releases wrote.
    pub(crate) fn handed_token(&self) -> String {
        format!("{}{}", crate::keys::RESERVED_PREFIX, self.ticket.id)
    }

    /// This waiter holds the lock handed to it. The masters that handed it over took it out
    /// of their lines; it leaves the others' lines as it is dropped, but a key that holds its
    /// id there (handed over since) is its lock now, and stays.
    pub(crate) fn holds_what_was_handed(&self) {
        lock(&self.granted).extend(self.masters.handed_over());
        self.holding.store(true, Ordering::Relaxed);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let holding = self.holding.load(Ordering::Relaxed);
        let leave_hub = |shared: &Shared, ticket: &Ticket, channels: &[String]| {
            shared.hub.leave(ticket, channels, seam::now());
        };
        // The masters' entries: a waiter that acquired is gone from the lines that granted it
        // (or handed it the lock), but not from the others; one that gave up or was cancelled
        // is in all of them. The entries would lapse by themselves within one entry lease;
        // leaving now spares the line that wait, and passes on a key reserved for this waiter.
        // A read-write lock's waiter has no place in any line (see `rwlock`).
        let nodes = self.nodes.upgrade().filter(|_| self.keys.waits_in_line());
        let granted = std::mem::take(&mut *lock(&self.granted));
        let Some(nodes) = nodes.filter(|nodes| granted.len() < nodes.len()) else {
            return leave_hub(&self.shared, &self.ticket, &self.channels);
        };
        if !holding {
            leave_hub(&self.shared, &self.ticket, &self.channels);
        }
        let (keys, ticket) = (self.keys.clone(), self.ticket.clone());
        let (reserve, node_timeout) = (self.reserve, self.node_timeout);
        let (shared, channels, masters) = (
            self.shared.clone(),
            self.channels.clone(),
            self.masters.clone(),
        );
        let spawned = crate::sync::spawn(async move {
            let mut granted = granted;
            if holding {
                // The last masters' announcements of the hand-off this waiter holds on are
                // still on the way: a moment's wait spares each of them a request to leave a
                // line its own hand-off already took this waiter out of.
                tokio::time::sleep(hand_off_grace(node_timeout)).await;
                leave_hub(&shared, &ticket, &channels);
                granted.extend(masters.handed_over());
            }
            let leaving = nodes
                .iter()
                .enumerate()
                .filter(|(index, _)| !granted.contains(index))
                .map(|(_, node)| keys.dequeue_on(node, &ticket.id, reserve, holding, node_timeout));
            for left in futures::future::join_all(leaving).await {
                if let Err(e) = left {
                    tracing::debug!(error = %e, "leaving the line failed; the entry lapses by itself");
                }
            }
        });
        if !spawned && holding {
            leave_hub(&self.shared, &self.ticket, &self.channels);
        }
    }
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("ticket", &self.ticket)
            .field("channels", &self.channels)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant as Virtual;

    fn waiter(wakeup: &Wakeup) -> Waiter {
        let ticket = Ticket::new(&wakeup.shared.client, 1_000_000, 7);
        let wake = Arc::new(Notify::new());
        let channels = Keys::One("r".into()).channels(&wakeup.shared.client);
        let masters = Masters::new(5);
        let hub = &wakeup.shared.hub;
        hub.join(&ticket, &channels, wake.clone(), masters.clone());
        Waiter {
            shared: wakeup.shared.clone(),
            ticket,
            channels,
            wake,
            nodes: Weak::<[Node; 0]>::new(),
            keys: Keys::One("r".into()),
            reserve: Duration::from_secs(1),
            node_timeout: Duration::from_millis(100),
            granted: Mutex::new(Vec::new()),
            masters,
            holding: AtomicBool::new(false),
        }
    }

    fn hand_over(wakeup: &Wakeup, waiter: &Waiter, masters: &[usize]) {
        for &master in masters {
            let (id, channel) = (waiter.ticket.id.as_bytes(), &waiter.channels[0]);
            assert!(wakeup.shared.hub.handed_over(master, channel, id));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_attempts_once_a_quorum_of_masters_handed_over_even_during_an_attempt() {
        let wakeup = Wakeup::new(5);
        let waiter = waiter(&wakeup);
        // Handed over by three of five while the waiter was busy: kept for the next wait.
        hand_over(&wakeup, &waiter, &[0, 3, 4]);
        let far = (Virtual::now() + Duration::from_secs(60)).into_std();
        let start = Virtual::now();
        assert!(waiter.wait_until(far).await);
        assert_eq!(start.elapsed(), Duration::ZERO, "no grace with a quorum");
        // Nothing more to answer: the next wait runs to its end.
        let end = Virtual::now() + Duration::from_millis(5);
        assert!(!waiter.wait_until(end.into_std()).await);
        assert_eq!(Virtual::now(), end);
        drop(waiter);
        assert!(wakeup.shared.hub.is_watched(), "the channel lingers");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_hears_a_minority_attempts_after_the_grace() {
        let wakeup = Wakeup::new(5);
        let waiter = waiter(&wakeup);
        let far = (Virtual::now() + Duration::from_secs(60)).into_std();
        let start = Virtual::now();
        let waiting = waiter.wait_until(far);
        tokio::pin!(waiting);
        // Two masters of five announce at 1 ms; the others never do.
        let early = tokio::time::timeout(Duration::from_millis(1), &mut waiting).await;
        assert!(early.is_err(), "woken before any hand-off");
        hand_over(&wakeup, &waiter, &[1, 2]);
        assert!(waiting.await);
        let grace = hand_off_grace(Duration::from_millis(100));
        assert_eq!(start.elapsed(), Duration::from_millis(1) + grace);
        // The grace never runs past the end of the wait: at the end, no attempt.
        hand_over(&wakeup, &waiter, &[1]);
        let end = Virtual::now() + grace / 2;
        assert!(!waiter.wait_until(end.into_std()).await);
        assert_eq!(Virtual::now(), end);
    }
}

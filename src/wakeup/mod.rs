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
//!   it reserves the key for the head of the line — a value no token can equal, so `SET NX`,
//!   extend and release treat it as held by somebody else — and publishes the head's id on
//!   `<key>:released`. Only that waiter attempts: one hand-off per release, however many clients
//!   wait. A release with nobody in line deletes the key and publishes nothing.
//! * A waiter renews its entry with each attempt; while it waits it attempts at least every
//!   third of its entry lease, and at once when its id is published. It leaves the line when it
//!   acquires (the granting script removes it), and on giving up, cancellation or drop (in the
//!   background; a key reserved for it passes to the next in line). A waiter that crashes blocks
//!   the line for at most one entry lease: its entry lapses, and so does a reservation for it.
//! * The entry lease is ten node timeouts, and at least 50 ms (`Lease::entry_lease`).
//!
//! # Why the line cannot break mutual exclusion
//!
//! The line decides only who *tries*, never who *holds*. A token is still granted on a master
//! only where the key is free or a reservation (never where another token is), a lock still
//! needs a quorum of such grants within its validity, and release and extend still compare the
//! token. A reservation is written only in place of the releasing token's own key, so it never
//! hides another holder. A master that lost its line (a restart, a failover) may order waiters
//! differently from the others, which can split one hand-off's vote and cost an attempt, but it
//! cannot grant a second holder: the safety argument is that of the quorum lock, unchanged.
//!
//! # In this process
//!
//! Each client keeps one subscriber connection per master (`subscriber.rs`), subscribed to the
//! channels its waiters wait on, and a [`Hub`] that wakes the waiter a hand-off names.
//! `acquire` joins the line only after an attempt met contention, so the uncontended path
//! neither subscribes nor touches a line. Announcements only shorten a wait; a lost one costs
//! at most one poll interval.

pub(crate) mod hub;
mod subscriber;

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{watch, Notify};

pub(crate) use hub::Ticket;

use crate::keys::Keys;
use crate::node::Node;
use crate::sync::lock;
use hub::Hub;

/// The wake-up side of one client: its hub and its subscriber tasks.
#[derive(Debug)]
pub(crate) struct Wakeup {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    hub: Arc<Hub>,
    /// Per node, the signal that tells its subscriber task to bring its subscriptions in line
    /// with the hub's channels; `None`, or closed, while no task runs.
    subscribers: Box<[Mutex<Option<watch::Sender<()>>>]>,
}

impl Shared {
    /// Tells every running subscriber task to bring its subscriptions up to date.
    fn resubscribe(&self) {
        for slot in self.subscribers.iter() {
            if let Some(signal) = lock(slot).as_ref() {
                signal.send_modify(|_| ());
            }
        }
    }
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
}

impl Wakeup {
    pub(crate) fn new(node_count: usize) -> Self {
        Wakeup {
            shared: Arc::new(Shared {
                hub: Arc::new(Hub::default()),
                subscribers: (0..node_count).map(|_| Mutex::new(None)).collect(),
            }),
        }
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
        let ticket = Ticket::new(now_us, rand::random());
        let channels = keys.channels();
        let wake = Arc::new(Notify::new());
        let added = self.shared.hub.join(&ticket, &channels, wake.clone());
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
        })
    }
}

impl Waiter {
    /// This waiter's place in the lines.
    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Waits until `until`, or until a master hands a key to this waiter; `true` when a
    /// hand-off cut the wait short (or came during the last attempt).
    pub(crate) async fn wait_until(&self, until: Instant) -> bool {
        tokio::select! {
            () = tokio::time::sleep_until(until.into()) => false,
            () = self.wake.notified() => true,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.shared.hub.leave(&self.ticket, &self.channels) {
            self.shared.resubscribe();
        }
        // The masters' entries: a waiter that acquired is gone from the lines that granted it,
        // but not from the others; one that gave up or was cancelled is in all of them. The
        // entries would lapse by themselves within one entry lease; leaving now spares the
        // line that wait, and passes on a key reserved for this waiter.
        let Some(nodes) = self.nodes.upgrade() else {
            return;
        };
        let (keys, ticket) = (self.keys.clone(), self.ticket.clone());
        let (reserve, node_timeout) = (self.reserve, self.node_timeout);
        crate::sync::spawn(async move {
            let leaving = nodes
                .iter()
                .map(|node| keys.dequeue_on(node, &ticket.id, reserve, node_timeout));
            for left in futures::future::join_all(leaving).await {
                if let Err(e) = left {
                    tracing::debug!(error = %e, "leaving the line failed; the entry lapses by itself");
                }
            }
        });
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

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_during_an_attempt_cuts_the_next_wait_short() {
        let wakeup = Wakeup::new(0);
        let ticket = Ticket::new(1_000_000, 7);
        let wake = Arc::new(Notify::new());
        let channels = vec!["r:released".to_owned()];
        wakeup.shared.hub.join(&ticket, &channels, wake.clone());
        // Handed over while the waiter was busy: kept for the next wait.
        assert!(wakeup
            .shared
            .hub
            .handed_over("r:released", ticket.id.as_bytes()));
        let waiter = Waiter {
            shared: wakeup.shared.clone(),
            ticket,
            channels,
            wake,
            nodes: Weak::<[Node; 0]>::new(),
            keys: Keys::One("r".into()),
            reserve: Duration::from_secs(1),
            node_timeout: Duration::from_millis(100),
        };
        let far = Instant::now() + Duration::from_secs(60);
        assert!(waiter.wait_until(far).await);
        // Nothing more to answer: the next wait runs to its end.
        assert!(
            !waiter
                .wait_until(Instant::now() + Duration::from_millis(5))
                .await
        );
        drop(waiter);
        assert!(!wakeup.shared.hub.is_watched());
    }
}

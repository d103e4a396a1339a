//! The client's side of the hand-off, with no I/O: which release channels this client needs
//! subscribed, and which of its waiters a hand-off names.
//!
//! A release hands the lock to one waiter by publishing that waiter's id on the key's channel
//! (see `lua/release.lua`). Every client subscribed to the channel hears it; only the client
//! whose waiter has that id wakes it. The masters' copies of one hand-off name the same waiter
//! (the head of one line, ordered the same way on every master), so they wake it again at most:
//! a waiter that tried before every master had handed over tries once more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// A waiter's identity in the masters' lines: a random id, and the order it takes its place by.
///
/// The order is chosen once, by the client, when the waiter first meets contention (its
/// enqueue time in microseconds since the Unix epoch, plus a random tiebreak below one
/// millisecond), and sent with every request. As the score travels with the member, every master
/// that has the entry orders the same waiters the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// 16 hex digits: 64 random bits.
    pub(crate) id: String,
    /// The score of the entry in each line: lower goes first. Below 2^53, so that the masters'
    /// double-precision scores hold it exactly.
    pub(crate) order: u64,
}

impl Ticket {
    /// A ticket for a waiter that starts waiting `now_us` microseconds after the Unix epoch;
    /// `random` gives the id and the tiebreak.
    pub(crate) fn new(now_us: u64, random: u64) -> Self {
        // The tiebreak keeps two waiters of the same millisecond apart without reordering
        // waiters of different milliseconds.
        let ms = (now_us / 1000).min(1 << 42);
        Ticket {
            id: format!("{random:016x}"),
            order: ms * 1000 + random % 1000,
        }
    }
}

/// The channels this client's waiters wait on, and the waiters by id.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    /// How many channels have waiters: lets a subscriber skip the lock when nobody waits.
    watched: AtomicUsize,
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<String, Channel>,
    waiters: HashMap<String, Arc<Notify>>,
}

#[derive(Debug, Default)]
struct Channel {
    /// The ids of the waiters on this channel.
    waiters: Vec<String>,
    /// Whether a master has confirmed the subscription since the channel was added.
    confirmed: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    /// Registers a waiter on `channels`, woken through `wake`. Returns whether a channel was
    /// added (the subscribers then have to subscribe to it).
    pub(crate) fn join(&self, ticket: &Ticket, channels: &[String], wake: Arc<Notify>) -> bool {
        let mut registry = lock(&self.registry);
        let mut added = false;
        for name in channels {
            let channel = registry.channels.entry(name.clone()).or_insert_with(|| {
                added = true;
                self.watched.fetch_add(1, Ordering::Relaxed);
                Channel::default()
            });
            channel.waiters.push(ticket.id.clone());
        }
        registry.waiters.insert(ticket.id.clone(), wake);
        added
    }

    /// Removes a waiter. Returns whether a channel was left without waiters (the subscribers
    /// then unsubscribe from it).
    pub(crate) fn leave(&self, ticket: &Ticket, channels: &[String]) -> bool {
        let mut registry = lock(&self.registry);
        registry.waiters.remove(&ticket.id);
        let mut removed = false;
        for name in channels {
            let Some(channel) = registry.channels.get_mut(name) else {
                continue;
            };
            channel.waiters.retain(|id| *id != ticket.id);
            if channel.waiters.is_empty() {
                registry.channels.remove(name);
                self.watched.fetch_sub(1, Ordering::Relaxed);
                removed = true;
            }
        }
        removed
    }

    /// Whether any waiter waits.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed) > 0
    }

    /// The channels some waiter waits on.
    pub(crate) fn wanted(&self) -> Vec<String> {
        lock(&self.registry).channels.keys().cloned().collect()
    }

    /// A master handed `channel`'s key to the waiter named by `payload`: wakes it if it is one
    /// of ours. Returns whether it was.
    pub(crate) fn handed_over(&self, channel: &str, payload: &[u8]) -> bool {
        let registry = lock(&self.registry);
        let Ok(id) = std::str::from_utf8(payload) else {
            return false;
        };
        let ours = registry
            .channels
            .get(channel)
            .is_some_and(|c| c.waiters.iter().any(|w| w == id));
        match registry.waiters.get(id).filter(|_| ours) {
            Some(wake) => {
                wake.notify_one();
                true
            }
            None => false,
        }
    }

    /// A master confirmed the subscription to `channel`. The first confirmation wakes every
    /// waiter on it once: a hand-off published while the subscription was being set up would
    /// otherwise be missed, and its waiter would sleep until its next poll.
    pub(crate) fn confirmed(&self, channel: &str) {
        let mut registry = lock(&self.registry);
        let Registry { channels, waiters } = &mut *registry;
        let Some(entry) = channels.get_mut(channel).filter(|c| !c.confirmed) else {
            return;
        };
        entry.confirmed = true;
        for id in &entry.waiters {
            if let Some(wake) = waiters.get(id) {
                wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "r:released";

    fn joined(hub: &Hub, random: u64, channels: &[&str]) -> (Ticket, Arc<Notify>) {
        let ticket = Ticket::new(1_700_000_000_000_000, random);
        let wake = Arc::new(Notify::new());
        let names: Vec<String> = channels.iter().map(|c| (*c).to_owned()).collect();
        hub.join(&ticket, &names, wake.clone());
        (ticket, wake)
    }

    /// Whether `wake` holds a notification (consumes it).
    fn woken(wake: &Notify) -> bool {
        use futures::FutureExt;
        wake.notified().now_or_never().is_some()
    }

    #[test]
    fn tickets_order_by_millisecond_first_and_break_ties_within_one() {
        let early = Ticket::new(5_000_999, 999);
        let late = Ticket::new(5_001_000, 0);
        assert!(early.order < late.order, "{early:?} {late:?}");
        assert_eq!(early.id, "00000000000003e7");
        // Two waiters of one millisecond get different orders from their random bits.
        assert_ne!(Ticket::new(7_000, 1).order, Ticket::new(7_000, 2).order);
        // Today's epoch times stay exact in a double.
        let now = Ticket::new(1_800_000_000_000_000, u64::MAX);
        assert_eq!(now.order, 1_800_000_000_000_615);
    }

    #[test]
    fn a_hand_off_wakes_the_waiter_it_names_and_nobody_else() {
        let hub = Hub::default();
        let (first, first_wake) = joined(&hub, 1, &[CHANNEL]);
        let (_, second_wake) = joined(&hub, 2, &[CHANNEL]);
        assert!(hub.handed_over(CHANNEL, first.id.as_bytes()));
        assert!(woken(&first_wake));
        assert!(!woken(&second_wake));
        // Another client's waiter, or a payload that is no id: nobody here wakes.
        assert!(!hub.handed_over(CHANNEL, b"00000000000000ff"));
        assert!(!hub.handed_over(CHANNEL, &[0xff, 0xfe]));
        assert!(!woken(&first_wake) && !woken(&second_wake));
    }

    #[test]
    fn a_hand_off_on_a_channel_the_waiter_does_not_wait_on_wakes_nobody() {
        let hub = Hub::default();
        let (ticket, wake) = joined(&hub, 1, &[CHANNEL]);
        assert!(!hub.handed_over("other:released", ticket.id.as_bytes()));
        assert!(!woken(&wake));
    }

    #[test]
    fn copies_of_one_hand_off_leave_one_notification() {
        let hub = Hub::default();
        let (ticket, wake) = joined(&hub, 1, &[CHANNEL]);
        for _ in 0..5 {
            hub.handed_over(CHANNEL, ticket.id.as_bytes());
        }
        assert!(woken(&wake));
        assert!(!woken(&wake), "five copies, one attempt");
    }

    #[test]
    fn the_first_confirmation_wakes_every_waiter_once() {
        let hub = Hub::default();
        let (_, a) = joined(&hub, 1, &[CHANNEL]);
        let (_, b) = joined(&hub, 2, &[CHANNEL, "s:released"]);
        hub.confirmed(CHANNEL);
        assert!(woken(&a) && woken(&b));
        hub.confirmed(CHANNEL);
        assert!(!woken(&a) && !woken(&b), "a second confirmation is no news");
    }

    #[test]
    fn channels_are_wanted_while_a_waiter_waits_on_them() {
        let hub = Hub::default();
        assert!(!hub.is_watched());
        let (a, _) = joined(&hub, 1, &[CHANNEL]);
        let (b, _) = joined(&hub, 2, &[CHANNEL, "s:released"]);
        let mut wanted = hub.wanted();
        wanted.sort();
        assert_eq!(wanted, [CHANNEL, "s:released"]);
        assert!(
            hub.leave(&b, &[CHANNEL.into(), "s:released".into()]),
            "s:released lost its last waiter"
        );
        assert_eq!(hub.wanted(), [CHANNEL]);
        assert!(!hub.handed_over(CHANNEL, b.id.as_bytes()), "b has left");
        assert!(hub.leave(&a, &[CHANNEL.into()]));
        assert!(!hub.is_watched() && hub.wanted().is_empty());
    }
}

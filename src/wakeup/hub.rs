//! The client's side of the hand-off, with no I/O: which release channels this client needs
//! subscribed, which of its waiters a hand-off names, and when that waiter should look at it.
//!
//! A release hands the lock to one waiter by publishing that waiter's id (with the master's
//! times of the hand-off and of the key's expiry, noted for the waiter: see `handed.rs`) on the
//! key's channel (see `lua/line.lua`), on each master. Every client subscribed to the channel
//! hears it; only the client whose waiter has that id wakes it.
//!
//! The masters run the holder's release at slightly different moments, so the first
//! announcement often arrives while other masters still hold the key for the old holder. A
//! waiter that attempted right then would be refused there, roll back and wait again: two
//! attempts per hand-off, and a split vote when it loses. So a waiter wakes once a quorum of
//! masters has announced the hand-off to it ([`Heard::enough`]) — it then holds the lock, or
//! attempts — or, when fewer do (a master down, or one whose line lost the waiter's entry), a
//! short [grace](hand_off_grace) after the first announcement, to attempt.
//!
//! A channel stays subscribed for [`LINGER`] after its last waiter leaves: a worker that loops
//! acquire → release → acquire then neither subscribes nor unsubscribes on every turn, and its
//! next wait starts with the subscription already live.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::handed::{self, Masters};
use crate::sync::lock;

/// How long a channel stays subscribed after its last waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// How long a waiter that heard a hand-off from fewer than a quorum of masters waits for the
/// others before it attempts anyway: a tenth of the node timeout, at least a millisecond. Past
/// it, a master that has not announced is either slow (its attempt there waits behind the
/// release), down, or has another head in its line; none of those is fixed by waiting longer.
pub(crate) fn hand_off_grace(node_timeout: Duration) -> Duration {
    (node_timeout / 10).max(Duration::from_millis(1))
}

/// A waiter's identity in the masters' lines: its client's id and a random one, and the order it
/// takes its place by.
///
/// The order is chosen once, by the client, when the waiter first meets contention (its
/// enqueue time in microseconds since the Unix epoch, plus a random tiebreak below one
/// millisecond), and sent with every request. As the score travels with the member, every master
/// that has the entry orders the same waiters the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// 32 hex digits: the client's 64 random bits (which name the channel its hand-offs are
    /// announced on), then the waiter's.
    pub(crate) id: String,
    /// The score of the entry in each line: lower goes first. Below 2^53, so that the masters'
    /// double-precision scores hold it exactly.
    pub(crate) order: u64,
}

impl Ticket {
    /// A ticket for a waiter of the client `client` (see [`client_id`]) that starts waiting
    /// `now_us` microseconds after the Unix epoch; `random` gives the rest of the id and the
    /// tiebreak.
    pub(crate) fn new(client: &str, now_us: u64, random: u64) -> Self {
        // The tiebreak keeps two waiters of the same millisecond apart without reordering
        // waiters of different milliseconds.
        let ms = (now_us / 1000).min(1 << 42);
        Ticket {
            id: format!("{client}{random:016x}"),
            order: ms * 1000 + random % 1000,
        }
    }
}

/// A client's id in its waiters' ids and its hand-off channels: 16 hex digits.
pub(crate) fn client_id(random: u64) -> String {
    format!("{random:016x}")
}

/// What a waiter has heard since its last attempt.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heard {
    /// The masters, by index, that announced a hand-off to it (a master past the 64th counts
    /// as the 64th: with that many masters a waiter may wait out the grace more often).
    masters: u64,
    /// A subscription it relies on was just confirmed: a hand-off published before may have
    /// gone unheard, so it should attempt.
    unsure: bool,
}

impl Heard {
    /// How many masters announced a hand-off.
    pub(crate) fn masters(self) -> u32 {
        self.masters.count_ones()
    }

    /// Whether to attempt now: a quorum of masters handed the key over, or a hand-off may have
    /// been missed.
    pub(crate) fn enough(self, quorum: usize) -> bool {
        self.unsure || self.masters() as usize >= quorum
    }
}

/// The channels this client's waiters wait on, and the waiters by id.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    /// How many channels are subscribed or lingering: lets a subscriber skip the lock, and
    /// disconnect, when none is.
    watched: AtomicUsize,
    registry: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    /// Ordered: [`Hub::wanted`] lists them, and the subscribers subscribe in that order.
    channels: BTreeMap<String, Channel>,
    /// Only ever looked up by id, never iterated: its order cannot matter.
    waiters: HashMap<String, Waiting>,
}

#[derive(Debug, Default)]
struct Channel {
    /// The ids of the waiters on this channel.
    waiters: Vec<String>,
    /// Whether a master has confirmed the subscription since the channel was added.
    confirmed: bool,
    /// Since when the channel has had no waiter; it is dropped [`LINGER`] later.
    idle_since: Option<Instant>,
}

#[derive(Debug)]
struct Waiting {
    wake: Arc<Notify>,
    heard: Heard,
    /// What the waiter knows of each master: hand-offs announced to it are noted there.
    masters: Arc<Masters>,
}

impl Hub {
    /// Registers a waiter on `channels`, woken through `wake`. Returns whether a channel was
    /// added (the subscribers then have to subscribe to it).
    pub(crate) fn join(
        &self,
        ticket: &Ticket,
        channels: &[String],
        wake: Arc<Notify>,
        masters: Arc<Masters>,
    ) -> bool {
        let mut registry = lock(&self.registry);
        let mut added = false;
        for name in channels {
            let channel = registry.channels.entry(name.clone()).or_insert_with(|| {
                added = true;
                self.watched.fetch_add(1, Ordering::Relaxed);
                Channel::default()
            });
            channel.idle_since = None;
            channel.waiters.push(ticket.id.clone());
        }
        let heard = Heard::default();
        registry.waiters.insert(
            ticket.id.clone(),
            Waiting {
                wake,
                heard,
                masters,
            },
        );
        added
    }

    /// Removes a waiter, at `now`. A channel left without waiters lingers (see [`LINGER`]).
    pub(crate) fn leave(&self, ticket: &Ticket, channels: &[String], now: Instant) {
        let mut registry = lock(&self.registry);
        registry.waiters.remove(&ticket.id);
        for name in channels {
            if let Some(channel) = registry.channels.get_mut(name) {
                channel.waiters.retain(|id| *id != ticket.id);
                if channel.waiters.is_empty() {
                    channel.idle_since = Some(now);
                }
            }
        }
    }

    /// Whether any channel is subscribed or lingering.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed) > 0
    }

    /// Whether every one of `channels` is subscribed, or lingering after a recent wait, and
    /// confirmed: a new waiter on them is heard from its first attempt on.
    pub(crate) fn is_live(&self, channels: &[String]) -> bool {
        let registry = lock(&self.registry);
        channels
            .iter()
            .all(|name| registry.channels.get(name).is_some_and(|c| c.confirmed))
    }

    /// The channels to keep subscribed at `now`: those with waiters, and those whose last waiter
    /// left less than [`LINGER`] ago. The others are dropped.
    pub(crate) fn wanted(&self, now: Instant) -> Vec<String> {
        let mut registry = lock(&self.registry);
        let before = registry.channels.len();
        registry.channels.retain(|_, channel| {
            channel
                .idle_since
                .is_none_or(|idle| now.saturating_duration_since(idle) < LINGER)
        });
        let dropped = before - registry.channels.len();
        self.watched.fetch_sub(dropped, Ordering::Relaxed);
        registry.channels.keys().cloned().collect()
    }

    /// Master `master` handed `channel`'s key to the waiter named by `payload`: records it and
    /// wakes the waiter if it is one of ours. Returns whether it was. An empty payload is a
    /// read-write lock's release, for every waiter on the channel: each is woken.
    pub(crate) fn handed_over(&self, master: usize, channel: &str, payload: &[u8]) -> bool {
        let mut registry = lock(&self.registry);
        if payload.is_empty() {
            let Registry { channels, waiters } = &mut *registry;
            let Some(channel) = channels.get(channel) else {
                return false;
            };
            for id in &channel.waiters {
                if let Some(waiting) = waiters.get_mut(id) {
                    waiting.heard.masters |= 1 << master.min(63);
                    waiting.wake.notify_one();
                }
            }
            return !channel.waiters.is_empty();
        }
        let Ok(payload) = std::str::from_utf8(payload) else {
            return false;
        };
        // A bare id (an older release) wakes the waiter to attempt; only an announcement with
        // its times can be held without an attempt.
        let (id, times) = match handed::parse(payload) {
            Some((id, published, expires)) => (id, Some((published, expires))),
            None => (payload, None),
        };
        let ours = registry
            .channels
            .get(channel)
            .is_some_and(|c| c.waiters.iter().any(|w| w == id));
        match registry.waiters.get_mut(id).filter(|_| ours) {
            Some(waiting) => {
                if let Some((published, expires)) = times {
                    waiting.masters.note(master, published, expires);
                }
                waiting.heard.masters |= 1 << master.min(63);
                waiting.wake.notify_one();
                true
            }
            None => false,
        }
    }

    /// What the waiter `id` has heard since it last [took](Hub::take_heard) it.
    pub(crate) fn heard(&self, id: &str) -> Heard {
        let registry = lock(&self.registry);
        registry
            .waiters
            .get(id)
            .map_or_else(Heard::default, |w| w.heard)
    }

    /// What the waiter `id` has heard, forgotten as it attempts.
    pub(crate) fn take_heard(&self, id: &str) -> Heard {
        let mut registry = lock(&self.registry);
        registry
            .waiters
            .get_mut(id)
            .map_or_else(Heard::default, |w| std::mem::take(&mut w.heard))
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
            if let Some(waiting) = waiters.get_mut(id) {
                waiting.heard.unsure = true;
                waiting.wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "r:released:00000000000000ab";
    const CLIENT: &str = "00000000000000ab";

    fn joined(hub: &Hub, random: u64, channels: &[&str]) -> (Ticket, Arc<Notify>) {
        let ticket = Ticket::new(CLIENT, 1_700_000_000_000_000, random);
        let wake = Arc::new(Notify::new());
        hub.join(&ticket, &names(channels), wake.clone(), Masters::new(5));
        (ticket, wake)
    }

    fn names(channels: &[&str]) -> Vec<String> {
        channels.iter().map(|c| (*c).to_owned()).collect()
    }

    /// Whether `wake` holds a notification (consumes it).
    fn woken(wake: &Notify) -> bool {
        use futures::FutureExt;
        wake.notified().now_or_never().is_some()
    }

    #[test]
    fn tickets_order_by_millisecond_first_and_break_ties_within_one() {
        let early = Ticket::new(CLIENT, 5_000_999, 999);
        let late = Ticket::new(CLIENT, 5_001_000, 0);
        assert!(early.order < late.order, "{early:?} {late:?}");
        assert_eq!(early.id, "00000000000000ab00000000000003e7");
        // Two waiters of one millisecond get different orders from their random bits.
        assert_ne!(
            Ticket::new(CLIENT, 7_000, 1).order,
            Ticket::new(CLIENT, 7_000, 2).order
        );
        // Today's epoch times stay exact in a double.
        let now = Ticket::new(CLIENT, 1_800_000_000_000_000, u64::MAX);
        assert_eq!(now.order, 1_800_000_000_000_615);
    }

    #[test]
    fn a_hand_off_wakes_the_waiter_it_names_and_nobody_else() {
        let hub = Hub::default();
        let (first, first_wake) = joined(&hub, 1, &[CHANNEL]);
        let (second, second_wake) = joined(&hub, 2, &[CHANNEL]);
        assert!(hub.handed_over(0, CHANNEL, first.id.as_bytes()));
        assert!(woken(&first_wake));
        assert!(!woken(&second_wake));
        assert_eq!(hub.heard(&second.id), Heard::default());
        // Another client's waiter, or a payload that is no id: nobody here wakes.
        assert!(!hub.handed_over(0, CHANNEL, b"00000000000000ab00000000000000ff"));
        assert!(!hub.handed_over(0, CHANNEL, &[0xff, 0xfe]));
        assert!(!woken(&first_wake) && !woken(&second_wake));
    }

    #[test]
    fn an_announcement_with_its_times_wakes_the_waiter_and_notes_them_for_it() {
        let hub = Hub::default();
        let ticket = Ticket::new(CLIENT, 1_700_000_000_000_000, 9);
        let (wake, masters) = (Arc::new(Notify::new()), Masters::new(3));
        hub.join(&ticket, &names(&[CHANNEL]), wake.clone(), masters.clone());
        // The waiter's last attempt ran at each master's time 1000, sent now.
        let sent = Instant::now();
        for master in 0..3 {
            masters.sending(master);
            masters.answered(master, sent, Some(1000));
        }
        for master in 0..2 {
            let announced = format!("{}:1100:1400", ticket.id);
            assert!(hub.handed_over(master, CHANNEL, announced.as_bytes()));
        }
        assert!(woken(&wake));
        assert_eq!(hub.heard(&ticket.id).masters(), 2);
        assert_eq!(masters.handed_over(), vec![0, 1]);
        assert!(masters
            .held_until(2, 0.01)
            .is_some_and(|until| until > sent));
        // Another waiter's id with times, or times that do not parse: nobody here wakes.
        assert!(!hub.handed_over(2, CHANNEL, b"00000000000000ab00000000000000ff:1:2"));
        assert!(!hub.handed_over(2, CHANNEL, format!("{}:x:2", ticket.id).as_bytes()));
        assert_eq!(masters.handed_over(), vec![0, 1]);
    }

    #[test]
    fn a_read_write_release_wakes_every_waiter_on_its_channel_and_nobody_else() {
        let hub = Hub::default();
        let (first, first_wake) = joined(&hub, 1, &["r:rw"]);
        let (second, second_wake) = joined(&hub, 2, &["r:rw"]);
        let (other, other_wake) = joined(&hub, 3, &["s:rw"]);
        assert!(hub.handed_over(1, "r:rw", b""));
        assert!(woken(&first_wake) && woken(&second_wake));
        assert!(!woken(&other_wake));
        assert_eq!(hub.heard(&first.id).masters(), 1);
        assert_eq!(hub.heard(&second.id).masters(), 1);
        assert_eq!(hub.heard(&other.id).masters(), 0);
        // A channel nobody here waits on.
        assert!(!hub.handed_over(1, "t:rw", b""));
    }

    #[test]
    fn a_hand_off_on_a_channel_the_waiter_does_not_wait_on_wakes_nobody() {
        let hub = Hub::default();
        let (ticket, wake) = joined(&hub, 1, &[CHANNEL]);
        assert!(!hub.handed_over(0, "other:released:00000000000000ab", ticket.id.as_bytes()));
        assert!(!woken(&wake));
        assert_eq!(hub.heard(&ticket.id).masters(), 0);
    }

    #[test]
    fn a_waiter_has_heard_enough_once_a_quorum_of_masters_handed_over() {
        let hub = Hub::default();
        let (ticket, _) = joined(&hub, 1, &[CHANNEL]);
        let quorum = 3;
        // Copies from one master count once.
        for _ in 0..3 {
            hub.handed_over(4, CHANNEL, ticket.id.as_bytes());
        }
        hub.handed_over(0, CHANNEL, ticket.id.as_bytes());
        assert_eq!(hub.heard(&ticket.id).masters(), 2);
        assert!(!hub.heard(&ticket.id).enough(quorum));
        hub.handed_over(2, CHANNEL, ticket.id.as_bytes());
        assert!(hub.heard(&ticket.id).enough(quorum));
        // Taken as the waiter attempts: the next hand-off is counted afresh.
        assert_eq!(hub.take_heard(&ticket.id).masters(), 3);
        assert_eq!(hub.heard(&ticket.id), Heard::default());
        // A master past the 64th counts as the 64th.
        hub.handed_over(63, CHANNEL, ticket.id.as_bytes());
        hub.handed_over(70, CHANNEL, ticket.id.as_bytes());
        assert_eq!(hub.heard(&ticket.id).masters(), 1);
    }

    #[test]
    fn the_first_confirmation_makes_every_waiter_on_it_attempt_once() {
        let hub = Hub::default();
        let (a, wake_a) = joined(&hub, 1, &[CHANNEL]);
        let (b, wake_b) = joined(&hub, 2, &[CHANNEL, "s:released"]);
        assert!(!hub.is_live(&names(&[CHANNEL])));
        hub.confirmed(CHANNEL);
        assert!(woken(&wake_a) && woken(&wake_b));
        assert!(hub.take_heard(&a.id).enough(3) && hub.take_heard(&b.id).enough(3));
        hub.confirmed(CHANNEL);
        assert!(
            !woken(&wake_a) && !woken(&wake_b),
            "a second confirmation is no news"
        );
        assert!(!hub.heard(&a.id).enough(3));
        assert!(hub.is_live(&names(&[CHANNEL])));
        assert!(
            !hub.is_live(&names(&[CHANNEL, "s:released"])),
            "s is not confirmed"
        );
    }

    #[test]
    fn a_channel_stays_wanted_while_waited_on_and_lingers_after_its_last_waiter() {
        let hub = Hub::default();
        let t0 = Instant::now();
        assert!(!hub.is_watched());
        let (a, _) = joined(&hub, 1, &[CHANNEL]);
        let (b, _) = joined(&hub, 2, &[CHANNEL, "s:released"]);
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        assert_eq!(sorted(hub.wanted(t0)), [CHANNEL, "s:released"]);
        hub.leave(&b, &names(&[CHANNEL, "s:released"]), t0);
        assert!(!hub.handed_over(0, CHANNEL, b.id.as_bytes()), "b has left");
        // s:released lost its last waiter: it lingers, then goes.
        assert_eq!(sorted(hub.wanted(t0 + LINGER / 2)), [CHANNEL, "s:released"]);
        assert_eq!(hub.wanted(t0 + LINGER), [CHANNEL]);
        hub.leave(&a, &names(&[CHANNEL]), t0 + LINGER);
        assert!(hub.is_watched(), "lingering");
        // A waiter that comes back while it lingers keeps it: it needs no new subscription.
        let (c, _) = joined(&hub, 3, &[CHANNEL]);
        assert_eq!(hub.wanted(t0 + LINGER * 3), [CHANNEL]);
        hub.leave(&c, &names(&[CHANNEL]), t0 + LINGER * 3);
        assert!(hub.wanted(t0 + LINGER * 4).is_empty());
        assert!(!hub.is_watched());
    }

    #[test]
    fn the_grace_is_a_tenth_of_the_node_timeout_and_at_least_a_millisecond() {
        assert_eq!(
            hand_off_grace(Duration::from_millis(50)),
            Duration::from_millis(5)
        );
        assert_eq!(
            hand_off_grace(Duration::from_millis(3)),
            Duration::from_millis(1)
        );
    }
}

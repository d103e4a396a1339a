//! A lock handed over by the release itself, in one trip: release, announcement, hold.
//!
//! A release that finds somebody in line writes `~queued:<id>` in place of its own token for the
//! head of the line `<id>`, takes the head out of the line, and announces `<id>:<published>:<expires>`
//! on the head's client's channel: the master's time (ms) of the hand-off, and the master's time
//! at which the key expires (see `hand_over` in `lua/line.lua`). That value is the head's lock
//! token: once a quorum of masters has announced it, the head holds the lock with no attempt of
//! its own, and renews it to the full TTL in the background.
//!
//! # How long the head can prove it holds
//!
//! The head knows each master's clock through its own attempts: each refused attempt's reply
//! carries the master's time `T` at which the script ran (`lua/acquire_queued.lua`), and the
//! script ran no earlier than the attempt was sent, at `sent` on this process's clock. A key a
//! master announced expires at the master's time `E`, so at `sent + (E - T)` on this clock or
//! later, as long as the two clocks run at the same rate within the drift allowance
//! ([`quorum::drift`] of `E - T`, the same allowance the quorum lock makes for its TTL). The
//! head holds until the quorum-th latest of those instants over the masters that announced:
//! until then a quorum still has its key. The key lives at most the head's entry lease past its
//! last renewal on that master (`hand_over` bounds it so), so the first validity is roughly two
//! thirds of an entry lease at worst; the renewal that follows makes it the full TTL.
//!
//! # Why this cannot hand the lock to two holders
//!
//! * Only a release of the holder's own token (or the end of a waiter's own entry, `dequeue`)
//!   writes `~queued:<id>`, and only in place of that key: a hand-off never hides another
//!   holder. No attempt's token can equal it: tokens do not start with `~`.
//! * The value stays until it expires, the head releases it (a compare of the whole value), or
//!   the head's own attempt or departure replaces it. An announcement is counted only when it was
//!   published after the head's last attempt ran on that master ([`Masters::note`]), and a
//!   master with an attempt of the head still unanswered is not counted at all: so an attempt
//!   cannot have replaced the key the head counts. A head that leaves the line does not hold.
//! * So a quorum of announcements, each valid until its bound, is a quorum of masters holding
//!   the head's token until the quorum-th latest bound: the quorum lock's own argument, with the
//!   validity measured from the head's attempts instead of an acquire request.
//! * A master that restarts empty, or fails over to a replica that missed the hand-off, loses
//!   the key as it would lose any grant: the same assumption as every other lock.
//! * Within a voter that failed over (a Sentinel group's or a cluster shard's), the time an
//!   attempt read and the time a hand-off announced may come from two servers: the primary and
//!   the replica that replaced it. Their clocks must then agree within the drift allowance. Any
//!   lock already needs that: a replica keeps the absolute expiry times its primary set, and
//!   expires the keys on its own clock once promoted.
//!
//! A head that dies between the release and the announcement blocks its line until the key
//! expires: at most its entry lease, as a dead head always did.
//!
//! Only a plain mutex is held this way; a head that cannot (fencing, which needs a settled
//! counter; durable votes, which need a confirmation; an owner id; several keys; a semaphore
//! slot; an election's term) attempts as before, and its attempt takes the key handed to it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::quorum;
use crate::sync::lock;

/// Both times are whole milliseconds of the master's clock, and the master may set the key's
/// expiry from a time read just before the one it announces: this much less is certain.
const ROUNDING: Duration = Duration::from_millis(2);

/// What one waiter knows of each master, to judge a hand-off to it.
#[derive(Debug)]
pub(crate) struct Masters {
    masters: Mutex<Vec<Master>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Master {
    /// The last attempt this master answered: when it was sent, and the master's time then.
    reading: Option<(Instant, u64)>,
    /// Attempts sent and not answered yet: one may still run, and replace a handed key.
    pending: u32,
    /// An attempt this master never answered (a timeout, an error): it may have run at any
    /// time, so no announcement of this master counts for this waiter.
    unsure: bool,
    /// The latest hand-off it announced: the master's time it was published, and expires.
    announced: Option<(u64, u64)>,
}

impl Masters {
    pub(crate) fn new(count: usize) -> Arc<Self> {
        Arc::new(Masters {
            masters: Mutex::new(vec![Master::default(); count]),
        })
    }

    /// An attempt is being sent to `master`.
    pub(crate) fn sending(&self, master: usize) {
        if let Some(m) = lock(&self.masters).get_mut(master) {
            m.pending += 1;
        }
    }

    /// The attempt sent to `master` at `sent` was answered; `master_ms` is the master's time
    /// it ran at, when its reply told.
    pub(crate) fn answered(&self, master: usize, sent: Instant, master_ms: Option<u64>) {
        if let Some(m) = lock(&self.masters).get_mut(master) {
            m.pending = m.pending.saturating_sub(1);
            match master_ms {
                Some(ms) if m.reading.is_none_or(|(s, _)| s <= sent) => {
                    m.reading = Some((sent, ms));
                }
                Some(_) => {}
                None => m.unsure = true,
            }
        }
    }

    /// The attempt sent to `master` got no answer: it may run later, or may have run.
    pub(crate) fn unanswered(&self, master: usize) {
        if let Some(m) = lock(&self.masters).get_mut(master) {
            m.pending = m.pending.saturating_sub(1);
            m.unsure = true;
        }
    }

    /// `master` announced a hand-off to this waiter, published at `published` on its clock and
    /// expiring at `expires`.
    pub(crate) fn note(&self, master: usize, published: u64, expires: u64) {
        if let Some(m) = lock(&self.masters).get_mut(master) {
            if m.announced.is_none_or(|(p, _)| p <= published) {
                m.announced = Some((published, expires));
            }
        }
    }

    /// The masters that handed the key over since the waiter's last attempt there: their
    /// scripts took the waiter out of their lines.
    pub(crate) fn handed_over(&self) -> Vec<usize> {
        let masters = lock(&self.masters);
        let handed = masters.iter().enumerate().filter(|(_, m)| {
            let ran = m.reading.map_or(0, |(_, ran)| ran);
            m.announced.is_some_and(|(published, _)| published > ran)
        });
        handed.map(|(i, _)| i).collect()
    }

    /// Until when a quorum of masters holds the key handed to this waiter, by what it can
    /// prove (see the module docs); `None` when fewer than `quorum` masters count.
    pub(crate) fn held_until(&self, quorum: usize, drift_factor: f64) -> Option<Instant> {
        let masters = lock(&self.masters);
        let mut until: Vec<Instant> = masters
            .iter()
            .filter(|m| m.pending == 0 && !m.unsure)
            .filter_map(|m| {
                let (sent, ran) = m.reading?;
                let (published, expires) = m.announced?;
                // Published after the waiter's last attempt ran there: no attempt replaced it.
                if published <= ran || expires <= ran {
                    return None;
                }
                let lives = Duration::from_millis(expires - ran).checked_sub(ROUNDING)?;
                sent.checked_add(lives.checked_sub(quorum::drift(lives, drift_factor))?)
            })
            .collect();
        if until.len() < quorum {
            return None;
        }
        until.sort_unstable_by(|a, b| b.cmp(a));
        until.get(quorum - 1).copied()
    }
}

/// The renewal to the full TTL that follows a hand-off: the deadline it won, once it won.
#[derive(Debug, Default)]
pub(crate) struct Renewal {
    won: OnceLock<Instant>,
}

impl Renewal {
    /// The deadline the renewal won, if it did.
    pub(crate) fn won(&self) -> Option<Instant> {
        self.won.get().copied()
    }

    /// The renewal won a quorum: the lock is valid until `deadline`.
    pub(crate) fn set(&self, deadline: Instant) {
        let _ = self.won.set(deadline);
    }
}

/// A hand-off's announcement: `<id>:<published>:<expires>` (see `hand_over` in `lua/line.lua`).
/// `None` for anything else, including the bare id older releases announce.
pub(crate) fn parse(payload: &str) -> Option<(&str, u64, u64)> {
    let (id, times) = payload.split_once(':')?;
    let (published, expires) = times.split_once(':')?;
    Some((id, published.parse().ok()?, expires.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const FACTOR: f64 = 0.01;

    fn answered(masters: &Masters, master: usize, sent: Instant, ran: u64) {
        masters.sending(master);
        masters.answered(master, sent, Some(ran));
    }

    #[test]
    fn announcements_parse_and_bare_ids_do_not() {
        assert_eq!(parse("abc:10:20"), Some(("abc", 10, 20)));
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("abc:10"), None);
        assert_eq!(parse("abc:x:20"), None);
    }

    #[test]
    fn the_head_holds_until_the_quorum_th_latest_bound_measured_from_its_attempts() {
        let t0 = Instant::now();
        let masters = Masters::new(5);
        // Master i ran the attempt sent at t0 at its time 1000; its key expires at 1000 + 300 + 10 i.
        for i in 0..5 {
            answered(&masters, i, t0, 1000);
        }
        masters.note(0, 1100, 1300);
        masters.note(1, 1100, 1310);
        assert_eq!(
            masters.held_until(3, FACTOR),
            None,
            "two of five is no quorum"
        );
        masters.note(2, 1100, 1320);
        let bound = |ms: u64| {
            let lives = Duration::from_millis(ms) - ROUNDING;
            t0 + lives - quorum::drift(lives, FACTOR)
        };
        assert_eq!(masters.held_until(3, FACTOR), Some(bound(300)));
        masters.note(3, 1100, 1330);
        masters.note(4, 1100, 1340);
        // The third latest of 340, 330, 320 ms, less the rounding and the drift.
        assert_eq!(masters.held_until(3, FACTOR), Some(bound(320)));
    }

    #[test]
    fn an_announcement_older_than_the_last_attempt_or_with_an_attempt_in_flight_does_not_count() {
        let t0 = Instant::now();
        let masters = Masters::new(3);
        for i in 0..3 {
            answered(&masters, i, t0, 1000);
            masters.note(i, 1100, 1400);
        }
        assert!(masters.held_until(2, FACTOR).is_some());
        // A later attempt ran on master 0 after its hand-off: it may have taken the key over.
        answered(&masters, 0, t0 + 200 * MS, 1200);
        // Master 1 has an attempt in flight.
        masters.sending(1);
        assert_eq!(masters.held_until(2, FACTOR), None);
        // Answered, but it ran after the hand-off was published: still not counted.
        masters.answered(1, t0 + 150 * MS, Some(1150));
        assert_eq!(masters.held_until(2, FACTOR), None);
        // A fresh hand-off on both.
        masters.note(0, 1300, 1600);
        masters.note(1, 1300, 1600);
        assert!(masters.held_until(2, FACTOR).is_some());
        // An attempt never answered rules its master out for good.
        masters.sending(2);
        masters.unanswered(2);
        masters.note(2, 1500, 1900);
        masters.note(0, 1200, 9999);
        let until = masters.held_until(2, FACTOR);
        // Masters 0 and 1 count: 400 ms after the attempt sent at +200 ms, and 450 ms after the
        // one sent at +150 ms; the second latest is master 1's, for its larger drift.
        let (lives_0, lives_1) = (398 * MS, 448 * MS);
        let bound_0 = t0 + 200 * MS + lives_0 - quorum::drift(lives_0, FACTOR);
        let bound_1 = t0 + 150 * MS + lives_1 - quorum::drift(lives_1, FACTOR);
        assert!(bound_1 < bound_0);
        assert_eq!(
            until,
            Some(bound_1),
            "the older announcement of master 0 did not replace its newer one"
        );
    }

    #[test]
    fn a_renewal_is_won_once() {
        let renewal = Renewal::default();
        assert_eq!(renewal.won(), None);
        let at = Instant::now();
        renewal.set(at);
        renewal.set(at + MS);
        assert_eq!(renewal.won(), Some(at));
    }
}

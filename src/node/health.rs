//! Whether a node is answering: its timeouts in a row, the silence they span, and the lease of
//! the one probe an unresponsive node may be sent at a time.

use crate::seam;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// After this many timeouts in a row, spanning at least [`SILENCE_BEFORE_UNRESPONSIVE`] with no
/// reply, the node is presumed unresponsive (a blackholed route or a stopped process answers
/// nothing and never closes the connection): until it answers again only one request at a time
/// is sent to it, as a probe. The others fail at once, so that a hung node costs the client
/// neither a pile of requests each waiting out the timeout, nor the work of tracking them.
pub(super) const TIMEOUTS_BEFORE_UNRESPONSIVE: u32 = 3;

/// See [`TIMEOUTS_BEFORE_UNRESPONSIVE`]. The silence is measured over the requests that timed
/// out, from the start of the first (or the last reply, if later) to the moment the latest
/// timed out: a burst of timeouts from a moment of overload (short node timeouts on a busy
/// machine) is not a hung node, however long the client then leaves the node idle, and skipping
/// it would leave the keys of the next locks on fewer nodes.
pub(super) const SILENCE_BEFORE_UNRESPONSIVE: Duration = Duration::from_secs(1);

/// The timeouts and replies of one node. Instants are kept as milliseconds since `origin`, in
/// atomics: the hot path (a reply) costs two relaxed stores.
#[derive(Debug)]
pub(super) struct Health {
    origin: Instant,
    timeouts_in_a_row: AtomicU32,
    last_reply: AtomicU64,
    /// Where the current run of timeouts began: the start of its first request, or the last
    /// reply if that came later.
    silent_since: AtomicU64,
    /// When the latest timeout of the run happened.
    silent_until: AtomicU64,
    /// Until when the probe in flight holds its lease; no later than now when there is none.
    probe_until: AtomicU64,
}

impl Health {
    pub(super) fn new() -> Self {
        Health {
            origin: seam::now(),
            timeouts_in_a_row: AtomicU32::new(0),
            last_reply: AtomicU64::new(0),
            silent_since: AtomicU64::new(0),
            silent_until: AtomicU64::new(0),
            probe_until: AtomicU64::new(0),
        }
    }

    /// The node replied at `now`. Returns how many timeouts in a row that ended.
    ///
    /// Every reply comes here, from every worker thread: it writes only what changes (the
    /// millisecond of the last reply, a run of timeouts ending), so that the node's counters
    /// are not a cache line the threads take from each other at every reply.
    pub(super) fn replied(&self, now: Instant) -> u32 {
        let now = self.ms(now);
        if self.last_reply.load(Ordering::Relaxed) < now {
            self.last_reply.fetch_max(now, Ordering::Relaxed);
        }
        match self.timeouts_in_a_row.load(Ordering::Relaxed) {
            0 => 0,
            _ => self.timeouts_in_a_row.swap(0, Ordering::Relaxed),
        }
    }

    /// A request started at `started` got no reply by `now`. Returns how many timeouts in a row
    /// that makes.
    pub(super) fn timed_out(&self, started: Instant, now: Instant) -> u32 {
        let in_a_row = self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row == 1 {
            let since = self
                .ms(started)
                .max(self.last_reply.load(Ordering::Relaxed));
            self.silent_since.store(since, Ordering::Relaxed);
        }
        self.silent_until.fetch_max(self.ms(now), Ordering::Relaxed);
        in_a_row
    }

    /// Whether requests have timed out [`TIMEOUTS_BEFORE_UNRESPONSIVE`] times in a row, over at
    /// least [`SILENCE_BEFORE_UNRESPONSIVE`] without a reply.
    pub(super) fn is_unresponsive(&self) -> bool {
        self.timeouts_in_a_row.load(Ordering::Relaxed) >= TIMEOUTS_BEFORE_UNRESPONSIVE && {
            let since = self.silent_since.load(Ordering::Relaxed);
            let until = self.silent_until.load(Ordering::Relaxed);
            until.saturating_sub(since) >= millis(SILENCE_BEFORE_UNRESPONSIVE)
        }
    }

    /// Takes the probe lease for `lease` from `now`, unless another probe holds an unexpired
    /// one. The lease ends when the returned guard is dropped, or when it expires: a probe
    /// whose future is kept but never polled again keeps the node out no longer than that.
    pub(super) fn start_probe(&self, now: Instant, lease: Duration) -> Option<ProbeLease<'_>> {
        let now = self.ms(now);
        // Never zero, so that a lease is always later than "none".
        let until = now.saturating_add(millis(lease)).max(1);
        let mut held = self.probe_until.load(Ordering::Acquire);
        loop {
            if held > now {
                return None;
            }
            match self.probe_until.compare_exchange(
                held,
                until,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(ProbeLease {
                        slot: &self.probe_until,
                        until,
                    })
                }
                Err(current) => held = current,
            }
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.origin))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The probe in flight to an unresponsive node. Dropping it ends its lease, unless the lease
/// has expired and another probe holds the next one.
#[derive(Debug)]
pub(super) struct ProbeLease<'a> {
    slot: &'a AtomicU64,
    until: u64,
}

impl Drop for ProbeLease<'_> {
    fn drop(&mut self) {
        let _ = self
            .slot
            .compare_exchange(self.until, 0, Ordering::Release, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_of_timeouts_is_not_silence_however_idle_the_node_is_after() {
        let health = Health::new();
        let t0 = health.origin + 10 * MS;
        for i in 0..5 {
            health.timed_out(t0 + i * MS, t0 + 100 * MS + i * MS);
        }
        // Nothing more is asked of the node for a long while: still not unresponsive.
        assert!(!health.is_unresponsive());
        // A request that times out a second after the burst began is a second of silence.
        health.timed_out(t0 + 1000 * MS, t0 + 1100 * MS);
        assert!(health.is_unresponsive());
    }

    #[test]
    fn silence_needs_three_timeouts_and_a_reply_ends_it() {
        let health = Health::new();
        let t0 = health.origin;
        health.timed_out(t0, t0 + 100 * MS);
        health.timed_out(t0 + 1500 * MS, t0 + 1600 * MS);
        assert!(!health.is_unresponsive(), "two timeouts");
        health.timed_out(t0 + 1600 * MS, t0 + 1700 * MS);
        assert!(health.is_unresponsive());
        assert_eq!(health.replied(t0 + 1800 * MS), 3);
        assert!(!health.is_unresponsive());
    }

    #[test]
    fn silence_starts_at_the_last_reply_when_it_came_after_the_request_was_sent() {
        let health = Health::new();
        let t0 = health.origin;
        health.replied(t0 + 500 * MS);
        // Sent before that reply; the silence only starts with it.
        for _ in 0..3 {
            health.timed_out(t0, t0 + 1400 * MS);
        }
        assert!(!health.is_unresponsive());
        health.timed_out(t0 + 1450 * MS, t0 + 1550 * MS);
        assert!(health.is_unresponsive());
    }

    #[test]
    fn one_probe_at_a_time_until_it_ends_or_its_lease_expires() {
        let health = Health::new();
        let t0 = health.origin;
        let lease = 200 * MS;
        let first = health.start_probe(t0, lease);
        assert!(first.is_some());
        assert!(health.start_probe(t0 + 100 * MS, lease).is_none());
        drop(first);
        assert!(health.start_probe(t0 + 100 * MS, lease).is_some());

        // A probe never dropped (its future pinned and forgotten) holds the node until its
        // lease expires; when it is dropped at last, it leaves the next probe's lease alone.
        let forgotten = health.start_probe(t0 + 1000 * MS, lease);
        assert!(forgotten.is_some());
        assert!(health.start_probe(t0 + 1199 * MS, lease).is_none());
        let next = health.start_probe(t0 + 1200 * MS, lease);
        assert!(next.is_some());
        drop(forgotten);
        assert!(health.start_probe(t0 + 1300 * MS, lease).is_none());
        drop(next);
        assert!(health.start_probe(t0 + 1300 * MS, lease).is_some());
    }
}

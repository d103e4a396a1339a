//! Pure quorum arithmetic: how many votes a lock needs, how long a granted lock stays valid, and
//! the tally that decides an attempt as soon as its outcome is known.

use std::time::Duration;

use crate::error::Error;
use crate::seam;

/// When no node timeout is set, each request is bounded by the TTL divided by this, and by
/// [`DEFAULT_MAX_NODE_TIMEOUT`] at most.
pub const DEFAULT_NODE_TIMEOUT_DIVISOR: u32 = 20;
/// The longest default node timeout, whatever the TTL (see [`DEFAULT_NODE_TIMEOUT_DIVISOR`]).
pub const DEFAULT_MAX_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// The fixed part of the clock-drift allowance, added to `ttl × drift_factor`: it covers the
/// millisecond granularity of Redis expiry.
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Votes needed out of `node_count` configured nodes: a strict majority.
pub(crate) fn quorum(node_count: usize) -> usize {
    node_count / 2 + 1
}

/// The clock-drift allowance for a TTL: `ttl × factor + 2 ms`.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    ttl.mul_f64(factor) + DRIFT_FLOOR
}

/// What is left of the TTL after `elapsed` and the drift allowance, or `None` when nothing is.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// The timing of one lease, derived from its TTL and validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    /// The TTL, rounded down to whole milliseconds.
    pub(crate) ttl: Duration,
    /// The TTL in whole milliseconds, as the nodes receive it.
    pub(crate) ttl_ms: u64,
    pub(crate) drift: Duration,
    pub(crate) node_timeout: Duration,
}

/// Entry leases in the line are this many node timeouts...
const ENTRY_LEASE_NODE_TIMEOUTS: u32 = 10;
/// ...and never shorter than this.
const MIN_ENTRY_LEASE: Duration = Duration::from_millis(50);

impl Lease {
    /// Validates `ttl` and derives the lease timing: the drift allowance from `drift_factor`,
    /// and the node timeout, `node_timeout` if set, else TTL / [`DEFAULT_NODE_TIMEOUT_DIVISOR`]
    /// (at most [`DEFAULT_MAX_NODE_TIMEOUT`]).
    pub(crate) fn new(
        ttl: Duration,
        drift_factor: f64,
        node_timeout: Option<Duration>,
    ) -> Result<Lease, Error> {
        let invalid = |reason: String| Error::InvalidTtl { ttl, reason };
        let ttl_ms = u64::try_from(ttl.as_millis())
            .ok()
            .filter(|ms| i64::try_from(*ms).is_ok())
            .ok_or_else(|| invalid("its milliseconds overflow".into()))?;
        if ttl_ms == 0 {
            return Err(invalid("it must be at least 1 ms".into()));
        }
        let ttl = Duration::from_millis(ttl_ms);
        if seam::now().checked_add(ttl).is_none() {
            return Err(invalid("it overflows the clock".into()));
        }
        let drift = drift(ttl, drift_factor);
        let node_timeout = node_timeout.unwrap_or_else(|| {
            (ttl / DEFAULT_NODE_TIMEOUT_DIVISOR)
                .clamp(Duration::from_millis(1), DEFAULT_MAX_NODE_TIMEOUT)
        });
        if ttl <= drift + node_timeout {
            return Err(invalid(format!(
                "it must be longer than the drift allowance ({drift:?}) plus the node timeout ({node_timeout:?})"
            )));
        }
        Ok(Lease {
            ttl,
            ttl_ms,
            drift,
            node_timeout,
        })
    }

    /// How long a waiter's place in line lasts without renewal, and a key reserved for it stays
    /// reserved: what a waiter that crashed can cost the line. Ten node timeouts: a waiter
    /// renews at least every third of it, so two renewals in a row can time out on a node
    /// without the entry lapsing there.
    pub(crate) fn entry_lease(&self) -> Duration {
        (self.node_timeout * ENTRY_LEASE_NODE_TIMEOUTS).max(MIN_ENTRY_LEASE)
    }
}

/// One node's answer to a fanned-out request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// The node did what was asked (set, extended, deleted).
    Yes,
    /// The node answered no, or failed, or timed out.
    No,
}

/// The state of an attempt once a vote is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A quorum said yes.
    Won,
    /// So many said no that a quorum is out of reach.
    Lost,
    /// Not known yet: wait for more votes.
    Pending,
}

/// Counts votes from a fixed number of nodes and decides as early as possible.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    node_count: usize,
    quorum: usize,
    yes: usize,
    no: usize,
}

impl Tally {
    pub(crate) fn new(node_count: usize) -> Self {
        Tally {
            node_count,
            quorum: quorum(node_count),
            yes: 0,
            no: 0,
        }
    }

    /// Counts one vote and says whether the outcome is now known.
    pub(crate) fn record(&mut self, vote: Vote) -> Decision {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
        }
        self.decision()
    }

    pub(crate) fn decision(&self) -> Decision {
        if self.yes >= self.quorum {
            Decision::Won
        } else if self.no > self.node_count - self.quorum {
            Decision::Lost
        } else {
            Decision::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority_of_the_configured_count() {
        let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in expected {
            assert_eq!(quorum(n), q, "n = {n}");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_milliseconds() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(
            drift(Duration::from_millis(100), 0.0),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let v = validity(
            Duration::from_millis(1000),
            Duration::from_millis(30),
            Duration::from_millis(12),
        );
        assert_eq!(v, Some(Duration::from_millis(958)));
    }

    #[test]
    fn validity_is_none_when_nothing_is_left_and_never_underflows() {
        let ttl = Duration::from_millis(100);
        assert_eq!(
            validity(ttl, Duration::from_millis(98), Duration::from_millis(2)),
            None
        );
        assert_eq!(
            validity(ttl, Duration::from_millis(500), Duration::from_millis(2)),
            None
        );
        assert_eq!(
            validity(ttl, Duration::ZERO, Duration::from_millis(200)),
            None
        );
    }

    #[test]
    fn tally_wins_at_the_quorum_th_yes_without_waiting_for_the_rest() {
        let mut t = Tally::new(5);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::No), Decision::Pending);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::Yes), Decision::Won);
    }

    #[test]
    fn tally_loses_once_a_quorum_is_out_of_reach() {
        let mut t = Tally::new(5);
        assert_eq!(t.record(Vote::No), Decision::Pending);
        assert_eq!(t.record(Vote::No), Decision::Pending);
        assert_eq!(t.record(Vote::No), Decision::Lost);
    }

    #[test]
    fn tally_of_an_even_count_needs_more_than_half() {
        let mut t = Tally::new(4);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::Yes), Decision::Pending);
        assert_eq!(t.record(Vote::No), Decision::Pending);
        assert_eq!(t.record(Vote::No), Decision::Lost);
    }

    #[test]
    fn tally_of_one_node_decides_on_its_only_vote() {
        assert_eq!(Tally::new(1).record(Vote::Yes), Decision::Won);
        assert_eq!(Tally::new(1).record(Vote::No), Decision::Lost);
    }
}

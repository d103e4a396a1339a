//! Pure retry policy: how many attempts, and the jittered delay between them.

use std::time::Duration;

use rand::Rng;

/// How long [`Redlock::acquire`](crate::Redlock::acquire) waits for a held resource, by default: no attempt starts
/// after it. Set another with [`RedlockBuilder::acquire_timeout`](crate::RedlockBuilder::acquire_timeout).
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// When and how often `acquire` tries again after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Retries after the first attempt.
    pub(crate) retries: u32,
    /// The base delay between attempts.
    pub(crate) delay: Duration,
    /// The delay is spread uniformly over `delay ± jitter` (never below zero), so clients that
    /// collided do not collide again in lockstep.
    pub(crate) jitter: Duration,
}

impl RetryPolicy {
    /// Total attempts, the first included.
    pub(crate) fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }

    /// The delay before the next attempt, drawn from `rng`.
    pub(crate) fn delay<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let low = self.delay.saturating_sub(self.jitter);
        let high = self.delay.saturating_add(self.jitter);
        if low >= high {
            return low;
        }
        rng.random_range(low..=high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn policy(delay_ms: u64, jitter_ms: u64) -> RetryPolicy {
        RetryPolicy {
            retries: 3,
            delay: Duration::from_millis(delay_ms),
            jitter: Duration::from_millis(jitter_ms),
        }
    }

    #[test]
    fn delays_stay_within_base_plus_or_minus_jitter_and_spread_over_it() {
        let p = policy(200, 100);
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..1000).map(|_| p.delay(&mut rng)).collect();
        let min = delays.iter().min().copied().unwrap_or_default();
        let max = delays.iter().max().copied().unwrap_or_default();
        assert!(min >= Duration::from_millis(100), "{min:?}");
        assert!(max <= Duration::from_millis(300), "{max:?}");
        // A thousand uniform draws cover most of the 200 ms range.
        assert!(max - min > Duration::from_millis(180), "{min:?}..{max:?}");
    }

    #[test]
    fn jitter_larger_than_the_delay_never_goes_negative() {
        let p = policy(10, 50);
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..1000 {
            assert!(p.delay(&mut rng) <= Duration::from_millis(60));
        }
    }

    #[test]
    fn zero_jitter_gives_the_base_delay() {
        let p = policy(200, 0);
        let mut rng = StdRng::seed_from_u64(3);
        assert_eq!(p.delay(&mut rng), Duration::from_millis(200));
    }

    #[test]
    fn the_same_seed_gives_the_same_delays() {
        let p = policy(200, 100);
        let a: Vec<_> = (0..5)
            .scan(StdRng::seed_from_u64(9), |r, _| Some(p.delay(r)))
            .collect();
        let b: Vec<_> = (0..5)
            .scan(StdRng::seed_from_u64(9), |r, _| Some(p.delay(r)))
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn attempts_count_the_first_plus_the_retries_without_overflow() {
        assert_eq!(policy(1, 1).attempts(), 4);
        let p = RetryPolicy {
            retries: u32::MAX,
            ..policy(1, 1)
        };
        assert_eq!(p.attempts(), u32::MAX);
    }
}

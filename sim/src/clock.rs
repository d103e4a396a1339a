//! Time as a master sees it: a [`VirtualTime`] the simulation moves, read through each master's
//! own [`Clock`], which may run ahead of it or behind it, step, or run fast or slow.
//!
//! Nothing here reads the operating system's clock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The simulation's time, shared by every master that follows it: a wall-clock instant (time
/// since the Unix epoch) that only the simulation moves.
///
/// Cloning gives another handle on the same time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock_sim::VirtualTime;
///
/// let time = VirtualTime::new(Duration::from_secs(1_700_000_000));
/// time.advance(Duration::from_millis(5));
/// assert_eq!(time.now(), Duration::from_millis(1_700_000_000_005));
/// ```
#[derive(Clone, Default)]
pub struct VirtualTime {
    nanos: Arc<AtomicU64>,
}

impl fmt::Debug for VirtualTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("VirtualTime").field(&self.now()).finish()
    }
}

impl VirtualTime {
    /// A time that starts at `since_epoch`.
    pub fn new(since_epoch: Duration) -> Self {
        let time = VirtualTime::default();
        time.set(since_epoch);
        time
    }

    /// The current instant, as time since the Unix epoch.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    /// Moves the time to `since_epoch` (backwards too: the simulation decides).
    pub fn set(&self, since_epoch: Duration) {
        let nanos = u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.store(nanos, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// A source for [`Clock::new`] that reads this time.
    pub fn source(&self) -> impl Fn() -> Duration + Send + Sync + 'static {
        let time = self.clone();
        move || time.now()
    }
}

/// A master's own clock: `base + offset + rate × (source − base)`, where `source` is the time
/// the simulation supplies and `base` is where the source stood when the rate was last set.
///
/// The master reads it for `TIME` and for every expiry. Faults are the caller's: an offset
/// ([`set_offset`](Self::set_offset)), a step forwards or back ([`step`](Self::step)), a rate
/// ([`set_rate`](Self::set_rate)).
pub struct Clock {
    source: Box<dyn Fn() -> Duration + Send + Sync>,
    /// Nanoseconds added to the source.
    offset: i128,
    rate: f64,
    /// The source's reading when the rate was last set.
    base: Duration,
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock")
            .field("now", &self.now())
            .field("offset_ns", &self.offset)
            .field("rate", &self.rate)
            .finish()
    }
}

impl Clock {
    /// A clock that reads `source` as it is: no offset, rate 1.
    pub fn new(source: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        let base = source();
        Clock {
            source: Box::new(source),
            offset: 0,
            rate: 1.0,
            base,
        }
    }

    /// A clock that follows `time`.
    pub fn following(time: &VirtualTime) -> Self {
        Clock::new(time.source())
    }

    /// The clock's reading, as time since the Unix epoch (zero if the faults put it before).
    pub fn now(&self) -> Duration {
        let source = (self.source)();
        let elapsed = source.as_nanos() as i128 - self.base.as_nanos() as i128;
        let scaled = if self.rate == 1.0 {
            elapsed
        } else {
            (elapsed as f64 * self.rate) as i128
        };
        let nanos = self.base.as_nanos() as i128 + scaled + self.offset;
        Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
    }

    /// The reading in whole milliseconds since the epoch, as the master judges expiries.
    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.now().as_millis()).unwrap_or(i64::MAX)
    }

    /// Runs the clock `offset` ahead of its source (negative: behind), replacing any offset.
    pub fn set_offset(&mut self, offset_ns: i128) {
        self.offset = offset_ns;
    }

    /// The offset from the source, in nanoseconds (rate aside).
    pub fn offset(&self) -> i128 {
        self.offset
    }

    /// Steps the clock by `by_ns` nanoseconds: forward when positive, back when negative.
    pub fn step(&mut self, by_ns: i128) {
        self.offset += by_ns;
    }

    /// Runs the clock at `rate` times its source's pace from now on (1 is the source's pace),
    /// without a jump at the moment of the change. A rate that is not a finite positive number
    /// is ignored.
    pub fn set_rate(&mut self, rate: f64) {
        if !(rate.is_finite() && rate > 0.0) {
            return;
        }
        // Fold what the old rate accumulated into the offset, then start afresh.
        let now = self.now();
        let source = (self.source)();
        self.offset = now.as_nanos() as i128 - source.as_nanos() as i128;
        self.base = source;
        self.rate = rate;
    }

    /// The clock's rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_follows_its_time_with_an_offset_and_a_rate() {
        let time = VirtualTime::new(Duration::from_secs(100));
        let mut clock = Clock::following(&time);
        assert_eq!(clock.now(), Duration::from_secs(100));
        clock.step(-2_000_000_000);
        assert_eq!(clock.now(), Duration::from_secs(98));
        time.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_secs(99));
        clock.set_rate(2.0);
        assert_eq!(clock.now(), Duration::from_secs(99));
        time.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_secs(101));
        clock.set_rate(1.0);
        time.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_secs(102));
    }

    #[test]
    fn a_clock_stepped_before_the_epoch_reads_zero() {
        let time = VirtualTime::new(Duration::from_secs(1));
        let mut clock = Clock::following(&time);
        clock.set_offset(-5_000_000_000);
        assert_eq!(clock.now(), Duration::ZERO);
    }
}

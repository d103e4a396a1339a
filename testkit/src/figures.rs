//! Summary figures of measured samples: percentiles by one definition, and counts grouped for
//! reading.
//!
//! The tests, the chaos suite, the benchmarks and `quorumlock bench` all print latency
//! percentiles; they compute them here, so that a p50 or a p99 means the same wherever it is
//! printed.
//!
//! # Definition
//!
//! The `p`-quantile of `n` sorted values is the value of **nearest rank** ⌈p·n⌉ (1-based), kept
//! within `1..=n`: the smallest value with at least a fraction `p` of the values at or below it.
//! It is always one of the values measured, never an interpolation between two. For 1..=100,
//! p50 is 50 and p99 is 99.

/// The 1-based nearest rank of the `p`-quantile among `count` sorted values: ⌈p·count⌉, kept
/// within `1..=count` (so `p` at or below 0 gives the smallest value and `p` at or above 1 the
/// largest). `None` when `count` is zero.
///
/// For data kept in buckets rather than in a sorted slice (a histogram), walk the buckets until
/// this many values are counted.
pub fn nearest_rank(count: u64, p: f64) -> Option<u64> {
    if count == 0 {
        return None;
    }
    // `as` saturates: NaN and negative products become 0, huge ones u64::MAX; the clamp keeps
    // the rank inside the data either way.
    let rank = (count as f64 * p).ceil() as u64;
    Some(rank.clamp(1, count))
}

/// The `p`-quantile (`0.0..=1.0`) of `sorted`, which must be in ascending order, by nearest rank
/// (see the [module docs](self)). `None` when `sorted` is empty.
///
/// ```
/// use std::time::Duration;
/// use quorumlock_testkit::figures::percentile;
///
/// let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
/// assert_eq!(percentile(&samples, 0.5), Some(Duration::from_millis(50)));
/// assert_eq!(percentile(&samples, 0.99), Some(Duration::from_millis(99)));
/// assert_eq!(percentile::<Duration>(&[], 0.5), None);
/// ```
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let rank = nearest_rank(sorted.len() as u64, p)?;
    // The rank is within 1..=len, so the index is in bounds; `get` keeps that unprovable to
    // the compiler from turning into a panic.
    sorted.get(usize::try_from(rank - 1).ok()?).copied()
}

/// `n` in decimal with a comma between groups of three digits: `1234567` → `"1,234,567"`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), Some(50));
        assert_eq!(percentile(&values, 0.9), Some(90));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 0.995), Some(100));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile(&values, 0.0), Some(1));
    }

    #[test]
    fn a_percentile_is_always_a_measured_value() {
        let values = [10, 20];
        assert_eq!(percentile(&values, 0.5), Some(10));
        assert_eq!(percentile(&values, 0.51), Some(20));
        assert_eq!(percentile(&[7], 0.99), Some(7));
    }

    #[test]
    fn out_of_range_quantiles_stay_inside_the_data() {
        let values = [1, 2, 3];
        assert_eq!(percentile(&values, -1.0), Some(1));
        assert_eq!(percentile(&values, 2.0), Some(3));
        assert_eq!(percentile(&values, f64::NAN), Some(1));
        assert_eq!(percentile::<u32>(&[], 0.5), None);
        assert_eq!(nearest_rank(0, 0.5), None);
        assert_eq!(nearest_rank(1000, 0.99), Some(990));
    }

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(123_456), "123,456");
        assert_eq!(group_digits(1_234_567), "1,234,567");
        assert_eq!(group_digits(u64::MAX), "18,446,744,073,709,551,615");
    }
}

//! Durations on the command line: `250ms`, `30s`, `5m`, `1h`, or plain seconds.

use std::time::Duration;

/// Parses `250ms`, `1.5s`, `30s`, `5m`, `1h`; a bare number means seconds.
///
/// # Errors
///
/// A message naming the text and the accepted forms: for garbage, an unknown unit, a negative
/// or an out-of-range value.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative: a duration is zero or more (try 500ms, 30s, 5m)"
        ));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 500ms, 30s, 5m)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m or h)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// The shortest lease `exec` accepts: it is renewed every third of it, and each renewal needs a
/// round trip to a quorum, the clock-drift allowance and the margin by which the command is
/// stopped before the lease ends. Below this, even `true` would end with a lost lock.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);

/// The longest lease `exec` accepts. A lease is renewed while the command runs, so a long one
/// buys nothing; it only keeps the lock from others for that long after a holder dies without
/// releasing it (SIGKILL, a power cut).
pub(crate) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// Parses a `--ttl`: what [`parse`] accepts, from [`MIN_TTL`] to [`MAX_TTL`].
///
/// # Errors
///
/// As [`parse`], and a TTL out of that range, with the reason.
pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = parse(text)?;
    if ttl < MIN_TTL {
        return Err(format!(
            "{:?} is too short: at least {}s (the lease is renewed every third of it, and each \
             renewal needs round trips to the masters)",
            text.trim(),
            MIN_TTL.as_secs()
        ));
    }
    if ttl > MAX_TTL {
        return Err(format!(
            "{:?} is too long: at most {}h (the lease is renewed while the command runs; a long \
             TTL only keeps the lock from others after a holder dies)",
            text.trim(),
            MAX_TTL.as_secs() / 3600
        ));
    }
    Ok(ttl)
}

/// How long to wait for a busy lock: a duration, or `forever` (also `inf`, `infinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Give up after this long (zero: one attempt).
    For(Duration),
    /// Wait until the lock is free, however long that takes.
    Forever,
}

/// Parses a `--wait` value: what [`parse`] accepts, or `forever` / `inf` / `infinity`.
///
/// # Errors
///
/// As [`parse`].
pub(crate) fn parse_wait(text: &str) -> Result<Wait, String> {
    match text.trim() {
        "forever" | "inf" | "infinity" => Ok(Wait::Forever),
        other => parse(other)
            .map(Wait::For)
            .map_err(|e| format!("{e}, or forever")),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, parse_ttl, parse_wait, Wait};
    use std::time::Duration;

    #[test]
    fn units_and_bare_seconds_parse() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn garbage_is_refused_with_a_hint() {
        assert!(parse("soon").unwrap_err().contains("not a duration"));
        assert!(parse("5 days").unwrap_err().contains("unknown unit"));
        assert!(parse("-1s").unwrap_err().contains("negative"));
    }

    #[test]
    fn a_ttl_that_cannot_work_or_is_absurd_is_refused() {
        assert_eq!(parse_ttl("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_ttl("24h"), Ok(Duration::from_secs(24 * 3600)));
        assert!(parse_ttl("10ms").unwrap_err().contains("too short"));
        assert!(parse_ttl("1000000h").unwrap_err().contains("too long"));
        assert!(parse_ttl("soon").unwrap_err().contains("not a duration"));
    }

    #[test]
    fn a_wait_is_a_duration_or_forever() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("inf"), Ok(Wait::Forever));
        assert_eq!(parse_wait("10s"), Ok(Wait::For(Duration::from_secs(10))));
        assert!(parse_wait("later").unwrap_err().contains("forever"));
    }
}

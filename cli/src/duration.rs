//! Durations on the command line: `250ms`, `30s`, `5m`, `1h`, and compounds of them (`1m30s`,
//! `1h15m`). A number needs its unit: a bare `10` is refused (seconds? milliseconds?), except
//! `0`.

use std::time::Duration;

/// The units a duration's parts take, in seconds, largest first: the order a compound's parts
/// are written in.
const UNITS: [(&str, f64); 4] = [("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001)];

/// What every refusal suggests.
const FORMS: &str = "try 500ms, 30s, 5m, 1h or 1m30s";

/// Parses `250ms`, `1.5s`, `30s`, `5m`, `1h`, and their compounds, largest unit first
/// (`1h30m`, `1m30s`, `2s500ms`); `0` alone needs no unit.
///
/// # Errors
///
/// A message naming the text and the accepted forms: for garbage, a number without its unit, an
/// unknown unit, units out of order or given twice, a negative or an out-of-range value.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative: a duration is zero or more ({FORMS})"
        ));
    }
    if text.is_empty() {
        return Err(format!("an empty duration ({FORMS})"));
    }
    if text.bytes().all(|b| b == b'0' || b == b'.') && text.contains('0') {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut seconds = 0.0;
    // The index in UNITS of the last part's unit: each part's unit must be smaller.
    let mut last: Option<usize> = None;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        if number.is_empty() {
            return Err(format!("{text:?} is not a duration ({FORMS})"));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a duration ({FORMS})"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let unit = unit.trim();
        if unit.is_empty() {
            return Err(format!(
                "{text:?} has no unit: add one, as in {number}s or {number}ms ({FORMS})"
            ));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s, m or h: {FORMS})"
            ));
        };
        if last.is_some_and(|l| l >= index) {
            return Err(format!(
                "{text:?}: write its parts largest unit first, each once, as in 1h30m or \
                 1m30s"
            ));
        }
        last = Some(index);
        seconds += value * UNITS[index].1;
        rest = next;
    }
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
    fn units_and_compounds_parse() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h15m"), Ok(Duration::from_secs(4500)));
        assert_eq!(parse("2s500ms"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("1h0m5s"), Ok(Duration::from_secs(3605)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn garbage_and_bare_numbers_are_refused_with_a_hint() {
        assert!(parse("soon").unwrap_err().contains("not a duration"));
        assert!(parse("5 days").unwrap_err().contains("unknown unit"));
        assert!(parse("-1s").unwrap_err().contains("negative"));
        assert!(parse("").unwrap_err().contains("empty"));
        let bare = parse("10").unwrap_err();
        assert!(bare.contains("no unit") && bare.contains("10s"), "{bare}");
        assert!(parse("1m30").unwrap_err().contains("no unit"));
        assert!(parse("30s1m").unwrap_err().contains("largest unit first"));
        assert!(parse("1s1s").unwrap_err().contains("largest unit first"));
        assert!(parse("1.2.3s").unwrap_err().contains("not a duration"));
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

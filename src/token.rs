//! `LockToken`: the random value that marks a lock as one holder's, and its non-secret
//! fingerprint.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::seam;

/// The random value that marks a lock as this holder's on every node: 122 random bits from the
/// operating system's random source, fresh for every acquisition (under an owner id, the
/// attempt's stamp and 76 random bits, see [`Redlock::acquire_as`](crate::Redlock::acquire_as)).
///
/// Its `Debug` and `Display` never show the value; use [`expose`](LockToken::expose) where the
/// value itself is needed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockToken(Arc<str>);

impl LockToken {
    pub(crate) fn generate() -> Self {
        LockToken(nonce().into())
    }

    /// The token of one attempt under an owner id
    /// ([`Redlock::acquire_as`](crate::Redlock::acquire_as)), already checked: a fresh nonce,
    /// [`OWNER_SEPARATOR`], then the id. The nonce makes every attempt's value its own, so a
    /// cleanup of one attempt (which compares the whole value) never deletes another attempt's
    /// grant, and a takeover (a compare-and-swap of the exact value read, see
    /// `lua/acquire_owned.lua`) never replaces a value its attempt did not see; the id, at a
    /// fixed offset, is what lets the owner find its key again.
    ///
    /// Its nonce begins with the attempt's stamp (see [`AttemptStamps`]): of two attempts of
    /// one owner, the one with the later stamp takes the lock over, never the other way round.
    pub(crate) fn for_owner(id: &str, stamp: u64) -> Self {
        let random = seam::random_uuid().simple().to_string();
        let random = random.get(..OWNER_RANDOM_DIGITS).unwrap_or(&random);
        LockToken(
            format!(
                "{NONCE_PREFIX}{:0width$x}{random}{OWNER_SEPARATOR}{id}",
                stamp.min(MAX_STAMP),
                width = STAMP_DIGITS
            )
            .into(),
        )
    }

    /// The token of one campaign attempt for an election's term: a fresh nonce, `:`, then the
    /// value the leader announces (see `election`).
    pub(crate) fn for_term(value: &str) -> Self {
        Self::nonce_then(':', value)
    }

    /// The token of a lock a release handed to a waiter: the value the release wrote,
    /// `~queued:` and the waiter's id (see `wakeup/handed.rs`). Each waiter's id is its own.
    pub(crate) fn handed(value: String) -> Self {
        LockToken(value.into())
    }

    fn nonce_then(separator: char, tail: &str) -> Self {
        LockToken(format!("{}{separator}{tail}", nonce()).into())
    }

    /// The token as stored in Redis: a nonce, [`NONCE_PREFIX`] and 32 hex digits; under an owner
    /// id ([`Redlock::acquire_as`](crate::Redlock::acquire_as)), the nonce, `@` and the id; for a
    /// lock a release handed to this client's waiter, `~queued:` and the waiter's id.
    /// Treat it as a secret: whoever has it can release or extend the lock.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A short, non-secret fingerprint for logs and status displays (a hash prefix, not a
    /// substring of the token).
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.0)
    }

    /// The fingerprint of a token read from a master, as [`inspect`](crate::Redlock::inspect)
    /// shows it: for tools that must check that a key still holds the token they saw.
    pub fn fingerprint_of(token: &str) -> String {
        fingerprint(token)
    }
}

/// What every nonce starts with: the mark of a value quorumlock wrote. No other Redlock client
/// writes a value of this shape (they write random bytes, hex digits, base64 or UUIDs), and
/// only values of this shape are ever stretched over a wait line (`stretch` in `lua/line.lua`,
/// `ours`): a key another client holds keeps the expiry that client gives it.
pub(crate) const NONCE_PREFIX: &str = "ql-";

/// A fresh nonce: [`NONCE_PREFIX`], then a random (version 4) UUID from the operating system's
/// random source (a simulation's seeded generator under the `simulation` feature) as 32 hex
/// digits.
fn nonce() -> String {
    format!("{NONCE_PREFIX}{}", seam::random_uuid().simple())
}

/// How many hex digits of an owner attempt's nonce are its stamp (µs since the Unix epoch, up
/// to the year 2112), and how many follow it, at random.
const STAMP_DIGITS: usize = 13;
const OWNER_RANDOM_DIGITS: usize = 32 - STAMP_DIGITS;
const MAX_STAMP: u64 = (1 << (4 * STAMP_DIGITS)) - 1;

/// Where an owner attempt's nonce ends, and its ordered part (stamp, then random digits)
/// begins.
const ORDERED: std::ops::Range<usize> = NONCE_PREFIX.len()..NONCE_PREFIX.len() + 32;

/// The stamps of one client's attempts under owner ids: the order in which the attempts of one
/// owner take the lock over from each other (`lua/acquire_owned.lua`, `later` in
/// `lua/line.lua`). A stamp is the wall clock in µs, above every stamp this client drew or saw
/// before: a Lamport clock, so that an attempt refused for an attempt of the owner stamped
/// later (a process whose clock runs ahead) is followed by one stamped later still, and the
/// restarted worker takes its lock over at its next try, whatever the clocks.
#[derive(Debug, Default)]
pub(crate) struct AttemptStamps {
    last: AtomicU64,
}

impl AttemptStamps {
    /// The stamp of a new attempt.
    pub(crate) fn next(&self) -> u64 {
        let now = wall_clock_us();
        let mut stamp = 0;
        // `fetch_update` with a closure that always returns `Some` never fails.
        let _ = self
            .last
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                stamp = now.max(last.saturating_add(1)).min(MAX_STAMP);
                Some(stamp)
            });
        stamp
    }

    /// An attempt of the owner found `value`, an attempt stamped no earlier than its own:
    /// every later attempt of this client is stamped after it, unless that stamp is more than
    /// [`FOLLOWED_AHEAD`] ahead of this client's clock.
    pub(crate) fn saw(&self, value: &[u8]) {
        let horizon = wall_clock_us().saturating_add(FOLLOWED_AHEAD.as_micros() as u64);
        if let Some(stamp) = stamp_of(value).filter(|stamp| *stamp <= horizon) {
            self.last.fetch_max(stamp, Ordering::Relaxed);
        }
    }
}

/// How far ahead of a client's clock a stamp it sees is still followed. A stamp further ahead
/// (a writer's clock wrong by more than a day, a value of another shape, the greatest stamp 13
/// digits hold) would drag every later stamp of the client with it, and of every process of the
/// owner that met them in turn, refusing each one's first attempt and leaving no room above
/// the greatest stamp; such a value is waited out instead, as another holder's would be.
const FOLLOWED_AHEAD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The wall clock in µs since the Unix epoch, as a stamp.
fn wall_clock_us() -> u64 {
    seam::wall_clock()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(MAX_STAMP)
        })
}

/// The stamp of an owner attempt's value, if it has one.
fn stamp_of(value: &[u8]) -> Option<u64> {
    let digits = value.get(NONCE_PREFIX.len()..NONCE_PREFIX.len() + STAMP_DIGITS)?;
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Whether the owner attempt `token` comes after the attempt of the same owner whose value is
/// `value`: its stamp, then its random digits, are greater, compared byte by byte (as `later`
/// in `lua/line.lua` does).
pub(crate) fn comes_after(token: &[u8], value: &[u8]) -> bool {
    match (token.get(ORDERED), value.get(ORDERED)) {
        (Some(token), Some(value)) => token > value,
        _ => false,
    }
}

/// What stands between an owner attempt's nonce (35 characters) and its owner id in the token:
/// `lua/acquire_owned.lua` and `lua/acquire_queued.lua` recognise an owner's key by it, at that
/// offset. An election's tokens have `:` there, so no owner id ever re-enters a leader's key.
pub(crate) const OWNER_SEPARATOR: char = '@';

/// A short non-reversible fingerprint of a token: FNV-1a, 32 bits, as 8 hex digits.
pub(crate) fn fingerprint(token: &str) -> String {
    let hash = token.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{hash:08x}")
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({})", self.fingerprint())
    }
}

impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_token_keeps_the_nonce_length_and_orders_by_its_stamp() {
        let stamps = AttemptStamps::default();
        let first = LockToken::for_owner("worker-7", stamps.next());
        let second = LockToken::for_owner("worker-7", stamps.next());
        for token in [&first, &second] {
            assert_eq!(token.expose().find(OWNER_SEPARATOR), Some(35), "{token:?}");
            assert!(token.expose().starts_with(NONCE_PREFIX));
        }
        assert!(comes_after(
            second.expose().as_bytes(),
            first.expose().as_bytes()
        ));
        assert!(!comes_after(
            first.expose().as_bytes(),
            second.expose().as_bytes()
        ));
        assert!(!comes_after(
            first.expose().as_bytes(),
            first.expose().as_bytes()
        ));
    }

    #[test]
    fn a_stamp_seen_ahead_puts_every_later_stamp_after_it() {
        let stamps = AttemptStamps::default();
        let now = stamps.next();
        let ahead = format!("ql-{:013x}{}@w", now + 60_000_000, "0".repeat(19));
        stamps.saw(ahead.as_bytes());
        let next = LockToken::for_owner("w", stamps.next());
        assert!(comes_after(next.expose().as_bytes(), ahead.as_bytes()));
    }

    #[test]
    fn a_stamp_more_than_a_day_ahead_is_not_followed() {
        let stamps = AttemptStamps::default();
        let now = stamps.next();
        for far in [now + 25 * 3_600_000_000, MAX_STAMP] {
            let value = format!("ql-{far:013x}{}@w", "0".repeat(19));
            stamps.saw(value.as_bytes());
            assert!(stamps.next() < now + 3_600_000_000, "{value}");
        }
    }

    #[test]
    fn values_of_another_shape_never_come_before_an_attempt() {
        let token = LockToken::for_owner("w", 5);
        assert!(!comes_after(token.expose().as_bytes(), b"short"));
        let stamps = AttemptStamps::default();
        stamps.saw(b"ql-not hex at all, not hex at all@w");
        assert!(stamps.next() < MAX_STAMP);
    }
}

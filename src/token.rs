//! `LockToken`: the random value that marks a lock as one holder's, and its non-secret
//! fingerprint.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The value that marks a lock as this holder's on every node: 128 bits from the operating
/// system's random source, fresh for every acquisition (under an owner id, a random id of the
/// process and the attempt's number in it, see
/// [`Redlock::acquire_as`](crate::Redlock::acquire_as)).
///
/// Its `Debug` and `Display` never show the value; use [`expose`](LockToken::expose) where the
/// value itself is needed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LockToken(Arc<str>);

impl LockToken {
    pub(crate) fn generate() -> Self {
        LockToken(uuid::Uuid::new_v4().simple().to_string().into())
    }

    /// The token of one attempt under an owner id
    /// ([`Redlock::acquire_as`](crate::Redlock::acquire_as)), already checked: a nonce,
    /// [`OWNER_SEPARATOR`], then the id. The nonce makes every attempt's value its own, so a
    /// cleanup of one attempt (which compares the whole value) never deletes another attempt's
    /// grant, and a takeover (a compare-and-swap of the exact value read, see
    /// `lua/acquire_owned.lua`) never replaces a value its attempt did not see; the id, at a
    /// fixed offset, is what lets the owner find its key again.
    ///
    /// The nonce is this process's id (16 hex digits, random) and the attempt's number in this
    /// process (16 hex digits, counting up): so an attempt can tell, from the value alone, a
    /// grant of a later attempt of its own process, which it must never take over (see
    /// [`later_attempt_here`]).
    pub(crate) fn for_owner(id: &str) -> Self {
        let number = ATTEMPTS.fetch_add(1, Ordering::Relaxed);
        LockToken(format!("{:016x}{number:016x}{OWNER_SEPARATOR}{id}", process_id()).into())
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
        let nonce = uuid::Uuid::new_v4().simple();
        LockToken(format!("{nonce}{separator}{tail}").into())
    }

    /// The token as stored in Redis: 32 hex digits; under an owner id
    /// ([`Redlock::acquire_as`](crate::Redlock::acquire_as)), 32 hex digits, `@` and the id;
    /// for a lock a release handed to this client's waiter, `~queued:` and the waiter's id.
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

/// What stands between an owner attempt's nonce (32 hex digits) and its owner id in the token:
/// `lua/acquire_owned.lua` and `lua/acquire_queued.lua` recognise an owner's key by it, at that
/// offset. An election's tokens have `:` there, so no owner id ever re-enters a leader's key.
pub(crate) const OWNER_SEPARATOR: char = '@';

/// Whether `value`, read from a master where the owner attempt `token` was refused, is the
/// value of a **later** attempt of this same process (see [`LockToken::for_owner`]).
///
/// Such an attempt must not take that value over: it is the one that runs late, a request of an
/// attempt that already lost still on its way while the next attempt won. Were it to take the
/// key over, its rollback (which deletes what it wrote) would leave the later lock without that
/// master, a lock its holder still counts on. An earlier attempt's value, or another process's
/// (a worker that died, restarted under the same id), is taken over as documented.
pub(crate) fn later_attempt_here(token: &str, value: &[u8]) -> bool {
    let number = |nonce: &[u8]| {
        let digits = std::str::from_utf8(nonce.get(16..32)?).ok()?;
        u64::from_str_radix(digits, 16).ok()
    };
    let (mine, theirs) = (token.as_bytes(), value);
    match (
        mine.get(..16),
        theirs.get(..16),
        number(mine),
        number(theirs),
    ) {
        (Some(process), Some(other), Some(mine), Some(theirs)) => process == other && theirs > mine,
        _ => false,
    }
}

/// This process's id in the tokens of owner attempts: random, drawn once.
fn process_id() -> u64 {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    *PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0)
}

/// How many owner attempts this process has made: each takes the next number.
static ATTEMPTS: AtomicU64 = AtomicU64::new(0);

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
    fn an_owner_attempt_knows_a_later_attempt_of_its_process_and_nothing_else() {
        let first = LockToken::for_owner("w");
        let second = LockToken::for_owner("w");
        let (first, second) = (first.expose(), second.expose());
        assert_eq!(first.len(), 34);
        assert!(later_attempt_here(first, second.as_bytes()));
        assert!(!later_attempt_here(second, first.as_bytes()));
        assert!(!later_attempt_here(first, first.as_bytes()));
        // Another process's value (its id differs), whatever its number.
        let elsewhere = format!("{:016x}{:016x}@w", process_id() ^ 1, u64::MAX);
        assert!(!later_attempt_here(first, elsewhere.as_bytes()));
        // Values that are no owner attempt's: a plain token, a reservation, nothing.
        for value in ["0123", "~queued:abc", ""] {
            assert!(!later_attempt_here(first, value.as_bytes()));
        }
    }
}

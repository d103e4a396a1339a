//! `LockToken`: the random value that marks a lock as one holder's, and its non-secret
//! fingerprint.

use std::fmt;
use std::sync::Arc;

use crate::seam;

/// The random value that marks a lock as this holder's on every node: 128 bits from the
/// operating system's random source, fresh for every acquisition.
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
    pub(crate) fn for_owner(id: &str) -> Self {
        Self::nonce_then(OWNER_SEPARATOR, id)
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

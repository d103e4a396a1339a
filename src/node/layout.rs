//! The key layout: how a resource's keys are named on the masters, and the marker through which
//! a client finds out, as it connects to a master, that clients of another layout use it too.
//!
//! The names of the keys on the masters (`<prefix><resource>`, its fencing counter, its line,
//! ...) are part of the contract between clients: two clients that name a resource's keys
//! differently do not see each other's locks, and would both hold it. Each layout has a number,
//! [`KEY_LAYOUT`]. On every new connection a client writes its number to the marker key
//! `<prefix>quorumlock:layout` where that key is missing, and reads it back; a master marked with
//! another number is refused (each request to it fails with an error naming it), so clients of
//! two layouts never count the same master.
//!
//! The marker key's name is the same in every layout, so any two versions can compare numbers.

use super::conn::Conn;
use redis::{ErrorKind, RedisError};

/// The key layout this version writes and expects on the masters.
///
/// Layout 5: a resource's lock key is `<prefix><resource>` (see [`resource_key`]), exactly the
/// key the Redlock spec and every other Redlock client (redsync, node-redlock, Redisson's
/// RedLock, redlock-py, rslock) write, so that they and quorumlock exclude each other on shared
/// masters. Every other key and channel of the resource is a *companion* of its lock key (see
/// [`companion_key`]): the lock key's Redis Cluster hash tag followed by a suffix (`:fence`,
/// `:queue`, `:leases`, `:held`, `:readers`, `:writers`, `:holder`, `:took`, and the channels
/// `:released:…`, `:elected`, `:rw`, `:rw:drained`), so that a resource lives in one slot of a
/// cluster. A lock key that anybody waits for lives at least as long as its line, its holder's
/// own lease kept in `:held`: clients of layout 3 would renew a lock without renewing that
/// lease, and the head of the line would take it from them. Layout 5 marks every value
/// quorumlock writes (tokens start with `ql-`), and only such a key is stretched: a key another
/// Redlock client holds keeps the expiry that client gives it, however it renews. Layout 4 had
/// tokens of 32 hex digits, the shape node-redlock writes too, and stretched any key; layout 3
/// had the same names without `:held`; layout 2 named the lock key `{<prefix><resource>}`, which no other client writes;
/// layout 1 had no hash tags.
///
/// A change of layout is a breaking change, announced in the CHANGELOG
/// under its own heading: stop every client of the old layout before the first client of the new
/// one starts, or wait until the old clients' locks have expired and delete the marker key on
/// every master.
pub const KEY_LAYOUT: u32 = 5;

/// The name of the layout marker key, after the key prefix: the marker of a client with key
/// prefix `locks:` is `locks:quorumlock:layout`. No resource may have this name.
pub const LAYOUT_MARKER: &str = "quorumlock:layout";

/// The suffixes of the companion *keys* of a lock key (channels are another namespace, and
/// cannot meet a key). No suffix ends another, so two companions of different lock keys can
/// only be equal when their bases are (see [`check_lock_key`]).
pub(crate) const COMPANION_SUFFIXES: [&str; 8] = [
    ":fence", ":queue", ":leases", ":held", ":readers", ":writers", ":holder", ":took",
];

/// The lock key of `resource` under the key prefix `prefix`: `<prefix><resource>`, the resource
/// name itself as every Redlock client writes it.
///
/// ```
/// assert_eq!(quorumlock::resource_key("locks:", "orders:42"), "locks:orders:42");
/// ```
pub fn resource_key(prefix: &str, resource: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + resource.len());
    key.push_str(prefix);
    key.push_str(resource);
    key
}

/// The key (or channel) named `suffix` beside the lock key `lock_key`, in the lock key's Redis
/// Cluster slot: `lock_key` followed by `suffix` when the lock key carries a hash tag of its own
/// (`user:{42}` → `user:{42}:fence`, hashed by `42` as the lock key is); otherwise the lock
/// key made one hash tag, then the suffix (`orders:42` → `{orders:42}:fence`, hashed by
/// `orders:42`, as the lock key is).
///
/// ```
/// assert_eq!(quorumlock::companion_key("orders:42", ":queue"), "{orders:42}:queue");
/// assert_eq!(quorumlock::companion_key("user:{42}", ":queue"), "user:{42}:queue");
/// ```
pub fn companion_key(lock_key: &str, suffix: &str) -> String {
    Companion(lock_key, suffix).to_string()
}

/// A companion key or channel, written without building the name first (see
/// [`companion_key`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Companion<'a>(pub(crate) &'a str, pub(crate) &'a str);

impl std::fmt::Display for Companion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Companion(key, suffix) = *self;
        if hash_tag(key).is_some() {
            write!(f, "{key}{suffix}")
        } else {
            write!(f, "{{{key}}}{suffix}")
        }
    }
}

impl redis::ToRedisArgs for Companion<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(self);
    }
}

/// The lock key whose companion named `suffix` is `key`, if it is one (the inverse of
/// [`companion_key`] for lock keys that [`check_lock_key`] accepts).
pub fn lock_key_of_companion<'a>(key: &'a str, suffix: &str) -> Option<&'a str> {
    let base = key.strip_suffix(suffix)?;
    match base.strip_prefix('{').and_then(|b| b.strip_suffix('}')) {
        Some(inner) if !inner.contains('}') => Some(inner),
        _ => hash_tag(base).is_some().then_some(base),
    }
}

/// Whether `key` can be a companion key of some lock key: one with a hash tag that ends with a
/// companion suffix. No lock key may be such a key (see [`check_lock_key`]).
pub fn is_companion_key(key: &str) -> bool {
    hash_tag(key).is_some() && COMPANION_SUFFIXES.iter().any(|s| key.ends_with(s))
}

/// The Redis Cluster hash tag of `key`: what its first `{` and the first `}` after it enclose,
/// when that is not empty. Redis hashes a key with a tag by the tag alone, and any other key by
/// all of it.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// Why a lock key cannot be used, or `None` when it can. Refused, so that every companion of a
/// lock key shares its slot and no lock key is another's companion or a layout marker:
/// - a key that ends with [`LAYOUT_MARKER`] (the marker of its own prefix or of another);
/// - a key without a hash tag that holds a `}` (its companions could not be given its slot);
/// - a key that is one hash tag whole, `{…}` (its companions would be those of the key inside
///   the braces);
/// - a key with a hash tag that ends with a companion suffix (`:fence`, `:queue`, `:leases`,
///   `:readers`, `:writers`, `:holder`, `:took`): it could be another lock key's companion.
pub(crate) fn check_lock_key(key: &str) -> Option<&'static str> {
    if key.ends_with(LAYOUT_MARKER) {
        return Some(
            "its key ends with the name of the key layout marker (LAYOUT_MARKER): it is, or could \
             be, the marker of a key prefix",
        );
    }
    match hash_tag(key) {
        None if key.contains('}') => Some(
            "its key has a '}' but no Redis Cluster hash tag ('{' before it, with something \
             between), so its other keys could not share its slot",
        ),
        None => None,
        Some(_) if key.starts_with('{') && key.find('}') == Some(key.len() - 1) => Some(
            "its key is one hash tag whole ('{…}'), the prefix of the other keys of the \
             resource named by what the braces enclose",
        ),
        Some(_) if is_companion_key(key) => Some(
            "its key has a hash tag and ends with ':fence', ':queue', ':leases', ':readers', \
             ':writers', ':holder' or ':took', the name another resource's keys could have",
        ),
        Some(_) => None,
    }
}

/// The marker key for `prefix`.
pub(crate) fn marker_key(prefix: &str) -> String {
    format!("{prefix}{LAYOUT_MARKER}")
}

/// What a master's marker says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Marked {
    /// The master is marked with this client's layout (now, or since before).
    Same,
    /// Another layout, or something that is no layout number at all.
    Other(String),
}

/// Marks the master with [`KEY_LAYOUT`] where it has no marker, and reads the marker back, in one
/// round trip.
///
/// # Errors
///
/// The connection's error, or the server's (an ACL that does not grant the marker key).
pub(super) async fn mark(conn: &Conn, key: &str) -> Result<Marked, RedisError> {
    let mut conn = conn.clone();
    let (_set, marker): (Option<String>, Option<String>) = redis::pipe()
        .cmd("SET")
        .arg(key)
        .arg(KEY_LAYOUT)
        .arg("NX")
        .cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await?;
    Ok(judge(marker))
}

/// Compares a marker's value with [`KEY_LAYOUT`]. A marker deleted between the write and the
/// read (by an operator) counts as this layout's: the next connection writes it again.
fn judge(marker: Option<String>) -> Marked {
    match marker {
        None => Marked::Same,
        Some(value) if value.trim().parse::<u32>() == Ok(KEY_LAYOUT) => Marked::Same,
        Some(value) => Marked::Other(value),
    }
}

/// The error every request to a master marked with another layout fails with.
pub(super) fn mismatch(key: &str, theirs: &str) -> RedisError {
    // A marker is a short number; anything long is not one, and is shown cut.
    let shown: String = theirs.chars().take(32).collect();
    RedisError::from((
        ErrorKind::Client,
        "key layout mismatch",
        format!(
            "this master is marked with key layout {shown:?} ({key:?}), this client uses layout \
             {KEY_LAYOUT}: clients of two layouts do not see each other's locks, so it is not \
             used (see the CHANGELOG on changing layouts)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_layouts_number_is_the_same() {
        assert_eq!(judge(Some(KEY_LAYOUT.to_string())), Marked::Same);
        assert_eq!(judge(None), Marked::Same);
        assert_eq!(
            judge(Some((KEY_LAYOUT + 1).to_string())),
            Marked::Other((KEY_LAYOUT + 1).to_string())
        );
        assert_eq!(judge(Some("x".into())), Marked::Other("x".into()));
    }

    #[test]
    fn companions_share_the_lock_keys_slot() {
        for (key, tag) in [
            ("orders:42", "orders:42"),
            ("user:{42}", "42"),
            ("a{b", "a{b"),
            ("{x}y", "x"),
        ] {
            let companion = companion_key(key, ":queue");
            assert_eq!(hash_tag(&companion), Some(tag), "{companion}");
            assert_eq!(hash_tag(key).unwrap_or(key), tag, "{key}");
            assert_eq!(lock_key_of_companion(&companion, ":queue"), Some(key));
            assert!(is_companion_key(&companion), "{companion}");
        }
    }

    #[test]
    fn a_lock_key_that_could_be_a_companion_or_lose_its_slot_is_refused() {
        for key in [
            "{orders}:queue",
            "a{x}:fence",
            "{orders}",
            "{a{b}",
            "a}b",
            "{}x",
        ] {
            assert!(check_lock_key(key).is_some(), "{key}");
        }
        for key in [
            "orders:queue",
            "orders:42",
            "user:{42}",
            "{orders}:x",
            "a{b",
            "{x}}",
        ] {
            assert_eq!(check_lock_key(key), None, "{key}");
        }
    }

    #[test]
    fn no_companion_suffix_ends_another() {
        for a in COMPANION_SUFFIXES {
            for b in COMPANION_SUFFIXES {
                assert!(a == b || !a.ends_with(b), "{a} ends with {b}");
            }
        }
    }

    #[test]
    fn the_marker_sits_under_the_prefix() {
        assert_eq!(marker_key("locks:"), "locks:quorumlock:layout");
        assert_eq!(marker_key(""), "quorumlock:layout");
    }

    #[test]
    fn the_mismatch_names_both_layouts_and_the_key() {
        let e = mismatch("locks:quorumlock:layout", "1").to_string();
        assert!(e.contains("layout \"1\""), "{e}");
        assert!(e.contains("this client uses layout 5"), "{e}");
        assert!(e.contains("locks:quorumlock:layout"), "{e}");
    }
}

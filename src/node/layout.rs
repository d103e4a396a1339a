//! The key layout marker: how a client finds out, as it connects to a master, that clients of
//! another key layout use it too.
//!
//! The names of the keys on the masters (`<prefix><resource>`, `<key>:fence`, `<key>:queue`, ...)
//! are part of the contract between clients: two clients that name a resource's keys differently
//! do not see each other's locks, and would both hold it. Each layout has a number,
//! [`KEY_LAYOUT`]. On every new connection a client writes its number to the marker key
//! `<prefix>quorumlock:layout` where that key is missing, and reads it back; a master marked with
//! another number is refused (each request to it fails with an error naming it), so clients of
//! two layouts never count the same master.
//!
//! The marker key's name is the same in every layout (layout 2 moved a resource's keys under a
//! Redis Cluster hash tag, `{<prefix><resource>}:…`, and still marks each master at
//! `<prefix>quorumlock:layout`), so any two versions can compare numbers.

use super::conn::Conn;
use redis::{ErrorKind, RedisError};

/// The key layout this version writes and expects on the masters.
///
/// Layout 2: a resource's lock key is `{<prefix><resource>}` (see [`resource_key`]), with its
/// auxiliary keys and channels named by suffix after it (`:fence`, `:queue`, `:leases`,
/// `:readers`, `:writers`, `:holder`, and the channels `:released:…`, `:elected`, …). The braces
/// are a Redis Cluster hash tag: every key and channel of one resource hashes to the same slot,
/// so a resource lives on one shard of a cluster. Layout 1 named the lock key
/// `<prefix><resource>`, without the braces.
///
/// A change of layout is a breaking change, announced in the CHANGELOG
/// under its own heading: stop every client of the old layout before the first client of the new
/// one starts, or wait until the old clients' locks have expired and delete the marker key on
/// every master.
pub const KEY_LAYOUT: u32 = 2;

/// The name of the layout marker key, after the key prefix: the marker of a client with key
/// prefix `locks:` is `locks:quorumlock:layout`. No resource may have this name.
pub const LAYOUT_MARKER: &str = "quorumlock:layout";

/// The lock key of `resource` under the key prefix `prefix`: `{<prefix><resource>}`. Every other
/// key and channel of the resource is this key followed by a suffix, so they all share its
/// Redis Cluster hash tag and slot.
///
/// Since a lock key ends with `}` and no suffix contains one, the lock key of one resource is
/// never an auxiliary key of another, whatever the names: `x:fence` is a resource like any
/// other, with its own keys `{x:fence}` and `{x:fence}:fence`, apart from `{x}:fence`.
///
/// ```
/// assert_eq!(quorumlock::resource_key("locks:", "orders:42"), "{locks:orders:42}");
/// ```
pub fn resource_key(prefix: &str, resource: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + resource.len() + 2);
    key.push('{');
    key.push_str(prefix);
    key.push_str(resource);
    key.push('}');
    key
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
    fn the_marker_sits_under_the_prefix() {
        assert_eq!(marker_key("locks:"), "locks:quorumlock:layout");
        assert_eq!(marker_key(""), "quorumlock:layout");
    }

    #[test]
    fn the_mismatch_names_both_layouts_and_the_key() {
        let e = mismatch("locks:quorumlock:layout", "1").to_string();
        assert!(e.contains("layout \"1\""), "{e}");
        assert!(e.contains("this client uses layout 2"), "{e}");
        assert!(e.contains("locks:quorumlock:layout"), "{e}");
    }
}

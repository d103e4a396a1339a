//! The Lua scripts the nodes run, each built (and its SHA1 computed) once per process.
//!
//! Every script compares the stored token before touching a key, so a holder whose lease has
//! expired can never delete, renew or fence a lock that another holder has taken since.

use std::sync::LazyLock;

use redis::Script;

/// Compare-and-delete over one or more keys, handing each to the head of its line when anybody
/// waits (see `wakeup`).
///
/// A holder's release sends it as `EVALSHA` (see [`RELEASE`]), falling back to the source on
/// `NOSCRIPT`. A cleanup — a rollback, or a release queued behind a late `SET` on a slow or
/// paused node — sends the source with `EVAL`: `EVALSHA` needs a second round trip on a node that
/// restarted and lost its script cache, and if the `NOSCRIPT` reply comes after the per-node
/// timeout that second round trip is never sent and the cleanup silently does not happen.
///
/// The source is sent without its comments: it travels with every cleanup, and the node hashes
/// what it receives.
pub(crate) static RELEASE_SOURCE: LazyLock<String> =
    LazyLock::new(|| without_comments(&in_line(include_str!("lua/release.lua"))));

/// [`RELEASE_SOURCE`] as a script, for its SHA1.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&RELEASE_SOURCE));

/// The rollback of an owner's takeover (`lua/restore.lua`): the value it replaced goes back.
/// Sent by its source, as a cleanup is (see [`RELEASE_SOURCE`]).
pub(crate) static RESTORE_SOURCE: LazyLock<String> =
    LazyLock::new(|| without_comments(&in_line(include_str!("lua/restore.lua"))));

/// A waiter's attempt: renew its place in the line of each key, and take the keys if they are
/// free and it heads every line, or they are reserved for it.
pub(crate) static ACQUIRE_QUEUED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/acquire_queued.lua"))));

/// A waiter leaves the lines, passing on a key reserved for it.
pub(crate) static DEQUEUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/dequeue.lua"))));

/// Compare-and-PEXPIRE over one or more keys, all or nothing.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/extend.lua")));

/// A plain attempt: `SET NX PX` unless others wait in the key's line (taking a key kept only
/// for a line nobody waits in any more), plus the advance of the fencing counter with fencing,
/// atomically. Its SHA1 is what a plain attempt sends when it is not a bare `SET NX PX` (a
/// single attempt, a retry, fencing; see `Node::set_nx`).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&ACQUIRE_SOURCE));

/// The plain attempt's source (`lua/acquire.lua`), without its comments: sent as is when a
/// node lost its scripts (see `Node::acquire`).
pub(crate) static ACQUIRE_SOURCE: LazyLock<String> =
    LazyLock::new(|| without_comments(&in_line(include_str!("lua/acquire.lua"))));

/// Set a key, or take it over where it holds an earlier attempt of the same owner id
/// (`Redlock::acquire_as`), plus the fencing counter when fencing is on.
pub(crate) static ACQUIRE_OWNED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/acquire_owned.lua"))));

/// A reader's attempt on a read-write lock.
pub(crate) static ACQUIRE_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/acquire_read.lua"))));

/// A writer's attempt on a read-write lock.
pub(crate) static ACQUIRE_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/acquire_write.lua"))));

/// Renew a reader's hold.
pub(crate) static EXTEND_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/extend_read.lua"))));

/// End a reader's hold; the last one announces it to the waiting writers.
pub(crate) static RELEASE_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/release_read.lua"))));

/// End a writer's hold, and announce it to the waiting readers and writers.
pub(crate) static RELEASE_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/release_write.lua")));

/// Raise the fencing counters of one or more keys where the token is still held.
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/raise_fence.lua")));

/// All-or-nothing `SET NX PX` over several keys, plus their fencing counters when fencing is on.
pub(crate) static ACQUIRE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/acquire_many.lua"))));

/// A winning candidate marks the election's key as the leader's (see `election`).
pub(crate) static CONFIRM_LEADER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/confirm_leader.lua")));

/// An election's key and PTTL, read together (see `election`).
pub(crate) static READ_LEADER: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/read_leader.lua"))));

/// A key's value and PTTL, read together.
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&in_line(include_str!("lua/inspect.lua"))));

/// The channel a hand-off of `key` to a waiter of the client `client` (16 hex digits, the first
/// half of its waiters' ids) is announced on, with the waiter's id: each client hears only the
/// hand-offs to its own waiters.
pub(crate) fn release_channel(key: &str, client: &str) -> String {
    crate::companion_key(key, &format!(":released:{client}"))
}

/// The channel the masters announce a read-write lock's writer releases on, to every client
/// that waits. Unlike a mutex's hand-off, which names one waiter, it wakes them all: many
/// readers may proceed at once.
pub(crate) fn rw_channel(key: &str) -> String {
    crate::companion_key(key, ":rw")
}

/// The channel the masters announce on, to the waiting writers only, that the last reader of
/// a read-write lock has gone.
pub(crate) fn drained_channel(key: &str) -> String {
    crate::companion_key(key, ":rw:drained")
}

/// The channel the masters announce an election's changes of leader on: a leader marked
/// elected (`lua/confirm_leader.lua`) or stepping down (`lua/release.lua`).
pub(crate) fn elected_channel(key: &str) -> String {
    crate::companion_key(key, ":elected")
}

/// A script that keeps a wait line: `body` with the functions they share (`lua/line.lua`) in
/// place of its `--@line` line, or ahead of it without one. Defining them costs the master more
/// than a plain `SET`, on every call: a script whose common case needs none of them runs that
/// case first and returns before the marker.
fn in_line(body: &str) -> String {
    let helpers = include_str!("lua/line.lua");
    match body.split_once(LINE_MARKER) {
        Some((fast, rest)) => format!("{fast}{helpers}{rest}"),
        None => format!("{helpers}\n{body}"),
    }
}

/// Where `in_line` puts the line's helpers in a script that has a path without them.
const LINE_MARKER: &str = "--@line\n";

/// `source` without its full-line comments, blank lines and indentation.
fn without_comments(source: &str) -> String {
    let lines = source.lines().map(str::trim);
    let code = lines.filter(|line| !line.is_empty() && !line.starts_with("--"));
    code.collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sent_release_source_keeps_the_code_and_drops_the_comments() {
        assert!(!RELEASE_SOURCE.contains("--"));
        assert!(RELEASE_SOURCE.starts_with("local lined\nif ARGV[3] == '1' and not ARGV[4] then"));
        assert!(RELEASE_SOURCE.contains("\nlocal function now_ms()\n"));
        assert!(RELEASE_SOURCE.contains("\nlocal n = tonumber(ARGV[3])\n"));
        assert!(RELEASE_SOURCE.ends_with("\nreturn released"));
        let commented = include_str!("lua/line.lua").len() + include_str!("lua/release.lua").len();
        assert!(RELEASE_SOURCE.len() < commented * 2 / 3);
    }

    #[test]
    fn every_script_that_knows_a_holder_knows_its_elected_form_by_the_same_prefix() {
        let quoted = format!("'{}'", crate::keys::ELECTED_PREFIX);
        for source in [
            include_str!("lua/extend.lua"),
            include_str!("lua/release.lua"),
            include_str!("lua/raise_fence.lua"),
            include_str!("lua/confirm_leader.lua"),
        ] {
            assert!(source.contains(&quoted), "{source}");
        }
        // release.lua names the election's channel from the line key's base, as the
        // library does from the lock key.
        assert!(elected_channel("k").ends_with(":elected"));
        assert!(include_str!("lua/release.lua").contains("channel_base(line) .. ':elected'"));
        assert!(release_channel("k", "c").ends_with(":released:c"));
        assert!(include_str!("lua/line.lua").contains("channel_base(line) .. ':released:'"));
        assert_eq!(line_key_suffix_len(), ":queue".len());
    }

    /// What `channel_base` in `lua/line.lua` cuts off a line key.
    fn line_key_suffix_len() -> usize {
        let source = include_str!("lua/line.lua");
        let cut = source
            .split_once("return string.sub(line, 1, -")
            .and_then(|(_, rest)| rest.split_once(')'))
            .and_then(|(n, _)| n.parse::<usize>().ok())
            .unwrap_or(0);
        cut - 1
    }

    /// Every script, as sent (with the line's helpers).
    fn every_script() -> Vec<(&'static str, String)> {
        [
            ("acquire", ACQUIRE_SOURCE.to_string()),
            (
                "acquire_many",
                in_line(include_str!("lua/acquire_many.lua")),
            ),
            (
                "acquire_owned",
                in_line(include_str!("lua/acquire_owned.lua")),
            ),
            (
                "acquire_queued",
                in_line(include_str!("lua/acquire_queued.lua")),
            ),
            (
                "acquire_read",
                in_line(include_str!("lua/acquire_read.lua")),
            ),
            (
                "acquire_write",
                in_line(include_str!("lua/acquire_write.lua")),
            ),
            (
                "confirm_leader",
                include_str!("lua/confirm_leader.lua").to_owned(),
            ),
            ("dequeue", in_line(include_str!("lua/dequeue.lua"))),
            ("extend", include_str!("lua/extend.lua").to_owned()),
            ("extend_read", in_line(include_str!("lua/extend_read.lua"))),
            ("inspect", include_str!("lua/inspect.lua").to_owned()),
            (
                "raise_fence",
                include_str!("lua/raise_fence.lua").to_owned(),
            ),
            (
                "read_leader",
                include_str!("lua/read_leader.lua").to_owned(),
            ),
            ("release", RELEASE_SOURCE.to_string()),
            ("restore", RESTORE_SOURCE.to_string()),
            (
                "release_read",
                in_line(include_str!("lua/release_read.lua")),
            ),
            (
                "release_write",
                include_str!("lua/release_write.lua").to_owned(),
            ),
        ]
        .into_iter()
        .collect()
    }

    /// Cloud proxies and Redis Cluster need every key a script touches in `KEYS`: no script
    /// may build a key name. Every key argument of a `redis.call` is `KEYS[…]` or a plain
    /// name, and no name a key argument uses is ever bound to a built string (`..`,
    /// `string.format`, `string.sub`).
    #[test]
    fn every_key_a_script_touches_comes_from_keys() {
        // Commands whose first argument is not a key.
        const KEYLESS: [&str; 3] = ["TIME", "SPUBLISH", "PUBLISH"];
        let lua_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let on_disk = std::fs::read_dir(lua_dir).unwrap().count();
        // line.lua is in the others.
        assert_eq!(
            every_script().len() + 1,
            on_disk,
            "a script is missing here"
        );
        for (name, source) in every_script() {
            let mut built: Vec<String> = Vec::new();
            for line in source.lines().map(str::trim) {
                let Some((lhs, rhs)) = line.split_once(" = ") else {
                    continue;
                };
                if rhs.contains("..") || rhs.contains("string.") {
                    let bound = lhs.trim_start_matches("local ").trim();
                    built.extend(bound.split(',').map(|n| n.trim().to_owned()));
                }
            }
            let mut calls = 0;
            for call in source.split("redis.call(").skip(1) {
                let mut args = call.splitn(3, [',', ')']);
                let command = args.next().unwrap_or("").trim().trim_matches('\'');
                if KEYLESS.contains(&command) {
                    continue;
                }
                let Some(key) = args.next().map(str::trim) else {
                    continue;
                };
                calls += 1;
                let plain_name = key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                assert!(
                    (key.starts_with("KEYS[") && key.ends_with(']') && !key.contains(".."))
                        || plain_name,
                    "{name}.lua: {command} on {key:?}, which is no key from KEYS"
                );
                assert!(
                    !built.iter().any(|b| b == key),
                    "{name}.lua: {command} on {key:?}, a name built in the script"
                );
                assert_ne!(command, "KEYS", "{name}.lua scans the keyspace");
            }
            assert!(calls > 0, "{name}.lua: no key command found");
        }
    }
}

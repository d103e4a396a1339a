//! Keys of any type and their expiries: `DEL`, `EXISTS`, `TYPE`, `KEYS`, `DBSIZE`, `FLUSHALL`,
//! `PEXPIRE`/`PEXPIREAT`/`EXPIRE`/`EXPIREAT` (with `NX`/`XX`/`GT`/`LT`), `PEXPIRETIME`,
//! `EXPIRETIME`, `PTTL`, `TTL`, `PERSIST`.

use super::{parse_i64, Ctx};
use crate::reply::{errors, Reply};

/// `DEL key...`: how many were live.
pub(super) fn del(ctx: &mut Ctx<'_>, keys: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms();
    let removed = keys
        .iter()
        .filter(|k| ctx.keyspace().remove(k, now))
        .count();
    Reply::Int(removed as i64)
}

/// `EXISTS key...`: how many of them are live (a key named twice counts twice).
pub(super) fn exists(ctx: &mut Ctx<'_>, keys: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms();
    let live = keys
        .iter()
        .filter(|k| ctx.keyspace().get(k, now).is_some())
        .count();
    Reply::Int(live as i64)
}

/// `TYPE key`.
pub(super) fn type_of(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    let now = ctx.now_ms();
    let name = match ctx.keyspace().get(key, now) {
        Some(entry) => entry.value.type_name(),
        None => "none",
    };
    Reply::Status(name.to_owned())
}

/// `KEYS pattern`: the live keys matching, in byte order (Redis's order is its hash table's).
pub(super) fn keys(ctx: &mut Ctx<'_>, pattern: &[u8]) -> Reply {
    let now = ctx.now_ms();
    let keys = ctx
        .keyspace()
        .live(now)
        .filter(|(k, _)| glob_match(pattern, k))
        .map(|(k, _)| Reply::Bulk(k.to_vec()))
        .collect();
    Reply::Array(keys)
}

/// `DBSIZE`: the live keys (Redis counts keys expired but not yet reclaimed too).
pub(super) fn dbsize(ctx: &mut Ctx<'_>) -> Reply {
    let now = ctx.now_ms();
    Reply::Int(ctx.keyspace().live(now).count() as i64)
}

/// `FLUSHALL`, `FLUSHDB` (any `ASYNC`/`SYNC` argument is accepted).
pub(super) fn flush(ctx: &mut Ctx<'_>) -> Reply {
    ctx.keyspace().clear();
    Reply::ok()
}

/// What an expiry argument counts from.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Base {
    /// From the master's clock (`PEXPIRE`, `EXPIRE`).
    Now,
    /// From the epoch (`PEXPIREAT`, `EXPIREAT`).
    Epoch,
}

/// `PEXPIRE key ms [NX|XX|GT|LT]` and its kin. A key without an expiry counts as expiring never:
/// `GT` always refuses it and `LT` always accepts. An expiry that is not in the future deletes
/// the key (the reply is still 1).
pub(super) fn expire(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    base: Base,
    unit: i64,
    name: &str,
) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[2..] {
        match String::from_utf8_lossy(option)
            .to_ascii_uppercase()
            .as_str()
        {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Reply::error(format!("ERR Unsupported option {other}")),
        }
    }
    if nx && (xx || gt || lt) {
        return Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Reply::error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(n) = parse_i64(&args[1]) else {
        return Reply::error(errors::NOT_INTEGER);
    };
    let now = ctx.now_ms();
    let invalid = || Reply::error(format!("ERR invalid expire time in '{name}' command"));
    let Some(ms) = n.checked_mul(unit) else {
        return invalid();
    };
    let basetime = if base == Base::Now { now } else { 0 };
    let Some(when) = ms.checked_add(basetime) else {
        return invalid();
    };
    let Some(entry) = ctx.keyspace().get_mut(&args[0], now) else {
        return Reply::Int(0);
    };
    let current = entry.expires_at;
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        return Reply::Int(0);
    }
    if when <= now {
        ctx.keyspace().remove(&args[0], now);
    } else {
        entry.expires_at = Some(when);
    }
    Reply::Int(1)
}

/// `PEXPIRETIME key` (`unit` 1) or `EXPIRETIME key` (1000): -2 without the key, -1 without an
/// expiry.
pub(super) fn expire_time(ctx: &mut Ctx<'_>, key: &[u8], unit: i64) -> Reply {
    let now = ctx.now_ms();
    match ctx.keyspace().get(key, now) {
        None => Reply::Int(-2),
        Some(entry) => match entry.expires_at {
            None => Reply::Int(-1),
            Some(at) => Reply::Int(if unit == 1 { at } else { (at + 500) / 1000 }),
        },
    }
}

/// `PTTL key` (`unit` 1) or `TTL key` (1000): -2 without the key, -1 without an expiry.
pub(super) fn ttl(ctx: &mut Ctx<'_>, key: &[u8], unit: i64) -> Reply {
    let now = ctx.now_ms();
    match ctx.keyspace().get(key, now) {
        None => Reply::Int(-2),
        Some(entry) => match entry.expires_at {
            None => Reply::Int(-1),
            Some(at) => {
                let left = (at - now).max(0);
                Reply::Int(if unit == 1 { left } else { (left + 500) / 1000 })
            }
        },
    }
}

/// `PERSIST key`: 1 if an expiry was removed.
pub(super) fn persist(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    let now = ctx.now_ms();
    match ctx.keyspace().get_mut(key, now) {
        Some(entry) if entry.expires_at.is_some() => {
            entry.expires_at = None;
            Reply::Int(1)
        }
        _ => Reply::Int(0),
    }
}

/// Redis's glob (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\\x`.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => {
            let rest = &pattern[1..];
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        Some(b'?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some(b'[') => match text.first() {
            Some(&c) => class_match(pattern, 0, c)
                .is_some_and(|after| glob_match(&pattern[after..], &text[1..])),
            None => false,
        },
        Some(b'\\') if pattern.len() >= 2 => {
            text.first() == Some(&pattern[1]) && glob_match(&pattern[2..], &text[1..])
        }
        Some(&c) => text.first() == Some(&c) && glob_match(&pattern[1..], &text[1..]),
    }
}

/// Whether `c` is in the class starting at `pattern[open] == b'['`; the position after the
/// class when it is.
fn class_match(pattern: &[u8], open: usize, c: u8) -> Option<usize> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            matched |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            matched |= pattern[i] == c;
            i += 1;
        }
    }
    // An unclosed class ends the pattern, as in Redis.
    let after = (i + 1).min(pattern.len());
    (matched != negate).then_some(after)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn keys_patterns_match_as_redis_globs_do() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"*", b"abc"));
        assert!(glob_match(b"a*c", b"abbbc"));
        assert!(!glob_match(b"a*c", b"abbb"));
        assert!(glob_match(b"{k}:*", b"{k}:queue"));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-c]llo", b"hbllo"));
        assert!(glob_match(b"a\\*", b"a*"));
        assert!(!glob_match(b"a\\*", b"ab"));
        assert!(glob_match(b"*:held", b"x:y:held"));
    }
}

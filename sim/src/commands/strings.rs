//! Strings: `GET`, `SET` (with `NX`/`XX`, `GET`, `EX`/`PX`/`EXAT`/`PXAT`, `KEEPTTL`), `INCR`.

use super::{parse_i64, typed, Ctx};
use crate::keyspace::{Entry, Value};
use crate::reply::{errors, Reply};

/// `GET key`.
pub(super) fn get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let now = ctx.now_ms();
    match ctx.keyspace().get(&args[0], now).map(|e| &e.value) {
        None => Reply::Nil,
        Some(Value::String(s)) => Reply::Bulk(s.clone()),
        Some(_) => Reply::error(errors::WRONGTYPE),
    }
}

/// How `SET` treats the key's expiry.
#[derive(PartialEq)]
enum Expiry {
    /// None: the key loses any expiry.
    Drop,
    Keep,
    /// At this instant, in ms since the epoch.
    At(i64),
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub(super) fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (key, value) = (&args[0], &args[1]);
    let (mut nx, mut xx, mut get) = (false, false, false);
    let mut keep_ttl = false;
    // The unit's multiplier (to ms), whether it is absolute, and the argument.
    let mut expire: Option<(i64, bool, &[u8])> = None;
    let mut i = 2;
    while i < args.len() {
        let option = String::from_utf8_lossy(&args[i]).to_ascii_uppercase();
        let next = args.get(i + 1);
        match option.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if expire.is_none() => keep_ttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if expire.is_none() && !keep_ttl && next.is_some() => {
                let unit = if option.starts_with("EX") { 1000 } else { 1 };
                let absolute = option.ends_with("AT");
                expire = next.map(|n| (unit, absolute, n.as_slice()));
                i += 1;
            }
            _ => return Reply::error(errors::SYNTAX),
        }
        i += 1;
    }
    let now = ctx.now_ms();
    let expiry = match expire {
        None if keep_ttl => Expiry::Keep,
        None => Expiry::Drop,
        Some((unit, absolute, arg)) => {
            let invalid = || Reply::error("ERR invalid expire time in 'set' command");
            let Some(n) = parse_i64(arg) else {
                return Reply::error(errors::NOT_INTEGER);
            };
            if n <= 0 {
                return invalid();
            }
            let Some(ms) = n.checked_mul(unit) else {
                return invalid();
            };
            let at = if absolute {
                Some(ms)
            } else {
                ms.checked_add(now)
            };
            match at {
                Some(at) => Expiry::At(at),
                None => return invalid(),
            }
        }
    };
    let old = ctx.keyspace().get(key, now).cloned();
    let old_value = match (&old, get) {
        (
            Some(Entry {
                value: Value::String(s),
                ..
            }),
            true,
        ) => Reply::Bulk(s.clone()),
        (Some(_), true) => return Reply::error(errors::WRONGTYPE),
        (None, true) => Reply::Nil,
        (_, false) => Reply::Nil,
    };
    if (nx && old.is_some()) || (xx && old.is_none()) {
        return old_value;
    }
    let expires_at = match expiry {
        Expiry::Drop => None,
        Expiry::Keep => old.and_then(|e| e.expires_at),
        Expiry::At(at) => Some(at),
    };
    let entry = Entry {
        value: Value::String(value.clone()),
        expires_at,
    };
    ctx.keyspace().insert(key, entry);
    if get {
        old_value
    } else {
        Reply::ok()
    }
}

/// `INCR`, `INCRBY`, `DECR`, `DECRBY`: the key keeps its expiry.
pub(super) fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Reply {
    let now = ctx.now_ms();
    let entry = ctx.keyspace().get_mut(key, now);
    let current = match typed(entry, |v| match v {
        Value::String(s) => Some(s),
        _ => None,
    }) {
        Err(e) => return e,
        Ok(None) => None,
        Ok(Some(s)) => match parse_i64(s) {
            Some(n) => Some(n),
            None => return Reply::error(errors::NOT_INTEGER),
        },
    };
    let Some(next) = current.unwrap_or(0).checked_add(by) else {
        return Reply::error("ERR increment or decrement would overflow");
    };
    let text = next.to_string().into_bytes();
    match ctx.keyspace().get_mut(key, now) {
        Some(entry) => entry.value = Value::String(text),
        None => ctx.keyspace().insert(
            key,
            Entry {
                value: Value::String(text),
                expires_at: None,
            },
        ),
    }
    Reply::Int(next)
}

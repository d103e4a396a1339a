//! The data commands: what a client or a script may run against the keyspace, each module one
//! kind of value (`strings`, `sorted_sets`, `hashes`), plus keys and expiries (`keys`) and the
//! server's own (`server`: `TIME`, `INFO`, `WAIT`, ...). Connection commands (`HELLO`, `AUTH`,
//! subscriptions, scripts) are the master's (see `master`).

mod hashes;
mod keys;
mod server;
mod sorted_sets;
mod strings;

use std::time::Duration;

use crate::data::Data;
use crate::keyspace::{Entry, Keyspace, Value};
use crate::reply::{errors, Reply};

/// What one command runs with: the data, the instant it runs at (one reading of the master's
/// clock for a whole command or script).
pub(crate) struct Ctx<'a> {
    pub(crate) data: &'a mut Data,
    pub(crate) now: Duration,
}

impl Ctx<'_> {
    /// The instant in ms since the epoch, as expiries are judged.
    pub(crate) fn now_ms(&self) -> i64 {
        i64::try_from(self.now.as_millis()).unwrap_or(i64::MAX)
    }

    pub(crate) fn keyspace(&mut self) -> &mut Keyspace {
        &mut self.data.keyspace
    }
}

/// How many arguments a command takes, the name included: exactly `n` when positive, at least
/// `-n` when negative (Redis's convention).
fn arity(name: &str) -> Option<i32> {
    Some(match name {
        "get" | "type" | "pttl" | "ttl" | "pexpiretime" | "expiretime" | "persist" | "zcard"
        | "hgetall" | "hlen" | "incr" | "decr" | "keys" => 2,
        "set" => -3,
        "del" | "exists" => -2,
        "pexpire" | "pexpireat" | "expire" | "expireat" => -3,
        "incrby" | "decrby" | "zscore" | "hget" | "hexists" | "spublish" | "publish" => 3,
        "zadd" => -4,
        "zrem" | "hdel" => -3,
        "zrange" => -4,
        "zcount" | "zremrangebyscore" => 4,
        "hset" => -4,
        "time" | "dbsize" => 1,
        "flushall" | "flushdb" => -1,
        "ping" => -1,
        "echo" => 2,
        "info" => -1,
        "wait" => 3,
        "waitaof" => 4,
        "cluster" => -2,
        _ => return None,
    })
}

/// Whether `name` is a data command this module runs.
pub(crate) fn knows(name: &str) -> bool {
    arity(name).is_some()
}

/// Whether `argc` arguments (the name included) fit the data command `name`'s arity.
pub(crate) fn arity_fits(name: &str, argc: usize) -> bool {
    let n = argc as i32;
    arity(name).is_some_and(|arity| (arity > 0 && n == arity) || (arity < 0 && n >= -arity))
}

/// Runs the data command `argv` (its name first, any case).
pub(crate) fn dispatch(ctx: &mut Ctx<'_>, argv: &[Vec<u8>]) -> Reply {
    let Some(first) = argv.first() else {
        return Reply::error("ERR empty command");
    };
    let name = String::from_utf8_lossy(first).to_ascii_lowercase();
    if arity(&name).is_none() {
        return unknown_command(argv);
    }
    if !arity_fits(&name, argv.len()) {
        return wrong_arity(&name);
    }
    let args = &argv[1..];
    match name.as_str() {
        "get" => strings::get(ctx, args),
        "set" => strings::set(ctx, args),
        "incr" => strings::incr_by(ctx, &args[0], 1),
        "decr" => strings::incr_by(ctx, &args[0], -1),
        "incrby" | "decrby" => match parse_i64(&args[1]) {
            Some(by) if name == "incrby" => strings::incr_by(ctx, &args[0], by),
            Some(by) => match by.checked_neg() {
                Some(by) => strings::incr_by(ctx, &args[0], by),
                None => Reply::error("ERR decrement would overflow"),
            },
            None => Reply::error(errors::NOT_INTEGER),
        },
        "del" => keys::del(ctx, args),
        "exists" => keys::exists(ctx, args),
        "type" => keys::type_of(ctx, &args[0]),
        "keys" => keys::keys(ctx, &args[0]),
        "dbsize" => keys::dbsize(ctx),
        "flushall" | "flushdb" => keys::flush(ctx),
        "pexpire" => keys::expire(ctx, args, keys::Base::Now, 1, "pexpire"),
        "expire" => keys::expire(ctx, args, keys::Base::Now, 1000, "expire"),
        "pexpireat" => keys::expire(ctx, args, keys::Base::Epoch, 1, "pexpireat"),
        "expireat" => keys::expire(ctx, args, keys::Base::Epoch, 1000, "expireat"),
        "pexpiretime" => keys::expire_time(ctx, &args[0], 1),
        "expiretime" => keys::expire_time(ctx, &args[0], 1000),
        "pttl" => keys::ttl(ctx, &args[0], 1),
        "ttl" => keys::ttl(ctx, &args[0], 1000),
        "persist" => keys::persist(ctx, &args[0]),
        "zadd" => sorted_sets::zadd(ctx, args),
        "zrem" => sorted_sets::zrem(ctx, args),
        "zscore" => sorted_sets::zscore(ctx, args),
        "zcard" => sorted_sets::zcard(ctx, &args[0]),
        "zcount" => sorted_sets::zcount(ctx, args),
        "zremrangebyscore" => sorted_sets::zremrangebyscore(ctx, args),
        "zrange" => sorted_sets::zrange(ctx, args),
        "hset" => hashes::hset(ctx, args),
        "hget" => hashes::hget(ctx, args),
        "hdel" => hashes::hdel(ctx, args),
        "hgetall" => hashes::hgetall(ctx, &args[0]),
        "hlen" => hashes::hlen(ctx, &args[0]),
        "hexists" => hashes::hexists(ctx, args),
        "spublish" => Reply::Int(ctx.data.pubsub.publish(true, &args[0], &args[1])),
        "publish" => Reply::Int(ctx.data.pubsub.publish(false, &args[0], &args[1])),
        "time" => server::time(ctx),
        "ping" => server::ping(args),
        "echo" => Reply::Bulk(args[0].clone()),
        "info" => server::info(ctx, args),
        "wait" => server::wait(args),
        "waitaof" => server::waitaof(ctx, args),
        "cluster" => Reply::error("ERR This instance has cluster support disabled"),
        _ => unknown_command(argv),
    }
}

/// `ERR unknown command 'x', with args beginning with: 'a' 'b' `.
pub(crate) fn unknown_command(argv: &[Vec<u8>]) -> Reply {
    let name = argv
        .first()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let args: String = argv
        .iter()
        .skip(1)
        .map(|a| format!("'{}' ", String::from_utf8_lossy(a)))
        .collect();
    Reply::error(format!(
        "ERR unknown command '{name}', with args beginning with: {args}"
    ))
}

/// `ERR wrong number of arguments for 'x' command`.
pub(crate) fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// An integer argument as Redis reads one (`string2ll`): an optional `-`, digits, no leading
/// zeros or `+`, within `i64`.
pub(crate) fn parse_i64(arg: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(arg).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
        || (text.starts_with('-') && digits == "0")
    {
        return None;
    }
    text.parse().ok()
}

/// A float argument as Redis reads one (`strtod` over the whole argument, no spaces, no NaN).
pub(crate) fn parse_f64(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let value = match lower.trim_start_matches(['+', '-']) {
        "inf" | "infinity" => {
            if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }
        "nan" => return None,
        _ => text.parse::<f64>().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

/// The live value of `key` when it is of the kind `pick` takes; `Err` is the `WRONGTYPE` reply.
fn typed<'e, T>(
    entry: Option<&'e mut Entry>,
    pick: impl FnOnce(&'e mut Value) -> Option<&'e mut T>,
) -> Result<Option<&'e mut T>, Reply> {
    match entry {
        None => Ok(None),
        Some(entry) => pick(&mut entry.value)
            .map(Some)
            .ok_or_else(|| Reply::error(errors::WRONGTYPE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"0"), Some(0));
        for bad in [
            &b"+1"[..],
            b"01",
            b"-0",
            b"1.0",
            b"",
            b" 1",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_are_read_as_redis_reads_them() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"x"), None);
    }
}

//! The library's line scripts driven on one master with exact arguments, for the tests that read
//! back exactly what each script left (`reach`, `dead_entries`).

use crate::common::*;

/// A lock key and its companions (see `node/layout.rs`).
pub(crate) struct Keys {
    pub(crate) key: String,
    pub(crate) line: String,
    pub(crate) leases: String,
    pub(crate) held: String,
}

pub(crate) fn keys(res: &str) -> Keys {
    let key = lock_key(res);
    Keys {
        line: quorumlock::companion_key(&key, ":queue"),
        leases: quorumlock::companion_key(&key, ":leases"),
        held: quorumlock::companion_key(&key, ":held"),
        key,
    }
}

/// The master's clock, in ms, as the scripts read it.
pub(crate) fn now_ms(c: &mut redis::Connection) -> i64 {
    let t: Vec<String> = redis::cmd("TIME").query(c).unwrap();
    t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
}

pub(crate) fn getv(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

/// `script` invoked on `ks`: their lock keys, then their lines, leases and records, in the
/// order the line's scripts take them.
pub(crate) fn with_keys<'a>(
    script: &'a redis::Script,
    ks: &[&Keys],
) -> redis::ScriptInvocation<'a> {
    let mut call = script.prepare_invoke();
    for k in ks {
        call.key(&k.key);
    }
    for k in ks {
        call.key(&k.line);
    }
    for k in ks {
        call.key(&k.leases);
    }
    for k in ks {
        call.key(&k.held);
    }
    call
}

/// A waiter's attempt (`lua/acquire_queued.lua`, no fencing) over `ks`: the reply's first
/// number (-1/-2/-3 refused) or 0 for a grant.
pub(crate) fn attempt(
    c: &mut redis::Connection,
    ks: &[&Keys],
    token: &str,
    ttl: u64,
    id: &str,
    order: u64,
    entry: u64,
) -> i64 {
    let script = redis::Script::new(&in_line(include_str!(
        "../../../src/lua/acquire_queued.lua"
    )));
    let reply: Vec<i64> = with_keys(&script, ks)
        .arg(token)
        .arg(ttl)
        .arg(ks.len())
        .arg(id)
        .arg(order)
        .arg(entry)
        .arg(60_000)
        .invoke(c)
        .unwrap();
    reply.first().copied().unwrap_or(0)
}

/// `lua/release.lua` over `ks`; `cleanup` the waiter's id, order and entry lease for the
/// cleanup of its failed attempt (order and lease only for a requeue).
pub(crate) fn release(
    c: &mut redis::Connection,
    ks: &[&Keys],
    token: &str,
    reserve: u64,
    cleanup: Option<(&str, Option<(u64, u64)>)>,
) -> i64 {
    let script = redis::Script::new(&in_line(include_str!("../../../src/lua/release.lua")));
    let mut call = with_keys(&script, ks);
    call.arg(token).arg(reserve).arg(ks.len());
    if let Some((id, requeue)) = cleanup {
        call.arg(id);
        if let Some((order, lease)) = requeue {
            call.arg(order).arg(lease);
        }
    }
    call.invoke(c).unwrap()
}

pub(crate) fn bare_set_nx(c: &mut redis::Connection, key: &str, token: &str, ttl: u64) -> bool {
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl)
        .query(c)
        .unwrap();
    set.is_some()
}

/// Whether `key` exists.
pub(crate) fn exists(c: &mut redis::Connection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS").arg(key).query(c).unwrap();
    n == 1
}

/// Which of `k`'s lock key, line, leases and record still exist.
pub(crate) fn left_behind<'a>(c: &mut redis::Connection, k: &'a Keys) -> Vec<&'a str> {
    [&k.key, &k.line, &k.leases, &k.held]
        .into_iter()
        .filter(|z| exists(c, z))
        .map(String::as_str)
        .collect()
}

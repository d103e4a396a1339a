//! A lock key kept alive over its wait line, so that the plain mutex's first attempt can be a
//! bare `SET NX PX` (see `stretch` in `lua/line.lua` and docs/how-it-works.md): what it must
//! keep (`line`), the scenarios that try to break it (`foreign_writes_and_dead_holders`,
//! `takeovers_and_primitives`), how far a stretch reaches (`reach`), and waiters that died in
//! line (`dead_entries`).

use crate::common;

use std::time::Duration;

use common::{eventually, get, pttl, query};
use quorumlock_testkit::RedisNodes;

mod dead_entries;
mod foreign_writes_and_dead_holders;
mod line;
mod one_master;
mod reach;
mod takeovers_and_primitives;

/// The record (`<base>:held`, see `stretch` in `lua/line.lua`) of `key` on each running master.
fn records(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    let held = quorumlock::companion_key(key, ":held");
    nodes
        .iter()
        .filter(|s| s.is_running())
        .map(|s| get(s, &held))
        .collect()
}

/// The keys of `res` a master still has, but for its fencing counter and takeover notes.
fn leftovers(nodes: &RedisNodes, res: &str) -> Vec<Vec<String>> {
    nodes
        .iter()
        .filter(|s| s.is_running())
        .map(|s| {
            let keys: Vec<String> = query(s, redis::cmd("KEYS").arg(format!("*{res}*")));
            keys.into_iter()
                .filter(|k| !k.ends_with(":fence") && !k.ends_with(":took"))
                .collect()
        })
        .collect()
}

async fn nothing_left(nodes: &RedisNodes, res: &str, within: Duration) {
    let ok = eventually(within, || leftovers(nodes, res).iter().all(Vec::is_empty)).await;
    let running = nodes.iter().filter(|s| s.is_running());
    let detail: Vec<Vec<(String, Option<String>, i64)>> = running
        .zip(leftovers(nodes, res))
        .map(|(s, keys)| {
            keys.into_iter()
                .map(|k| {
                    let v = if k.ends_with(":queue") || k.ends_with(":leases") {
                        None
                    } else {
                        get(s, &k)
                    };
                    let t = pttl(s, &k);
                    (k, v, t)
                })
                .collect()
        })
        .collect();
    assert!(
        ok,
        "keys left behind {within:?} after everybody was done (key, value, pttl): {detail:?}"
    );
}

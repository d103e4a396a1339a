//! A lock key kept alive over its wait line, so that the plain mutex's first attempt can be a
//! bare `SET NX PX` (see `stretch` in `lua/line.lua` and docs/how-it-works.md): what it must
//! keep (`line`), and the scenarios that try to break it (`attacks`, `attacks_2`). One binary,
//! so that the three share one build and one run.

mod common;

use std::time::Duration;

use common::{eventually, get, line, ttls};
use quorumlock_testkit::RedisNodes;

#[path = "stretch/attacks.rs"]
mod attacks;
#[path = "stretch/attacks_2.rs"]
mod attacks_2;
#[path = "stretch/line.rs"]
mod line;

/// The record (`<base>:held`, see `stretch` in `lua/line.lua`) of `key` on each running master.
fn records(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    let held = quorumlock::companion_key(key, ":held");
    nodes
        .iter()
        .filter(|s| s.is_running())
        .map(|s| get(s, &held))
        .collect()
}

/// Waits until every master has `waiters` waiters in the line of `key`.
async fn waiters_in_line(nodes: &RedisNodes, key: &str, waiters: usize) {
    assert!(
        eventually(Duration::from_secs(5), || {
            nodes.iter().all(|s| line(s, key).len() == waiters)
        })
        .await,
        "the waiters never took their places: lines {:?}, ttls {:?}",
        nodes.iter().map(|s| line(s, key)).collect::<Vec<_>>(),
        ttls(nodes, key)
    );
}

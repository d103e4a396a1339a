//! A shorter extend dropped after its requests went out: an extend never shortens a key
//! (`PEXPIRE … GT`), so the masters keep the longer TTL, and every view of the lock's deadline —
//! the lock's, a reentrant hold's, a semaphore permit's, a read-write hold's, an election
//! term's — stays where it was, never past what the masters hold.

use crate::common;

use std::future::Future;
use std::time::Duration;

use common::*;
use quorumlock::Redlock;
use quorumlock_testkit::{FaultProxy, RedisNodes};

const TTL: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_secs(1);

/// Five masters, each behind a proxy, and a client connected to them through the proxies.
async fn proxied() -> (RedisNodes, Vec<FaultProxy>, Redlock) {
    let nodes = five();
    let (proxies, urls) = reaching(&nodes, &[0, 1, 2, 3, 4]);
    let rl = Redlock::builder(urls)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 5);
    (nodes, proxies, rl)
}

/// Waits until the key of `resource` is on every master: an acquire returns at a quorum, and a
/// request still on its way to a slow master must land before the extend, or its `SET` would
/// restore the long TTL there afterwards.
async fn everywhere(nodes: &RedisNodes, resource: &str) {
    let key = lock_key(resource);
    assert!(eventually(Duration::from_secs(2), || present(nodes, &key) == 5).await);
}

/// Runs `extend` until its requests have reached the masters, whose replies the proxies hold,
/// then drops it; the replies are delivered afterwards.
async fn drop_midway(proxies: &[FaultProxy], extend: impl Future) {
    for proxy in proxies {
        proxy.hold();
    }
    let dropped = tokio::time::timeout(Duration::from_millis(200), extend).await;
    assert!(dropped.is_err(), "the extend finished though no reply came");
    for proxy in proxies {
        proxy.pass();
    }
}

/// The masters ran the shorter extend and kept the longer TTL: the key of `resource` has more
/// than `SHORT` to live on each; returns the least any master has left.
fn kept_on_the_masters(nodes: &RedisNodes, resource: &str) -> Duration {
    let key = lock_key(resource);
    let least = nodes.iter().map(|server| pttl(server, &key)).min().unwrap();
    assert!(
        least > 2 * SHORT.as_millis() as i64,
        "{key}: {least} ms left on some master after a dropped extend to {SHORT:?}"
    );
    Duration::from_millis(least as u64)
}

/// A view's deadline after the dropped extend: past `SHORT` (the extend shortened nothing), and
/// not past what the masters hold (`least`, read just before).
fn assert_kept(remaining: Duration, least: Duration, what: &str) {
    assert!(
        remaining > SHORT && remaining <= least + Duration::from_millis(50),
        "{what}: {remaining:?} left after a dropped extend to {SHORT:?}, the masters {least:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_extend_dropped_midway_shortens_neither_the_keys_nor_a_reentrant_hold() {
    let (nodes, proxies, rl) = proxied().await;
    let outer = rl.acquire("ledger", TTL).await.unwrap().into_reentrant();
    everywhere(&nodes, "ledger").await;
    let inner = outer.nested();
    drop_midway(&proxies, inner.extend(SHORT)).await;
    let least = kept_on_the_masters(&nodes, "ledger");
    assert_kept(outer.remaining(), least, "the outer hold");
    assert_kept(inner.remaining(), least, "the inner hold");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_extend_dropped_midway_shortens_neither_the_keys_nor_a_permit() {
    let (nodes, proxies, rl) = proxied().await;
    let mut permit = rl.semaphore("pool", 2).unwrap().acquire(TTL).await.unwrap();
    let slot = format!("pool:permit:{}", permit.slot());
    assert_eq!(permit.resource(), slot);
    everywhere(&nodes, &slot).await;
    drop_midway(&proxies, permit.extend(SHORT)).await;
    let least = kept_on_the_masters(&nodes, &slot);
    assert_kept(permit.remaining(), least, "the permit");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_extend_dropped_midway_shortens_neither_the_keys_nor_a_read_write_hold() {
    let (nodes, proxies, rl) = proxied().await;
    let rw = rl.rw_lock("catalog").unwrap();
    let mut write = rw.write(TTL).await.unwrap();
    everywhere(&nodes, "catalog").await;
    drop_midway(&proxies, write.extend(SHORT)).await;
    let least = kept_on_the_masters(&nodes, "catalog");
    assert_kept(write.remaining(), least, "the write hold");
    write.release().await.unwrap();

    let mut read = rw.read(TTL).await.unwrap();
    drop_midway(&proxies, read.extend(SHORT)).await;
    assert_kept(read.remaining(), TTL, "the read hold");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_extend_dropped_midway_shortens_neither_the_keys_nor_an_election_term() {
    let (nodes, proxies, rl) = proxied().await;
    let mut term = rl.elect("scheduler", TTL, "host-a").await.unwrap();
    everywhere(&nodes, "scheduler").await;
    drop_midway(&proxies, term.extend(SHORT)).await;
    let least = kept_on_the_masters(&nodes, "scheduler");
    assert_kept(term.remaining(), least, "the term");
}

//! A shortening extend dropped after its requests went out: the masters apply the shorter TTL,
//! so every view of the lock's deadline must already show it. `Lock::extend` moves its own
//! deadline before sending; each wrapper — a reentrant hold, a semaphore permit, a read-write
//! hold, an election term — must be as cancel safe.

mod common;

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

/// The masters ran the shortening extend: the key of `resource` has at most `SHORT` to live on
/// each.
fn shortened_on_the_masters(nodes: &RedisNodes, resource: &str) {
    let key = lock_key(resource);
    for server in nodes.iter() {
        let left = pttl(server, &key);
        assert!(
            (1..=1_000).contains(&left),
            "{key} on {}: {left} ms left",
            server.addr()
        );
    }
}

fn assert_shortened(remaining: Duration, what: &str) {
    assert!(
        remaining <= SHORT,
        "{what}: {remaining:?} left after a dropped extend to {SHORT:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reentrant_hold_sees_the_deadline_of_a_shortening_extend_dropped_midway() {
    let (nodes, proxies, rl) = proxied().await;
    let outer = rl.acquire("ledger", TTL).await.unwrap().into_reentrant();
    everywhere(&nodes, "ledger").await;
    let inner = outer.nested();
    drop_midway(&proxies, inner.extend(SHORT)).await;
    shortened_on_the_masters(&nodes, "ledger");
    assert_shortened(outer.remaining(), "the outer hold");
    assert_shortened(inner.remaining(), "the inner hold");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_semaphore_permit_sees_the_deadline_of_a_shortening_extend_dropped_midway() {
    let (nodes, proxies, rl) = proxied().await;
    let mut permit = rl.semaphore("pool", 2).unwrap().acquire(TTL).await.unwrap();
    let slot = format!("pool:permit:{}", permit.slot());
    assert_eq!(permit.resource(), slot);
    everywhere(&nodes, &slot).await;
    drop_midway(&proxies, permit.extend(SHORT)).await;
    shortened_on_the_masters(&nodes, &slot);
    assert_shortened(permit.remaining(), "the permit");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_write_hold_sees_the_deadline_of_a_shortening_extend_dropped_midway() {
    let (nodes, proxies, rl) = proxied().await;
    let rw = rl.rw_lock("catalog").unwrap();
    let mut write = rw.write(TTL).await.unwrap();
    everywhere(&nodes, "catalog").await;
    drop_midway(&proxies, write.extend(SHORT)).await;
    shortened_on_the_masters(&nodes, "catalog");
    assert_shortened(write.remaining(), "the write hold");
    write.release().await.unwrap();

    let mut read = rw.read(TTL).await.unwrap();
    drop_midway(&proxies, read.extend(SHORT)).await;
    assert_shortened(read.remaining(), "the read hold");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_election_term_sees_the_deadline_of_a_shortening_extend_dropped_midway() {
    let (nodes, proxies, rl) = proxied().await;
    let mut term = rl.elect("scheduler", TTL, "host-a").await.unwrap();
    everywhere(&nodes, "scheduler").await;
    drop_midway(&proxies, term.extend(SHORT)).await;
    shortened_on_the_masters(&nodes, "scheduler");
    assert_shortened(term.remaining(), "the term");
}

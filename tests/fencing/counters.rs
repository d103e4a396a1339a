//! What fencing keeps on the masters: a counter per resource granted within the fencing grace,
//! each with an expiry, not one per resource ever locked; and tokens that still grow strictly
//! across releases, AOF restarts, a master failed over to a replica that missed the latest
//! counter, and expired counters.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Redlock, KEY_LAYOUT};
use quorumlock_testkit::{RedisNodes, RedisServer, RedisServerBuilder};

const RESOURCES: usize = 10_000;
/// Longer than the 10,000 locks take on a loaded 2-core machine, so that most counters are
/// still there to be looked at.
const GRACE: Duration = Duration::from_secs(10);

/// Every key on `server` with its PTTL (-1: no expiry).
fn keys_with_ttl(server: &RedisServer) -> Vec<(String, i64)> {
    let mut conn = direct(server);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .map(|k| {
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).unwrap();
            (k, ttl)
        })
        .collect()
}

fn dbsize(server: &RedisServer) -> usize {
    redis::cmd("DBSIZE").query(&mut direct(server)).unwrap()
}

fn fenced(nodes: &RedisNodes, grace: Duration) -> Redlock {
    builder(nodes)
        .fencing(true)
        .fence_grace(grace)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_fenced_resources_leave_only_keys_that_expire_within_the_grace_and_a_second() {
    const WORKERS: usize = 16;
    let nodes = five();
    let rl = fenced(&nodes, GRACE);
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let rl = rl.clone();
            tokio::spawn(async move {
                for r in (w..RESOURCES).step_by(WORKERS) {
                    let lock = rl
                        .acquire(&format!("order:{r}"), Duration::from_secs(5))
                        .await
                        .unwrap();
                    assert!(lock.fencing_token().is_some());
                    lock.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let took = started.elapsed();

    // Right after: a fence counter per resource on each master (releases may still be landing
    // on the last masters: lock keys are counted apart), every one with an expiry within the
    // grace; the only key without one is the layout marker.
    let marker = quorumlock::LAYOUT_MARKER;
    for (i, server) in nodes.iter().enumerate() {
        let keys = keys_with_ttl(server);
        let fences = keys.iter().filter(|(k, _)| k.ends_with(":fence")).count();
        let lasting: Vec<&(String, i64)> = keys.iter().filter(|(_, ttl)| *ttl == -1).collect();
        let longest = keys.iter().map(|(_, ttl)| *ttl).max().unwrap_or(0);
        println!(
            "master {i}, right after {RESOURCES} fenced locks in {took:?}: {} keys, {fences} fence counters, {} without an expiry, longest PTTL {longest} ms",
            keys.len(),
            lasting.len()
        );
        assert!(fences > 0, "master {i}: no counters");
        assert_eq!(
            lasting.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            vec![marker],
            "master {i}: only the layout marker lasts: {lasting:?}"
        );
        // A counter lasts the grace and the second its clock floor rounds away.
        assert!(
            longest <= (GRACE + Duration::from_secs(1)).as_millis() as i64,
            "master {i}: {longest} ms"
        );
    }
    let marked: String = get(&nodes[0], marker).unwrap();
    assert_eq!(marked, KEY_LAYOUT.to_string());

    // After the grace: the marker alone.
    let emptied = eventually(GRACE + Duration::from_secs(10), || {
        nodes.iter().all(|s| dbsize(s) <= 1)
    })
    .await;
    let sizes: Vec<usize> = nodes.iter().map(dbsize).collect();
    println!("after the grace ({GRACE:?}): keys per master {sizes:?}");
    assert!(emptied, "keys left per master: {sizes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fences_grow_across_releases_aof_restarts_a_stale_failover_and_expired_counters() {
    let mut nodes = RedisNodes::spawn_with(3, &RedisServerBuilder::new().aof(true)).unwrap();
    let grace = Duration::from_secs(1);
    // Patient with a loaded machine: a master that answers late is no part of this test.
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .fencing(true)
        .fence_grace(grace)
        .build()
        .unwrap();
    let mut fences = Vec::new();
    let take = |fences: &mut Vec<(u64, &'static str)>, fence: u64, when: &'static str| {
        fences.push((fence, when));
    };
    for _ in 0..5 {
        let lock = rl.acquire("invoice", Duration::from_secs(2)).await.unwrap();
        take(
            &mut fences,
            lock.fencing_token().unwrap(),
            "after a release",
        );
        lock.release().await.unwrap();
    }
    // Every master restarted from its AOF.
    for i in 0..nodes.len() {
        nodes[i].kill().unwrap();
    }
    for i in 0..nodes.len() {
        nodes[i].restart().unwrap();
    }
    let lock = rl.acquire("invoice", Duration::from_secs(2)).await.unwrap();
    take(
        &mut fences,
        lock.fencing_token().unwrap(),
        "after AOF restarts",
    );
    lock.release().await.unwrap();
    // A failover inside one master: its replica, promoted, had only the first fence. With the
    // next grant coming from it and a master that holds the latest fence (a quorum does, after
    // the second round), the fence still grows. (Were the other grant from a master that missed
    // the latest fence too, it could not: the rule f ≥ q − N + k, for fences.)
    let (first, latest) = (fences[0].0, fences[fences.len() - 1].0);
    let holding: Vec<usize> = (0..nodes.len())
        .filter(|&i| get(&nodes[i], &fence_key("invoice")) == Some(latest.to_string()))
        .collect();
    let [stale, current, ..] = holding[..] else {
        panic!("the latest fence {latest} is not on a quorum: {holding:?}");
    };
    let other = (0..nodes.len())
        .find(|i| ![stale, current].contains(i))
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(fence_key("invoice"))
        .arg(first)
        .query(&mut direct(&nodes[stale]))
        .unwrap();
    set(
        &nodes[other],
        &lock_key("invoice"),
        "someone-else",
        Duration::from_secs(2),
    );
    let lock = rl.acquire("invoice", Duration::from_secs(2)).await.unwrap();
    take(
        &mut fences,
        lock.fencing_token().unwrap(),
        "after a stale failover",
    );
    lock.release().await.unwrap();
    del(&nodes[other], &lock_key("invoice"));
    // The counters expire: the clock floor carries the next fence past them.
    let gone = eventually(grace * 3, || {
        nodes
            .iter()
            .all(|s| get(s, &fence_key("invoice")).is_none())
    })
    .await;
    assert!(gone, "the counters outlived their grace");
    let lock = rl.acquire("invoice", Duration::from_secs(2)).await.unwrap();
    take(
        &mut fences,
        lock.fencing_token().unwrap(),
        "after the counters expired",
    );
    lock.release().await.unwrap();
    println!("fences: {fences:?}");
    for pair in fences.windows(2) {
        assert!(pair[0].0 < pair[1].0, "{fences:?}");
    }
}

#[test]
fn a_fence_grace_under_a_second_is_refused() {
    let err = Redlock::builder(["redis://127.0.0.1:1"])
        .fencing(true)
        .fence_grace(Duration::from_millis(500))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("fence grace"), "{err}");
}

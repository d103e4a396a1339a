//! The wait line across clients: each release hands the lock to one waiter, in arrival order,
//! whichever client it belongs to; waiters that leave, crash or time out do not block it for
//! longer than one entry lease.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisNodes, RedisServer};
use tokio::sync::Mutex;

const TTL: Duration = Duration::from_secs(10);
/// The test builder's node timeout is 100 ms: entries lapse after ten of them.
const ENTRY_LEASE: Duration = Duration::from_secs(1);

/// A client whose fallback poll is far slower than a hand-off, so that only hand-offs can
/// explain a quick succession of holders.
fn slow_polling(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
}

/// Entries in the line of `resource` on `server` (`{<resource>}:queue`).
fn line_len(server: &RedisServer, resource: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(quorumlock::companion_key(&lock_key(resource), ":queue"))
        .query(&mut direct(server))
        .unwrap()
}

/// How many `SPUBLISH` calls `server` has run (its `INFO commandstats`), scripts included: the
/// scripts announce on sharded channels.
fn publishes(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut direct(server))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_spublish:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_release_hands_the_lock_to_the_next_client_in_arrival_order() {
    let nodes = five();
    let holder = connected(&nodes).await.acquire("job", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("job"), holder.token().expose()).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    let mut clients = Vec::new();
    for i in 0..6 {
        let rl = slow_polling(&nodes);
        clients.push(rl.clone());
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let lock = rl.acquire("job", TTL).await?;
            order.lock().await.push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            lock.release().await.map(|_| ())
        }));
        // One arrival at a time: each in line on every master before the next comes.
        assert!(
            eventually(Duration::from_secs(5), || nodes
                .iter()
                .all(|s| line_len(s, "job") == i + 1))
            .await,
            "waiter {i} never took its place in line"
        );
    }
    let released = Instant::now();
    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    let took = released.elapsed();
    assert_eq!(
        *order.lock().await,
        [0, 1, 2, 3, 4, 5],
        "not in arrival order"
    );
    // Six holders of 20 ms each, well before the first 2 s fallback poll: hand-offs did it.
    assert!(took < Duration::from_secs(2), "the line took {took:?}");
    for (i, rl) in clients.iter().enumerate() {
        let stats = rl.stats();
        assert!(
            stats.wakeups >= 1,
            "client {i} was never handed the lock: {stats:?}"
        );
    }
    // (Each holder leaves the other masters' lines in the background.)
    assert!(
        eventually(Duration::from_secs(2), || nodes
            .iter()
            .all(|node| line_len(node, "job") == 0))
        .await,
        "{:?}",
        nodes
            .iter()
            .map(|node| line_len(node, "job"))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncontended_release_publishes_nothing() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let before: Vec<u64> = nodes.iter().map(publishes).collect();
    for _ in 0..20 {
        rl.acquire("quiet", TTL)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let after: Vec<u64> = nodes.iter().map(publishes).collect();
    assert_eq!(before, after);
    assert_gone_everywhere(&nodes, &lock_key("quiet")).await;

    // The control: a release with a waiter in line is announced, and counted above.
    let holder = rl.acquire("quiet", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("quiet"), holder.token().expose()).await;
    let waiter = {
        let other = connected(&nodes).await;
        tokio::spawn(async move { other.acquire("quiet", TTL).await })
    };
    let queued = || nodes.iter().all(|n| line_len(n, "quiet") == 1);
    assert!(eventually(Duration::from_secs(2), queued).await);
    holder.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
    let announced = || {
        let now: Vec<u64> = nodes.iter().map(publishes).collect();
        now.iter()
            .zip(&after)
            .filter(|(now, then)| now > then)
            .count()
            >= 3
    };
    assert!(eventually(Duration::from_secs(2), announced).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn try_acquire_never_joins_the_line() {
    let nodes = five();
    let _holder = connected(&nodes).await.acquire("busy", TTL).await.unwrap();
    let err = connected(&nodes)
        .await
        .try_acquire("busy", TTL)
        .await
        .unwrap_err();
    assert!(err.is_contention(), "{err}");
    for node in nodes.iter() {
        assert_eq!(line_len(node, "busy"), 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_waits_in_line_until_its_acquire_timeout_then_leaves_it() {
    let nodes = five();
    let _holder = connected(&nodes).await.acquire("busy", TTL).await.unwrap();
    let waiter = builder(&nodes)
        .retry_count(0)
        .acquire_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = waiter.acquire("busy", TTL).await.unwrap_err();
    let waited = start.elapsed();
    assert!(
        matches!(err, Error::NotAcquired { .. }) && err.is_contention(),
        "{err}"
    );
    // No retries allowed, yet it waited: the acquire timeout bounds a wait in line, not the
    // retry count.
    assert!(
        waited >= Duration::from_millis(400),
        "gave up after {waited:?}"
    );
    let Error::NotAcquired { attempts, .. } = err else {
        unreachable!()
    };
    assert!(attempts >= 2, "only {attempts} attempt(s) in {waited:?}");
    assert!(
        eventually(ENTRY_LEASE / 2, || nodes
            .iter()
            .all(|n| line_len(n, "busy") == 0))
        .await,
        "the waiter did not leave the line"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_waiter_leaves_the_line_and_passes_its_turn_on() {
    let nodes = five();
    let holder = connected(&nodes).await.acquire("job", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("job"), holder.token().expose()).await;
    let first = slow_polling(&nodes);
    first.connect().await.unwrap();
    let cancelled = tokio::spawn(async move { first.acquire("job", TTL).await });
    assert!(eventually(Duration::from_secs(2), || line_len(&nodes[0], "job") == 1).await);
    let second = slow_polling(&nodes);
    second.connect().await.unwrap();
    let next = {
        let second = second.clone();
        tokio::spawn(async move { second.acquire("job", TTL).await })
    };
    assert!(eventually(Duration::from_secs(2), || line_len(&nodes[0], "job") == 2).await);
    cancelled.abort();
    assert!(
        eventually(ENTRY_LEASE / 2, || nodes
            .iter()
            .all(|n| line_len(n, "job") == 1))
        .await,
        "the cancelled waiter is still in line"
    );
    let released = Instant::now();
    holder.release().await.unwrap();
    let lock = next.await.unwrap().unwrap();
    // Handed over at once, not found by the 2 s poll.
    assert!(released.elapsed() < Duration::from_secs(1));
    assert!(second.stats().wakeups >= 1);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_waiter_at_the_head_blocks_the_line_for_at_most_its_entry_lease() {
    let nodes = five();
    let holder = connected(&nodes).await.acquire("job", TTL).await.unwrap();
    // A waiter that took its place and died: its entry is on every master, and nobody renews it.
    let (queue, leases) = (
        quorumlock::companion_key(&lock_key("job"), ":queue"),
        quorumlock::companion_key(&lock_key("job"), ":leases"),
    );
    // Before the first entry is written: every entry lapses a whole entry lease after this.
    let entered = Instant::now();
    for node in nodes.iter() {
        let now: (u64, u64) = redis::cmd("TIME").query(&mut direct(node)).unwrap();
        let now_ms = now.0 * 1000 + now.1 / 1000;
        let lapses = now_ms + ENTRY_LEASE.as_millis() as u64;
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(&queue)
            .arg(1)
            .arg("dead")
            .cmd("ZADD")
            .arg(&leases)
            .arg(lapses)
            .arg("dead")
            .cmd("PEXPIRE")
            .arg(&queue)
            .arg(ENTRY_LEASE.as_millis() as u64)
            .cmd("PEXPIRE")
            .arg(&leases)
            .arg(ENTRY_LEASE.as_millis() as u64)
            .query(&mut direct(node))
            .unwrap();
    }
    let waiter = connected(&nodes).await;
    let next = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("job", TTL).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The release reserves the key for the dead head.
    let _ = holder.release().await;
    assert!(
        eventually(ENTRY_LEASE / 2, || holders(
            &nodes,
            &lock_key("job"),
            "~queued:dead"
        ) >= 3)
        .await,
        "the release did not reserve the key for the head of the line"
    );
    let lock = next.await.unwrap().unwrap();
    let waited = entered.elapsed();
    // Not before the dead entry lapsed (the line was respected), and not much after it.
    assert!(
        waited >= ENTRY_LEASE - Duration::from_millis(50),
        "{waited:?}"
    );
    assert!(
        waited < ENTRY_LEASE * 2,
        "the line stayed blocked for {waited:?}"
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reserved_key_is_refused_to_every_other_acquirer_and_never_released_by_a_stale_token() {
    let nodes = five();
    let rl = connected(&nodes).await;
    for node in nodes.iter() {
        set(
            node,
            &lock_key("job"),
            "~queued:someone",
            Duration::from_secs(5),
        );
    }
    let err = rl.try_acquire("job", TTL).await.unwrap_err();
    assert!(err.is_contention(), "{err}");
    let many = rl.acquire_many(&["job", "other"], TTL);
    let many = tokio::time::timeout(Duration::from_millis(300), many).await;
    assert!(many.is_err() || many.unwrap().is_err());
    assert_eq!(holders(&nodes, &lock_key("job"), "~queued:someone"), 5);
}

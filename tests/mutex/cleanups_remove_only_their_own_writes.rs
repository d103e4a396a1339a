//! Every attempt writes a value of its own, so a cleanup only ever removes what its own attempt
//! wrote: an owner id's attempts and an election's attempts are not told apart by their owner
//! or their candidate, and a rollback retried long after its attempt must not delete a later
//! attempt's grant.
//!
//! The timeline both tests force, with a 600 ms node timeout and every master paused at 0 ms:
//! attempt 1 is sent at 0 ms and times out at 600 ms; its rollback is sent then, times out at
//! 1,200 ms and goes to the per-master retry task; attempt 2 is sent at about 1,200 ms and the
//! retried rollback about 100 ms later; the masters resume at 1,550 ms and run, in order:
//! attempt 1 (set), its rollback (delete), attempt 2 (set: the caller gets its lock), the
//! retried rollback — which must now find nothing of its own to delete.

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::Redlock;
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);

fn pause_all(nodes: &RedisNodes) {
    for server in nodes.iter() {
        server.pause().unwrap();
    }
}

/// Resumes every master `after` from now.
async fn resume_all_after(nodes: &RedisNodes, after: Duration) {
    tokio::time::sleep(after).await;
    for server in nodes.iter() {
        server.resume().unwrap();
    }
}

fn slow_nodes(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .node_timeout(Duration::from_millis(600))
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::ZERO)
        .retry_count(10)
        .acquire_timeout(Duration::from_secs(8))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_rollback_of_an_owners_attempt_leaves_its_later_attempts_grant_alone() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = slow_nodes(&nodes);
    rl.connect().await.unwrap();
    pause_all(&nodes);
    let (lock, ()) = tokio::join!(
        rl.acquire_as("shard:7", "worker-7", TTL),
        resume_all_after(&nodes, Duration::from_millis(1_550)),
    );
    let lock = lock.expect("granted once the masters resume");
    assert!(rl.stats().attempts >= 2, "{:?}", rl.stats());
    // Every late cleanup has run by now: retried rollbacks pause 100 ms, then up to 1 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let value = lock.token().expose().to_owned();
    let held = holders(&nodes, &lock_key("shard:7"), &value);
    assert!(
        held >= 2,
        "a cleanup of an earlier attempt deleted the lock it returned: held on {held} of 3 \
         masters, {:?} left",
        lock.remaining()
    );
    let other = builder(&nodes).connected().await;
    let refused = other.try_acquire("shard:7", TTL).await;
    assert!(
        refused.is_err(),
        "a second holder while the first is valid for {:?}",
        lock.remaining()
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_rollback_of_a_campaign_attempt_leaves_the_elected_term_alone() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = slow_nodes(&nodes);
    rl.connect().await.unwrap();
    pause_all(&nodes);
    let (term, ()) = tokio::join!(
        rl.elect("scheduler", TTL, "host-a"),
        resume_all_after(&nodes, Duration::from_millis(1_550)),
    );
    let term = term.expect("elected once the masters resume");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Another candidate cannot be elected while the first term is valid...
    let rival = builder(&nodes).connected().await;
    let second = tokio::time::timeout(
        Duration::from_millis(1_500),
        rival.elect("scheduler", TTL, "host-b"),
    )
    .await;
    assert!(
        second.is_err(),
        "a second leader (term {:?}) while the first (term {:?}) is valid for {:?}",
        second
            .ok()
            .and_then(|t| t.ok())
            .and_then(|t| t.fencing_token()),
        term.fencing_token(),
        term.remaining()
    );
    // ...and the leader read is the first.
    let leader = rl.leader("scheduler").await.unwrap().expect("a leader");
    assert_eq!(leader.value, "host-a");
    term.release().await.unwrap();
}

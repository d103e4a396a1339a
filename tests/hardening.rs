//! Regression tests for defects found against real masters: a shortening extend that failed or
//! was cancelled, a cancelled `with_lock` that never told its handles, a lost lease reported as
//! contention, and resource names that collide with another resource's fencing counter.

mod common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Lock, LossReason, NodeErrorKind, Redlock};
use quorumlock_testkit::RedisNodes;

const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_secs(1);

fn three() -> RedisNodes {
    RedisNodes::spawn(3).unwrap()
}

/// Takes `resource` with a fresh client as soon as the first lock's keys are gone, and checks
/// that `first` no longer claims validity by then: two holders' windows must never overlap.
async fn next_holder_finds_the_first_expired(nodes: &RedisNodes, first: &Lock, resource: &str) {
    let second = client(nodes);
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(lock) = second.try_acquire(resource, LONG).await {
            assert!(
                !first.is_valid(),
                "a second client holds {resource} while the first lock still claims {:?} of validity",
                first.remaining()
            );
            lock.release().await.unwrap();
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{resource} never freed:\n{}",
            nodes.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_shortening_extend_shortens_the_lock_too() {
    let nodes = three();
    let rl = client(&nodes);
    let mut lock = rl.acquire("report", LONG).await.unwrap();
    // Every master has run the extend script once, so a queued one needs no second round trip.
    lock.extend(LONG).await.unwrap();
    nodes[1].pause().unwrap();
    nodes[2].pause().unwrap();
    let start = Instant::now();
    let err = lock.extend(SHORT).await.unwrap_err();
    assert!(matches!(err, Error::NotExtended { .. }), "{err}");
    // The paused masters run the queued PEXPIRE once resumed: their keys now live about 1 s.
    nodes[1].resume().unwrap();
    nodes[2].resume().unwrap();
    assert!(
        lock.deadline() <= start + SHORT,
        "the lock still claims {:?} after a failed extend to {SHORT:?}",
        lock.remaining()
    );
    next_holder_finds_the_first_expired(&nodes, &lock, "report").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_shortening_extend_shortens_the_lock_too() {
    let nodes = three();
    let rl = client(&nodes);
    let mut lock = rl.acquire("report", LONG).await.unwrap();
    lock.extend(LONG).await.unwrap();
    for node in nodes.iter() {
        node.pause().unwrap();
    }
    let start = Instant::now();
    let cancelled = tokio::time::timeout(Duration::from_millis(30), lock.extend(SHORT)).await;
    assert!(
        cancelled.is_err(),
        "the extend finished with every master paused"
    );
    for node in nodes.iter() {
        node.resume().unwrap();
    }
    assert!(
        lock.deadline() <= start + SHORT,
        "the lock still claims {:?} after a cancelled extend to {SHORT:?}",
        lock.remaining()
    );
    next_holder_finds_the_first_expired(&nodes, &lock, "report").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_renewal_to_the_same_ttl_keeps_the_deadline() {
    let nodes = three();
    let rl = client(&nodes);
    let mut lock = rl.acquire("report", LONG).await.unwrap();
    let deadline = lock.deadline();
    nodes[1].pause().unwrap();
    nodes[2].pause().unwrap();
    assert!(lock.extend(LONG).await.is_err());
    nodes[1].resume().unwrap();
    nodes[2].resume().unwrap();
    assert_eq!(lock.deadline(), deadline);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_with_lock_ends_the_handles_it_handed_out() {
    let nodes = three();
    let rl = client(&nodes);
    let (handed, mut received) = tokio::sync::mpsc::unbounded_channel();
    let holder = {
        let rl = rl.clone();
        tokio::spawn(async move {
            rl.with_lock("batch", LONG, |held| async move {
                handed.send(held).unwrap();
                std::future::pending::<()>().await
            })
            .await
        })
    };
    let held = received.recv().await.unwrap();
    assert!(held.is_held());
    holder.abort();
    assert!(holder.await.unwrap_err().is_cancelled());

    assert!(
        !held.is_held(),
        "a subtask still believes it holds the lock"
    );
    assert_eq!(held.loss(), Some(LossReason::Cancelled));
    assert_eq!(held.remaining(), Duration::ZERO);
    tokio::time::timeout(Duration::from_secs(1), held.lost())
        .await
        .expect("lost() never completed after the cancellation");
    // The lock itself was released in the background.
    let other = client(&nodes);
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, "batch") == 0).await,
        "the cancelled hold's keys are still there"
    );
    other.try_acquire("batch", LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extend_of_a_lost_lease_says_token_gone_not_contention() {
    let nodes = three();
    let rl = client(&nodes);
    let mut lock = rl.acquire("lease", LONG).await.unwrap();
    for node in nodes.iter() {
        del(node, "lease");
    }
    let Error::NotExtended { nodes: refused, .. } = lock.extend(LONG).await.unwrap_err() else {
        panic!("not NotExtended");
    };
    // The decision comes with the second refusal of three.
    assert!(refused.len() >= 2, "{refused:?}");
    for node in &refused {
        assert!(matches!(node.kind(), NodeErrorKind::TokenGone), "{node}");
        assert!(node.is_token_gone() && !node.is_contention(), "{node}");
        assert!(!node.is_unavailable(), "{node}");
        assert!(node
            .to_string()
            .ends_with("no longer holds this lock's token"));
    }
}

fn fenced(nodes: &RedisNodes) -> Redlock {
    builder(nodes).fencing(true).build().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resource_named_like_another_resources_fence_counter_is_refused() {
    let nodes = three();
    let rl = fenced(&nodes);
    let first = rl.acquire("y", LONG).await.unwrap();
    let fence = first.fencing_token().unwrap();
    first.release().await.unwrap();

    // On a fresh resource, this would have set z's counter to a token and deleted it on release.
    let err = rl.acquire_many(&["z", "z:fence"], LONG).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    assert_eq!(present(&nodes, "z:fence"), 0);
    let err = rl.acquire_many(&["y", "y:fence"], LONG).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    assert!(err.to_string().contains("\":fence\""), "{err}");
    for reserved in ["x:fence", "x:released", "x:queue", "x:holder"] {
        let err = rl.try_acquire(reserved, LONG).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidResource { .. }),
            "{reserved}: {err}"
        );
    }
    // The prefix counts: `fence` under the prefix `x:` is the key `x:fence`.
    let prefixed = builder(&nodes).key_prefix("x:").build().unwrap();
    assert!(matches!(
        prefixed.try_acquire("fence", LONG).await,
        Err(Error::InvalidResource { .. })
    ));
    // Nothing was written, and y's counter goes on from where it was.
    assert_eq!(get(&nodes[0], "y:fence"), Some(fence.to_string()));
    let next = rl.acquire("y", LONG).await.unwrap();
    assert!(next.fencing_token().unwrap() > fence);
    next.release().await.unwrap();
    // Names that merely contain a suffix are fine.
    rl.try_acquire("x:fence:1", LONG)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

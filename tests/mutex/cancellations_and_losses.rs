//! Regression tests for defects found against real masters: a shorter extend that failed or was
//! cancelled, a cancelled `with_lock` that never told its handles, a lost lease reported as
//! contention, and resource names that collide with another resource's fencing counter.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Lock, LossReason, NodeErrorKind, Redlock};
use quorumlock_testkit::RedisNodes;

const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_secs(1);

fn three() -> RedisNodes {
    RedisNodes::spawn(3).unwrap()
}

/// After a shorter extend that failed or was cancelled while the masters held it: each master
/// ran the queued request once resumed, and kept the longer TTL (an extend never shortens a
/// key); the lock's deadline is where it was, and another client is refused.
async fn a_shorter_extend_left_the_lock_as_it_was(
    nodes: &RedisNodes,
    lock: &Lock,
    deadline: Instant,
) {
    assert_eq!(lock.deadline(), deadline, "the deadline moved");
    // The resumed masters run what they queued before they answer this.
    let key = lock_key("report");
    let left: Vec<i64> = nodes.iter().map(|s| pttl(s, &key)).collect();
    assert!(
        left.iter().all(|&ms| ms > 5_000),
        "a key was cut: {left:?} ms left"
    );
    assert!(client(nodes).try_acquire("report", LONG).await.is_err());
}

/// The least time the key of `resource` has left on any master, in ms.
fn pttl_everywhere(nodes: &RedisNodes, resource: &str) -> i64 {
    let key = lock_key(resource);
    nodes.iter().map(|s| pttl(s, &key)).min().unwrap_or(-2)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_shorter_extend_shortens_neither_the_keys_nor_the_lock() {
    let nodes = three();
    let rl = connected(&nodes).await;
    let mut lock = rl.acquire("report", LONG).await.unwrap();
    // Every master has run the extend script once, so a queued one needs no second round trip.
    lock.extend(LONG).await.unwrap();
    let deadline = lock.deadline();
    // (The acquire and the extend returned at a quorum: the last master's may still land.)
    let everywhere = || pttl_everywhere(&nodes, "report") > 9_000;
    assert!(eventually(Duration::from_secs(2), everywhere).await);
    nodes[1].pause().unwrap();
    nodes[2].pause().unwrap();
    let err = lock.extend(SHORT).await.unwrap_err();
    assert!(matches!(err, Error::NotExtended { .. }), "{err}");
    // The paused masters run the queued extend once resumed.
    nodes[1].resume().unwrap();
    nodes[2].resume().unwrap();
    a_shorter_extend_left_the_lock_as_it_was(&nodes, &lock, deadline).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_shorter_extend_shortens_neither_the_keys_nor_the_lock() {
    let nodes = three();
    let rl = connected(&nodes).await;
    let mut lock = rl.acquire("report", LONG).await.unwrap();
    lock.extend(LONG).await.unwrap();
    let deadline = lock.deadline();
    let everywhere = || pttl_everywhere(&nodes, "report") > 9_000;
    assert!(eventually(Duration::from_secs(2), everywhere).await);
    for node in nodes.iter() {
        node.pause().unwrap();
    }
    let cancelled = tokio::time::timeout(Duration::from_millis(30), lock.extend(SHORT)).await;
    assert!(
        cancelled.is_err(),
        "the extend finished with every master paused"
    );
    for node in nodes.iter() {
        node.resume().unwrap();
    }
    a_shorter_extend_left_the_lock_as_it_was(&nodes, &lock, deadline).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_renewal_to_the_same_ttl_keeps_the_deadline() {
    let nodes = three();
    let rl = connected(&nodes).await;
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
    let rl = connected(&nodes).await;
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
    let other = connected(&nodes).await;
    assert_gone_everywhere(&nodes, &lock_key("batch")).await;
    other.try_acquire("batch", LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extend_of_a_lost_lease_says_token_gone_not_contention() {
    let nodes = three();
    let rl = connected(&nodes).await;
    let mut lock = rl.acquire("lease", LONG).await.unwrap();
    for node in nodes.iter() {
        del(node, &lock_key("lease"));
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

/// A client with fencing, connected first (see [`connected`](crate::common::connected)).
async fn fenced(nodes: &RedisNodes) -> Redlock {
    builder(nodes).fencing(true).connected().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resource_named_like_another_resources_fence_counter_is_a_lock_of_its_own() {
    let nodes = three();
    let rl = fenced(&nodes).await;
    let first = rl.acquire("x", LONG).await.unwrap();
    let fence = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let counter = fence_key("x");
    assert_eq!(counter, "{x}:fence");
    let counters = || nodes.iter().map(|s| get(s, &counter)).collect::<Vec<_>>();
    // (The acquire and the release each returned once a quorum answered: the last master's
    // grant, and so its counter, may still be on its way.)
    let counted = || counters() == vec![Some(fence.to_string()); 3];
    assert!(
        eventually(Duration::from_secs(2), counted).await,
        "{:?}",
        counters()
    );

    // `x:fence` is a resource like any other (key layout 3, a name without a hash tag): its keys
    // are `x:fence` and `{x:fence}:fence`, apart from x's `{x}:fence`. It is held while x is held, and taking and releasing it
    // leaves x's lock and x's counter as they were.
    // The first release returned at a quorum too: until the last master's lands, that master
    // rightly refuses the next grant of x.
    assert_gone_everywhere(&nodes, &lock_key("x")).await;
    let x = rl.acquire("x", LONG).await.unwrap();
    let x_fence = x.fencing_token().unwrap();
    assert!(x_fence > fence);
    // (acquire returns once a quorum granted: the last grant may still be on its way.)
    let everywhere = || holders(&nodes, &lock_key("x"), x.token().expose()) == 3;
    assert!(
        eventually(Duration::from_secs(2), everywhere).await,
        "x's grant never reached every master: {:?}",
        values(&nodes, &lock_key("x"))
    );
    let before = counters();
    let named = rl.try_acquire("x:fence", LONG).await.unwrap();
    let named_fence = named.fencing_token().unwrap().to_string();
    let taken = || {
        holders(&nodes, &lock_key("x:fence"), named.token().expose()) == 3
            && nodes
                .iter()
                .all(|s| get(s, &fence_key("x:fence")) == Some(named_fence.clone()))
    };
    assert!(
        eventually(Duration::from_secs(2), taken).await,
        "{}",
        nodes.logs()
    );
    named.release().await.unwrap();
    let gone = || present(&nodes, &lock_key("x:fence")) == 0;
    assert!(eventually(Duration::from_secs(2), gone).await);
    assert_eq!(counters(), before, "x's counter was touched");
    assert!(everywhere(), "x's lock was touched");
    x.release().await.unwrap();
    let next = rl.acquire("x", LONG).await.unwrap();
    assert!(next.fencing_token().unwrap() > x_fence);
    next.release().await.unwrap();

    // Every name that once was reserved, alone and beside its resource in one lock.
    for name in ["x:fence", "x:released", "x:queue", "x:leases", "x:holder"] {
        rl.try_acquire(name, LONG)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let both = rl.acquire_many(&["z", "z:fence"], LONG).await.unwrap();
    let token = both.token().expose();
    assert!(holders(&nodes, &lock_key("z"), token) >= 2);
    assert!(holders(&nodes, &lock_key("z:fence"), token) >= 2);
    both.release().await.unwrap();
    let gone = || present(&nodes, &lock_key("z")) + present(&nodes, &lock_key("z:fence")) == 0;
    assert!(eventually(Duration::from_secs(2), gone).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_whose_companions_could_not_share_its_slot_is_refused() {
    let nodes = three();
    let rl = fenced(&nodes).await;
    // A `}` with no hash tag before it, or a key that is one hash tag whole: its companions
    // could not hash like it (or would be another name's).
    for name in ["}x", "}", "x}", "{x}"] {
        let err = rl.try_acquire(name, LONG).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidResource { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("hash tag"), "{err}");
        assert_eq!(present(&nodes, &lock_key(name)), 0);
    }
    let err = rl.acquire_many(&["a", "}b"], LONG).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    assert_eq!(present(&nodes, &lock_key("a")), 0, "nothing was written");
    // The prefix counts: `}p:x` has a `}` and no hash tag.
    let braced = builder(&nodes).key_prefix("}p:").connected().await;
    let err = braced.try_acquire("x", LONG).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    // A name with a hash tag of its own is a lock like any other, and so is one with a `{`
    // alone.
    for name in ["a{b}c", "a{b", "{b}c"] {
        let lock = rl.try_acquire(name, LONG).await.unwrap();
        assert!(holders(&nodes, name, lock.token().expose()) >= 2, "{name}");
        lock.release().await.unwrap();
    }
}

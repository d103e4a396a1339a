//! Reentrant ownership against five real masters: nested holds counted on the client, locks
//! taken again under an owner id, and a plain acquire of a lock the same task holds.

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::{Error, Redlock, MAX_OWNER_LEN};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn nested_holds_keep_the_key_until_the_last_one_is_released_and_extend_for_all() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let outer = rl
        .acquire("ledger", Duration::from_secs(2))
        .await
        .unwrap()
        .into_reentrant();
    let token = outer.token().expose().to_owned();
    let (a, b) = (outer.nested(), outer.nested());
    assert_eq!(outer.holds(), 3);
    assert_eq!(a.token(), outer.token());
    assert!(
        eventually(Duration::from_secs(2), || holders(
            &nodes,
            &lock_key("ledger"),
            &token
        ) == 5)
        .await
    );

    // Extending from one hold renews the key every hold shares.
    b.extend(TTL).await.unwrap();
    assert!(
        outer.remaining() > Duration::from_secs(5),
        "{:?}",
        outer.remaining()
    );
    assert!(
        eventually(Duration::from_secs(2), || nodes
            .iter()
            .all(|s| pttl(s, &lock_key("ledger")) > 5_000))
        .await
    );

    assert!(a.release().await.unwrap().is_none());
    assert!(b.release().await.unwrap().is_none());
    assert_eq!(outer.holds(), 1);
    assert_eq!(
        holders(&nodes, &lock_key("ledger"), &token),
        5,
        "inner releases kept the key"
    );
    let released = outer
        .release()
        .await
        .unwrap()
        .expect("the last hold releases");
    assert!(released.deleted >= 3, "{released:?}");
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("ledger")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn holds_ended_at_once_from_many_tasks_release_exactly_once() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let first = rl.acquire("race", TTL).await.unwrap().into_reentrant();
    let mut holds: Vec<_> = (0..15).map(|_| first.nested()).collect();
    holds.push(first);
    let tasks: Vec<_> = holds
        .into_iter()
        .map(|h| tokio::spawn(async move { h.release().await.unwrap().is_some() }))
        .collect();
    let mut last = 0;
    for task in tasks {
        last += usize::from(task.await.unwrap());
    }
    assert_eq!(last, 1, "exactly one hold is the last");
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("race")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_every_hold_releases_the_lock_in_the_background() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let outer = rl.acquire("dropped", TTL).await.unwrap().into_reentrant();
    let inner = outer.nested();
    drop(outer);
    let token = inner.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(
            &nodes,
            &lock_key("dropped"),
            &token
        ) == 5)
        .await
    );
    drop(inner);
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("dropped")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_worker_takes_its_own_lock_back_under_its_owner_id() {
    let nodes = five();
    let crashed = connected(&nodes).await;
    let old = crashed
        .acquire_as("shard:7", "worker-7", Duration::from_secs(30))
        .await
        .unwrap();
    // A nonce of its own, then the owner id: `ql-<32 hex digits>@worker-7`.
    let value = old.token().expose().to_owned();
    assert_eq!(value.len(), 35 + 1 + "worker-7".len(), "{value}");
    assert!(value.starts_with("ql-"), "{value}");
    assert!(value.ends_with("@worker-7"), "{value}");
    assert!(
        eventually(Duration::from_secs(2), || holders(
            &nodes,
            &lock_key("shard:7"),
            &value
        ) == 5)
        .await
    );
    // The process dies without releasing: its key would stay for 30 s.
    std::mem::forget(old);
    drop(crashed);

    // Another worker is refused...
    let other = builder(&nodes)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let refused = other
        .acquire_as("shard:7", "worker-8", TTL)
        .await
        .unwrap_err();
    assert!(refused.is_contention(), "{refused}");
    let refused = other.try_acquire("shard:7", TTL).await.unwrap_err();
    assert!(refused.is_contention(), "{refused}");

    // ...while worker-7, restarted, gets it at once, on every master. A takeover never brings
    // a key's expiry forward (its rollback may have to put the old value back as it was): the
    // key keeps what the old lock had left of its 30 s, more than the new TTL.
    let restarted = connected(&nodes).await;
    let lock = restarted
        .acquire_as("shard:7", "worker-7", TTL)
        .await
        .unwrap();
    assert_eq!(restarted.stats().attempts, 1);
    let token = lock.token().expose().to_owned();
    let key = lock_key("shard:7");
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &token)
            == 5)
        .await,
        "the new value on every master"
    );
    let left: Vec<i64> = nodes.iter().map(|s| pttl(s, &key)).collect();
    assert!(
        left.iter().all(|ms| (20_000..=30_000).contains(ms)),
        "the old expiry on every master: {left:?}"
    );
    lock.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("shard:7")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_waits_in_line_like_any_acquire_and_advances_the_fence_on_every_grant() {
    let nodes = five();
    let fenced = || builder(&nodes).fencing(true).build().unwrap();
    let holder = fenced();
    // Connected first: the grant must reach every master, and a first request that also opens
    // its connection may outlast the node timeout on a loaded machine.
    assert_eq!(holder.connect().await.unwrap().reachable, 5);
    let held = holder.acquire("report", TTL).await.unwrap();
    let first_fence = held.fencing_token().unwrap();
    granted_everywhere(&nodes, &lock_key("report"), held.token().expose()).await;

    let owner = fenced();
    let waiting = tokio::spawn(async move {
        let lock = owner.acquire_as("report", "reporter-1", TTL).await.unwrap();
        (owner, lock)
    });
    let queued = eventually(Duration::from_secs(5), || {
        nodes
            .iter()
            .all(|s| line(s, &lock_key("report")).len() == 1)
    })
    .await;
    assert!(queued, "the owner's acquire never took a place in line");
    held.release().await.unwrap();
    let (owner, lock) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    let second_fence = lock.fencing_token().unwrap();
    assert!(second_fence > first_fence);
    // On a quorum, not necessarily on all five: the owner attempts once a quorum of masters has
    // handed it the key, and a master the holder's release had not reached yet refuses it.
    let granted = holders(&nodes, &lock_key("report"), lock.token().expose());
    assert!(granted >= 3, "the owner holds the key on {granted} masters");

    // Taken again by the same owner: taken over where it holds, with a fence above the last.
    let again = owner.acquire_as("report", "reporter-1", TTL).await.unwrap();
    assert!(again.fencing_token().unwrap() > second_fence);
    assert_ne!(again.token(), lock.token());
    // The earlier acquisition's release leaves the later one's keys alone...
    let value = again.token().expose().to_owned();
    lock.release().await.unwrap();
    let kept = holders(&nodes, &lock_key("report"), &value);
    assert!(kept >= 3, "the later acquisition kept {kept} masters");
    // ...and the later one's release removes them.
    again.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("report")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_acquires_a_lock_it_holds_is_refused_at_once_while_other_tasks_wait() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let rl2 = rl.clone();
    let refused = tokio::spawn(async move {
        let lock = rl2.acquire("job", TTL).await.unwrap();
        let again = rl2.acquire("job", TTL).await;
        let one_attempt = rl2.try_acquire("job", TTL).await;
        (lock, again, one_attempt)
    });
    let (lock, again, one_attempt) = refused.await.unwrap();
    let e = again.unwrap_err();
    assert!(
        matches!(&e, Error::AlreadyHeld { resource } if resource == "job"),
        "{e:?}"
    );
    assert!(!e.is_retriable());
    assert!(e.to_string().contains("into_reentrant"), "{e}");
    // A single attempt cannot wait for itself: it reports the contention as always.
    assert!(one_attempt.unwrap_err().is_contention());
    assert_eq!(rl.stats().attempts, 2, "the refused acquire sent nothing");

    // Another task of the same client waits for the release, as before.
    let rl3 = rl.clone();
    let other = tokio::spawn(async move { rl3.acquire("job", TTL).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!other.is_finished());
    lock.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), other)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();

    // The test body is no task (block_on): it is told as well, and may acquire again once it
    // has released.
    let mine = rl.acquire("body", TTL).await.unwrap();
    let e = rl.acquire("body", TTL).await.unwrap_err();
    assert!(matches!(e, Error::AlreadyHeld { .. }), "{e:?}");
    mine.release().await.unwrap();
    rl.acquire("body", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // And a dropped lock frees the task as well.
    drop(rl.acquire("body", TTL).await.unwrap());
    rl.acquire("body", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[test]
fn owner_ids_are_checked_before_any_node_is_contacted() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Nothing listens on port 1: a check that reached a node would fail differently.
    let rl = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    let long = "o".repeat(MAX_OWNER_LEN + 1);
    for bad in ["", "~queued:0123", long.as_str()] {
        let e = rt.block_on(rl.acquire_as("r", bad, TTL)).unwrap_err();
        assert!(matches!(e, Error::InvalidOwner { .. }), "{bad:?}: {e:?}");
        assert!(!e.is_retriable());
    }
}

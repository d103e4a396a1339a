//! Locks on several resources at once (`acquire_many`): all or nothing, and a fence per
//! resource, against five real, independent redis-server masters.

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::Error;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn acquire_many_is_all_or_nothing_when_one_key_is_held_elsewhere() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let other = connected(&nodes).await;
    let held = other.acquire("acct:2", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("acct:2"),
            &token
        ) == 5)
        .await
    );

    let err = rl
        .try_acquire_many(&["acct:1", "acct:2"], TTL)
        .await
        .unwrap_err();
    assert!(err.is_contention(), "{err}");
    assert!(err.to_string().contains("acct:1, acct:2"), "{err}");
    assert_eq!(
        present(&nodes, &lock_key("acct:1")),
        0,
        "no key of its own on any node"
    );
    assert_eq!(
        holders(&nodes, &lock_key("acct:2"), &token),
        5,
        "the other holder's key is untouched"
    );

    held.release().await.unwrap();
    // The release returned at a quorum: a master it has not reached yet would rightly refuse
    // the whole multi-key grant there.
    assert_gone_everywhere(&nodes, &lock_key("acct:2")).await;
    let mut lock = rl.acquire_many(&["acct:1", "acct:2"], TTL).await.unwrap();
    assert_eq!(lock.resources(), ["acct:1", "acct:2"]);
    let token = lock.token().expose().to_owned();
    for key in [lock_key("acct:1"), lock_key("acct:2")] {
        assert!(
            eventually(Duration::from_secs(1), || holders(&nodes, &key, &token)
                == 5)
            .await
        );
    }
    assert!(other
        .try_acquire("acct:1", TTL)
        .await
        .unwrap_err()
        .is_contention());

    lock.extend(Duration::from_secs(30)).await.unwrap();
    for key in [lock_key("acct:1"), lock_key("acct:2")] {
        let renewed = || nodes.iter().filter(|s| pttl(s, &key) > 25_000).count();
        assert!(
            eventually(Duration::from_secs(1), || renewed() == 5).await,
            "{key}"
        );
    }
    let released = lock.release().await.unwrap();
    assert!(
        released.deleted >= 3 && released.absent == 0,
        "{released:?}"
    );
    let left = || present(&nodes, &lock_key("acct:1")) + present(&nodes, &lock_key("acct:2"));
    assert!(eventually(Duration::from_secs(1), || left() == 0).await);

    for bad in [&[][..], &["a", "a"][..], &["a", ""][..]] {
        let err = rl.try_acquire_many(bad, TTL).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidResource { .. }),
            "{bad:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_many_gives_each_resource_a_fence_above_its_previous_holders() {
    let nodes = five();
    let rl = builder(&nodes).fencing(true).connected().await;
    let first = rl.acquire("acct:1", TTL).await.unwrap();
    let f1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let both = rl.acquire_many(&["acct:1", "acct:2"], TTL).await.unwrap();
    let fences = both.fencing_tokens().unwrap().to_vec();
    assert_eq!(fences.len(), 2);
    assert!(fences[0] > f1, "{fences:?} after {f1}");
    both.release().await.unwrap();
    let second = rl.acquire("acct:2", TTL).await.unwrap();
    assert!(second.fencing_token().unwrap() > fences[1]);
}

//! The key layout marker: every client marks the masters it connects to with its key layout
//! (`<prefix>quorumlock:layout`), and a master marked by clients of another layout is refused,
//! named in the error, so that clients of two layouts never count the same master.

use crate::common;

use std::time::Duration;

use common::{builder, client, eventually, five, get, lock_key, query};
use quorumlock::{Error, KEY_LAYOUT, LAYOUT_MARKER};

const TTL: Duration = Duration::from_secs(10);

/// What a client of the next layout leaves on a master it connected to first.
fn mark_as_other_layout(server: &quorumlock_testkit::RedisServer, key: &str) {
    let _: () = query(server, redis::cmd("SET").arg(key).arg(KEY_LAYOUT + 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_marks_every_master_with_its_layout_under_its_prefix() {
    let nodes = five();
    let rl = builder(&nodes).key_prefix("locks:").build().unwrap();
    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 5, "{:?}", health.unreachable);
    let marker = format!("locks:{LAYOUT_MARKER}");
    for server in nodes.iter() {
        assert_eq!(
            get(server, &marker),
            Some(KEY_LAYOUT.to_string()),
            "{}",
            nodes.logs()
        );
    }
    // The marker is no lock: acquiring and releasing leave it alone.
    let lock = rl.acquire("orders:42", TTL).await.unwrap();
    lock.release().await.unwrap();
    assert_eq!(get(&nodes[0], &marker), Some(KEY_LAYOUT.to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_marked_with_another_layout_is_named_and_not_used() {
    let nodes = five();
    mark_as_other_layout(&nodes[3], LAYOUT_MARKER);
    let rl = client(&nodes);

    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 4);
    let [refused] = &health.unreachable[..] else {
        panic!("one master refused: {:?}", health.unreachable);
    };
    assert_eq!(refused.node(), nodes[3].addr().to_string());
    let shown = refused.to_string();
    assert!(shown.contains("key layout mismatch"), "{shown}");
    assert!(
        shown.contains(&format!("this client uses layout {KEY_LAYOUT}")),
        "{shown}"
    );

    // The other four are a quorum; the lock never reaches the other layout's master.
    let lock = rl.acquire("orders:42", TTL).await.unwrap();
    // (The lock returned at a quorum: master 0's grant may still be on its way.)
    assert!(
        eventually(Duration::from_secs(2), || get(
            &nodes[0],
            &lock_key("orders:42")
        )
        .is_some())
        .await
    );
    assert_eq!(get(&nodes[3], &lock_key("orders:42")), None);
    lock.release().await.unwrap();
    // Its marker is left as it was.
    assert_eq!(
        get(&nodes[3], LAYOUT_MARKER),
        Some((KEY_LAYOUT + 1).to_string())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_marked_by_clients_of_layout_2_is_refused() {
    // Layout 2 named the lock key `{<prefix><resource>}`, in braces: its clients and this one
    // would not see each other's locks.
    is_refused_for_layout("2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_marked_by_clients_of_layout_3_is_refused() {
    // Layout 3's clients name every key as this one does, but renew a lock stretched for its
    // line without renewing the holder's record (`:held`): the head would take it from them.
    is_refused_for_layout("3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_marked_by_clients_of_layout_4_is_refused() {
    // Layout 4's clients stretch another Redlock client's key over their line and trust its
    // record after that client renewed it, and write tokens of 32 hex digits, which this one
    // takes for another client's.
    is_refused_for_layout("4").await;
}

/// A master marked with the older layout `old` is refused, named with its layout, and the lock
/// is taken on the other four without touching it.
async fn is_refused_for_layout(old: &str) {
    assert_eq!(KEY_LAYOUT, 5);
    let nodes = five();
    let _: () = query(&nodes[1], redis::cmd("SET").arg(LAYOUT_MARKER).arg(old));
    let rl = client(&nodes);

    let health = rl.connect().await.unwrap();
    let [refused] = &health.unreachable[..] else {
        panic!("one master refused: {:?}", health.unreachable);
    };
    assert_eq!(refused.node(), nodes[1].addr().to_string());
    assert!(
        refused.to_string().contains(&format!("layout \"{old}\"")),
        "{refused}"
    );
    let lock = rl.acquire("orders:42", TTL).await.unwrap();
    // (The lock returned at a quorum: master 0's grant may still be on its way.)
    assert!(
        eventually(Duration::from_secs(2), || get(&nodes[0], "orders:42")
            .is_some())
        .await,
        "the lock key is the name"
    );
    assert_eq!(get(&nodes[1], &lock_key("orders:42")), None);
    assert_eq!(get(&nodes[1], "{orders:42}"), None);
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_majority_of_another_layout_leaves_no_quorum_and_every_such_master_is_named() {
    let nodes = five();
    for i in [0, 2, 4] {
        mark_as_other_layout(&nodes[i], "locks:quorumlock:layout");
    }
    let rl = builder(&nodes).key_prefix("locks:").build().unwrap();

    let err = rl.connect().await.unwrap_err();
    let Error::Unavailable {
        reachable,
        nodes: failed,
        ..
    } = &err
    else {
        panic!("not Unavailable: {err}");
    };
    assert_eq!(*reachable, 2, "{err}");
    let mut named: Vec<String> = failed.iter().map(|e| e.node().to_owned()).collect();
    named.sort();
    let mut expected: Vec<String> = [0, 2, 4].map(|i| nodes[i].addr().to_string()).into();
    expected.sort();
    assert_eq!(named, expected, "{err}");
    assert!(
        failed
            .iter()
            .all(|e| e.to_string().contains("key layout mismatch")),
        "{err}"
    );

    let refused = rl.try_acquire("orders:42", TTL).await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    let key = quorumlock::resource_key("locks:", "orders:42");
    for server in nodes.iter() {
        assert_eq!(get(server, &key), None);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn another_prefix_is_another_namespace_with_its_own_marker() {
    let nodes = five();
    for server in nodes.iter() {
        mark_as_other_layout(server, "other:quorumlock:layout");
    }
    let rl = builder(&nodes).key_prefix("locks:").build().unwrap();
    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 5, "{:?}", health.unreachable);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_markers_name_is_no_resource() {
    let nodes = five();
    let rl = client(&nodes);
    let err = rl.try_acquire(LAYOUT_MARKER, TTL).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
}

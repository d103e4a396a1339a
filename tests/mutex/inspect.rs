//! `inspect`: what the masters hold for a resource — free, held, split, or unknown while a
//! majority cannot answer — against five real, independent redis-server masters.

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::{NodeState, Verdict};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn inspect_shows_held_free_and_split() {
    let nodes = five();
    let rl = connected(&nodes).await;

    let free = rl.inspect("status").await.unwrap();
    assert_eq!(free.verdict, Verdict::Free);
    assert!(free.nodes.iter().all(|n| !n.exists()));

    let lock = rl.acquire("status", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("status"),
            &token
        ) == 5)
        .await
    );
    let held = rl.inspect("status").await.unwrap();
    let print = lock.token().fingerprint();
    assert_eq!(
        held.verdict,
        Verdict::Held {
            fingerprint: print.clone(),
            nodes: 5
        }
    );
    for node in &held.nodes {
        assert_eq!(node.fingerprint(), Some(print.as_str()));
        let ttl = node.ttl().unwrap();
        assert!(ttl <= TTL && ttl > TTL - Duration::from_secs(2), "{ttl:?}");
    }
    assert!(
        !format!("{held:?}").contains(&token),
        "the token never shows"
    );
    lock.release().await.unwrap();

    for (i, value) in ["a", "a", "b", "b"].iter().enumerate() {
        set(&nodes[i], &lock_key("split"), value, TTL);
    }
    let split = rl.inspect("split").await.unwrap();
    assert_eq!(split.verdict, Verdict::Split);
    assert_eq!(split.nodes.iter().filter(|n| n.exists()).count(), 4);

    rl.connect().await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    let unknown = rl.inspect("status").await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    assert_eq!(unknown.verdict, Verdict::Unknown);
    let unreachable = unknown
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Unreachable(_)))
        .count();
    assert_eq!(unreachable, 3);
}

//! A client's counters (`stats`): attempts, grants, contention and per-node errors, against
//! five real, independent redis-server masters.

use crate::common;

use std::time::Duration;

use common::*;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn stats_count_attempts_grants_contention_and_node_errors() {
    let mut nodes = five();
    let rl = builder(&nodes).retry_count(2).connected().await;
    let before = rl.stats();
    assert_eq!(
        (before.attempts, before.acquired, before.contended),
        (0, 0, 0)
    );
    assert_eq!(before.nodes.len(), 5);
    assert_eq!(
        before.nodes[3].node,
        format!("127.0.0.1:{}", nodes[3].port())
    );

    let lock = rl.acquire("counted", TTL).await.unwrap();
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired, s.contended), (1, 1, 0));

    // The same client, busy: three attempts, each contended.
    for _ in 0..3 {
        rl.try_acquire("counted", TTL).await.unwrap_err();
    }
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired, s.contended), (4, 1, 3));
    lock.release().await.unwrap();
    // (The release returned at a quorum; the next acquire needs it on 3 of the 4 left.)
    assert_gone_everywhere(&nodes, &lock_key("counted")).await;

    nodes[4].kill().unwrap();
    rl.acquire("counted", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired), (5, 2));
    // The decisions may come before the dead master's errors, which are counted as they land.
    let counted = || rl.stats().nodes[4].errors >= 2;
    assert!(eventually(Duration::from_secs(1), counted).await, "{s:?}");
    let s = rl.stats();
    assert!(s.nodes[..4].iter().all(|n| n.errors == 0), "{s:?}");
    println!("{s:?}");
}

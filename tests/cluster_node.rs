//! A master that turns out to be a Redis Cluster node is refused at connect, named, with the
//! reason: never used for some resources (whose keys happen to live on it) and not others.

mod common;

use std::time::Duration;

use common::query;
use quorumlock::Error;
use quorumlock_testkit::{RedisNodes, RedisServer, RedisServerBuilder};

const TTL: Duration = Duration::from_secs(10);

/// A one-node Redis Cluster that serves every slot: any single-slot command runs on it, as on
/// the node of a real cluster that owns the slot.
fn cluster_node() -> RedisServer {
    let server = RedisServerBuilder::new()
        .arg("--cluster-enabled")
        .arg("yes")
        .spawn()
        .unwrap();
    let _: () = query(
        &server,
        redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383),
    );
    server
}

fn dbsize(server: &RedisServer) -> usize {
    query(server, &mut redis::cmd("DBSIZE"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_node_listed_as_a_master_is_refused_and_named() {
    let standalone = RedisNodes::spawn(2).unwrap();
    let node = cluster_node();
    let mut urls = standalone.urls();
    urls.push(node.url());
    let rl = quorumlock::Redlock::builder(&urls)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();

    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 2);
    let [refused] = &health.unreachable[..] else {
        panic!("one master refused: {:?}", health.unreachable);
    };
    assert_eq!(refused.node(), node.addr().to_string());
    let shown = refused.to_string();
    assert!(shown.contains("a Redis Cluster node"), "{shown}");
    assert!(shown.contains("standalone master"), "{shown}");

    // The two standalone masters are a quorum; nothing is written to the cluster node, for any
    // resource (the layout marker included).
    for resource in ["alpha", "beta", "gamma"] {
        let lock = rl.acquire(resource, TTL).await.unwrap();
        lock.release().await.unwrap();
    }
    assert_eq!(dbsize(&node), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_nodes_alone_give_no_lock_and_every_error_says_why() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| cluster_node()).collect();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let rl = quorumlock::Redlock::builder(&urls).build().unwrap();
    let err = rl.connect().await.unwrap_err();
    let Error::Unavailable {
        reachable,
        nodes: failed,
        ..
    } = &err
    else {
        panic!("not Unavailable: {err}");
    };
    assert_eq!(*reachable, 0, "{err}");
    let mut named: Vec<&str> = failed.iter().map(|e| e.node()).collect();
    named.sort_unstable();
    let mut expected: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    expected.sort_unstable();
    assert_eq!(named, expected, "{err}");
    assert!(
        failed
            .iter()
            .all(|e| e.to_string().contains("a Redis Cluster node")),
        "{err}"
    );
    // An attempt gives up once no quorum can grant, each refusal saying why.
    let err = rl.try_acquire("alpha", TTL).await.unwrap_err();
    let Error::NotAcquired { nodes: refused, .. } = &err else {
        panic!("not NotAcquired: {err}");
    };
    assert!(refused.len() >= 2, "{err}");
    assert!(
        refused
            .iter()
            .all(|e| e.to_string().contains("a Redis Cluster node")),
        "{err}"
    );
    for node in &nodes {
        assert_eq!(dbsize(node), 0);
    }
}

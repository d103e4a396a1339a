//! A master that turns out to be a Redis Cluster node is refused at connect, named, with the
//! reason: never used for some resources (whose keys happen to live on it) and not others.

use crate::common;

use std::time::Duration;

use common::{eventually, lock_key, query};
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
    assert!(
        shown.contains("redis+cluster://"),
        "the right spelling is named: {shown}"
    );

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

#[tokio::test(flavor = "multi_thread")]
async fn the_same_node_listed_as_a_cluster_is_a_voter_and_keeps_each_resource_in_one_slot() {
    let standalone = RedisNodes::spawn(2).unwrap();
    let node = cluster_node();
    let state_ok = || {
        let info: String = query(&node, redis::cmd("CLUSTER").arg("INFO"));
        info.contains("cluster_state:ok")
    };
    assert!(
        eventually(Duration::from_secs(5), state_ok).await,
        "{}",
        node.log()
    );
    let mut urls = standalone.urls();
    urls.push(format!("redis+cluster://{}", node.addr()));
    let rl = quorumlock::Redlock::builder(&urls)
        .node_timeout(Duration::from_millis(500))
        .fencing(true)
        .build()
        .unwrap();
    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 3, "{:?}", health.unreachable);

    // Every key of a resource has its hash tag: one slot, so the scripts that use the lock key
    // and its fencing counter together run on the cluster (a CROSSSLOT error otherwise).
    let lock = rl.acquire("alpha", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    let on_the_cluster = || {
        query::<Option<String>>(&node, redis::cmd("GET").arg(lock_key("alpha")))
            == Some(token.clone())
    };
    assert!(
        eventually(Duration::from_secs(2), on_the_cluster).await,
        "{}",
        node.log()
    );
    let counter = quorumlock::companion_key("alpha", ":fence");
    assert_eq!(counter, "{alpha}:fence");
    let fence = || query::<Option<String>>(&node, redis::cmd("GET").arg(&counter));
    // (The fence is the highest of the voters' counters: a voter behind it is raised to it,
    // maybe after the acquire returned.)
    let settled = || fence() == lock.fencing_token().map(|f| f.to_string());
    assert!(
        eventually(Duration::from_secs(2), settled).await,
        "{:?}",
        fence()
    );
    let slot = |key: &str| -> i64 { query(&node, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)) };
    assert_eq!(slot("alpha"), slot(&counter));
    lock.release().await.unwrap();
    let gone =
        || query::<Option<String>>(&node, redis::cmd("GET").arg(lock_key("alpha"))).is_none();
    assert!(eventually(Duration::from_secs(2), gone).await);
}

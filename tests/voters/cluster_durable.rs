//! Durable votes on a Redis Cluster voter: a grant counts once the replica of the shard that
//! took it acknowledged it (`Durability::Replicas(1)`). The confirmation goes to the primary of
//! the resource's slot, on the connection that carried the write (the script and its `WAIT` in
//! one pipeline), so each shard answers for its own replicas: a shard whose replica is down
//! refuses the resources in its slots and no others, and the connect-time check names it.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use quorumlock::{Durability, Error, NodeErrorKind, Redlock};
use quorumlock_testkit::RedisCluster;

const TTL: Duration = Duration::from_secs(10);

fn durable(cluster: &RedisCluster) -> Redlock {
    Redlock::builder([cluster.url()])
        .durability(Durability::Replicas(1))
        .fencing(true)
        .node_timeout(Duration::from_millis(500))
        .retry_count(0)
        .build()
        .unwrap()
}

/// One resource name per primary of `cluster`, in the order of their primaries' indexes.
fn one_per_shard(cluster: &RedisCluster) -> Vec<(usize, String)> {
    let mut shards = BTreeSet::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let primary = cluster.primary_for_key(lock_key(&name)).unwrap();
        if shards.insert(primary) {
            names.push((primary, name));
        }
        if names.len() == cluster.primaries().unwrap().len() {
            break;
        }
    }
    names.sort();
    names
}

/// `key` on a replica (`READONLY`, so that it answers rather than redirect).
fn on_replica(cluster: &RedisCluster, replica: usize, key: &str) -> Option<String> {
    let (value,): (Option<String>,) = redis::pipe()
        .cmd("READONLY")
        .ignore()
        .cmd("GET")
        .arg(key)
        .query(&mut direct(&cluster[replica]))
        .unwrap();
    value
}

fn connected_replicas(cluster: &RedisCluster, primary: usize) -> usize {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut direct(&cluster[primary]))
        .unwrap();
    info.lines()
        .find_map(|l| l.trim().strip_prefix("connected_slaves:")?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_durable_grant_on_a_cluster_voter_is_on_its_shards_replica_when_acquire_returns() {
    let cluster = RedisCluster::spawn(3, 1).unwrap();
    let rl = durable(&cluster);
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    let mut fences = Vec::new();
    for (primary, name) in one_per_shard(&cluster) {
        let replica = cluster.replicas_of(primary).unwrap()[0];
        let mut lock = rl.acquire(&name, TTL).await.unwrap();
        // Confirmed means acknowledged: the replica holds the key (and the fence) already.
        let key = lock_key(&name);
        assert_eq!(
            on_replica(&cluster, replica, &key).as_deref(),
            Some(lock.token().expose()),
            "{name} on node {replica}"
        );
        let fence = lock.fencing_token().unwrap();
        assert!(on_replica(&cluster, replica, &fence_key(&name)).is_some());
        fences.push(fence);
        // Extends are confirmed the same way.
        lock.extend(TTL).await.unwrap();
        lock.release().await.unwrap();
    }
    assert_eq!(fences.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_whose_replica_is_down_refuses_only_its_own_resources_and_is_named_at_connect() {
    let mut cluster = RedisCluster::spawn(3, 1).unwrap();
    let shards = one_per_shard(&cluster);
    let rl = durable(&cluster);
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();

    let (weak, weak_name) = shards[1].clone();
    let replica = cluster.replicas_of(weak).unwrap()[0];
    cluster[replica].kill().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || connected_replicas(
            &cluster, weak
        ) == 0)
        .await,
        "the primary still counts its replica"
    );

    // On the connection already open: only the weak shard's resource is refused, as
    // unconfirmed, and its grant is rolled back.
    let err = rl.try_acquire(&weak_name, TTL).await.unwrap_err();
    let Error::NotAcquired { nodes, .. } = &err else {
        panic!("unexpected {err:?}");
    };
    assert!(
        matches!(nodes[0].kind(), NodeErrorKind::Unconfirmed(why) if why.contains("0 of 1 replicas")),
        "{err}"
    );
    assert!(
        eventually(Duration::from_secs(2), || get(
            &cluster[weak],
            &lock_key(&weak_name)
        )
        .is_none())
        .await,
        "the unconfirmed grant was left behind"
    );
    for (_, name) in shards.iter().filter(|(p, _)| *p != weak) {
        let lock = rl.try_acquire(name, TTL).await.unwrap();
        lock.release().await.unwrap();
    }

    // A new client refuses the voter at connect, naming the shard and nothing else.
    let fresh = durable(&cluster);
    let err = fresh.connect().await.unwrap_err().to_string();
    println!("{err}");
    let named = format!("the shard of primary {} (slots ", cluster[weak].addr());
    assert!(err.contains(&named), "{err}");
    assert!(err.contains("0 replicas connected, 1 needed"), "{err}");
    // (The voter itself is named by its seeds, every node; what it lacks, by the weak shard.)
    let (_, why) = err.split_once("cannot confirm grants").unwrap();
    for (primary, _) in shards.iter().filter(|(p, _)| *p != weak) {
        assert!(
            !why.contains(&cluster[*primary].addr().to_string()),
            "{err}"
        );
    }
    let err = fresh.try_acquire(&shards[0].1, TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");

    // The replica back: the voter is used again.
    cluster.restart(replica).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || connected_replicas(
            &cluster, weak
        ) == 1)
        .await
    );
    let again = durable(&cluster);
    let mut granted = None;
    for _ in 0..20 {
        match again.try_acquire(&weak_name, TTL).await {
            Ok(lock) => {
                granted = Some(lock);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    granted
        .expect("granted once the replica is back")
        .release()
        .await
        .unwrap();
}

//! Voters as managed services with encryption in transit run them: a TLS-only Redis Cluster
//! (`rediss+cluster://`: 3 primaries with a replica each, `port 0`, `tls-cluster yes`,
//! `tls-replication yes`) and a TLS-only Sentinel group whose Sentinels have a password of their
//! own (`rediss+sentinel://`), both with a throw-away CA and mutual TLS. The client locks, waits
//! in line and fences through them; without the CA, or without its client certificate, it is
//! refused and sends nothing in plain text.
//!
//! Needs the `tls` feature (`cargo test --all-features --test voters managed_tls::`).

#![cfg(feature = "tls")]

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::{Error, Redlock, RedlockBuilder};
use quorumlock_testkit::tls::{TestCa, CA_CERT, CLIENT_CERT, CLIENT_KEY, OTHER_CA_CERT};
use quorumlock_testkit::{RedisCluster, RedisServer, SentinelGroup};

const TTL: Duration = Duration::from_secs(10);
const MASTER_PASSWORD: &str = "m4ster-pw-in-url";
const SENTINEL_PASSWORD: &str = "s3ntinel-pw/&?";

/// A TLS-only cluster (3 primaries, a replica each) whose nodes require client certificates.
fn tls_cluster(ca: &TestCa) -> RedisCluster {
    RedisCluster::builder()
        .server(RedisServer::builder().tls(ca.server_tls().auth_clients(true)))
        .spawn()
        .unwrap()
}

/// A TLS-only Sentinel group (a primary, a replica, three Sentinels) whose nodes require client
/// certificates, with a password on the data nodes and another on the Sentinels.
fn tls_sentinels(ca: &TestCa) -> SentinelGroup {
    SentinelGroup::builder()
        .server(RedisServer::builder().tls(ca.server_tls().auth_clients(true)))
        .master_password(MASTER_PASSWORD)
        .sentinel_password(SENTINEL_PASSWORD)
        .spawn()
        .unwrap()
}

/// `rediss+sentinel://:MASTER_PASSWORD@…/mymaster?sentinel_password=…` for `group`.
fn sentinel_url(group: &SentinelGroup) -> String {
    let url = group.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let rest = &url["rediss+sentinel://".len()..];
    format!(
        "rediss+sentinel://:{MASTER_PASSWORD}@{rest}?sentinel_password={}",
        "s3ntinel-pw%2F%26%3F"
    )
}

fn tls_builder<S: AsRef<str>>(urls: impl IntoIterator<Item = S>, ca: &TestCa) -> RedlockBuilder {
    Redlock::builder(urls)
        .tls_root_certificate(ca.read(CA_CERT).unwrap())
        .tls_client_certificate(ca.read(CLIENT_CERT).unwrap(), ca.read(CLIENT_KEY).unwrap())
        .node_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(3))
        .retry_delay(Duration::from_millis(20))
        .acquire_timeout(Duration::from_secs(10))
}

/// Locks, refuses a second holder, waits in line for a hand-off and fences, through one voter
/// whose primary for a resource is `primary(resource)`.
async fn lock_wait_and_fence<'a>(
    rl: &Redlock,
    other: &Redlock,
    primary: impl Fn(&str) -> &'a RedisServer,
) {
    let held = |resource: &str, token: &str| {
        usize::from(get_on(primary(resource), &lock_key(resource)).as_deref() == Some(token))
    };
    rl.connect().await.unwrap();
    let lock = rl.acquire("orders:1", TTL).await.unwrap();
    assert_eq!(held("orders:1", lock.token().expose()), rl.node_count());
    let refused = other
        .try_acquire("orders:1", TTL)
        .await
        .expect_err("a second holder");
    assert!(refused.is_contention(), "{refused}");

    // Waiting in line: the release hands the lock to the waiter.
    let waiting = {
        let other = other.clone();
        tokio::spawn(async move { other.acquire("orders:1", TTL).await })
    };
    // Released once the waiter has its place in line.
    let line = quorumlock::companion_key(&lock_key("orders:1"), ":queue");
    let queued = || -> usize {
        let mut conn = redis::Client::open(primary("orders:1").admin_url())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("ZCARD").arg(&line).query(&mut conn).unwrap()
    };
    // ... and listens for the hand-off (its sharded subscription, over TLS too).
    let subscribed = || -> bool {
        let mut conn = redis::Client::open(primary("orders:1").admin_url())
            .unwrap()
            .get_connection()
            .unwrap();
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("SHARDCHANNELS")
            .query(&mut conn)
            .unwrap();
        !channels.is_empty()
    };
    assert!(eventually(Duration::from_secs(5), || queued() > 0 && subscribed()).await);
    lock.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert!(other.stats().wakeups > 0, "{:?}", other.stats());
    assert_eq!(held("orders:1", handed.token().expose()), rl.node_count());
    handed.release().await.unwrap();

    // Fencing: strictly increasing across holders.
    let first = rl.acquire("orders:2", TTL).await.unwrap();
    let t1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = other.acquire("orders:2", TTL).await.unwrap();
    let t2 = second.fencing_token().unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
    second.release().await.unwrap();
}

/// The value of `key` on a data node of a group, logged in with the master's password.
fn get_on(server: &RedisServer, key: &str) -> Option<String> {
    let mut conn = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

/// The token `lock_key` holds on the cluster node that serves it.
fn on_cluster(cluster: &RedisCluster, key: &str) -> Option<String> {
    let primary = cluster.primary_for_key(key).unwrap();
    get(&cluster[primary], key)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_only_cluster_voter_locks_waits_in_line_and_fences() {
    let ca = TestCa::generate().unwrap();
    let cluster = tls_cluster(&ca);
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    // The nodes have no plain port: each one's only TCP port speaks TLS.
    assert!(cluster
        .nodes()
        .iter()
        .all(|n| n.tls_port() == Some(n.port())));

    let rl = tls_builder([&url], &ca).fencing(true).build().unwrap();
    let other = tls_builder([&url], &ca).fencing(true).build().unwrap();
    lock_wait_and_fence(&rl, &other, |resource| {
        &cluster[cluster.primary_for_key(lock_key(resource)).unwrap()]
    })
    .await;
    // Replication runs over TLS too: the lock key reached the slot's replica.
    let lock = rl.acquire("orders:3", TTL).await.unwrap();
    let key = lock_key("orders:3");
    let primary = cluster.primary_for_key(&key).unwrap();
    let replica = cluster.replicas_of(primary).unwrap()[0];
    let on_replica = || -> Option<String> {
        let (value,): (Option<String>,) = redis::pipe()
            .cmd("READONLY")
            .ignore()
            .cmd("GET")
            .arg(&key)
            .query(&mut direct(&cluster[replica]))
            .unwrap();
        value
    };
    assert!(
        eventually(Duration::from_secs(5), || on_replica().as_deref()
            == Some(lock.token().expose()))
        .await
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_only_sentinel_group_with_its_own_password_locks_waits_in_line_and_fences() {
    let ca = TestCa::generate().unwrap();
    let group = tls_sentinels(&ca);
    let url = sentinel_url(&group);
    let rl = tls_builder([&url], &ca).fencing(true).build().unwrap();
    let other = tls_builder([&url], &ca).fencing(true).build().unwrap();
    lock_wait_and_fence(&rl, &other, |_| &group[group.primary().unwrap()]).await;
    // Neither password shows in what the client prints.
    let shown = format!("{rl:?} {:?}", rl.connect().await);
    for secret in [MASTER_PASSWORD, SENTINEL_PASSWORD, "s3ntinel-pw%2F"] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_cluster_and_sentinel_voters_follow_a_failover() {
    let ca = TestCa::generate().unwrap();
    let mut cluster = tls_cluster(&ca);
    let mut group = tls_sentinels(&ca);
    let urls = [cluster.url(), sentinel_url(&group)];
    let rl = tls_builder(&urls, &ca).build().unwrap();
    let lock = rl.acquire("jobs:1", TTL).await.unwrap();
    lock.release().await.unwrap();

    // Each voter's primary for the resource fails over (the cluster's by an operator's
    // `CLUSTER FAILOVER`, the group's by a crash); the same client carries on through TLS
    // connections to the promoted replicas, found again over TLS.
    let slot = quorumlock_testkit::key_slot(lock_key("jobs:1"));
    cluster
        .failover(slot, quorumlock_testkit::FailoverMode::Graceful)
        .unwrap();
    group.kill_primary().unwrap();
    let mut granted = None;
    for _ in 0..50 {
        match rl.try_acquire("jobs:1", TTL).await {
            Ok(lock) => {
                granted = Some(lock);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let lock = granted.expect("a lock after both failovers");
    let primary = group.primary().unwrap();
    assert_eq!(
        get_on(&group[primary], &lock_key("jobs:1")).as_deref(),
        Some(lock.token().expose())
    );
    assert_eq!(
        on_cluster(&cluster, &lock_key("jobs:1")).as_deref(),
        Some(lock.token().expose())
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_ca_or_the_client_certificate_tls_voters_are_refused_and_nothing_is_written() {
    let ca = TestCa::generate().unwrap();
    let cluster = tls_cluster(&ca);
    let group = tls_sentinels(&ca);
    let quick = |b: RedlockBuilder| {
        b.node_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_secs(2))
            .retry_count(0)
            .build()
            .unwrap()
    };
    for (url, named) in [
        (cluster.url(), cluster.url()),
        (sentinel_url(&group), group.url()),
    ] {
        let clients = [
            // Trusts another CA.
            quick(
                Redlock::builder([&url])
                    .tls_root_certificate(ca.read(OTHER_CA_CERT).unwrap())
                    .tls_client_certificate(
                        ca.read(CLIENT_CERT).unwrap(),
                        ca.read(CLIENT_KEY).unwrap(),
                    ),
            ),
            // Trusts the system's roots.
            quick(Redlock::builder([&url])),
            // Trusts the CA, but has no client certificate.
            quick(Redlock::builder([&url]).tls_root_certificate(ca.read(CA_CERT).unwrap())),
        ];
        for rl in clients {
            let err = rl.try_acquire("orders:1", TTL).await.unwrap_err();
            assert!(err.is_unavailable(), "{err}");
            let Error::NotAcquired { nodes, .. } = &err else {
                panic!("unexpected {err:?}");
            };
            let voters: Vec<&str> = nodes.iter().map(|n| n.node()).collect();
            assert_eq!(voters, [named.as_str()], "{err}");
            let shown = format!("{err} {err:?}");
            for secret in [MASTER_PASSWORD, SENTINEL_PASSWORD, "s3ntinel-pw%2F"] {
                assert!(!shown.contains(secret), "{shown}");
            }
            println!("{named}: {err}");
        }
    }
    let key = lock_key("orders:1");
    assert_eq!(on_cluster(&cluster, &key), None);
    assert!(group.servers().iter().all(|s| get_on(s, &key).is_none()));
}

//! Voters as Redis runs in production: a Redis Cluster (`redis+cluster://`), a Sentinel-managed
//! master (`redis+sentinel://`), and both mixed with standalone masters in one client. Every
//! test runs against real servers the testkit starts: cluster nodes created with `redis-cli
//! --cluster create`, Sentinels started with `redis-server --sentinel`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisCluster, RedisServer, SentinelGroup};

const TTL: Duration = Duration::from_secs(10);

/// Every key on a server, but the layout marker.
fn keys_on(url: &str) -> BTreeSet<String> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| !k.ends_with("quorumlock:layout"))
        .collect()
}

/// Every key on every node of a cluster, but the layout marker.
fn keys_in(cluster: &RedisCluster) -> BTreeSet<String> {
    cluster
        .nodes()
        .iter()
        .filter(|n| n.is_running())
        .flat_map(|n| keys_on(&n.url()))
        .collect()
}

fn client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// Resource names whose keys hash to at least `n` different primaries of `cluster`.
fn spread(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut owners = BTreeSet::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let owner = cluster
            .primary_for_key(quorumlock::resource_key("", &name))
            .unwrap();
        if owners.insert(owner) {
            names.push(name);
        }
        if names.len() == n {
            break;
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_voter_serialises_resources_of_every_shard_and_leaves_no_key_behind() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let (a, b) = (client(&[cluster.url()]), client(&[cluster.url()]));
    let names = spread(&cluster, 3);
    for name in &names {
        let lock = a.acquire(name, TTL).await.unwrap();
        let refused = b.try_acquire(name, TTL).await.unwrap_err();
        assert!(refused.is_contention(), "{name}: {refused}");
        let owner = cluster
            .primary_for_key(quorumlock::resource_key("", name))
            .unwrap();
        assert_eq!(
            keys_on(&cluster.nodes()[owner].url()),
            BTreeSet::from([quorumlock::resource_key("", name)]),
            "the lock lives on the primary of its slot"
        );
        let released = lock.release().await.unwrap();
        assert_eq!(released.deleted, 1, "{name}");
        b.try_acquire(name, TTL)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(keys_in(&cluster), BTreeSet::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_many_over_slots_of_cluster_voters_is_all_or_nothing_per_voter() {
    let clusters: Vec<RedisCluster> = (0..3).map(|_| RedisCluster::spawn(3, 0).unwrap()).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    let rl = client(&urls);
    rl.connect().await.unwrap();
    let names = spread(&clusters[0], 3);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();

    // The middle resource held by someone else on one voter: that voter refuses, and gives back
    // the two resources it had granted; the other two grant, a quorum.
    let other = client(&urls[..1]);
    other.connect().await.unwrap();
    let blocker = other.acquire(names[1], TTL).await.unwrap();
    let many = rl.acquire_many(&names, TTL).await.unwrap();
    // acquire_many returns at the quorum: the refusing voter may answer (and give back its
    // partial grant) just after, and the last granting voter's keys land just after too.
    let blocked = BTreeSet::from([quorumlock::resource_key("", names[1])]);
    assert!(
        eventually(|| keys_in(&clusters[0]) == blocked).await,
        "the refusing voter kept some of its partial grant: {:?}",
        keys_in(&clusters[0])
    );
    for cluster in &clusters[1..] {
        assert!(
            eventually(|| keys_in(cluster).len() == 3).await,
            "every key on a granting voter"
        );
    }
    many.release().await.unwrap();
    // (The release returns once a quorum answered: the last voter's may still be on its way.)
    for cluster in &clusters[1..] {
        assert!(
            eventually(|| keys_in(cluster).is_empty()).await,
            "left on a granting voter: {:?}",
            keys_in(cluster)
        );
    }

    // Held on two voters: no quorum, and nothing of the attempt left anywhere.
    let other2 = client(&urls[1..2]);
    other2.connect().await.unwrap();
    let blocker2 = other2.acquire(names[1], TTL).await.unwrap();
    let refused = rl.try_acquire_many(&names, TTL).await.err().unwrap();
    assert!(refused.is_contention(), "{refused}");
    assert_eq!(
        keys_in(&clusters[0]),
        BTreeSet::from([quorumlock::resource_key("", names[1])])
    );
    assert_eq!(
        keys_in(&clusters[1]),
        BTreeSet::from([quorumlock::resource_key("", names[1])])
    );
    assert!(eventually(|| keys_in(&clusters[2]).is_empty()).await);
    blocker.release().await.unwrap();
    blocker2.release().await.unwrap();
}

/// Polls `check` for up to 3 s.
async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_on_a_cluster_voter_is_woken_by_the_shard_that_owns_the_resource_alone() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    // A retry delay far beyond the hand-off: only the announcement can wake the waiter in time.
    let slow = |url: String| {
        Redlock::builder([url])
            .retry_delay(Duration::from_secs(5))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (slow(cluster.url()), slow(cluster.url()));
    let lock = holder.acquire("report", TTL).await.unwrap();
    let waiting = tokio::spawn(async move {
        let lock = waiter.acquire("report", TTL).await;
        (Instant::now(), lock)
    });
    // The waiter subscribes on the shard of the resource's slot, and on no other node.
    let key = quorumlock::resource_key("", "report");
    let owner = cluster.primary_for_key(&key).unwrap();
    let subscribed = |node: &RedisServer| -> usize {
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("SHARDCHANNELS")
            .query(&mut conn)
            .unwrap();
        channels.len()
    };
    assert!(eventually(|| subscribed(&cluster.nodes()[owner]) == 1).await);
    for (i, node) in cluster.nodes().iter().enumerate() {
        if i != owner {
            assert_eq!(
                subscribed(node),
                0,
                "node {i} has no channel of the resource"
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    lock.release().await.unwrap();
    let (woken, taken) = waiting.await.unwrap();
    taken.unwrap().release().await.unwrap();
    let gap = woken - released;
    assert!(
        gap < Duration::from_secs(2),
        "the waiter took {gap:?}: it polled instead of hearing the hand-off"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_whose_slot_moves_while_held_is_released_once_the_move_ends_and_taken_again() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let rl = Redlock::builder([cluster.url()])
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let lock = rl.acquire("migrating", TTL).await.unwrap();
    let key = quorumlock::resource_key("", "migrating");
    let slot = quorumlock_testkit::key_slot(&key);
    let from = cluster.primary_for_slot(slot).unwrap();
    let to = cluster
        .primaries()
        .unwrap()
        .into_iter()
        .find(|p| *p != from)
        .unwrap();
    // The lock key moves to the importing primary; the slot stays half-moved, so a request for
    // it meets ASK, and a script over its keys TRYAGAIN until the move ends.
    let migration = cluster.begin_migration(slot, to).unwrap();
    assert!(migration.is_moved(&key), "the held key moved");
    // Resources of other slots are not held up.
    let other = (0..)
        .map(|i| format!("other-{i}"))
        .find(|r| quorumlock_testkit::key_slot(quorumlock::resource_key("", r)) != slot)
        .unwrap();
    rl.acquire(&other, TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let releasing = tokio::spawn(async move { lock.release().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.finish_migration(migration).unwrap();
    let released = releasing.await.unwrap().unwrap();
    assert_eq!(released.deleted, 1, "released on the slot's new owner");
    assert_eq!(keys_in(&cluster), BTreeSet::new());
    let again = rl.acquire("migrating", TTL).await.unwrap();
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), to);
    assert_eq!(
        keys_on(&cluster.nodes()[to].url()),
        BTreeSet::from([key.clone()])
    );
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_voter_grants_again_once_a_killed_shard_primary_failed_over() {
    let mut cluster = RedisCluster::spawn(3, 1).unwrap();
    let rl = client(&[cluster.url()]);
    rl.connect().await.unwrap();
    let key = quorumlock::resource_key("", "nightly");
    let slot = quorumlock_testkit::key_slot(&key);
    rl.acquire("nightly", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let promotion = cluster.kill_primary(slot).unwrap();
    // The cluster connection finds the promoted replica by itself.
    let deadline = Instant::now() + Duration::from_secs(15);
    let lock = loop {
        match rl.acquire("nightly", TTL).await {
            Ok(lock) => break lock,
            Err(e) if Instant::now() < deadline => {
                tracing_free_pause(&e).await;
            }
            Err(e) => panic!("no grant after the failover ({promotion:?}): {e}"),
        }
    };
    assert_eq!(
        cluster.primary_for_slot(slot).unwrap(),
        promotion.new_primary
    );
    lock.release().await.unwrap();
}

async fn tracing_free_pause(_why: &Error) {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_voter_follows_a_forced_failover_to_the_promoted_replica() {
    let mut group = SentinelGroup::spawn(1, 3).unwrap();
    let rl = client(&[group.url()]);
    rl.connect().await.unwrap();
    let before = group.primary_addr().unwrap();
    let lock = rl.acquire("sentinel-job", TTL).await.unwrap();
    lock.release().await.unwrap();
    group.failover().unwrap();
    // Until the Sentinels demote it, the old master still takes writes on connections opened
    // before the failover; its first READONLY sends the client back to the Sentinels.
    group.wait_settled().unwrap();
    let after = group.primary_addr().unwrap();
    assert_ne!(before, after, "the failover promoted the replica");
    let deadline = Instant::now() + Duration::from_secs(15);
    let lock = loop {
        match rl.acquire("sentinel-job", TTL).await {
            Ok(lock) => break lock,
            Err(e) if Instant::now() < deadline => tracing_free_pause(&e).await,
            Err(e) => panic!("no grant from the promoted master: {e}"),
        }
    };
    let key = quorumlock::resource_key("", "sentinel-job");
    assert!(
        keys_on(&format!("redis://{after}")).contains(&key),
        "the lock is on the promoted master {after}"
    );
    lock.release().await.unwrap();
    assert!(eventually(|| keys_on(&format!("redis://{after}")).is_empty()).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_primitive_works_on_every_voter_kind_and_mixed() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let group = SentinelGroup::spawn(1, 3).unwrap();
    let master = RedisServer::spawn().unwrap();
    for urls in [
        vec![cluster.url()],
        vec![group.url()],
        vec![master.url(), cluster.url(), group.url()],
    ] {
        exercise(&urls).await;
    }
    // Nothing left but the election's fencing counter (a leader's fence is its term, so every
    // grant of an election advances it; it lasts for the fence grace, 1 h by default).
    let fence = quorumlock::companion_key("scheduler", ":fence");
    let left = |mut keys: BTreeSet<String>| {
        keys.remove(&fence);
        keys
    };
    // (Each release returned at a quorum: the last voter's may still be on its way.)
    assert!(
        eventually(|| left(keys_in(&cluster)).is_empty()).await,
        "{:?}",
        left(keys_in(&cluster))
    );
    assert!(
        eventually(|| left(keys_on(&master.url())).is_empty()).await,
        "{:?}",
        left(keys_on(&master.url()))
    );
}

/// The wait line, a semaphore, a read-write lock and an election over `urls`.
async fn exercise(urls: &[String]) {
    let (a, b) = (client(urls), client(urls));
    let what = format!("{urls:?}");

    // The line: a waiter gets the lock once the holder releases.
    let held = a.acquire("line", TTL).await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire("line", TTL).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "{what}: the waiter waits");
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    // A semaphore of two permits.
    let permits = a.semaphore("pool", 2).unwrap();
    let one = permits.acquire(TTL).await.unwrap();
    let two = b.semaphore("pool", 2).unwrap().acquire(TTL).await.unwrap();
    assert!(
        permits.try_acquire(TTL).await.is_err(),
        "{what}: no third permit"
    );
    one.release().await.unwrap();
    two.release().await.unwrap();

    // A read-write lock: two readers, then a writer once they are gone.
    let (ra, rb) = (a.rw_lock("table").unwrap(), b.rw_lock("table").unwrap());
    let r1 = ra.read(TTL).await.unwrap();
    let r2 = rb.read(TTL).await.unwrap();
    assert!(
        rb.try_write(TTL).await.is_err(),
        "{what}: no writer beside readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    rb.write(TTL).await.unwrap().release().await.unwrap();

    // An election, and an observer that sees its leader.
    let mut leaders = std::pin::pin!(b.observe("scheduler", Duration::from_millis(100)));
    assert_eq!(leaders.next().await.unwrap(), None, "{what}: no leader yet");
    let led = a.campaign("scheduler", TTL, "host-a", |_held| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    let (led, seen) = tokio::join!(led, leaders.next());
    led.unwrap();
    assert_eq!(
        seen.unwrap().map(|l| l.value),
        Some("host-a".to_owned()),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_cluster_or_one_sentinel_master_listed_twice_is_refused() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let nodes = cluster.nodes();
    let seed = |i: usize| format!("redis+cluster://{}", nodes[i].addr());
    // The same seed twice: refused at build time.
    let e = Redlock::builder([
        seed(0),
        format!("redis+cluster://127.0.0.1:1,{}", nodes[0].addr()),
    ])
    .build()
    .unwrap_err();
    assert!(e.to_string().contains("same"), "{e}");
    // Two nodes of one cluster as two voters: refused once connected.
    let rl = Redlock::builder([seed(0), seed(1), seed(2)])
        .build()
        .unwrap();
    let e = rl.connect().await.unwrap_err();
    assert!(e.to_string().contains("the same Redis Cluster"), "{e}");

    let group = SentinelGroup::spawn(0, 1).unwrap();
    let e = Redlock::builder([group.url(), group.url()])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("same"), "{e}");
    // A Sentinel voter and its master listed as a standalone one: one server.
    let primary = group.primary_addr().unwrap();
    let rl = Redlock::builder([group.url(), format!("redis://{primary}")])
        .build()
        .unwrap();
    let e = rl.connect().await.unwrap_err();
    assert!(e.to_string().contains("same run_id"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_voter_of_the_wrong_kind_fails_at_connect_saying_which_spelling_to_use() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let master = RedisServer::spawn().unwrap();
    let as_master = Redlock::builder([cluster.seed_url()]).build().unwrap();
    let e = as_master.connect().await.unwrap_err().to_string();
    assert!(e.contains("redis+cluster://"), "{e}");
    let as_cluster = Redlock::builder([format!("redis+cluster://{}", master.addr())])
        .build()
        .unwrap();
    let e = as_cluster.connect().await.unwrap_err().to_string();
    assert!(e.contains("not a Redis Cluster"), "{e}");
    // Nothing was written to either.
    assert_eq!(keys_in(&cluster), BTreeSet::new());
    assert_eq!(keys_on(&master.url()), BTreeSet::new());
}

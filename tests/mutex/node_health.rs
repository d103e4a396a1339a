//! How a client treats one master over time: slow, hung, restarted, refusing or closing masters,
//! and the background work that failed attempts leave behind.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Inspection, Lock, NodeErrorKind, NodeState, Redlock};
use quorumlock_testkit::{FaultProxy, RedisNodes, RedisServer};
use tokio::net::TcpListener;

const TTL: Duration = Duration::from_secs(10);

/// Far above a loopback round trip even on a loaded machine, and far below the proxy delays
/// the tests use to stand for a slow master.
const NODE_TIMEOUT: Duration = Duration::from_millis(300);

/// Live tokio tasks of the test's runtime.
fn live_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// A master that accepts every connection and closes it at once, counting them.
struct Closing {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Closing {
    async fn start() -> Closing {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Closing { addr, connections }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_slow_for_a_while_takes_part_again_once_one_request_fits_the_node_timeout() {
    let nodes = RedisNodes::spawn(1).unwrap();
    let proxy = FaultProxy::start(nodes[0].addr()).unwrap();
    let rl = Redlock::builder([proxy.url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    rl.connect().await.unwrap();

    // A slow spell: no reply within the node timeout for well over a second, so the master
    // counts as unresponsive.
    proxy.delay(
        Duration::from_millis(400),
        Duration::from_millis(400),
        Duration::ZERO,
    );
    let slow = Instant::now();
    while slow.elapsed() < Duration::from_millis(1500) {
        let err = rl.try_acquire("slow", TTL).await.unwrap_err();
        assert!(err.is_unavailable(), "{err}");
    }

    // Now one round trip (200 ms) fits the node timeout; a new connection's handshake plus one
    // request does not.
    proxy.delay(
        Duration::from_millis(100),
        Duration::from_millis(100),
        Duration::ZERO,
    );
    let healthy = Instant::now();
    let mut last = None;
    while healthy.elapsed() < Duration::from_secs(5) {
        match rl.try_acquire("slow", TTL).await {
            Ok(lock) => {
                lock.release().await.unwrap();
                last = None;
                break;
            }
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        last.is_none(),
        "the master never came back: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn contended_attempts_against_a_killed_master_leave_no_tasks_behind() {
    let ttl = Duration::from_secs(30);
    let mut nodes = RedisNodes::spawn(3).unwrap();
    let holder = connected(&nodes).await;
    let _lock = holder.acquire("busy", ttl).await.unwrap();
    nodes[2].kill().unwrap();
    let contender = client(&nodes);
    contender.connect().await.unwrap();

    let before = live_tasks();
    for _ in 0..300 {
        let err = contender.try_acquire("busy", ttl).await.unwrap_err();
        assert!(err.is_contention(), "{err}");
    }
    // Requests still in flight at each decision finish within the node timeout.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = live_tasks();
    assert!(
        after <= before + 3,
        "live tasks went from {before} to {after}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_that_closes_every_connection_is_reconnected_to_at_a_bounded_rate_and_left_alone_once_the_client_is_gone(
) {
    let nodes = RedisNodes::spawn(2).unwrap();
    let closing = Closing::start().await;
    let urls = [nodes[0].url(), nodes[1].url(), closing.url()];
    let holder = Redlock::builder(urls.clone()).build().unwrap();
    let _lock = holder.acquire("busy", TTL).await.unwrap();
    let contender = Redlock::builder(urls).build().unwrap();

    let before = closing.connections();
    let contended = Instant::now();
    let mut attempts = 0;
    while contended.elapsed() < Duration::from_secs(2) {
        assert!(contender.try_acquire("busy", TTL).await.is_err());
        attempts += 1;
    }
    let while_contended = closing.connections() - before;
    assert!(
        while_contended <= 20,
        "{while_contended} connections in 2 s ({attempts} attempts)"
    );

    drop(contender);
    let dropped = closing.connections();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_drop = closing.connections() - dropped;
    assert!(
        after_drop <= 1,
        "{after_drop} connections in the 2 s after the client was dropped"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_timeouts_then_a_quiet_second_leaves_a_healthy_master_in_every_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let proxy = FaultProxy::start(nodes[0].addr()).unwrap();
    let rl = Redlock::builder([proxy.url(), nodes[1].url(), nodes[2].url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    rl.connect().await.unwrap();

    // Three requests time out on the first master at about the same moment; the other two
    // grant the locks.
    proxy.delay(Duration::from_secs(1), Duration::ZERO, Duration::ZERO);
    let _burst: Vec<Lock> = acquire_together(&rl, "burst", 3).await;
    tokio::time::sleep(NODE_TIMEOUT + Duration::from_millis(200)).await;

    // Then the master is healthy and nothing is asked of it for over a second.
    proxy.pass();
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let locks = acquire_together(&rl, "calm", 8).await;
    let mut on_first = 0;
    for (i, lock) in locks.iter().enumerate() {
        let key = lock_key(&format!("calm-{i}"));
        let token = lock.token().expose().to_owned();
        if eventually(NODE_TIMEOUT, || {
            get(&nodes[0], &key).as_deref() == Some(&token)
        })
        .await
        {
            on_first += 1;
        }
    }
    assert_eq!(on_first, 8, "locks that the first master took part in");
}

/// `try_acquire`s of `<prefix>-0` .. `<prefix>-<n-1>`, all at once; each must succeed.
async fn acquire_together(rl: &Redlock, prefix: &str, n: usize) -> Vec<Lock> {
    let attempts = (0..n).map(|i| {
        let (rl, resource) = (rl.clone(), format!("{prefix}-{i}"));
        async move { rl.try_acquire(&resource, TTL).await.unwrap() }
    });
    futures::future::join_all(attempts).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_sent_after_the_connection_was_replaced_still_follows_the_late_set() {
    let nodes = RedisNodes::spawn(3).unwrap();
    // The client's connection to the first master runs through `front` and then `slow`;
    // connections opened after `front` is retargeted go straight to the master.
    let slow = FaultProxy::start(nodes[0].addr()).unwrap();
    let front = FaultProxy::start(slow.addr()).unwrap();
    let rl = Redlock::builder([front.url(), nodes[1].url(), nodes[2].url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    front.retarget(nodes[0].addr());
    slow.delay(Duration::from_millis(1500), Duration::ZERO, Duration::ZERO);

    // The other two masters grant each lock; the first master's SETs time out on the way, and
    // the third timeout in a row replaces its connection.
    let replied_before = slow.stats().bytes_down;
    let locks = acquire_together(&rl, "late", 3).await;
    tokio::time::sleep(NODE_TIMEOUT * 2).await;
    // So the releases go out on a new, fast connection, while the SETs are still on their way
    // on the old one.
    for lock in locks {
        lock.release().await.unwrap();
    }
    // The master has run the three SETs once their replies (`+OK\r\n` each) have come back.
    let keys = ["late-0", "late-1", "late-2"].map(lock_key);
    let landed_and_clean = eventually(Duration::from_secs(4), || {
        slow.stats().bytes_down >= replied_before + 3 * 5
            && keys.iter().all(|key| get(&nodes[0], key).is_none())
    })
    .await;
    assert!(
        landed_and_clean,
        "late SETs outlived their release: {:?}",
        keys.each_ref().map(|key| get(&nodes[0], key))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fenced_acquires_and_extends_on_a_restarted_master_need_one_round_trip() {
    let mut nodes = RedisNodes::spawn_with(1, &RedisServer::builder().aof(true)).unwrap();
    let proxy = FaultProxy::start(nodes[0].addr()).unwrap();
    let rl = Redlock::builder([proxy.url()])
        .node_timeout(Duration::from_secs(3))
        .fencing(true)
        .build()
        .unwrap();
    let mut lock = rl.acquire("kept", TTL).await.unwrap();

    // The master keeps its keys (AOF) but forgets its scripts.
    nodes[0].restart().unwrap();
    let mut connected = false;
    for _ in 0..20 {
        if rl.connect().await.is_ok() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(connected, "the client reconnects to the restarted master");

    // One round trip each: the scripts were loaded with the connection, so neither request
    // meets a NOSCRIPT and falls back to loading them (EVALSHA, SCRIPT LOAD, EVALSHA).
    let loads_before = command_calls(&nodes[0], "script|load");
    let scripts_before = command_calls(&nodes[0], "evalsha");
    lock.extend(TTL).await.unwrap();
    let fenced = rl.try_acquire("fresh", TTL).await.unwrap();
    assert!(fenced.fencing_token().is_some_and(|fence| fence > 0));
    assert!(loads_before > 0, "the connection loaded the scripts");
    assert_eq!(command_calls(&nodes[0], "script|load"), loads_before);
    assert_eq!(noscript_errors(&nodes[0]), 0);
    assert_eq!(
        command_calls(&nodes[0], "evalsha") - scripts_before,
        2,
        "one script call each for the extend and the acquire"
    );
}

/// How many replies `server` has given a NOSCRIPT error since it started.
fn noscript_errors(server: &RedisServer) -> u64 {
    let info: String = query(server, redis::cmd("INFO").arg("errorstats"));
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |count| count.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_connection_loads_the_scripts_ahead_of_its_first_request() {
    let nodes = RedisNodes::spawn(1).unwrap();
    let rl = builder(&nodes).fencing(true).connected().await;
    let mut lock = rl.try_acquire("first", TTL).await.unwrap();
    lock.extend(TTL).await.unwrap();
    lock.release().await.unwrap();
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(&mut direct(&nodes[0]))
        .unwrap();
    assert!(!errors.contains("NOSCRIPT"), "{errors}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_counts_only_the_nodes_that_answered_it() {
    let nodes = five();
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    // The first two masters receive the SET but do not run it yet: their requests are still in
    // flight when the other three have granted.
    for i in [0, 1] {
        nodes[i].pause().unwrap();
    }
    let lock = rl.try_acquire("counted", TTL).await.unwrap();
    // Two of the three that granted stop answering: only one can confirm the release.
    for i in [3, 4] {
        nodes[i].pause().unwrap();
    }
    let released = lock.release().await;
    for i in [0, 1, 3, 4] {
        nodes[i].resume().unwrap();
    }
    match released {
        Err(Error::NotReleased { confirmed, .. }) => assert_eq!(confirmed, 1),
        other => panic!("expected NotReleased with one confirmation, got {other:?}"),
    }
    assert!(
        eventually(Duration::from_secs(3), || present(
            &nodes,
            &lock_key("counted")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_follows_an_acquire_still_in_flight_and_counts_that_masters_answer() {
    let nodes = five();
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    // The SETs to the first two masters are in flight when the other three have granted.
    for i in [0, 1] {
        nodes[i].pause().unwrap();
    }
    let lock = rl.try_acquire("behind", TTL).await.unwrap();
    // One of the three that granted stops answering: two confirmations there, one short.
    nodes[4].pause().unwrap();
    let release = tokio::spawn(lock.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The late SETs run, and the release queued behind each of them confirms too.
    for i in [0, 1] {
        nodes[i].resume().unwrap();
    }
    let released = tokio::time::timeout(Duration::from_secs(1), release).await;
    nodes[4].resume().unwrap();
    let released = released
        .expect("the release waited for the paused master")
        .unwrap();
    // It returns at the quorum: the two that answered at once, and a late one.
    assert_eq!(released.unwrap().deleted, 3);
    assert!(
        eventually(Duration::from_secs(3), || present(
            &nodes,
            &lock_key("behind")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_probe_that_is_never_polled_again_does_not_keep_a_master_out_for_good() {
    let nodes = RedisNodes::spawn(1).unwrap();
    let rl = Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    nodes[0].pause().unwrap();
    // Over a second of timeouts (of reads, which leave nothing to roll back): the master counts
    // as unresponsive.
    let hung = Instant::now();
    while hung.elapsed() < Duration::from_millis(1300) {
        let status = rl.inspect("stuck").await.unwrap();
        assert!(matches!(status.nodes[0].state, NodeState::Unreachable(_)));
    }
    // A read that holds the probe, polled once and then left alone: other reads meanwhile are
    // not sent.
    let mut held = None;
    for _ in 0..40 {
        let mut read = Box::pin(rl.inspect("stuck"));
        let pending = tokio::time::timeout(Duration::from_millis(50), &mut read)
            .await
            .is_err();
        if pending && probe_is_held(&rl.inspect("stuck").await.unwrap()) {
            held = Some(read);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stuck = held.expect("a read is left holding the probe");

    nodes[0].resume().unwrap();
    let mut acquired = false;
    let back = Instant::now();
    while back.elapsed() < Duration::from_secs(5) && !acquired {
        if let Ok(lock) = rl.try_acquire("other", TTL).await {
            lock.release().await.unwrap();
            acquired = true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        acquired,
        "the master answers again while a probe is left pending"
    );
    drop(stuck);
}

/// Whether the only node's request failed unsent because another request holds its probe.
fn probe_is_held(status: &Inspection) -> bool {
    matches!(&status.nodes[0].state,
        NodeState::Unreachable(e) if matches!(e.kind(), NodeErrorKind::Unresponsive))
}

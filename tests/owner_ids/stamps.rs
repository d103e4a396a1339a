//! The order of an owner's attempts (their stamps, see `Redlock::acquire_as`): a restarted
//! worker takes its lock over whatever the clock of the process that wrote it, a stamp far
//! ahead is not followed, and an earlier-stamped lock handed back late learns it lost.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use quorumlock::Redlock;
use quorumlock_testkit::{FaultProxy, RedisNodes};

const OWNER: &str = "w";
const TTL: Duration = Duration::from_secs(10);

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The ordered part of an owner value (stamp, then random digits).
fn ordered(value: &str) -> &str {
    value.get(3..35).unwrap_or("")
}

/// The stamp of an owner value, in µs.
fn stamp(value: &str) -> u64 {
    u64::from_str_radix(&value[3..16], 16).unwrap()
}

/// An owner value stamped `stamp_us`, as another process of the owner writes it.
fn owner_value(stamp_us: u64) -> String {
    format!("ql-{stamp_us:013x}{:019x}@{OWNER}", 0x5eed)
}

/// A client of `nodes` with one attempt per call, connected first.
async fn trying(nodes: &RedisNodes) -> Redlock {
    let rl = builder(nodes)
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(rl.connect().await.unwrap().reachable, nodes.len());
    rl
}

/// A restarted worker that waits (an `acquire_timeout`) over its dead lock, written by a
/// process whose clock ran an hour ahead, is refused once, then takes the lock over through
/// the line (`acquire_queued.lua`) at its next attempt, not after the dead lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_restart_takes_over_its_dead_lock_stamped_an_hour_ahead_at_once() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let dead = owner_value(now_us() + 3_600_000_000);
    for s in nodes.iter() {
        set(s, &key, &dead, Duration::from_secs(30));
    }
    let rl = builder(&nodes)
        .acquire_timeout(Duration::from_secs(5))
        .connected()
        .await;
    let started = Instant::now();
    let lock = rl.acquire_as("r", OWNER, TTL).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(ordered(lock.token().expose()) > ordered(&dead));
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    lock.release().await.unwrap();
    assert_gone_everywhere(&nodes, &key).await;
}

/// A value stamped more than a day ahead (here an owner value of another shape, whose digits
/// read as the year 2095) is not followed: the worker waits it out, as another holder's, and
/// its stamps stay at its clock, so the restarts after it are never refused for it. Were it
/// followed, every later stamp of the owner would carry it, and each fresh process of the
/// owner would be refused at its first try.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_stamped_more_than_a_day_ahead_is_waited_out_and_not_followed() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let far = format!("ql-e1d2c3b4a5f64a1b9c8d7e6f5a4b3c2d@{OWNER}");
    for s in nodes.iter() {
        set(s, &key, &far, Duration::from_secs(2));
    }
    let waiting = builder(&nodes)
        .acquire_timeout(Duration::from_secs(5))
        .connected()
        .await;
    let lock = waiting.acquire_as("r", OWNER, TTL).await.unwrap();
    let first = lock.token().expose().to_owned();
    assert!(
        stamp(&first) < now_us() + 60_000_000,
        "the worker's stamp followed the far value: {first}"
    );
    // The far value, set on each master in turn, may still hold on the last one when a quorum
    // granted: wait it out there (the restarts below take over what holds the lock's value, and
    // are granted where nothing is left).
    let far_gone = eventually(Duration::from_secs(2), || {
        holders(&nodes, &key, &far) == 0 && holders(&nodes, &key, &first) >= 2
    });
    assert!(far_gone.await, "{:?}", values(&nodes, &key));
    // It crashes holding the lock; three restarts in turn, each with one try, each crashing.
    std::mem::forget(lock);
    let mut previous = first;
    for restart in 1..=3 {
        let rl = trying(&nodes).await;
        let lock = rl.acquire_as("r", OWNER, TTL).await;
        let lock = lock.unwrap_or_else(|e| {
            panic!("restart {restart} was refused over {previous}: {e}");
        });
        previous = lock.token().expose().to_owned();
        granted_everywhere(&nodes, &key, &previous).await;
        std::mem::forget(lock);
    }
}

/// A value at the greatest stamp 13 digits hold leaves the client that saw it ordered: were
/// it followed, every later stamp of the client would sit at that top, its attempts ordered by
/// their random digits alone, and about half its later calls would come before its own
/// earlier lock and be refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_at_the_greatest_stamp_leaves_the_clients_later_calls_in_order() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = trying(&nodes).await;
    let top = format!("ql-fffffffffffff{}@{OWNER}", "0".repeat(19));
    for s in nodes.iter() {
        set(s, "seen", &top, Duration::from_secs(2));
    }
    assert!(rl.acquire_as("seen", OWNER, TTL).await.is_err());
    let mut refused = Vec::new();
    for call in 0..12 {
        match rl.acquire_as("r", OWNER, Duration::from_secs(20)).await {
            Ok(lock) => std::mem::forget(lock),
            Err(e) => refused.push(format!("call {call}: {e}")),
        }
    }
    assert!(
        refused.is_empty(),
        "later calls of one client refused over its own earlier lock: {refused:?}"
    );
}

/// An attempt whose replies are held while a later-stamped attempt of the owner takes its
/// grants over, wins and releases, wins itself once the replies arrive: after that release,
/// with nothing of the owner left on any master. It is the earlier lock of the two, taken over
/// (`acquire_as`: two live processes of one owner take the lock from each other), and learns
/// it the way every taken-over lock does: its extend fails.
#[tokio::test(flavor = "multi_thread")]
async fn an_earlier_stamped_lock_handed_back_after_the_later_ones_release_fails_its_extend() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let x_routes: Vec<FaultProxy> = nodes
        .iter()
        .map(|s| FaultProxy::start(s.addr()).unwrap())
        .collect();
    let x = Redlock::builder(x_routes.iter().map(FaultProxy::url).collect::<Vec<_>>())
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(x.connect().await.unwrap().reachable, 3);
    let a = trying(&nodes).await;
    for client in [&x, &a] {
        let warm = client.acquire_as("warm", OWNER, TTL).await.unwrap();
        warm.release().await.unwrap();
    }

    // X's requests reach every master and run; its replies are held.
    for route in &x_routes {
        route.hold();
    }
    let racing = tokio::spawn(async move { x.acquire_as("r", OWNER, TTL).await });
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, &key) == 3).await,
        "X's requests never ran: {:?}",
        values(&nodes, &key)
    );
    let x_value = get(&nodes[0], &key).unwrap();
    let later = a.acquire_as("r", OWNER, TTL).await.unwrap();
    assert!(ordered(later.token().expose()) > ordered(&x_value));
    later.release().await.unwrap();
    assert_gone_everywhere(&nodes, &key).await;
    for route in &x_routes {
        route.deliver_held();
    }
    let mut earlier = racing.await.unwrap().expect("X's grants were all answered");
    assert!(
        earlier.extend(TTL).await.is_err(),
        "the earlier lock extended after the later one took it over and released: {:?}",
        values(&nodes, &key)
    );
    assert_gone_everywhere(&nodes, &key).await;
}

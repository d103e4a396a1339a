//! Requests that run late on the masters, after a later request of the same holder: a handed
//! lock's background renewal to a TTL shorter than the hand-off proved, a shorter extend stuck on
//! a connection the client retired, and an owner id's first attempt stuck the same way. None may
//! cut or take a key below the deadline a holder reports: a second client is refused for as long
//! as the holder says it holds, and every master keeps the key at least that long.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{FaultProxy, RedisNodes};

/// How long the slow route holds each request on its way to a master.
const SLOW: Duration = Duration::from_secs(3);

/// Three masters, each behind a proxy, and a client connected through the proxies.
async fn proxied(node_timeout: Duration) -> (RedisNodes, Vec<FaultProxy>, Redlock) {
    let nodes = RedisNodes::spawn(3).unwrap();
    let (proxies, urls) = reaching(&nodes, &[0, 1, 2]);
    let rl = Redlock::builder(urls)
        .node_timeout(node_timeout)
        .retry_count(0)
        .build()
        .unwrap();
    assert_eq!(rl.connect().await.unwrap().reachable, 3);
    (nodes, proxies, rl)
}

/// Every request sent from now on, on the connections open now, reaches its master `SLOW`
/// late; the connections the client opens next (after it retires these) are quick.
fn slow(proxies: &[FaultProxy]) {
    for proxy in proxies {
        proxy.slow_open_connections(SLOW);
    }
}

/// Until `lock` runs out (or `until`), checks every 20 ms that another client is refused and
/// that a quorum of masters keeps the key at least as long as `lock` says it holds. Returns how
/// many checks were made.
async fn holds_as_it_says(nodes: &RedisNodes, lock: &Lock, until: Instant) -> usize {
    let other = Redlock::builder(nodes.urls()).build().unwrap();
    let key = lock_key(lock.resource());
    let mut checks = 0;
    while Instant::now() < until {
        let says = lock.remaining();
        if says < Duration::from_millis(50) {
            break;
        }
        assert_quorum_keeps(nodes, "the holder", || lock.remaining(), |s| pttl(s, &key));
        if let Ok(taken) = other
            .try_acquire(lock.resource(), Duration::from_secs(10))
            .await
        {
            // Granted before the deadline for sure only if the deadline is still ahead once
            // the grant is back; a grant that a stall let run past it proves nothing.
            let left = lock.remaining();
            assert!(
                left.is_zero(),
                "a second client acquired {:?} while the holder said {left:?} left",
                taken.resource(),
            );
            break;
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    checks
}

/// Defect: a handed lock's renewal sent `PEXPIRE <TTL>` with a TTL shorter than what the
/// hand-off proved; the keys expired under a lock that still reported time left.
#[tokio::test(flavor = "multi_thread")]
async fn a_handed_locks_renewal_to_a_shorter_ttl_never_cuts_the_keys_under_it() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let settings = |nodes: &RedisNodes| {
        Redlock::builder(nodes.urls())
            .node_timeout(Duration::from_millis(100))
            .retry_delay(Duration::from_secs(1))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (settings(&nodes), settings(&nodes));
    let lock = holder.acquire("r", Duration::from_secs(10)).await.unwrap();
    granted_everywhere(&nodes, &lock_key("r"), lock.token().expose()).await;
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("r", Duration::from_millis(300)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || nodes.iter().all(|s| line(
            s,
            &lock_key("r")
        )
        .len()
            == 1))
        .await
    );
    // Between two of the waiter's attempts (one a second), so that the release hands it over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    println!("handed, {:?} left", handed.remaining());
    assert!(
        handed.remaining() > Duration::from_millis(400),
        "{:?}",
        handed.remaining()
    );
    let checks = holds_as_it_says(&nodes, &handed, Instant::now() + Duration::from_secs(2)).await;
    assert!(checks > 10, "{checks} checks");
    handed.release().await.unwrap();
}

/// Defect: a shorter extend stuck on a connection the client retired ran after a later, longer
/// extend won on new connections, and cut the keys below the deadline that extend reported.
#[tokio::test(flavor = "multi_thread")]
async fn a_shorter_extend_that_runs_late_never_cuts_a_later_extends_deadline() {
    let (nodes, proxies, rl) = proxied(Duration::from_millis(200)).await;
    let mut lock = rl.acquire("r", Duration::from_secs(10)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, &lock_key("r"))
            == 3)
        .await
    );
    slow(&proxies);
    let sent = Instant::now();
    // Three timeouts in a row retire each master's connection.
    for _ in 0..3 {
        assert!(lock.extend(Duration::from_secs(3)).await.is_err());
    }
    lock.extend(Duration::from_secs(10)).await.unwrap();
    println!("extended, {:?} left", lock.remaining());
    // The stuck requests land 3 s after they were sent; watch until well past that.
    let landed = sent + SLOW + Duration::from_secs(2);
    let checks = holds_as_it_says(&nodes, &lock, landed).await;
    assert!(
        Instant::now() >= landed,
        "the lock ran out after {checks} checks"
    );
    lock.release().await.unwrap();
}

/// Defect: an owner id's first attempt, stuck on a connection the client retired, took over the
/// key its second attempt had won, and its rollback then deleted it.
#[tokio::test(flavor = "multi_thread")]
async fn an_owners_attempt_that_runs_late_never_takes_over_a_later_grant() {
    let (nodes, proxies, rl) = proxied(Duration::from_millis(200)).await;
    slow(&proxies);
    let sent = Instant::now();
    assert!(rl
        .acquire_as("r", "worker-7", Duration::from_secs(10))
        .await
        .is_err());
    // More timeouts in a row retire each master's connection: other resources until one is
    // taken on the new connections.
    let mut retired = false;
    for i in 0..10 {
        if let Ok(other) = rl
            .try_acquire(&format!("x{i}"), Duration::from_secs(10))
            .await
        {
            other.release().await.unwrap();
            retired = true;
            break;
        }
    }
    assert!(retired, "the slow connections were never retired");
    assert!(
        Instant::now() < sent + SLOW,
        "the first attempt landed already"
    );
    let lock = rl
        .acquire_as("r", "worker-7", Duration::from_secs(10))
        .await
        .unwrap();
    let token = lock.token().expose().to_owned();
    let landed = sent + SLOW + Duration::from_secs(2);
    let checks = holds_as_it_says(&nodes, &lock, landed).await;
    assert!(checks > 10, "{checks} checks");
    let values: Vec<Option<String>> = nodes.iter().map(|s| get(s, &lock_key("r"))).collect();
    println!("winner {token}, masters {values:?}");
    assert!(
        holders(&nodes, &lock_key("r"), &token) >= 2,
        "the winner's token stays on a quorum: {values:?}"
    );
    lock.release().await.unwrap();
}

/// Defect: an owner id's attempt that lost while its request to one master was still on its
/// way read there the grant of a later attempt of the same owner (another task's), took it over,
/// and its rollback then deleted it: the later lock, won on that master and one other, was left
/// with one master of three, and a third client took the resource from under it.
#[tokio::test(flavor = "multi_thread")]
async fn an_owners_lost_attempt_still_on_its_way_never_takes_over_a_later_grant() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let ttl = Duration::from_secs(10);
    // The first client's route to master 2 is slow; its node timeout waits it out, and it
    // makes one attempt.
    let route = FaultProxy::start(nodes[2].addr()).unwrap();
    let urls = vec![nodes[0].url(), nodes[1].url(), route.url()];
    let first = Redlock::builder(urls)
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(first.connect().await.unwrap().reachable, 3);
    let second = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(second.connect().await.unwrap().reachable, 3);
    // Someone else holds masters 0 and 1: the first attempt loses there at once, while its
    // request to master 2 is still on its way.
    set(&nodes[0], &key, "someone-else", ttl);
    set(&nodes[1], &key, "someone-else", ttl);
    let before: Vec<u64> = nodes.iter().map(script_calls).collect();
    route.delay(Duration::from_millis(400), Duration::ZERO, Duration::ZERO);
    // What the route has passed on to master 2: nothing new until the first's request lands.
    let first_sent = route.stats().bytes_up;
    let lost = tokio::spawn(async move { first.acquire_as("r", "worker-7", ttl).await });
    // Lost on masters 0 and 1 (however late the task started), and not yet on master 2.
    assert!(
        eventually(Duration::from_secs(2), || (0..2)
            .all(|i| script_calls(&nodes[i]) > before[i]))
        .await,
        "the first attempt never reached masters 0 and 1"
    );
    // Master 1 falls free; another task's attempt under the same owner wins masters 1 and 2
    // before the first attempt's request reaches master 2.
    del(&nodes[1], &key);
    let lock = second.acquire_as("r", "worker-7", ttl).await.unwrap();
    assert_eq!(
        route.stats().bytes_up,
        first_sent,
        "the first attempt reached master 2 before the second won: the scenario did not happen"
    );
    let token = lock.token().expose().to_owned();
    assert_eq!(holders(&nodes, &key, &token), 2);
    assert!(lost.await.unwrap().is_err());
    // The first attempt's requests land (each 400 ms late), and whatever it does after: the
    // lock keeps both masters throughout.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let values: Vec<Option<String>> = nodes.iter().map(|s| get(s, &key)).collect();
        assert_eq!(
            holders(&nodes, &key, &token),
            2,
            "the lock keeps its quorum: {values:?} (token {token})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // So nobody else takes the resource while the lock holds, master 0 free or not.
    del(&nodes[0], &key);
    let third = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert!(third.try_acquire("r", ttl).await.is_err());
    lock.release().await.unwrap();
}

//! Attacks on mutual exclusion in the owner-id path (`Redlock::acquire_as`), against real
//! redis-server processes. Each test builds one order of requests on the masters and checks the
//! guarantee: while a lock says it holds (`remaining()`), its key stays on a quorum of masters
//! and no other client (another owner, or a plain `try_acquire`) can take the resource.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{FaultProxy, RedisNodes};

const TTL: Duration = Duration::from_secs(10);

/// Checks, once, that `lock` still holds as it says: its token on a quorum, and a plain
/// client and another owner both refused. Panics with what the masters hold otherwise.
async fn still_exclusive(nodes: &RedisNodes, lock: &Lock, what: &str) {
    let key = lock_key(lock.resource());
    let token = lock.token().expose().to_owned();
    let says = lock.remaining();
    let vals = values(nodes, &key);
    println!("[{what}] holder says {says:?} left; token {token}; masters {vals:?}");
    assert!(
        says > Duration::from_secs(1),
        "[{what}] the lock ran out: {says:?}"
    );
    let quorum = nodes.len() / 2 + 1;
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let plain = other.try_acquire(lock.resource(), TTL).await;
    let owner = other.acquire_as(lock.resource(), "intruder", TTL).await;
    let after = values(nodes, &key);
    assert!(
        plain.is_err() && owner.is_err(),
        "[{what}] MUTUAL EXCLUSION BROKEN: the holder says {says:?} left, yet a plain client \
         acquired: {} and another owner acquired: {}; masters before {vals:?}, after {after:?}",
        plain.is_ok(),
        owner.is_ok()
    );
    assert!(
        holders(nodes, &key, &token) >= quorum,
        "[{what}] the holder says {says:?} left but its token is on fewer than {quorum} \
         masters: {vals:?}"
    );
}

/// A later attempt of the same owner in the same process takes over the keys of an earlier
/// lock that is still held, then fails (its quorum answered too late to leave validity), and
/// its rollback deletes the keys it took over. The earlier lock still says it holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_later_failed_attempt_of_the_same_process_never_deletes_an_earlier_live_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).build().unwrap();
    let held = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &token)
            == 3)
        .await
    );

    // A second client of the same process (same process id, a later attempt number), under
    // the same owner, whose routes to masters 1 and 2 are slow: each request 520 ms late,
    // inside its 900 ms node timeout, but two requests (read, then compare-and-swap) take
    // longer than its 1 s TTL.
    let (proxies, urls) = reaching(&nodes, &[0, 1, 2]);
    let second = Redlock::builder(urls)
        .node_timeout(Duration::from_millis(900))
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    assert_eq!(second.connect().await.unwrap().reachable, 3);
    for proxy in &proxies[1..] {
        proxy.delay(Duration::from_millis(520), Duration::ZERO, Duration::ZERO);
    }
    let failed = second
        .acquire_as("r", "worker-7", Duration::from_millis(1000))
        .await;
    println!(
        "the later attempt: {:?}",
        failed.as_ref().map(|l| l.token().expose().to_owned())
    );
    assert!(failed.is_err(), "the later attempt was meant to fail");
    // Let its rollback land.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_exclusive(&nodes, &held, "after the later attempt's rollback").await;
    held.release().await.unwrap();
}

/// As above, but the later attempt is cancelled mid-way (its future dropped after it took the
/// keys over on some masters): the background rollback deletes them.
#[tokio::test(flavor = "multi_thread")]
async fn a_later_cancelled_attempt_of_the_same_process_never_deletes_an_earlier_live_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).build().unwrap();
    let held = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &token)
            == 3)
        .await
    );

    let (proxies, urls) = reaching(&nodes, &[0, 1, 2]);
    let second = Redlock::builder(urls)
        .node_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    assert_eq!(second.connect().await.unwrap().reachable, 3);
    for proxy in &proxies[1..] {
        proxy.delay(Duration::from_millis(400), Duration::ZERO, Duration::ZERO);
    }
    let attempt = second.acquire_as("r", "worker-7", TTL);
    // Master 0 answers at once (taken over); masters 1 and 2 have answered the read and the
    // compare-and-swap is on its way when the caller gives up.
    let cancelled = tokio::time::timeout(Duration::from_millis(600), attempt).await;
    assert!(cancelled.is_err(), "the attempt was meant to be cancelled");
    println!("cancelled; masters now {:?}", values(&nodes, &key));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_exclusive(&nodes, &held, "after the cancelled attempt's rollback").await;
    held.release().await.unwrap();
}

/// A client that waits slow routes out (3 s node timeout) and makes one attempt per acquire.
fn waiting_out(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap()
}

/// Another road to the defect of `tests/extends/late_requests.rs`
/// (`an_owners_lost_attempt_still_on_its_way_never_takes_over_a_later_grant`): the attempt that
/// wins started first (one of its requests was slow), and the attempt that loses started later.
/// The loser's request to one master runs late, reads the winner's grant there and names it; it
/// must take nothing over (its attempt has lost), nor may its rollback touch that key.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_attempt_with_a_later_number_never_takes_over_a_grant_won_after_it_started() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    // The winner's route to master 1 is slow (500 ms); the loser's route to master 2 is
    // slower (1 s each request). Both wait their routes out (3 s node timeout), one attempt.
    let winner_route = FaultProxy::start(nodes[1].addr()).unwrap();
    let loser_route = FaultProxy::start(nodes[2].addr()).unwrap();
    let winner = waiting_out(vec![nodes[0].url(), winner_route.url(), nodes[2].url()]);
    let loser = waiting_out(vec![nodes[0].url(), nodes[1].url(), loser_route.url()]);
    assert_eq!(winner.connect().await.unwrap().reachable, 3);
    assert_eq!(loser.connect().await.unwrap().reachable, 3);
    set(&nodes[0], &key, "someone-else", TTL);
    set(&nodes[1], &key, "someone-else", TTL);
    winner_route.delay(Duration::from_millis(500), Duration::ZERO, Duration::ZERO);
    loser_route.delay(Duration::from_secs(1), Duration::ZERO, Duration::ZERO);

    // The winner's attempt draws its number first: refused on master 0, granted on master 2,
    // its request to master 1 on its way.
    // Each step waits until the masters have run what it sent (however late its task started),
    // well within the routes' delays.
    let before: Vec<u64> = nodes.iter().map(script_calls).collect();
    let ran = |on: &[(usize, u64)]| {
        on.iter()
            .all(|&(i, n)| script_calls(&nodes[i]) >= before[i] + n)
    };
    // What the winner's route has passed on to master 1: nothing new until its request lands.
    let winner_sent = winner_route.stats().bytes_up;
    let winning = tokio::spawn(async move { winner.acquire_as("r", "worker-7", TTL).await });
    assert!(eventually(Duration::from_secs(2), || ran(&[(0, 1), (2, 1)])).await);
    // The loser's attempt draws the next number: refused on masters 0 and 1 at once, lost; its
    // request to master 2 is still on its way.
    let losing = tokio::spawn(async move {
        let lost = loser.acquire_as("r", "worker-7", TTL).await;
        (loser, lost)
    });
    assert!(eventually(Duration::from_secs(2), || ran(&[(0, 2), (1, 1)])).await);
    // Master 1 falls free before the winner's request lands there.
    del(&nodes[1], &key);
    assert_eq!(
        winner_route.stats().bytes_up,
        winner_sent,
        "the winner's request reached master 1 before it fell free: the scenario did not happen"
    );
    let lock = winning.await.unwrap().unwrap();
    let token = lock.token().expose().to_owned();
    println!("won {token} at {:?}", values(&nodes, &key));
    assert_eq!(holders(&nodes, &key, &token), 2);

    // The loser's request lands on master 2, and whatever follows (its compare-and-swap, its
    // rollback), 1 s apart each.
    let until = Instant::now() + Duration::from_secs(4);
    let mut seen: Vec<Vec<Option<String>>> = Vec::new();
    while Instant::now() < until {
        let vals = values(&nodes, &key);
        if seen.last() != Some(&vals) {
            println!(
                "{:?} left by the holder; masters {vals:?}",
                lock.remaining()
            );
            seen.push(vals);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (loser, lost) = losing.await.unwrap();
    assert!(lost.is_err(), "the second attempt was meant to lose");
    // Master 0's holder goes: the lock must still keep everyone else out.
    del(&nodes[0], &key);
    still_exclusive(&nodes, &lock, "after the loser's late requests").await;
    assert!(
        seen.iter().all(|vals| vals
            .iter()
            .filter(|v| v.as_deref() == Some(&*token))
            .count()
            >= 2),
        "the lock lost its quorum while its holder said it held: {seen:?}"
    );
    lock.release().await.unwrap();
    drop(loser);
}

/// An attempt that has won keeps its requests still out from taking over a later grant of the
/// same owner: process A's acquire wins on masters 0 and 1 while its request to master 2 is on
/// a slow route; process B, same owner id, then takes the lock over (masters 0 and 1) and is
/// granted master 2. A's late request lands on master 2 and reads B's value there; had it taken
/// that over, A's release would then free it, and B, still valid, would keep two masters of
/// three: one master lost (within what B's lock survives) and a third client takes the resource.
#[tokio::test(flavor = "multi_thread")]
async fn a_won_attempts_late_request_never_takes_over_a_later_grant_of_the_owner() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let slow = FaultProxy::start(nodes[2].addr()).unwrap();
    let first = waiting_out(vec![nodes[0].url(), nodes[1].url(), slow.url()]);
    assert_eq!(first.connect().await.unwrap().reachable, 3);
    let second = connected(&nodes).await;
    slow.delay(Duration::from_millis(600), Duration::ZERO, Duration::ZERO);

    let a = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let b = second.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = b.token().expose().to_owned();
    assert_eq!(
        holders(&nodes, &key, &token),
        3,
        "B was meant to hold every master before A's request lands: {:?}",
        values(&nodes, &key)
    );
    // A's request lands on master 2 (600 ms), and whatever it sends next (600 ms more).
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    println!("after A's late request: {:?}", values(&nodes, &key));
    a.release().await.ok();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        holders(&nodes, &key, &token),
        3,
        "the later grant kept every master it was granted: {:?}",
        values(&nodes, &key)
    );
    del(&nodes[0], &key);
    still_exclusive(&nodes, &b, "after master 0 lost B's key").await;
    b.release().await.unwrap();
}

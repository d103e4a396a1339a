//! Waiting for a release without polling: waiters woken by the masters' release announcements,
//! one subscriber connection per client and node, and the hand-off of each release to one
//! waiter of a client, against five real, independent redis-server masters.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Lock, Redlock, Stats};
use quorumlock_testkit::figures::percentile;
use quorumlock_testkit::{RedisNodes, RedisServer};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(10);

/// How many clients are subscribed to the hand-offs of `resource` on `server`: each client
/// has a sharded channel of its own per resource, `<key>:released:<client>`.
fn subscribers(server: &RedisServer, resource: &str) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .arg(quorumlock::companion_key(
            &lock_key(resource),
            ":released:*",
        ))
        .query(&mut direct(server))
        .unwrap();
    channels.len()
}

/// How many pub/sub connections `server` has.
fn pubsub_connections(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut direct(server))
        .unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_wake_on_release_far_sooner_than_the_retry_delay() {
    let nodes = five();
    // A waiter in line polls every retry delay, or every third of its entry lease (10 node
    // timeouts) if that is sooner: every 3.3 s here, so that polls, which count as retries not
    // woken by a release, stay few however slow the run.
    let retry_delay = Duration::from_millis(3500);
    let clients: Vec<Redlock> = (0..8)
        .map(|_| {
            builder(&nodes)
                .node_timeout(Duration::from_secs(1))
                .retry_delay(retry_delay)
                .retry_jitter(Duration::ZERO)
                .retry_count(10_000)
                .build()
                .unwrap()
        })
        .collect();
    // For scale: an uncontended acquire, measured in the same run on the same machine.
    let mut alone = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let lock = clients[0].acquire("alone", TTL).await.unwrap();
        alone.push(start.elapsed());
        lock.release().await.unwrap();
    }
    alone.sort();
    const ROUNDS: usize = 64;
    let taken = Arc::new(AtomicUsize::new(0));
    // (when, true = acquired / false = about to release)
    let events = Arc::new(Mutex::new(Vec::<(Instant, bool, usize)>::new()));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .enumerate()
        .map(|(id, rl)| {
            let (taken, events) = (taken.clone(), events.clone());
            tokio::spawn(async move {
                while taken.load(Ordering::SeqCst) < ROUNDS {
                    let lock = rl.acquire("contended", TTL).await.unwrap();
                    events.lock().unwrap().push((Instant::now(), true, id));
                    taken.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    events.lock().unwrap().push((Instant::now(), false, id));
                    lock.release().await.unwrap();
                    // Step back, so that the next holder is one of the waiters.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let took = started.elapsed();

    let mut events = events.lock().unwrap().clone();
    events.sort_by_key(|(at, _, _)| *at);
    let same_client = events
        .windows(2)
        .filter(|p| !p[0].1 && p[1].1 && p[0].2 == p[1].2)
        .count();
    // Mutual exclusion: acquisitions and releases alternate.
    for pair in events.windows(2) {
        assert_ne!(pair[0].1, pair[1].1, "two holders at once");
    }
    let mut gaps: Vec<Duration> = events
        .windows(2)
        .filter(|pair| !pair[0].1 && pair[1].1)
        .map(|pair| pair[1].0 - pair[0].0)
        .collect();
    gaps.sort();
    let at = |sorted: &[Duration], p| percentile(sorted, p).unwrap_or_default();
    let (median, p90) = (at(&gaps, 0.5), at(&gaps, 0.9));
    let total = |count: fn(&Stats) -> u64| clients.iter().map(|c| count(&c.stats())).sum::<u64>();
    let (attempts, acquired) = (total(|s| s.attempts), total(|s| s.acquired));
    let (wakeups, contended) = (total(|s| s.wakeups), total(|s| s.contended));
    // Every acquire returned a lock, so every attempt beyond the successful ones was a retry.
    let retries = attempts - acquired;
    println!(
        "{} handovers among 8 clients in {took:?}: release → next acquisition median {median:?}, \
         p90 {p90:?}, max {:?} (retry delay {retry_delay:?}; an uncontended acquire takes {:?}); \
         {retries} retries, {wakeups} of them woken by a release, {contended} contended attempts",
        gaps.len(),
        gaps[gaps.len() - 1],
        at(&alone, 0.5),
    );
    assert!(gaps.len() >= ROUNDS - 1);
    assert!(
        same_client < gaps.len() / 4,
        "the waiters took it: {same_client} self-handovers"
    );
    // A retry not started by a wake-up waits out the retry delay (or, after a vote split among
    // woken waiters, a short pause): polling would start none of them early.
    assert!(wakeups > 0);
    assert!(
        2 * wakeups > retries,
        "only {wakeups} of {retries} retries were woken by a release"
    );

    // Every waiter is gone, and so is every subscription, once it has lingered.
    let unsubscribed = eventually(UNSUBSCRIBED_WITHIN, || {
        nodes.iter().all(|s| subscribers(s, "contended") == 0)
    })
    .await;
    assert!(unsubscribed);
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_of_one_client_share_one_subscriber_connection_per_node_and_leave_it_when_done() {
    let nodes = five();
    // Waiters poll every 2 s (the retry delay, under a third of a 10 s entry lease): none
    // between taking a place and the hand-off. The holder's releases reserve a key for the
    // head as long as its own entry lease, far more than the node timeout a handed lock must
    // have left to be held.
    let holder = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let waiters = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .retry_count(100)
        .build()
        .unwrap();
    // Nobody has waited yet: no subscriber connection at all.
    waiters
        .acquire("free", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(nodes.iter().all(|s| pubsub_connections(s) == 0));

    let lock = acquired_everywhere(&nodes, &holder, "shared", TTL).await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let rl = waiters.clone();
            tokio::spawn(async move {
                let lock = rl.acquire("shared", TTL).await.unwrap();
                lock.release().await.unwrap();
            })
        })
        .collect();
    let one_each = eventually(Duration::from_secs(2), || {
        nodes.iter().all(|s| subscribers(s, "shared") == 1)
    })
    .await;
    assert!(
        one_each,
        "each node has exactly one subscriber for the four waiters"
    );
    assert!(nodes.iter().all(|s| pubsub_connections(s) == 1));
    // Every waiter has taken its place in line on every master and is parked.
    let parked = eventually(Duration::from_secs(10), || {
        nodes
            .iter()
            .all(|s| line(s, &lock_key("shared")).len() == 4)
    })
    .await;
    assert!(parked, "{:?}", waiters.stats());
    let before = waiters.stats();

    let released = Instant::now();
    lock.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let all_four = released.elapsed();
    let after = waiters.stats();
    let woken = after.wakeups - before.wakeups;
    println!(
        "four waiters took the lock in turn {all_four:?} after the release (retry delay 2 s), \
         {woken} woken by a release"
    );
    // A parked waiter retries when a release is handed to it, or after the 2 s retry delay:
    // each of the four got in on a hand-off, none by waiting the delay out.
    assert_eq!(after.acquired - before.acquired, 4);
    assert!(woken >= 4, "{before:?} → {after:?}");

    // The channel lingers: another wait right after needs no new SSUBSCRIBE, and its first
    // attempt already takes a place in line (no plain attempt first).
    assert!(nodes.iter().all(|s| subscribers(s, "shared") == 1));
    let subscribes = |s: &RedisServer| command_calls(s, "ssubscribe");
    assert!(
        nodes.iter().all(|s| subscribes(s) > 0),
        "the subscriptions were counted"
    );
    let before: Vec<u64> = nodes.iter().map(subscribes).collect();
    // The last waiter's release returned at a quorum: a master it has not reached yet would
    // refuse the holder, and then grant the new waiter instead of lining it up.
    assert_gone_everywhere(&nodes, &lock_key("shared")).await;
    let lock = acquired_everywhere(&nodes, &holder, "shared", TTL).await;
    let (attempts_before, _, _) = counts(&waiters);
    let again = {
        let rl = waiters.clone();
        tokio::spawn(async move { rl.acquire("shared", TTL).await.unwrap().release().await })
    };
    let queued = eventually(Duration::from_secs(2), || {
        nodes
            .iter()
            .all(|s| line(s, &lock_key("shared")).len() == 1)
    })
    .await;
    assert!(queued);
    lock.release().await.unwrap();
    again.await.unwrap().unwrap();
    let (attempts_after, _, _) = counts(&waiters);
    assert_eq!(
        attempts_after - attempts_before,
        1,
        "one attempt that took its place in line, and none on the hand-off: held as announced"
    );
    let after: Vec<u64> = nodes.iter().map(subscribes).collect();
    assert_eq!(
        before, after,
        "no SSUBSCRIBE for a wait on a lingering channel"
    );

    let left = eventually(UNSUBSCRIBED_WITHIN, || {
        nodes.iter().all(|s| subscribers(s, "shared") == 0)
    })
    .await;
    assert!(
        left,
        "unsubscribed once no waiter remains and the channel lingered"
    );
}

/// A channel stays subscribed for 2 s after its last waiter left, and the subscriber drops it at
/// its next check (every 2 s).
const UNSUBSCRIBED_WITHIN: Duration = Duration::from_secs(6);

/// `(attempts, wakeups, acquired)` of `rl` so far.
fn counts(rl: &Redlock) -> (u64, u64, u64) {
    let s = rl.stats();
    (s.attempts, s.wakeups, s.acquired)
}

/// A client whose retry delay outlasts the test: only a hand-off can get its waiters in. (A
/// waiter in line still renews its entry every third of the entry lease.)
fn patient(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(600))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
}

/// Lines up one waiter for `resource` (held by another client) per client in `clients`, one
/// at a time, each once the previous one has its place in line on every master and its client
/// is subscribed. Each sends its place in line and its lock to the receiver once it gets in.
async fn line_up(
    nodes: &RedisNodes,
    clients: &[Redlock],
    resource: &'static str,
) -> (Vec<JoinHandle<()>>, UnboundedReceiver<(usize, Lock)>) {
    let (won, winners) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (place, rl) in clients.iter().enumerate() {
        let (rl, won) = (rl.clone(), won.clone());
        tasks.push(tokio::spawn(async move {
            let lock = rl.acquire(resource, TTL).await.unwrap();
            let _ = won.send((place, lock));
        }));
        let parked = eventually(Duration::from_secs(10), || {
            nodes.iter().all(|s| {
                line(s, &lock_key(resource)).len() == place + 1
                    && subscribers(s, resource) == place + 1
            })
        })
        .await;
        assert!(parked, "waiter {place} never took its place");
    }
    (tasks, winners)
}

/// The next lock handed over, with its holder's place in line.
async fn next_winner(winners: &mut UnboundedReceiver<(usize, Lock)>) -> (usize, Lock) {
    let next = tokio::time::timeout(Duration::from_secs(10), winners.recv()).await;
    next.expect("a release handed the lock to nobody")
        .expect("every waiter is gone")
}

#[tokio::test(flavor = "multi_thread")]
async fn each_release_hands_the_lock_to_the_client_that_waited_longest() {
    const WAITERS: usize = 5;
    let nodes = five();
    let holder = connected(&nodes).await;
    let clients: Vec<Redlock> = (0..WAITERS).map(|_| patient(&nodes)).collect();
    let mut held = acquired_everywhere(&nodes, &holder, "handoff", TTL).await;
    let (tasks, mut winners) = line_up(&nodes, &clients, "handoff").await;

    // Each holder releases as usual. The retry delay outlasts the test, so every lock passed on
    // was handed over by a release.
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        held.release().await.unwrap();
        let (place, lock) = next_winner(&mut winners).await;
        order.push(place);
        held = lock;
    }
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "first come, first served"
    );
    for rl in &clients {
        let (_, wakeups, acquired) = counts(rl);
        assert_eq!(acquired, 1);
        assert!(wakeups >= 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_off_heard_from_every_node_wakes_only_the_waiter_it_names() {
    const WAITERS: usize = 4;
    let nodes = five();
    let holder = connected(&nodes).await;
    let clients: Vec<Redlock> = (0..WAITERS).map(|_| patient(&nodes)).collect();
    let held = acquired_everywhere(&nodes, &holder, "heard", TTL).await;
    let (tasks, mut winners) = line_up(&nodes, &clients, "heard").await;
    let ids = line(&nodes[0], &lock_key("heard"));
    assert!(
        nodes.iter().all(|s| line(s, &lock_key("heard")) == ids),
        "one order everywhere"
    );

    // A release taken apart: the key reserved for the head everywhere first, then the head's id
    // announced by every node, so that no attempt can race it.
    let before: Vec<_> = clients.iter().map(counts).collect();
    for server in nodes.iter() {
        set(
            server,
            &lock_key("heard"),
            &format!("~queued:{}", ids[0]),
            TTL,
        );
    }
    // The head's client alone listens on the channel named after it (a waiter's id starts with
    // its client's).
    let channel =
        quorumlock::companion_key(&lock_key("heard"), &format!(":released:{}", &ids[0][..16]));
    for server in nodes.iter() {
        let listeners: i64 = redis::cmd("SPUBLISH")
            .arg(&channel)
            .arg(&ids[0])
            .query(&mut direct(server))
            .unwrap();
        assert_eq!(listeners, 1, "{channel}");
    }
    let (place, lock) = next_winner(&mut winners).await;
    assert_eq!(place, 0, "the head of the line");
    // Time for any other waiter woken to show in the counters.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after: Vec<_> = clients.iter().map(counts).collect();
    let (attempts, wakeups, acquired) = (
        after[0].0 - before[0].0,
        after[0].1 - before[0].1,
        after[0].2 - before[0].2,
    );
    // Five copies: one wake-up and one attempt, or a second of each for a copy that came
    // during the attempt.
    assert!(
        (1..=2).contains(&wakeups) && (1..=2).contains(&attempts),
        "{before:?} → {after:?}"
    );
    assert_eq!(acquired, 1);
    // The others were not woken (they may have renewed their place in line meanwhile: a
    // waiter attempts at least every third of its entry lease).
    for (b, a) in before[1..].iter().zip(&after[1..]) {
        assert_eq!(
            (b.1, b.2),
            (a.1, a.2),
            "a waiter the hand-off did not name was woken"
        );
    }

    // The rest of the line goes through as usual.
    drop(held);
    let mut lock = lock;
    for _ in 1..WAITERS {
        lock.release().await.unwrap();
        lock = next_winner(&mut winners).await.1;
    }
    lock.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
}

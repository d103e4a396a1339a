//! Holding locks the way users do — `with_lock` with renewal and a loss signal, waiting for a
//! release without polling, multi-resource locks, inspect and stats — against five real,
//! independent redis-server masters.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, HoldOptions, Lock, LossReason, NodeState, Redlock, Verdict};
use quorumlock_testkit::{RedisNodes, RedisServer};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(10);

/// How many clients are subscribed to `channel` on `server`.
fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut direct(server))
        .unwrap();
    reply.1
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_holds_a_lock_for_five_ttls_while_another_client_keeps_trying_and_never_gets_in()
{
    let nodes = five();
    let holder = client(&nodes);
    let rival = client(&nodes);
    let ttl = Duration::from_millis(300);
    let (holding, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let tries = AtomicUsize::new(0);
    let wins = Mutex::new(Vec::<Instant>::new());

    let rival_loop = async {
        // Starts once the holder has it, and keeps trying until the body is done.
        while !holding.load(Ordering::SeqCst) {
            if stop.load(Ordering::SeqCst) {
                return; // the hold failed before its body ran: the assertions below report it
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        while !stop.load(Ordering::SeqCst) {
            tries.fetch_add(1, Ordering::SeqCst);
            if let Ok(lock) = rival.try_acquire("five-ttls", ttl).await {
                wins.lock().unwrap().push(Instant::now());
                lock.release().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (holding, stop) = (&holding, &stop);
    let hold = async {
        let out = holder
            .with_lock("five-ttls", ttl, |held| async move {
                holding.store(true, Ordering::SeqCst);
                let started = Instant::now();
                tokio::time::sleep(ttl * 5 + ttl / 3).await;
                assert!(held.is_held());
                assert!(held.remaining() > Duration::ZERO);
                (held.renewals(), started, Instant::now())
            })
            .await;
        stop.store(true, Ordering::SeqCst);
        out
    };
    let (out, ()) = tokio::join!(hold, rival_loop);
    let (renewals, started, ended) = out.unwrap();
    let held_for = ended - started;
    let tries = tries.load(Ordering::SeqCst);
    // A try still in flight when the body ended may win after the release: that is no overlap.
    let during = wins.lock().unwrap().iter().filter(|w| **w < ended).count();
    println!(
        "held {held_for:?} (TTL {ttl:?}) with {renewals} renewals; the rival tried {tries} times"
    );

    assert!(held_for >= ttl * 5);
    assert!(renewals >= 4, "renewed every TTL/3: {renewals}");
    assert!(tries >= 20, "{tries}");
    assert_eq!(during, 0, "the rival got in during the hold");
    assert!(holder.stats().renewals >= u64::from(renewals));
    // Released at the end: the rival gets it at once.
    rival.try_acquire("five-ttls", ttl).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_loss_signal_fires_before_the_deadline_when_three_of_five_masters_are_paused() {
    let nodes = five();
    let rl = client(&nodes);
    rl.connect().await.unwrap();
    let ttl = Duration::from_millis(1000);
    let body_finished = AtomicBool::new(false);
    let watcher: Mutex<Option<tokio::task::JoinHandle<_>>> = Mutex::new(None);

    let result = rl
        .with_lock("paused-hold", ttl, |held| {
            // A task the body hands a clone to, as a worker would: it notes when the signal fires
            // and the deadline it fired against.
            let signal = held.clone();
            *watcher.lock().unwrap() = Some(tokio::spawn(async move {
                signal.lost().await;
                (
                    Instant::now(),
                    signal.deadline(),
                    signal.loss(),
                    signal.renewals(),
                )
            }));
            let (nodes, body_finished) = (&nodes, &body_finished);
            async move {
                // Let a renewal through (however loaded the machine), then pause a majority.
                while held.renewals() == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                for i in [0, 1, 2] {
                    nodes[i].pause().unwrap();
                }
                tokio::time::sleep(ttl * 10).await;
                body_finished.store(true, Ordering::SeqCst);
            }
        })
        .await;
    let returned = Instant::now();
    let handle = watcher.lock().unwrap().take().unwrap();
    let (fired, deadline, loss, renewals_at_loss) = handle.await.unwrap();

    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LossReason::NotRenewed,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.is_lost() && err.is_unavailable() && err.is_retriable(),
        "{err}"
    );
    assert_eq!(loss, Some(LossReason::NotRenewed));
    assert!(
        !body_finished.load(Ordering::SeqCst),
        "the body was dropped on loss"
    );
    assert!(
        fired < deadline,
        "the signal fired {:?} after the deadline",
        fired - deadline
    );
    let margin = deadline - fired;
    println!(
        "loss signal fired {margin:?} before the deadline (TTL {ttl:?}, default margin {:?}); \
         with_lock returned {:?} later; {renewals_at_loss} renewals before",
        ttl / 10,
        returned.saturating_duration_since(fired)
    );
    assert!(
        renewals_at_loss >= 1,
        "a renewal succeeded before the pause"
    );

    // No renewal succeeds afterwards: the counters stand still, and the key is gone from the
    // live masters at once and from the paused ones once they resume (the release was queued
    // behind whatever they had not answered yet).
    let renewals = rl.stats().renewals;
    assert_eq!(rl.stats().lost, 1);
    let live_holders = || {
        nodes
            .iter()
            .skip(3)
            .filter(|s| get(s, "paused-hold").is_some())
            .count()
    };
    assert_eq!(live_holders(), 0, "still held on a live master");
    tokio::time::sleep(ttl / 2).await;
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let gone = eventually(ttl * 3, || present(&nodes, "paused-hold") == 0).await;
    assert!(gone, "{}", nodes.logs());
    tokio::time::sleep(ttl / 2).await;
    assert_eq!(
        rl.stats().renewals,
        renewals,
        "a renewal succeeded after the loss"
    );
    assert_eq!(present(&nodes, "paused-hold"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_stops_at_the_next_renewal_when_a_quorum_no_longer_holds_the_token() {
    let nodes = five();
    let rl = client(&nodes);
    let ttl = Duration::from_millis(600);
    let mut deadline = None;
    let result = rl
        .with_lock("taken-over", ttl, |held| {
            deadline = Some(held.deadline());
            let nodes = &nodes;
            async move {
                // Three masters lose the key (say, restarted empty) and another client takes it.
                for i in 0..3 {
                    set(&nodes[i], "taken-over", "newcomer", TTL);
                }
                tokio::time::sleep(TTL).await;
            }
        })
        .await;
    let returned = Instant::now();
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LossReason::TokenGone,
                renewals: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        returned < deadline.unwrap(),
        "stopped within the first lease"
    );
    assert_eq!(
        holders(&nodes, "taken-over", "newcomer"),
        3,
        "the newcomer's keys are untouched"
    );
    assert_eq!(
        present(&nodes, "taken-over"),
        3,
        "its own keys were released"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_releases_when_the_body_returns_an_error_and_when_it_panics() {
    let nodes = five();
    let rl = client(&nodes);
    let other = client(&nodes);

    let out: Result<Result<(), &str>, Error> = rl
        .with_lock("failing", TTL, |_held| async { Err("boom") })
        .await;
    assert_eq!(
        out.unwrap(),
        Err("boom"),
        "the body's own error comes back as is"
    );
    // The release was awaited before with_lock returned.
    other
        .try_acquire("failing", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let task = {
        let rl = rl.clone();
        tokio::spawn(async move {
            rl.with_lock("panicking", TTL, |_held| async {
                if true {
                    panic!("the body panics");
                }
            })
            .await
        })
    };
    let joined = task.await.unwrap_err();
    assert!(joined.is_panic(), "the panic propagates to the caller");
    other
        .try_acquire("panicking", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(1), || present(&nodes, "panicking") == 0).await);

    // Cancelled from outside: the lock is released in the background.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        rl.with_lock("cancelled", TTL, |_held| std::future::pending::<()>()),
    )
    .await;
    assert!(cancelled.is_err());
    assert!(eventually(Duration::from_secs(2), || present(&nodes, "cancelled") == 0).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_racing_the_release_never_resurrects_the_lock() {
    let nodes = five();
    let rl = client(&nodes);
    let other = client(&nodes);
    let ttl = Duration::from_millis(200);
    // Renewals every 2 ms: most releases go out while one is in flight or just due.
    let opts = HoldOptions::new().renew_every(Duration::from_millis(2));
    let mut tokens = Vec::new();
    for round in 0..40u64 {
        let token = rl
            .with_lock_opts("racing", ttl, opts.clone(), |held| async move {
                tokio::time::sleep(Duration::from_micros(round * 373 % 9_000)).await;
                held.token().expose().to_owned()
            })
            .await
            .unwrap();
        // Nothing of the holder's is left where another client could be kept out by it: the
        // release returned at a quorum, and the rest land just after (well before the keys
        // would expire on their own).
        let lock = other.try_acquire("racing", ttl).await.unwrap();
        let gone = || holders(&nodes, "racing", &token) == 0;
        assert!(eventually(ttl / 2, gone).await, "round {round}");
        lock.release().await.unwrap();
        tokens.push(token);
    }
    let renewals = rl.stats().renewals;
    println!("40 holds, {renewals} renewals");
    assert!(
        renewals >= 10,
        "renewals were racing the releases: {renewals}"
    );
    // Past every TTL, no key of any of these holders has come back.
    let mut seen = 0;
    let until = Instant::now() + ttl * 2;
    while Instant::now() < until {
        seen += tokens
            .iter()
            .map(|t| holders(&nodes, "racing", t))
            .sum::<usize>();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 0);
    assert_eq!(present(&nodes, "racing"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_hold_stops_the_body_and_returns_lost_with_the_hold_limit() {
    let nodes = five();
    let rl = client(&nodes);
    let ttl = Duration::from_millis(300);
    let started = Instant::now();
    let opts = HoldOptions::new().max_hold(Duration::from_millis(700));
    let err = rl
        .with_lock_opts("capped", ttl, opts, |_held| tokio::time::sleep(TTL))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, Error::Lost { reason: LossReason::HoldLimit, renewals, .. } if renewals >= 1),
        "{err}"
    );
    assert!(!err.is_retriable());
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < TTL, "{took:?}");
    assert_eq!(present(&nodes, "capped"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_wake_on_release_far_sooner_than_the_retry_delay() {
    let nodes = five();
    let retry_delay = Duration::from_millis(500);
    let clients: Vec<Redlock> = (0..8)
        .map(|_| {
            builder(&nodes)
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
    let (median, p90) = (percentile(&gaps, 0.5), percentile(&gaps, 0.9));
    let wakeups: u64 = clients.iter().map(|c| c.stats().wakeups).sum();
    let contended: u64 = clients.iter().map(|c| c.stats().contended).sum();
    println!(
        "{} handovers among 8 clients in {took:?}: release → next acquisition median {median:?}, \
         p90 {p90:?}, max {:?} (retry delay {retry_delay:?}; an uncontended acquire takes {:?}); \
         {wakeups} wake-ups, {contended} contended attempts",
        gaps.len(),
        gaps[gaps.len() - 1],
        percentile(&alone, 0.5),
    );
    assert!(gaps.len() >= ROUNDS - 1);
    assert!(
        same_client < gaps.len() / 4,
        "the waiters took it: {same_client} self-handovers"
    );
    // Polling would wait out the whole delay.
    assert!(median < retry_delay / 2, "median {median:?}");
    assert!(wakeups > 0);

    // Every waiter is gone, and so is every subscription.
    let unsubscribed = eventually(Duration::from_secs(2), || {
        nodes
            .iter()
            .all(|s| subscribers(s, "contended:released") == 0)
    })
    .await;
    assert!(unsubscribed);
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_of_one_client_share_one_subscriber_connection_per_node_and_leave_it_when_done() {
    let nodes = five();
    let holder = client(&nodes);
    let waiters = builder(&nodes)
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

    let lock = holder.acquire("shared", TTL).await.unwrap();
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
        nodes.iter().all(|s| subscribers(s, "shared:released") == 1)
    })
    .await;
    assert!(
        one_each,
        "each node has exactly one subscriber for the four waiters"
    );
    assert!(nodes.iter().all(|s| pubsub_connections(s) == 1));

    let released = Instant::now();
    lock.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let all_four = released.elapsed();
    println!("four waiters took the lock in turn {all_four:?} after the release (retry delay 2 s)");
    assert!(all_four < Duration::from_secs(2), "{all_four:?}");
    let left = eventually(Duration::from_secs(2), || {
        nodes.iter().all(|s| subscribers(s, "shared:released") == 0)
    })
    .await;
    assert!(left, "unsubscribed once no waiter remains");
}

/// `(attempts, contended, wakeups, acquired)` of `rl` so far.
fn counts(rl: &Redlock) -> (u64, u64, u64, u64) {
    let s = rl.stats();
    (s.attempts, s.contended, s.wakeups, s.acquired)
}

/// A client whose retry delay outlasts the test: only a hand-off can get its waiters in.
fn patient(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(600))
        .retry_jitter(Duration::ZERO)
        .retry_count(100)
        .build()
        .unwrap()
}

/// Lines up `count` acquires of `resource` (held by another client on every node) on
/// `waiters`, one at a time, each once the previous one is parked. Each sends its place in line
/// and its lock to the receiver once it gets in.
async fn line_up(
    nodes: &RedisNodes,
    waiters: &Redlock,
    resource: &'static str,
    count: usize,
) -> (Vec<JoinHandle<()>>, UnboundedReceiver<(usize, Lock)>) {
    let (won, winners) = tokio::sync::mpsc::unbounded_channel();
    let channel = format!("{resource}:released");
    let mut tasks = Vec::new();
    for place in 0..count {
        let (rl, won) = (waiters.clone(), won.clone());
        tasks.push(tokio::spawn(async move {
            let lock = rl.acquire(resource, TTL).await.unwrap();
            let _ = won.send((place, lock));
        }));
        // The first one subscribes after its first attempt, and the first confirmed
        // subscription sends it round once more; every later one joins and tries once.
        let n = place as u64 + 2;
        let parked = eventually(Duration::from_secs(10), || {
            counts(waiters) == (n, n, 1, 0) && nodes.iter().all(|s| subscribers(s, &channel) == 1)
        })
        .await;
        assert!(parked, "waiter {place}: {:?}", counts(waiters));
    }
    (tasks, winners)
}

/// The next lock handed over, with its holder's place in line.
/// `resource`, acquired by `holder`, once its key has landed on all five masters.
async fn held_on_every_node(nodes: &RedisNodes, holder: &Redlock, resource: &str) -> Lock {
    let held = holder.acquire(resource, TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    let everywhere = || holders(nodes, resource, &token) == 5;
    assert!(eventually(Duration::from_secs(2), everywhere).await);
    held
}

async fn next_winner(winners: &mut UnboundedReceiver<(usize, Lock)>) -> (usize, Lock) {
    let next = tokio::time::timeout(Duration::from_secs(10), winners.recv()).await;
    next.expect("a release handed the lock to nobody")
        .expect("every waiter is gone")
}

#[tokio::test(flavor = "multi_thread")]
async fn each_release_hands_the_lock_to_one_waiter_of_a_client_the_one_that_waited_longest() {
    const WAITERS: usize = 5;
    let nodes = five();
    let holder = client(&nodes);
    let waiters = patient(&nodes);
    let mut held = held_on_every_node(&nodes, &holder, "handoff").await;
    let (tasks, mut winners) = line_up(&nodes, &waiters, "handoff", WAITERS).await;
    let lined_up = counts(&waiters);

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
    let (attempts, contended, wakeups, acquired) = counts(&waiters);
    println!(
        "{WAITERS} hand-offs: {} attempts, {} contended, {} wake-ups",
        attempts - lined_up.0,
        contended - lined_up.1,
        wakeups - lined_up.2
    );
    assert_eq!(acquired, WAITERS as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_heard_from_every_node_costs_a_client_one_wake_up_and_one_attempt() {
    const WAITERS: usize = 4;
    let nodes = five();
    let holder = client(&nodes);
    let waiters = patient(&nodes);
    let mut held = held_on_every_node(&nodes, &holder, "heard").await;
    let (tasks, mut winners) = line_up(&nodes, &waiters, "heard", WAITERS).await;
    let lined_up = counts(&waiters);

    // Each release taken apart: deleted everywhere first, then announced by every node, so
    // that no attempt can race it (what a woken waiter does then is up to the client alone).
    let announce = |id: &str| {
        for server in nodes.iter() {
            let _: i64 = redis::cmd("PUBLISH")
                .arg("heard:released")
                .arg(id)
                .query(&mut direct(server))
                .unwrap();
        }
    };
    for round in 0..WAITERS as u64 {
        let id = held.token().fingerprint();
        nodes.iter().for_each(|s| del(s, "heard"));
        announce(&id);
        let (place, lock) = next_winner(&mut winners).await;
        assert_eq!(place as u64, round, "first come, first served");
        // Copies of the same release once more, late: they wake nobody.
        announce(&id);
        // Time for any other waiter woken to show in the counters.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (attempts, contended, wakeups, acquired) = counts(&waiters);
        assert_eq!(
            (attempts, contended, wakeups, acquired),
            (
                lined_up.0 + round + 1,
                lined_up.1,
                lined_up.2 + round + 1,
                round + 1
            ),
            "release {round}: ten copies, one wake-up, one attempt, no contention"
        );
        // The former holder's own release finds the key taken over, and leaves it.
        drop(std::mem::replace(&mut held, lock));
    }
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_many_is_all_or_nothing_when_one_key_is_held_elsewhere() {
    let nodes = five();
    let rl = client(&nodes);
    let other = client(&nodes);
    let held = other.acquire("acct:2", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(&nodes, "acct:2", &token)
            == 5)
        .await
    );

    let err = rl
        .try_acquire_many(&["acct:1", "acct:2"], TTL)
        .await
        .unwrap_err();
    assert!(err.is_contention(), "{err}");
    assert!(err.to_string().contains("acct:1, acct:2"), "{err}");
    assert_eq!(
        present(&nodes, "acct:1"),
        0,
        "no key of its own on any node"
    );
    assert_eq!(
        holders(&nodes, "acct:2", &token),
        5,
        "the other holder's key is untouched"
    );

    held.release().await.unwrap();
    let mut lock = rl.acquire_many(&["acct:1", "acct:2"], TTL).await.unwrap();
    assert_eq!(lock.resources(), ["acct:1", "acct:2"]);
    let token = lock.token().expose().to_owned();
    for key in ["acct:1", "acct:2"] {
        assert!(eventually(Duration::from_secs(1), || holders(&nodes, key, &token) == 5).await);
    }
    assert!(other
        .try_acquire("acct:1", TTL)
        .await
        .unwrap_err()
        .is_contention());

    lock.extend(Duration::from_secs(30)).await.unwrap();
    for key in ["acct:1", "acct:2"] {
        let renewed = || nodes.iter().filter(|s| pttl(s, key) > 25_000).count();
        assert!(
            eventually(Duration::from_secs(1), || renewed() == 5).await,
            "{key}"
        );
    }
    let released = lock.release().await.unwrap();
    assert!(
        released.deleted >= 3 && released.absent == 0,
        "{released:?}"
    );
    let left = || present(&nodes, "acct:1") + present(&nodes, "acct:2");
    assert!(eventually(Duration::from_secs(1), || left() == 0).await);

    for bad in [&[][..], &["a", "a"][..], &["a", ""][..]] {
        let err = rl.try_acquire_many(bad, TTL).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidResource { .. }),
            "{bad:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_many_gives_each_resource_a_fence_above_its_previous_holders() {
    let nodes = five();
    let rl = builder(&nodes).fencing(true).build().unwrap();
    let first = rl.acquire("acct:1", TTL).await.unwrap();
    let f1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let both = rl.acquire_many(&["acct:1", "acct:2"], TTL).await.unwrap();
    let fences = both.fencing_tokens().unwrap().to_vec();
    assert_eq!(fences.len(), 2);
    assert!(fences[0] > f1, "{fences:?} after {f1}");
    both.release().await.unwrap();
    let second = rl.acquire("acct:2", TTL).await.unwrap();
    assert!(second.fencing_token().unwrap() > fences[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn inspect_shows_held_free_and_split() {
    let nodes = five();
    let rl = client(&nodes);

    let free = rl.inspect("status").await.unwrap();
    assert_eq!(free.verdict, Verdict::Free);
    assert!(free.nodes.iter().all(|n| !n.exists()));

    let lock = rl.acquire("status", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(&nodes, "status", &token)
            == 5)
        .await
    );
    let held = rl.inspect("status").await.unwrap();
    let print = lock.token().fingerprint();
    assert_eq!(
        held.verdict,
        Verdict::Held {
            fingerprint: print.clone(),
            nodes: 5
        }
    );
    for node in &held.nodes {
        assert_eq!(node.fingerprint(), Some(print.as_str()));
        let ttl = node.ttl().unwrap();
        assert!(ttl <= TTL && ttl > TTL - Duration::from_secs(2), "{ttl:?}");
    }
    assert!(
        !format!("{held:?}").contains(&token),
        "the token never shows"
    );
    lock.release().await.unwrap();

    for (i, value) in ["a", "a", "b", "b"].iter().enumerate() {
        set(&nodes[i], "split", value, TTL);
    }
    let split = rl.inspect("split").await.unwrap();
    assert_eq!(split.verdict, Verdict::Split);
    assert_eq!(split.nodes.iter().filter(|n| n.exists()).count(), 4);

    rl.connect().await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    let unknown = rl.inspect("status").await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    assert_eq!(unknown.verdict, Verdict::Unknown);
    let unreachable = unknown
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Unreachable(_)))
        .count();
    assert_eq!(unreachable, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_count_attempts_grants_contention_and_node_errors() {
    let mut nodes = five();
    let rl = builder(&nodes).retry_count(2).build().unwrap();
    let before = rl.stats();
    assert_eq!(
        (before.attempts, before.acquired, before.contended),
        (0, 0, 0)
    );
    assert_eq!(before.nodes.len(), 5);
    assert_eq!(
        before.nodes[3].node,
        format!("127.0.0.1:{}", nodes[3].port())
    );

    let lock = rl.acquire("counted", TTL).await.unwrap();
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired, s.contended), (1, 1, 0));

    // The same client, busy: three attempts, each contended.
    rl.acquire("counted", TTL).await.unwrap_err();
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired, s.contended), (4, 1, 3));
    lock.release().await.unwrap();

    nodes[4].kill().unwrap();
    rl.acquire("counted", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let s = rl.stats();
    assert_eq!((s.attempts, s.acquired), (5, 2));
    // The decisions may come before the dead master's errors, which are counted as they land.
    let counted = || rl.stats().nodes[4].errors >= 2;
    assert!(eventually(Duration::from_secs(1), counted).await, "{s:?}");
    let s = rl.stats();
    assert!(s.nodes[..4].iter().all(|n| n.errors == 0), "{s:?}");
    println!("{s:?}");
}

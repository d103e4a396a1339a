//! Holding locks the way users do — `with_lock` with renewal, a loss signal, a hold limit —
//! against five real, independent redis-server masters.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, HoldOptions, LossReason};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_holds_a_lock_for_five_ttls_while_another_client_keeps_trying_and_never_gets_in()
{
    let nodes = five();
    let holder = connected(&nodes).await;
    let rival = connected(&nodes).await;
    // Long enough that a renewal (every TTL/3) survives a stall of a loaded machine.
    let ttl = Duration::from_secs(1);
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
    let rl = connected(&nodes).await;
    rl.connect().await.unwrap();
    let ttl = Duration::from_millis(1000);
    let body_finished = AtomicBool::new(false);
    let watcher: Mutex<Option<tokio::task::JoinHandle<_>>> = Mutex::new(None);
    let checker: Mutex<Option<tokio::task::JoinHandle<_>>> = Mutex::new(None);

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
            // Another wakes just before the deadline and reads whether the loss was signalled by
            // then: a stall of that task only reads it later, while the watcher's instant would
            // move past the deadline with a stall of its own.
            let at_deadline = held.clone();
            *checker.lock().unwrap() = Some(tokio::spawn(async move {
                loop {
                    let deadline = at_deadline.deadline();
                    tokio::time::sleep_until((deadline - Duration::from_millis(1)).into()).await;
                    if at_deadline.deadline() == deadline {
                        return at_deadline.loss();
                    }
                }
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
    let checker = checker.lock().unwrap().take().unwrap();
    let loss_by_deadline = checker.await.unwrap();

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
    assert_eq!(
        loss_by_deadline,
        Some(LossReason::NotRenewed),
        "the loss was not signalled before the deadline (the watcher saw it {:?} past it)",
        fired.saturating_duration_since(deadline)
    );
    let margin = deadline.saturating_duration_since(fired);
    println!(
        "loss signal seen {margin:?} before the deadline (TTL {ttl:?}, default margin {:?}); \
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
            .filter(|s| get(s, &lock_key("paused-hold")).is_some())
            .count()
    };
    assert_eq!(live_holders(), 0, "still held on a live master");
    tokio::time::sleep(ttl / 2).await;
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let gone = eventually(ttl * 3, || present(&nodes, &lock_key("paused-hold")) == 0).await;
    assert!(gone, "{}", nodes.logs());
    tokio::time::sleep(ttl / 2).await;
    assert_eq!(
        rl.stats().renewals,
        renewals,
        "a renewal succeeded after the loss"
    );
    assert_eq!(present(&nodes, &lock_key("paused-hold")), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_stops_at_the_next_renewal_when_a_quorum_no_longer_holds_the_token() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let ttl = Duration::from_millis(600);
    let mut deadline = None;
    let result = rl
        .with_lock("taken-over", ttl, |held| {
            deadline = Some(held.deadline());
            let nodes = &nodes;
            async move {
                // Three masters lose the key (say, restarted empty) and another client takes it.
                for i in 0..3 {
                    set(&nodes[i], &lock_key("taken-over"), "newcomer", TTL);
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
        holders(&nodes, &lock_key("taken-over"), "newcomer"),
        3,
        "the newcomer's keys are untouched"
    );
    // (The release returned at a quorum: the last master's may still be on its way.)
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("taken-over")
        ) == 3)
        .await,
        "its own keys were not released: {:?}",
        values(&nodes, &lock_key("taken-over"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_lock_releases_when_the_body_returns_an_error_and_when_it_panics() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let other = connected(&nodes).await;

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
    assert!(
        eventually(Duration::from_secs(1), || present(
            &nodes,
            &lock_key("panicking")
        ) == 0)
        .await
    );

    // Cancelled from outside: the lock is released in the background.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        rl.with_lock("cancelled", TTL, |_held| std::future::pending::<()>()),
    )
    .await;
    assert!(cancelled.is_err());
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("cancelled")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_racing_the_release_never_resurrects_the_lock() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let other = connected(&nodes).await;
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
        let gone = || holders(&nodes, &lock_key("racing"), &token) == 0;
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
            .map(|t| holders(&nodes, &lock_key("racing"), t))
            .sum::<usize>();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, 0);
    assert_eq!(present(&nodes, &lock_key("racing")), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_hold_stops_the_body_and_returns_lost_with_the_hold_limit() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let ttl = Duration::from_secs(1);
    let max_hold = Duration::from_millis(2300);
    let started = Instant::now();
    let opts = HoldOptions::new().max_hold(max_hold);
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
    assert!(took >= max_hold, "{took:?}");
    assert!(took < TTL, "{took:?}");
    assert_gone_everywhere(&nodes, &lock_key("capped")).await;
}

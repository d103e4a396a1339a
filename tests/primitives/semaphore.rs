//! The counting semaphore against five real masters: K slots, each a quorum lock.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quorumlock::{Error, Permit, Redlock, MAX_PERMITS};
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);

/// Waits (up to 5 s) until none of the `permits` slots of `resource` has anybody in line on
/// any master: a holder leaves the other slots' lines in the background.
async fn nothing_queued(nodes: &RedisNodes, resource: &str, permits: u32) {
    assert!(
        eventually(Duration::from_secs(5), || queued_anywhere(
            nodes, resource, permits
        ) == 0)
        .await,
        "{} entries left in line",
        queued_anywhere(nodes, resource, permits)
    );
}

/// How many entries the lines of the K slots of `resource` have, over every master (a slot
/// is the resource `<resource>:permit:<i>`, its line `{<resource>:permit:<i>}:queue`).
fn queued_anywhere(nodes: &RedisNodes, resource: &str, permits: u32) -> usize {
    nodes
        .iter()
        .map(|s| {
            (0..permits)
                .map(|i| line(s, &lock_key(&format!("{resource}:permit:{i}"))).len())
                .sum::<usize>()
        })
        .sum()
}

/// Waits until `permit`'s slot holds it on every master (see `common::granted_everywhere`).
async fn on_every_master(nodes: &RedisNodes, permit: &Permit) {
    granted_everywhere(nodes, &lock_key(permit.resource()), permit.token().expose()).await;
}

/// A client whose retry delay outlasts the test: only a release's hand-off can let it in.
fn patient(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(600))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn k_permits_go_to_k_holders_on_distinct_slots_and_the_next_is_refused() {
    let nodes = five();
    let clients = connected_clients(&nodes, 4).await;
    let sems: Vec<_> = clients
        .iter()
        .map(|rl| rl.semaphore("exports", 3).unwrap())
        .collect();
    let mut permits = Vec::new();
    for sem in &sems[..3] {
        let permit = sem.try_acquire(TTL).await.unwrap();
        on_every_master(&nodes, &permit).await;
        permits.push(permit);
    }
    let mut slots: Vec<u32> = permits.iter().map(|p| p.slot()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2]);
    for p in &permits {
        assert_eq!(p.resource(), format!("exports:permit:{}", p.slot()));
    }

    let refused = sems[3].try_acquire(TTL).await.unwrap_err();
    assert!(refused.is_contention(), "{refused}");
    assert!(
        matches!(&refused, Error::NotAcquired { resource, attempts: 1, .. }
            if resource.starts_with("exports:permit:")),
        "{refused:?}"
    );
    assert_eq!(clients[3].stats().attempts, 3, "one attempt per slot");

    // A release frees exactly that slot for the next holder.
    let freed = permits.remove(1);
    let slot = freed.slot();
    freed.release().await.unwrap();
    let next = sems[3].try_acquire(TTL).await.unwrap();
    assert_eq!(next.slot(), slot);
    for p in permits.into_iter().chain([next]) {
        p.release().await.unwrap();
    }
    for i in 0..3 {
        let key = lock_key(&format!("exports:permit:{i}"));
        assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 0).await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_takes_whichever_slot_is_released_first_and_leaves_the_other_lines() {
    const K: u32 = 3;
    let nodes = five();
    let holders_ = connected_clients(&nodes, K as usize).await;
    let mut held = Vec::new();
    for rl in &holders_ {
        let permit = rl
            .semaphore("crawl", K)
            .unwrap()
            .acquire(TTL)
            .await
            .unwrap();
        on_every_master(&nodes, &permit).await;
        held.push(permit);
    }
    let waiter = patient(&nodes);
    waiter.connect().await.unwrap();
    let sem = waiter.semaphore("crawl", K).unwrap();
    let waiting = tokio::spawn(async move { sem.acquire(TTL).await });
    // In every slot's line on every master.
    let lined_up = eventually(Duration::from_secs(5), || {
        queued_anywhere(&nodes, "crawl", K) == 5 * K as usize
    })
    .await;
    assert!(lined_up, "the waiter never lined up for every slot");

    // Release the middle holder's slot: the waiter gets that slot, by hand-off (its retry delay
    // is ten minutes).
    let freed = held.remove(1);
    let slot = freed.slot();
    freed.release().await.unwrap();
    let permit = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the release handed the slot to nobody")
        .unwrap()
        .unwrap();
    assert_eq!(permit.slot(), slot);
    assert!(waiter.stats().wakeups >= 1, "{:?}", waiter.stats());
    // The waiter left the lines of the slots it did not get.
    nothing_queued(&nodes, "crawl", K).await;
    // The others' slots are untouched: their holders can still extend.
    for p in &mut held {
        p.extend(TTL).await.unwrap();
    }
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_wait_leaves_no_line_entry_and_no_key_behind() {
    const K: u32 = 2;
    let nodes = five();
    let holder = connected(&nodes).await;
    let sem = holder.semaphore("drop", K).unwrap();
    let a = sem.acquire(TTL).await.unwrap();
    on_every_master(&nodes, &a).await;
    let b = sem.acquire(TTL).await.unwrap();
    on_every_master(&nodes, &b).await;
    let other = connected(&nodes).await;
    let sem2 = other.semaphore("drop", K).unwrap();
    let waiting = tokio::spawn(async move { sem2.acquire(TTL).await });
    assert!(
        eventually(Duration::from_secs(5), || queued_anywhere(
            &nodes, "drop", K
        ) == 5 * 2)
        .await
    );
    waiting.abort();
    let _ = waiting.await;
    assert!(
        eventually(Duration::from_secs(5), || queued_anywhere(
            &nodes, "drop", K
        ) == 0)
        .await,
        "lines left behind"
    );
    a.release().await.unwrap();
    b.release().await.unwrap();
    for i in 0..K {
        let key = lock_key(&format!("drop:permit:{i}"));
        assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 0).await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn separate_clients_never_hold_more_than_k_permits_and_use_all_k() {
    const K: u32 = 3;
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 25;
    let nodes = five();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        // A node timeout that a loaded machine cannot miss: this test is about the count.
        let rl = builder(&nodes)
            .node_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let sem = rl.semaphore("pool", K).unwrap();
            for _ in 0..ROUNDS {
                let permit = sem.acquire(TTL).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
            rl.stats()
        }));
    }
    let mut acquired = 0;
    for task in tasks {
        acquired += task.await.unwrap().acquired;
    }
    assert_eq!(acquired, (CLIENTS * ROUNDS) as u64);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= K as usize, "{most} holders of {K} permits at once");
    assert_eq!(most, K as usize, "eight clients never filled the {K} slots");
    // (A holder leaves the other lines in the background.)
    nothing_queued(&nodes, "pool", K).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_permit_runs_the_body_on_a_slot_and_gives_it_back() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let sem = rl.semaphore("jobs", 2).unwrap();
    let slot = sem
        .with_permit(Duration::from_secs(3), |held| async move {
            let key = held.resource().to_owned();
            assert!(key.starts_with("jobs:permit:"), "{key}");
            // Outlives the TTL: the permit is renewed meanwhile.
            tokio::time::sleep(Duration::from_millis(3500)).await;
            assert!(held.is_held());
            key
        })
        .await
        .unwrap();
    assert!(rl.stats().renewals >= 1, "{:?}", rl.stats());
    let key = lock_key(&slot);
    assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 0).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn masters_down_fail_at_the_first_slot_instead_of_trying_every_one() {
    let mut nodes = five();
    for i in 0..3 {
        nodes[i].kill().unwrap();
    }
    let rl = builder(&nodes).retry_count(0).build().unwrap();
    let sem = rl.semaphore("down", 8).unwrap();
    let e = sem.try_acquire(TTL).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert_eq!(rl.stats().attempts, 1, "{:?}", rl.stats());
    let e = sem.acquire(TTL).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    // No retry configured: one more attempt, on one slot.
    assert_eq!(rl.stats().attempts, 2, "{:?}", rl.stats());

    // With retries, acquire tries again by the retry policy, one slot per try.
    let retrying = builder(&nodes).retry_count(2).build().unwrap();
    let e = retrying
        .semaphore("down", 8)
        .unwrap()
        .acquire(TTL)
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert_eq!(retrying.stats().attempts, 3, "{:?}", retrying.stats());
}

#[test]
fn permits_and_names_are_checked_before_any_node_is_contacted() {
    // Nothing listens on port 1: a check that reached a node would fail differently.
    let rl = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    for bad in [0, MAX_PERMITS + 1] {
        let e = rl.semaphore("s", bad).unwrap_err();
        assert!(
            matches!(e, Error::InvalidPermits { permits, max: MAX_PERMITS } if permits == bad),
            "{e:?}"
        );
        assert!(!e.is_retriable());
    }
    assert!(rl.semaphore("s", MAX_PERMITS).is_ok());
    for bad in ["", "}s"] {
        let e = rl.semaphore(bad, 2).unwrap_err();
        assert!(matches!(e, Error::InvalidResource { .. }), "{bad}: {e:?}");
    }
    // Names that once were reserved (another resource's fencing counter) are names like any
    // other since key layout 2.
    assert!(rl.semaphore("s:fence", 2).is_ok());
}

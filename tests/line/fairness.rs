//! What the line promises beyond order: one attempt per release (a waiter never hands the lock
//! to itself), no waiter refused while the key it waits for is free (a head that cannot take a
//! key passes it on; a plain attempt does not jump the line after an expiry), and a campaign
//! that keeps its place for as long as it waits.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Redlock};
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);

/// A client whose fallback poll is a third of the entry lease (the test builder's node timeout
/// is 100 ms, so the entry lease is 1 s): only a hand-off makes it attempt sooner.
fn slow_polling(nodes: &RedisNodes, wait: Duration) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(wait)
        .build()
        .unwrap()
}

async fn in_line_everywhere(nodes: &RedisNodes, resource: &str, waiters: usize) {
    let key = lock_key(resource);
    let queued = eventually(Duration::from_secs(5), || {
        nodes.iter().all(|s| line(s, &key).len() == waiters)
    })
    .await;
    assert!(
        queued,
        "{waiters} waiter(s) never stood in the line of {resource}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_granted_by_a_master_that_lost_the_key_does_not_hand_the_lock_to_itself() {
    let nodes = five();
    let holder = connected(&nodes).await.acquire("job", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("job"), holder.token().expose()).await;
    let rl = slow_polling(&nodes, Duration::from_secs(3));
    rl.connect().await.unwrap();
    let waiter = tokio::spawn({
        let rl = rl.clone();
        async move { rl.acquire("job", TTL).await }
    });
    in_line_everywhere(&nodes, "job", 1).await;
    // One master loses the key (restarted empty, say): it grants the waiter, the others do not.
    del(nodes.iter().next().unwrap(), &lock_key("job"));
    let before = rl.stats();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rl.stats();
    let attempts = after.attempts - before.attempts;
    let wakeups = after.wakeups - before.wakeups;
    // Polling every third of the 1 s entry lease: about 6 attempts in 2 s, and no wake-up, as
    // nobody released.
    assert!(
        attempts <= 12 && wakeups == 0,
        "{attempts} attempts and {wakeups} wake-ups in 2 s while nobody released"
    );
    holder.release().await.unwrap();
    let lock = waiter
        .await
        .unwrap()
        .expect("handed the lock by the release");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_head_that_cannot_take_a_key_passes_it_to_the_waiter_behind() {
    let nodes = five();
    let holds = connected(&nodes).await;
    // Connected first: a first connection slower than the node timeout (a loaded machine)
    // would leave that master without the grants the line below is built on.
    assert_eq!(holds.connect().await.unwrap().reachable, 5);
    let a = holds.acquire("a", TTL).await.unwrap();
    let b = holds.acquire("b", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("a"), a.token().expose()).await;
    granted_everywhere(&nodes, &lock_key("b"), b.token().expose()).await;
    // First in the line of `a`: a lock over both keys, which cannot be had while `b` is held.
    let both = tokio::spawn({
        let rl = slow_polling(&nodes, Duration::from_secs(6));
        async move { rl.acquire_many(&["a", "b"], TTL).await }
    });
    in_line_everywhere(&nodes, "a", 1).await;
    let plain = slow_polling(&nodes, Duration::from_secs(4));
    plain.connect().await.unwrap();
    let waiter = tokio::spawn({
        let plain = plain.clone();
        async move {
            let lock = plain.acquire("a", TTL).await;
            (lock, Instant::now())
        }
    });
    in_line_everywhere(&nodes, "a", 2).await;
    let released = Instant::now();
    a.release().await.unwrap();
    let (lock, acquired) = waiter.await.unwrap();
    let lock = lock.expect("`a` is free once released: the waiter behind the head takes it");
    assert!(
        acquired - released < Duration::from_secs(2),
        "{:?} after the release",
        acquired - released
    );
    // While it holds `a`, nobody else does; once it releases, the head may have it with `b`.
    lock.release().await.unwrap();
    b.release().await.unwrap();
    let both = both
        .await
        .unwrap()
        .expect("the head takes both keys once both are free");
    both.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_attempt_does_not_take_a_key_that_expired_while_others_wait() {
    let nodes = five();
    // A holder that crashed: its key lapses after 1 s, with nobody to release it.
    let crashed = connected(&nodes)
        .await
        .acquire("job", Duration::from_secs(1))
        .await
        .unwrap();
    granted_everywhere(&nodes, &lock_key("job"), crashed.token().expose()).await;
    std::mem::forget(crashed);
    // Its fallback poll every 1.67 s (a third of a 5 s entry lease) leaves the key free for a
    // while after it lapses: only the line keeps a plain attempt from taking it then.
    let rl = builder(&nodes)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let waiter = tokio::spawn({
        let rl = rl.clone();
        async move {
            let lock = rl.acquire("job", TTL).await;
            (lock, Instant::now())
        }
    });
    in_line_everywhere(&nodes, "job", 1).await;
    let newcomer = connected(&nodes).await;
    let mut refusals = 0;
    let jumped = loop {
        if waiter.is_finished() {
            break None;
        }
        match newcomer.try_acquire("job", TTL).await {
            Ok(lock) => break Some(lock),
            Err(Error::NotAcquired { nodes: why, .. }) => {
                refusals += 1;
                assert!(why.iter().all(|e| e.is_contention()), "{why:?}");
            }
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        jumped.is_none(),
        "a plain attempt took the key ahead of the waiter, after {refusals} refusals"
    );
    let (lock, _) = waiter.await.unwrap();
    lock.expect("the head of the line takes the expired key")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_by_the_line_says_so() {
    let nodes = five();
    let holder = connected(&nodes).await.acquire("job", TTL).await.unwrap();
    granted_everywhere(&nodes, &lock_key("job"), holder.token().expose()).await;
    let waiter = tokio::spawn({
        let rl = slow_polling(&nodes, Duration::from_secs(3));
        async move { rl.acquire("job", TTL).await }
    });
    in_line_everywhere(&nodes, "job", 1).await;
    // Connected first: the try below must follow the deletes at once, before the waiter polls.
    let other = connected(&nodes).await;
    // The key is gone from every master (its holder overran), but somebody waits.
    for server in nodes.iter() {
        del(server, &lock_key("job"));
    }
    let e = other.try_acquire("job", TTL).await.unwrap_err();
    assert!(e.is_contention(), "{e}");
    assert!(e.to_string().contains("others wait in line"), "{e}");
    drop(holder);
    waiter.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_candidate_that_waited_longest_leads_next_whatever_its_acquire_timeout() {
    let nodes = five();
    let leader = connected(&nodes)
        .await
        .elect("scheduler", TTL, "leader")
        .await
        .unwrap();
    // An acquire timeout far shorter than the wait: the campaign must not start over behind
    // later candidates each time it passes. The later candidate's never passes.
    let early = builder(&nodes)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let first = tokio::spawn(async move { early.elect("scheduler", TTL, "early").await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = builder(&nodes)
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let second = tokio::spawn(async move { late.elect("scheduler", TTL, "late").await });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    leader.release().await.unwrap();
    let term = tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .expect("the candidate that waited longest was not elected")
        .unwrap()
        .unwrap();
    let read = connected(&nodes)
        .await
        .leader("scheduler")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.value, "early");
    assert!(!second.is_finished(), "both candidates were elected");
    term.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
}

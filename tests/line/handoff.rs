//! The hand-off in one trip, against five real masters: a release makes the head of the line the
//! holder, and the head holds once a quorum announced it, with no attempt of its own (see
//! `src/wakeup/handed.rs`).

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock::Redlock;

/// Long enough that a lock handed over (valid at first for at most the releasing holder's entry
/// lease, [`ROOMY`] × 10 = 5 s) is still short of twice the default loss margin (TTL / 10).
const TTL: Duration = Duration::from_secs(30);

/// The node timeout of the clients that hand over and hold on a hand-off. Whether a waiter holds
/// on the announcements, rather than attempting, is a matter of time: a quorum of them must reach
/// it within a tenth of its node timeout of the first, with more than a node timeout of the
/// hand-off left, and with none of its attempts under way. With the default test timeout
/// (100 ms) a loaded machine misses those windows now and then; this gives them five times the
/// room.
const ROOMY: Duration = Duration::from_millis(500);

/// Attempts a client has made so far.
fn attempts(rl: &Redlock) -> u64 {
    rl.stats().attempts
}

/// A client that hands a lock over by its release, with the same room as [`patient`] waiters.
async fn releasing(nodes: &quorumlock_testkit::RedisNodes) -> Redlock {
    builder(nodes).node_timeout(ROOMY).connected().await
}

/// A client whose waiters attempt only every third of their entry lease (1.67 s with the node
/// timeout of [`ROOMY`]), not every retry delay.
fn patient(nodes: &quorumlock_testkit::RedisNodes) -> Redlock {
    builder(nodes)
        .node_timeout(ROOMY)
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap()
}

/// Waits until an acquire of `resource` by `waiter` (in a task) stands in the line on every
/// master, and has just made one of its periodic attempts, and that attempt failed: the release
/// that follows at once meets no attempt of the waiter's under way. (One under way would,
/// rightly, make the waiter attempt instead of holding on the announcements: it may have taken
/// the key over.) Every failed attempt of a waiter here counts as contended.
async fn queued_everywhere(
    nodes: &quorumlock_testkit::RedisNodes,
    resource: &str,
    waiter: &Redlock,
) -> bool {
    let queued = eventually(Duration::from_secs(5), || {
        nodes
            .iter()
            .all(|s| line(s, &lock_key(resource)).len() == 1)
    })
    .await;
    let attempted = waiter.stats().attempts;
    let polled = eventually(Duration::from_secs(5), || {
        let stats = waiter.stats();
        stats.attempts > attempted && stats.contended == stats.attempts
    })
    .await;
    // The attempt was decided by a quorum of refusals: let the last masters' answers come in.
    tokio::time::sleep(Duration::from_millis(50)).await;
    queued && polled
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_makes_the_head_the_holder_with_no_attempt_of_its_own_then_it_renews_to_the_ttl()
{
    let nodes = five();
    let (holder, waiter) = (releasing(&nodes).await, patient(&nodes));
    let lock = acquired_everywhere(&nodes, &holder, "r", TTL).await;
    let waiting = {
        let rl = waiter.clone();
        tokio::spawn(async move { rl.acquire("r", TTL).await })
    };
    assert!(queued_everywhere(&nodes, "r", &waiter).await);
    let before = attempts(&waiter);

    lock.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert_eq!(
        attempts(&waiter),
        before,
        "no attempt after the release: the announcements made it the holder"
    );
    let token = handed.token().expose().to_owned();
    assert!(token.starts_with("~queued:"), "{token}");
    // The waiter left the line everywhere, and the key holds its token on every master.
    let key = lock_key("r");
    assert!(
        eventually(Duration::from_secs(2), || nodes
            .iter()
            .all(|s| line(s, &key).is_empty()))
        .await
    );
    // Nothing but its token anywhere (the last releases, which hand the key over, may still be
    // on the way).
    let quorum = eventually(Duration::from_secs(2), || {
        holders(&nodes, &key, &token) >= 3
    });
    assert!(quorum.await);
    let only_its_token = || holders(&nodes, &key, &token) == present(&nodes, &key);
    assert!(eventually(Duration::from_secs(2), only_its_token).await);

    // Held first for what the hand-off proves (about an entry lease), then renewed to the TTL on
    // the masters and in the lock's own deadline.
    let renewed = eventually(Duration::from_secs(10), || {
        let renewed = nodes
            .iter()
            .filter(|s| pttl(s, &key) > (TTL / 2).as_millis() as i64)
            .count();
        handed.remaining() > TTL / 2 && renewed >= 3
    })
    .await;
    assert!(renewed, "{:?} left", handed.remaining());
    assert_eq!(waiter.stats().renewals, 1);

    // Another client cannot take it meanwhile, and its release frees the key everywhere.
    assert!(holder.try_acquire("r", TTL).await.is_err());
    handed.release().await.unwrap();
    assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 0).await);
    let again = holder.try_acquire("r", TTL).await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_head_with_fencing_attempts_on_the_hand_off_and_gets_a_fence() {
    let nodes = five();
    let holder = connected(&nodes).await;
    let waiter = builder(&nodes)
        .fencing(true)
        .retry_delay(Duration::from_secs(2))
        .build()
        .unwrap();
    let lock = acquired_everywhere(&nodes, &holder, "f", TTL).await;
    let waiting = {
        let rl = waiter.clone();
        tokio::spawn(async move { rl.acquire("f", TTL).await })
    };
    assert!(queued_everywhere(&nodes, "f", &waiter).await);
    let before = attempts(&waiter);
    lock.release().await.unwrap();
    let taken = waiting.await.unwrap().unwrap();
    assert!(attempts(&waiter) > before, "a fence needs an attempt");
    assert!(!taken.token().expose().starts_with("~queued:"));
    assert!(taken.fencing_token().is_some());
    taken.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, &lock_key("f"))
            == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_handed_on_in_turn_never_has_two_holders() {
    let nodes = five();
    let clients = connected_clients(&nodes, 4).await;
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|rl| {
            let inside = inside.clone();
            tokio::spawn(async move {
                let mut handed = 0;
                for _ in 0..25 {
                    let lock = rl.acquire("turns", TTL).await.unwrap();
                    let was = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    assert_eq!(was, 0, "two holders at once");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    handed += usize::from(lock.token().expose().starts_with("~queued:"));
                    lock.release().await.unwrap();
                }
                handed
            })
        })
        .collect();
    let mut handed = 0;
    for task in tasks {
        handed += task.await.unwrap();
    }
    println!("{handed} of 100 locks were handed over by a release");
    assert!(handed > 0, "contended turns go through the hand-off");
    // The last release returned once a quorum answered; the others may still be on their way.
    let gone = || present(&nodes, &lock_key("turns")) == 0;
    assert!(eventually(Duration::from_secs(2), gone).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handed_lock_released_before_a_third_of_its_validity_is_never_renewed() {
    let nodes = five();
    let (holder, waiter) = (releasing(&nodes).await, patient(&nodes));
    let lock = acquired_everywhere(&nodes, &holder, "short", TTL).await;
    let waiting = {
        let rl = waiter.clone();
        tokio::spawn(async move { rl.acquire("short", TTL).await })
    };
    assert!(queued_everywhere(&nodes, "short", &waiter).await);
    lock.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    assert!(handed.token().expose().starts_with("~queued:"));
    let renewal_due = handed.remaining() / 3;
    handed.release().await.unwrap();
    // Well past the third of its validity at which a renewal would have been sent.
    tokio::time::sleep(renewal_due + Duration::from_secs(1)).await;
    assert_eq!(waiter.stats().renewals, 0, "no renewal after the release");
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("short")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_on_a_handed_lock_starts_its_body_with_the_whole_ttl() {
    let nodes = five();
    let (holder, waiter) = (releasing(&nodes).await, patient(&nodes));
    let lock = acquired_everywhere(&nodes, &holder, "held", TTL).await;
    let holding = {
        let rl = waiter.clone();
        tokio::spawn(async move {
            // A hand-off proves less than the releasing holder's entry lease here (5 s): less
            // than twice the default loss margin (TTL / 10 = 3 s), and far less than the TTL a
            // body expects.
            rl.with_lock("held", TTL, |held| async move {
                let handed = held.token().expose().starts_with("~queued:");
                let at_start = held.remaining();
                tokio::time::sleep(Duration::from_millis(300)).await;
                (handed, at_start, held.is_held())
            })
            .await
        })
    };
    assert!(queued_everywhere(&nodes, "held", &waiter).await);
    lock.release().await.unwrap();
    let (handed, at_start, still_held) = holding.await.unwrap().unwrap();
    assert!(handed, "the hold began on a hand-off");
    assert!(
        at_start > TTL * 9 / 10,
        "the body started with {at_start:?} left"
    );
    assert!(still_held);
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("held")
        ) == 0)
        .await
    );
}

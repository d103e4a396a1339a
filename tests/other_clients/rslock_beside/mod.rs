//! quorumlock beside other Redlock clients on the same masters and resource names: the lock key
//! is the resource name (key layout 3), as the Redlock spec and every other client write it, so
//! each side is refused while the other holds, in both directions. The foreign client is the
//! `rslock` crate (0.10), and a key set by hand with `SET name value NX PX`, which is what any
//! other client writes.

use crate::common;
mod renewals_beside_a_line;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Redlock};

const TTL: Duration = Duration::from_secs(2);

/// rslock over the same masters, one attempt per `lock` call.
fn rslock(urls: &[String]) -> rslock::LockManager {
    let mut manager = rslock::LockManager::new(urls.to_vec());
    manager.set_retry(1, Duration::from_millis(1));
    manager
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quorumlock_lock_is_the_resource_name_on_the_masters() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let lock = rl.acquire("orders:42", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            "orders:42",
            &token
        ) == 5)
        .await
    );
    lock.release().await.unwrap();

    let prefixed = builder(&nodes).key_prefix("locks:").connected().await;
    let lock = prefixed.acquire("orders:42", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            "locks:orders:42",
            &token
        ) == 5)
        .await
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn rslock_and_quorumlock_refuse_each_other_on_the_same_name() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let foreign = rslock(&nodes.urls());

    // rslock holds: quorumlock is refused as for any holder, and leaves rslock's key alone.
    let theirs = foreign.lock("orders:42", TTL).await.unwrap();
    let err = rl.try_acquire("orders:42", TTL).await.unwrap_err();
    assert!(err.is_contention(), "{err}");
    let mut other = rl.try_acquire("orders:43", TTL).await.unwrap();
    other.extend(TTL).await.unwrap();
    other.release().await.unwrap();
    let value = String::from_utf8(theirs.val.clone()).unwrap_or_default();
    let theirs_left = (0..5)
        .filter(|&i| get_raw(&nodes, i, "orders:42") == Some(theirs.val.clone()))
        .count();
    assert_eq!(theirs_left, 5, "rslock's key {value:?} is on every master");
    foreign.unlock(&theirs).await;

    // quorumlock holds: rslock is refused, and gets it once quorumlock released.
    let ours = rl.try_acquire("orders:42", TTL).await.unwrap();
    assert!(foreign.lock("orders:42", TTL).await.is_err());
    ours.release().await.unwrap();
    let theirs = foreign.lock("orders:42", TTL).await.unwrap();
    foreign.unlock(&theirs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_set_by_hand_on_a_majority_refuses_quorumlock_until_it_is_gone() {
    let nodes = five();
    let rl = connected(&nodes).await;
    for i in 0..3 {
        let set: Option<String> = redis::cmd("SET")
            .arg("orders:42")
            .arg("someone-else")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut direct(nodes.iter().nth(i).unwrap()))
            .unwrap();
        assert_eq!(set.as_deref(), Some("OK"));
    }
    let err = rl.try_acquire("orders:42", TTL).await.unwrap_err();
    assert!(err.is_contention(), "{err}");
    // The foreign value is untouched by the refused attempt and its rollback.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(holders(&nodes, "orders:42", "someone-else"), 3);
    for server in nodes.iter().take(3) {
        del(server, "orders:42");
    }
    rl.try_acquire("orders:42", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Two quorumlock workers and two rslock workers take three resource names on the same five
/// masters for 4 s; a shared witness counts the holders of each name. No two may ever hold
/// one name at once, and both sides must get their turns.
#[tokio::test(flavor = "multi_thread")]
async fn rslock_and_quorumlock_workers_never_hold_one_name_at_once() {
    const RESOURCES: [&str; 3] = ["job:a", "job:b", "job:c"];
    const RUN: Duration = Duration::from_secs(4);
    let nodes = five();
    let witness: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let holds = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + RUN;

    // Runs the critical section of `side` (0 quorumlock, 1 rslock) on resource `r`, within a
    // validity far longer than the section.
    let section = {
        let (witness, overlaps, holds) = (witness.clone(), overlaps.clone(), holds.clone());
        move |side: usize, r: usize| {
            let (witness, overlaps, holds) = (witness.clone(), overlaps.clone(), holds.clone());
            async move {
                if witness[r].fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                witness[r].fetch_sub(1, Ordering::SeqCst);
                holds[side].fetch_add(1, Ordering::SeqCst);
            }
        }
    };

    let mut workers = Vec::new();
    for w in 0..2 {
        let rl = builder(&nodes).retry_count(0).connected().await;
        let (section, stop) = (section.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut n = w;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                n += 1;
                let r = n % RESOURCES.len();
                if let Ok(lock) = rl.try_acquire(RESOURCES[r], TTL).await {
                    section(0, r).await;
                    let _ = lock.release().await;
                }
            }
        }));
    }
    for w in 0..2 {
        let foreign = rslock(&nodes.urls());
        let (section, stop) = (section.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut n = w + 1;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                n += 1;
                let r = n % RESOURCES.len();
                if let Ok(lock) = foreign.lock(RESOURCES[r], TTL).await {
                    section(1, r).await;
                    foreign.unlock(&lock).await;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let (ours, theirs) = (
        holds[0].load(Ordering::SeqCst),
        holds[1].load(Ordering::SeqCst),
    );
    let overlaps = overlaps.load(Ordering::SeqCst);
    println!("quorumlock holds {ours}, rslock holds {theirs}, overlaps {overlaps}");
    assert!(ours >= 20 && theirs >= 20, "{ours} and {theirs} holds");
    assert_eq!(overlaps, 0, "{ours} quorumlock and {theirs} rslock holds");
}

#[tokio::test(flavor = "multi_thread")]
async fn names_whose_keys_could_collide_or_leave_their_slot_are_refused_with_the_reason() {
    let nodes = five();
    let rl = connected(&nodes).await;
    for name in [
        "{orders}:queue",
        "{orders}:fence",
        "a{x}:leases",
        "{orders}",
        "a}b",
    ] {
        let err = rl.try_acquire(name, TTL).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidResource { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("key"), "{name}: {err}");
    }
    // A companion of another resource's key as a name: `{orders}:queue` is the line of
    // `orders`. Refused, so that the line of a waiter on `orders` is never taken as a lock.
    let waiting = rl.try_acquire("orders", TTL).await.unwrap();
    assert!(rl.try_acquire("{orders}:queue", TTL).await.is_err());
    waiting.release().await.unwrap();
    // A name with a hash tag of its own is a lock key like any other; its companions keep it.
    let tagged = Redlock::builder(nodes.urls()).build().unwrap();
    let lock = tagged.try_acquire("user:{42}", TTL).await.unwrap();
    // (The lock returned at a quorum: the first master's grant may still be on its way.)
    let first = nodes.iter().next().unwrap();
    assert!(
        eventually(Duration::from_secs(2), || get(first, "user:{42}")
            .as_deref()
            == Some(lock.token().expose()))
        .await,
        "{:?}",
        get(first, "user:{42}")
    );
    lock.release().await.unwrap();
    // Names that merely end like a companion are lock keys when they have no hash tag.
    rl.try_acquire("jobs:queue", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The value of `key` on master `i`, as bytes (rslock writes random bytes).
fn get_raw(nodes: &quorumlock_testkit::RedisNodes, i: usize, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut direct(nodes.iter().nth(i).unwrap()))
        .unwrap()
}

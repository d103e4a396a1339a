//! A lock key kept alive over its wait line: while anybody waits in a key's line the key exists,
//! so that a key whose holder's lease runs out goes to the head of the line, not to whoever asks
//! first; the holder's own lease still bounds what it holds. These scenarios put foreign
//! clients, late requests and dead holders against that: never two holders at once, a holder
//! whose lease ran out never renewed, a live waiter never passed by a plain acquire among
//! quorumlock's clients, a dead holder blocking its line no longer than its TTL and an entry
//! lease, and nothing left behind. Another Redlock client does not know the line: where it
//! deletes or renews the key, the line's order is not promised (docs/how-it-works.md), but
//! exclusion is, and those scenarios check that.

use std::time::{Duration, Instant};

use super::nothing_left;
use crate::common::*;
use quorumlock::Redlock;
use quorumlock_testkit::RedisNodes;

/// A waiter that renews its place in line about every 1.7 s (node timeout 500 ms: an entry
/// lease of 5 s, renewed every third of it), and waits up to 30 s.
fn slow_waiter(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap()
}

/// A client whose acquire gives up after `wait`.
fn impatient(nodes: &RedisNodes, wait: Duration) -> Redlock {
    builder(nodes).acquire_timeout(wait).build().unwrap()
}

/// Compare-and-PEXPIRE, as redsync and node-redlock renew their locks.
fn foreign_renew(nodes: &RedisNodes, key: &str, value: &str, ttl: Duration) -> usize {
    let script = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end",
    );
    nodes
        .iter()
        .filter(|s| {
            let renewed: i64 = script
                .key(key)
                .arg(value)
                .arg(ttl.as_millis() as u64)
                .invoke(&mut direct(s))
                .unwrap();
            renewed == 1
        })
        .count()
}

/// Compare-and-delete, as every Redlock client releases.
fn foreign_release(nodes: &RedisNodes, key: &str, value: &str) {
    let script = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('DEL', KEYS[1]) else return 0 end",
    );
    for s in nodes.iter() {
        let _: i64 = script.key(key).arg(value).invoke(&mut direct(s)).unwrap();
    }
}

type WaiterTask = tokio::task::JoinHandle<(Instant, Result<quorumlock::Lock, quorumlock::Error>)>;

fn spawn_waiter(waiter: &Redlock, res: &'static str, ttl: Duration) -> WaiterTask {
    let waiter = waiter.clone();
    tokio::spawn(async move {
        let lock = waiter.acquire(res, ttl).await;
        (Instant::now(), lock)
    })
}

/// A foreign holder renews with PEXPIRE (shorter than the line) while a quorumlock waiter
/// waits, then its lease runs out. The renewal voids the stretch's record, and the key expires
/// before the waiter's next attempt: a plain acquire may take it first (the line does not order
/// another library's renewals), but never while the waiter holds it, and the waiter gets it after.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_renewal_then_lapse_never_lets_a_plain_acquire_overlap_the_waiter() {
    let nodes = five();
    let res = "stretch-foreign-renew";
    let key = lock_key(res);
    for s in nodes.iter() {
        set(s, &key, "foreign-token", Duration::from_millis(1500));
    }
    let waiter = slow_waiter(nodes.urls());
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    let t0 = Instant::now();

    // The foreign holder renews its lock (PEXPIRE 200 ms), then stops: its lease runs out.
    let renewed = foreign_renew(&nodes, &key, "foreign-token", Duration::from_millis(200));
    assert_eq!(renewed, 5);
    eprintln!("after the foreign renewal: ttls {:?}", ttls(&nodes, &key));
    tokio::time::sleep(Duration::from_millis(300)).await;
    eprintln!(
        "after the foreign lease ran out ({:?}): values {:?}, lines {:?}",
        t0.elapsed(),
        values(&nodes, &key),
        nodes.iter().map(|s| line(s, &key)).collect::<Vec<_>>()
    );

    // Another client asks, plainly, while the waiter is still in line everywhere.
    let other = impatient(&nodes, Duration::from_millis(800));
    let taken = other.acquire(res, Duration::from_secs(10)).await;
    let taken_at = t0.elapsed();
    eprintln!(
        "plain acquire after {:?}: {:?}",
        taken_at,
        taken
            .as_ref()
            .map(|l| l.token().expose().to_owned())
            .map_err(ToString::to_string)
    );
    let w = tokio::time::timeout(Duration::from_secs(20), w_task).await;
    let Ok(Ok((w_at, Ok(_)))) = &w else {
        panic!("the waiter never acquired: {w:?}");
    };
    if let Ok(lock) = &taken {
        assert!(
            *w_at >= lock.deadline(),
            "two holders: the waiter acquired inside the plain acquire's lock ({taken_at:?})"
        );
    }
}

/// A foreign holder releases (compare-and-delete) while a quorumlock waiter waits: the key
/// falls free with no hand-off, and a plain acquire may take it before the waiter's next attempt
/// (the line does not order another library's releases), but the two never overlap.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_release_never_lets_a_plain_acquire_overlap_the_waiter() {
    let nodes = five();
    let res = "stretch-foreign-release";
    let key = lock_key(res);
    for s in nodes.iter() {
        set(s, &key, "foreign-token", Duration::from_secs(30));
    }
    let waiter = slow_waiter(nodes.urls());
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    // Just after one of the waiter's renewals.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    foreign_release(&nodes, &key, "foreign-token");
    let other = impatient(&nodes, Duration::from_millis(800));
    let taken = other.acquire(res, Duration::from_secs(10)).await;
    eprintln!(
        "plain acquire after {:?}: {:?}; lines {:?}",
        t0.elapsed(),
        taken
            .as_ref()
            .map(|l| l.token().expose().to_owned())
            .map_err(ToString::to_string),
        nodes.iter().map(|s| line(s, &key)).collect::<Vec<_>>()
    );
    let w = tokio::time::timeout(Duration::from_secs(20), w_task).await;
    let Ok(Ok((w_at, Ok(_)))) = &w else {
        panic!("the waiter never acquired: {w:?}");
    };
    if let Ok(lock) = &taken {
        assert!(
            *w_at >= lock.deadline(),
            "two holders: the waiter acquired inside the plain acquire's lock"
        );
    }
}

/// rslock holds with a short TTL while a quorumlock waiter waits; rslock's lease runs out, and
/// only then it renews (compare-and-SET PX). The key still exists, kept for the line, and the
/// renewal may win it back before the waiter's next attempt (the line does not order another
/// library's renewals); either way the waiter never holds while rslock's renewal does.
#[tokio::test(flavor = "multi_thread")]
async fn an_rslock_renewal_after_its_lease_ran_out_never_overlaps_the_waiter() {
    let nodes = five();
    let res = "stretch-rslock-late";
    let key = lock_key(res);
    let mut foreign = rslock::LockManager::new(nodes.urls());
    foreign.set_retry(1, Duration::from_millis(1));
    let theirs = foreign.lock(res, Duration::from_millis(600)).await.unwrap();
    let waiter = slow_waiter(nodes.urls());
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let renewed_at = t0.elapsed();
    let renewed = foreign.extend(&theirs, Duration::from_secs(5)).await;
    eprintln!(
        "rslock's renewal {:?} after its 600 ms lease: {:?}; ttls {:?}, lines {:?}",
        t0.elapsed(),
        renewed.as_ref().map(|_| ()).map_err(|e| format!("{e:?}")),
        ttls(&nodes, &key),
        nodes.iter().map(|s| line(s, &key)).collect::<Vec<_>>()
    );
    let w = tokio::time::timeout(Duration::from_secs(10), w_task).await;
    let at = match &w {
        Ok(Ok((at, Ok(_)))) => Some(at.duration_since(t0)),
        _ => None,
    };
    eprintln!("waiter acquired at {at:?}");
    let at = at.expect("the waiter never acquired");
    if renewed.is_ok() {
        assert!(
            at >= renewed_at + Duration::from_secs(5),
            "two holders: rslock renewed for 5 s at {renewed_at:?}, the waiter acquired at {at:?}"
        );
    }
}

/// A quorumlock holder with a short TTL dies (never releases) while a waiter waits: the waiter
/// gets the key within the holder's TTL plus its entry lease, and a plain acquire in between
/// does not pass it.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_short_lived_holder_passes_the_key_to_the_head_not_to_a_plain_acquire() {
    let nodes = five();
    let res = "stretch-dead-holder";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    let lock = holder
        .acquire(res, Duration::from_millis(300))
        .await
        .unwrap();
    let started = Instant::now();
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    std::mem::forget(lock);
    let waiter = slow_waiter(nodes.urls());
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let other = impatient(&nodes, Duration::from_millis(600));
    let taken = other.acquire(res, Duration::from_secs(10)).await;
    eprintln!(
        "plain acquire: {:?}",
        taken.as_ref().map(|_| ()).map_err(ToString::to_string)
    );
    let w = tokio::time::timeout(Duration::from_secs(10), w_task).await;
    let at = match &w {
        Ok(Ok((at, Ok(_)))) => Some(at.duration_since(started)),
        _ => None,
    };
    eprintln!("waiter acquired {at:?} after the holder");
    assert!(
        taken.is_err(),
        "a plain acquire passed the live head of the line"
    );
    let bound = Duration::from_millis(300) + Duration::from_secs(5);
    assert!(
        at.is_some_and(|at| at < bound),
        "the dead holder blocked the line past {bound:?}: {at:?}"
    );
}

/// A holder's extend is sent before its lease ends but reaches the masters only after it (a
/// slow route), while a waiter heads the line: either the extend is refused, or the waiter does
/// not hold the lock before the extended lock's deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_extend_never_overlaps_the_head_that_took_the_lapsed_key() {
    let nodes = five();
    let res = "stretch-late-extend";
    let key = lock_key(res);
    let h_proxies = proxies(&nodes);
    let holder = Redlock::builder(urls(&h_proxies))
        .retry_delay(Duration::from_millis(20))
        .node_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let mut lock = holder
        .acquire(res, Duration::from_millis(2000))
        .await
        .unwrap();
    let t0 = Instant::now();
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    let w_proxies = proxies(&nodes);
    let waiter = Redlock::builder(urls(&w_proxies))
        .retry_delay(Duration::from_millis(50))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap();
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    // The extend leaves at ~1700 ms and lands ~500 ms later, after the 2 s lease.
    tokio::time::sleep(Duration::from_millis(1700).saturating_sub(t0.elapsed())).await;
    for p in &h_proxies {
        p.delay(Duration::from_millis(500), Duration::ZERO, Duration::ZERO);
    }
    let extended = lock.extend(Duration::from_secs(10)).await;
    eprintln!(
        "extend at {:?}: {:?}, deadline in {:?}",
        t0.elapsed(),
        extended.as_ref().map_err(ToString::to_string),
        lock.remaining()
    );
    let w = tokio::time::timeout(Duration::from_secs(15), w_task).await;
    match w {
        Ok(Ok((at, Ok(w_lock)))) => {
            let left = lock.deadline().saturating_duration_since(at);
            eprintln!(
                "waiter acquired at {:?} on {} masters; the extended lock had {left:?} left",
                at - t0,
                holders(&nodes, &key, w_lock.token().expose())
            );
            assert!(
                extended.is_err() || left.is_zero(),
                "two holders: the waiter acquired while the extended lock had {left:?} left"
            );
        }
        other => eprintln!(
            "waiter did not acquire: {:?}",
            other.map(|r| r.map(|(_, l)| l.map(|_| ()).map_err(|e| e.to_string())))
        ),
    }
}

/// A holder extends (within the stretch, so its record carries the renewal) and then pauses
/// past its original TTL: a waiter must not take the key before the extended deadline.
#[tokio::test(flavor = "multi_thread")]
async fn an_extend_within_the_line_is_honoured_by_the_head() {
    let nodes = five();
    let res = "stretch-extend-honoured";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    // Long enough to outlast the waiter's arrival in line on a loaded machine.
    let mut lock = holder
        .acquire(res, Duration::from_millis(1000))
        .await
        .unwrap();
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    let waiter = Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(30))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap();
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    lock.extend(Duration::from_millis(2000)).await.unwrap();
    let deadline = lock.deadline();
    let w = tokio::time::timeout(Duration::from_secs(10), w_task).await;
    if let Ok(Ok((at, Ok(_)))) = w {
        assert!(
            at >= deadline,
            "two holders: the waiter acquired {:?} before the extended deadline",
            deadline - at
        );
    } else {
        panic!("the waiter never acquired");
    }
}

/// Once a dead holder's key went to the waiter and the waiter released, nobody holds or waits:
/// the masters keep no key of the resource.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_left_behind_once_the_line_is_done() {
    let nodes = five();
    let res = "stretch-leftovers";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    let lock = holder
        .acquire(res, Duration::from_millis(300))
        .await
        .unwrap();
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    std::mem::forget(lock);
    let waiter = slow_waiter(nodes.urls());
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    let (_, w_lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
        .await
        .unwrap()
        .unwrap();
    w_lock.unwrap().release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_millis(100)).await;
}

/// An owner's lock with a short TTL, a key kept alive over a line that a long-leased waiter
/// has since left, and a live waiter with a short entry lease. The owner takes its key over
/// (a second `acquire_as`) and then dies: its key lives as long as the lock it took over had
/// left and its own TTL, so the live waiter gets it within about those plus its entry lease,
/// not when the departed waiter's entry would have lapsed.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_owners_takeover_blocks_the_line_no_longer_than_its_ttl() {
    dead_owner_behind_a_departed_waiter("stretch-owner-takeover", true).await;
}

/// As above without the takeover: the owner dies holding its first lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_owner_blocks_the_line_no_longer_than_its_ttl() {
    dead_owner_behind_a_departed_waiter("stretch-owner-plain", false).await;
}

async fn dead_owner_behind_a_departed_waiter(res: &'static str, take_over: bool) {
    let nodes = five();
    let key = lock_key(res);
    let owner = connected(&nodes).await;
    let ttl = Duration::from_millis(1000);
    let first = owner.acquire_as(res, "worker-7", ttl).await.unwrap();
    granted_everywhere(&nodes, &key, first.token().expose()).await;
    // A waiter with a 30 s entry lease takes its place, then leaves.
    let long = Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_secs(10))
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::from_secs(60))
        .retry_count(100_000)
        .build()
        .unwrap();
    let long_task = spawn_waiter(&long, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    // A live waiter with a 1 s entry lease.
    let short = connected(&nodes).await;
    let s_task = spawn_waiter(&short, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 2).await;
    long_task.abort();
    assert!(
        eventually(Duration::from_secs(2), || nodes.iter().all(|s| line(
            s, &key
        )
        .len()
            == 1))
        .await,
        "the long-leased waiter never left"
    );
    // The owner takes its key over, and dies with both locks.
    let second = match take_over {
        true => Some(owner.acquire_as(res, "worker-7", ttl).await.unwrap()),
        false => None,
    };
    let t0 = Instant::now();
    eprintln!(
        "after the takeover: values {:?}, ttls {:?}",
        values(&nodes, &key),
        ttls(&nodes, &key)
    );
    std::mem::forget(first);
    std::mem::forget(second);
    let w = tokio::time::timeout(Duration::from_secs(8), s_task).await;
    let at = match &w {
        Ok(Ok((at, Ok(_)))) => Some(at.duration_since(t0)),
        _ => None,
    };
    eprintln!(
        "the live waiter acquired {at:?} after the takeover; ttls now {:?}",
        ttls(&nodes, &key)
    );
    let bound = ttl + ttl + Duration::from_secs(1);
    assert!(
        at.is_some_and(|at| at < bound),
        "a dead owner's {ttl:?} lock blocked a live waiter for more than {bound:?}: {at:?}"
    );
}

/// An elected leader with a 1 s term dies (never renews, never resigns) while a candidate waits
/// in line and then goes quiet (its route swallows everything; its place in line lasts its
/// 5 s entry lease). Once the leader's term has run out, `leader()` must not name it: it
/// leads no more, and any candidate may take the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_leader_is_not_reported_once_its_term_ran_out() {
    let nodes = five();
    let name = "stretch-election";
    let key = lock_key(name);
    let rl = connected(&nodes).await;
    let term = Duration::from_millis(1000);
    let lock = rl.elect(name, term, "a").await.unwrap();
    let t0 = Instant::now();
    let marked = format!("~elected:{}", lock.token().expose());
    granted_everywhere(&nodes, &key, &marked).await;
    std::mem::forget(lock);
    let c_proxies = proxies(&nodes);
    let candidate = slow_waiter(urls(&c_proxies));
    let campaign =
        tokio::spawn(async move { candidate.elect(name, Duration::from_secs(10), "b").await });
    waiters_in_line(&nodes, &key, 1).await;
    for p in &c_proxies {
        p.blackhole();
    }
    tokio::time::sleep((term + Duration::from_millis(300)).saturating_sub(t0.elapsed())).await;
    let reader = client(&nodes);
    let mut seen = Vec::new();
    for _ in 0..10 {
        let leader = reader.leader(name).await.unwrap();
        seen.push((t0.elapsed(), leader.map(|l| (l.value, l.ttl))));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("leader() after a {term:?} term: {seen:?}");
    campaign.abort();
    let named: Vec<_> = seen
        .iter()
        .filter(|(_, l)| l.as_ref().is_some_and(|(v, _)| v == "a"))
        .collect();
    assert!(
        named.is_empty(),
        "the dead leader of a {term:?} term was reported leading: {named:?}"
    );
}

/// A holder with a 1 s lease dies while a waiter waits in line and then goes quiet. Once the
/// lease has run out, `inspect()` must not report the resource held by that holder: the key
/// is anybody's at the head of the line.
#[tokio::test(flavor = "multi_thread")]
async fn inspect_does_not_report_a_holder_whose_lease_ran_out() {
    let nodes = five();
    let res = "stretch-inspect";
    let key = lock_key(res);
    let rl = connected(&nodes).await;
    let ttl = Duration::from_millis(1000);
    let lock = rl.acquire(res, ttl).await.unwrap();
    let t0 = Instant::now();
    let fingerprint = lock.token().fingerprint();
    granted_everywhere(&nodes, &key, lock.token().expose()).await;
    std::mem::forget(lock);
    let w_proxies = proxies(&nodes);
    let waiter = slow_waiter(urls(&w_proxies));
    let w_task = spawn_waiter(&waiter, res, Duration::from_secs(10));
    waiters_in_line(&nodes, &key, 1).await;
    for p in &w_proxies {
        p.blackhole();
    }
    tokio::time::sleep((ttl + Duration::from_millis(500)).saturating_sub(t0.elapsed())).await;
    let seen = rl.inspect(res).await.unwrap();
    eprintln!(
        "inspect {:?} after a {ttl:?} lease: {:?}",
        t0.elapsed(),
        seen.verdict
    );
    w_task.abort();
    assert!(
        !matches!(&seen.verdict, quorumlock::Verdict::Held { fingerprint: f, .. } if *f == fingerprint),
        "inspect reports the resource held by a holder whose lease ran out: {:?}",
        seen.verdict
    );
}

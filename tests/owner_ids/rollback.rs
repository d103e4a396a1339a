//! Attacks on the rollback of an owner's takeover (`lua/restore.lua`), against real
//! redis-server processes. Each test builds one order of requests on the masters and checks
//! the guarantees: a lock that says it holds keeps its key on a quorum of masters and keeps
//! everyone else out; a failed or dropped acquire costs no other lock anything.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);
const OWNER: &str = "worker-7";

/// Checks, once, that `lock` still holds as it says: its token on a quorum, and a plain
/// client and another owner both refused.
async fn still_exclusive(nodes: &RedisNodes, lock: &Lock, what: &str) {
    let key = lock_key(lock.resource());
    let token = lock.token().expose().to_owned();
    let says = lock.remaining();
    let vals = values(nodes, &key);
    println!(
        "[{what}] holder says {says:?} left; token {token}; masters {vals:?} pttl {:?}",
        ttls(nodes, &key)
    );
    assert!(
        says > Duration::from_millis(500),
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

/// A chain of three attempts of one owner: A holds V on every master; a second attempt B (which
/// is then dropped) takes V over on masters 1 and 2; a third attempt C (then dropped too) takes
/// B's value over there. B's rollback arrives first, while the key holds C, then C's.
/// Defect (fixed): C's rollback put B's value back, and nobody ever put V back: A, still holding
/// by its own account, lost its quorum to two attempts that both failed. Now B's rollback leaves
/// C's note naming V, and C's puts V back.
/// Runs the chain; `b_first`: B's rollback lands before C's (else after). Returns the
/// masters, the live lock A and the values of A, B and C.
async fn chain(b_first: bool) -> (RedisNodes, Lock, Redlock, [String; 3]) {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);

    // B and C reach masters 1 and 2 only, through proxies whose replies come 300 ms late.
    let (pb, urls_b) = reaching(&nodes, &[1, 2]);
    let (pc, urls_c) = reaching(&nodes, &[1, 2]);
    let mk = |urls| {
        Redlock::builder(urls)
            .node_timeout(Duration::from_secs(5))
            .acquire_timeout(Duration::ZERO)
            .retry_count(0)
            .build()
            .unwrap()
    };
    let (b, c) = (mk(urls_b), mk(urls_c));
    // Connected before the delays: no connection's setup stretches the steps timed below.
    b.connect().await.unwrap();
    c.connect().await.unwrap();
    for p in pb.iter().chain(pc.iter()) {
        p.delay(Duration::ZERO, Duration::from_millis(300), Duration::ZERO);
    }

    // B names V on masters 1 and 2 and takes it over; before it hears, it is dropped, and its
    // rollback (a restore of V) takes 1.5 s on its way.
    let bt = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_as("r", OWNER, TTL).await })
    };
    let bv = taken_over(&nodes, &key, OWNER, &[1, 2], &[&v]).await;
    println!("B took over: {bv}; masters {:?}", values(&nodes, &key));
    let up = if b_first { 1500 } else { 4500 };
    for p in &pb[1..] {
        p.delay(
            Duration::from_millis(up),
            Duration::from_millis(300),
            Duration::ZERO,
        );
    }
    bt.abort();
    let _ = bt.await;
    let b_dropped = Instant::now();

    // C names B's value on masters 1 and 2 and takes it over; dropped too, its rollback takes
    // 3 s on its way: it lands after B's.
    let ct = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire_as("r", OWNER, TTL).await })
    };
    let cv = taken_over(&nodes, &key, OWNER, &[1, 2], &[&v, &bv]).await;
    println!("C took over: {cv}; masters {:?}", values(&nodes, &key));
    // Both orders need C to have taken over within 1.4 s of B's drop: before B's rollback
    // (1.5 s on its way) lands, or, for C's first, so that C's (3 s on its way from C's drop)
    // lands before B's (4.5 s).
    assert!(
        b_dropped.elapsed() < Duration::from_millis(1400),
        "C took over too late for the order set up: {:?} after B's drop (B's rollback lands {up} ms after it)",
        b_dropped.elapsed()
    );
    let _ = b_dropped;
    for p in &pc[1..] {
        p.delay(
            Duration::from_secs(3),
            Duration::from_millis(300),
            Duration::ZERO,
        );
    }
    ct.abort();
    let _ = ct.await;

    // Both rollbacks land.
    let until = Instant::now() + Duration::from_millis(if b_first { 3600 } else { 4600 });
    let mut seen: Vec<Vec<Option<String>>> = Vec::new();
    while Instant::now() < until {
        let vals = values(&nodes, &key);
        if seen.last() != Some(&vals) {
            println!("{:?} left by A; masters {vals:?}", held.remaining());
            seen.push(vals);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("V={v} B={bv} C={cv}");
    drop((b, c, pb, pc));
    (nodes, held, first, [v, bv, cv])
}

/// Defect (fixed): the chain of the helper above, B's rollback first, left A without its keys
/// on a quorum of masters.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_two_dropped_attempts_never_leaves_a_live_lock_without_its_keys() {
    let (nodes, held, _first, _) = chain(true).await;
    still_exclusive(&nodes, &held, "after both dropped attempts rolled back").await;
    held.release().await.unwrap();
}

/// As above; the cost to A made visible: its extend, which needs its keys on a quorum.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_two_dropped_attempts_never_costs_a_live_lock_its_extend() {
    let (nodes, mut held, _first, [v, ..]) = chain(true).await;
    let key = lock_key("r");
    let extended = held.extend(TTL).await;
    println!(
        "A's extend: {extended:?}; masters {:?}",
        values(&nodes, &key)
    );
    assert!(
        extended.is_ok(),
        "A still held ({:?} left) when the two attempts failed, yet its extend failed: \
         {extended:?}; V={v}, masters {:?}",
        held.remaining(),
        values(&nodes, &key)
    );
}

/// Control: the same chain with the rollbacks landing in the other order (C's, then B's): V
/// goes back on masters 1 and 2.
#[tokio::test(flavor = "multi_thread")]
async fn control_a_chain_rolled_back_last_in_first_out_gives_v_back() {
    let (nodes, held, _first, _) = chain(false).await;
    still_exclusive(&nodes, &held, "after both rollbacks, C's first").await;
    held.release().await.unwrap();
}

/// Liveness: A (TTL 2 s) holds V; a dropped attempt B of the same owner with a long TTL (30 s)
/// took V over on masters 1 and 2; A releases (master 0 deletes, masters 1 and 2 hold B: left
/// alone); then B's rollback puts V back on masters 1 and 2 with the key's expiry, which the
/// takeover raised to B's 30 s. The resource A released stays blocked for ~30 s, well past A's
/// own TTL. Defect (fixed): A's release now notes V released where B took it over, and B's
/// rollback deletes the key there instead of putting V back.
#[tokio::test(flavor = "multi_thread")]
async fn a_released_resource_is_free_again_within_the_released_locks_ttl() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let a_ttl = Duration::from_secs(2);
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", OWNER, a_ttl).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let (pb, urls_b) = reaching(&nodes, &[1, 2]);
    let b = Redlock::builder(urls_b)
        .node_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    for p in &pb {
        p.delay(Duration::ZERO, Duration::from_millis(300), Duration::ZERO);
    }
    let bt = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_as("r", OWNER, Duration::from_secs(30)).await })
    };
    let bv = taken_over(&nodes, &key, OWNER, &[1, 2], &[&v]).await;
    for p in &pb[1..] {
        p.delay(
            Duration::from_millis(800),
            Duration::from_millis(300),
            Duration::ZERO,
        );
    }
    bt.abort();
    let _ = bt.await;
    let released = held.release().await;
    let at = Instant::now();
    println!(
        "A released: {released:?}; B={bv}; masters {:?}",
        values(&nodes, &key)
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    println!(
        "after B's rollback: masters {:?} pttl {:?}",
        values(&nodes, &key),
        ttls(&nodes, &key)
    );
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let mut got = None;
    while at.elapsed() < a_ttl + Duration::from_secs(1) {
        if let Ok(lock) = other.try_acquire("r", TTL).await {
            got = Some(lock);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        got.is_some(),
        "A (TTL {a_ttl:?}) released {:?} ago, yet the resource is still held: masters {:?} \
         pttl {:?} (V={v})",
        at.elapsed(),
        values(&nodes, &key),
        ttls(&nodes, &key)
    );
    drop(pb);
}

/// Fencing on, the chain of two dropped attempts: fences seen by the successive holders of
/// other owners must strictly increase, and the holder A must keep its quorum (as the first
/// test). Here: A's fence, then once A's time is up, the next holder's.
#[tokio::test(flavor = "multi_thread")]
async fn fencing_a_takeover_rolled_back_never_lets_a_later_holder_reuse_a_fence() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let v = held.token().expose().to_owned();
    let fa = held.fencing_token().unwrap();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let (pb, urls_b) = reaching(&nodes, &[1, 2]);
    let b = Redlock::builder(urls_b)
        .fencing(true)
        .node_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    for p in &pb {
        p.delay(Duration::ZERO, Duration::from_millis(300), Duration::ZERO);
    }
    let bt = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_as("r", OWNER, TTL).await })
    };
    let ok = eventually(Duration::from_secs(5), || {
        bt.is_finished() || holders(&nodes, &key, &v) < 3
    })
    .await;
    println!("ok {ok}; masters {:?}", values(&nodes, &key));
    if bt.is_finished() {
        panic!(
            "B finished: {:?}",
            bt.await.unwrap().map(|l| l.token().expose().to_owned())
        );
    }
    let _bv = taken_over(&nodes, &key, OWNER, &[1, 2], &[&v]).await;
    bt.abort();
    let _ = bt.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    still_exclusive(&nodes, &held, "fenced, after B's rollback").await;
    held.release().await.unwrap();
    let other = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let next = other.acquire("r", Duration::from_secs(3)).await.unwrap();
    let fn_ = next.fencing_token().unwrap();
    println!("A's fence {fa}, next holder's {fn_}");
    assert!(fn_ > fa, "fence went backwards: A {fa}, next {fn_}");
    next.release().await.unwrap();
    drop(pb);
}

/// Five masters. A holds under an owner id (TTL 1 s) and renews every 200 ms. B, of the same
/// owner (TTL 2 s), reaches masters 2 to 4 only (2 blackholed), takes A's value over on 3 and 4
/// and is dropped; its rollback takes 3 s on its way, landing after the taken key would have
/// expired had nothing kept it. Defect (fixed): A's renewals were refused on 3 and 4 (the value
/// was B's), key and note expired together, the late rollback found no note and put nothing
/// back: A, which never failed a renewal, held its value on 3 of 5 masters from then on. Now A's
/// renewals keep a key taken over from it, and its note, alive while A lives, so the rollback
/// puts A's value back once it lands.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_rollback_gives_a_renewing_lock_its_keys_back() {
    let nodes = five();
    let key = lock_key("r");
    let a_ttl = Duration::from_secs(1);
    let first = Redlock::builder(nodes.urls()).build().unwrap();
    // Connected first: the default node timeout (50 ms here) must not go to connecting.
    first.connect().await.unwrap();
    let mut held = first.acquire_as("r", OWNER, a_ttl).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 5).await);
    let renewing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let renewer = {
        let renewing = renewing.clone();
        tokio::spawn(async move {
            let mut failures = Vec::new();
            while renewing.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Err(e) = held.extend(a_ttl).await {
                    failures.push(e.to_string());
                }
            }
            (held, failures)
        })
    };

    let (pb, urls_b) = reaching(&nodes, &[2, 3, 4]);
    let b = Redlock::builder(urls_b)
        .node_timeout(Duration::from_millis(1500))
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    // Connected first: master 2's requests then wait out the node timeout, and B's attempt is
    // still undecided when its takeovers on 3 and 4 run.
    b.connect().await.unwrap();
    pb[2].blackhole();
    let bt = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_as("r", OWNER, Duration::from_secs(2)).await })
    };
    let bv = taken_over(&nodes, &key, OWNER, &[3, 4], &[&v]).await;
    for p in &pb[3..] {
        p.delay(Duration::from_secs(3), Duration::ZERO, Duration::ZERO);
    }
    bt.abort();
    let _ = bt.await;
    let dropped = Instant::now();
    println!("B took over: {bv}; masters {:?}", values(&nodes, &key));

    // Everything lands: B's rollback 3 s after the drop; then A renews once more everywhere.
    tokio::time::sleep(Duration::from_millis(3600)).await;
    let restored = eventually(Duration::from_secs(1), || holders(&nodes, &key, &v) == 5).await;
    let vals = values(&nodes, &key);
    renewing.store(false, std::sync::atomic::Ordering::SeqCst);
    let (held, failures) = renewer.await.unwrap();
    println!(
        "{:?} after B's drop: A says {:?} left; masters {vals:?} pttl {:?}",
        dropped.elapsed(),
        held.remaining(),
        ttls(&nodes, &key)
    );
    assert!(failures.is_empty(), "A failed renewals: {failures:?}");
    assert!(
        restored,
        "A's value (V={v}) is on {} of 5 masters once B's rollback landed: {vals:?}",
        holders(&nodes, &key, &v)
    );
    held.release().await.unwrap();
    drop(pb);
}

// A failed lock's renewal keeps alive only a key taken over from it: never a key another
// owner or another client took once a takeover's note was left behind.

/// The takeover notes (`:took`) of `key` on each master, and their PTTL.
fn notes(nodes: &RedisNodes, key: &str) -> Vec<(Vec<(String, String)>, i64)> {
    let took = quorumlock::companion_key(key, ":took");
    nodes
        .iter()
        .map(|s| {
            let h: Vec<(String, String)> = query(s, redis::cmd("HGETALL").arg(&took));
            (h, pttl(s, &took))
        })
        .collect()
}

/// Polls (every 50 ms, up to `within`) a try_acquire of `resource` by another owner; returns
/// when it first succeeded, measured from `from`.
async fn free_at(
    nodes: &RedisNodes,
    resource: &str,
    from: Instant,
    within: Duration,
) -> Option<Duration> {
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Ok(l) = other
            .try_acquire(resource, Duration::from_millis(500))
            .await
        {
            let at = from.elapsed();
            l.release().await.unwrap();
            return Some(at);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A→B→C, each a later attempt of the same owner that names the earlier one's value, takes it
/// over everywhere and wins (TTL 5 s each). C releases: the key is gone on every master, but
/// `:took` keeps B's note (B→A's value). Then `take` takes the free key for 300 ms and its
/// holder dies. A (still within its deadline; its extends fail) calls extend once. Returns the
/// masters' PTTLs of the key after A's extend and when the resource became free again after
/// `take`'s grant.
async fn stale_note_then(
    nodes: &RedisNodes,
    take: impl std::future::Future<Output = String>,
) -> (Vec<i64>, Vec<i64>, Option<Duration>) {
    let key = lock_key("r");
    let ttl = Duration::from_secs(5);
    let rl = client(nodes);
    let mut a = rl.acquire_as("r", OWNER, ttl).await.unwrap();
    granted_everywhere(nodes, &key, a.token().expose()).await;
    let b = rl.acquire_as("r", OWNER, ttl).await.unwrap();
    granted_everywhere(nodes, &key, b.token().expose()).await;
    let c = rl.acquire_as("r", OWNER, ttl).await.unwrap();
    granted_everywhere(nodes, &key, c.token().expose()).await;
    c.release().await.unwrap();
    assert_gone_everywhere(nodes, &key).await;
    println!("C released; notes left: {:?}", notes(nodes, &key));

    let who = take.await;
    let taken_at = Instant::now();
    let before = ttls(nodes, &key);
    let extended = a.extend(ttl).await;
    let after = ttls(nodes, &key);
    println!(
        "{who} holds {:?}; pttl before A's extend {before:?}, after {after:?}; A's extend: \
         {extended:?}; notes {:?}",
        values(nodes, &key),
        notes(nodes, &key)
    );
    assert!(
        extended.is_err(),
        "A's extend won on a key it does not hold"
    );
    let free = free_at(nodes, "r", taken_at, Duration::from_secs(8)).await;
    drop((a, b));
    (before, after, free)
}

/// Another owner takes the free key (300 ms) and dies. Defect (fixed): A's
/// failed extend renews the other owner's key for A's TTL on every master.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_locks_renewal_never_renews_another_owners_key_over_a_stale_note() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let other = connected(&nodes).await;
    let (before, after, free) = stale_note_then(&nodes, async {
        let d = other
            .acquire_as("r", "another-owner", Duration::from_millis(300))
            .await
            .unwrap();
        granted_everywhere(&nodes, &lock_key("r"), d.token().expose()).await;
        std::mem::forget(d);
        "another owner".to_string()
    })
    .await;
    println!("free again {free:?} after the other owner's 300 ms grant");
    assert!(
        after.iter().all(|&t| t <= 300),
        "RENEWED ANOTHER OWNER'S KEY: its pttl was {before:?} (its TTL 300 ms), after A's \
         failed extend {after:?}; free again {free:?} after its grant"
    );
}

/// Another Redlock client (`SET NX PX 300`, a node-redlock-shaped value) takes the free key and
/// dies. Defect (fixed): A's failed extend renews that client's key, which the
/// documentation says keeps the expiry its own client gives it.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_locks_renewal_never_renews_another_clients_key_over_a_stale_note() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let (before, after, free) = stale_note_then(&nodes, async {
        for s in nodes.iter() {
            let ok: Option<String> = query(
                s,
                redis::cmd("SET")
                    .arg(lock_key("r"))
                    .arg("9b1f0c2de4a35b6c7d8e9fa0b1c2d3e4")
                    .arg("NX")
                    .arg("PX")
                    .arg(300),
            );
            assert_eq!(ok.as_deref(), Some("OK"));
        }
        "another Redlock client".to_string()
    })
    .await;
    println!("free again {free:?} after the other client's 300 ms grant");
    assert!(
        after.iter().all(|&t| t <= 300),
        "RENEWED ANOTHER CLIENT'S KEY: its pttl was {before:?} (it set 300 ms), after A's failed \
         extend {after:?}; free again {free:?} after its SET"
    );
}

/// As the stale-note scenarios, without a chain:
/// A's attempt B takes A's value over everywhere, wins, and releases. B's release takes
/// release.lua's fast path (one key, no line, still B's: DEL and return), which never drops
/// B's note B→A from `:took`. Another owner then takes the key for 300 ms and dies; A's failed
/// extend renews that owner's key for A's TTL (5 s) on every master. Defect (fixed).
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_that_won_and_was_released_leaves_no_note_that_renews_another_owners_key() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let ttl = Duration::from_secs(5);
    let rl = connected(&nodes).await;
    let mut a = rl.acquire_as("r", OWNER, ttl).await.unwrap();
    granted_everywhere(&nodes, &key, a.token().expose()).await;
    let b = rl.acquire_as("r", OWNER, ttl).await.unwrap();
    granted_everywhere(&nodes, &key, b.token().expose()).await;
    b.release().await.unwrap();
    assert_gone_everywhere(&nodes, &key).await;
    let other = connected(&nodes).await;
    let d = other
        .acquire_as("r", "another-owner", Duration::from_millis(300))
        .await
        .unwrap();
    granted_everywhere(&nodes, &key, d.token().expose()).await;
    std::mem::forget(d);
    let before = ttls(&nodes, &key);
    let extended = a.extend(ttl).await;
    let after = ttls(&nodes, &key);
    println!(
        "A's extend {extended:?}; the other owner's key pttl before {before:?}, after {after:?}; \
         notes {:?}",
        notes(&nodes, &key)
    );
    assert!(extended.is_err());
    assert!(
        after.iter().all(|&t| t <= 300),
        "RENEWED ANOTHER OWNER'S KEY: pttl {before:?} (its TTL 300 ms), after A's failed extend \
         {after:?}"
    );
}

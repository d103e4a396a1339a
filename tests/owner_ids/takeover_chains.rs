//! Orders of takeovers and rollbacks under one owner id, against real redis-server processes:
//! chains of three attempts rolled back in every order, a winning attempt in the middle of a
//! chain, the live lock released or extended while a chain is open, a value displaced twice and
//! then released, and fencing on. Guarantees checked: a lock that says it holds keeps its key on
//! a quorum of masters and keeps everyone else out; a failed or dropped acquire costs no other
//! lock anything (its extend still succeeds); a released resource is free again within the TTL
//! of what is on it.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, Lock, Redlock};
use quorumlock_testkit::{FaultProxy, RedisNodes, RedisServer};
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(10);
const OWNER: &str = "worker-7";

fn notes(nodes: &RedisNodes, key: &str) -> Vec<Vec<(String, String)>> {
    let took = if key.contains('{') {
        format!("{key}:took")
    } else {
        format!("{{{key}}}:took")
    };
    nodes
        .iter()
        .map(|s| {
            let mut v: Vec<(String, String)> = query(s, redis::cmd("HGETALL").arg(&took));
            v.sort();
            v
        })
        .collect()
}

/// Checks, once, that `lock` still holds as it says: its token on a quorum, each of those
/// keeping the key at least as long as it says, and a plain client and another owner both
/// refused. Returns a description of the first broken guarantee.
async fn exclusive(nodes: &RedisNodes, lock: &Lock, what: &str) -> Result<(), String> {
    let key = lock_key(lock.resource());
    let token = lock.token().expose().to_owned();
    let says = lock.remaining();
    let vals = values(nodes, &key);
    let left = ttls(nodes, &key);
    println!("[{what}] holder says {says:?} left; token {token}; masters {vals:?} pttl {left:?}");
    if says < Duration::from_millis(300) {
        return Err(format!("[{what}] the lock ran out: {says:?}"));
    }
    let quorum = nodes.len() / 2 + 1;
    let holds_token = |s: &RedisServer| match get(s, &key) {
        Some(v) if v == token => pttl(s, &key),
        _ => i64::MIN / 2,
    };
    let keeping = kept_past_deadline(nodes, holds_token, || lock.remaining())
        .iter()
        .filter(|past| **past >= -50)
        .count();
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let plain = other.try_acquire(lock.resource(), TTL).await;
    let owner = other.acquire_as(lock.resource(), "intruder", TTL).await;
    if plain.is_ok() || owner.is_ok() {
        return Err(format!(
            "[{what}] MUTUAL EXCLUSION BROKEN: the holder says {says:?} left, yet a plain client \
             acquired: {} and another owner acquired: {}; masters {vals:?}",
            plain.is_ok(),
            owner.is_ok()
        ));
    }
    if keeping < quorum {
        return Err(format!(
            "[{what}] the holder says {says:?} left but its token is kept that long on {keeping} \
             (< {quorum}) masters: {vals:?} pttl {left:?}"
        ));
    }
    Ok(())
}

/// One attempt of `OWNER` reaching masters 1 and 2 through proxies whose replies come 300 ms
/// late.
struct Attempt {
    client: Redlock,
    proxies: Vec<FaultProxy>,
    task: JoinHandle<Result<Lock, Error>>,
    value: String,
}

impl Attempt {
    /// Starts an attempt and waits until masters 1 and 2 both hold its value (a value of
    /// `OWNER` other than each of `not`).
    async fn start(nodes: &RedisNodes, not: &[&str], ttl: Duration, fencing: bool) -> Attempt {
        let (proxies, urls) = reaching(nodes, &[1, 2]);
        let client = Redlock::builder(urls)
            .node_timeout(if ttl < Duration::from_secs(8) {
                ttl / 2
            } else {
                Duration::from_secs(8)
            })
            .acquire_timeout(Duration::ZERO)
            .retry_count(0)
            .fencing(fencing)
            .build()
            .unwrap();
        assert_eq!(client.connect().await.unwrap().reachable, 2);
        for p in &proxies {
            p.delay(Duration::ZERO, Duration::from_millis(300), Duration::ZERO);
        }
        let task = {
            let client = client.clone();
            tokio::spawn(async move { client.acquire_as("r", OWNER, ttl).await })
        };
        let value = taken_over(nodes, &lock_key("r"), OWNER, &[1, 2], not).await;
        Attempt {
            client,
            proxies,
            task,
            value,
        }
    }

    /// Drops the attempt; its rollback reaches masters 1 and 2 `up` later.
    async fn drop_with_rollback_in(&mut self, up: Duration) {
        for p in &self.proxies[1..] {
            p.delay(up, Duration::from_millis(300), Duration::ZERO);
        }
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

/// Watches the masters until `until`, printing every change.
async fn watch(nodes: &RedisNodes, key: &str, until: Instant) {
    let mut seen: Option<Vec<Option<String>>> = None;
    while Instant::now() < until {
        let vals = values(nodes, key);
        if seen.as_ref() != Some(&vals) {
            println!("masters {vals:?}");
            seen = Some(vals);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A holds V on every master; B, C and D (each dropped) take the key over on masters 1 and 2
/// in turn, each from the one before. Their rollbacks land in the order `order` (indexes into
/// [B, C, D]), 500 ms apart, once all three have taken over. Afterwards A must hold as it
/// says, and extend.
async fn three_dropped(order: [usize; 3]) -> Result<(), String> {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let mut held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let t0 = Instant::now();
    // Rollbacks land at t0 + 4 s + rank * 500 ms.
    let land = |i: usize| {
        let rank = order.iter().position(|&o| o == i).unwrap() as u32;
        t0 + Duration::from_millis(4000) + Duration::from_millis(500) * rank
    };
    let mut attempts: Vec<Attempt> = Vec::new();
    for i in 0..3 {
        let mut not: Vec<&str> = vec![&v];
        for a in &attempts {
            not.push(&a.value);
        }
        let not: Vec<String> = not.into_iter().map(str::to_owned).collect();
        let not: Vec<&str> = not.iter().map(String::as_str).collect();
        let mut a = Attempt::start(&nodes, &not, TTL, false).await;
        let up = land(i).saturating_duration_since(Instant::now());
        a.drop_with_rollback_in(up).await;
        println!("attempt {i} took over: {}; rollback in {up:?}", a.value);
        attempts.push(a);
    }
    assert!(
        Instant::now() < t0 + Duration::from_millis(4000),
        "the chain took too long to build"
    );
    println!("notes {:?}", notes(&nodes, &key));
    watch(&nodes, &key, t0 + Duration::from_millis(5600)).await;
    println!("notes after {:?}", notes(&nodes, &key));
    let res = exclusive(&nodes, &held, &format!("order {order:?}")).await;
    let extended = held.extend(TTL).await;
    println!("A's extend: {extended:?}");
    res?;
    if let Err(e) = extended {
        return Err(format!(
            "order {order:?}: A's extend failed after three dropped attempts: {e:?}; masters {:?}",
            values(&nodes, &key)
        ));
    }
    held.release().await.unwrap();
    drop(attempts);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn three_dropped_attempts_rolled_back_in_every_order_cost_the_live_lock_nothing() {
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    // Three orders at a time, each on masters of its own: most of each run is waiting.
    let mut broken = Vec::new();
    for orders in orders.chunks(3) {
        let runs = futures::future::join_all(orders.iter().map(|&o| three_dropped(o))).await;
        for e in runs.into_iter().filter_map(Result::err) {
            println!("BROKEN: {e}");
            broken.push(e);
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A holds V; B (dropped) takes it over on masters 1 and 2, A releases, then C (dropped) takes
/// B's value over. The rollbacks land in `order`. The resource A released must be free again
/// within A's TTL.
async fn released_under_a_chain(b_first: bool) -> Result<(), String> {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let a_ttl = Duration::from_secs(3);
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", OWNER, a_ttl).await.unwrap();
    let v = held.token().expose().to_owned();
    let released_by = Instant::now() + a_ttl;
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let t0 = Instant::now();
    let (b_at, c_at) = if b_first { (1800, 2300) } else { (2300, 1800) };
    let mut b = Attempt::start(&nodes, &[&v], Duration::from_secs(30), false).await;
    b.drop_with_rollback_in(
        (t0 + Duration::from_millis(b_at)).saturating_duration_since(Instant::now()),
    )
    .await;
    let released = held.release().await;
    println!(
        "A released: {released:?}; masters {:?}",
        values(&nodes, &key)
    );
    let mut c = Attempt::start(&nodes, &[&v, &b.value], Duration::from_secs(30), false).await;
    c.drop_with_rollback_in(
        (t0 + Duration::from_millis(c_at)).saturating_duration_since(Instant::now()),
    )
    .await;
    println!("notes {:?}", notes(&nodes, &key));
    watch(&nodes, &key, t0 + Duration::from_millis(2600)).await;
    println!("notes after {:?}", notes(&nodes, &key));
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let mut got = false;
    while Instant::now() < released_by + Duration::from_millis(500) {
        if let Ok(lock) = other.try_acquire("r", TTL).await {
            got = true;
            lock.release().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop((b, c));
    if !got {
        return Err(format!(
            "b_first {b_first}: A (TTL {a_ttl:?}) released, yet the resource is still held past \
             its TTL: masters {:?} pttl {:?}",
            values(&nodes, &key),
            ttls(&nodes, &key)
        ));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_displaced_twice_then_released_leaves_the_resource_free_within_its_ttl() {
    let mut broken = Vec::new();
    for b_first in [true, false] {
        if let Err(e) = released_under_a_chain(b_first).await {
            println!("BROKEN: {e}");
            broken.push(e);
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A holds V; B (dropped) takes V over on masters 1 and 2; C of the same owner then WINS (it
/// takes B's value over on masters 1 and 2, a quorum); D (dropped) takes C's value over on
/// masters 1 and 2. B's and D's rollbacks land afterwards in either order. C must hold as it
/// says, and extend.
async fn winner_in_the_middle(b_first: bool) -> Result<(), String> {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let t0 = Instant::now();
    let (b_at, d_at) = if b_first { (3500, 4200) } else { (4200, 3500) };
    let mut b = Attempt::start(&nodes, &[&v], TTL, false).await;
    b.drop_with_rollback_in(
        (t0 + Duration::from_millis(b_at)).saturating_duration_since(Instant::now()),
    )
    .await;
    let c = Attempt::start(&nodes, &[&v, &b.value], TTL, false).await;
    let mut won = match c.task.await.unwrap() {
        Ok(lock) => lock,
        Err(e) => return Err(format!("C did not win: {e:?}")),
    };
    let cv = won.token().expose().to_owned();
    assert_eq!(cv, c.value);
    println!("C won: {cv}; masters {:?}", values(&nodes, &key));
    let mut d = Attempt::start(&nodes, &[&v, &b.value, &cv], TTL, false).await;
    d.drop_with_rollback_in(
        (t0 + Duration::from_millis(d_at)).saturating_duration_since(Instant::now()),
    )
    .await;
    assert!(
        Instant::now() < t0 + Duration::from_millis(3500),
        "chain too slow"
    );
    println!("notes {:?}", notes(&nodes, &key));
    watch(&nodes, &key, t0 + Duration::from_millis(4800)).await;
    println!("notes after {:?}", notes(&nodes, &key));
    let res = exclusive(
        &nodes,
        &won,
        &format!("winner in the middle, b_first {b_first}"),
    )
    .await;
    let extended = won.extend(TTL).await;
    println!("C's extend: {extended:?}");
    res?;
    if let Err(e) = extended {
        return Err(format!(
            "b_first {b_first}: C's extend failed: {e:?}; masters {:?}",
            values(&nodes, &key)
        ));
    }
    // C releases: the resource is free at once for another owner.
    won.release().await.unwrap();
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let after = other.acquire_as("r", "intruder", TTL).await;
    if after.is_err() {
        return Err(format!(
            "b_first {b_first}: C released, yet another owner is refused: masters {:?}",
            values(&nodes, &key)
        ));
    }
    drop((b, d, held));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_winning_attempt_in_the_middle_of_a_chain_keeps_its_lock_whatever_the_rollback_order() {
    let mut broken = Vec::new();
    for b_first in [true, false] {
        if let Err(e) = winner_in_the_middle(b_first).await {
            println!("BROKEN: {e}");
            broken.push(e);
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A (TTL 2 s) holds V; B (dropped, TTL 1 s) takes V over on masters 1 and 2 and its rollback
/// waits 1.5 s on its way; meanwhile the holder A extends (the extend is refused where B sits,
/// and may fail); after B's rollback A extends to 20 s; then C (dropped, TTL 1 s) takes V over
/// and its rollback lands 2.5 s later, after the 2 s A had at first. A must hold as it says
/// throughout, and extend at the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_extend_between_takeovers_keeps_the_notes_alive_for_the_rollback() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let mut held = first
        .acquire_as("r", OWNER, Duration::from_secs(2))
        .await
        .unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let mut b = Attempt::start(&nodes, &[&v], Duration::from_secs(1), false).await;
    b.drop_with_rollback_in(Duration::from_millis(600)).await;
    println!(
        "B took over {}; notes {:?}; pttl {:?}",
        b.value,
        notes(&nodes, &key),
        ttls(&nodes, &key)
    );
    let during = held.extend(Duration::from_secs(20)).await;
    println!(
        "A's extend while B sits: {during:?}; masters {:?}",
        values(&nodes, &key)
    );
    watch(&nodes, &key, Instant::now() + Duration::from_millis(800)).await;
    let after_b = held.extend(Duration::from_secs(20)).await;
    println!(
        "A's extend after B's rollback: {after_b:?}; pttl {:?}",
        ttls(&nodes, &key)
    );
    assert!(
        after_b.is_ok(),
        "A's extend after B's rollback failed: {after_b:?}"
    );
    let mut c = Attempt::start(&nodes, &[&v, &b.value], Duration::from_secs(1), false).await;
    c.drop_with_rollback_in(Duration::from_millis(2500)).await;
    println!(
        "C took over {}; notes {:?}; pttl {:?}",
        c.value,
        notes(&nodes, &key),
        ttls(&nodes, &key)
    );
    watch(&nodes, &key, Instant::now() + Duration::from_millis(3000)).await;
    println!("notes after {:?}", notes(&nodes, &key));
    exclusive(&nodes, &held, "after C's rollback")
        .await
        .unwrap();
    let extended = held.extend(Duration::from_secs(20)).await;
    assert!(
        extended.is_ok(),
        "A's extend failed after C's rollback: {extended:?}; masters {:?}",
        values(&nodes, &key)
    );
    held.release().await.unwrap();
    drop((b, c));
}

/// Fencing on: a chain of three dropped attempts (rolled back first to last), then A's time
/// ends; the fences of A and of the next holder (another owner) must strictly increase, and A
/// must hold as it says in between.
#[tokio::test(flavor = "multi_thread")]
async fn fencing_a_chain_of_three_dropped_attempts_keeps_the_holder_and_its_fence_order() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let fa = held.fencing_token().unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let t0 = Instant::now();
    let mut attempts: Vec<Attempt> = Vec::new();
    for i in 0..3u32 {
        let owned: Vec<String> = std::iter::once(v.clone())
            .chain(attempts.iter().map(|a| a.value.clone()))
            .collect();
        let not: Vec<&str> = owned.iter().map(String::as_str).collect();
        let mut a = Attempt::start(&nodes, &not, TTL, true).await;
        let at = t0 + Duration::from_millis(4000) + Duration::from_millis(500) * i;
        a.drop_with_rollback_in(at.saturating_duration_since(Instant::now()))
            .await;
        attempts.push(a);
    }
    watch(&nodes, &key, t0 + Duration::from_millis(5600)).await;
    exclusive(&nodes, &held, "fenced chain").await.unwrap();
    held.release().await.unwrap();
    let other = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let next = other.acquire("r", Duration::from_secs(3)).await.unwrap();
    let fnext = next.fencing_token().unwrap();
    println!("A's fence {fa}, next holder's {fnext}");
    assert!(fnext > fa, "fence went backwards: A {fa}, next {fnext}");
    next.release().await.unwrap();
    drop(attempts);
}

/// A holds V on every master (TTL 30 s). B, a client of the same owner reaching masters 0 and
/// 1 only, names V there and sends its takeovers; each takeover is held 8 s on its way (the
/// route slows the connection it went on). While they are on their way, the client's
/// connections to masters 0 and 1 time out and are replaced twice (other resources' attempts
/// with short node timeouts: the first connection after requests stuck on it, the second after
/// replies held on it), and B's attempt fails. B's rollback runs on the newest connections,
/// ahead of its takeovers. Then the takeovers land. A failed acquire must cost the live lock A
/// nothing: A must hold as it says and extend once everything has landed.
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_that_lands_after_its_rollback_on_a_twice_replaced_connection_costs_the_live_lock_nothing(
) {
    const SLOW: Duration = Duration::from_secs(8);
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let mut held = first
        .acquire_as("r", OWNER, Duration::from_secs(30))
        .await
        .unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    // B's node timeout follows each TTL (TTL / 20): 1.5 s for its attempt, 50 ms for the
    // other resources' attempts of the same client.
    let (proxies, urls) = reaching(&nodes, &[0, 1]);
    let b = Redlock::builder(urls)
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    assert_eq!(b.connect().await.unwrap().reachable, 2);
    let reached = &proxies[..2];
    for p in reached {
        p.hold();
    }
    let bt = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_as("r", OWNER, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for p in reached {
        p.slow_open_connections(SLOW);
    }
    let sent = Instant::now();
    for p in reached {
        p.deliver_held();
    }
    // B names V and sends its takeovers on the slow connections.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(holders(&nodes, &key, &v), 3, "{:?}", values(&nodes, &key));
    // Time out the first connections and open new ones.
    let mut retired = false;
    for i in 0..30 {
        if let Ok(other) = b
            .try_acquire(&format!("x{i}"), Duration::from_secs(1))
            .await
        {
            other.release().await.unwrap();
            retired = true;
            break;
        }
    }
    assert!(retired, "the first connections were never replaced");
    println!("first connections replaced after {:?}", sent.elapsed());
    // Time out the second connections: replies held.
    for p in reached {
        p.hold();
    }
    for i in 0..6 {
        let _ = b
            .try_acquire(&format!("y{i}"), Duration::from_secs(1))
            .await;
    }
    for p in reached {
        p.deliver_held();
    }
    let mut reopened = false;
    for i in 0..30 {
        if let Ok(other) = b
            .try_acquire(&format!("z{i}"), Duration::from_secs(1))
            .await
        {
            other.release().await.unwrap();
            reopened = true;
            break;
        }
    }
    assert!(reopened, "the second connections were never replaced");
    println!("second connections replaced after {:?}", sent.elapsed());
    let outcome = bt.await.unwrap();
    println!(
        "B: {:?} after {:?}; masters {:?}; notes {:?}",
        outcome.as_ref().map(|l| l.token().expose().to_owned()),
        sent.elapsed(),
        values(&nodes, &key),
        notes(&nodes, &key)
    );
    assert!(outcome.is_err(), "B won");
    assert!(sent.elapsed() < SLOW, "the takeovers landed already");
    // The takeovers land; watch a while after.
    watch(&nodes, &key, sent + SLOW + Duration::from_secs(2)).await;
    println!("notes {:?}", notes(&nodes, &key));
    let ex = exclusive(&nodes, &held, "after B's takeovers landed").await;
    let says = held.remaining();
    let extended = held.extend(Duration::from_secs(30)).await;
    println!("A says {says:?} left; A's extend: {extended:?}");
    assert!(ex.is_ok(), "{}", ex.unwrap_err());
    assert!(
        extended.is_ok(),
        "B failed, yet A (which says it holds, {:?} left) cannot extend: {extended:?}; masters \
         {:?} pttl {:?} notes {:?} (V={v})",
        held.remaining(),
        values(&nodes, &key),
        ttls(&nodes, &key),
        notes(&nodes, &key)
    );
    held.release().await.unwrap();
    drop(proxies);
}

/// A holds V; B (dropped) takes V over on masters 1 and 2, and its rollback is 2 s on its way.
/// Meanwhile A's key on those masters is B's value, of the same owner: nobody else gets in, but
/// an extend of A finds its token on one master only (a stated cost of two attempts of one owner
/// at once, `acquire_as`'s docs). Once the rollback lands, V is back on every master with at
/// least the life it had, and A extends.
#[tokio::test(flavor = "multi_thread")]
async fn while_a_dropped_takeovers_rollback_is_on_its_way_nobody_else_gets_in_and_then_v_is_back() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let mut held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let mut b = Attempt::start(&nodes, &[&v], TTL, false).await;
    b.drop_with_rollback_in(Duration::from_secs(2)).await;
    assert_eq!(values(&nodes, &key)[1].as_deref(), Some(b.value.as_str()));
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert!(other.try_acquire("r", TTL).await.is_err());
    assert!(other.acquire_as("r", "intruder", TTL).await.is_err());
    assert!(
        eventually(Duration::from_secs(4), || holders(&nodes, &key, &v) == 3).await,
        "V never came back: {:?}",
        values(&nodes, &key)
    );
    let past = kept_past_deadline(&nodes, |s| pttl(s, &key), || held.remaining());
    assert!(
        past.iter().all(|ms| *ms >= -50),
        "A says {:?}; masters keep the key {past:?} ms past that",
        held.remaining()
    );
    held.extend(TTL).await.unwrap();
    exclusive(&nodes, &held, "after the rollback")
        .await
        .unwrap();
    held.release().await.unwrap();
    drop(b.client);
}

/// A holds V; W, a plain client, waits in line for the resource; B (dropped, TTL 30 s) takes V
/// over on masters 1 and 2 and its rollback is 1 s on its way; A releases (master 0 hands the key
/// to W; masters 1 and 2 note V released); B's rollback then hands masters 1 and 2 to the line.
/// W must get the lock well within A's TTL, and hold it alone as it says.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_after_the_live_lock_released_hands_the_key_to_the_waiter_in_line() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let a_ttl = Duration::from_secs(6);
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", OWNER, a_ttl).await.unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let waiter = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let wt = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("r", TTL).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || nodes.iter().all(|s| line(
            s, &key
        )
        .len()
            == 1))
        .await
    );
    let mut b = Attempt::start(&nodes, &[&v], Duration::from_secs(30), false).await;
    b.drop_with_rollback_in(Duration::from_secs(1)).await;
    let released = held.release().await;
    let at = Instant::now();
    println!(
        "A released: {released:?}; masters {:?}; notes {:?}",
        values(&nodes, &key),
        notes(&nodes, &key)
    );
    let got = tokio::time::timeout(a_ttl, wt).await;
    println!(
        "W after {:?}: {:?}; masters {:?}",
        at.elapsed(),
        got.as_ref().map(|r| r
            .as_ref()
            .map(|l| l.as_ref().map(|l| l.token().expose().to_owned()))),
        values(&nodes, &key)
    );
    let lock = got
        .expect("W did not get the lock within A's TTL")
        .unwrap()
        .expect("W failed");
    exclusive(&nodes, &lock, "W after the rollback")
        .await
        .unwrap();
    lock.release().await.unwrap();
    drop(b);
}

/// A holds V under fencing; B (dropped) takes V over on masters 1 and 2 and its rollback is on
/// its way 1 s; C of the same owner WINS meanwhile (takes B's value over on masters 1 and 2).
/// C's fence must be above A's, and after C releases the next holder's above C's.
#[tokio::test(flavor = "multi_thread")]
async fn fencing_a_winner_over_a_dropped_takeover_gets_a_fence_above_the_holders() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let held = first.acquire_as("r", OWNER, TTL).await.unwrap();
    let fa = held.fencing_token().unwrap();
    let v = held.token().expose().to_owned();
    assert!(eventually(Duration::from_secs(2), || holders(&nodes, &key, &v) == 3).await);
    let mut b = Attempt::start(&nodes, &[&v], TTL, true).await;
    b.drop_with_rollback_in(Duration::from_secs(1)).await;
    let c = Attempt::start(&nodes, &[&v, &b.value], TTL, true).await;
    let won = c.task.await.unwrap().expect("C did not win");
    let fc = won.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!(
        "A {fa}, C {fc}; masters {:?}; notes {:?}",
        values(&nodes, &key),
        notes(&nodes, &key)
    );
    assert!(fc > fa, "C's fence {fc} not above A's {fa}");
    exclusive(&nodes, &won, "C over B's rollback")
        .await
        .unwrap();
    won.release().await.unwrap();
    let other = Redlock::builder(nodes.urls())
        .fencing(true)
        .build()
        .unwrap();
    let next = other.acquire("r", Duration::from_secs(3)).await.unwrap();
    let fnext = next.fencing_token().unwrap();
    println!("next {fnext}");
    assert!(fnext > fc, "fence went backwards: C {fc}, next {fnext}");
    next.release().await.unwrap();
    drop((b, held));
}

//! Another Redlock client holds a resource while a quorumlock client waits in its line, and
//! renews its lock with one of the writes a Redis client can renew a key with. Whatever the
//! write, the waiter must not be granted inside the validity that renewal gave the other
//! client: the key's life as each master reports it right after the renewal, less the drift
//! allowance. A key whose value quorumlock did not write is never stretched for the line, so
//! its expiry is its own, however the other client moves it (docs/how-it-works.md).

use std::time::{Duration, Instant};

use crate::common::*;
use quorumlock::Redlock;
use quorumlock_testkit::RedisNodes;

/// A value shaped as node-redlock writes its tokens (16 random bytes in hex): the shape of a
/// token alone must not make a key quorumlock's.
const FOREIGN: &str = "9b1f0c2de4a35b6c7d8e9fa0b1c2d3e4";

/// How long the other client's first lease lasts, and when it renews (from its grant).
const FIRST_LEASE: Duration = Duration::from_millis(700);
const RENEW_AT: Duration = Duration::from_millis(400);

/// What the other client asks for when it renews.
const RENEWAL_MS: u64 = 1000;

/// The other client's renewal: where the key still holds its value, `write` (a Lua statement
/// on `k` = KEYS[1], `v` = ARGV[1], `ms` = ARGV[2] and `at` = the key's PEXPIRETIME), then the
/// key's PTTL. Returns the PTTL on each master where the value matched.
fn renew(nodes: &RedisNodes, key: &str, write: &str) -> Vec<i64> {
    let script = redis::Script::new(&format!(
        "local k, v, ms = KEYS[1], ARGV[1], ARGV[2] \
         if redis.call('GET', k) ~= v then return -100 end \
         local at = redis.call('PEXPIRETIME', k) \
         {write} \
         return redis.call('PTTL', k)"
    ));
    nodes
        .iter()
        .map(|s| {
            script
                .key(key)
                .arg(FOREIGN)
                .arg(RENEWAL_MS)
                .invoke::<i64>(&mut direct(s))
                .unwrap()
        })
        .filter(|&pttl| pttl != -100)
        .collect()
}

/// A waiter that renews its place often (node timeout 100 ms: an entry lease of 1 s) and
/// attempts every ~20 ms, so that it would take the key at the first moment a master lets it.
fn eager_waiter(nodes: &RedisNodes) -> Redlock {
    Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(5))
        .node_timeout(Duration::from_millis(100))
        .acquire_timeout(Duration::from_secs(10))
        .retry_count(1_000_000)
        .build()
        .unwrap()
}

/// The scenario: three masters; the other client takes the key on all three (`SET NX PX 700`),
/// a quorumlock client waits for it, the other client renews at +400 ms with `write`; the
/// waiter's grant must come after the other client's renewed validity.
async fn the_waiter_waits_out_a_renewal_by(write: &str) {
    let nodes = RedisNodes::spawn(3).unwrap();
    let res = "beside-a-line";
    let key = lock_key(res);
    let waiter = eager_waiter(&nodes);
    waiter.connect().await.unwrap();
    let granted_from = Instant::now();
    for s in nodes.iter() {
        let set: Option<String> = query(
            s,
            redis::cmd("SET")
                .arg(&key)
                .arg(FOREIGN)
                .arg("NX")
                .arg("PX")
                .arg(FIRST_LEASE.as_millis() as u64),
        );
        assert_eq!(set.as_deref(), Some("OK"));
    }
    let w_task = tokio::spawn(async move {
        let lock = waiter.acquire(res, Duration::from_secs(2)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    let before = ttls(&nodes, &key);
    tokio::time::sleep((granted_from + RENEW_AT).saturating_duration_since(Instant::now())).await;

    let sent = Instant::now();
    let pttls = renew(&nodes, &key, write);
    assert_eq!(pttls.len(), 3, "the other client's key was gone: {pttls:?}");
    // The other client's validity: the key's life from the renewal's start, on the quorum's
    // shortest-lived master among the two longest (the q-th), less the drift allowance.
    let mut sorted = pttls.clone();
    sorted.sort_unstable();
    let quorum_life = Duration::from_millis(sorted[1].max(0) as u64);
    let drift = quorum_life / 100 + Duration::from_millis(2);
    let valid_until = sent + quorum_life.saturating_sub(drift);

    let (w_at, lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
        .await
        .expect("the waiter never finished")
        .unwrap();
    let lock = lock.expect("the waiter never acquired");
    let ms = |t: Instant| t.saturating_duration_since(granted_from).as_millis();
    println!(
        "ttls before the renewal {before:?}; after it {pttls:?} (renewed at +{} ms, valid until \
         +{} ms); waiter granted at +{} ms",
        ms(sent),
        ms(valid_until),
        ms(w_at)
    );
    assert!(
        w_at >= valid_until,
        "TWO HOLDERS: the waiter was granted at +{} ms, inside the other client's validity \
         (until +{} ms) that `{write}` gave it (pttls {pttls:?})",
        ms(w_at),
        ms(valid_until)
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_pexpire_gt_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('PEXPIRE', k, ms, 'GT')").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_pexpire_lt_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('PEXPIRE', k, ms, 'LT')").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_pexpire_nx_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('PEXPIRE', k, ms, 'NX')").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_pexpire_xx_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('PEXPIRE', k, ms, 'XX')").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_pexpireat_on_the_keys_own_millisecond_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('PEXPIREAT', k, at)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_set_keepttl_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('SET', k, v, 'KEEPTTL')").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_set_pxat_on_the_keys_own_millisecond_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('SET', k, v, 'PXAT', at)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_getex_pxat_on_the_keys_own_millisecond_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('GETEX', k, 'PXAT', at)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_with_set_px_of_the_same_value_is_waited_out() {
    the_waiter_waits_out_a_renewal_by("redis.call('SET', k, v, 'PX', ms)").await;
}

//! A grant or a hand-off writes its key already stretched over its line (`write_for_line` in
//! `lua/line.lua`), and a stretch reaches twice as far ahead as the line, so that the waiters'
//! renewals seldom rewrite the key. The first tests drive the library's scripts on one master and
//! read back exactly what they wrote; the last runs real clients over five masters.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::RedisServer;

use super::one_master::*;
use crate::common::*;

/// Tokens of the shape quorumlock writes (`ql-` and 32 hex digits): only such a key is stretched
/// over its line (see `ours` in `lua/line.lua`).
const X: &str = "ql-00000000000000000000000000000001";
const T: &str = "ql-00000000000000000000000000000002";
const T1: &str = "ql-00000000000000000000000000000003";
const T2: &str = "ql-00000000000000000000000000000004";
const L: &str = "ql-00000000000000000000000000000005";
const P: &str = "ql-00000000000000000000000000000006";
const C: &str = "ql-00000000000000000000000000000007";
const B: &str = "ql-00000000000000000000000000000008";

fn expiretime(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// The record's three fields.
fn record(c: &mut redis::Connection, k: &Keys) -> Option<(String, i64, i64)> {
    let r = getv(c, &k.held)?;
    let mut parts = r.rsplitn(3, '|');
    let stretched = parts.next().unwrap().parse().unwrap();
    let lease = parts.next().unwrap().parse().unwrap();
    let token = parts.next().unwrap().to_string();
    Some((token, lease, stretched))
}

fn extend(c: &mut redis::Connection, k: &Keys, token: &str, ttl: u64, mark: bool) -> i64 {
    let script = redis::Script::new(include_str!("../../../src/lua/extend.lua"));
    let mut call = script.prepare_invoke();
    call.key(&k.key).key(&k.held).arg(token).arg(ttl).arg(1);
    if mark {
        call.arg("mark").arg("{x}:elected");
    }
    call.invoke(c).unwrap()
}

fn plain(c: &mut redis::Connection, k: &Keys, token: &str, ttl: u64) -> i64 {
    let script = redis::Script::new(&in_line(include_str!("../../../src/lua/acquire.lua")));
    with_keys(&script, &[k])
        .arg(token)
        .arg(ttl)
        .invoke(c)
        .unwrap()
}

/// Holds when `stretched` is `lasts + (lasts - now)` for some `now` in `[before, after]`.
fn reaches_twice(stretched: i64, lasts: i64, before: i64, after: i64) -> bool {
    stretched >= 2 * lasts - after && stretched <= 2 * lasts - before
}

/// A waiter granted while another still waits: the key is written stretched at once, twice as
/// far ahead as the line, its record naming the new token and its own lease (now + TTL). The
/// holder renews the record while its lease runs; once the lease passed its renewal is refused
/// although the key still holds its token (kept for the line), a bare `SET NX` is refused, and
/// the next waiter takes it.
#[test]
fn a_grant_with_others_waiting_is_written_stretched_and_its_lease_bounds_renewals() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("rv-grant");
    // Another client holds the key; W2 then W1 (ahead of it) wait.
    set(&server, &k.key, X, Duration::from_millis(300));
    assert_eq!(attempt(&mut c, &[&k], T2, 400, "w2", 2, 3_000), -2);
    assert_eq!(attempt(&mut c, &[&k], T1, 400, "w1", 1, 3_000), -2);
    let (tok, _, _) = record(&mut c, &k).expect("X's key stretched for its line");
    assert_eq!(tok, X);
    std::thread::sleep(Duration::from_millis(350));
    // X's lease passed: W1, the head, takes it.
    let before = now_ms(&mut c);
    assert_eq!(
        attempt(&mut c, &[&k], T1, 400, "w1", 1, 3_000),
        0,
        "the head is granted"
    );
    let after = now_ms(&mut c);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some(T1));
    let lasts = expiretime(&mut c, &k.line);
    let (tok, lease, stretched) = record(&mut c, &k).expect("written stretched over W2");
    assert_eq!(tok, T1, "the record speaks for the new token");
    assert!(
        lease >= before + 400 && lease <= after + 400,
        "lease {lease} is not the grant's own TTL ({before}..{after} + 400)"
    );
    assert_eq!(
        expiretime(&mut c, &k.key),
        stretched,
        "the key expires when its record says"
    );
    assert_eq!(expiretime(&mut c, &k.held), stretched);
    assert!(
        reaches_twice(stretched, lasts, before, after),
        "stretch {stretched} is not twice the line's reach {lasts} ({before}..{after})"
    );
    // The line's head is gone from it; W2 remains.
    assert_eq!(line(&server, &k.key), vec!["w2".to_string()]);
    // A renewal within the lease moves the record's lease, not the key.
    let at = now_ms(&mut c);
    assert_eq!(extend(&mut c, &k, T1, 300, false), 1);
    let (_, renewed, still) = record(&mut c, &k).unwrap();
    assert_eq!(still, stretched);
    assert!(renewed >= at + 300, "renewed lease {renewed} < {at} + 300");
    assert_eq!(expiretime(&mut c, &k.key), stretched);
    // W2 renews its place: the key stays as it was (no rewrite per renewal).
    assert_eq!(attempt(&mut c, &[&k], T2, 400, "w2", 2, 3_000), -2);
    assert_eq!(
        expiretime(&mut c, &k.key),
        stretched,
        "rewritten at a renewal"
    );
    // The lease runs out without a renewal: the key still holds T1, but it is as good as expired.
    std::thread::sleep(Duration::from_millis(
        (renewed - now_ms(&mut c) + 30).max(0) as u64,
    ));
    assert_eq!(
        getv(&mut c, &k.key).as_deref(),
        Some(T1),
        "kept for the line"
    );
    assert_eq!(
        extend(&mut c, &k, T1, 300, false),
        0,
        "a renewal after the lease passed must be refused"
    );
    assert!(
        !bare_set_nx(&mut c, &k.key, B, 1_000),
        "a bare SET NX jumped the line"
    );
    assert_eq!(
        plain(&mut c, &k, P, 1_000),
        -1,
        "a plain attempt jumped the line"
    );
    assert_eq!(
        attempt(&mut c, &[&k], T2, 400, "w2", 2, 3_000),
        0,
        "the head is granted"
    );
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some(T2));
    // W2 was the last: not stretched, no record left, key lives its TTL.
    assert!(
        record(&mut c, &k).is_none(),
        "a record outlived its stretch"
    );
    assert!(pttl(&server, &k.key) <= 400);
}

/// A hand-off with others still in line writes the reservation stretched (its lease the
/// waiter's entry, in the record); once the whole line died the key is kept to its reach, a
/// bare `SET NX` is refused, the plain attempt's script takes it, and nothing is left once the
/// new holder releases.
#[test]
fn a_hand_off_is_written_stretched_and_a_dead_line_lets_the_script_take_it() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("rv-handoff");
    assert!(bare_set_nx(&mut c, &k.key, X, 5_000));
    // W1 first with a short entry, W2 behind with a longer one: the line outlasts W1's entry.
    // (Both long enough to outlast the steps up to the release on a loaded machine.)
    assert_eq!(attempt(&mut c, &[&k], T1, 400, "w1", 1, 1_000), -2);
    assert_eq!(attempt(&mut c, &[&k], T2, 400, "w2", 2, 2_000), -2);
    assert!(
        record(&mut c, &k).is_none(),
        "the line never outlasted X's own TTL"
    );
    let w1_lapses: f64 = redis::cmd("ZSCORE")
        .arg(&k.leases)
        .arg("w1")
        .query(&mut c)
        .unwrap();
    let before = now_ms(&mut c);
    assert_eq!(release(&mut c, &[&k], X, 10_000, None), 1);
    let after = now_ms(&mut c);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:w1"));
    let lasts = expiretime(&mut c, &k.line);
    let (tok, lease, stretched) = record(&mut c, &k).expect("reservation stretched over W2");
    assert_eq!(tok, "~queued:w1");
    assert_eq!(
        lease, w1_lapses as i64,
        "the reservation lasts no longer than w1's entry"
    );
    assert_eq!(expiretime(&mut c, &k.key), stretched);
    assert!(reaches_twice(stretched, lasts, before, after));
    // Everybody dies: the line lapses, the key is kept until its reach.
    let wait = (lasts - now_ms(&mut c) + 30).max(0) as u64;
    std::thread::sleep(Duration::from_millis(wait));
    assert!(!exists(&mut c, &k.line), "the line outlived its entries");
    assert!(
        getv(&mut c, &k.key).is_some(),
        "kept past its line (the documented extra reach)"
    );
    assert!(!bare_set_nx(&mut c, &k.key, B, 1_000));
    // The dead waiter's handed lock cannot be renewed.
    assert_eq!(extend(&mut c, &k, "~queued:w1", 1_000, false), 0);
    assert_eq!(
        plain(&mut c, &k, P, 1_000),
        1,
        "the script's way takes a lapsed key"
    );
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some(P));
    assert!(record(&mut c, &k).is_none());
    assert!(pttl(&server, &k.key) <= 1_000);
    assert_eq!(release(&mut c, &[&k], P, 10_000, None), 1);
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*rv-handoff*")
        .query(&mut c)
        .unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An elected leader's key stretched for a waiting candidate: the record names the token
/// unmarked and follows it through a renewal that marks; once its lease passed the renewal is
/// refused and a reader sees no leader.
#[test]
fn an_elected_key_stretched_keeps_its_record_and_refuses_a_late_renewal() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("rv-elected");
    set(
        &server,
        &k.key,
        &format!("~elected:{L}"),
        Duration::from_millis(1_000),
    );
    assert_eq!(attempt(&mut c, &[&k], C, 400, "c1", 1, 3_000), -2);
    let (tok, _, stretched) = record(&mut c, &k).unwrap();
    assert_eq!(
        tok, L,
        "an elected leader's record names its token unmarked"
    );
    assert_eq!(
        getv(&mut c, &k.key).as_deref(),
        Some(format!("~elected:{L}").as_str())
    );
    assert_eq!(expiretime(&mut c, &k.key), stretched);
    assert_eq!(extend(&mut c, &k, L, 200, true), 1);
    let (_, lease, _) = record(&mut c, &k).unwrap();
    std::thread::sleep(Duration::from_millis(
        (lease - now_ms(&mut c) + 30).max(0) as u64
    ));
    assert_eq!(extend(&mut c, &k, L, 200, true), 0, "a late leader renewed");
    let read: (Option<String>, i64) =
        redis::Script::new(&in_line(include_str!("../../../src/lua/read_leader.lua")))
            .key(&k.key)
            .key(&k.held)
            .invoke(&mut c)
            .unwrap();
    assert_eq!(
        read,
        (None, -2),
        "a leader past its lease is still reported"
    );
    assert_eq!(attempt(&mut c, &[&k], C, 400, "c1", 1, 3_000), 0);
}

/// A waiter over two keys refused for the second passes the first on to itself, quietly (it
/// alone waits): the key stays reserved and stretched over its own entry, so a bare `SET NX` is
/// refused; its next attempt once both are free takes both.
#[test]
fn a_quiet_reservation_is_stretched_and_keeps_the_line() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let a = keys("{rv-multi}a");
    let b = keys("{rv-multi}b");
    set(&server, &b.key, X, Duration::from_millis(300));
    let attempt = |c: &mut redis::Connection| -> i64 {
        let reply: Vec<i64> = redis::Script::new(&in_line(include_str!(
            "../../../src/lua/acquire_queued.lua"
        )))
        .key(&a.key)
        .key(&b.key)
        .key(&a.line)
        .key(&b.line)
        .key(&a.leases)
        .key(&b.leases)
        .key(&a.held)
        .key(&b.held)
        .arg(T)
        .arg(1_000)
        .arg(2)
        .arg("w")
        .arg(1)
        .arg(2_000)
        .arg(60_000)
        .invoke(c)
        .unwrap();
        reply.first().copied().unwrap_or(0)
    };
    assert_eq!(attempt(&mut c), -2);
    assert_eq!(getv(&mut c, &a.key).as_deref(), Some("~queued:w"));
    let lasts = expiretime(&mut c, &a.line);
    let (tok, lease, stretched) = record(&mut c, &a).expect("reserved and stretched");
    assert_eq!(tok, "~queued:w");
    assert!(
        lease <= lasts,
        "reservation {lease} outlives the waiter's entry {lasts}"
    );
    assert!(stretched >= lasts);
    assert!(!bare_set_nx(&mut c, &a.key, B, 1_000));
    assert_eq!(line(&server, &a.key), vec!["w".to_string()]);
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(attempt(&mut c), 0, "both free: granted");
    assert_eq!(getv(&mut c, &a.key).as_deref(), Some(T));
    assert_eq!(getv(&mut c, &b.key).as_deref(), Some(T));
    assert!(record(&mut c, &a).is_none() && record(&mut c, &b).is_none());
}

// ---------------------------------------------------------------------------------------------
// Real clients over five masters.

#[derive(Clone, Debug)]
struct Hold {
    who: String,
    from: Instant,
    until: Instant,
}

/// Every pair of holds of different holders that overlap. A hold seen only once its deadline
/// had passed (the task stalled past it) is empty and overlaps nothing.
fn overlapping(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut bad = Vec::new();
    let holds: Vec<&Hold> = holds.iter().filter(|h| h.from < h.until).collect();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if a.who != b.who && a.from < b.until && b.from < a.until {
                bad.push(((*a).clone(), (*b).clone()));
            }
        }
    }
    bad
}

fn waiter(nodes: &quorumlock_testkit::RedisNodes, node_timeout_ms: u64, wait: Duration) -> Redlock {
    Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(node_timeout_ms))
        .acquire_timeout(wait)
        .retry_count(1_000_000)
        .build()
        .unwrap()
}

/// Workers with different TTLs and entry leases (node timeouts 100 ms and 500 ms) take one
/// resource in turns; some hold past their lease without releasing and renew late, some die in
/// line (aborted mid-wait), so keys are kept for lines whose waiters died and renewals race the
/// head. The holds seen by the clients (grant to deadline, or to release) never overlap, and
/// nothing is left once all are done.
#[tokio::test(flavor = "multi_thread")]
async fn mixed_leases_dead_waiters_and_late_renewals_never_give_two_holders() {
    let nodes = five();
    let res = "rv-mixed";
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let lock = waiter(
            &nodes,
            if w % 2 == 0 { 100 } else { 500 },
            Duration::from_secs(30),
        );
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..6u64 {
                let ttl = Duration::from_millis(200 + 150 * ((w + round) % 3));
                let Ok(mut l) = lock.acquire(res, ttl).await else {
                    continue;
                };
                let from = Instant::now();
                let who = format!("w{w}");
                match (w + round) % 4 {
                    0 => {
                        // Release at once (held no further than its deadline, whatever a
                        // stall of this task makes of "at once").
                        let until = Instant::now().min(l.deadline());
                        holds.lock().unwrap().push(Hold { who, from, until });
                        let _ = l.release().await;
                    }
                    1 => {
                        // Hold, renew once in time, release.
                        tokio::time::sleep(ttl / 2).await;
                        let _ = l.extend(ttl).await;
                        let until = l.deadline().min(Instant::now() + ttl / 3);
                        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
                        // The extend may have failed (a stall): held to the deadline at most.
                        holds.lock().unwrap().push(Hold {
                            who,
                            from,
                            until: Instant::now().min(l.deadline()),
                        });
                        let _ = l.release().await;
                    }
                    2 => {
                        // Die holding: the lease runs out; then renew late (must fail, or if it
                        // wins it counts as a new hold until its deadline).
                        let deadline = l.deadline();
                        holds.lock().unwrap().push(Hold {
                            who: who.clone(),
                            from,
                            until: deadline,
                        });
                        tokio::time::sleep(ttl + Duration::from_millis(60)).await;
                        if l.extend(ttl).await.is_ok() {
                            holds.lock().unwrap().push(Hold {
                                who,
                                from: Instant::now(),
                                until: l.deadline(),
                            });
                        }
                        std::mem::forget(l);
                    }
                    _ => {
                        let deadline = l.deadline();
                        holds.lock().unwrap().push(Hold {
                            who,
                            from,
                            until: deadline,
                        });
                        std::mem::forget(l);
                    }
                }
            }
        }));
    }
    // Waiters that die in line: aborted mid-wait, their entries left to lapse.
    for d in 0..4u64 {
        let lock = waiter(&nodes, 500, Duration::from_secs(30));
        let t = tokio::spawn(async move {
            let _ = lock
                .acquire(res, Duration::from_secs(1))
                .await
                .map(std::mem::forget);
        });
        tokio::time::sleep(Duration::from_millis(300 + 200 * d)).await;
        t.abort();
    }
    // Bare-SET contenders (plain mutex, default client) race the line all along.
    let plain = builder(&nodes).retry_count(1).connected().await;
    let plain_holds = holds.clone();
    let plain_task = tokio::spawn(async move {
        for i in 0..30 {
            let ttl = Duration::from_millis(200);
            let got = if i % 2 == 0 {
                plain.acquire(res, ttl).await
            } else {
                plain.try_acquire(res, ttl).await
            };
            if let Ok(l) = got {
                let from = Instant::now();
                // Held from the grant to the release, which follows at once.
                plain_holds.lock().unwrap().push(Hold {
                    who: "plain".into(),
                    from,
                    until: Instant::now().min(l.deadline()),
                });
                let _ = l.release().await;
            }
            tokio::time::sleep(Duration::from_millis(97)).await;
        }
    });
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("stuck")
            .unwrap();
    }
    plain_task.await.unwrap();
    let holds = holds.lock().unwrap().clone();
    let bad = overlapping(&holds);
    eprintln!("{} holds", holds.len());
    assert!(bad.is_empty(), "TWO HOLDERS: {bad:#?}");
    let held = holds.iter().filter(|h| h.from < h.until).count();
    assert!(held >= 20, "too few holds to mean anything: {held}");
    // Nothing left forever: every key of the resource gone within its longest TTL plus
    // twice the longest entry lease (5 s) after everybody is done.
    super::nothing_left(&nodes, res, Duration::from_secs(15)).await;
}

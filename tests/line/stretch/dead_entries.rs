//! Entries whose waiter died, ahead of, between and behind live waiters: the scripts drop them
//! before the line's order decides anything (`drop_lapsed` in `lua/line.lua`), so a hand-off or
//! a free key goes to the first live waiter, and a line left with nobody live gives the key back
//! its own lease. These tests drive the library's own scripts on one master with exact
//! arguments and read back what each left; the last runs real clients over five masters while
//! dead entries keep appearing in the line.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::{RedisNodes, RedisServer};

use super::one_master::*;
use crate::common::*;

fn pttl_of(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).unwrap()
}

fn members(c: &mut redis::Connection, zset: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(zset)
        .arg(0)
        .arg(-1)
        .query(c)
        .unwrap()
}

/// Puts `id` in the line at `order` with its entry lapsing `lease_from_now` ms from the master's
/// now (negative: already lapsed), as a waiter's attempt would have left it, without the
/// attempt.
fn place(c: &mut redis::Connection, k: &Keys, id: &str, order: u64, lease_from_now: i64) {
    let now = now_ms(c);
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&k.line)
        .arg(order)
        .arg(id)
        .ignore()
        .cmd("ZADD")
        .arg(&k.leases)
        .arg(now + lease_from_now)
        .arg(id)
        .ignore()
        .query(c)
        .unwrap();
    // The line lasts as its latest renewal says; a dead entry's renewal is long past, so it
    // gives a new line the lease of a live waiter that renewed just now.
    let lasts = lease_from_now.max(1_000);
    for z in [&k.line, &k.leases] {
        let ttl = pttl_of(c, z);
        if ttl < lasts {
            let _: () = redis::cmd("PEXPIRE").arg(z).arg(lasts).query(c).unwrap();
        }
    }
}

fn dead(c: &mut redis::Connection, k: &Keys, id: &str, order: u64) {
    place(c, k, id, order, -1_000);
}

fn dequeue(c: &mut redis::Connection, ks: &[&Keys], id: &str, reserve: u64) {
    let script = redis::Script::new(&in_line(include_str!("../../../src/lua/dequeue.lua")));
    let _: i64 = with_keys(&script, ks)
        .arg(id)
        .arg(reserve)
        .arg(ks.len())
        .invoke(c)
        .unwrap();
}

/// Live entries behind a live head and dead ones between them: each release hands the key to
/// the next live waiter in order, never to a dead one, and once everybody is done nothing of
/// the resource is left.
#[test]
fn each_release_hands_to_the_next_live_waiter_past_dead_entries() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("de-order");
    set(&server, &k.key, "X", Duration::from_secs(10));
    // A and B wait for real (their attempts are refused); D1..D3 died in between and behind.
    assert_eq!(attempt(&mut c, &[&k], "tA", 5_000, "A", 10, 5_000), -2);
    dead(&mut c, &k, "D1", 20);
    dead(&mut c, &k, "D2", 30);
    assert_eq!(attempt(&mut c, &[&k], "tB", 5_000, "B", 40, 5_000), -2);
    dead(&mut c, &k, "D3", 50);
    let line = members(&mut c, &k.line);
    let live: Vec<&String> = line.iter().filter(|id| !id.starts_with('D')).collect();
    assert_eq!(live, ["A", "B"], "{line:?}");

    assert_eq!(release(&mut c, &[&k], "X", 5_000, None), 1);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:A"));
    assert!(!members(&mut c, &k.line).contains(&"A".to_string()));
    // B, behind dead entries, is refused while the key is A's.
    assert_eq!(attempt(&mut c, &[&k], "tB", 5_000, "B", 40, 5_000), -1);
    assert_eq!(attempt(&mut c, &[&k], "tA", 5_000, "A", 10, 5_000), 0);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("tA"));
    // A bare SET NX never takes the key while B waits.
    assert!(!bare_set_nx(&mut c, &k.key, "intruder", 5_000));

    assert_eq!(release(&mut c, &[&k], "tA", 5_000, None), 1);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:B"));
    let left = members(&mut c, &k.line);
    assert!(
        left.is_empty(),
        "the dead entries ahead of B went with the hand-off, and B left: {left:?}"
    );
    assert_eq!(attempt(&mut c, &[&k], "tB", 5_000, "B", 40, 5_000), 0);
    assert_eq!(release(&mut c, &[&k], "tB", 5_000, None), 1);
    let left = left_behind(&mut c, &k);
    assert!(left.is_empty(), "{left:?} left behind");
}

/// A waiter refused on one key of several passes on the other key, free while it heads that
/// line once the dead entry ahead of it is dropped, to the next live waiter behind it; with
/// nobody live behind it, that key stays reserved for it, quietly.
#[test]
fn a_refused_attempt_on_several_keys_passes_a_free_key_past_dead_entries() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    for (case, behind_me, expect) in [
        ("live-behind", true, "~queued:L"),
        ("dead-behind", false, "~queued:M"),
    ] {
        let k1 = keys(&format!("de-many-{case}-1"));
        let k2 = keys(&format!("de-many-{case}-2"));
        set(&server, &k2.key, "X", Duration::from_secs(10));
        dead(&mut c, &k1, "D0", 10);
        place(&mut c, &k1, "M", 20, 5_000);
        if behind_me {
            place(&mut c, &k1, "L", 30, 5_000);
        }
        dead(&mut c, &k1, "D1", 40);
        dead(&mut c, &k1, "D2", 50);
        assert_eq!(
            attempt(&mut c, &[&k1, &k2], "tM", 5_000, "M", 20, 5_000),
            -2
        );
        assert_eq!(getv(&mut c, &k1.key).as_deref(), Some(expect), "{case}");
        let line = members(&mut c, &k1.line);
        assert!(line.contains(&"M".to_string()), "{case}: M left: {line:?}");
        assert!(
            !line.contains(&"D0".to_string()),
            "{case}: the dead head stayed: {line:?}"
        );
        assert!(!line.contains(&"L".to_string()), "{case}: {line:?}");
        // The key passed on is not for a bare SET NX while M waits.
        assert!(!bare_set_nx(&mut c, &k1.key, "intruder", 5_000), "{case}");
        // Nor for M's attempt while the other key is held; and when L holds it, M stays out.
        if behind_me {
            assert_eq!(attempt(&mut c, &[&k1], "tL", 5_000, "L", 30, 5_000), 0);
            assert_eq!(getv(&mut c, &k1.key).as_deref(), Some("tL"));
        } else {
            assert_eq!(attempt(&mut c, &[&k1], "tM", 5_000, "M", 20, 5_000), 0);
            assert_eq!(getv(&mut c, &k1.key).as_deref(), Some("tM"));
        }
    }
}

/// A line whose head died, then the waiter itself: its own attempt on the free key drops the
/// dead head and takes the key; with a live waiter ahead of it instead, it is refused however
/// many dead entries stand around.
#[test]
fn a_free_key_goes_to_the_first_live_entry_only() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("de-free");
    dead(&mut c, &k, "D0", 10);
    dead(&mut c, &k, "D1", 11);
    place(&mut c, &k, "L", 20, 5_000);
    dead(&mut c, &k, "D2", 25);
    assert_eq!(attempt(&mut c, &[&k], "tM", 5_000, "M", 30, 5_000), -1);
    // Dropping the dead head dropped every lapsed entry.
    assert_eq!(members(&mut c, &k.line), ["L", "M"]);
    assert_eq!(attempt(&mut c, &[&k], "tL", 5_000, "L", 20, 5_000), 0);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("tL"));
    assert!(!bare_set_nx(&mut c, &k.key, "intruder", 5_000));
    assert_eq!(release(&mut c, &[&k], "tL", 5_000, None), 1);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:M"));
    assert!(members(&mut c, &k.line).is_empty());
}

/// A grant that leaves only lapsed entries in the line: nobody live waits, so the key is
/// written with its own lease as when the line is empty, no record, and the line goes; once
/// that lease passed, a bare `SET NX` takes the key.
#[test]
fn a_grant_over_only_lapsed_entries_writes_its_key_with_its_own_lease() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    for reserved in [false, true] {
        let k = keys(&format!("de-grant-{reserved}"));
        if reserved {
            // Handed to M (as a release does), a dead entry behind.
            set(&server, &k.key, "~queued:M", Duration::from_secs(2));
            dead(&mut c, &k, "D", 50);
        } else {
            // M heads the line, a dead entry behind it.
            place(&mut c, &k, "M", 10, 5_000);
            dead(&mut c, &k, "D", 50);
        }
        assert_eq!(attempt(&mut c, &[&k], "tM", 300, "M", 10, 5_000), 0);
        assert_eq!(getv(&mut c, &k.key).as_deref(), Some("tM"));
        let ttl = pttl_of(&mut c, &k.key);
        let record = getv(&mut c, &k.held);
        let line = members(&mut c, &k.line);
        assert!(
            (0..=300).contains(&ttl) && record.is_none() && line.is_empty(),
            "reserved {reserved}: key pttl {ttl} (TTL 300), record {record:?}, line {line:?}"
        );
        std::thread::sleep(Duration::from_millis(400));
        assert!(
            bare_set_nx(&mut c, &k.key, "next", 1_000),
            "reserved {reserved}: the key outlived its holder's lease with nobody live waiting: \
             pttl {}",
            pttl_of(&mut c, &k.key)
        );
    }
}

/// A hand-off to the only live waiter, with lapsed entries behind it: the reservation lasts the
/// reserve at most, unstretched, and the line goes with its last live entry.
#[test]
fn a_hand_off_over_only_lapsed_entries_reserves_for_the_reserve_only() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("de-handoff");
    set(&server, &k.key, "X", Duration::from_secs(10));
    assert_eq!(attempt(&mut c, &[&k], "tH", 5_000, "H", 10, 5_000), -2);
    dead(&mut c, &k, "D", 50);
    assert_eq!(release(&mut c, &[&k], "X", 200, None), 1);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:H"));
    let ttl = pttl_of(&mut c, &k.key);
    let record = getv(&mut c, &k.held);
    let line = members(&mut c, &k.line);
    assert!(
        (0..=200).contains(&ttl) && record.is_none() && line.is_empty(),
        "key pttl {ttl} (reserve 200), record {record:?}, line {line:?}"
    );
}

/// The holder of a key handed to it releases it while it still stands in line there (a quiet
/// reservation), alone or with others: its entry goes, and the key with it or to the next live
/// waiter past dead entries; nothing is left when nobody waits.
#[test]
fn a_handed_holder_still_in_line_releases_past_its_own_entry() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    for (case, others) in [("alone", false), ("others", true)] {
        let k = keys(&format!("de-handed-{case}"));
        place(&mut c, &k, "H", 10, 5_000);
        if others {
            dead(&mut c, &k, "D", 20);
            place(&mut c, &k, "L", 30, 5_000);
        }
        set(&server, &k.key, "~queued:H", Duration::from_secs(5));
        assert_eq!(release(&mut c, &[&k], "~queued:H", 5_000, None), 1);
        if others {
            assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:L"));
            assert!(members(&mut c, &k.line).is_empty(), "{case}");
        } else {
            let left = left_behind(&mut c, &k);
            assert!(left.is_empty(), "{case}: {left:?} left behind");
        }
        // A handed holder not in line (the usual case) releases just the same.
        let k = keys(&format!("de-handed-out-{case}"));
        if others {
            dead(&mut c, &k, "D", 20);
        }
        set(&server, &k.key, "~queued:H", Duration::from_secs(5));
        assert_eq!(release(&mut c, &[&k], "~queued:H", 5_000, None), 1);
        let left = left_behind(&mut c, &k);
        assert!(
            left.is_empty(),
            "{case} (out of line): {left:?} left behind"
        );
    }
}

/// The cleanup of a waiter's failed attempt that had taken the key here, with its rollback
/// putting it back in line: the key goes to the first live entry past dead ones, quietly to the
/// waiter itself when it heads them, published and out of line to another.
#[test]
fn a_failed_attempts_cleanup_requeues_past_dead_entries() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    for (case, my_order, expect, mine_left) in [
        ("ahead", 20, "~queued:M", true),
        ("behind", 40, "~queued:L", true),
    ] {
        let k = keys(&format!("de-cleanup-{case}"));
        dead(&mut c, &k, "D0", 10);
        place(&mut c, &k, "L", 30, 5_000);
        dead(&mut c, &k, "D1", 35);
        set(&server, &k.key, "tM", Duration::from_secs(5));
        assert_eq!(
            release(
                &mut c,
                &[&k],
                "tM",
                5_000,
                Some(("M", Some((my_order, 5_000))))
            ),
            1
        );
        assert_eq!(getv(&mut c, &k.key).as_deref(), Some(expect), "{case}");
        let line = members(&mut c, &k.line);
        assert_eq!(
            line.contains(&"M".to_string()),
            mine_left,
            "{case}: {line:?}"
        );
        assert!(!line.contains(&"D0".to_string()), "{case}: {line:?}");
        assert!(!bare_set_nx(&mut c, &k.key, "intruder", 5_000), "{case}");
    }
    // Without a requeue (the waiter gave up), every other entry dead: the key goes.
    let k = keys("de-cleanup-gone");
    dead(&mut c, &k, "D0", 10);
    set(&server, &k.key, "tM", Duration::from_secs(5));
    assert_eq!(release(&mut c, &[&k], "tM", 5_000, Some(("M", None))), 1);
    let left = left_behind(&mut c, &k);
    assert!(left.is_empty(), "{left:?} left behind");
}

/// A waiter leaving a key reserved for it passes it to the next live waiter past dead entries
/// (`lua/dequeue.lua`); with only dead entries left, the key goes.
#[test]
fn leaving_a_reserved_key_passes_it_past_dead_entries() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("de-dequeue");
    dead(&mut c, &k, "D0", 10);
    place(&mut c, &k, "L", 20, 5_000);
    dead(&mut c, &k, "D1", 30);
    set(&server, &k.key, "~queued:M", Duration::from_secs(5));
    dequeue(&mut c, &[&k], "M", 5_000);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:L"));
    assert!(members(&mut c, &k.line).is_empty());
    assert!(members(&mut c, &k.leases).is_empty());

    let k = keys("de-dequeue-dead");
    dead(&mut c, &k, "D0", 10);
    set(&server, &k.key, "~queued:M", Duration::from_secs(5));
    dequeue(&mut c, &[&k], "M", 5_000);
    let left = left_behind(&mut c, &k);
    assert!(left.is_empty(), "{left:?} left behind");
}

/// An entry in the line without a lease (its lease entry lost) is handed the key for a moment
/// only, as before: it never holds its line up.
#[test]
fn an_entry_without_a_lease_is_handed_for_a_moment_only() {
    let server = RedisServer::spawn().unwrap();
    let mut c = direct(&server);
    let k = keys("de-nolease");
    set(&server, &k.key, "X", Duration::from_secs(10));
    assert_eq!(attempt(&mut c, &[&k], "tL", 5_000, "L", 30, 5_000), -2);
    let _: () = redis::cmd("ZADD")
        .arg(&k.line)
        .arg(5)
        .arg("N")
        .query(&mut c)
        .unwrap();
    assert_eq!(release(&mut c, &[&k], "X", 5_000, None), 1);
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("~queued:N"));
    let start = Instant::now();
    // The record, if any, lapses at once: L's attempt takes the key within a few ms.
    loop {
        let got = attempt(&mut c, &[&k], "tL", 5_000, "L", 30, 5_000);
        if got == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "L still refused ({got}) behind an entry without a lease: {:?}",
            getv(&mut c, &k.key)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(getv(&mut c, &k.key).as_deref(), Some("tL"));
}

fn worker(nodes: &RedisNodes) -> Redlock {
    Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(100))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(1_000_000)
        .build()
        .unwrap()
}

/// Real clients over five masters take one resource in turns while dead entries keep appearing
/// in its line, ahead of everybody and among the live waiters: never two holders at once,
/// everybody gets through within a bound, and nothing is left once everybody is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_clients_through_a_line_full_of_dead_entries() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let res = "de-real";
    let k = keys(res);
    let busy = Arc::new(AtomicBool::new(false));
    let holds = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // Dead entries: ahead of everybody and next to the live entries' orders, on every master.
    let ports: Vec<String> = nodes.urls().to_vec();
    let injector = {
        let done = done.clone();
        let line = k.line.clone();
        let leases = k.leases.clone();
        tokio::task::spawn_blocking(move || {
            let mut n = 0u64;
            let mut conns: Vec<redis::Connection> = ports
                .iter()
                .map(|u| {
                    redis::Client::open(u.as_str())
                        .unwrap()
                        .get_connection()
                        .unwrap()
                })
                .collect();
            while !done.load(Ordering::SeqCst) {
                for c in conns.iter_mut() {
                    let now = now_ms(c);
                    let live: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(&line)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(c)
                        .unwrap();
                    let order = match (n % 3, live.first()) {
                        (0, _) | (_, None) => 1.0,
                        (_, Some((_, s))) => s + 0.5,
                    };
                    let id = format!("deaddeaddeaddead:{n}");
                    // Only into a line that exists: a dead waiter's entry never outlives it.
                    let _: i64 = redis::Script::new(
                        "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end \
                         redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3]) \
                         redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3]) return 1",
                    )
                    .key(&line)
                    .key(&leases)
                    .arg(order)
                    .arg(now - 1)
                    .arg(&id)
                    .invoke(c)
                    .unwrap();
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
            n
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..5u64 {
        let lock = worker(&nodes);
        let busy = busy.clone();
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..6u64 {
                let ttl = Duration::from_millis(2_000);
                let l = lock.acquire(res, ttl).await.expect("acquire");
                assert!(!busy.swap(true, Ordering::SeqCst), "TWO HOLDERS (w{w})");
                tokio::time::sleep(Duration::from_millis(3 + (w + round) % 4)).await;
                assert!(busy.swap(false, Ordering::SeqCst));
                holds.fetch_add(1, Ordering::SeqCst);
                assert!(
                    l.deadline() > Instant::now(),
                    "held past its validity (w{w})"
                );
                l.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("stuck behind dead entries")
            .unwrap();
    }
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let injected = injector.await.unwrap();
    assert_eq!(holds.load(Ordering::SeqCst), 30);
    assert!(injected > 0);
    // Each of the 30 holds releases at once: even with a hand-off per hold that waited out a
    // dead head's lease (it never should), 30 entry leases (1 s each) bound the whole run.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    super::nothing_left(&nodes, res, Duration::from_secs(5)).await;
}

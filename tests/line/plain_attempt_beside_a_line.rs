//! The plain attempt of a mutex against a resource with a wait line: a key that falls free
//! without a release goes to the head of the line, never two holders at once, and a line of
//! entries that all lapsed blocks nobody.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::Redlock;
use quorumlock_testkit::{RedisNodes, RedisServer};

fn line_key(resource: &str) -> String {
    quorumlock::companion_key(&lock_key(resource), ":queue")
}

fn leases_key(resource: &str) -> String {
    quorumlock::companion_key(&lock_key(resource), ":leases")
}

fn master_ms(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = query(server, &mut redis::cmd("TIME"));
    s * 1000 + us / 1000
}

/// A holder on `masters` only, as a client whose lease then runs out without a release.
fn foreign_hold(nodes: &RedisNodes, masters: &[usize], resource: &str, ttl: Duration) {
    for &i in masters {
        set(&nodes[i], &lock_key(resource), "someone-else", ttl);
    }
}

/// A lock whose holder extended it while requests of the attempt that granted it were still on
/// their way to masters where others wait in line: the masters that confirmed the extend must
/// stay the holder's until the deadline the extend reports, so the head of the line can never
/// hold the lock while the extended one is still valid.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_extended_while_its_attempts_requests_reach_a_line_never_overlaps_the_head() {
    let nodes = five();
    let res = "extend-window";
    let key = lock_key(res);

    // The waiter takes its place in line while someone else holds the key everywhere.
    let w_proxies = proxies(&nodes);
    let waiter = Redlock::builder(urls(&w_proxies))
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap();
    foreign_hold(&nodes, &[0, 1, 2, 3, 4], res, Duration::from_secs(30));
    let w_task = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let lock = waiter.acquire(res, Duration::from_secs(10)).await;
            (Instant::now(), lock)
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            nodes.iter().all(|s| line(s, &key).len() == 1)
        })
        .await,
        "the waiter never took its place"
    );
    // The waiter goes quiet (its entries stay, for its entry lease of 5 s). Its entries on
    // masters 0, 1 and 2 are gone, as if its requests there had never landed, and the foreign
    // holder's lease runs out: on 3 and 4 the keys fell free while the waiter heads the line.
    for p in &w_proxies {
        p.blackhole();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let w_id = line(&nodes[3], &key)[0].clone();
    for i in 0..3 {
        let _: () = query(&nodes[i], redis::cmd("ZREM").arg(line_key(res)).arg(&w_id));
        let _: () = query(
            &nodes[i],
            redis::cmd("ZREM").arg(leases_key(res)).arg(&w_id),
        );
    }
    for server in nodes.iter() {
        del(server, &key);
    }

    // The holder: its requests to 3 and 4 arrive 600 ms late.
    let a_proxies = proxies(&nodes);
    let holder = Redlock::builder(urls(&a_proxies))
        .retry_delay(Duration::from_millis(50))
        .node_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    holder.connect().await.unwrap();
    for p in &a_proxies[3..] {
        p.delay(Duration::from_millis(600), Duration::ZERO, Duration::ZERO);
    }
    let t0 = Instant::now();
    let mut lock = holder
        .acquire(res, Duration::from_secs(3))
        .await
        .expect("masters 0, 1 and 2 have no line: a quorum grants");
    eprintln!("holder acquired after {:?}", t0.elapsed());
    assert_eq!(holders(&nodes, &key, lock.token().expose()), 3);

    // Master 2 falls out of reach of the holder; it extends at once, for 10 s.
    tokio::time::sleep(Duration::from_millis(100)).await;
    a_proxies[2].blackhole();
    let extended = lock.extend(Duration::from_secs(10)).await;
    eprintln!(
        "extend: {:?} after {:?}; remaining {:?}",
        extended.as_ref().map_err(ToString::to_string),
        t0.elapsed(),
        lock.remaining()
    );

    // The keys on 3 and 4 went to the waiter after all.
    let given = eventually(Duration::from_secs(3), || {
        [3, 4]
            .iter()
            .all(|&i| get(&nodes[i], &key).is_some_and(|v| v.starts_with("~queued:")))
    })
    .await;
    eprintln!(
        "masters 3, 4 after the attempt: {:?} {:?} (pttl {} {}), given back: {given}",
        get(&nodes[3], &key),
        get(&nodes[4], &key),
        pttl(&nodes[3], &key),
        pttl(&nodes[4], &key)
    );

    // The waiter reaches every master again.
    for p in &w_proxies {
        p.heal();
    }
    let outcome = tokio::time::timeout(Duration::from_secs(15), w_task).await;
    match outcome {
        Ok(Ok((at, Ok(w_lock)))) => {
            let a_left = lock.deadline().saturating_duration_since(at);
            eprintln!(
                "waiter acquired at {:?} (token on {} masters); the extended lock had {:?} left then",
                at - t0,
                holders(&nodes, &key, w_lock.token().expose()),
                a_left
            );
            assert!(
                extended.is_err() || a_left.is_zero(),
                "two holders: the waiter acquired {:?} after the first lock, which was still \
                 valid for {:?} by its extend",
                at - t0,
                a_left
            );
        }
        other => {
            eprintln!(
                "waiter did not acquire: {:?}",
                other.map(|r| r.map(|(_, l)| l.map(|_| ()).map_err(|e| e.to_string())))
            );
        }
    }
    drop(a_proxies);
}

/// A free key whose line holds only entries that lapsed (their waiters died; the line key is
/// kept alive by a longer-leased waiter that has since left): nobody waits, so a plain attempt
/// is granted, as when the line was gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_line_of_lapsed_entries_does_not_refuse_a_plain_attempt() {
    let nodes = five();
    let res = "lapsed-line";
    for server in nodes.iter() {
        let now = master_ms(server);
        let _: () = query(
            server,
            redis::cmd("ZADD")
                .arg(line_key(res))
                .arg(1)
                .arg("0123456789abcdef-dead"),
        );
        let _: () = query(
            server,
            redis::cmd("ZADD")
                .arg(leases_key(res))
                .arg(now - 1000)
                .arg("0123456789abcdef-dead"),
        );
        let _: () = query(server, redis::cmd("PEXPIRE").arg(line_key(res)).arg(20_000));
        let _: () = query(
            server,
            redis::cmd("PEXPIRE").arg(leases_key(res)).arg(20_000),
        );
    }
    let rl = connected(&nodes).await;
    let got = rl.try_acquire(res, Duration::from_secs(5)).await;
    eprintln!(
        "try_acquire: {:?}",
        got.as_ref().map(|_| ()).map_err(ToString::to_string)
    );
    let lock = got.expect("nobody lives in the line: a plain attempt on a free key is granted");
    lock.release().await.unwrap();
}

/// Same, reached by real clients: a waiter with a long entry lease leaves the line, one whose
/// process stopped answering stays in it with a short, lapsed entry, and the holder's lease
/// runs out. `try_acquire` of the free resource succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_line_left_by_its_live_waiters_does_not_refuse_a_plain_attempt() {
    let nodes = five();
    let res = "left-line";
    let key = lock_key(res);
    foreign_hold(&nodes, &[0, 1, 2, 3, 4], res, Duration::from_secs(3));
    let lease_ends = Instant::now() + Duration::from_secs(3);

    // The dying waiter: 100 ms node timeout, entry lease 1 s; it then stops answering.
    let d_proxies = proxies(&nodes);
    let dying = Redlock::builder(urls(&d_proxies))
        .retry_delay(Duration::from_millis(20))
        .node_timeout(Duration::from_millis(100))
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let d_task = tokio::spawn(async move { dying.acquire(res, Duration::from_secs(5)).await });
    waiters_in_line(&nodes, &key, 1).await;
    for p in &d_proxies {
        p.blackhole();
    }
    // The long-leased waiter: 1 s node timeout, entry lease 10 s; it gives up after a while.
    let long = Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(50))
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let l_task = tokio::spawn(async move { long.acquire(res, Duration::from_secs(5)).await });
    waiters_in_line(&nodes, &key, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    l_task.abort();
    // Its entry leaves in the background; the dead one's lapses within 1 s; the holder's lease
    // runs out at 3 s (its key may live on, stretched over the line by the long-leased waiter's
    // 10 s entry: the holder's own lease is in the key's record).
    waiters_in_line(&nodes, &key, 1).await;
    tokio::time::sleep_until((lease_ends + Duration::from_millis(100)).into()).await;
    eprintln!(
        "line now {:?}, line pttl {}",
        line(&nodes[0], &key),
        pttl(&nodes[0], &line_key(res))
    );
    let rl = client(&nodes);
    let got = rl.try_acquire(res, Duration::from_secs(5)).await;
    eprintln!(
        "try_acquire: {:?}",
        got.as_ref().map(|_| ()).map_err(ToString::to_string)
    );
    d_task.abort();
    let lock = got.expect("nobody lives in the line: a plain attempt on a free key is granted");
    lock.release().await.unwrap();
    drop(d_proxies);
}

/// The holder's lease runs out while a waiter waits: a plain attempt that arrives first does
/// not get the lock; the head does, without waiting for its fallback poll, and the two never
/// overlap.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_that_fell_free_goes_to_the_head_not_to_a_plain_attempt() {
    let nodes = five();
    let res = "fell-free";
    let key = lock_key(res);
    for round in 0..5 {
        let h = connected(&nodes).await;
        let held = h.acquire(res, Duration::from_millis(600)).await.unwrap();
        let held_token = held.token().expose().to_owned();
        std::mem::forget(held);
        granted_everywhere(&nodes, &key, &held_token).await;
        let waiter = builder(&nodes)
            .retry_delay(Duration::from_secs(20))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap();
        let w_task = tokio::spawn(async move {
            let lock = waiter.acquire(res, Duration::from_secs(5)).await;
            (Instant::now(), lock)
        });
        waiters_in_line(&nodes, &key, 1).await;
        assert!(
            eventually(Duration::from_secs(3), || holders(
                &nodes,
                &key,
                &held_token
            ) == 0)
            .await
        );
        let other = connected(&nodes).await;
        let tried = other.try_acquire(res, Duration::from_secs(5)).await;
        let tried_at = Instant::now();
        let (w_at, w_lock) = tokio::time::timeout(Duration::from_secs(3), w_task)
            .await
            .expect("the head was not handed the free key: it waits for its poll")
            .unwrap();
        let w_lock = w_lock.unwrap();
        eprintln!(
            "round {round}: plain attempt {:?}; head holds {:?} after it",
            tried.as_ref().map(|_| ()).map_err(ToString::to_string),
            w_at.saturating_duration_since(tried_at)
        );
        if let Ok(lock) = &tried {
            assert!(
                lock.deadline() <= w_at,
                "two holders: the plain attempt's lock and the head's overlap"
            );
        }
        assert!(
            tried.is_err(),
            "the plain attempt took the key from the head of the line"
        );
        w_lock.release().await.unwrap();
        assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 0).await);
    }
}

/// A plain attempt dropped at any point of its requests on a key
/// that fell free while a waiter waits: the key still reaches the head soon, never stays with
/// the dropped attempt's token, and nobody else holds it meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_plain_attempt_leaves_the_key_to_the_head() {
    let nodes = five();
    let res = "dropped-attempt";
    let key = lock_key(res);
    for round in 0..12u64 {
        let h = connected(&nodes).await;
        let held = h.acquire(res, Duration::from_millis(400)).await.unwrap();
        let held_token = held.token().expose().to_owned();
        std::mem::forget(held);
        granted_everywhere(&nodes, &key, &held_token).await;
        let waiter = builder(&nodes)
            .retry_delay(Duration::from_secs(20))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap();
        let w_task = tokio::spawn(async move { waiter.acquire(res, Duration::from_secs(5)).await });
        waiters_in_line(&nodes, &key, 1).await;
        assert!(
            eventually(Duration::from_secs(3), || holders(
                &nodes,
                &key,
                &held_token
            ) == 0)
            .await
        );
        let other = connected(&nodes).await;
        let cut = Duration::from_micros(200 * round);
        let dropped = tokio::time::timeout(cut, other.acquire(res, Duration::from_secs(30))).await;
        let outcome = match &dropped {
            Err(_) => "dropped".to_owned(),
            Ok(Ok(_)) => "acquired".to_owned(),
            Ok(Err(e)) => format!("failed: {e}"),
        };
        let w_lock = tokio::time::timeout(Duration::from_secs(4), w_task).await;
        eprintln!(
            "round {round} (cut at {cut:?}): plain attempt {outcome}; head: {:?}",
            w_lock.as_ref().map(|r| r
                .as_ref()
                .map(|l| l.as_ref().map(|_| ()).map_err(ToString::to_string)))
        );
        if let Ok(Ok(lock)) = &dropped {
            panic!(
                "the plain attempt took a key that fell free while a waiter headed the line ({:?} left)",
                lock.remaining()
            );
        }
        let w_lock = w_lock
            .expect("the head did not get the key within 4 s (its fallback poll is 20 s)")
            .unwrap()
            .unwrap();
        w_lock.release().await.unwrap();
        drop(dropped);
        assert!(eventually(Duration::from_secs(3), || present(&nodes, &key) == 0).await);
    }
}

/// A client whose plain attempt reached the masters and then lost them (partitioned away for
/// good right after its write, before anything else it sends arrives): the key had fallen free
/// while a waiter headed its line. The waiter gets the lock within a few entry leases, not only
/// after the lost client's TTL.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_attempt_cut_off_after_its_write_does_not_block_the_line_for_its_ttl() {
    let nodes = five();
    let res = "cut-off";
    let key = lock_key(res);
    let w_proxies = proxies(&nodes);
    let waiter = Redlock::builder(urls(&w_proxies))
        .retry_delay(Duration::from_millis(100))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(60))
        .retry_count(100_000)
        .build()
        .unwrap();
    foreign_hold(&nodes, &[0, 1, 2, 3, 4], res, Duration::from_secs(30));
    let w_task = tokio::spawn(async move {
        let lock = waiter.acquire(res, Duration::from_secs(10)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    // The waiter goes quiet for a moment; the foreign holder's lease runs out.
    for p in &w_proxies {
        p.blackhole();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    for server in nodes.iter() {
        del(server, &key);
    }
    // The other client: its requests arrive 300 ms late; at 450 ms it is cut off for good.
    let a_proxies = proxies(&nodes);
    let other = Redlock::builder(urls(&a_proxies))
        .node_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    other.connect().await.unwrap();
    for p in &a_proxies {
        p.delay(Duration::from_millis(300), Duration::ZERO, Duration::ZERO);
    }
    let a_task = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .try_acquire(res, Duration::from_secs(20))
                .await
                .map(|_| ())
        })
    };
    tokio::time::sleep(Duration::from_millis(450)).await;
    for p in &a_proxies {
        p.blackhole();
    }
    let a_outcome = a_task.await.unwrap();
    eprintln!(
        "other client: {:?}; keys now {:?} (pttl {})",
        a_outcome.map_err(|e| e.to_string()),
        get(&nodes[0], &key),
        pttl(&nodes[0], &key)
    );
    drop(other);
    drop(a_proxies);
    let cut = Instant::now();
    for p in &w_proxies {
        p.heal();
    }
    let got = tokio::time::timeout(Duration::from_secs(8), w_task).await;
    match &got {
        Ok(Ok((at, lock))) => eprintln!(
            "waiter: {:?} after {:?}",
            lock.as_ref().map(|_| ()).map_err(ToString::to_string),
            at.duration_since(cut)
        ),
        other => eprintln!("waiter still waiting after 8 s: {}", other.is_err()),
    }
    let (_, lock) = got
        .expect("the waiter waited out the cut-off client's TTL")
        .unwrap();
    lock.expect("the waiter got the lock");
}

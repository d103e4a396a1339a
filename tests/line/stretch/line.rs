//! The plain mutex's first attempt is a bare `SET NX PX`, and the line keeps its promises
//! because a key anybody waits for never stops existing: it is stretched over its line, its
//! holder's own lease kept in its record (`<base>:held`, see `stretch` in `lua/line.lua`). Each
//! test here would find a second holder, or a plain attempt ahead of the line, if the record
//! were missing, ignored or stale.

use std::time::{Duration, Instant};

use super::records;
use crate::common::*;
use quorumlock::{Redlock, RedlockBuilder};
use quorumlock_testkit::RedisNodes;

/// A waiter whose entry lease is 10 s (ten node timeouts of 1 s) and who polls every third of
/// it: a key its holder left lapses seconds before the waiter's next poll takes it, and only
/// the stretch keeps a bare `SET NX` out meanwhile.
fn slow_polling_waiter(nodes: &RedisNodes) -> Redlock {
    Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .retry_delay(Duration::from_secs(600))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncontended_cycle_costs_each_master_one_set_and_one_script() {
    let nodes = five();
    let rl = connected(&nodes).await;
    rl.connect().await.unwrap();
    let calls =
        |command: &str| -> Vec<u64> { nodes.iter().map(|s| command_calls(s, command)).collect() };
    let (sets, scripts) = (calls("set"), calls("evalsha"));
    let lock = rl.acquire("cycle", Duration::from_secs(5)).await.unwrap();
    lock.release().await.unwrap();
    let each_plus = |before: &[u64], n: u64| -> Vec<u64> { before.iter().map(|c| c + n).collect() };
    // The two requests a quorum did not wait for finish in the background.
    assert!(
        eventually(Duration::from_secs(2), || calls("evalsha")
            == each_plus(&scripts, 1))
        .await,
        "scripts run: {:?}, before {scripts:?}",
        calls("evalsha")
    );
    // A bare SET each (the release's script runs no SET), nothing more once all is settled.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(calls("set"), each_plus(&sets, 1));
    assert_eq!(calls("evalsha"), each_plus(&scripts, 1));
    assert_eq!(present(&nodes, &lock_key("cycle")), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_set_never_takes_a_key_whose_holder_lapsed_while_somebody_waits() {
    let nodes = five();
    let res = "lapsed-holder";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    // Connected first, so that no grant is cut short by a connection's setup on a loaded
    // machine; the grants still on their way when the lock returns land before the waiter.
    holder.connect().await.unwrap();
    let held = holder
        .acquire(res, Duration::from_millis(1500))
        .await
        .unwrap();
    let lease_end = held.deadline();
    let token = held.token().expose().to_owned();
    granted_everywhere(&nodes, &key, &token).await;
    std::mem::forget(held);
    let waiter = slow_polling_waiter(&nodes);
    let w_task = tokio::spawn(async move {
        let lock = waiter.acquire(res, Duration::from_secs(5)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;

    // The holder's lease has run out on every master; its key lives on for the line, with the
    // holder's lease in its record.
    tokio::time::sleep_until((lease_end + Duration::from_millis(150)).into()).await;
    assert_eq!(
        holders(&nodes, &key, &token),
        5,
        "{:?}",
        values(&nodes, &key)
    );
    assert!(
        ttls(&nodes, &key).iter().all(|t| *t > 5_000),
        "{:?}",
        ttls(&nodes, &key)
    );
    for record in records(&nodes, &key) {
        assert!(record.is_some_and(|r| r.starts_with(&format!("{token}|"))));
    }

    // A plain acquire now: its bare SET is refused, and it queues behind the head.
    let plain = builder(&nodes)
        .acquire_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let tried = plain.acquire(res, Duration::from_secs(5)).await;
    assert!(
        tried.is_err(),
        "a plain acquire took the key ahead of the line's head"
    );
    let (_, w_lock) = tokio::time::timeout(Duration::from_secs(6), w_task)
        .await
        .expect("the head never took the lapsed key")
        .unwrap();
    let w_lock = w_lock.unwrap();
    // (The head's lock returned at a quorum: the last master's grant may still be on its way.)
    granted_everywhere(&nodes, &key, w_lock.token().expose()).await;
    w_lock.release().await.unwrap();
    assert_gone_everywhere(&nodes, &key).await;
}

/// Another Redlock client holds the key and renews it with a plain `PEXPIRE` (as redsync and
/// node-redlock do) while a waiter waits: its key is never stretched for the line nor recorded
/// (its value is not one quorumlock writes), and the head waits for the foreign holder's renewed
/// lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_holders_key_is_never_stretched_and_the_head_waits_for_its_renewal() {
    let nodes = five();
    let res = "foreign-renewal";
    let key = lock_key(res);
    for s in nodes.iter() {
        set(s, &key, "foreign-token", Duration::from_millis(1_000));
    }
    let waiter = slow_polling_waiter(&nodes);
    let w_task = tokio::spawn(async move {
        let lock = waiter.acquire(res, Duration::from_secs(5)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    assert!(records(&nodes, &key).iter().all(Option::is_none));
    assert!(ttls(&nodes, &key).iter().all(|&t| t <= 1_000));

    // The foreign holder renews for 4 s.
    let renewed_until = Instant::now() + Duration::from_millis(4_000);
    for s in nodes.iter() {
        let _: i64 = query(s, redis::cmd("PEXPIRE").arg(&key).arg(4_000));
    }
    let (w_at, w_lock) = tokio::time::timeout(Duration::from_secs(12), w_task)
        .await
        .expect("the head never took the key after the foreign lease")
        .unwrap();
    let w_lock = w_lock.unwrap();
    assert!(
        w_at >= renewed_until,
        "the head took the key {:?} before the foreign holder's renewed lease ended",
        renewed_until - w_at
    );
    w_lock.release().await.unwrap();
}

/// A holder that extends while a waiter waits: its record carries the renewed lease, and the
/// head takes the key only after it.
#[tokio::test(flavor = "multi_thread")]
async fn an_extend_renews_the_record_and_the_head_waits_for_it() {
    let nodes = five();
    let res = "extended";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    let mut held = holder.acquire(res, Duration::from_secs(1)).await.unwrap();
    granted_everywhere(&nodes, &key, held.token().expose()).await;
    let waiter = slow_polling_waiter(&nodes);
    let w_task = tokio::spawn(async move {
        let lock = waiter.acquire(res, Duration::from_secs(5)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    held.extend(Duration::from_secs(5)).await.unwrap();
    let extended_until = held.deadline();
    let token = held.token().expose().to_owned();
    std::mem::forget(held);
    // The masters where the holder's key holds its token (at least the quorum the extend
    // returned at) carry its renewed lease in their records.
    let values = values(&nodes, &key);
    let records = records(&nodes, &key);
    let held: Vec<usize> = (0..values.len())
        .filter(|&i| values[i].as_deref() == Some(token.as_str()))
        .collect();
    assert!(held.len() >= 3, "the lock holds a quorum: {values:?}");
    for &i in &held {
        assert!(
            records[i]
                .as_deref()
                .is_some_and(|r| r.starts_with(&format!("{token}|"))),
            "master {i}: record {:?}, key {:?}",
            records[i],
            values[i]
        );
    }
    let (w_at, w_lock) = tokio::time::timeout(Duration::from_secs(15), w_task)
        .await
        .expect("the head never took the key after the extended lease")
        .unwrap();
    let w_lock = w_lock.unwrap();
    assert!(
        w_at >= extended_until,
        "two holders: the head took the key {:?} before the extended lock's deadline",
        extended_until - w_at
    );
    w_lock.release().await.unwrap();
}

/// A holder whose lease ran out on the masters, its key kept only for the line, cannot extend:
/// as if its key had expired. The renewal is sent as the library sends it (`lua/extend.lua`),
/// straight to each master: the client itself would refuse to send it this late, but a master
/// whose clock runs ahead of the holder's could see it this late.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_past_its_lease_cannot_extend_a_key_kept_for_the_line() {
    let nodes = five();
    let res = "late-extend";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    // Connected first, and granted on every master before the waiter comes (see above).
    holder.connect().await.unwrap();
    let held = holder
        .acquire(res, Duration::from_millis(1500))
        .await
        .unwrap();
    let token = held.token().expose().to_owned();
    granted_everywhere(&nodes, &key, &token).await;
    let waiter = slow_polling_waiter(&nodes);
    let w_task = tokio::spawn(async move { waiter.acquire(res, Duration::from_secs(5)).await });
    waiters_in_line(&nodes, &key, 1).await;
    tokio::time::sleep_until((held.deadline() + Duration::from_millis(200)).into()).await;
    std::mem::forget(held);
    assert_eq!(
        holders(&nodes, &key, &token),
        5,
        "the key is kept for the line"
    );
    let held_key = quorumlock::companion_key(&key, ":held");
    for s in nodes.iter() {
        let renewed: i64 = query(
            s,
            redis::cmd("EVAL")
                .arg(include_str!("../../../src/lua/extend.lua"))
                .arg(2)
                .arg(&key)
                .arg(&held_key)
                .arg(&token)
                .arg(5_000)
                .arg(1),
        );
        assert_eq!(renewed, 0, "a holder past its lease renewed its key");
    }
    let w_lock = tokio::time::timeout(Duration::from_secs(6), w_task)
        .await
        .expect("the head never took the lapsed key")
        .unwrap()
        .unwrap();
    w_lock.release().await.unwrap();
}

/// The only waiter gives up: its line is left with nobody, and the key lapses when its holder's
/// lease says, not when the line would have.
#[tokio::test(flavor = "multi_thread")]
async fn a_line_its_last_waiter_left_lets_the_key_lapse_with_its_holders_lease() {
    let nodes = five();
    let res = "left-alone";
    let key = lock_key(res);
    let holder = connected(&nodes).await;
    let held = holder.acquire(res, Duration::from_secs(2)).await.unwrap();
    let lease_end = held.deadline();
    std::mem::forget(held);
    let impatient: RedlockBuilder = Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .acquire_timeout(Duration::from_millis(300));
    let gave_up = impatient
        .build()
        .unwrap()
        .acquire(res, Duration::from_secs(5))
        .await;
    assert!(gave_up.is_err());
    // Its entry leaves with the give-up; the key is the holder's for its lease only.
    assert!(
        eventually(Duration::from_secs(2), || nodes.iter().all(|s| line(
            s, &key
        )
        .is_empty()
            && pttl(s, &key) <= 2_000))
        .await,
        "line {:?}, ttls {:?}",
        nodes.iter().map(|s| line(s, &key)).collect::<Vec<_>>(),
        ttls(&nodes, &key)
    );
    tokio::time::sleep_until((lease_end + Duration::from_millis(100)).into()).await;
    assert!(eventually(Duration::from_secs(1), || present(&nodes, &key) == 0).await);
    let next = connected(&nodes)
        .await
        .acquire(res, Duration::from_secs(1))
        .await
        .unwrap();
    next.release().await.unwrap();
}

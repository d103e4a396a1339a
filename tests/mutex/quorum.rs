//! The lock core against five real, independent redis-server masters.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Error, NodeError, NodeErrorKind, Redlock};
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn acquire_sets_the_token_on_every_master_and_release_removes_it() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let lock = rl.acquire("orders:42", TTL).await.unwrap();
    assert_eq!(lock.resource(), "orders:42");
    let token = lock.token().expose().to_owned();
    let bits = token
        .strip_prefix("ql-")
        .unwrap_or_else(|| panic!("unmarked token {token}"));
    assert!(
        bits.len() == 32 && bits.bytes().all(|b| b.is_ascii_hexdigit()),
        "128 bits as hex after the mark: {token}"
    );
    // The decision is taken at the third grant; the last two land just after.
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("orders:42"),
            &token
        ) == 5)
        .await
    );

    // The release returns at the third confirmation; the last two land just after.
    let released = lock.release().await.unwrap();
    assert!(
        released.deleted >= 3 && released.absent == 0,
        "{released:?}"
    );
    assert!(
        eventually(Duration::from_secs(1), || present(
            &nodes,
            &lock_key("orders:42")
        ) == 0)
        .await
    );

    // Released straight after acquiring: the masters that had not answered yet are cleaned up
    // behind their late SET.
    for _ in 0..20 {
        rl.acquire("orders:43", TTL)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("orders:43")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_acquisition_gets_a_fresh_token() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let lock = rl.try_acquire("fresh", TTL).await.unwrap();
        assert!(seen.insert(lock.token().expose().to_owned()));
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_client_is_refused_while_the_lock_is_held_and_succeeds_after_release() {
    let nodes = five();
    let first = connected(&nodes).await;
    let second = connected(&nodes).await;
    let lock = first.acquire("report", TTL).await.unwrap();

    let err = second.try_acquire("report", TTL).await.unwrap_err();
    assert!(err.is_contention(), "{err}");
    assert!(!err.is_unavailable(), "{err}");
    match &err {
        Error::NotAcquired {
            granted,
            quorum,
            attempts,
            nodes: refused,
            ..
        } => {
            // The first holder's last two SETs may still be landing, so a node or two may grant.
            assert!(*granted < *quorum, "{err}");
            assert_eq!((*quorum, *attempts), (3, 1));
            assert!(refused.len() >= 3 && refused.iter().all(|n| n.is_contention()));
        }
        other => panic!("unexpected {other:?}"),
    }

    lock.release().await.unwrap();
    let lock2 = second.try_acquire("report", TTL).await.unwrap();
    assert!(lock2.is_valid());
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_retries_unavailable_nodes_by_the_policy_and_try_acquire_makes_one_attempt() {
    let mut nodes = five();
    for i in 0..3 {
        nodes[i].kill().unwrap();
    }
    let waiter = builder(&nodes).retry_count(4).build().unwrap();

    // Nodes down, not a holder: the retry count bounds the attempts (a wait in line is bounded
    // by the acquire timeout instead; see tests/line/order.rs).
    match waiter.acquire("busy", TTL).await.unwrap_err() {
        Error::NotAcquired { attempts, .. } => assert_eq!(attempts, 5),
        other => panic!("unexpected {other:?}"),
    }
    match waiter.try_acquire("busy", TTL).await.unwrap_err() {
        Error::NotAcquired { attempts, .. } => assert_eq!(attempts, 1),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_timeout_stops_retrying_before_the_retry_count_runs_out() {
    let nodes = five();
    let holder = connected(&nodes).await;
    let _held = holder.acquire("busy", TTL).await.unwrap();
    let waiter = builder(&nodes)
        .retry_count(1_000)
        .retry_delay(Duration::from_millis(50))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    match waiter.acquire("busy", TTL).await.unwrap_err() {
        // 300 ms of 50 ms delays leave room for about six attempts, far fewer than 1,001.
        Error::NotAcquired { attempts, .. } => assert!((2..=8).contains(&attempts), "{attempts}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_succeeds_with_two_of_five_masters_killed() {
    let mut nodes = five();
    nodes[0].kill().unwrap();
    nodes[3].kill().unwrap();
    let rl = client(&nodes);
    let lock = rl.acquire("survivor", TTL).await.unwrap();
    assert_eq!(
        holders(&nodes, &lock_key("survivor"), lock.token().expose()),
        3
    );
    assert_eq!(rl.quorum(), 3, "quorum comes from the configured count");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_fails_with_three_of_five_killed_and_leaves_no_key_on_the_live_masters() {
    let mut nodes = five();
    for i in [0, 2, 4] {
        nodes[i].kill().unwrap();
    }
    let rl = client(&nodes);
    let err = rl.acquire("doomed", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(!err.is_contention(), "{err}");
    assert!(err.is_retriable());
    let text = err.to_string();
    for i in [0, 2, 4] {
        let addr = format!("127.0.0.1:{}", nodes[i].port());
        assert!(
            text.contains(&addr),
            "error names the dead node {addr}: {text}"
        );
    }
    assert_eq!(present(&nodes, &lock_key("doomed")), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_does_not_wait_for_two_paused_masters_and_cleans_up_after_they_resume() {
    let nodes = five();
    let node_timeout = Duration::from_secs(2);
    let rl = builder(&nodes).node_timeout(node_timeout).build().unwrap();
    // Open every connection first, so requests to the paused masters are really in flight.
    rl.connect().await.unwrap();
    nodes[1].pause().unwrap();
    nodes[4].pause().unwrap();

    let start = Instant::now();
    let lock = rl.acquire("paused", TTL).await.unwrap();
    let took = start.elapsed();
    // Waiting for a paused master would take the whole node timeout.
    assert!(took < node_timeout, "acquire took {took:?}");
    assert!(lock.remaining() > TTL - node_timeout);
    let token = lock.token().expose().to_owned();
    lock.release().await.unwrap();

    // The SETs queued on the paused masters land when they resume, and the releases queued
    // behind them on the same connections remove them.
    nodes[1].resume().unwrap();
    nodes[4].resume().unwrap();
    let clean = eventually(Duration::from_secs(3), || {
        present(&nodes, &lock_key("paused")) == 0
    })
    .await;
    assert!(
        clean,
        "{} masters still hold the key",
        holders(&nodes, &lock_key("paused"), &token)
    );
}

/// The node timeout of [`three_of_five_paused`]'s client.
const PAUSED_NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// Five masters, the first three paused (`SIGSTOP`), and a connected client with a node timeout
/// of [`PAUSED_NODE_TIMEOUT`].
async fn three_of_five_paused() -> (RedisNodes, Redlock) {
    let nodes = five();
    let rl = builder(&nodes)
        .node_timeout(PAUSED_NODE_TIMEOUT)
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    (nodes, rl)
}

/// How many of the nodes listed by a failed acquire match `matching`.
fn failed_nodes(err: &Error, matching: impl Fn(&NodeError) -> bool) -> usize {
    match err {
        Error::NotAcquired { nodes, .. } => nodes.iter().filter(|n| matching(n)).count(),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acquire_fails_within_the_node_timeout_when_three_of_five_are_paused() {
    let (nodes, rl) = three_of_five_paused().await;
    let err = rl.try_acquire("stalled", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(matches!(err, Error::NotAcquired { .. }), "{err:?}");
    assert_eq!(failed_nodes(&err, NodeError::is_timeout), 3, "{err}");
    // The two live masters were rolled back.
    assert_eq!(
        nodes
            .iter()
            .skip(3)
            .filter(|s| get(s, &lock_key("stalled")).is_some())
            .count(),
        0
    );
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let clean = eventually(Duration::from_secs(3), || {
        present(&nodes, &lock_key("stalled")) == 0
    })
    .await;
    assert!(clean, "late SETs on the resumed masters were rolled back");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_master_is_probed_one_request_at_a_time_until_it_answers_again() {
    let (nodes, rl) = three_of_five_paused().await;
    let unresponsive =
        |err: &Error| failed_nodes(err, |n| matches!(n.kind(), NodeErrorKind::Unresponsive));
    let timeouts = |err: &Error| failed_nodes(err, NodeError::is_timeout);
    // Each attempt times out twice on each hung master: its SET, then its rollback's release.
    // Once they have for a second (from the first timeout, one node timeout in), the masters
    // count as unresponsive.
    let silent = Instant::now();
    while silent.elapsed() < Duration::from_secs(1) + PAUSED_NODE_TIMEOUT * 2 {
        let err = rl.try_acquire("hung", TTL).await.unwrap_err();
        assert_eq!(timeouts(&err) + unresponsive(&err), 3, "{err}");
    }
    // From now on one request at a time probes each, and the others fail at once, unsent,
    // instead of waiting out the node timeout. Of eight concurrent attempts, at most three can
    // hold a probe.
    let attempts: Vec<_> = (0..8)
        .map(|i| {
            let rl = rl.clone();
            tokio::spawn(async move { rl.try_acquire(&format!("hung-{i}"), TTL).await })
        })
        .collect();
    let mut not_sent = 0;
    for attempt in attempts {
        let err = attempt.await.unwrap().unwrap_err();
        if unresponsive(&err) == 3 {
            not_sent += 1;
        }
    }
    assert!(not_sent >= 5, "{not_sent} of 8 attempts");

    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    // The next probe that gets an answer brings each master back into every request.
    let mut all_five = false;
    for _ in 0..50 {
        let lock = rl.try_acquire("hung", TTL).await;
        if let Ok(lock) = lock {
            let token = lock.token().expose().to_owned();
            all_five = eventually(PAUSED_NODE_TIMEOUT, || {
                holders(&nodes, &lock_key("hung"), &token) == 5
            })
            .await;
            lock.release().await.unwrap();
            if all_five {
                break;
            }
        }
        tokio::time::sleep(PAUSED_NODE_TIMEOUT / 4).await;
    }
    assert!(all_five, "the resumed masters take part again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_held_on_three_of_five_by_another_token_is_refused_and_the_free_masters_are_rolled_back(
) {
    let nodes = five();
    for i in 0..3 {
        set(&nodes[i], &lock_key("contended"), "someone-else", TTL);
    }
    let rl = connected(&nodes).await;
    let err = rl.try_acquire("contended", TTL).await.unwrap_err();
    assert!(err.is_contention(), "{err}");
    assert_eq!(holders(&nodes, &lock_key("contended"), "someone-else"), 3);
    assert_eq!(get(&nodes[3], &lock_key("contended")), None);
    assert_eq!(get(&nodes[4], &lock_key("contended")), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn release_never_deletes_another_holders_key() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let short = Duration::from_millis(400);
    let stale = rl.acquire("handover", short).await.unwrap();
    tokio::time::sleep(short + Duration::from_millis(50)).await;
    assert!(!stale.is_valid());

    let current = rl.acquire("handover", TTL).await.unwrap();
    let token = current.token().expose();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("handover"),
            token
        ) == 5)
        .await
    );
    let released = stale.release().await.unwrap();
    assert_eq!(released.deleted, 0);
    assert!(released.absent >= 3, "{released:?}");
    // Give the releases still in flight when it returned time to land: none may delete.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(holders(&nodes, &lock_key("handover"), token), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn extend_renews_the_keys_and_moves_the_deadline() {
    let nodes = five();
    let rl = connected(&nodes).await;
    // Connected first: on a loaded machine an acquire request still waiting for its connection
    // may be sent after the extend queued behind the same connection, and land after it with
    // the short TTL (the lock holds on a quorum either way; this test checks all five).
    rl.connect().await.unwrap();
    let mut lock = rl
        .acquire("long-job", Duration::from_secs(1))
        .await
        .unwrap();
    let before = lock.deadline();
    lock.extend(Duration::from_secs(20)).await.unwrap();
    assert!(lock.deadline() > before + Duration::from_secs(10));
    assert!(lock.remaining() > Duration::from_secs(19));
    let renewed = || {
        nodes
            .iter()
            .filter(|s| pttl(s, &lock_key("long-job")) > 18_000)
            .count()
    };
    assert!(renewed() >= 3);
    assert!(eventually(Duration::from_secs(1), || renewed() == 5).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn extend_after_expiry_fails_and_touches_no_key() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let mut lock = rl
        .acquire("expired", Duration::from_millis(400))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    // Another holder takes it; the stale extend must not renew that holder's keys.
    let other = rl.acquire("expired", TTL).await.unwrap();
    let token = other.token().expose();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("expired"),
            token
        ) == 5)
        .await
    );
    let err = lock.extend(TTL).await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    assert!(!err.is_retriable());
    assert!(
        nodes.iter().all(|s| pttl(s, &lock_key("expired")) > 9_000),
        "the new holder's keys keep their TTL"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_extend_keeps_the_old_deadline_and_deletes_nothing() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let mut lock = rl.acquire("taken-over", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("taken-over"),
            &token
        ) == 5)
        .await
    );
    // Three masters lost this holder's key (say, restarted empty) and another client took it.
    for i in 0..3 {
        set(&nodes[i], &lock_key("taken-over"), "newcomer", TTL);
    }
    let deadline = lock.deadline();
    let err = lock.extend(Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(err, Error::NotExtended { .. }), "{err}");
    assert!(
        !err.is_retriable(),
        "the token is gone from a majority: {err}"
    );
    assert_eq!(lock.deadline(), deadline);
    assert_eq!(holders(&nodes, &lock_key("taken-over"), "newcomer"), 3);
    assert_eq!(
        holders(&nodes, &lock_key("taken-over"), &token),
        2,
        "nothing deleted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn validity_is_never_more_than_ttl_minus_drift() {
    let nodes = five();
    let rl = builder(&nodes).drift_factor(0.05).connected().await;
    let ttl = Duration::from_secs(4);
    let drift = ttl.mul_f64(0.05) + Duration::from_millis(2);
    for _ in 0..10 {
        let start = Instant::now();
        let lock = rl.acquire("bounded", ttl).await.unwrap();
        let end = Instant::now();
        // The attempt started after `start`, and its time is charged against the validity.
        assert!(lock.deadline() <= end + (ttl - drift));
        assert!(lock.deadline() >= start + (ttl - drift) - (end - start));
        assert!(lock.remaining() <= ttl - drift);
        assert!(lock.remaining() > ttl - drift - Duration::from_secs(1));
        lock.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_an_unreleased_lock_releases_it_in_the_background() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let lock = rl.acquire("dropped", TTL).await.unwrap();
    drop(lock);
    let gone = eventually(Duration::from_secs(2), || {
        present(&nodes, &lock_key("dropped")) == 0
    })
    .await;
    assert!(gone);
    assert!(rl.try_acquire("dropped", TTL).await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_acquire_leaves_no_key_behind() {
    let nodes = five();
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    // Cancel while the attempt waits for the paused majority.
    let cancelled =
        tokio::time::timeout(Duration::from_millis(100), rl.acquire("cancel", TTL)).await;
    assert!(cancelled.is_err());
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let clean = eventually(Duration::from_secs(3), || {
        present(&nodes, &lock_key("cancel")) == 0
    })
    .await;
    assert!(clean);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_even_node_count_works_with_a_majority_quorum() {
    let nodes = quorumlock_testkit::RedisNodes::spawn(4).unwrap();
    let rl = connected(&nodes).await;
    assert_eq!(rl.quorum(), 3);
    let lock = rl.acquire("even", TTL).await.unwrap();
    let token = lock.token().expose();
    assert!(holders(&nodes, &lock_key("even"), token) >= 3);
    assert!(
        eventually(Duration::from_secs(1), || holders(
            &nodes,
            &lock_key("even"),
            token
        ) == 4)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn key_prefix_is_prepended_to_the_resource() {
    let nodes = five();
    let rl = builder(&nodes).key_prefix("app:locks:").connected().await;
    let lock = rl.acquire("job", TTL).await.unwrap();
    let token = lock.token().expose();
    // The key is the prefix and the name, as every Redlock client writes it.
    let key = quorumlock::resource_key("app:locks:", "job");
    assert_eq!(key, "app:locks:job");
    assert!(eventually(Duration::from_secs(1), || holders(&nodes, &key, token) == 5).await);
    assert_eq!(present(&nodes, &lock_key("job")), 0);
    assert_eq!(present(&nodes, "{app:locks:job}"), 0, "no key of layout 2");
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_reports_a_minority_down_without_failing() {
    let mut nodes = five();
    nodes[2].kill().unwrap();
    let rl = client(&nodes);
    let health = rl.connect().await.unwrap();
    assert_eq!(health.reachable, 4);
    assert_eq!(health.unreachable.len(), 1);
    assert_eq!(
        health.unreachable[0].node(),
        format!("127.0.0.1:{}", nodes[2].port())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_never_appears_in_debug_or_display() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let lock = rl.acquire("secret", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    let shown = format!("{lock:?} {} {:?}", lock.token(), lock.token());
    assert!(!shown.contains(&token), "{shown}");
    assert!(shown.contains(&lock.token().fingerprint()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_master_is_used_again_without_rebuilding_the_client() {
    let mut nodes = five();
    let rl = connected(&nodes).await;
    rl.connect().await.unwrap();
    for i in [0, 1] {
        nodes[i].kill().unwrap();
    }
    let lock = rl.acquire("comeback", TTL).await.unwrap();
    lock.release().await.unwrap();
    for i in [0, 1] {
        nodes[i].restart().unwrap();
    }
    // The connections come back on their own; after that every master takes part again.
    let all_five = {
        let mut held = 0;
        for _ in 0..50 {
            let lock = rl.acquire("comeback", TTL).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            held = holders(&nodes, &lock_key("comeback"), lock.token().expose());
            lock.release().await.unwrap();
            if held == 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        held
    };
    assert_eq!(all_five, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn redlock_is_clone_send_sync_and_lock_is_send() {
    fn clone_send_sync_static<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send>() {}
    clone_send_sync_static::<Redlock>();
    send::<quorumlock::Lock>();

    let nodes = five();
    let rl = client(&nodes);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let rl = rl.clone();
            tokio::spawn(async move {
                let lock = rl.acquire(&format!("task-{i}"), TTL).await.unwrap();
                let released = lock.release().await.unwrap();
                released.deleted + released.absent
            })
        })
        .collect();
    for h in handles {
        assert!(h.await.unwrap() >= 3, "a quorum confirmed each release");
    }
    // Requests that were still landing when a lock was released are cleaned up behind it.
    let clean = || (0..4).all(|i| present(&nodes, &lock_key(&format!("task-{i}"))) == 0);
    assert!(eventually(Duration::from_secs(2), clean).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn masters_that_lost_their_scripts_still_grant_and_release_on_open_connections() {
    let nodes = five();
    let rl = connected(&nodes).await;
    // Connections open, scripts loaded and used once.
    rl.acquire("flushed", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    for server in &nodes {
        let _: () = query(server, redis::cmd("SCRIPT").arg("FLUSH"));
    }
    // The plain attempt and the release send the SHA1, hear NOSCRIPT, and send the source.
    let lock = rl.acquire("flushed", TTL).await.unwrap();
    assert!(holders(&nodes, &lock_key("flushed"), lock.token().expose()) >= 3);
    lock.release().await.unwrap();
    assert_gone_everywhere(&nodes, &lock_key("flushed")).await;
    assert_eq!(rl.stats().attempts, 2, "no attempt was lost to NOSCRIPT");
}

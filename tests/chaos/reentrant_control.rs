//! The reentrant lock's negative control, against three real masters A, B and C.
//!
//! One owner takes a lock, takes it again (a nested hold), and ends both holds, while the
//! request of one hold's end to C is lost: its proxy swallows it, and the quorum of A and B
//! answers without it.
//!
//! * The naive design (a hold count per master in a hash, Redisson-style, `HINCRBY` up and down
//!   on each master: `quorumlock_verify::naive_reentrant`) drifts: when the owner has ended both
//!   holds and every master answered the last end, C still counts one hold and keeps the key for
//!   nobody. The leak checker (`check_left_behind`) reports it from a direct read of the masters.
//! * The library's `ReentrantLock` counts holds in the client: the nested hold's release sends
//!   nothing, the last hold's release deletes the one key everywhere, and the checker finds
//!   nothing.
//!
//! Driven step by step, not left to chance. The chaos version, under faults, is scenario 21 of
//! `tests/chaos/scenarios.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, lock_key, query};
use quorumlock::Redlock;
use quorumlock_testkit::history::ReleaseAudit;
use quorumlock_testkit::{FaultProxy, History, RedisNodes, Violation};
use quorumlock_verify::naive_reentrant::NaiveReentrant;

const C: usize = 2;

const LOCK: &str = "ledger";

const OWNER: &str = "worker-7";

/// Long enough that nothing expires during the test.
const TTL: Duration = Duration::from_secs(30);

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

fn proxies(nodes: &RedisNodes) -> (Vec<FaultProxy>, Vec<String>) {
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|server| FaultProxy::start(server.addr()).unwrap())
        .collect();
    let urls = proxies.iter().map(FaultProxy::url).collect();
    (proxies, urls)
}

#[tokio::test(flavor = "multi_thread")]
async fn per_master_hold_counts_drift_when_one_end_is_lost_and_the_checker_reports_the_leaked_key()
{
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    let (proxies, urls) = proxies(&nodes);
    let naive = NaiveReentrant::connect(&urls, LOCK, NODE_TIMEOUT).await;

    let outer = naive.hold(OWNER, TTL).await;
    assert!(outer.is_held(), "{outer:?}\n{}", nodes.logs());
    let inner = naive.hold(OWNER, TTL).await;
    assert_eq!(
        inner.counts,
        [Some(2), Some(2), Some(2)],
        "reentered on every master"
    );

    // The inner hold's end never reaches C; A and B are a quorum without it.
    let lost = history.fault("the end of the inner hold lost on its way to C");
    proxies[C].blackhole();
    let inner_end = naive.end(OWNER, TTL).await;
    proxies[C].heal();
    history.heal(lost);
    assert_eq!(inner_end.counts, [Some(1), Some(1), None]);

    // The owner reconnects and ends its last hold: every master answers.
    let naive = NaiveReentrant::connect(&urls, LOCK, NODE_TIMEOUT).await;
    let outer_end = naive.end(OWNER, TTL).await;
    let released = Instant::now();
    assert_eq!(
        outer_end.counts,
        [Some(0), Some(0), Some(1)],
        "C drifted by one"
    );
    let holding: Vec<usize> = nodes
        .iter()
        .enumerate()
        .filter(|(_, server)| {
            let count: Option<i64> = query(server, redis::cmd("HGET").arg(LOCK).arg(OWNER));
            count.is_some_and(|c| c != 0)
        })
        .map(|(i, _)| i)
        .collect();
    history.record_audit(ReleaseAudit::new(
        0,
        LOCK,
        OWNER,
        released,
        (outer_end.confirmed(), nodes.len()),
        holding,
    ));

    let report = history.check();
    println!("{report}");
    assert_eq!(report.violations.len(), 1, "{report}");
    let Violation::LeftBehind { audit } = &report.violations[0] else {
        panic!("not a key left behind: {report}");
    };
    assert_eq!(
        (audit.holding.as_slice(), audit.confirmed),
        ([C].as_slice(), 3)
    );
    // C keeps it for nobody until it expires.
    let ttl: i64 = query(&nodes[C], redis::cmd("PTTL").arg(LOCK));
    assert!(ttl > 0, "{ttl}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reentrant_lock_counts_holds_in_the_client_and_releases_its_one_key_once() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    let (proxies, urls) = proxies(&nodes);
    let rl = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    let key = lock_key(LOCK);
    let holders = |token: &str| {
        nodes
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                query::<Option<String>>(s, redis::cmd("GET").arg(&key)).as_deref() == Some(token)
            })
            .map(|(i, _)| i)
            .collect::<Vec<usize>>()
    };

    let outer = rl.acquire(LOCK, TTL).await.unwrap().into_reentrant();
    let inner = outer.nested();
    let token = outer.token().expose().to_owned();
    // The acquire returns once a quorum granted; the third grant may still be on its way.
    assert!(
        eventually(Duration::from_secs(2), || holders(&token) == [0, 1, 2]).await,
        "held on {:?}\n{}",
        holders(&token),
        nodes.logs()
    );

    // The inner hold's release sends nothing, so losing it on the way to C loses nothing.
    let lost = history.fault("requests to C swallowed while the inner hold ends");
    proxies[C].blackhole();
    assert!(inner.release().await.unwrap().is_none());
    proxies[C].heal();
    history.heal(lost);
    assert_eq!(
        holders(&token),
        [0, 1, 2],
        "the inner release reached a master"
    );

    let released = outer
        .release()
        .await
        .unwrap()
        .expect("the last hold releases");
    let at = Instant::now();
    history.record_audit(ReleaseAudit::new(
        0,
        LOCK,
        &token,
        at,
        (released.deleted + released.absent, nodes.len()),
        holders(&token),
    ));
    let report = history.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert!(released.deleted >= 2, "{released:?}");
}

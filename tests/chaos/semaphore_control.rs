//! The semaphore's negative control, against three real masters A, B and C.
//!
//! Holder 1 reaches only {A, B}, holder 2 only {B, C}, holder 3 only {A, C}: each is a separate
//! client configured with all three masters, through a fault proxy per master that refuses the
//! connections of the master it may not reach. With K = 2:
//!
//! * the naive design (a holder count per master, a permit at a quorum of masters with room,
//!   `quorumlock_verify::naive_semaphore`) grants all three, and `check_max_holders` reports
//!   three holders of two permits — while every master's own count stays at 2;
//! * the library's `Semaphore` (K slots, each an ordinary quorum lock) grants holders 1 and 2 and
//!   refuses holder 3, and the checker finds nothing.
//!
//! The scenario is driven step by step, not left to chance. The chaos version, under faults, is
//! scenario 18 of `tests/chaos/scenarios.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::reaching;
use quorumlock::{Permit, Redlock};
use quorumlock_testkit::history::{check_max_holders, peak_holders};
use quorumlock_testkit::{
    FaultProxy, History, Op, OpKind, Outcome, RedisNodes, RedisServer, Violation,
};
use quorumlock_verify::naive_semaphore::NaiveSemaphore;

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// The masters each holder reaches.
const REACHES: [[usize; 2]; 3] = [[A, B], [B, C], [A, C]];

const PERMITS: u32 = 2;

/// Long enough for all three holders to hold at once on a loaded machine.
const TTL: Duration = Duration::from_secs(10);

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// How many holders `server` counts in the naive semaphore's `key`.
fn counted(server: &RedisServer, key: &str) -> usize {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    redis::cmd("ZCARD").arg(key).query(&mut connection).unwrap()
}

fn slot_semaphore_client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .acquire_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_per_master_count_grants_three_holders_of_two_permits_and_the_checker_reports_it() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    let mut held = Vec::new();
    for (client, reach) in REACHES.iter().enumerate() {
        let (proxies, urls) = reaching(&nodes, reach);
        let naive = NaiveSemaphore::connect(&urls, "jobs", PERMITS, NODE_TIMEOUT).await;
        assert_eq!(naive.quorum(), 2, "a majority of the three configured");
        let start = Instant::now();
        let permit = naive
            .try_acquire(TTL)
            .await
            .unwrap_or_else(|e| panic!("holder {} refused: {e}\n{}", client + 1, nodes.logs()));
        history.record(Op {
            client,
            resource: "jobs".into(),
            token: permit.token().to_owned(),
            kind: OpKind::Acquire,
            start,
            end: Instant::now(),
            outcome: Outcome::Ok {
                valid_until: Some(permit.deadline()),
            },
            fence: None,
        });
        assert_eq!(permit.granted(), reach, "holder {}", client + 1);
        held.push((proxies, naive, permit));
    }

    // No master ever counted more than its 2 permits ...
    let key = held[0].1.key();
    let counts: Vec<usize> = nodes.iter().map(|s| counted(s, &key)).collect();
    assert_eq!(counts, [2, 2, 2], "{}", nodes.logs());
    // ... and a fourth holder that reaches all three is refused: each master is full.
    let everywhere = NaiveSemaphore::connect(&nodes.urls(), "jobs", PERMITS, NODE_TIMEOUT).await;
    let refused = everywhere.try_acquire(TTL).await.unwrap_err();
    assert!(refused.granted.is_empty(), "{refused}");

    // Yet three holders of two permits held at once.
    let ops = history.ops();
    let violations = check_max_holders("jobs", &ops, PERMITS as usize);
    for v in &violations {
        println!("{}", v.display_from(history.origin()));
    }
    assert_eq!(violations.len(), 1, "{violations:?}");
    let Violation::TooManyHolders {
        permits, holders, ..
    } = &violations[0]
    else {
        panic!("not too many holders: {violations:?}");
    };
    assert_eq!(*permits, 2);
    let mut clients: Vec<usize> = holders.iter().map(|h| h.lease.client).collect();
    clients.sort_unstable();
    assert_eq!(clients, [0, 1, 2]);
    assert_eq!(peak_holders("jobs", &ops), 3);

    for (_, naive, permit) in &held {
        naive.release(permit).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_slot_semaphore_refuses_the_third_holder_under_the_same_reachability() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    history.watch_semaphore("jobs", PERMITS as usize);
    let mut held: Vec<(Vec<FaultProxy>, Permit)> = Vec::new();

    for (client, reach) in REACHES[..2].iter().enumerate() {
        let (proxies, urls) = reaching(&nodes, reach);
        let semaphore = slot_semaphore_client(&urls)
            .semaphore("jobs", PERMITS)
            .unwrap();
        let start = Instant::now();
        let permit = semaphore
            .try_acquire(TTL)
            .await
            .unwrap_or_else(|e| panic!("holder {} refused: {e}\n{}", client + 1, nodes.logs()));
        history.record(Op::permit_acquired(client, start, Instant::now(), &permit));
        held.push((proxies, permit));
    }
    assert_ne!(held[0].1.slot(), held[1].1.slot(), "one slot each");

    // Holder 3 reaches {A, C}: holder 1's slot is held on A, holder 2's on C.
    let (_proxies, urls) = reaching(&nodes, &REACHES[2]);
    let semaphore = slot_semaphore_client(&urls)
        .semaphore("jobs", PERMITS)
        .unwrap();
    let start = Instant::now();
    let refused = semaphore.try_acquire(TTL).await.unwrap_err();
    history.record(Op::acquire_failed(
        2,
        "jobs",
        start,
        Instant::now(),
        &refused,
    ));
    assert!(refused.is_contention(), "{refused}");
    // Waiting in both slots' lines does not get it either: nobody releases.
    let start = Instant::now();
    let timed_out = semaphore.acquire(TTL).await.unwrap_err();
    history.record(Op::acquire_failed(
        2,
        "jobs",
        start,
        Instant::now(),
        &timed_out,
    ));
    assert!(timed_out.is_contention(), "{timed_out}");

    let report = history.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.acquires.ok, report.acquires.failed), (2, 2));
    let ops = history.ops();
    assert_eq!(check_max_holders("jobs", &ops, PERMITS as usize), vec![]);
    assert_eq!(
        peak_holders("jobs", &ops),
        2,
        "both permits were held at once"
    );

    for (_, permit) in held {
        permit.release().await.unwrap();
    }
}

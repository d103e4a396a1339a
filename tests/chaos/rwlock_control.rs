//! The read-write lock's negative control, against three real masters A, B and C.
//!
//! A reader reaches only {B, C}; a writer reaches all three. Each is a separate client
//! configured with all three masters, through a fault proxy per master that refuses the
//! connections of the masters it may not reach.
//!
//! * The naive design (a writer that looks for readers on one master only, then `SET NX` on each,
//!   `quorumlock_verify::naive_rwlock`) grants the writer on all three while the reader holds:
//!   `check_rw_exclusion` reports the overlap and the read-write witness the writer entering
//!   beside the reader.
//! * The library's `RwLock` (each master refuses a writer while a reader's hold is live there)
//!   refuses the writer under the same reachability, and the checker finds nothing — while two
//!   readers share the lock.
//!
//! The scenario is driven step by step, not left to chance. The chaos version, under faults, is
//! scenario 19 of `tests/chaos/scenarios.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::{lock_key, query, reaching};
use quorumlock::Redlock;
use quorumlock_testkit::history::{peak_readers, readers_of, Access};
use quorumlock_testkit::{History, Op, OpKind, Outcome, RedisNodes, Releasing, Violation};
use quorumlock_verify::naive_rwlock::{NaiveHold, NaiveRwLock};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

const LOCK: &str = "catalog";

/// Long enough for both holders to hold at once on a loaded machine.
const TTL: Duration = Duration::from_secs(10);

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// Records a naive hold as a successful acquire, under the name its side is recorded by.
fn record(history: &History, client: usize, start: Instant, hold: &NaiveHold, access: Access) {
    history.record(Op {
        client,
        resource: match access {
            Access::Read => readers_of(LOCK),
            _ => LOCK.to_owned(),
        },
        token: hold.token().to_owned(),
        kind: OpKind::Acquire,
        start,
        end: Instant::now(),
        outcome: Outcome::Ok {
            valid_until: Some(hold.deadline()),
        },
        fence: None,
    });
}

fn client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .acquire_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_that_looks_for_readers_on_one_master_joins_a_reader_and_the_checker_reports_it() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    history.watch_rw_lock(LOCK);
    let witness = history.read_write_witness(LOCK);

    let (_reader_proxies, reader_urls) = reaching(&nodes, &[B, C]);
    let reader = NaiveRwLock::connect(&reader_urls, LOCK, NODE_TIMEOUT).await;
    assert_eq!(reader.quorum(), 2, "a majority of the three configured");
    let start = Instant::now();
    let read = reader
        .try_read(TTL)
        .await
        .unwrap_or_else(|e| panic!("reader refused: {e}\n{}", nodes.logs()));
    record(&history, 0, start, &read, Access::Read);
    assert_eq!(read.granted(), [B, C]);
    let _reading = witness.enter(0, Access::Read);

    let writer = NaiveRwLock::connect(&nodes.urls(), LOCK, NODE_TIMEOUT).await;
    let start = Instant::now();
    let write = writer
        .try_write(TTL)
        .await
        .unwrap_or_else(|e| panic!("writer refused: {e}\n{}", nodes.logs()));
    record(&history, 1, start, &write, Access::Write);
    assert_eq!(write.granted(), [A, B, C]);
    drop(witness.enter(1, Access::Write));

    // On B and C a live reader and the writer's key side by side: what no master may show.
    for server in [&nodes[B], &nodes[C]] {
        let readers: u64 = query(server, redis::cmd("ZCARD").arg(reader.readers_key()));
        let key: Option<String> = query(server, redis::cmd("GET").arg(writer.key()));
        assert_eq!(
            (readers, key.as_deref()),
            (1, Some(write.token())),
            "{}",
            nodes.logs()
        );
    }

    let report = history.check();
    println!("{report}");
    assert_eq!(report.violations.len(), 2, "{report}");
    let Some(Violation::ReadWriteOverlap {
        writer: writing,
        reader: reading,
        ..
    }) = report
        .violations
        .iter()
        .find(|v| matches!(v, Violation::ReadWriteOverlap { .. }))
    else {
        panic!("no read-write overlap: {report}");
    };
    assert_eq!((writing.client, reading.client), (1, 0));
    assert!(
        report.violations.iter().any(|v| matches!(
            v,
            Violation::ReadWriteOccupancy { intruder: (Access::Write, who), inside, .. }
                if who.client == 1 && inside.len() == 1
        )),
        "{report}"
    );

    writer.release(&write).await;
    reader.release(&read).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rw_lock_refuses_the_writer_under_the_same_reachability_while_readers_share_it() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    history.watch_rw_lock(LOCK);
    let witness = history.read_write_witness(LOCK);

    // The first reader reaches only {B, C}; the second reaches all three.
    let (_reader_proxies, reader_urls) = reaching(&nodes, &[B, C]);
    let mut reading = Vec::new();
    for (client, urls) in [reader_urls, nodes.urls()].into_iter().enumerate() {
        let rw = client_rw(&urls);
        let start = Instant::now();
        let lock = rw
            .try_read(TTL)
            .await
            .unwrap_or_else(|e| panic!("reader {client} refused: {e}\n{}", nodes.logs()));
        history.record(Op::read_acquired(client, start, Instant::now(), &lock));
        reading.push((witness.enter(client, Access::Read), lock));
    }

    let writer = client_rw(&nodes.urls());
    let start = Instant::now();
    let refused = writer.try_write(TTL).await.unwrap_err();
    history.record(Op::acquire_failed(2, LOCK, start, Instant::now(), &refused));
    assert!(refused.is_contention(), "{refused}");
    // Retrying until the acquire timeout does not get it either: the readers hold on.
    let start = Instant::now();
    let timed_out = writer.write(TTL).await.unwrap_err();
    history.record(Op::acquire_failed(
        2,
        LOCK,
        start,
        Instant::now(),
        &timed_out,
    ));
    assert!(timed_out.is_contention(), "{timed_out}");
    for server in nodes.iter() {
        let key: Option<String> = query(server, redis::cmd("GET").arg(lock_key(LOCK)));
        assert_eq!(key, None, "a refused writer left its key\n{}", nodes.logs());
    }

    let ops = history.ops();
    assert_eq!(peak_readers(LOCK, &ops), 2, "both readers held at once");
    assert_eq!(witness.peak_readers(), 2);
    for (client, (inside, lock)) in reading.into_iter().enumerate() {
        drop(inside);
        let releasing = Releasing::start_read(&lock);
        let result = lock.release().await;
        history.record(releasing.finished(client, &result));
        result.unwrap();
    }
    let report = history.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.acquires.ok, report.acquires.failed), (2, 2));
    assert_eq!(report.releases.ok, 2);
}

fn client_rw(urls: &[String]) -> quorumlock::RwLock {
    client(urls).rw_lock(LOCK).unwrap()
}

//! The read-write lock against five real masters: readers share, a writer is alone, and a
//! waiting writer holds new readers back.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisNodes, RedisServer};

const TTL: Duration = Duration::from_secs(10);

/// The live reader entries of `resource` on `server` (in `{<resource>}:readers`).
fn readers(server: &RedisServer, resource: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(quorumlock::companion_key(&lock_key(resource), ":readers"))
        .query(&mut direct(server))
        .unwrap()
}

fn readers_everywhere(nodes: &RedisNodes, resource: &str) -> usize {
    companion_sizes(nodes, resource, ":readers").iter().sum()
}

/// A client that retries often: holds of a read-write lock wait by retrying.
fn quick(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(5))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_share_the_resource_and_keep_a_writer_out_until_the_last_one_leaves() {
    let nodes = five();
    let clients = connected_clients(&nodes, 4).await;
    let mut reads = Vec::new();
    for rl in &clients[..3] {
        reads.push(rl.rw_lock("catalog").unwrap().try_read(TTL).await.unwrap());
    }
    assert!(reads.iter().all(|r| r.fencing_token().is_none()));
    assert!(
        eventually(Duration::from_secs(2), || readers_everywhere(
            &nodes, "catalog"
        ) == 15)
        .await
    );
    assert_eq!(
        present(&nodes, &lock_key("catalog")),
        0,
        "readers leave the key itself alone"
    );

    let writer = clients[3].rw_lock("catalog").unwrap();
    for reader in reads {
        let refused = writer.try_write(TTL).await.unwrap_err();
        assert!(refused.is_contention(), "{refused}");
        reader.release().await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(2), || readers_everywhere(
            &nodes, "catalog"
        ) == 0)
        .await
    );
    let writing = writer.try_write(TTL).await.unwrap();
    writing.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_is_alone_and_gets_a_fencing_token_that_grows() {
    let nodes = five();
    let (a, b) = (
        builder(&nodes).fencing(true).connected().await,
        builder(&nodes).fencing(true).connected().await,
    );
    let (rw_a, rw_b) = (a.rw_lock("doc").unwrap(), b.rw_lock("doc").unwrap());
    let first = rw_a.try_write(TTL).await.unwrap();
    let fence = first.fencing_token().unwrap();
    assert!(rw_b.try_write(TTL).await.unwrap_err().is_contention());
    assert!(rw_b.try_read(TTL).await.unwrap_err().is_contention());
    first.release().await.unwrap();
    let second = rw_b.try_write(TTL).await.unwrap();
    assert!(second.fencing_token().unwrap() > fence);
    second.release().await.unwrap();
    // (The note of b's refused attempt holds readers back until it lapses: read waits.)
    let read = rw_a.read(TTL).await.unwrap();
    assert_eq!(read.fencing_token(), None, "a reader gets no fence");
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_writer_holds_new_readers_back_and_goes_next() {
    let nodes = five();
    let first_reader = quick(&nodes);
    first_reader.connect().await.unwrap();
    let reading = first_reader
        .rw_lock("feed")
        .unwrap()
        .read(TTL)
        .await
        .unwrap();
    // The read returned at a quorum: a writer that reached one of the last masters before it
    // would be granted there (and roll back), not note itself, and the read then refused there.
    assert!(
        eventually(Duration::from_secs(2), || readers_everywhere(
            &nodes, "feed"
        ) == 5)
        .await
    );
    let writer = quick(&nodes);
    writer.connect().await.unwrap();
    let writing = tokio::spawn(async move {
        let lock = writer.rw_lock("feed").unwrap().write(TTL).await.unwrap();
        let fence_free = lock.fencing_token().is_none();
        (lock, fence_free)
    });
    let noted = eventually(Duration::from_secs(5), || {
        nodes.iter().all(|s| {
            let waiting: usize = redis::cmd("ZCARD")
                .arg(quorumlock::companion_key(&lock_key("feed"), ":writers"))
                .query(&mut direct(s))
                .unwrap();
            waiting == 1
        })
    })
    .await;
    assert!(noted, "the writer never noted itself as waiting");

    // Only a reader holds the resource, yet a new reader waits behind the writer.
    let late = quick(&nodes);
    late.connect().await.unwrap();
    let refused = late
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap_err();
    assert!(refused.is_contention(), "{refused}");

    reading.release().await.unwrap();
    let (lock, fence_free) = tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .unwrap()
        .unwrap();
    assert!(fence_free, "no fencing configured");
    let late_rw = late.rw_lock("feed").unwrap();
    let late_read = tokio::spawn(async move { late_rw.read(TTL).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !late_read.is_finished(),
        "a reader got in beside the writer"
    );
    lock.release().await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(10), late_read)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    read.release().await.unwrap();
}

/// A client that would retry only every 20 s: any quicker progress is a wake-up.
fn patient(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .retry_delay(Duration::from_secs(20))
        .retry_jitter(Duration::ZERO)
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Whether every master has a subscriber on the sharded channel `channel`.
fn subscribed_everywhere(nodes: &RedisNodes, channel: &str) -> bool {
    nodes.iter().all(|s| {
        let (_, count): (String, usize) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut direct(s))
            .unwrap();
        count > 0
    })
}

/// The waiting writers' notes of `resource` on `server` (in `{<resource>}:writers`).
fn writer_notes(server: &RedisServer, resource: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(quorumlock::companion_key(&lock_key(resource), ":writers"))
        .query(&mut direct(server))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn waiters_are_woken_by_the_release_they_wait_for_not_by_their_retry_delay() {
    let nodes = five();
    // Connected first: its one try must not spend the node timeout connecting (a loaded
    // machine took longer than 100 ms on three masters of five).
    let readers_client = patient(&nodes);
    readers_client.connect().await.unwrap();
    let reader = readers_client.rw_lock("feed").unwrap();
    let reading = reader.try_read(TTL).await.unwrap();

    // A writer waits for the last reader: woken by its release.
    let writers_client = patient(&nodes);
    writers_client.connect().await.unwrap();
    let writer = writers_client.rw_lock("feed").unwrap();
    let writing = tokio::spawn(async move { writer.write(TTL).await });
    // A majority is enough: a master whose first refusal came too late for the node timeout
    // notes the writer only at its next attempt, 20 s away.
    let noted = eventually(Duration::from_secs(5), || {
        nodes
            .iter()
            .filter(|s| writer_notes(s, "feed") == 1)
            .count()
            >= 3
    })
    .await;
    assert!(noted, "the writer never noted itself as waiting");
    let listening = || subscribed_everywhere(&nodes, "{feed}:rw:drained");
    assert!(eventually(Duration::from_secs(5), listening).await);
    reading.release().await.unwrap();
    let written = tokio::time::timeout(Duration::from_secs(5), writing)
        .await
        .expect("the waiting writer was not woken by the last reader's release")
        .unwrap()
        .unwrap();

    // A reader waits for the writer: woken by its release. (Another task of the writer's
    // client, whose subscription to the lock's channel is live: it just waited there.)
    drop(reader);
    let reader = writers_client.rw_lock("feed").unwrap();
    let reading = tokio::spawn(async move { reader.read(TTL).await });
    assert!(subscribed_everywhere(&nodes, "{feed}:rw"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reading.is_finished(), "a reader got in beside the writer");
    written.release().await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .expect("the waiting reader was not woken by the writer's release")
        .unwrap()
        .unwrap();
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_refused_by_one_master_takes_its_note_there_away_with_its_release() {
    let nodes = five();
    // A reader's live entry on master 0 only: the writer wins on the other four, and master 0
    // refuses it and notes it as waiting.
    redis::cmd("ZADD")
        .arg(quorumlock::companion_key(&lock_key("ledger"), ":readers"))
        .arg(i64::MAX / 2)
        .arg("ghost")
        .query::<()>(&mut direct(&nodes[0]))
        .unwrap();
    // Its note lasts three 20 s retry periods: only the release can take it away in time.
    let rl = patient(&nodes);
    // Connected first: an attempt whose connection to master 0 is not up within the node
    // timeout is never sent there, and the next one is 20 s away.
    rl.connect().await.unwrap();
    let lock = rl.rw_lock("ledger").unwrap().write(TTL).await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || writer_notes(&nodes[0], "ledger")
            == 1)
        .await
    );
    lock.release().await.unwrap();
    // Left there, the note would refuse every new reader on master 0 for its whole lease.
    // (The release returns once a quorum confirmed: master 0's may still be on its way.)
    assert!(
        eventually(Duration::from_secs(2), || writer_notes(&nodes[0], "ledger")
            == 0)
        .await
    );
    redis::cmd("ZREM")
        .arg(quorumlock::companion_key(&lock_key("ledger"), ":readers"))
        .arg("ghost")
        .query::<()>(&mut direct(&nodes[0]))
        .unwrap();
    let read = rl.rw_lock("ledger").unwrap().try_read(TTL).await.unwrap();
    // Master 0, where the note was, grants the read. (The read returns once a quorum granted
    // it, so master 0's grant may still be on its way; and another master may refuse it,
    // rightly, while the writer's release there, past the quorum it returned at, is.)
    assert!(
        eventually(Duration::from_secs(2), || readers(&nodes[0], "ledger") == 1).await,
        "master 0 refused the read: {} readers there, {} on all five",
        readers(&nodes[0], "ledger"),
        readers_everywhere(&nodes, "ledger")
    );
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_dies_or_a_writer_that_gives_up_blocks_nobody_for_long() {
    let nodes = five();
    let rl = quick(&nodes);
    rl.connect().await.unwrap();
    let rw = rl.rw_lock("cache").unwrap();
    // A reader that never releases: its entry expires with its TTL.
    let reader = rw.read(Duration::from_millis(300)).await.unwrap();
    std::mem::forget(reader);
    let other = quick(&nodes);
    other.connect().await.unwrap();
    let lock = other.rw_lock("cache").unwrap().write(TTL).await.unwrap();
    lock.release().await.unwrap();

    // A writer that gives up while waiting (its acquire dropped): its note lapses within a few
    // retry periods plus a node timeout (3 × 250 ms + 100 ms here), then readers get in again.
    // (One attempt that does not wait, `try_write`, leaves no note at all: `rwlock_try.rs`.)
    // The period is long enough that a loaded machine never delays a live writer's next
    // attempt past its note: with 15 ms periods, a note lapsed before the new reader's check.
    let held = rw.read(TTL).await.unwrap();
    let steady = builder(&nodes)
        .retry_delay(Duration::from_millis(250))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let writer = steady.rw_lock("cache").unwrap();
    let waiting = tokio::spawn(async move { writer.write(TTL).await });
    let majority_noted = || {
        nodes
            .iter()
            .filter(|s| writer_notes(s, "cache") == 1)
            .count()
            >= 3
    };
    assert!(eventually(Duration::from_secs(5), majority_noted).await);
    assert!(
        !waiting.is_finished(),
        "the writer waits while a reader holds the resource"
    );
    let third = quick(&nodes).rw_lock("cache").unwrap();
    assert!(
        third.try_read(TTL).await.unwrap_err().is_contention(),
        "a new reader got in beside a waiting writer"
    );
    waiting.abort();
    let reader = tokio::time::timeout(Duration::from_secs(5), third.read(TTL))
        .await
        .expect("the note of a writer that gave up kept a reader out")
        .unwrap();
    held.release().await.unwrap();
    reader.release().await.unwrap();

    // The same task reading again while a writer may wait would wait for itself: refused.
    let held = rw.read(TTL).await.unwrap();
    assert!(matches!(rw.read(TTL).await, Err(Error::AlreadyHeld { .. })));
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_extends_its_hold_and_keeps_a_writer_out_past_its_first_ttl() {
    let nodes = five();
    let rl = quick(&nodes);
    rl.connect().await.unwrap();
    let mut reading = rl
        .rw_lock("report")
        .unwrap()
        .read(Duration::from_millis(400))
        .await
        .unwrap();
    reading.extend(TTL).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = connected(&nodes).await;
    assert!(other
        .rw_lock("report")
        .unwrap()
        .try_write(TTL)
        .await
        .unwrap_err()
        .is_contention());
    reading.release().await.unwrap();
    // A released reader cannot be extended again.
    assert!(other
        .rw_lock("report")
        .unwrap()
        .try_write(TTL)
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn separate_clients_never_write_beside_anyone_and_read_together() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 30;
    let nodes = five();
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let violations = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let rl = builder(&nodes)
            .node_timeout(Duration::from_millis(500))
            .retry_delay(Duration::from_millis(5))
            .retry_jitter(Duration::from_millis(3))
            .build()
            .unwrap();
        let (r, w, most, bad) = (
            readers_in.clone(),
            writers_in.clone(),
            most_readers.clone(),
            violations.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let rw = rl.rw_lock("shared").unwrap();
            for round in 0..ROUNDS {
                // One write in ten.
                if (c + round) % 10 == 0 {
                    let lock = rw.write(TTL).await.unwrap();
                    let alone = w.fetch_add(1, Ordering::SeqCst) == 0;
                    if !alone || r.load(Ordering::SeqCst) != 0 {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    w.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                } else {
                    let lock = rw.read(TTL).await.unwrap();
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if w.load(Ordering::SeqCst) != 0 {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never shared"
    );
    assert!(
        eventually(Duration::from_secs(2), || readers_everywhere(
            &nodes, "shared"
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_write_lock_named_like_another_ones_readers_is_a_lock_of_its_own() {
    let nodes = five();
    let rl = connected(&nodes).await;
    // `x:readers` is a resource like any other (key layout 2): its keys are `{x:readers}` and
    // `{x:readers}:readers`, apart from x's readers, `{x}:readers`.
    let reading = rl.rw_lock("x").unwrap().try_read(TTL).await.unwrap();
    for name in ["x:readers", "x:writers"] {
        let written = rl.rw_lock(name).unwrap().try_write(TTL).await.unwrap();
        assert!(holders(&nodes, &lock_key(name), written.token().expose()) >= 3);
        written.release().await.unwrap();
        let gone = || present(&nodes, &lock_key(name)) == 0;
        assert!(eventually(Duration::from_secs(2), gone).await);
    }
    let untouched = || readers_everywhere(&nodes, "x") == 5;
    assert!(
        eventually(Duration::from_secs(2), untouched).await,
        "x's readers"
    );
    reading.release().await.unwrap();
    // A name that would leave the keys without a hash tag is refused before any node is
    // contacted.
    let offline = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    assert!(matches!(
        offline.rw_lock("}x"),
        Err(Error::InvalidResource { .. })
    ));
}

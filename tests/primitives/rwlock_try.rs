//! One attempt that does not wait leaves nothing behind that changes what others get.

use crate::common;

use std::time::Duration;

use common::*;
use quorumlock_testkit::RedisNodes;

const TTL: Duration = Duration::from_secs(10);

/// The waiting writers' notes of `resource` on every master (`{<resource>}:writers`).
fn notes(nodes: &RedisNodes, resource: &str) -> Vec<usize> {
    companion_sizes(nodes, resource, ":writers")
}

/// The live reader entries of `resource` on every master (`{<resource>}:readers`).
fn readers(nodes: &RedisNodes, resource: &str) -> Vec<usize> {
    companion_sizes(nodes, resource, ":readers")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_try_write_leaves_no_note_and_new_readers_get_in_at_once() {
    let nodes = five();
    let reading = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap();

    let refused = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_write(TTL)
        .await
        .unwrap_err();
    assert!(refused.is_contention(), "{refused}");
    assert_eq!(
        notes(&nodes, "feed"),
        vec![0; 5],
        "a writer that does not wait left a note\n{}",
        nodes.logs()
    );

    // Right after, a new reader is let in beside the first.
    let second = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap_or_else(|e| panic!("a reader was kept out by a writer gone: {e}"));
    second.release().await.unwrap();
    reading.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_with_an_acquire_timeout_of_zero_is_one_attempt_that_leaves_no_note() {
    let nodes = five();
    let reading = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap();
    // `exec --write -n`: one attempt, no wait.
    let once = builder(&nodes)
        .retry_count(0)
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let refused = once.rw_lock("feed").unwrap().write(TTL).await.unwrap_err();
    assert!(refused.is_contention(), "{refused}");
    assert_eq!(notes(&nodes, "feed"), vec![0; 5], "{}", nodes.logs());
    let second = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap_or_else(|e| panic!("a reader was kept out by a writer gone: {e}"));
    second.release().await.unwrap();
    reading.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_writer_still_notes_itself() {
    let nodes = five();
    let reading = connected(&nodes)
        .await
        .rw_lock("feed")
        .unwrap()
        .try_read(TTL)
        .await
        .unwrap();
    // The read returned at a quorum: a writer that reached one of the last masters before it
    // would be granted there (and roll back), not note itself, and the read then refused there.
    assert!(
        eventually(Duration::from_secs(2), || readers(&nodes, "feed")
            == vec![1; 5])
        .await,
        "{:?}",
        readers(&nodes, "feed")
    );
    let writer = connected(&nodes).await;
    let waiting = tokio::spawn(async move {
        writer
            .rw_lock("feed")
            .unwrap()
            .write(TTL)
            .await
            .map(|lock| lock.fencing_token())
    });
    let noted = eventually(Duration::from_secs(5), || {
        notes(&nodes, "feed").iter().all(|n| *n == 1)
    })
    .await;
    assert!(noted, "{:?}\n{}", notes(&nodes, "feed"), nodes.logs());
    reading.release().await.unwrap();
    waiting.await.unwrap().unwrap();
}

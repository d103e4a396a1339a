//! Leader election against five real masters: one leader at a time, terms that only grow, a
//! quorum read of who leads, and failover when a leader is cut off.

use crate::common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use quorumlock::{Error, Redlock, MAX_LEADER_VALUE};
use quorumlock_testkit::FaultProxy;

const TTL: Duration = Duration::from_secs(3);

/// A leader's key as a campaign stores it: a token, `:`, the value announced.
const GHOST: &str = "0123456789abcdef0123456789abcdef:ghost";

/// Each leadership as `(candidate, term, elected at, stepped down at)`.
type Terms = Arc<Mutex<Vec<(usize, u64, Instant, Instant)>>>;

#[tokio::test(flavor = "multi_thread")]
async fn candidates_lead_one_at_a_time_with_terms_that_only_grow() {
    const CANDIDATES: usize = 4;
    let nodes = five();
    let terms: Terms = Arc::default();
    let mut tasks = Vec::new();
    for c in 0..CANDIDATES {
        let rl = connected(&nodes).await;
        let terms = terms.clone();
        tasks.push(tokio::spawn(async move {
            rl.campaign(
                "scheduler",
                TTL,
                &format!("candidate-{c}"),
                |held| async move {
                    let elected = Instant::now();
                    let term = held.fencing_token().expect("a leader always has a term");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    terms
                        .lock()
                        .unwrap()
                        .push((c, term, elected, Instant::now()));
                },
            )
            .await
            .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut terms = terms.lock().unwrap().clone();
    assert_eq!(
        terms.len(),
        CANDIDATES,
        "every candidate led once: {terms:?}"
    );
    terms.sort_by_key(|t| t.2);
    for pair in terms.windows(2) {
        assert!(pair[0].1 < pair[1].1, "terms went backwards: {terms:?}");
        assert!(pair[0].3 <= pair[1].2, "two leaders at once: {terms:?}");
    }
    assert!(
        eventually(Duration::from_secs(2), || present(
            &nodes,
            &lock_key("scheduler")
        ) == 0)
        .await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_elected_marks_its_key_and_still_renews_fences_and_releases_it() {
    let nodes = five();
    // Every master is checked: connected first, and patient enough that a loaded machine's
    // slow answer is not taken for a missing mark or renewal.
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    rl.connect().await.unwrap();
    let mut lock = rl.elect("db", TTL, "host-a").await.unwrap();
    let token = lock.token().expose().to_owned();
    let marked = format!("~elected:{token}");
    assert!(
        eventually(Duration::from_secs(2), || holders(
            &nodes,
            &lock_key("db"),
            &marked
        ) == 5)
        .await,
        "every master marked the key as the elected leader's"
    );
    let leader = rl.leader("db").await.unwrap().expect("a leader");
    assert_eq!(leader.value, "host-a");
    assert_eq!(leader.fingerprint, lock.token().fingerprint());
    // Renewal, the inspection and the release know the key as the holder's in either form.
    set(
        &nodes[0],
        &lock_key("db"),
        &token,
        Duration::from_millis(500),
    ); // one master not marked
    lock.extend(TTL * 2).await.unwrap();
    // (The extend returns once a quorum renewed: the last master's answer may be on its way.)
    let renewed = || {
        nodes
            .iter()
            .all(|s| pttl(s, &lock_key("db")) > TTL.as_millis() as i64)
    };
    assert!(
        eventually(Duration::from_secs(2), renewed).await,
        "renewed everywhere"
    );
    let status = rl.inspect("db").await.unwrap();
    assert!(
        matches!(&status.verdict, quorumlock::Verdict::Held { fingerprint, .. } if *fingerprint == leader.fingerprint),
        "{status:?}"
    );
    lock.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, &lock_key("db"))
            == 0)
        .await
    );
    assert_eq!(rl.leader("db").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_reads_a_quorum_and_never_reports_a_minority_holder() {
    let nodes = five();
    let rl = connected(&nodes).await;
    let reader = connected(&nodes).await;
    assert_eq!(reader.leader("db").await.unwrap(), None);

    // An elected leader's key on two masters only (a stale or partial write) is no leader.
    for server in nodes.iter().take(2) {
        set(server, &lock_key("db"), &format!("~elected:{GHOST}"), TTL);
    }
    assert_eq!(reader.leader("db").await.unwrap(), None);
    // Nor is a campaign's attempt on three, not marked as won: it may still lose (its replies
    // lost, its validity used up) and be rolled back.
    for server in nodes.iter().take(3) {
        set(server, &lock_key("db"), GHOST, TTL);
    }
    assert_eq!(reader.leader("db").await.unwrap(), None);
    // Marked on three, it leads.
    for server in nodes.iter().take(3) {
        set(server, &lock_key("db"), &format!("~elected:{GHOST}"), TTL);
    }
    let ghost = reader.leader("db").await.unwrap().expect("a leader");
    assert_eq!(ghost.value, "ghost");
    for server in nodes.iter().take(3) {
        del(server, &lock_key("db"));
    }

    let (elected, told) = tokio::sync::oneshot::channel();
    let (resign, resigned) = tokio::sync::oneshot::channel::<()>();
    let leading = tokio::spawn(async move {
        rl.campaign("db", TTL, "10.0.0.7:5432", |_held| async move {
            let _ = elected.send(());
            let _ = resigned.await;
        })
        .await
        .unwrap();
    });
    told.await.unwrap();
    let leader = reader.leader("db").await.unwrap().expect("a leader");
    assert_eq!(leader.value, "10.0.0.7:5432");
    assert!(leader.ttl.is_some_and(|t| t <= TTL), "{leader:?}");
    resign.send(()).unwrap();
    leading.await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || present(&nodes, &lock_key("db"))
            == 0)
        .await
    );
    assert_eq!(reader.leader("db").await.unwrap(), None);

    // With fewer than a quorum answering, no answer is given.
    let mut nodes = nodes;
    for i in 0..3 {
        nodes[i].kill().unwrap();
    }
    let e = reader.leader("db").await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}

/// The next change an observer reports, within 5 s.
async fn next<S: futures::Stream<Item = Option<quorumlock::Leader>> + Unpin>(
    changes: &mut S,
) -> Option<quorumlock::Leader> {
    tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("no change reported")
        .expect("the stream never ends")
}

#[tokio::test(flavor = "multi_thread")]
async fn observe_reports_each_change_of_leader() {
    let nodes = five();
    let watcher = connected(&nodes).await;
    let mut changes = Box::pin(watcher.observe("cron", Duration::from_millis(20)));
    assert_eq!(next(&mut changes).await, None, "no leader at first");

    let mut leaders = Vec::new();
    for value in ["a", "b"] {
        let rl = connected(&nodes).await;
        let (resign, resigned) = tokio::sync::oneshot::channel::<()>();
        leaders.push(resign);
        tokio::spawn(async move {
            rl.campaign("cron", TTL, value, |_| async move {
                let _ = resigned.await;
            })
            .await
            .unwrap();
        });
        let seen = next(&mut changes).await;
        assert_eq!(seen.map(|l| l.value).as_deref(), Some(value));
        // Resign "a" only once "b" is campaigning: "b" takes over without a gap.
        if value == "b" {
            break;
        }
        let _ = leaders.remove(0).send(());
        if next(&mut changes).await.is_some() {
            panic!("a leader appeared before the next candidate campaigned");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn observe_hears_an_election_and_a_resignation_long_before_its_next_read() {
    let nodes = five();
    let watcher = connected(&nodes).await;
    // A read every minute: only the masters' announcements can bring a change within 5 s.
    let mut changes = Box::pin(watcher.observe("cron", Duration::from_secs(60)));
    assert_eq!(next(&mut changes).await, None, "no leader at first");

    let rl = connected(&nodes).await;
    let (resign, resigned) = tokio::sync::oneshot::channel::<()>();
    let leading = tokio::spawn(async move {
        rl.campaign("cron", TTL, "a", |_| async move {
            let _ = resigned.await;
        })
        .await
        .unwrap();
    });
    let seen = next(&mut changes).await.expect("the election announced");
    assert_eq!(seen.value, "a");
    resign.send(()).unwrap();
    assert_eq!(next(&mut changes).await, None, "the resignation announced");
    leading.await.unwrap();

    // A master restarted: its subscription is made again, and the next election still heard
    // (from it or the others) long before the next read.
    let mut nodes = nodes;
    nodes[0].restart().unwrap();
    let rl = connected(&nodes).await;
    let lock = rl.elect("cron", TTL, "b").await.unwrap();
    let seen = next(&mut changes).await.expect("the election announced");
    assert_eq!(seen.value, "b");
    lock.release().await.unwrap();
    assert_eq!(next(&mut changes).await, None, "the release announced");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_from_every_master_steps_down_before_the_next_is_elected() {
    let nodes = five();
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|s| FaultProxy::start(s.addr()).unwrap())
        .collect();
    let cut_off = Redlock::builder(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(1);
    // The first leader steps down when its body is dropped: the guard notes when. (When its
    // campaign returns is later: the release to masters it cannot reach times out first.)
    struct SteppedDown(Arc<OnceLock<Instant>>);
    impl Drop for SteppedDown {
        fn drop(&mut self) {
            let _ = self.0.set(Instant::now());
        }
    }
    let stepped_down = Arc::new(OnceLock::new());
    let (elected, told) = tokio::sync::oneshot::channel();
    let first = {
        let guard = SteppedDown(stepped_down.clone());
        tokio::spawn(async move {
            cut_off
                .campaign("leader", ttl, "first", |held| async move {
                    let _guard = guard;
                    let _ = elected.send(held.fencing_token());
                    held.lost().await;
                })
                .await
        })
    };
    let first_term = told.await.unwrap().unwrap();

    let second = client(&nodes);
    let next = {
        let stepped_down = stepped_down.clone();
        tokio::spawn(async move {
            second
                .campaign("leader", ttl, "second", |held| async move {
                    // Read as the next leader's body starts: the first must be gone by then.
                    let first_gone = stepped_down.get().is_some();
                    (Instant::now(), held.fencing_token(), first_gone)
                })
                .await
                .unwrap()
        })
    };
    let cut = Instant::now();
    for p in &proxies {
        p.blackhole();
    }
    let lost = first.await.unwrap();
    // The body was dropped at the loss: the campaign returns Lost.
    assert!(matches!(lost, Err(Error::Lost { .. })), "{lost:?}");
    let (elected_at, term, first_gone) = next.await.unwrap();
    assert!(term.unwrap() > first_term, "{term:?} after {first_term}");
    assert!(
        first_gone,
        "the next leader's body started while the first's still ran (stepped down at {:?})",
        stepped_down
            .get()
            .map(|at| at.saturating_duration_since(cut))
    );
    let failover = elected_at - cut;
    assert!(failover < Duration::from_secs(5), "{failover:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_too_long_is_refused_before_any_master_is_contacted() {
    let rl = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    let long = "v".repeat(MAX_LEADER_VALUE + 1);
    let e = rl
        .campaign("x", TTL, &long, |_| async {})
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidLeaderValue { .. }), "{e:?}");
}

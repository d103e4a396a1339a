//! The election's negative control, and a counterexample scenario 20 found, against real
//! masters.
//!
//! * The naive design (`SET NX` on one master, the term an `INCR` beside it, the leader read from
//!   that master: `quorumlock_verify::naive_election`) loses its leader and its term counter when
//!   that master restarts empty: a second candidate is elected while the first still holds its
//!   term, with the same term number. `check_overlaps` reports the two leaderships at once,
//!   `check_fence_order` and `check_term_order` the repeated term, and the leaders' witness both
//!   inside.
//! * The library's election, over three independent masters, keeps its leader and its terms
//!   through the same restart, and the checkers find nothing.
//! * A quorum read of the leader while the key is reserved for the next candidate in line (the
//!   hand-off of a resigning leader) must name no leader: nobody leads until that candidate has
//!   taken the key.
//!
//! Each is driven step by step, not left to chance. The chaos version, under faults, is
//! scenario 20 of `tests/chaos/scenarios.rs`.

use crate::common;

use std::time::{Duration, Instant};

use quorumlock::{Lock, Redlock};
use quorumlock_testkit::history::{check_leader_reads, LeaderRead};
use quorumlock_testkit::{History, Op, OpKind, Outcome, RedisNodes, Releasing, Violation};
use quorumlock_verify::naive_election::{NaiveElection, NaiveTerm};

const ELECTION: &str = "scheduler";

/// Long enough for the first leader to still lead when the second is elected.
const TTL: Duration = Duration::from_secs(10);

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// Records a naive term as a leadership: elected at `end`, valid until its deadline.
fn record_naive(history: &History, client: usize, start: Instant, term: &NaiveTerm) {
    history.record(Op {
        client,
        resource: ELECTION.to_owned(),
        token: term.stored().to_owned(),
        kind: OpKind::Acquire,
        start,
        end: Instant::now(),
        outcome: Outcome::Ok {
            valid_until: Some(term.deadline()),
        },
        fence: Some(term.term()),
    });
}

/// Reads who leads from the one master the naive election trusts, and records the read.
async fn read_naive(history: &History, election: &NaiveElection) -> Option<String> {
    let start = Instant::now();
    let named = election.leader().await.unwrap();
    history.record_leader_read(LeaderRead::naming(
        9,
        ELECTION,
        start,
        Instant::now(),
        named.as_ref().map(|(v, f)| (v.as_str(), f.as_str())),
    ));
    named.map(|(value, _)| value)
}

fn client(nodes: &RedisNodes) -> Redlock {
    Redlock::builder(nodes.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .build()
        .unwrap()
}

/// Reads who leads from a quorum, and records the read.
async fn read(history: &History, rl: &Redlock) -> Option<String> {
    let start = Instant::now();
    let leader = rl.leader(ELECTION).await.unwrap();
    history.record_leader_read(LeaderRead::new(
        9,
        ELECTION,
        start,
        Instant::now(),
        leader.as_ref(),
    ));
    leader.map(|l| l.value)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_on_one_master_restarted_empty_is_joined_by_a_second_in_the_same_term_and_the_checker_reports_it(
) {
    let _turn = crate::turns::both_cores().await;
    let mut nodes = RedisNodes::spawn(1).unwrap();
    let history = History::new();
    history.watch_election(ELECTION);
    let leading = history.occupancy_witness(ELECTION);

    let a = NaiveElection::connect(&nodes[0].url(), ELECTION, NODE_TIMEOUT)
        .await
        .unwrap();
    let start = Instant::now();
    let first = a.campaign("host-a", TTL).await.unwrap();
    record_naive(&history, 0, start, &first);
    let _a_leads = leading.enter(0);
    assert_eq!(read_naive(&history, &a).await.as_deref(), Some("host-a"));

    let restart = history.fault("the election's master restarted empty at once");
    nodes[0].restart().unwrap();
    history.heal(restart);

    let b = NaiveElection::connect(&nodes[0].url(), ELECTION, NODE_TIMEOUT)
        .await
        .unwrap();
    let start = Instant::now();
    let second = b.campaign("host-b", TTL).await.unwrap();
    record_naive(&history, 1, start, &second);
    drop(leading.enter(1));
    assert_eq!(read_naive(&history, &b).await.as_deref(), Some("host-b"));
    assert!(
        Instant::now() < first.deadline(),
        "host-a still leads by its own reckoning"
    );
    assert_eq!(
        (first.term(), second.term()),
        (1, 1),
        "the counter started again"
    );

    let report = history.check();
    println!("{report}");
    let kinds: Vec<&str> = report
        .violations
        .iter()
        .map(|v| match v {
            Violation::Overlap { .. } => "overlap",
            Violation::FenceOrder { .. } => "fence order",
            Violation::TermOrder { .. } => "term order",
            Violation::DoubleOccupancy { .. } => "double occupancy",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["overlap", "fence order", "term order", "double occupancy"],
        "{report}"
    );
    assert!(report.to_string().contains("term repeated"), "{report}");
    assert!(report
        .to_string()
        .contains("the election's master restarted empty at once"));
}

/// Campaigns for `value` as client `client`; records the leadership as it is elected.
async fn elect(history: &History, rl: &Redlock, client: usize, value: &str) -> Lock {
    let start = Instant::now();
    let lock = rl.elect(ELECTION, TTL, value).await.unwrap();
    history.record(Op::acquired(client, start, Instant::now(), &lock));
    lock
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quorum_election_keeps_its_leader_and_its_terms_through_the_same_restart() {
    let _turn = crate::turns::both_cores().await;
    let mut nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    history.watch_election(ELECTION);
    let leading = history.occupancy_witness(ELECTION);
    let observer = client(&nodes);

    let a = client(&nodes);
    let first = elect(&history, &a, 0, "host-a").await;
    let a_leads = leading.enter(0);
    assert_eq!(read(&history, &observer).await.as_deref(), Some("host-a"));

    // `elect` returns once a quorum marked the key elected; a master whose grant landed after
    // its mark (the grant sent again once the master had loaded the script) is marked again in
    // the background moments later. The restart must leave a marked quorum: wait for every mark
    // (it failed a clean run of make test when the late master stayed unmarked for good).
    let marked = |s: &quorumlock_testkit::RedisServer| {
        common::get(s, ELECTION).is_some_and(|v| v.starts_with("~elected:"))
    };
    let everywhere = common::eventually(TTL / 2, || nodes.iter().all(marked)).await;
    assert!(
        everywhere,
        "the leader's key was not marked on every master"
    );
    let restart = history.fault("master 0 restarted empty at once");
    nodes[0].restart().unwrap();
    history.heal(restart);

    // The other two masters still hold host-a's key: no quorum for host-b.
    let b = client(&nodes);
    let start = Instant::now();
    let campaign = tokio::time::timeout(Duration::from_secs(1), b.elect(ELECTION, TTL, "host-b"));
    assert!(campaign.await.is_err(), "host-b elected beside host-a");
    history.record(Op::acquire_failed(
        1,
        ELECTION,
        start,
        Instant::now(),
        "still campaigning after 1 s",
    ));
    assert_eq!(read(&history, &observer).await.as_deref(), Some("host-a"));

    drop(a_leads);
    let releasing = Releasing::start(&first);
    let resigned = first.release().await;
    history.record(releasing.finished(0, &resigned));
    resigned.unwrap();

    let second = elect(&history, &b, 1, "host-b").await;
    drop(leading.enter(1));
    assert_eq!(read(&history, &observer).await.as_deref(), Some("host-b"));
    let terms = history
        .ops()
        .iter()
        .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
        .map(|op| op.fence)
        .collect::<Vec<_>>();
    assert!(
        terms.len() == 2 && terms[0] < terms[1],
        "terms {terms:?}: the restarted master's counter started again, the others kept theirs"
    );

    let report = history.check();
    println!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.acquires.ok, report.acquires.failed), (2, 1));
    assert_eq!(history.leader_reads().len(), 3);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quorum_read_names_no_leader_while_the_key_is_reserved_for_the_next_candidate() {
    let _turn = crate::turns::both_cores().await;
    let nodes = RedisNodes::spawn(3).unwrap();
    let history = History::new();
    let observer = client(&nodes);

    // What a resigning leader's release leaves on each master when a candidate waits in line:
    // the key reserved for that candidate's waiter, until it takes the key.
    let waiter = "0123456789abcdef0123456789abcdef";
    for server in nodes.iter() {
        let mut connection = redis::Client::open(server.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(quorumlock::resource_key("", ELECTION))
            .arg(format!("~queued:{waiter}"))
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query(&mut connection)
            .unwrap();
    }
    let named = read(&history, &observer).await;
    let violations = check_leader_reads(ELECTION, &history.ops(), &history.leader_reads());
    for v in &violations {
        println!("{}", v.display_from(history.origin()));
    }
    assert_eq!(
        named, None,
        "a key reserved for a waiter was read as a leader announcing the waiter's id"
    );
    assert_eq!(violations, vec![]);
}

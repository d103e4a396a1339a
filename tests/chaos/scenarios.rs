//! The short chaos suite: every scenario over five real masters and contending clients, each
//! ending with the history checker's verdict (0 violations) and the scenario's own checks.
//!
//! Each test prints its seed first; re-run one with the same schedule by setting
//! `QUORUMLOCK_CHAOS_SEED` to it, e.g. `QUORUMLOCK_CHAOS_SEED=0x5eed0004 cargo test --test chaos
//! a_paused_minority`. The long version is `cargo run --release --example chaos`.

use crate::common;

use std::time::{Duration, Instant};

use common::{del, eventually, holders, lock_key, record, script_calls, set};
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{History, Op, RedisNodes, RedisServerBuilder, Report, Violation};
use quorumlock_verify::chaos::{self, ChaosRun, Length, Scenario, CHAOS_SEED_ENV};

/// The turns `scenario` takes (see [`turns`](crate::turns)): two, but one for the election
/// and the topology scenarios, which mostly wait.
fn turns(scenario: Scenario) -> u32 {
    match scenario.number() {
        20 | 22..=29 => 1,
        _ => 2,
    }
}

/// Runs the short version of `scenario` (with the turns it takes), printing
/// its seed first and its row and checks after.
async fn run_short(scenario: Scenario) -> ChaosRun {
    let _turn = crate::turns::take(turns(scenario)).await;
    let seed = chaos::seed(scenario);
    println!("chaos scenario {scenario}: seed {seed:#x} (re-run with {CHAOS_SEED_ENV}={seed:#x})");
    let run = chaos::run(scenario, Length::Short, seed).await.unwrap();
    println!("{}\n{}", ChaosRun::header(), run.row());
    for check in &run.checks {
        println!("  {}: {}", check.what, check.detail);
    }
    run
}

async fn survives(scenario: Scenario) {
    let run = run_short(scenario).await;
    assert_eq!(run.violations, 0, "the checker found violations:\n{run}");
    assert!(run.passed(), "a scenario check failed:\n{run}");
    if scenario.expects_success() {
        assert!(run.acquisitions >= scenario.target(Length::Short), "{run}");
    } else {
        assert_eq!(run.acquisitions, 0, "{run}");
    }
}

/// A negative control: where its fault breaks a documented assumption, the checker must find a
/// second holder, and the scenario's own checks hold.
async fn lets_a_second_holder_in(scenario: Scenario) {
    let run = run_short(scenario).await;
    let overlaps = run
        .report
        .violations
        .iter()
        .filter(|v| matches!(v, Violation::Overlap { .. }))
        .count();
    assert!(overlaps > 0, "the checker found no second holder:\n{run}");
    assert!(run.passed(), "{run}");
}

#[tokio::test(flavor = "multi_thread")]
async fn s01_no_faults_baseline() {
    survives(Scenario::Baseline).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s02_a_minority_killed_and_left_down() {
    survives(Scenario::MinorityKilled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s03_a_majority_killed_reports_no_success_and_leaves_no_key() {
    survives(Scenario::MajorityKilled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s04_a_paused_minority_then_resumed_leaves_no_stray_key_past_a_ttl() {
    survives(Scenario::MinorityPaused).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s05_a_minority_restarted_empty_after_a_ttl() {
    survives(Scenario::MinorityRestartedAfterTtl).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s06_latency_below_the_node_timeout_shrinks_the_reported_validity() {
    survives(Scenario::LatencyBelowTimeout).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s07_latency_beyond_the_ttl_on_a_majority_reports_no_success() {
    survives(Scenario::LatencyBeyondTtl).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s08_replies_held_past_the_ttl_never_count_as_acquired() {
    survives(Scenario::HeldReplies).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s09_connections_reset_mid_request() {
    survives(Scenario::ConnectionResets).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s10_minority_and_majority_partitions_then_heal() {
    survives(Scenario::Partitions).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s11_simultaneous_starts_resolve_split_votes_within_a_few_attempts() {
    survives(Scenario::SimultaneousStarts).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s12_a_stale_holder_neither_extends_nor_releases_the_next_holders_lock() {
    survives(Scenario::StaleHolders).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s13_a_killed_holders_lock_comes_back_within_ttl_and_retry_delay() {
    survives(Scenario::HolderKilled).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s14_fences_never_go_backwards_across_aof_restarts() {
    survives(Scenario::FencedAofRestarts).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s15_a_waiter_killed_at_the_head_of_the_line_blocks_it_for_at_most_an_entry_lease() {
    survives(Scenario::WaiterKilledAtHead).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s16_a_master_holding_lines_restarted_empty_after_a_ttl() {
    survives(Scenario::LineMasterRestarted).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s17_a_minority_paused_while_waiters_are_queued_then_resumed() {
    survives(Scenario::LineMinorityPaused).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s18_separate_clients_share_a_semaphore_never_more_than_its_permits_at_once() {
    survives(Scenario::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s19_separate_clients_share_a_rw_lock_never_a_writer_beside_another_holder() {
    survives(Scenario::RwLock).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s20_candidates_campaign_never_two_leaders_terms_only_grow_reads_name_a_leader_in_time() {
    survives(Scenario::Election).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s21_nested_holds_ended_from_many_tasks_release_once_and_leave_no_key() {
    survives(Scenario::Reentrant).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s23_durable_votes_survive_two_voters_failing_over_in_one_window() {
    survives(Scenario::FailoverDurable).await;
}

/// Scenario 22, the negative control of 23: the same double failovers with votes counted once
/// answered. The rule `f >= q - N + k` is broken, and the checker must find second holders.
#[tokio::test(flavor = "multi_thread")]
async fn s22_votes_counted_once_answered_lose_locks_to_two_failovers_in_one_window() {
    lets_a_second_holder_in(Scenario::FailoverNotDurable).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s24_cluster_voters_whose_shards_fail_over_losing_writes_one_voter_at_a_time() {
    survives(Scenario::ClusterVoters).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s25_sentinel_voters_whose_masters_fail_over_losing_writes_one_voter_at_a_time() {
    survives(Scenario::SentinelVoters).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s26_a_cluster_a_sentinel_group_and_a_master_as_voters_under_their_faults() {
    survives(Scenario::MixedVoters).await;
}

/// Scenario 27, the negative control of 24: two cluster voters lose the same held resource's
/// key in one window, which breaks the rule per voter; the checker must find second holders.
#[tokio::test(flavor = "multi_thread")]
async fn s27_two_cluster_voters_losing_a_held_key_in_one_window_let_a_second_holder_in() {
    lets_a_second_holder_in(Scenario::ClusterVotersOneWindow).await;
}

/// Scenario 28, the negative control of 29: scenario 22's double failovers on Cluster voters
/// (the shards of one slot on two voters, their replication cut first), votes counted once
/// answered. The rule `f >= q - N + k` is broken, and the checker must find second holders.
#[tokio::test(flavor = "multi_thread")]
async fn s28_cluster_votes_counted_once_answered_lose_locks_to_two_shard_failovers_in_one_window() {
    lets_a_second_holder_in(Scenario::ClusterFailoverNotDurable).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn s29_durable_votes_on_cluster_voters_survive_two_shards_failing_over_in_one_window() {
    survives(Scenario::ClusterFailoverDurable).await;
}

// ---------------------------------------------------------------------------------------------
// Negative controls: the checker must see a violation where the documented assumptions are broken,
// and none where they hold. The interleaving is driven step by step, not left to chance.

fn redlock(nodes: &RedisNodes) -> Redlock {
    Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_millis(100))
        .retry_count(3)
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// Holder A takes "report" on exactly masters 0, 1 and 2 (3 and 4 are held by another token for
/// the moment), and stays inside its critical section.
async fn holder_on_exactly_a_quorum(nodes: &RedisNodes, history: &History, ttl: Duration) -> Lock {
    for i in [3, 4] {
        set(&nodes[i], &lock_key("report"), "someone-else", ttl);
    }
    // Connected first: A's one attempt must not spend its node timeout on connecting.
    let rl = redlock(nodes);
    rl.connect().await.unwrap();
    let start = Instant::now();
    let a = rl.try_acquire("report", ttl).await.unwrap();
    record(history, 0, start, &a);
    // A returned at a quorum: its requests to 3 and 4 may not have run yet, and one that ran
    // after the key there is deleted would take it for A.
    for i in [3, 4] {
        let ran = eventually(Duration::from_secs(2), || script_calls(&nodes[i]) >= 1).await;
        assert!(ran, "A's attempt never ran on master {i}");
        del(&nodes[i], &lock_key("report"));
    }
    assert_eq!(holders(nodes, &lock_key("report"), a.token().expose()), 3);
    a
}

/// Holder B (client 1) takes "report", retrying by the policy.
async fn second_holder(nodes: &RedisNodes, history: &History, ttl: Duration) -> Lock {
    let start = Instant::now();
    let b = redlock(nodes).acquire("report", ttl).await.unwrap();
    record(history, 1, start, &b);
    b
}

fn overlaps(report: &Report) -> usize {
    report
        .violations
        .iter()
        .filter(|v| matches!(v, Violation::Overlap { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn negative_control_a_master_restarted_at_once_without_aof_lets_a_second_holder_in() {
    let mut nodes = RedisNodes::spawn(5).unwrap();
    let history = History::new();
    let witness = history.occupancy_witness("report");
    let ttl = Duration::from_secs(10);
    let a = holder_on_exactly_a_quorum(&nodes, &history, ttl).await;
    let _a_inside = witness.enter(0);

    let restart = history.fault("master 0 restarted empty at once");
    nodes[0].restart().unwrap();
    let b = second_holder(&nodes, &history, ttl).await;
    drop(witness.enter(1));
    history.heal(restart);

    let report = history.check();
    println!("{report}");
    assert!(a.is_valid(), "A's lease is still open");
    assert_eq!(overlaps(&report), 1, "{report}");
    assert_eq!(
        report.violations.len(),
        2,
        "the overlap and the double occupancy: {report}"
    );
    assert!(report
        .to_string()
        .contains("master 0 restarted empty at once"));
    std::mem::forget(b);
}

#[tokio::test(flavor = "multi_thread")]
async fn negative_control_the_same_restart_after_waiting_a_ttl_leaves_no_overlap() {
    let mut nodes = RedisNodes::spawn(5).unwrap();
    let history = History::new();
    let witness = history.occupancy_witness("report");
    let ttl = Duration::from_millis(300);
    let a = holder_on_exactly_a_quorum(&nodes, &history, ttl).await;
    let a_inside = witness.enter(0);

    let down = history.fault("master 0 killed, restarted empty a TTL later");
    nodes[0].kill().unwrap();
    // A finishes within its validity, as the algorithm requires.
    tokio::time::sleep_until(a.deadline().into()).await;
    drop(a_inside);
    tokio::time::sleep(ttl).await;
    nodes[0].restart().unwrap();
    history.heal(down);
    let _b = second_holder(&nodes, &history, ttl).await;
    drop(witness.enter(1));

    let report = history.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.acquires.ok, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn negative_control_the_same_restart_with_aof_leaves_no_overlap() {
    let mut nodes = RedisNodes::spawn_with(5, &RedisServerBuilder::new().aof(true)).unwrap();
    let history = History::new();
    let witness = history.occupancy_witness("report");
    let ttl = Duration::from_secs(10);
    let a = holder_on_exactly_a_quorum(&nodes, &history, ttl).await;
    let _a_inside = witness.enter(0);

    let restart = history.fault("master 0 restarted at once from its AOF");
    nodes[0].restart().unwrap();
    history.heal(restart);
    assert_eq!(
        holders(&nodes, &lock_key("report"), a.token().expose()),
        3,
        "the key survived"
    );
    let start = Instant::now();
    let refused = redlock(&nodes)
        .try_acquire("report", ttl)
        .await
        .unwrap_err();
    assert!(refused.is_contention(), "{refused}");
    history.record(Op::acquire_failed(
        1,
        "report",
        start,
        Instant::now(),
        &refused,
    ));

    let report = history.check();
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.acquires.ok, report.acquires.failed), (1, 1));
}

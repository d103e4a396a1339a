//! The short chaos suite: every scenario over five real masters and contending clients, each
//! ending with the history checker's verdict (0 violations) and the scenario's own checks.
//!
//! Each test prints its seed first; re-run one with the same schedule by setting
//! `QUORUMLOCK_CHAOS_SEED` to it, e.g. `QUORUMLOCK_CHAOS_SEED=0x5eed0004 cargo test --test chaos
//! a_paused_minority`. The long version is `cargo run --release --example chaos`.

use quorumlock_testkit::chaos::{self, ChaosRun, Length, Scenario, CHAOS_SEED_ENV};
use tokio::sync::Mutex;

/// One scenario at a time: each already loads both cores, and two at once would measure the
/// machine rather than the library.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn survives(scenario: Scenario) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let seed = chaos::seed(scenario);
    println!(
        "chaos scenario {scenario}: seed {seed:#x} (re-run with {CHAOS_SEED_ENV}={seed:#x})"
    );
    let run = chaos::run(scenario, Length::Short, seed).await.unwrap();
    println!("{}\n{}", ChaosRun::header(), run.row());
    for check in &run.checks {
        println!("  {}: {}", check.what, check.detail);
    }
    assert_eq!(run.violations, 0, "the checker found violations:\n{run}");
    assert!(run.passed(), "a scenario check failed:\n{run}");
    if scenario.expects_success() {
        assert!(run.acquisitions >= Length::Short.target(), "{run}");
    } else {
        assert_eq!(run.acquisitions, 0, "{run}");
    }
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

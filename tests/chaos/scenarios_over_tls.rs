//! Chaos scenario 26 over TLS: a Redis Cluster, a Sentinel group and a standalone master as
//! voters under their faults (lossy failovers of a shard and of the Sentinels' master, slot
//! moves while locks are held, the master restarted empty after a TTL), every server on TLS only
//! with a private CA and mutual TLS: the cluster bus, replication and the Sentinels' links run
//! over TLS too, and the clients reach the voters through `rediss+cluster://`,
//! `rediss+sentinel://` and `rediss://`.
//!
//! The test prints its seed first; re-run it with the same schedule by setting
//! `QUORUMLOCK_CHAOS_SEED` to it, e.g. `QUORUMLOCK_CHAOS_SEED=0x5eed001a cargo test
//! --all-features --test chaos scenarios_over_tls`. The plain version is `s26_…` in `tests/chaos/scenarios.rs`.
//!
//! Needs the `tls` feature.

#![cfg(feature = "tls")]

use std::time::Duration;

use quorumlock::RedlockBuilder;
use quorumlock_testkit::tls::{TestCa, CA_CERT, CLIENT_CERT, CLIENT_KEY};
use quorumlock_verify::chaos::{self, ChaosRun, Length, Scenario, CHAOS_SEED_ENV};

#[tokio::test(flavor = "multi_thread")]
async fn s26_a_cluster_a_sentinel_group_and_a_master_on_tls_only_under_their_faults() {
    let _turn = crate::turns::take(1).await;
    let scenario = Scenario::MixedVoters;
    let seed = chaos::seed(scenario);
    println!(
        "chaos scenario {scenario} over TLS: seed {seed:#x} (re-run with {CHAOS_SEED_ENV}={seed:#x})"
    );
    let ca = TestCa::generate().unwrap();
    let (root, cert, key) = (
        ca.read(CA_CERT).unwrap(),
        ca.read(CLIENT_CERT).unwrap(),
        ca.read(CLIENT_KEY).unwrap(),
    );
    // A TLS handshake after a failover takes longer than the scenario's 150 ms node timeout
    // allows on two loaded cores: the clients get 500 ms, and 2 s to connect.
    let client = move |builder: RedlockBuilder| {
        builder
            .tls_root_certificate(root.clone())
            .tls_client_certificate(cert.clone(), key.clone())
            .node_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_secs(2))
    };
    let run = scenario
        .run_over_tls(
            Length::Short,
            seed,
            ca.server_tls().auth_clients(true),
            &client,
        )
        .await
        .unwrap();
    println!("{}\n{}", ChaosRun::header(), run.row());
    for check in &run.checks {
        println!("  {}: {}", check.what, check.detail);
    }
    assert_eq!(run.violations, 0, "the checker found violations:\n{run}");
    assert!(run.passed(), "a scenario check failed:\n{run}");
    assert!(
        run.checks
            .iter()
            .any(|c| c.what.contains("TLS only") && c.passed),
        "{run}"
    );
    assert!(run.acquisitions >= scenario.target(Length::Short), "{run}");
}

//! The long chaos suite (`make chaos`): every scenario to at least 10,000 acquisitions (the
//! safety scenarios), one after the other over fresh masters, printing one table row each.
//!
//! ```text
//! cargo run --release --example chaos              # long version, every scenario
//! cargo run --release --example chaos -- --short   # the short version of `make test`
//! cargo run --release --example chaos -- partitions held-replies
//! cargo run --release --example chaos -- waiter-killed-at-head line-master-restarted line-minority-paused
//! cargo run --release --example chaos -- --checks   # each scenario's checks under its row
//! QUORUMLOCK_CHAOS_SEED=0x5eed000a cargo run --release --example chaos -- partitions
//! ```
//!
//! Exits with status 1 if any scenario found a violation or failed a check (its details are
//! printed under the table), or a negative control (22 and 28: two voters failing over in one
//! window without durable votes; 27: two Cluster voters losing a held key in one window) found
//! none; 2 if a scenario could not be run at all.

use std::process::ExitCode;

use quorumlock_verify::chaos::{self, ChaosRun, Length, Scenario, CHAOS_SEED_ENV};

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let length = if args.iter().any(|a| a == "--short") {
        Length::Short
    } else {
        Length::Long
    };
    let show_checks = args.iter().any(|a| a == "--checks");
    let names: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| names.is_empty() || names.iter().any(|n| *n == s.name()))
        .collect();
    if scenarios.is_empty() {
        let known: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        eprintln!("no such scenario; known: {}", known.join(", "));
        return ExitCode::from(2);
    }

    println!(
        "quorumlock chaos suite, {} version ({}+ acquisitions per safety scenario), 5 masters (22-23: 3 primaries with a replica each; 24-27: 3 Cluster, Sentinel or mixed voters; 28-29: 3 Cluster voters, two shards failing over at a time)",
        if length == Length::Short {
            "short"
        } else {
            "long"
        },
        length.target()
    );
    match std::env::var(CHAOS_SEED_ENV) {
        Ok(seed) => println!("seed from {CHAOS_SEED_ENV}={seed}"),
        Err(_) => println!("default seeds (re-run one with {CHAOS_SEED_ENV}=<seed>)"),
    }
    println!("{}", ChaosRun::header());
    let mut failed = Vec::new();
    for scenario in scenarios {
        let seed = chaos::seed(scenario);
        match chaos::run(scenario, length, seed).await {
            Ok(run) => {
                println!("{}", run.row());
                if show_checks {
                    for check in &run.checks {
                        let verdict = if check.passed { "ok    " } else { "FAILED" };
                        println!("  {verdict} {}: {}", check.what, check.detail);
                    }
                }
                if !run.passed() {
                    failed.push(run);
                }
            }
            Err(e) => {
                eprintln!("{scenario}: could not run: {e}");
                return ExitCode::from(2);
            }
        }
    }
    for run in &failed {
        println!("\n{run}");
    }
    if failed.is_empty() {
        println!(
            "\nevery scenario: 0 violations (a negative control: the violations its broken rule \
             allows, caught), every check passed"
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

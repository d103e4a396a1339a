//! `quorumlock`: the command-line face of the library — a distributed `flock(1)` over N
//! independent Redis masters, a status view, and a self-contained demo.
//!
//! Exit codes are stable and documented in `--help` (see [`exit`]).

mod bench;
mod demo;
mod duration;
mod exec;
mod exit;
mod nodes;
mod status;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Distributed locks over N independent Redis masters (Redlock).
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, about, long_about = None)]
#[command(after_help = exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start five local masters and show contending workers keeping mutual exclusion while
    /// masters fail.
    #[command(after_help = demo::EXAMPLES)]
    Demo(demo::DemoArgs),
    /// Run a command while holding a lock on a quorum of masters (a distributed flock).
    #[command(after_help = exec::EXAMPLES)]
    Exec(exec::ExecArgs),
    /// Measure acquire/release latency and throughput against your own masters.
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::BenchArgs),
    /// Show what every master holds for a resource, and the quorum's verdict.
    #[command(after_help = status::EXAMPLES)]
    Status(status::StatusArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // `{:#}` prints the whole chain on one line: "context: cause: root cause".
            eprintln!("quorumlock: {e:#}");
            ExitCode::from(exit::FAILURE)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Exec(args) => exec::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Bench(args) => bench::run(args).await.map(|()| ExitCode::SUCCESS),
        }
    })
}

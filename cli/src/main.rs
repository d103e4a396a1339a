//! `quorumlock`: the command-line face of the library — a distributed `flock(1)` over N
//! independent Redis masters, a status view, and a self-contained demo.
//!
//! Exit codes are stable and documented in `--help` (see [`exit`]).
//!
//! # Layout
//!
//! * `exec` — run a command under the lock: its process group, signals, the watchdog.
//! * `elect` — run a command while leader (`exec`, campaigning instead of locking).
//! * `status`, `list`, `unlock` — look at and break locks; `holder` — who holds one.
//! * `nodes` — the `--nodes` option and the checks run before touching a lock.
//! * `durable` — the `--durable` option: grants confirmed by replicas or the AOF.
//! * `masters` — plain Redis connections, for what the lock itself does not cover.
//! * `demo`, `bench` — try it out and measure it.
//! * `duration`, `exit`, `logging`, `metrics`, `output` — command-line plumbing.

// The only unsafe code is the pre-exec hook that ties a command's life to ours (`exec::group`).
#![deny(unsafe_code)]

mod bench;
mod demo;
mod durable;
mod duration;
mod elect;
mod exec;
mod exit;
mod holder;
mod list;
mod logging;
mod masters;
mod metrics;
mod nodes;
mod output;
mod setup;
mod status;
mod tls;
mod unlock;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Distributed locks over N independent Redis masters (Redlock).
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, about, long_about = None)]
#[command(after_help = exit::HELP)]
struct Cli {
    /// Show what the library does: -v for progress, -vv for every request. RUST_LOG overrides.
    /// Log lines are coloured at a terminal unless NO_COLOR is set.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the library's metrics (waits, holds, held and waiting locks, node errors) on
    /// stderr at exit, in the Prometheus text format.
    #[arg(long, global = true)]
    metrics: bool,
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
    /// Run a command while this process is the elected leader; stop it when leadership is lost.
    #[command(after_help = elect::EXAMPLES)]
    Elect(elect::ElectArgs),
    /// Measure acquire/release latency and throughput against your own masters.
    #[command(after_help = bench::EXAMPLES)]
    Bench(bench::BenchArgs),
    /// Show what every master holds for a resource, who holds it, and the quorum's verdict.
    #[command(after_help = status::EXAMPLES)]
    Status(status::StatusArgs),
    /// List the locks held on the masters.
    #[command(after_help = list::EXAMPLES)]
    List(list::ListArgs),
    /// Delete a lock by force, whoever holds it (for operators; unsafe while the holder runs).
    #[command(after_help = unlock::EXAMPLES)]
    Unlock(unlock::UnlockArgs),
    /// Print a shell completion script.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  quorumlock completions bash > ~/.local/share/bash-completion/completions/quorumlock
  quorumlock completions zsh > \"${fpath[1]}/_quorumlock\"
  quorumlock completions fish > ~/.config/fish/completions/quorumlock.fish";

fn main() -> ExitCode {
    // `exec`'s watchdog is this binary too. It is not a subcommand (it would show up in help
    // and completions), and it runs before anything is set up: no runtime, no logger, no threads.
    if exec::watchdog::is_invoked() {
        return exec::watchdog::run();
    }
    let cli = Cli::parse();
    logging::init(cli.verbose);
    let metrics = cli.metrics.then(metrics::install);
    let code = run(cli);
    if let Some(Some(recorder)) = metrics {
        eprint!("{}", recorder.render());
    }
    match code {
        Ok(code) => code,
        // `quorumlock demo | head -2`: the reader has gone, which is a normal way to stop.
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole chain on one line: "context: cause: root cause".
            eprintln!(
                "quorumlock: {}",
                crate::durable::respelled(&format!("{e:#}"))
            );
            ExitCode::from(exit::code_of(&e))
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let code = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Exec(args) => exec::run(&args).await,
            Command::Elect(args) => elect::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::List(args) => list::run(args).await,
            Command::Unlock(args) => unlock::run(args).await,
            Command::Bench(args) => bench::run(args).await.map(|()| ExitCode::SUCCESS),
            Command::Completions { shell } => {
                let mut out = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "quorumlock", &mut out);
                output::write_all(&out)?;
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    // Everything that matters has been awaited; a read of stdin may still sit on a blocking
    // thread (`exec` without a command), and must not keep the process alive.
    runtime.shutdown_background();
    code
}

//! `quorumlock exec`: the distributed `flock(1)`. Runs a command while holding a lock on a quorum
//! of masters, renewing it in the background; stops the command if the lock is lost.

use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use quorumlock::{Error, Held, HoldOptions};
use tokio::process::{Child, Command};

use crate::duration;
use crate::exit;
use crate::nodes::NodesArg;

pub(crate) const EXAMPLES: &str = "\
Examples:
  # Run the nightly report on exactly one machine; the others exit 75 at once.
  quorumlock exec --nodes redis://a:6379,redis://b:6379,redis://c:6379 \\
      --resource nightly-report --ttl 30s -- ./report.sh --full

  # Wait up to 10 minutes for the lock; pass the fencing token to the job.
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
      quorumlock exec --resource migrate --ttl 20s --wait 10m --fencing -- \\
      sh -c 'migrate --fence \"$QUORUMLOCK_FENCE\"'

The command gets QUORUMLOCK_RESOURCE (and QUORUMLOCK_FENCE with --fencing) in its environment.
If the lock is lost while it runs, it gets SIGTERM, then SIGKILL after --grace.";

/// Options of `quorumlock exec`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// The resource to lock.
    #[arg(long)]
    resource: String,
    /// The lease: renewed every third of it while the command runs.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    ttl: Duration,
    /// How long to wait for a busy lock (0: one attempt).
    #[arg(long, default_value = "0s", value_parser = duration::parse)]
    wait: Duration,
    /// Give the command a fencing token in QUORUMLOCK_FENCE (masters need AOF).
    #[arg(long)]
    fencing: bool,
    /// Exit code when the lock is not acquired within --wait (like `flock -E`).
    #[arg(short = 'E', long, default_value_t = exit::NOT_ACQUIRED)]
    conflict_exit_code: u8,
    /// After the lock is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    grace: Duration,
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

/// How the child's run ended, inside the lock.
enum Run {
    Exited(ExitStatus),
    Interrupted,
}

pub(crate) async fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let mut builder = args.nodes.builder().fencing(args.fencing);
    builder = if args.wait.is_zero() {
        builder.retry_count(0)
    } else {
        builder.retry_count(u32::MAX).acquire_timeout(args.wait)
    };
    let rl = builder.build()?;
    // The body gets the grace plus a little to reap the child after SIGKILL.
    let opts = HoldOptions::new().grace(args.grace + Duration::from_millis(500));
    let outcome = rl
        .with_lock_opts(&args.resource, args.ttl, opts, |held| {
            supervise(&args.command, held, args.grace)
        })
        .await;
    match outcome {
        Ok(Ok(Run::Exited(status))) => Ok(ExitCode::from(exit_code(status))),
        Ok(Ok(Run::Interrupted)) => Ok(ExitCode::from(exit::INTERRUPTED)),
        Ok(Err(spawn_error)) => {
            eprintln!("quorumlock: {spawn_error:#}");
            Ok(ExitCode::from(exit::COMMAND_NOT_RUN))
        }
        Err(e @ Error::Lost { .. }) => {
            eprintln!("quorumlock: {e}; the command was stopped");
            Ok(ExitCode::from(exit::LOST))
        }
        Err(e) if e.is_contention() || e.is_unavailable() => {
            eprintln!("quorumlock: {e}");
            Ok(ExitCode::from(args.conflict_exit_code))
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs the command while the lock is held. On loss it sends SIGTERM, waits `grace`, then
/// SIGKILL; on Ctrl-C it forwards SIGINT and waits for the command, so the lock is released
/// only after the command is gone.
async fn supervise(command: &[String], held: Held, grace: Duration) -> anyhow::Result<Run> {
    let mut child = spawn(command, &held)?;
    tokio::select! {
        status = child.wait() => Ok(Run::Exited(status?)),
        _ = held.lost() => {
            signal_child(&child, Signal::SIGTERM);
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                child.kill().await?;
            }
            // The hold is over; `with_lock` reports the loss.
            Ok(Run::Interrupted)
        }
        _ = tokio::signal::ctrl_c() => {
            signal_child(&child, Signal::SIGINT);
            child.wait().await?;
            Ok(Run::Interrupted)
        }
    }
}

fn spawn(command: &[String], held: &Held) -> anyhow::Result<Child> {
    let (program, args) = command.split_first().context("no command given")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("QUORUMLOCK_RESOURCE", held.resource())
        .stdin(Stdio::inherit())
        // If quorumlock itself goes away, the command must not run on unlocked.
        .kill_on_drop(true);
    if let Some(fence) = held.fencing_token() {
        cmd.env("QUORUMLOCK_FENCE", fence.to_string());
    }
    cmd.spawn()
        .with_context(|| format!("cannot run {program:?}"))
}

fn signal_child(child: &Child, sig: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        // Our own child, by PID; it may have exited just now, which is fine.
        let _ = signal::kill(Pid::from_raw(pid), sig);
    }
}

/// The child's exit code, or 128 + the signal that ended it, as shells report it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::FAILURE),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}

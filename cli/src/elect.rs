//! `quorumlock elect`: run a command while this process leads an election, and stop it when
//! leadership is lost, as `exec` stops a command whose lock is lost. With `--restart`, it
//! campaigns again once the command has ended or leadership was lost.

use std::process::ExitCode;
use std::time::Duration;

use crate::durable::DurableArg;
use crate::duration;
use crate::exec::{self, CommandArgs, ExecArgs};
use crate::nodes::NodesArg;

pub(crate) const EXAMPLES: &str = "\
Examples:
  # Run the scheduler on exactly one machine at a time; the others wait to take over.
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
      quorumlock elect scheduler --value \"$(hostname)\" --restart -- ./scheduler

  # Who leads now (a quorum read).
  quorumlock status scheduler

The command gets QUORUMLOCK_RESOURCE (the election's name) and QUORUMLOCK_FENCE, the term: it
grows with every new leader; pass it to what the leader writes to. Leadership is renewed every
third of --ttl; if it is lost, the command gets SIGTERM, and SIGKILL before the term's lease ends.
When the command exits, the process resigns and the next candidate takes over at once.";

/// Options of `quorumlock elect`.
#[derive(Debug, clap::Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    nodes: NodesArg,
    #[command(flatten)]
    durable: DurableArg,
    /// The election's name (or give it with --name).
    #[arg(value_name = "NAME", required_unless_present = "name")]
    name_arg: Option<String>,
    /// Words after the name that are not behind `--`: a command without its `--`.
    #[arg(hide = true, value_name = "WORDS")]
    stray: Vec<String>,
    /// The election's name (the same as the positional NAME).
    #[arg(long, visible_alias = "resource")]
    name: Option<String>,
    /// What this candidate announces as leader (default: hostname:pid).
    #[arg(long)]
    value: Option<String>,
    /// The term's lease: renewed every third of it while leading; from 1s to 24h. A dead leader
    /// is replaced about this long after it died.
    #[arg(long, default_value = "10s", value_parser = duration::parse_ttl, allow_hyphen_values = true)]
    ttl: Duration,
    /// Campaign again after the command ends or leadership is lost (not after a signal).
    #[arg(long)]
    restart: bool,
    #[command(flatten)]
    command: CommandArgs,
}

/// Campaigns, runs the command while leader, and (with `--restart`) campaigns again.
///
/// # Errors
///
/// As `exec`: usage and configuration errors (exit 2), fewer than a quorum of masters answering
/// (69).
pub(crate) async fn run(args: ElectArgs) -> anyhow::Result<ExitCode> {
    let has_command = args.command.is_given();
    let checked = exec::one_name(
        "elect",
        "election's name",
        "--name",
        args.name_arg.as_deref(),
        args.name.as_deref(),
        &args.stray,
        has_command,
    );
    if let Err(e) = checked {
        // A usage error, reported as clap reports its own (exit 2).
        e.exit();
    }
    let Some(name) = args.name.or(args.name_arg) else {
        // clap requires one of them.
        return Err(crate::exit::Usage("elect needs the election's name".to_owned()).into());
    };
    let value = args.value.unwrap_or_else(default_value);
    let exec = ExecArgs::elect(
        args.nodes,
        args.durable,
        name,
        value,
        args.ttl,
        args.command,
    );
    loop {
        let code = exec::run(&exec).await?;
        if !args.restart || stopped_by_a_signal(&code) {
            return Ok(code);
        }
        eprintln!("quorumlock: campaigning again");
    }
}

/// Whether `exec` ended because quorumlock itself got a signal (or the command died of one,
/// which a restart would only repeat): 128 + N.
fn stopped_by_a_signal(code: &ExitCode) -> bool {
    (129..=192).any(|n| *code == ExitCode::from(n))
}

fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit;

    #[test]
    fn only_signal_codes_stop_a_restarting_campaign() {
        assert!(stopped_by_a_signal(&ExitCode::from(exit::signalled(15))));
        assert!(stopped_by_a_signal(&ExitCode::from(130)));
        assert!(!stopped_by_a_signal(&ExitCode::from(exit::LOST)));
        assert!(!stopped_by_a_signal(&ExitCode::from(0)));
        assert!(!stopped_by_a_signal(&ExitCode::from(1)));
    }
}

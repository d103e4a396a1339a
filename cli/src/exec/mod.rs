//! `quorumlock exec`: the distributed `flock(1)`. Runs a command while holding a lock on a quorum
//! of masters, renewing it in the background, and never lets the command run without the lock:
//!
//! * the command runs in a process group of its own (`group`), and "the command is over" means
//!   every process it started is gone, in the group or out of it (`setsid`, `set -m`: found
//!   through `/proc`, `tree`); only then is the lock released;
//! * SIGTERM, SIGHUP, SIGQUIT and SIGINT sent to `exec` go to all of them, then SIGKILL after
//!   `--grace` (`signals`, `supervise`);
//! * a lost lock stops them before the lease ends (`supervise`);
//! * if `exec` itself dies, even by SIGKILL, the kernel (parent-death signal) and the watchdog
//!   kill them; if it stops renewing (stopped, starved), the watchdog kills them by the lease's
//!   deadline (`watchdog`);
//! * at a terminal the command gets the foreground, as a shell would give it (`terminal`).

mod group;
mod signals;
mod supervise;
mod terminal;
mod tree;
pub(crate) mod watchdog;

use std::cell::Cell;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlock::{Error, HoldOptions, Lock, Redlock};

use crate::durable::{self, DurableArg};
use crate::duration::{self, Wait};
use crate::exit::{self, usage};
use crate::holder;
use crate::masters::{self, Master};
use crate::nodes::NodesArg;
use crate::setup::{self, Voters};
use signals::Termination;
use supervise::{Outcome, Plan, Work};

pub(crate) const EXAMPLES: &str = "\
Examples:
  # Run the nightly report on exactly one machine at a time. The resource comes first (or as
  # --resource), the command after `--`. Like flock, exec waits while the lock is busy.
  quorumlock exec --nodes redis://a:6379,redis://b:6379,redis://c:6379 \\
      nightly-report --ttl 30s -- ./report.sh --full

  # Or run it only if nobody else is: one attempt, exit 75 when busy (like flock -n).
  quorumlock exec nightly-report -n -- ./report.sh

  # Wait at most 1m30s, through a restart of the masters too; -v says what it waits for.
  quorumlock -v exec nightly-report -w 1m30s -- ./report.sh

  # Wait up to 10 minutes for the lock; pass the fencing token to the job (like flock -c).
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
      quorumlock exec migrate --ttl 20s -w 10m --fencing \\
      -c 'migrate --fence \"$QUORUMLOCK_FENCE\"'

  # Hold the lock without a command (like etcdctl lock) until a signal; when stdin is a pipe
  # or a terminal, also until it closes (from /dev/null, as a script's background job: a signal).
  quorumlock exec maintenance

  # At most 4 exports at a time across every machine (a semaphore, like consul lock -n 4).
  quorumlock exec exports --permits 4 -w 10m -- ./export.sh

  # Over TLS with a private CA and a client certificate (mutual TLS), on every voter; also
  # QUORUMLOCK_CACERT, QUORUMLOCK_CERT and QUORUMLOCK_KEY.
  quorumlock exec nightly-report --cacert ca.crt --cert client.crt --key client.key \\
      --nodes rediss://a:6380,rediss+cluster://b:6380,c:6380,rediss://d:6380 -- ./report.sh

  # Many readers or one writer.
  quorumlock exec catalog --read -w 1m -- ./read-catalog.sh
  quorumlock exec catalog --write -w 1m -- ./rebuild-catalog.sh

Waiting: without -w or -n, exec waits as long as the lock is busy, in line (first come, first
served); -w DURATION bounds the wait (and also waits out masters that do not answer), -n makes
one attempt. A busy lock exits 75 (-E to change it), naming the holder: host, pid and command.
Durations take a unit: 500ms, 30s, 5m, 1h, or compounds such as 1m30s.

The command gets QUORUMLOCK_RESOURCE (and QUORUMLOCK_FENCE with --fencing) in its environment;
with --permits, QUORUMLOCK_RESOURCE names the slot it holds (<resource>:permit:<i>).
It runs in a process group of its own; the lock is released only once every process it started
has exited, in that group or out of it (setsid, set -m). SIGTERM, SIGHUP, SIGQUIT and SIGINT
sent to quorumlock are passed to all of them, then SIGKILL follows after --grace (at once on a
second signal). At a terminal the command is in the foreground: Ctrl-C and Ctrl-\\ reach it
directly, once. If the lock is lost, they get SIGTERM, and SIGKILL before the lease ends. If
quorumlock dies (even by SIGKILL), they are killed; if it stops renewing (stopped, starved), a
watchdog process kills them by the lease's deadline.";

/// Options of `quorumlock exec`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    nodes: NodesArg,
    #[command(flatten)]
    durable: DurableArg,
    /// The resource to lock (or give it with --resource).
    #[arg(value_name = "RESOURCE", required_unless_present = "resource")]
    resource_arg: Option<String>,
    /// Words after the resource that are not behind `--`: a command without its `--`.
    #[arg(hide = true, value_name = "WORDS")]
    stray: Vec<String>,
    /// The resource to lock (the same as the positional RESOURCE).
    #[arg(long)]
    resource: Option<String>,
    /// The lease: renewed every third of it while the command runs; from 1s to 24h.
    #[arg(long, default_value = "30s", value_parser = duration::parse_ttl, allow_hyphen_values = true)]
    ttl: Duration,
    /// How long to wait, at most: for a busy lock, and for masters that do not answer (down,
    /// paused, restarting) to come back within the same time. A duration (`10s`, `1m30s`; 0:
    /// one attempt) or `forever`. Without -w (and without -n), exec waits as long as the lock
    /// is busy, like flock, but exits 69 at once when a quorum of masters does not answer.
    #[arg(
        short = 'w',
        long,
        value_name = "DURATION",
        value_parser = duration::parse_wait,
        allow_hyphen_values = true,
        conflicts_with = "no_wait"
    )]
    wait: Option<Wait>,
    /// Do not wait for a busy lock: one attempt, then exit 75 (like `flock -n`).
    #[arg(short = 'n', long = "no-wait")]
    no_wait: bool,
    /// Give the command a fencing token in QUORUMLOCK_FENCE (masters need AOF).
    #[arg(long)]
    fencing: bool,
    /// A semaphore: at most K commands hold the resource at a time (like `consul lock -n`).
    /// Every process must pass the same K: a K other than the current holders' is refused.
    #[arg(
        long,
        value_name = "K",
        conflicts_with_all = ["read", "write"],
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    permits: Option<u32>,
    /// A read hold of a read-write lock: runs beside other readers, never beside a writer.
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// The write hold of a read-write lock: runs alone; new readers wait behind a waiting
    /// writer.
    #[arg(long)]
    write: bool,
    /// Exit code when the lock is busy and not acquired within --wait (like `flock -E`).
    #[arg(short = 'E', long, default_value_t = exit::BUSY)]
    conflict_exit_code: u8,
    #[command(flatten)]
    command: CommandArgs,
    /// `quorumlock elect`: campaign for leadership announcing this value, instead of locking.
    #[arg(skip)]
    elect: Option<String>,
}

/// The command run under the lock (or while leader), and how it is stopped: shared by `exec`
/// and `elect`.
#[derive(Debug, clap::Args)]
pub(crate) struct CommandArgs {
    /// After asking the command to stop (a signal, a lost lock), how long it has before SIGKILL.
    /// On a lost lock, SIGKILL comes before the lease ends whatever the grace.
    #[arg(long, default_value = "2s", value_parser = duration::parse, allow_hyphen_values = true)]
    grace: Duration,
    /// Run this command string with `sh -c` (like `flock -c`).
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "argv"
    )]
    shell_command: Option<String>,
    /// The command and its arguments. Without a command (and without -c), the lock is held
    /// until a signal arrives, or until stdin closes when it is a pipe or a terminal.
    #[arg(last = true, value_name = "COMMAND")]
    argv: Vec<String>,
}

impl CommandArgs {
    /// Whether a command was given (after `--`, or with `-c`).
    pub(crate) fn is_given(&self) -> bool {
        self.shell_command.is_some() || !self.argv.is_empty()
    }
}

impl ExecArgs {
    /// The options of `quorumlock elect`: campaign for `name` and run the command while leader.
    pub(crate) fn elect(
        nodes: NodesArg,
        durable: DurableArg,
        name: String,
        value: String,
        ttl: Duration,
        command: CommandArgs,
    ) -> ExecArgs {
        ExecArgs {
            nodes,
            durable,
            resource_arg: None,
            stray: Vec::new(),
            resource: Some(name),
            ttl,
            wait: Some(Wait::Forever),
            no_wait: false,
            fencing: false,
            permits: None,
            read: false,
            write: false,
            conflict_exit_code: exit::BUSY,
            command,
            elect: Some(value),
        }
    }

    /// The resource, given either way.
    fn resource(&self) -> &str {
        self.resource
            .as_deref()
            .or(self.resource_arg.as_deref())
            .unwrap_or_default()
    }

    /// Catches a command written without its `--` (`exec --resource x echo hi`, `exec x echo
    /// hi`), which would otherwise lock a resource named after the command or fail obscurely,
    /// and a resource given both ways (`exec a --resource b -- cmd`).
    fn check_usage(&self) -> Result<(), clap::Error> {
        let has_command = self.command.is_given();
        one_name(
            "exec",
            "resource",
            "--resource",
            self.resource_arg.as_deref(),
            self.resource.as_deref(),
            &self.stray,
            has_command,
        )
    }

    fn work(&self) -> Work {
        match &self.command.shell_command {
            Some(script) => Work::Command(vec!["sh".into(), "-c".into(), script.clone()]),
            None if self.command.argv.is_empty() => Work::Hold,
            None => Work::Command(self.command.argv.clone()),
        }
    }

    /// Takes what the options ask for: the mutex, a permit, a read or the write hold.
    async fn acquire(&self, rl: &Redlock) -> Result<Lock, Error> {
        let (resource, ttl) = (self.resource(), self.ttl);
        if let Some(value) = &self.elect {
            return rl.elect(resource, ttl, value).await;
        }
        if let Some(permits) = self.permits {
            let permit = rl.semaphore(resource, permits)?.acquire(ttl).await?;
            return Ok(permit.into_lock());
        }
        match (self.read, self.write) {
            (true, _) => rl.rw_lock(resource)?.read(ttl).await,
            (_, true) => rl.rw_lock(resource)?.write(ttl).await,
            _ => rl.acquire(resource, ttl).await,
        }
    }

    /// Takes the lock within the wait: masters that do not answer are waited for too, until
    /// `give_up` (`None`: forever). With no wait, one attempt.
    async fn acquire_within(&self, rl: &Redlock, give_up: Option<Instant>) -> Result<Lock, Error> {
        let started = Instant::now();
        let mut outcome = self.acquire(rl).await;
        loop {
            match outcome {
                Err(e) if e.is_unavailable() && self.wait() != Wait::For(Duration::ZERO) => {
                    let retry_at = Instant::now() + UNAVAILABLE_RETRY;
                    if give_up.is_some_and(|g| retry_at >= g) {
                        return Err(e);
                    }
                    tracing::info!(error = %e, "masters unavailable; waiting for them");
                    tokio::time::sleep_until(retry_at.into()).await;
                    // The library bounds each attempt by the whole wait; what is left of it
                    // bounds this one.
                    let attempt = self.acquire(rl);
                    outcome = match give_up {
                        Some(g) => match tokio::time::timeout_at(g.into(), attempt).await {
                            Ok(outcome) => outcome,
                            Err(_) => return Err(e),
                        },
                        None => attempt.await,
                    };
                }
                Ok(lock) => {
                    tracing::info!(
                        resource = lock.resource(),
                        waited_ms = started.elapsed().as_millis(),
                        fence = lock.fencing_token(),
                        "acquired"
                    );
                    return Ok(lock);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// How long to wait for a busy lock: one attempt with `-n`, `-w` when given, else as long
    /// as it takes.
    fn wait(&self) -> Wait {
        match (self.no_wait, self.wait) {
            (true, _) => Wait::For(Duration::ZERO),
            (false, Some(wait)) => wait,
            (false, None) => Wait::Forever,
        }
    }

    /// Whether masters that do not answer at the start are waited for (within the wait): only
    /// when a wait was asked for with `-w` (or by `elect`). By default, too few masters
    /// answering exits 69 at once, as a typo in `--nodes` should.
    fn waits_out_outages(&self) -> bool {
        !self.no_wait && self.wait.is_some_and(|w| w != Wait::For(Duration::ZERO))
    }

    /// The names whose lines this process may stand in: the resource, or each slot of a
    /// semaphore. (A read-write lock's holds wait without a place in any line.)
    fn lines(&self) -> Vec<String> {
        match self.permits {
            Some(permits) => (0..permits)
                .map(|slot| format!("{}:permit:{slot}", self.resource()))
                .collect(),
            None if self.read || self.write => Vec::new(),
            None => vec![self.resource().to_owned()],
        }
    }
}

/// Checks how a subcommand's name (`exec`'s resource, `elect`'s election) was given: as the
/// positional `positional` or as `option` (`--resource`, `--name`) with the value `optional`,
/// not both; `stray` are the words after the positional that are not behind `--`.
pub(crate) fn one_name(
    command: &str,
    what: &str,
    option: &str,
    positional: Option<&str>,
    optional: Option<&str>,
    stray: &[String],
    has_command: bool,
) -> Result<(), clap::Error> {
    let raw = |kind, message: String| Err(clap::Error::raw(kind, message));
    let stray: Vec<&str> = stray.iter().map(String::as_str).collect();
    match (positional, optional) {
        // Both ways, and words after the positional: a command without its `--`.
        (Some(first), Some(name)) if !stray.is_empty() => {
            let words: Vec<&str> = std::iter::once(first).chain(stray).collect();
            raw(
                clap::error::ErrorKind::UnknownArgument,
                command_without_dashes(command, &format!("{option} {name}"), &words),
            )
        }
        (Some(first), Some(name)) => {
            let maybe = match has_command {
                true => String::new(),
                false => format!(
                    " (if {first:?} is a command, it goes after `--`: quorumlock {command} \
                     {option} {name} -- {first})"
                ),
            };
            raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "the {what} was given twice, as {first:?} and as {option} {name:?}: give \
                     it once, as in\n\n    quorumlock {command} {name} -- <command>\n{maybe}\n"
                ),
            )
        }
        (Some(name), None) if !stray.is_empty() => raw(
            clap::error::ErrorKind::UnknownArgument,
            command_without_dashes(command, name, &stray),
        ),
        _ => Ok(()),
    }
}

/// The hint for `words` written without their `--`.
fn command_without_dashes(command: &str, name: &str, words: &[&str]) -> String {
    format!(
        "unexpected {:?}: the command goes after `--`, as in\n\n    quorumlock {command} {name} \
         -- {}\n",
        words.join(" "),
        words.join(" ")
    )
}

/// Warns about each master that does not log to an append-only file: restarted from an older
/// snapshot (or none), it hands out fencing tokens it already gave. Best effort: a master that
/// cannot be asked is left for the lock itself to report.
async fn warn_without_aof(masters: &[Master]) {
    let looks = futures::future::join_all(masters.iter().map(|master| async move {
        let mut conn = master.connect().await?;
        let info: String =
            masters::request(&mut conn, redis::cmd("INFO").arg("persistence")).await?;
        Ok::<_, String>(info)
    }))
    .await;
    for (master, look) in masters.iter().zip(looks) {
        match look {
            Ok(info) if info.lines().any(|l| l.trim() == "aof_enabled:0") => tracing::warn!(
                node = master.node(),
                "--fencing: this master has no AOF (appendonly no); restarted, it may hand out \
                 fencing tokens it already gave"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(node = master.node(), error = %e, "cannot read INFO persistence")
            }
        }
    }
}

/// Refuses `--permits K` when the semaphore's holders use another size: every process must
/// count the same slots, or more than K could run at once. Best effort: it reads what the
/// holders wrote about themselves, and the slots held (which needs `SCAN`); two processes
/// starting at the same moment with different sizes are not caught.
async fn check_permits(args: &ExecArgs, masters: &[Master], permits: u32) -> anyhow::Result<()> {
    let slots = masters::permit_slots(masters, args.nodes.key_prefix(), args.resource()).await;
    if let Some(slot) = slots.iter().copied().find(|slot| *slot >= permits) {
        usage!(
            "--permits {permits} does not match the holders of {:?}: slot {slot} is held, so \
             they use at least {} permits; pass the same --permits everywhere",
            args.resource(),
            slot + 1
        );
    }
    for slot in slots {
        let permit = format!("{}:permit:{slot}", args.resource());
        let holder = holder::read(masters, &args.nodes.key(&permit)).await;
        if let Some(theirs) = holder.and_then(|h| h.permits).filter(|k| *k != permits) {
            usage!(
                "--permits {permits} does not match the holders of {:?}: they use --permits \
                 {theirs}; pass the same --permits everywhere",
                args.resource()
            );
        }
    }
    Ok(())
}

/// How long `exec` waits between two looks at masters that do not answer, within `--wait`.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(250);

/// Checks the masters (see [`crate::setup::check`]); while fewer than a quorum answer, looks
/// again until `give_up` (`None`: forever), so that `--wait` also waits out an outage.
async fn check_within(
    args: &ExecArgs,
    rl: &Redlock,
    give_up: Option<Instant>,
) -> anyhow::Result<Voters> {
    let mut said = false;
    loop {
        match args.nodes.check(rl, args.durable.get()).await {
            Err(e) if setup::is_unavailable(&e) => {
                let retry_at = Instant::now() + UNAVAILABLE_RETRY;
                if give_up.is_some_and(|g| retry_at >= g) {
                    return Err(e);
                }
                if !std::mem::replace(&mut said, true) {
                    let shown = durable::respelled(&format!("{e:#}")).into_owned();
                    if refused_for_their_setup(&e) {
                        // Not an outage that passes: say it at the default level, or a
                        // `--wait forever` (and `elect`) would wait without a word.
                        tracing::warn!(error = %shown, "masters refused for their setup; waiting for them");
                    } else {
                        tracing::info!(error = %shown, "masters unavailable; waiting for them");
                    }
                }
                tokio::time::sleep_until(retry_at.into()).await;
            }
            outcome => return outcome,
        }
    }
}

/// Whether some master was refused by the client's own checks at connect (a Redis Cluster node,
/// a master that cannot confirm durable votes, another key layout) rather than unreachable.
fn refused_for_their_setup(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|cause| match cause.downcast_ref::<Error>() {
            Some(Error::Unavailable { nodes, .. }) => Some(nodes),
            _ => None,
        })
        .flatten()
        .filter_map(|n| n.redis_error())
        .any(|r| r.kind() == redis::ErrorKind::Client)
}

/// While waiting in line at `-v`, says now and then who holds the lock, this process's place in
/// the line and how long the line is (on the master where it stands furthest back).
async fn report_line(rl: &Redlock, resource: &str) -> std::convert::Infallible {
    if !tracing::enabled!(tracing::Level::INFO) {
        return std::future::pending().await;
    }
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.tick().await;
    loop {
        every.tick().await;
        let Ok(status) = rl.inspect(resource).await else {
            continue;
        };
        let in_line = status
            .nodes
            .iter()
            .map(|n| n.queue.len())
            .max()
            .unwrap_or(0);
        let place = status
            .nodes
            .iter()
            .filter_map(|n| n.queue.iter().position(|w| rl.is_own_waiter(w)))
            .max()
            .map(|index| index + 1);
        match place {
            Some(place) => tracing::info!(
                "waiting in line: place {place} of {in_line}; the resource is {}",
                verdict_words(&status.verdict)
            ),
            None => {
                tracing::info!(
                    in_line,
                    "waiting to take a place in line; the resource is {}",
                    verdict_words(&status.verdict)
                )
            }
        }
    }
}

/// Runs `exec`: checks the masters, waits for the lock, runs the command under it.
///
/// # Errors
///
/// Usage and configuration errors (exit 2) and fewer than a quorum of masters answering (exit
/// 69, see [`crate::exit::code_of`]). Every other outcome is an exit code.
pub(crate) async fn run(args: &ExecArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = args.check_usage() {
        // A usage error, reported as clap reports its own (exit 2).
        e.exit();
    }
    let work = args.work();
    let mut builder = args
        .durable
        .apply(args.nodes.builder())
        .fencing(args.fencing);
    // While the lock is held, `acquire` waits in line for as long as its acquire timeout;
    // masters that do not answer are retried within the same wait.
    builder = match args.wait() {
        Wait::For(wait) if wait.is_zero() => builder.retry_count(0).acquire_timeout(wait),
        Wait::For(wait) => builder.retry_count(u32::MAX).acquire_timeout(wait),
        Wait::Forever => builder.retry_count(u32::MAX).acquire_timeout(Duration::MAX),
    };
    let rl = builder.build()?;
    if args.read && args.fencing {
        tracing::warn!(
            "--fencing with --read: readers share the resource and get no fencing token \
             (QUORUMLOCK_FENCE is not set); fencing tokens order writers"
        );
    }
    let started = Instant::now();
    let give_up = match args.wait() {
        Wait::For(wait) => started.checked_add(wait),
        Wait::Forever => None,
    };
    let voters = match args.waits_out_outages() {
        true => check_within(args, &rl, give_up).await?,
        false => args.nodes.check(&rl, args.durable.get()).await?,
    };
    let answering = voters.answering();

    if args.fencing {
        warn_without_aof(&answering).await;
    }
    if let Some(permits) = args.permits {
        check_permits(args, &answering, permits).await?;
    }

    group::adopt_orphans();
    let signals = Termination::listen()?;
    let plan = Plan::new(args.ttl, args.command.grace);
    let opts = HoldOptions::new()
        .loss_margin(plan.loss_margin())
        .grace(plan.body_grace());
    let context = supervise::Context {
        work: &work,
        plan,
        signals: signals.clone(),
        masters: answering.clone(),
        // Readers share the resource: none of them is its holder.
        announce_under: (!args.read).then(|| args.nodes.key_prefix().to_owned()),
        permits: args.permits,
    };

    // A signal that arrives while waiting for the lock ends the wait; once the lock is held,
    // the body handles signals (it starts by checking for one that came just before).
    let holding = Cell::new(false);
    // The key held (a permit's slot, say) and its token, to see the release through.
    let held_as = std::cell::RefCell::new(None);
    let hold = async {
        let wait = match args.wait() {
            Wait::For(wait) => format!("{wait:?}"),
            Wait::Forever => "as long as it is busy".to_owned(),
        };
        tracing::info!(resource = args.resource(), wait, "taking the lock");
        let lock = tokio::select! {
            lock = args.acquire_within(&rl, give_up) => lock?,
            never = report_line(&rl, args.resource()) => match never {},
        };
        rl.hold(lock, opts, |held| {
            holding.set(true);
            *held_as.borrow_mut() = Some((held.resource().to_owned(), held.token().fingerprint()));
            supervise::run(held, context)
        })
        .await
    };
    let mut waiting = signals;
    let outcome = tokio::select! {
        outcome = hold => Ok(outcome),
        signal = async {
            let (_, signal) = waiting.after(0).await;
            if holding.get() {
                std::future::pending::<()>().await;
            }
            signal
        } => Err(signal),
    };
    // The wait is over, and every future of it dropped: a place taken in line is being given
    // up in the background (see `leave_the_lines`).
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(signal) => {
            eprintln!(
                "quorumlock: {signal} while waiting for {:?}; not acquired",
                args.resource()
            );
            leave_the_lines(args, &rl).await;
            return Ok(ExitCode::from(exit::signalled(signal as i32)));
        }
    };
    let held = holding.get();
    if let Some((resource, token)) = held_as.into_inner() {
        released_everywhere(&answering, &args.nodes.key(&resource), &token).await;
    }
    if !held {
        leave_the_lines(args, &rl).await;
    }

    Ok(ExitCode::from(match outcome {
        Ok(Ok(outcome)) => outcome_code(outcome),
        Ok(Err(e)) => {
            eprintln!("quorumlock: {}", durable::respelled(&format!("{e:#}")));
            exit::FAILURE
        }
        Err(e @ Error::Lost { .. }) => {
            eprintln!("quorumlock: {e}; the command was stopped");
            exit::LOST
        }
        Err(e) if e.is_contention() => {
            let busy = busy(args, &answering, &e, started.elapsed()).await;
            eprintln!("quorumlock: {}", durable::respelled(&busy));
            args.conflict_exit_code
        }
        Err(e @ (Error::Unavailable { .. } | Error::ValidityExhausted { .. })) => {
            eprintln!("quorumlock: {}", durable::respelled(&e.to_string()));
            exit::NO_QUORUM
        }
        Err(e) if e.is_unavailable() => {
            eprintln!("quorumlock: {}", durable::respelled(&e.to_string()));
            exit::NO_QUORUM
        }
        Err(e) => return Err(e.into()),
    }))
}

/// How long a process that gave up its wait (or was told to stop waiting) gives the masters to
/// take it out of the line, beyond the node timeout each of those requests has.
const LEAVE_MARGIN: Duration = Duration::from_millis(100);

/// Sees the departure from the line through, for a process that waited in line and is about to
/// exit without the lock (`--wait` ran out, a signal, `elect` interrupted): the library leaves
/// the line in the background when its wait ends, and an exit before those requests land would
/// leave this process's entry in line until its lease lapses, holding up the next waiter for
/// that long. Waits until no master that answers lists a waiter of this process, at most one
/// node timeout (and [`LEAVE_MARGIN`]); a master that does not answer keeps the entry until it
/// lapses.
async fn leave_the_lines(args: &ExecArgs, rl: &Redlock) {
    let lines = args.lines();
    // Only a wait that met a holder takes a place in line, and only when it may wait.
    if lines.is_empty() || args.wait() == Wait::For(Duration::ZERO) || rl.stats().contended == 0 {
        return;
    }
    let node_timeout = (args.ttl / quorumlock::DEFAULT_NODE_TIMEOUT_DIVISOR)
        .min(quorumlock::DEFAULT_MAX_NODE_TIMEOUT);
    let deadline = tokio::time::Instant::now() + node_timeout + LEAVE_MARGIN;
    let started = Instant::now();
    let in_line = || async {
        let looks = futures::future::join_all(lines.iter().map(|name| rl.inspect(name))).await;
        looks
            .iter()
            .flatten()
            .flat_map(|status| &status.nodes)
            .filter(|node| node.queue.iter().any(|w| rl.is_own_waiter(w)))
            .count()
    };
    loop {
        match tokio::time::timeout_at(deadline, in_line()).await {
            Ok(0) => {
                tracing::debug!(
                    within_ms = started.elapsed().as_millis(),
                    "left the line on every master that answers"
                );
                return;
            }
            Ok(left) if tokio::time::Instant::now() + LEAVE_POLL < deadline => {
                tracing::trace!(masters = left, "still in line");
                tokio::time::sleep(LEAVE_POLL).await;
            }
            Ok(left) => {
                tracing::info!(
                    masters = left,
                    "still in line on some masters: the entry lapses there by itself"
                );
                return;
            }
            Err(_) => {
                tracing::info!(
                    "the line could not be read in time: an entry left lapses by itself"
                );
                return;
            }
        }
    }
}

/// How often [`leave_the_lines`] looks.
const LEAVE_POLL: Duration = Duration::from_millis(10);

/// The busy message: who holds the resource (as the holder described itself beside the lock:
/// host, pid, command; or the readers of a read-write lock), and what the masters answered.
async fn busy(args: &ExecArgs, masters: &[Master], e: &Error, waited: Duration) -> String {
    let Error::NotAcquired {
        resource,
        granted,
        configured,
        quorum,
        attempts,
        nodes,
        ..
    } = e
    else {
        return e.to_string();
    };
    let whom = holder::who_holds(masters, &args.nodes.key(resource)).await;
    let what = match args.permits {
        Some(permits) => format!(
            "{:?}: all {permits} permits are held ({resource:?} {whom})",
            args.resource()
        ),
        None => format!("{resource:?} is {whom}"),
    };
    let within = match args.wait() {
        Wait::For(wait) if !wait.is_zero() => format!(" within {}", shown(waited)),
        _ => String::new(),
    };
    let mut text = format!(
        "{what}; not acquired: {granted} of {configured} masters granted ({quorum} needed) after \
         {attempts} attempt(s){within}"
    );
    for node in nodes.iter().filter(|n| !n.is_contention()) {
        text.push_str(&format!("; {node}"));
    }
    text
}

/// A duration as a person reads it: `1.2s`, `350ms`.
fn shown(d: Duration) -> String {
    match d.as_millis() {
        ms if ms < 1000 => format!("{ms}ms"),
        _ => format!("{:.1}s", d.as_secs_f64()),
    }
}

/// A verdict in a few words, for the log.
fn verdict_words(verdict: &quorumlock::Verdict) -> String {
    use quorumlock::Verdict;
    match verdict {
        Verdict::Held { fingerprint, nodes } => format!("held by {fingerprint} on {nodes} masters"),
        Verdict::HandedOver { nodes, .. } => {
            format!("handed over to the first waiter on {nodes} masters")
        }
        Verdict::Reading { readers, .. } => format!("read by {readers}+ reader(s)"),
        Verdict::Free => "free".to_owned(),
        Verdict::Split => "split between holders".to_owned(),
        Verdict::Unknown => "unknown (too few masters answered)".to_owned(),
        _ => "in another state".to_owned(),
    }
}

/// How long `exec` waits, once the lock is released, for the masters that had not confirmed the
/// release yet.
const RELEASE_SETTLE: Duration = Duration::from_secs(1);

/// Waits (for at most [`RELEASE_SETTLE`]) until none of `masters` (those that answered the check)
/// still has `key` holding the token with this fingerprint. The library returns from a release
/// once a quorum has confirmed and sends the rest in the background; a process that exits at
/// once would cut those short and leave the key on a minority until its TTL. A master that did
/// not answer the check is not waited for.
async fn released_everywhere(masters: &[Master], key: &str, token: &str) {
    let deadline = tokio::time::Instant::now() + RELEASE_SETTLE;
    let settled = masters.iter().map(|master| async move {
        let Ok(mut conn) = master.connect().await else {
            return;
        };
        while tokio::time::Instant::now() < deadline {
            let value: Result<Option<String>, String> =
                masters::request(&mut conn, redis::cmd("GET").arg(key)).await;
            let ours = match value {
                Ok(Some(value)) => {
                    let value = value.strip_prefix("~elected:").unwrap_or(&value);
                    quorumlock::LockToken::fingerprint_of(value) == token
                }
                _ => false,
            };
            if !ours {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let _ = tokio::time::timeout_at(deadline, futures::future::join_all(settled)).await;
}

fn outcome_code(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Exited(group::Ended::Code(code)) => u8::try_from(code).unwrap_or(exit::FAILURE),
        Outcome::Exited(group::Ended::Signal(signal)) => exit::signalled(signal),
        Outcome::NotStarted(why) => {
            eprintln!("quorumlock: {why}");
            exit::COMMAND_NOT_RUN
        }
        Outcome::Stopped(signal) => exit::signalled(signal as i32),
        Outcome::HoldEnded => 0,
        Outcome::StdinClosed => {
            eprintln!(
                "quorumlock: stdin was already closed: the hold ended as soon as it began \
                 (with stdin from /dev/null, a hold lasts until a signal)"
            );
            exit::FAILURE
        }
        Outcome::Expired => {
            eprintln!(
                "quorumlock: the lease ran out before it could be renewed (was quorumlock \
                 stopped or starved?); the command was stopped by its deadline"
            );
            exit::LOST
        }
    }
}

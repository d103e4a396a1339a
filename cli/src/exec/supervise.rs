//! The body of the hold: runs the command (or just holds), and decides when and how to stop it.
//!
//! Stopping, whatever the reason, is the same sequence: a signal to the whole process group,
//! SIGKILL after the grace, and waiting until no process of the group is left. Only then does
//! the body return and the library release the lock.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::Signal;
use quorumlock::{Held, LossReason};
use tokio::io::AsyncReadExt as _;
use tokio::signal::unix::{signal, SignalKind};

use super::group::{CommandGroup, Ended};
use super::signals::Termination;
use super::terminal::Terminal;
use super::watchdog::Watchdog;
use crate::holder::{Announcement, Holder};
use crate::masters::Master;
use crate::output::out;

/// How often the group is checked for processes left, besides each SIGCHLD.
const POLL: Duration = Duration::from_millis(50);

/// The least time between the SIGKILL that follows a lost lock and the lease's deadline.
const MIN_KILL_BEFORE_DEADLINE: Duration = Duration::from_millis(50);

/// What `exec` was asked to do under the lock.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// Run this command.
    Command(Vec<String>),
    /// Hold the lock until stdin closes or a signal arrives.
    Hold,
}

/// How the hold ended, when the lock was not lost.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command's first process ended on its own, and every process of its group is gone.
    Exited(Ended),
    /// The command could not be started (the message says why).
    NotStarted(String),
    /// `exec` got this signal and stopped the command.
    Stopped(Signal),
    /// Holding without a command: stdin closed.
    HoldEnded,
    /// Holding without a command: stdin was closed already when the lock was granted, so the
    /// hold ended at once (and "locked" was not printed).
    StdinClosed,
    /// The lease ran out before the command was over — `exec` could not renew it in time
    /// (stopped, starved) — and the watchdog stopped the command by the deadline.
    Expired,
}

/// The timing of a stop, from the TTL and `--grace`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    ttl: Duration,
    grace: Duration,
}

impl Plan {
    pub(crate) fn new(ttl: Duration, grace: Duration) -> Self {
        Plan { ttl, grace }
    }

    /// How long before the lease's deadline a failing renewal counts as a loss: the library's
    /// default (a tenth of the TTL), widened up to a third of the TTL so that the command can
    /// get its whole grace before the lease ends.
    pub(crate) fn loss_margin(&self) -> Duration {
        let wanted = self.grace + self.kill_before_deadline() + POLL;
        wanted.clamp(self.ttl / 10, self.ttl / 3)
    }

    /// On a lost lock, SIGKILL goes out this long before the lease's deadline (a twentieth of
    /// the TTL, at least 50 ms), so that the processes are gone before the keys expire on the
    /// masters — later still, by the clock-drift allowance — even on a busy machine.
    pub(crate) fn kill_before_deadline(&self) -> Duration {
        (self.ttl / 20).max(MIN_KILL_BEFORE_DEADLINE)
    }

    /// How long the library lets the body run after a loss before dropping it: long enough to
    /// kill the group before the deadline and see it gone.
    pub(crate) fn body_grace(&self) -> Duration {
        self.loss_margin() + Duration::from_secs(1)
    }
}

/// What the body needs besides the lock.
pub(crate) struct Context<'a> {
    pub(crate) work: &'a Work,
    pub(crate) plan: Plan,
    pub(crate) signals: Termination,
    pub(crate) masters: Vec<Master>,
    /// The key prefix under which the holder is described beside the key it holds (see
    /// `holder`); `None` when the hold is shared (a reader's) and nobody is its holder.
    pub(crate) announce_under: Option<String>,
    /// The semaphore's size, for a permit (`--permits`).
    pub(crate) permits: Option<u32>,
}

/// The body run under the lock.
///
/// # Errors
///
/// The command could not be put under watch (the watchdog or the SIGCHLD handler could not be
/// set up); the command was not started, or was stopped.
pub(crate) async fn run(held: Held, cx: Context<'_>) -> anyhow::Result<Outcome> {
    // A signal that arrived just as the lock was granted: do not start anything.
    if let (n, Some(signal)) = cx.signals.received() {
        if n > 0 {
            return Ok(Outcome::Stopped(signal));
        }
    }
    let command = match cx.work {
        Work::Command(argv) => Some(argv.as_slice()),
        Work::Hold => None,
    };
    let holder = Holder::me(command, held.token().fingerprint(), cx.permits);
    let announcement = cx.announce_under.map(|prefix| {
        let key = quorumlock::resource_key(&prefix, held.resource());
        Announcement::start(cx.masters, key, holder, cx.plan.ttl)
    });
    let outcome = match command {
        Some(argv) => run_command(argv, &held, cx.signals, cx.plan).await,
        None => hold(&held, cx.signals).await,
    };
    if let Some(announcement) = announcement {
        announcement.withdraw().await;
    }
    outcome
}

/// What ends a hold without a command, besides a signal and the loss of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stdin {
    /// A pipe, socket or terminal: its end (the writer is gone, Ctrl-D) ends the hold.
    Watched,
    /// Watched, but closed already.
    Closed,
    /// Anything else — `/dev/null` (a script's background job), a file, nothing: the hold
    /// lasts until a signal.
    Ignored,
}

/// What stdin is, for a hold without a command: only a pipe, socket or terminal can close in a
/// way that means "stop" (a script's background job gets `/dev/null`, which reads as closed at
/// once).
fn stdin() -> Stdin {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;

    let stdin = std::io::stdin();
    let watched = stdin.is_terminal()
        || stdin
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| std::fs::File::from(fd).metadata())
            .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket());
    if !watched {
        return Stdin::Ignored;
    }
    let mut fds = [nix::poll::PollFd::new(
        stdin.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let hung_up = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP));
    if hung_up {
        Stdin::Closed
    } else {
        Stdin::Watched
    }
}

/// Holds the lock with no command: prints it, and waits for a signal, the loss of the lock,
/// or — when stdin is a pipe or a terminal — for stdin to close.
async fn hold(held: &Held, mut signals: Termination) -> anyhow::Result<Outcome> {
    let stdin = stdin();
    if stdin == Stdin::Closed {
        return Ok(Outcome::StdinClosed);
    }
    match held.fencing_token() {
        Some(fence) => out!("locked {} fence {fence}", held.resource())?,
        None => out!("locked {}", held.resource())?,
    }
    tracing::info!(
        resource = held.resource(),
        until = if stdin == Stdin::Watched {
            "stdin closes or a signal"
        } else {
            "a signal"
        },
        "holding"
    );
    let stdin_closed = async {
        if stdin == Stdin::Ignored {
            return std::future::pending().await;
        }
        let mut stdin = tokio::io::stdin();
        let mut sink = [0u8; 512];
        // Anything typed is ignored; the end of input (or an error reading it) ends the hold.
        while matches!(stdin.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    tokio::select! {
        () = stdin_closed => Ok(Outcome::HoldEnded),
        (_, signal) = signals.after(0) => Ok(Outcome::Stopped(signal)),
        // The library reports the loss; what the body returns is discarded.
        () = held.lost() => Ok(Outcome::HoldEnded),
    }
}

/// Why the group is being stopped.
#[derive(Debug, Clone, Copy)]
enum Reason {
    Signal(Signal),
    Lost,
}

/// The stop in progress, if any.
#[derive(Debug, Default)]
struct Stop {
    reason: Option<Reason>,
    kill_at: Option<Instant>,
    killed: bool,
    lost: bool,
}

impl Stop {
    /// Moves the SIGKILL no later than `at`.
    fn kill_by(&mut self, at: Instant) {
        self.kill_at = Some(self.kill_at.map_or(at, |k| k.min(at)));
    }
}

async fn run_command(
    argv: &[String],
    held: &Held,
    mut signals: Termination,
    plan: Plan,
) -> anyhow::Result<Outcome> {
    if let Some(outcome) = room_to_run(held, &mut signals, plan).await {
        return Ok(outcome);
    }
    // The watchdog first: if it cannot run, the command does not either.
    let mut watchdog = Watchdog::start().context("cannot start the watchdog process")?;
    let mut children = signal(SignalKind::child()).context("cannot watch for SIGCHLD")?;
    let mut env = vec![("QUORUMLOCK_RESOURCE", held.resource().to_owned())];
    if let Some(fence) = held.fencing_token() {
        env.push(("QUORUMLOCK_FENCE", fence.to_string()));
    }
    let mut group = match CommandGroup::spawn(argv, &env, watchdog.pid()) {
        Ok(group) => group,
        Err(e) => {
            watchdog.dismiss(false).await;
            let program = argv.first().map_or("", String::as_str);
            return Ok(Outcome::NotStarted(format!("cannot run {program:?}: {e}")));
        }
    };
    // The command must be stopped by the lease's deadline, whatever becomes of us: tell the
    // watchdog that moment now and after every renewal.
    let kill_at = |held: &Held| {
        let deadline = held.deadline();
        deadline
            .checked_sub(plan.kill_before_deadline())
            .unwrap_or(deadline)
    };
    let guarded = watchdog
        .guard(group.id())
        .and_then(|()| watchdog.kill_at(kill_at(held)));
    if let Err(e) = guarded {
        // Unguarded, a crash of ours would leave the command running: stop it instead.
        group.signal(Signal::SIGKILL);
        while !group.poll() {
            group.signal(Signal::SIGKILL);
            tokio::time::sleep(POLL).await;
        }
        return Err(anyhow::Error::from(e).context("the watchdog exited; the command was stopped"));
    }
    tracing::debug!(pid = %group.id(), "command started");
    let terminal = Terminal::hand_over(group.id());

    let mut stop = Stop::default();
    let mut seen = 0;
    let mut renewals = held.renewals();
    let mut unguarded = None;
    let mut tick = tokio::time::interval(POLL);
    while !group.poll() {
        if group.take_stopped() && terminal.is_interactive() {
            terminal
                .suspend(|| held.is_held() && held.remaining() > 2 * plan.kill_before_deadline());
            continue;
        }
        if held.renewals() != renewals {
            renewals = held.renewals();
            tracing::debug!(
                renewals,
                remaining_ms = held.remaining().as_millis(),
                "lease renewed"
            );
        }
        if unguarded.is_none() {
            let told = if group.watchdog_exited() {
                Err(std::io::Error::other("the watchdog exited"))
            } else if held.is_held() {
                watchdog.kill_at(kill_at(held))
            } else {
                Ok(())
            };
            if let Err(e) = told {
                // Nothing would stop the command should we stall or die: stop it now.
                tracing::warn!(error = %e, "the command is no longer guarded; stopping it");
                unguarded = Some(e);
                stop.kill_by(Instant::now());
            }
        }
        if stop.killed {
            // A process forking as it was killed may have started another one.
            group.signal(Signal::SIGKILL);
        }
        let kill_at = stop.kill_at.filter(|_| !stop.killed);
        tokio::select! {
            _ = children.recv() => {}
            _ = tick.tick() => {}
            (count, signal) = signals.after(seen) => {
                let first = stop.reason.is_none() && count == seen + 1;
                seen = count;
                if first {
                    // Passed on as is: the command may handle it (a clean shutdown on SIGTERM).
                    tracing::info!(%signal, grace_ms = plan.grace.as_millis(), "stopping the command");
                    group.signal(signal);
                    stop.reason = Some(Reason::Signal(signal));
                    stop.kill_by(Instant::now() + plan.grace);
                } else {
                    // A second signal: stop now.
                    group.signal(Signal::SIGKILL);
                    stop.killed = true;
                    stop.reason.get_or_insert(Reason::Signal(signal));
                }
            }
            () = held.lost(), if !stop.lost => {
                stop.lost = true;
                let now = Instant::now();
                if held.loss() == Some(LossReason::TokenGone) {
                    // The keys are gone from a majority: someone else may hold the lock now.
                    stop.kill_by(now);
                } else {
                    if stop.reason.is_none() {
                        group.signal(Signal::SIGTERM);
                    }
                    stop.kill_by(now + plan.grace);
                    let deadline = held.deadline().checked_sub(plan.kill_before_deadline());
                    stop.kill_by(deadline.unwrap_or(now).max(now));
                }
                stop.reason.get_or_insert(Reason::Lost);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                group.signal(Signal::SIGKILL);
                stop.killed = true;
            }
        }
    }
    terminal.take_back();
    let expired = Instant::now() >= held.deadline();
    watchdog.dismiss(group.watchdog_exited()).await;
    if let Some(e) = unguarded {
        return Err(anyhow::Error::from(e).context("the command was stopped"));
    }
    Ok(match (stop.reason, group.leader()) {
        (Some(Reason::Signal(signal)), _) => Outcome::Stopped(signal),
        // Over only after the lease's deadline: it did not end on its own in time, the
        // watchdog stopped it (we were not running to renew or to see it).
        (None, _) if expired => Outcome::Expired,
        (_, Some(ended)) => Outcome::Exited(ended),
        // Lost (the library reports it), or no status (cannot happen once the group is gone).
        (_, None) => Outcome::Exited(Ended::Signal(Signal::SIGKILL as i32)),
    })
}

/// Waits until the lease leaves the command more than its stop needs: a command started with
/// its SIGKILL already due would be killed at once. The library renews a short first lease (a
/// lock handed over in line) before the body starts; this waits only when that renewal failed,
/// for the next one, or for the loss or a signal, which end the hold before the command runs.
async fn room_to_run(held: &Held, signals: &mut Termination, plan: Plan) -> Option<Outcome> {
    let needed = plan.kill_before_deadline() + POLL;
    while held.is_held() && held.remaining() <= needed {
        tokio::select! {
            (_, signal) = signals.after(0) => return Some(Outcome::Stopped(signal)),
            () = held.lost() => {}
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    (!held.is_held())
        .then(|| Outcome::NotStarted("the lock was lost before the command could start".into()))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

//! The watchdog: a small process (this binary, started as `quorumlock __watchdog`) that enforces
//! the lease on the command whatever becomes of `exec` — killed (even by SIGKILL), crashed,
//! stopped (SIGSTOP, a debugger), its runtime frozen, swapped out.
//!
//! Nothing inside a process can act on its own SIGKILL or run while it is stopped, and the
//! parent-death signal reaches only the command's first process. So `exec` starts the watchdog
//! before the command and keeps the write end of a pipe to the watchdog's stdin. Through it,
//! `exec` says which process group the command runs in, then the moment by which the command
//! must be stopped (the lease's deadline, less a margin), again after every renewal. The
//! watchdog kills every process of the command:
//!
//! * when that moment passes without a newer one (`exec` stopped renewing, whatever its state);
//! * when the pipe closes without `done` (the kernel closed it because `exec` died).
//!
//! "Every process of the command" is the command's process group and every descendant of
//! `exec` (but the watchdog), found through `/proc`: that covers what left the group (`setsid`,
//! `set -m`). Once `exec` is dead its orphans are reparented away from it, so the watchdog also
//! remembers every descendant it has seen (it looks every [`SCAN`]); a process started and
//! orphaned within that last moment before `exec` died can escape it.
//!
//! Protocol on the watchdog's stdin, one item per line: `guard <pgid> <exec pid>`, then any
//! number of `deadline <ns>` (on the clock of [`clock`]), then `done`.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::unistd::Pid;

use super::tree;

/// The first argument that makes the binary the watchdog.
const ARG: &str = "__watchdog";

/// How often the watchdog looks for the command's processes, to know them should `exec` die.
const SCAN: Duration = Duration::from_millis(50);

/// How long the watchdog keeps killing a command whose processes keep appearing (forking as
/// they are killed) before it looks at its pipe again.
const KILL_FOR: Duration = Duration::from_secs(2);

/// `true` when this process was started as a watchdog.
pub(crate) fn is_invoked() -> bool {
    std::env::args_os().nth(1).is_some_and(|arg| arg == ARG) && std::env::args_os().len() == 2
}

/// The clock the deadlines are given on, shared by `exec` and the watchdog: on Linux the boot
/// clock, which also counts time the machine spent suspended (the masters' clocks ran on).
fn clock() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    let id = nix::time::ClockId::CLOCK_BOOTTIME;
    #[cfg(not(target_os = "linux"))]
    let id = nix::time::ClockId::CLOCK_MONOTONIC;
    nix::time::clock_gettime(id).ok().map(Duration::from)
}

/// `exec`'s end: the running watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The last deadline sent.
    sent: Option<Instant>,
}

impl Watchdog {
    /// Starts the watchdog (this same binary), in a process group of its own so that Ctrl-C
    /// at a terminal, or a signal to `exec`'s group, does not reach it.
    ///
    /// # Errors
    ///
    /// The binary cannot be started again (for instance, it was deleted while running).
    pub(crate) fn start() -> io::Result<Watchdog> {
        let me = std::env::current_exe()?;
        let mut child = Command::new(me)
            .arg(ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog {
            child,
            stdin,
            sent: None,
        })
    }

    /// The watchdog's pid: our child, but not one of the command's processes.
    pub(crate) fn pid(&self) -> Option<Pid> {
        i32::try_from(self.child.id()).ok().map(Pid::from_raw)
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("the watchdog's pipe is closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()
    }

    /// Puts the command's process group, and every descendant of this process, under watch.
    ///
    /// # Errors
    ///
    /// The watchdog has exited (it cannot guard anything).
    pub(crate) fn guard(&mut self, pgid: Pid) -> io::Result<()> {
        self.send(&format!("guard {pgid} {}", nix::unistd::getpid()))
    }

    /// Tells the watchdog to kill the command at `at` unless a later moment follows. Sends
    /// nothing when `at` was already sent.
    ///
    /// # Errors
    ///
    /// The watchdog has exited, or the clock cannot be read.
    pub(crate) fn kill_at(&mut self, at: Instant) -> io::Result<()> {
        if self.sent == Some(at) {
            return Ok(());
        }
        // Read on both clocks as close together as can be; a moment already past is sent as
        // "now".
        let left = at.saturating_duration_since(Instant::now());
        let now = clock().ok_or_else(|| io::Error::other("cannot read the clock"))?;
        self.send(&format!("deadline {}", (now + left).as_nanos()))?;
        self.sent = Some(at);
        tracing::debug!(
            in_ms = left.as_millis(),
            "the watchdog stops the command unless renewed"
        );
        Ok(())
    }

    /// Stops the watch without killing anything (the command is over), and reaps the watchdog
    /// unless `reaped` says it was reaped already (with the command's processes).
    pub(crate) async fn dismiss(mut self, reaped: bool) {
        if let Some(mut stdin) = self.stdin.take() {
            // If it has already exited there is nothing left to tell it.
            let _ = stdin.write_all(b"done\n");
        }
        if reaped {
            return;
        }
        let mut child = self.child;
        // It exits as soon as it reads `done` (or sees the pipe close).
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    }
}

/// What `exec` said.
#[derive(Debug)]
enum Message {
    Guard {
        pgid: Pid,
        exec: Pid,
    },
    Deadline(Duration),
    Done,
    /// The pipe closed, or said something that makes no sense: `exec` is gone or broken.
    Gone,
}

impl Message {
    fn parse(line: &str) -> Message {
        let mut words = line.split_whitespace();
        let number = |word: Option<&str>| word.and_then(|w| w.parse::<u64>().ok());
        let pid = |n: u64| i32::try_from(n).ok().filter(|n| *n > 1).map(Pid::from_raw);
        match words.next() {
            Some("guard") => {
                let pgid = number(words.next()).and_then(pid);
                let exec = number(words.next()).and_then(pid);
                match (pgid, exec) {
                    (Some(pgid), Some(exec)) => Message::Guard { pgid, exec },
                    _ => Message::Gone,
                }
            }
            Some("deadline") => number(words.next()).map_or(Message::Gone, |ns| {
                Message::Deadline(Duration::from_nanos(ns))
            }),
            Some("done") => Message::Done,
            _ => Message::Gone,
        }
    }
}

/// The watchdog process itself: runs until `exec` says `done` or dies.
pub(crate) fn run() -> ExitCode {
    // Signals meant for `exec` (a terminal's Ctrl-C, `kill` of its process group, a hang-up)
    // must not end the watch: only the end of `exec` does.
    let mut ignored = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGPIPE,
    ] {
        ignored.add(signal);
    }
    if ignored.thread_block().is_err() {
        return ExitCode::FAILURE;
    }

    // The pipe is read on a thread of its own, so that the deadline is kept while no line
    // comes.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(Message::parse(&line)).is_err() {
                return;
            }
        }
        let _ = tx.send(Message::Gone);
    });

    let Ok(Message::Guard { pgid, exec }) = rx.recv() else {
        // `exec` ended before starting a command: nothing to guard.
        return ExitCode::SUCCESS;
    };
    let mut watch = Watch::new(pgid, exec);
    loop {
        let wait = watch
            .kill_at
            .and_then(|at| Some(at.saturating_sub(clock()?)))
            .map_or(SCAN, |left| left.min(SCAN));
        match rx.recv_timeout(wait) {
            Ok(Message::Deadline(at)) => {
                watch.kill_at = Some(at);
                watch.expired = false;
            }
            Ok(Message::Done) => return ExitCode::SUCCESS,
            Err(RecvTimeoutError::Timeout) => {}
            // End of file, or anything else: `exec` is gone and the command runs without the
            // lock.
            Ok(Message::Gone | Message::Guard { .. }) | Err(RecvTimeoutError::Disconnected) => {
                watch.kill_all();
                return ExitCode::SUCCESS;
            }
        }
        watch.scan();
        if let (Some(at), Some(now)) = (watch.kill_at, clock()) {
            watch.expired |= now >= at;
        }
        // Past the deadline, anything of the command is killed until `exec` either says
        // `done` or, renewed after all, sends a later deadline.
        if watch.expired {
            watch.kill_all();
        }
    }
}

/// The command under watch.
#[derive(Debug)]
struct Watch {
    pgid: Pid,
    /// `exec`, and when it started (to know it from a later process with its pid).
    exec: Option<(Pid, u64)>,
    /// Every process of the command seen so far, with when it started.
    known: HashMap<Pid, u64>,
    kill_at: Option<Duration>,
    expired: bool,
}

impl Watch {
    fn new(pgid: Pid, exec: Pid) -> Watch {
        Watch {
            pgid,
            exec: tree::process(exec).map(|p| (p.pid, p.start)),
            known: HashMap::new(),
            kill_at: None,
            expired: false,
        }
    }

    /// The command's live processes now: the group, the descendants of `exec`, the processes
    /// seen before that still run, and their descendants.
    fn command(&self, table: &[tree::Process]) -> Vec<tree::Process> {
        let me = nix::unistd::getpid();
        let running = |pid: Pid, start: u64| table.iter().any(|p| p.pid == pid && p.start == start);
        let mut roots: Vec<Pid> = self
            .known
            .iter()
            .filter(|(pid, start)| running(**pid, **start))
            .map(|(pid, _)| *pid)
            .collect();
        let exec = self.exec.filter(|(pid, start)| running(*pid, *start));
        roots.extend(exec.map(|(pid, _)| pid));
        roots.extend(table.iter().filter(|p| p.pgid == self.pgid).map(|p| p.pid));
        let mut found: Vec<tree::Process> = tree::descendants(table, &roots);
        found.extend(table.iter().filter(|p| roots.contains(&p.pid)));
        found.sort_by_key(|p| p.pid.as_raw());
        found.dedup_by_key(|p| p.pid);
        found.retain(|p| !p.zombie && p.pid != me && Some(p.pid) != exec.map(|(pid, _)| pid));
        found
    }

    /// Remembers the command's processes running now. While `exec` lives (the usual case, every
    /// [`SCAN`]) only its own tree is read, not the whole process table.
    fn scan(&mut self) {
        let me = nix::unistd::getpid();
        let exec = self
            .exec
            .filter(|(pid, start)| tree::process(*pid).is_some_and(|p| p.start == *start));
        let command = match exec.and_then(|(pid, _)| tree::descendants_of(pid)) {
            Some(found) => found.into_iter().filter(|p| p.pid != me).collect(),
            None => self.command(&tree::processes()),
        };
        self.known.retain(|pid, start| {
            tree::process(*pid).is_some_and(|p| p.start == *start && !p.zombie)
        });
        for p in command {
            self.known.insert(p.pid, p.start);
        }
    }

    /// SIGKILLs every process of the command until none is left (a process forking at that
    /// moment could start a new one), for at most [`KILL_FOR`].
    fn kill_all(&mut self) {
        let give_up = Instant::now() + KILL_FOR;
        loop {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            let command = self.command(&tree::processes());
            if command.is_empty() || Instant::now() >= give_up {
                return;
            }
            for p in command {
                // Gone already, or not ours to kill any more: nothing else to do about it.
                let _ = kill(p.pid, Signal::SIGKILL);
                self.known.insert(p.pid, p.start);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

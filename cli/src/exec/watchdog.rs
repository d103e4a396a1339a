//! The watchdog: a small process (`quorumlock watchdog`, hidden) that kills the command's whole
//! process group if `exec` dies without saying goodbye — SIGKILL, a crash, the OOM killer.
//!
//! Nothing inside a process can act on its own SIGKILL, and the parent-death signal reaches only
//! the command's first process, not what it started. So `exec` starts the watchdog before the
//! command and keeps the write end of a pipe to the watchdog's stdin. It writes the group's id
//! once the command runs, and `done` once the group is gone. If the pipe closes first, the
//! kernel closed it because `exec` died: the watchdog kills the group.
//!
//! Protocol on the watchdog's stdin, one item per line: `<pgid>`, then `done`.

use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

/// `exec`'s end: the running watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog (this same binary), in a process group of its own so that Ctrl-C
    /// at a terminal does not reach it.
    ///
    /// # Errors
    ///
    /// The binary cannot be started again (for instance, it was deleted while running).
    pub(crate) fn start() -> io::Result<Watchdog> {
        let me = std::env::current_exe()?;
        let mut child = Command::new(me)
            .arg("watchdog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Puts the command's process group under watch.
    ///
    /// # Errors
    ///
    /// The watchdog has exited (it cannot guard anything).
    pub(crate) fn guard(&mut self, pgid: Pid) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("the watchdog's pipe is closed"))?;
        writeln!(stdin, "{pgid}")?;
        stdin.flush()
    }

    /// Stops the watch without killing anything (the group is gone), and reaps the watchdog.
    pub(crate) async fn dismiss(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // If it has already exited there is nothing left to tell it.
            let _ = stdin.write_all(b"done\n");
        }
        let mut child = self.child;
        // It exits as soon as it reads `done` (or sees the pipe close).
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
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

    let mut lines = io::stdin().lock().lines();
    let Some(pgid) = lines
        .next()
        .and_then(Result::ok)
        .and_then(|line| line.trim().parse::<i32>().ok())
        .filter(|pgid| *pgid > 1)
    else {
        // `exec` ended before starting a command: nothing to guard.
        return ExitCode::SUCCESS;
    };
    match lines.next() {
        Some(Ok(line)) if line.trim() == "done" => ExitCode::SUCCESS,
        // End of file, or anything else: `exec` is gone and the group runs without the lock.
        _ => {
            kill_group(Pid::from_raw(pgid));
            ExitCode::SUCCESS
        }
    }
}

/// SIGKILLs the group until none of it is left (a process forking at that moment could start
/// a new member), for at most two seconds.
fn kill_group(pgid: Pid) {
    let give_up = Instant::now() + Duration::from_secs(2);
    while Instant::now() < give_up {
        match killpg(pgid, Signal::SIGKILL) {
            Err(Errno::ESRCH) => return,
            Ok(()) | Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

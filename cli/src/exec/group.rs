//! The command, running in a process group of its own: one signal reaches it and everything it
//! started, and "the command is over" means every process it started is gone — not only the
//! one `exec` started. The lock is released only after that.
//!
//! On Linux, `exec` is also the *subreaper* of its descendants: when a process of the command
//! exits and leaves children behind, they become ours, wherever they went — another process
//! group (`set -m`), another session (`setsid`). So the command is over when `exec` has no
//! child left but the watchdog, and a signal meant for the command reaches, besides the group,
//! every descendant that left it (found through `/proc`, see `tree`).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::tree;

/// How the command's first process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It exited with this code.
    Code(i32),
    /// A signal (this number) killed it.
    Signal(i32),
}

/// A running command and its process group.
#[derive(Debug)]
pub(crate) struct CommandGroup {
    /// The group's id: the pid of the command's first process, its leader.
    pgid: Pid,
    leader: Option<Ended>,
    empty: bool,
    /// A process of the group was stopped (SIGTSTP, SIGTTIN, SIGSTOP) since the last look.
    stopped: bool,
    /// The watchdog, our child too but not part of the command.
    watchdog: Option<Pid>,
    /// The watchdog exited (and was reaped here, with the command's processes).
    watchdog_exited: bool,
}

/// Makes this process the subreaper of its descendants (Linux), so that processes the command
/// leaves behind are reparented to us and stay visible until they exit.
pub(crate) fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::debug!(error = %e, "cannot become the subreaper of the command's processes");
    }
}

impl CommandGroup {
    /// Starts `argv` with `env` added, as the leader of a new process group. On Linux it is
    /// also killed (SIGKILL) if this process dies first.
    ///
    /// # Errors
    ///
    /// The command could not be started (not found, not executable).
    /// `watchdog` is our child that is not part of the command.
    pub(crate) fn spawn(
        argv: &[String],
        env: &[(&str, String)],
        watchdog: Option<Pid>,
    ) -> io::Result<Self> {
        let Some((program, args)) = argv.split_first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0);
        die_with_parent(&mut cmd);
        let child = cmd.spawn()?;
        let pid = i32::try_from(child.id())
            .map_err(|_| io::Error::other("the command's pid does not fit a pid_t"))?;
        // The `Child` handle is not used to wait: `poll` reaps the leader with the rest of the
        // group. Dropping it neither waits nor kills.
        drop(child);
        Ok(CommandGroup {
            pgid: Pid::from_raw(pid),
            leader: None,
            empty: false,
            stopped: false,
            watchdog,
            watchdog_exited: false,
        })
    }

    /// The process group's id (the leader's pid).
    pub(crate) fn id(&self) -> Pid {
        self.pgid
    }

    /// How the leader ended, once it has.
    pub(crate) fn leader(&self) -> Option<Ended> {
        self.leader
    }

    /// Sends `signal` to every process of the group, and to every descendant that left it.
    /// Processes that are already gone are fine.
    pub(crate) fn signal(&self, signal: Signal) {
        if self.empty {
            return;
        }
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(error = %e, %signal, "cannot signal the command's processes"),
        }
        // The group's members got it once already: a second copy of SIGINT could reach a
        // handler twice.
        for p in tree::my_descendants(self.watchdog) {
            if p.pgid != self.pgid {
                match kill(p.pid, signal) {
                    Ok(()) | Err(Errno::ESRCH) => {}
                    Err(e) => tracing::warn!(error = %e, %signal, pid = %p.pid,
                        "cannot signal a process the command started"),
                }
            }
        }
    }

    /// Reaps whatever of the command has exited, and says whether the command is over: the
    /// leader has exited and no process it started is left, in its group or out of it.
    pub(crate) fn poll(&mut self) -> bool {
        if self.empty {
            return true;
        }
        let none_left = self.reap();
        // Until the leader is reaped its zombie is our child, so this is never true before
        // `reap` has recorded the leader's status.
        // Without `/proc` (not Linux) the group is all that can be seen.
        self.empty = self.leader.is_some()
            && (none_left
                || (!self.has_children() && killpg(self.pgid, None) == Err(Errno::ESRCH)));
        self.empty
    }

    /// `true` once the watchdog has exited (it was reaped here).
    pub(crate) fn watchdog_exited(&self) -> bool {
        self.watchdog_exited
    }

    /// `true` once after a process of the group was stopped (Ctrl-Z at a terminal).
    pub(crate) fn take_stopped(&mut self) -> bool {
        std::mem::take(&mut self.stopped)
    }

    /// Reaps every child of ours that has exited: the command's processes, and those they left
    /// behind, which are ours as their subreaper. Returns `true` when we have no child left at
    /// all.
    fn reap(&mut self) -> bool {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == self.pgid => {
                    self.leader = Some(Ended::Code(code));
                }
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == self.pgid => {
                    self.leader = Some(Ended::Signal(signal as i32));
                }
                Ok(WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _))
                    if Some(pid) == self.watchdog =>
                {
                    self.watchdog_exited = true;
                }
                Ok(WaitStatus::Stopped(pid, _)) if Some(pid) != self.watchdog => {
                    self.stopped = true;
                }
                Ok(WaitStatus::StillAlive) => return false,
                // A process the command left behind, adopted by us and now reaped.
                Ok(_) | Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot wait for the command's processes");
                    return false;
                }
            }
        }
    }

    /// Whether a child of ours other than the watchdog exists: a process of the command, or
    /// one it left behind (possibly exited and not reaped yet).
    fn has_children(&self) -> bool {
        let me = nix::unistd::getpid();
        tree::processes()
            .iter()
            .any(|p| p.ppid == me && Some(p.pid) != self.watchdog)
    }
}

impl Drop for CommandGroup {
    /// A group still running when its handle goes away (the hold was dropped: the lock is being
    /// given up) must not run on without the lock.
    fn drop(&mut self) {
        if !self.empty {
            self.signal(Signal::SIGKILL);
        }
    }
}

/// On Linux, asks the kernel to SIGKILL the command when this process dies, however it dies
/// (even by SIGKILL, which nothing can catch). The watchdog covers the rest of the group.
///
/// The kernel ties the signal to the *thread* that spawned the child. `exec` spawns from the
/// future run by `block_on` on the main thread, which lives as long as the process.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the hook runs in the forked child before `exec`, where only async-signal-safe
    // calls are allowed. It makes two system calls (`prctl`, `getppid`) and builds errors from
    // raw errno values; it neither allocates nor takes locks.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
            // The parent may have died between the fork and the prctl: then nothing would
            // ever send the signal, so do not start the command at all.
            if u32::try_from(nix::unistd::getppid().as_raw()).ok() != Some(parent) {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

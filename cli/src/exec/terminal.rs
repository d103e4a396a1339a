//! At a terminal, the command gets the foreground, as a shell gives it to a job: it can read the
//! terminal (a background process group would be stopped by SIGTTIN), and Ctrl-C or Ctrl-\ reach
//! it directly, once — not once from the terminal and once more from `exec`. Ctrl-Z stops the
//! command and `exec` with it; `fg` resumes both, unless the lease ran out in between.
//!
//! Away from a terminal (cron, systemd, a pipeline, a test) this does nothing: `exec` is the one
//! that receives signals, and it passes them on.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use nix::sys::signal::{killpg, raise, SigSet, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};

/// The terminal, while the command's group has it.
#[derive(Debug)]
pub(crate) struct Terminal {
    /// Our own process group, to give the terminal back to; `None` when there is no terminal
    /// to hand over.
    ours: Option<Pid>,
    command: Pid,
}

impl Terminal {
    /// Gives the terminal's foreground to the command's group `pgid`, if stdin is a terminal
    /// whose foreground is ours.
    pub(crate) fn hand_over(pgid: Pid) -> Terminal {
        let stdin = std::io::stdin();
        let ours = getpgrp();
        let foreground = stdin.is_terminal() && tcgetpgrp(stdin.as_fd()) == Ok(ours);
        let handed = foreground && tcsetpgrp(stdin.as_fd(), pgid).is_ok();
        if handed {
            // The command may have touched the terminal before it was its own, and been
            // stopped for it.
            let _ = killpg(pgid, Signal::SIGCONT);
        }
        Terminal {
            ours: handed.then_some(ours),
            command: pgid,
        }
    }

    /// `true` when the command has the terminal.
    pub(crate) fn is_interactive(&self) -> bool {
        self.ours.is_some()
    }

    /// The command was stopped from the terminal (Ctrl-Z): take the terminal back and stop
    /// this process too, so the shell regains control. When the shell continues us, continue
    /// the command — if `still_held()` says the lock is still ours; otherwise kill it.
    pub(crate) fn suspend(&self, still_held: impl Fn() -> bool) {
        let Some(ours) = self.ours else { return };
        give_back(ours);
        // Stops the whole process until SIGCONT (`fg` or `bg`).
        let _ = raise(Signal::SIGSTOP);
        if !still_held() {
            let _ = killpg(self.command, Signal::SIGKILL);
            return;
        }
        let stdin = std::io::stdin();
        // After `fg` the foreground is ours again: hand it on. After `bg` it is not.
        if tcgetpgrp(stdin.as_fd()) == Ok(ours) {
            let _ = tcsetpgrp(stdin.as_fd(), self.command);
        }
        let _ = killpg(self.command, Signal::SIGCONT);
    }

    /// Gives the terminal back to our process group (the command is over).
    pub(crate) fn take_back(mut self) {
        if let Some(ours) = self.ours.take() {
            give_back(ours);
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(ours) = self.ours.take() {
            give_back(ours);
        }
    }
}

/// Makes `ours` the terminal's foreground group again. We are in the background at that moment,
/// so `tcsetpgrp` would stop us with SIGTTOU unless it is blocked.
fn give_back(ours: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let Ok(previous) = ttou.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK) else {
        return;
    };
    let _ = tcsetpgrp(std::io::stdin().as_fd(), ours);
    let _ = previous.thread_set_mask();
}

//! What the CLI tests share: running the real binary against testkit masters, and a witness
//! that the commands run under `exec` write, to show that no two of them ever ran at once and
//! that none of their processes outlived them.

#![allow(dead_code)] // Each test file uses its own part.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::RedisNodes;

/// The binary, pointed at `nodes` through QUORUMLOCK_NODES, with stdin closed (so it never
/// takes a terminal's foreground from the test runner).
pub fn quorumlock(nodes: &RedisNodes) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    cmd.env("QUORUMLOCK_NODES", nodes.urls().join(","))
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// `quorumlock exec <extra> -- sh -c <script>`.
pub fn exec(nodes: &RedisNodes, extra: &[&str], script: &str) -> Command {
    let mut cmd = quorumlock(nodes);
    cmd.arg("exec").args(extra).args(["--", "sh", "-c", script]);
    cmd
}

/// Status, stdout and stderr, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Polls `done` every 10 ms until it holds or `within` has passed; says whether it held.
pub fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

pub fn wait_for_file(path: &Path, within: Duration) -> bool {
    wait_until(within, || path.exists())
}

/// `quorumlock status --json <resource>` on `nodes`.
pub fn json_status(nodes: &RedisNodes, resource: &str) -> Command {
    let mut cmd = quorumlock(nodes);
    cmd.args(["status", "--json", resource]);
    cmd
}

/// Runs `status` (a `status --json` command, made afresh for each look) until its report
/// satisfies `done`, for up to 10 s, and returns that look; panics with the last output,
/// saying what never came, if it never does. For states that stay once reached: an acquire
/// returns at a quorum and reaches the other masters after, and a holder's description is
/// written beside its lock while its command starts.
pub fn wait_for_report(
    mut status: impl FnMut() -> Command,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> (Output, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = status().output().unwrap();
        let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        if done(&report) {
            return (out, report);
        }
        assert!(
            Instant::now() < deadline,
            "{what} never came: {}",
            text(&out)
        );
        // Each look is a process (and over TLS, handshakes): a few a second, not a busy loop.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether every master in a `status --json` report satisfies `check`.
pub fn every_master(
    report: &serde_json::Value,
    check: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    report["nodes"]
        .as_array()
        .is_some_and(|nodes| !nodes.is_empty() && nodes.iter().all(check))
}

/// Waits until every master holds `resource`: a lock is taken once a quorum granted, and
/// reaches the last masters after.
pub fn wait_held_everywhere(nodes: &RedisNodes, resource: &str) {
    wait_for_report(
        || json_status(nodes, resource),
        "the lock on every master",
        |r| every_master(r, |n| n["state"] == "held"),
    );
}

/// Waits until every master has `resource`'s one reader: a read is taken once a quorum granted,
/// and reaches the last masters after.
pub fn wait_reader_everywhere(nodes: &RedisNodes, resource: &str) {
    wait_for_report(
        || json_status(nodes, resource),
        "the reader on every master",
        |r| every_master(r, |n| n["readers"] == 1),
    );
}

/// `true` while the process exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses: "1234 (sleep) S ...".
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// A command for `exec` that creates `started`, then runs until `release` exists: a holder that
/// holds for as long as a test needs, however slowly the rest of it runs.
pub fn hold_until(started: &Path, release: &Path) -> String {
    format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        release.display()
    )
}

/// A shared log the commands append to (`O_APPEND`: lines land in real-time order), and the
/// pids of the processes each command started.
pub struct Witness {
    dir: tempfile::TempDir,
}

impl Witness {
    pub fn new() -> Self {
        Witness {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    fn pids(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pids"))
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A command for `exec` that marks `mark` as started, then runs until `done` exists (see
    /// [`hold_until`]).
    pub fn until_done(&self, mark: &str) -> String {
        hold_until(&self.path(mark), &self.path("done"))
    }

    /// A command that logs `<name> start`, starts a grandchild that logs `<name> tick` every
    /// 50 ms until killed, and waits. `traps` runs first in the command's shell (for example
    /// `trap '' TERM`); `child_traps` in the grandchild's. Both record their pids.
    pub fn holder(&self, name: &str, traps: &str, child_traps: &str) -> String {
        let (log, pids) = (self.log(), self.pids(name));
        format!(
            "{traps}\n\
             echo \"{name} start\" >> {log}\n\
             ( {child_traps}\n while :; do echo \"{name} tick\" >> {log}; sleep 0.05; done ) &\n\
             echo $$ >> {pids}; echo $! >> {pids}\n\
             while :; do sleep 0.05; done",
            log = log.display(),
            pids = pids.display(),
        )
    }

    /// A command that logs `<name> start`, then `<name> saw <pid>` for every process of
    /// `earlier` still alive at that moment, then `<name> end`.
    pub fn follower(&self, name: &str, earlier: &str) -> String {
        format!(
            "echo \"{name} start\" >> {log}\n\
             for pid in $(cat {pids}); do\n\
               if [ -e /proc/$pid ] && [ \"$(cut -d' ' -f3 /proc/$pid/stat)\" != Z ]; then\n\
                 echo \"{name} saw $pid\" >> {log}\n\
               fi\n\
             done\n\
             echo \"{name} end\" >> {log}",
            log = self.log().display(),
            pids = self.pids(earlier).display(),
        )
    }

    /// Waits until `<name> start` is in the log.
    pub fn wait_started(&self, name: &str) -> bool {
        wait_until(Duration::from_secs(10), || {
            self.lines().iter().any(|l| *l == format!("{name} start"))
        })
    }

    pub fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The pids `holder` recorded for `name`: its shell, then its grandchild.
    pub fn recorded_pids(&self, name: &str) -> Vec<u32> {
        std::fs::read_to_string(self.pids(name))
            .unwrap_or_default()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    }

    /// Asserts that `second` ran entirely after `first`: nothing of `first` is logged after
    /// `second` started, `second` saw none of `first`'s processes alive, and it finished.
    pub fn assert_one_after_the_other(&self, first: &str, second: &str) {
        let lines = self.lines();
        let start = lines
            .iter()
            .position(|l| *l == format!("{second} start"))
            .unwrap_or_else(|| panic!("{second} never started: {lines:#?}"));
        let overlapping: Vec<_> = lines[start..]
            .iter()
            .filter(|l| l.starts_with(&format!("{first} ")))
            .collect();
        assert!(
            overlapping.is_empty(),
            "{first} ran after {second} started: {overlapping:?}\n{lines:#?}"
        );
        let saw = format!("{second} saw ");
        assert!(
            !lines.iter().any(|l| l.starts_with(&saw)),
            "{second} saw processes of {first} alive: {lines:#?}"
        );
        assert!(
            lines.iter().any(|l| *l == format!("{second} end")),
            "{second} did not finish: {lines:#?}"
        );
    }

    /// Asserts that every process `name` started is gone (allowing a moment for the kernel to
    /// deliver a SIGKILL to a group it was just sent to).
    pub fn assert_all_gone(&self, name: &str) {
        let pids = self.recorded_pids(name);
        assert_eq!(pids.len(), 2, "{name} recorded its shell and grandchild");
        for pid in pids {
            assert!(
                wait_until(Duration::from_secs(5), || !alive(pid)),
                "process {pid} of {name} survived: {:#?}",
                self.lines()
            );
        }
    }
}

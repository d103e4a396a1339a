//! `quorumlock exec` never lets two holders run at once, even when the command's processes leave
//! its process group, when quorumlock itself is stalled, or when a hold without a command has
//! nothing to read on stdin.
//!
//! The commands append to one log (`O_APPEND`: its order is the order of events); the second
//! holder's command logs its start and which of the first one's processes it saw alive.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{alive, exec, quorumlock, text, wait_until, Witness};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::RedisNodes;

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).unwrap())
}

/// A running `quorumlock`, its output going to files of the witness (a pipe would keep the test
/// waiting for as long as any process of the command lives: a survivor must fail the test, not
/// hang it).
struct Running {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

fn spawn(witness: &Witness, name: &str, mut cmd: Command) -> Running {
    let out = witness.path(&format!("{name}.stdout"));
    let err = witness.path(&format!("{name}.stderr"));
    let child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    Running { child, out, err }
}

impl Running {
    fn finish(mut self) -> Output {
        let status = self.child.wait().unwrap();
        Output {
            status,
            stdout: std::fs::read(&self.out).unwrap(),
            stderr: std::fs::read(&self.err).unwrap(),
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap()
    }
}

/// Ends whatever the first holder left running when the test ends, passed or failed (before the
/// witness's directory goes): a stopped quorumlock is continued, and the processes the command
/// left behind are told to stop (their loops end once the release file exists), then killed by
/// pid if they have not.
struct Cleanup<'a> {
    witness: &'a Witness,
    stopped: Option<Pid>,
}

impl Cleanup<'_> {
    fn new(witness: &Witness) -> Cleanup<'_> {
        Cleanup {
            witness,
            stopped: None,
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.witness.path("release"), "");
        if let Some(pid) = self.stopped {
            let _ = kill(pid, Signal::SIGCONT);
        }
        let left = left_behind(self.witness);
        if !wait_until(Duration::from_secs(2), || left.iter().all(|p| !alive(*p))) {
            let dir = self.witness.path("");
            for p in left {
                // Only a process of ours: its command line names the witness's directory.
                let ours = std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|cmd| {
                    String::from_utf8_lossy(&cmd).contains(&*dir.to_string_lossy())
                });
                if ours && alive(p) {
                    let _ = kill(Pid::from_raw(i32::try_from(p).unwrap()), Signal::SIGKILL);
                }
            }
        }
    }
}

/// A command that logs `A start`, leaves behind two processes outside its process group — one
/// in a session of its own (`setsid`), one a job of a shell with job control (`set -m`) — that
/// log `A tick` every 50 ms until `release` exists, and records their pids. It then exits at
/// once (`linger` false) or stays (`linger` true) until killed.
fn leaver(witness: &Witness, release: &std::path::Path, linger: bool) -> String {
    let log = witness.log();
    let pids = witness.path("A.pids");
    let tick = format!(
        "while [ ! -e {release} ]; do echo \"A tick\" >> {log}; sleep 0.05; done",
        release = release.display(),
        log = log.display()
    );
    let stay = if linger {
        "while :; do sleep 0.05; done"
    } else {
        "exit 0"
    };
    format!(
        "setsid sh -c 'echo $$ >> {pids}; {tick}' < /dev/null > /dev/null 2>&1 &\n\
         bash -c 'set -m; (echo $BASHPID >> {pids}; {tick}) < /dev/null > /dev/null 2>&1 &'\n\
         while [ \"$(cat {pids} 2>/dev/null | wc -l)\" -lt 2 ]; do sleep 0.01; done\n\
         echo \"A start\" >> {log}\n\
         {stay}",
        pids = pids.display(),
        log = log.display(),
    )
}

/// The pids `leaver` recorded. (Its command waits for both before it logs `A start`: the
/// count reads 0, not an error that ends the wait, while the file does not exist yet.)
fn left_behind(witness: &Witness) -> Vec<u32> {
    std::fs::read_to_string(witness.path("A.pids"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// The second holder, waiting for the lock, running `witness.follower("B", "A")`.
fn follower(nodes: &RedisNodes, witness: &Witness, resource: &str) -> Running {
    spawn(
        witness,
        "B",
        exec(
            nodes,
            &["--resource", resource, "--wait", "30s"],
            &witness.follower("B", "A"),
        ),
    )
}

#[test]
fn the_lock_is_held_while_a_process_that_left_the_group_lives() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    let _cleanup = Cleanup::new(&witness);
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "left-the-group"],
            &leaver(&witness, &release, false),
        ),
    );
    assert!(witness.wait_started("A"));
    assert_eq!(left_behind(&witness).len(), 2);

    let second = follower(&nodes, &witness, "left-the-group");
    // The command itself is over; its two processes run on. Give the second holder the time to
    // (wrongly) start beside them, then let them end.
    let started_beside = wait_until(Duration::from_secs(2), || {
        witness.lines().iter().any(|l| l == "B start")
    });
    std::fs::write(&release, "").unwrap();
    let second = second.finish();
    let first = first.finish();

    assert!(!started_beside, "{:#?}", witness.lines());
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
}

#[test]
fn sigterm_stops_processes_that_left_the_group_before_the_lock_passes_on() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    let _cleanup = Cleanup::new(&witness);
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "left-then-term", "--grace", "500ms"],
            &leaver(&witness, &release, true),
        ),
    );
    assert!(witness.wait_started("A"));
    let left = left_behind(&witness);
    assert_eq!(left.len(), 2);

    kill(pid(&first.child), Signal::SIGTERM).unwrap();
    let second = follower(&nodes, &witness, "left-then-term").finish();
    let first = first.finish();

    assert_eq!(first.status.code(), Some(143), "{}", text(&first));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    for pid in left {
        assert!(
            !alive(pid),
            "process {pid} survived: {:#?}",
            witness.lines()
        );
    }
}

#[test]
fn sigkill_of_quorumlock_takes_processes_that_left_the_group_with_it() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    let _cleanup = Cleanup::new(&witness);
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "left-then-killed", "--ttl", "2s"],
            &leaver(&witness, &release, true),
        ),
    );
    assert!(witness.wait_started("A"));
    let left = left_behind(&witness);
    assert_eq!(left.len(), 2);
    // The watchdog learns the command's processes by looking every 50 ms; once quorumlock is
    // dead, those outside its group can no longer be traced back to it. Let it look a few
    // times first.
    std::thread::sleep(Duration::from_secs(1));

    kill(pid(&first.child), Signal::SIGKILL).unwrap();
    let second = follower(&nodes, &witness, "left-then-killed").finish();
    let first = first.finish();

    assert_eq!(first.status.code(), None, "{}", text(&first));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    for pid in left {
        assert!(
            !alive(pid),
            "process {pid} survived: {:#?}",
            witness.lines()
        );
    }
}

#[test]
fn a_lost_lock_stops_processes_that_left_the_group_before_the_lease_ends() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    let _cleanup = Cleanup::new(&witness);
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &[
                "--resource",
                "left-then-lost",
                "--ttl",
                "2s",
                "--grace",
                "10s",
            ],
            &leaver(&witness, &release, true),
        ),
    );
    assert!(witness.wait_started("A"));
    let left = left_behind(&witness);
    assert_eq!(left.len(), 2);

    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    // The loss is signalled before the lease ends; the lock can be taken again once the first
    // holder's keys expire.
    let stopped = wait_until(Duration::from_secs(10), || left.iter().all(|p| !alive(*p)));
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let first = first.finish();
    assert!(stopped, "{:#?}", witness.lines());
    assert_eq!(first.status.code(), Some(76), "{}", text(&first));
    let second = follower(&nodes, &witness, "left-then-lost").finish();
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
}

#[test]
fn a_stalled_quorumlock_still_stops_its_command_by_the_lease_deadline() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    let mut cleanup = Cleanup::new(&witness);
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "stalled", "--ttl", "2s"],
            &leaver(&witness, &release, true),
        ),
    );
    assert!(witness.wait_started("A"));
    let left = left_behind(&witness);
    assert_eq!(left.len(), 2);

    // quorumlock stops renewing; its lease runs out and the second holder gets the lock.
    let holder = pid(&first.child);
    kill(holder, Signal::SIGSTOP).unwrap();
    cleanup.stopped = Some(holder);
    let second = follower(&nodes, &witness, "stalled").finish();
    kill(holder, Signal::SIGCONT).unwrap();
    let first = first.finish();

    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    for pid in left {
        assert!(
            !alive(pid),
            "process {pid} survived: {:#?}",
            witness.lines()
        );
    }
    // Continued, quorumlock finds its command stopped and says that the lock was lost.
    assert_eq!(first.status.code(), Some(76), "{}", text(&first));
}

#[test]
fn a_hold_without_a_command_and_stdin_from_dev_null_lasts_until_a_signal() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut cmd = quorumlock(&nodes);
    // As a script's background job gets it: stdin is /dev/null.
    cmd.args(["exec", "--resource", "maintenance", "--wait", "forever"])
        .stdin(Stdio::null());
    let holder = spawn(&witness, "A", cmd);
    let locked = wait_until(Duration::from_secs(10), || {
        holder.stdout().contains("locked maintenance")
    });
    assert!(locked, "{}", holder.stdout());

    let busy = exec(&nodes, &["--resource", "maintenance", "-n"], "echo ran")
        .output()
        .unwrap();
    let mut holder = holder;
    let still_holding = holder.child.try_wait().unwrap().is_none();
    let pid = pid(&holder.child);
    if still_holding {
        kill(pid, Signal::SIGTERM).unwrap();
    }
    let holder = holder.finish();

    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));
    assert!(still_holding, "{}", text(&holder));
    assert_eq!(holder.status.code(), Some(143), "{}", text(&holder));
    let free = exec(&nodes, &["--resource", "maintenance", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
}

#[test]
fn a_hold_whose_stdin_is_already_closed_never_says_locked() {
    let nodes = RedisNodes::spawn(3).unwrap();
    // A pipe whose writer has already exited: the hold would end as soon as it began.
    let mut writer = Command::new("true").stdout(Stdio::piped()).spawn().unwrap();
    let read_end = writer.stdout.take().unwrap();
    assert!(writer.wait().unwrap().success());
    let out = quorumlock(&nodes)
        .args(["exec", "--resource", "maintenance"])
        .stdin(Stdio::from(read_end))
        .output()
        .unwrap();

    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("locked"),
        "{}",
        text(&out)
    );
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stdin"),
        "{}",
        text(&out)
    );
    let free = exec(&nodes, &["--resource", "maintenance", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
}

//! `quorumlock exec` never leaves its command running without the lock: after SIGTERM, SIGHUP,
//! SIGQUIT or SIGINT to quorumlock, after SIGKILL of quorumlock, and after the lock is lost, the
//! command's whole process group is gone before the next holder's command starts.
//!
//! Each holder's command starts a grandchild that logs a line every 50 ms; the next holder's
//! command logs its start and checks that none of the first one's processes is alive. The log is
//! appended to by every process, so its order is the order of events.

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::{Child, Output};
use std::time::Duration;

use common::{exec, text, wait_until, Witness};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::RedisNodes;

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).unwrap())
}

/// Starts `cmd` with its output in files of the witness: a pipe would keep the test waiting
/// for as long as any process of the command lives, and a survivor must fail the test, not
/// hang it.
fn spawn(witness: &Witness, name: &str, mut cmd: std::process::Command) -> Running {
    let out = witness.path(&format!("{name}.stdout"));
    let err = witness.path(&format!("{name}.stderr"));
    let child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    Running { child, out, err }
}

struct Running {
    child: Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
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
}

/// The second holder, waiting for the lock.
fn follow(nodes: &RedisNodes, witness: &Witness, resource: &str) -> Output {
    exec(
        nodes,
        &["--resource", resource, "--wait", "20s"],
        &witness.follower("B", "A"),
    )
    .output()
    .unwrap()
}

/// A holder whose command takes `signal` to quorumlock as given: SIGTERM and SIGQUIT end its
/// processes by their default action, while for SIGHUP it ignores the signal, so only the
/// SIGKILL after --grace ends it.
fn stops_on(signal: Signal) {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let ignore = if signal == Signal::SIGHUP {
        "trap '' HUP"
    } else {
        ""
    };
    let resource = format!("stop-on-{signal}");
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", &resource, "--ttl", "5s", "--grace", "300ms"],
            &witness.holder("A", ignore, ignore),
        ),
    );
    assert!(witness.wait_started("A"));
    assert!(wait_until(Duration::from_secs(5), || witness
        .recorded_pids("A")
        .len()
        == 2));

    kill(pid(&first.child), signal).unwrap();
    let second = follow(&nodes, &witness, &resource);
    let first = first.finish();

    assert_eq!(
        first.status.code(),
        Some(128 + signal as i32),
        "{}",
        text(&first)
    );
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    witness.assert_all_gone("A");
}

#[test]
fn sigterm_stops_the_whole_group_before_the_lock_passes_on() {
    stops_on(Signal::SIGTERM);
}

#[test]
fn sighup_ignored_by_the_command_is_followed_by_sigkill_before_the_lock_passes_on() {
    stops_on(Signal::SIGHUP);
}

#[test]
fn sigquit_stops_the_whole_group_before_the_lock_passes_on() {
    stops_on(Signal::SIGQUIT);
}

#[test]
fn sigkill_of_quorumlock_takes_the_whole_group_with_it() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    // The grandchild ignores every signal it can: only SIGKILL of the group ends it.
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "killed", "--ttl", "2s"],
            &witness.holder("A", "", "trap '' TERM HUP INT QUIT"),
        ),
    );
    assert!(witness.wait_started("A"));
    assert!(wait_until(Duration::from_secs(5), || witness
        .recorded_pids("A")
        .len()
        == 2));

    kill(pid(&first.child), Signal::SIGKILL).unwrap();
    // The lease is not released: the second holder gets it once it expires.
    let second = follow(&nodes, &witness, "killed");
    let first = first.finish();

    assert_eq!(first.status.code(), None, "{}", text(&first));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    witness.assert_all_gone("A");
}

#[test]
fn a_lost_lock_kills_the_group_before_the_lease_ends_whatever_the_grace() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let witness = Witness::new();
    // The command logs SIGTERM and carries on; its grandchild ignores SIGTERM. A 10 s grace
    // would let them run long after the lease: quorumlock must not wait for it.
    let trap = format!("trap 'echo \"A term\" >> {}' TERM", witness.log().display());
    let first = spawn(
        &witness,
        "A",
        exec(
            &nodes,
            &["--resource", "lost", "--ttl", "2s", "--grace", "10s"],
            &witness.holder("A", &trap, "trap '' TERM"),
        ),
    );
    assert!(witness.wait_started("A"));
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    // The loss is signalled: the masters come back, and the lock can be taken again as soon as
    // the first holder's keys expire.
    let termed = wait_until(Duration::from_secs(10), || {
        witness.lines().iter().any(|l| l == "A term")
    });
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    assert!(termed, "{:#?}", witness.lines());
    let second = follow(&nodes, &witness, "lost");
    let first = first.finish();

    assert_eq!(first.status.code(), Some(76), "{}", text(&first));
    assert!(text(&first).contains("lost"), "{}", text(&first));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
    witness.assert_all_gone("A");
}

#[test]
fn sigint_reaches_the_command_once_and_a_second_sigint_kills_it() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let trap = format!("trap 'echo \"A int\" >> {}' INT", witness.log().display());
    // quorumlock in a process group of its own, signalled as a terminal signals its
    // foreground job: the whole group at once.
    let mut cmd = exec(
        &nodes,
        &["--resource", "interrupted", "--grace", "20s"],
        &witness.holder("A", &trap, "trap '' INT"),
    );
    cmd.process_group(0);
    let first = spawn(&witness, "A", cmd);
    assert!(witness.wait_started("A"));
    let group = pid(&first.child);

    killpg(group, Signal::SIGINT).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        witness.lines().iter().any(|l| l == "A int")
    }));
    killpg(group, Signal::SIGINT).unwrap();
    let first = first.finish();

    assert_eq!(first.status.code(), Some(130), "{}", text(&first));
    let ints = witness.lines().iter().filter(|l| *l == "A int").count();
    assert_eq!(
        ints,
        1,
        "one SIGINT reached the command: {:#?}",
        witness.lines()
    );
    witness.assert_all_gone("A");
    let second = follow(&nodes, &witness, "interrupted");
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    witness.assert_one_after_the_other("A", "B");
}

#[test]
fn the_lock_is_held_until_processes_the_command_left_behind_exit() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let release = witness.path("release");
    // The command exits at once, leaving a background process that runs until told to stop.
    let script = format!(
        "(while [ ! -e {release} ]; do sleep 0.05; done; echo \"A left\" >> {log}) &\n\
         echo \"A start\" >> {log}; exit 3",
        release = release.display(),
        log = witness.log().display()
    );
    let first = spawn(
        &witness,
        "A",
        exec(&nodes, &["--resource", "left"], &script),
    );
    assert!(witness.wait_started("A"));
    // The command is over, its background process is not: the lock is still held.
    let busy = exec(&nodes, &["--resource", "left", "-n"], "echo ran")
        .output()
        .unwrap();
    std::fs::write(&release, "").unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));

    let first = first.finish();
    assert_eq!(first.status.code(), Some(3), "{}", text(&first));
    assert!(witness.lines().iter().any(|l| l == "A left"));
    let free = exec(&nodes, &["--resource", "left"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
}

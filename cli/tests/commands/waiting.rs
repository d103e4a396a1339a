//! Waiting for a busy lock as flock, `etcdctl lock` and `consul lock` do: `exec` blocks by
//! default (`-w` bounds the wait, `-n` makes one attempt), names the holder when it gives up,
//! and a waiter that gives up or is interrupted leaves the masters' line before it exits, so
//! that the next waiter is not held up by its ghost.

use crate::common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{
    exec, json_status, quorumlock, text, wait_for_file, wait_for_report, wait_held_everywhere,
    wait_until,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::RedisNodes;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A holder of `resource` that touches `<dir>/started` once it holds the lock and exits once
/// `<dir>/go` exists.
fn hold(nodes: &RedisNodes, resource: &str, dir: &Path, extra: &[&str]) -> Child {
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let mut args = vec![resource];
    args.extend_from_slice(extra);
    let child = exec(nodes, &args, &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_file(&started, Duration::from_secs(10)),
        "the holder never started"
    );
    child
}

/// The waiters in `resource`'s line on each master (the line is a sorted set beside the lock
/// key: its companion `:queue`).
fn lines(nodes: &RedisNodes, resource: &str) -> Vec<Vec<String>> {
    let key = quorumlock::companion_key(resource, ":queue");
    nodes
        .iter()
        .map(|server| {
            let mut conn = redis::Client::open(server.url())
                .unwrap()
                .get_connection_with_timeout(Duration::from_secs(2))
                .unwrap();
            redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query(&mut conn)
                .unwrap()
        })
        .collect()
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).unwrap())
}

#[test]
fn a_waiter_that_gives_up_or_is_interrupted_leaves_the_line_and_the_next_one_gets_the_lock_at_the_release(
) {
    let nodes = RedisNodes::spawn(5).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = hold(&nodes, "R", dir.path(), &[]);
    // The holder's acquire returned at a quorum (3 of 5): a waiter that reached one of the
    // other masters before it would be granted there rather than stand in that master's line.
    wait_held_everywhere(&nodes, "R");

    // Gives up after its wait.
    let timed_out = exec(&nodes, &["R", "-w", "1s"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(timed_out.status.code(), Some(75), "{}", text(&timed_out));
    assert!(stdout(&timed_out).is_empty(), "{}", text(&timed_out));
    let left = lines(&nodes, "R");
    assert!(
        left.iter().all(Vec::is_empty),
        "the waiter that gave up is still in line: {left:?}\n{}",
        text(&timed_out)
    );

    // Interrupted while waiting, by each signal a terminal or a supervisor sends.
    for (signal, code) in [
        (Signal::SIGINT, 130),
        (Signal::SIGTERM, 143),
        (Signal::SIGHUP, 129),
    ] {
        let waiter = exec(&nodes, &["R", "-w", "30s"], "echo ran")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || lines(&nodes, "R")
                .iter()
                .all(|line| line.len() == 1)),
            "the waiter never stood in line on every master: {:?}",
            lines(&nodes, "R")
        );
        kill(pid(&waiter), signal).unwrap();
        let out = waiter.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{signal}: {}", text(&out));
        let left = lines(&nodes, "R");
        assert!(
            left.iter().all(Vec::is_empty),
            "{signal}: the interrupted waiter is still in line: {left:?}\n{}",
            text(&out)
        );
    }

    // The next waiter is first in line: the release hands the lock to it.
    let next = exec(&nodes, &["R", "-w", "30s"], "echo ran")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || lines(&nodes, "R")
        .iter()
        .all(|line| line.len() == 1)));
    std::fs::write(dir.path().join("go"), "").unwrap();
    let released = Instant::now();
    assert!(holder.wait().unwrap().success());
    let out = next.wait_with_output().unwrap();
    let waited = released.elapsed();
    println!("the next waiter ran {waited:?} after the release");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out).trim(), "ran", "{}", text(&out));
    // No ghost was ahead of it: it stood alone in every line above, and the release handed the
    // lock to it (a ghost would have held it up for its entry lease, 10 s at the default TTL).
}

#[test]
fn an_interrupted_campaign_leaves_the_line_too() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        started.display(),
        go.display()
    );
    let mut leader = quorumlock(&nodes)
        .args(["elect", "sched", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(10)));
    let candidate = quorumlock(&nodes)
        .args(["elect", "sched", "--", "echo", "led"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || lines(&nodes, "sched")
            .iter()
            .all(|line| line.len() == 1)),
        "the candidate never stood in line: {:?}",
        lines(&nodes, "sched")
    );
    kill(pid(&candidate), Signal::SIGTERM).unwrap();
    let out = candidate.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out));
    let left = lines(&nodes, "sched");
    assert!(
        left.iter().all(Vec::is_empty),
        "the candidate that stepped out is still in line: {left:?}\n{}",
        text(&out)
    );
    std::fs::write(&go, "").unwrap();
    assert!(leader.wait().unwrap().success());
}

#[test]
fn exec_waits_for_a_busy_lock_by_default_and_n_makes_one_attempt() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = hold(&nodes, "job", dir.path(), &[]);
    let once = exec(&nodes, &["job", "-n"], "echo ran").output().unwrap();
    assert_eq!(once.status.code(), Some(75), "{}", text(&once));
    assert!(stdout(&once).is_empty(), "{}", text(&once));

    let waiter = exec(&nodes, &["job"], "echo ran")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert!(holder.wait().unwrap().success());
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out).trim(), "ran", "{}", text(&out));

    let help = quorumlock(&nodes)
        .args(["exec", "--help"])
        .output()
        .unwrap();
    let help = stdout(&help);
    assert!(
        help.contains("without -w or -n, exec waits as long as the lock is busy"),
        "{help}"
    );
    assert!(help.contains("like `flock -n`"), "{help}");
}

#[test]
fn a_busy_lock_names_its_holder_and_a_writer_is_told_of_the_readers() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = hold(&nodes, "report", dir.path(), &[]);
    // The holder's description is written beside the lock while its command starts.
    let pid = holder.id();
    wait_for_report(
        || json_status(&nodes, "report"),
        "the holder's description",
        |r| r["holder"]["pid"] == pid,
    );
    let out = exec(&nodes, &["report", "-w", "300ms"], "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("held by pid {} on ", holder.id())),
        "{said}"
    );
    assert!(said.contains("running sh -c"), "{said}");
    assert!(said.contains("masters granted (2 needed)"), "{said}");
    assert!(!said.contains("another token"), "{said}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert!(holder.wait().unwrap().success());

    let dir = tempfile::tempdir().unwrap();
    let mut reader = hold(&nodes, "catalog", dir.path(), &["--read"]);
    let out = exec(&nodes, &["catalog", "--write", "-n"], "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    let said = stderr(&out);
    assert!(
        said.contains("\"catalog\" is read by 1 reader(s)"),
        "{said}"
    );
    assert!(!said.contains("another token"), "{said}");
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert!(reader.wait().unwrap().success());
}

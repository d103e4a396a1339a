//! What users of flock, etcdctl and consul expect of `quorumlock exec`: the resource as an
//! argument, a hint for a command without its `--`, a `--wait` that also waits out masters that
//! do not answer, refused TTLs and permit counts that cannot work, warnings for fencing that
//! cannot protect, and a `-v` that says what it waits for.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{
    exec, hold_until, json_status, quorumlock, text, wait_for_file, wait_for_report, wait_until,
    Witness,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::{RedisNodes, RedisServerBuilder};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_resource_can_be_an_argument_and_a_command_without_its_double_dash_gets_a_hint() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = quorumlock(&nodes)
        .args([
            "exec",
            "reports",
            "--",
            "sh",
            "-c",
            "echo $QUORUMLOCK_RESOURCE",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "reports");

    for args in [
        &["exec", "--resource", "x", "echo", "hi"][..],
        &["exec", "x", "echo", "hi"][..],
    ] {
        let out = quorumlock(&nodes).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            stderr(&out).contains("-- echo hi"),
            "{args:?}: {}",
            text(&out)
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out));
    }
}

#[test]
fn a_ttl_that_cannot_work_or_is_absurd_is_refused() {
    let nodes = RedisNodes::spawn(3).unwrap();
    for (ttl, why) in [("10ms", "too short"), ("1000000h", "too long")] {
        let out = exec(&nodes, &["--resource", "ttl", "--ttl", ttl], "echo ran")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{ttl}: {}", text(&out));
        assert!(stderr(&out).contains(why), "{ttl}: {}", text(&out));
        assert!(out.stdout.is_empty(), "{ttl}: {}", text(&out));
        // A term's lease is bounded the same way.
        let out = quorumlock(&nodes)
            .args(["elect", "--name", "ttl", "--ttl", ttl, "--", "echo", "ran"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "elect {ttl}: {}", text(&out));
        assert!(stderr(&out).contains(why), "elect {ttl}: {}", text(&out));
        assert!(out.stdout.is_empty(), "elect {ttl}: {}", text(&out));
    }
}

#[test]
fn wait_also_waits_out_masters_that_do_not_answer() {
    let nodes = RedisNodes::spawn(5).unwrap();
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    let waiter = exec(&nodes, &["--resource", "outage", "-w", "30s"], "echo ran")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Longer than a master's request timeout: the waiter has seen the outage by then.
    std::thread::sleep(Duration::from_millis(2500));
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
}

#[test]
fn permits_that_do_not_match_the_holders_are_refused() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!("touch {}; while :; do sleep 0.05; done", started.display());
    let mut holder = exec(
        &nodes,
        &["--resource", "exports", "--permits", "2"],
        &script,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(10)));
    // The K of the holders is read from their descriptions, written beside their permits while
    // their commands start.
    let pid = holder.id();
    wait_for_report(
        || json_status(&nodes, "exports"),
        "the permit holder's description",
        |r| {
            r["slots"]
                .as_array()
                .is_some_and(|slots| slots.iter().any(|s| s["holder"]["pid"] == pid))
        },
    );

    let other = exec(
        &nodes,
        &["--resource", "exports", "--permits", "3"],
        "echo ran",
    )
    .output()
    .unwrap();
    let same = exec(
        &nodes,
        &["--resource", "exports", "--permits", "2"],
        "echo ran",
    )
    .output()
    .unwrap();
    kill(
        Pid::from_raw(i32::try_from(holder.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(143));

    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    assert!(stderr(&other).contains("--permits 2"), "{}", text(&other));
    assert!(other.stdout.is_empty(), "{}", text(&other));
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    assert_eq!(String::from_utf8_lossy(&same.stdout).trim(), "ran");
}

#[test]
fn fencing_warns_for_readers_and_for_masters_without_aof() {
    let without_aof = RedisNodes::spawn(3).unwrap();
    let out = exec(
        &without_aof,
        &["--resource", "catalog", "--read", "--fencing"],
        "echo fence=${QUORUMLOCK_FENCE-none}",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stderr(&out).contains("--read"), "{}", text(&out));
    assert!(stderr(&out).contains("no AOF"), "{}", text(&out));

    let with_aof = RedisNodes::spawn_with(3, &RedisServerBuilder::new().aof(true)).unwrap();
    let out = exec(
        &with_aof,
        &["--resource", "catalog", "--fencing"],
        "echo fence=$QUORUMLOCK_FENCE",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!stderr(&out).contains("AOF"), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fence: u64 = stdout
        .trim()
        .strip_prefix("fence=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        fence >= 1_000_000,
        "a fence is at least the clock floor: {fence}"
    );
}

#[test]
fn verbose_exec_says_what_it_waits_for_and_when_it_has_the_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = quorumlock(&nodes)
        .args(["-v", "exec", "verbose", "-w", "5s", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stderr(&out).contains("taking the lock"), "{}", text(&out));
    assert!(stderr(&out).contains("acquired"), "{}", text(&out));
}

#[test]
fn verbose_says_where_a_waiter_stands_in_line() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let (holding, done) = (witness.path("holding"), witness.path("done"));
    let holder = exec(
        &nodes,
        &["--resource", "queue-me"],
        &hold_until(&holding, &done),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Waiters start once the lock is held, or the first would simply take it.
    assert!(wait_until(Duration::from_secs(10), || holding.exists()));
    let logged = |name: &str| witness.path(name);
    let waiter = |name: &str| {
        let log = std::fs::File::create(logged(name)).unwrap();
        quorumlock(&nodes)
            .args(["-v", "exec", "queue-me", "-w", "30s", "--", "true"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let read = |name: &str| std::fs::read_to_string(logged(name)).unwrap_or_default();
    let first = waiter("first.log");
    assert!(
        wait_until(Duration::from_secs(10), || read("first.log")
            .contains("waiting in line: place 1 of 1")),
        "{}",
        read("first.log")
    );
    let second = waiter("second.log");
    assert!(
        wait_until(Duration::from_secs(10), || read("second.log")
            .contains("waiting in line: place 2 of 2")),
        "{}",
        read("second.log")
    );
    std::fs::write(&done, "").unwrap();
    for mut child in [holder, first, second] {
        assert!(child.wait().unwrap().success());
    }
}

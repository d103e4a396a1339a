//! `exec --permits`, `exec --read` / `--write` and `elect`, as separate processes against real
//! masters: the log the commands append to shows how many ran at once, and in which terms.

use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::RedisNodes;

/// A command that logs `start <tag>`, works `secs`, and logs `end <tag>`.
fn job(witness: &Witness, tag: &str, secs: &str) -> String {
    let log = witness.log();
    format!(
        "echo \"start {tag}\" >> {log}; sleep {secs}; echo \"end {tag}\" >> {log}",
        log = log.display()
    )
}

/// The most commands running at once, from the log's start/end lines.
fn most_at_once(lines: &[String]) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for line in lines {
        if line.starts_with("start") {
            now += 1;
            most = most.max(now);
        } else if line.starts_with("end") {
            now = now.saturating_sub(1);
        }
    }
    most
}

fn wait_all(children: &mut [Child]) -> Vec<i32> {
    children
        .iter_mut()
        .map(|c| c.wait().unwrap().code().unwrap_or(-1))
        .collect()
}

#[test]
fn exec_with_permits_runs_at_most_k_commands_at_once() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut children: Vec<Child> = (0..5)
        .map(|i| {
            exec(
                &nodes,
                &["--resource", "exports", "--permits", "2", "-w", "30s"],
                &job(&witness, &i.to_string(), "0.3"),
            )
            .spawn()
            .unwrap()
        })
        .collect();
    assert_eq!(wait_all(&mut children), [0; 5]);
    let lines = witness.lines();
    assert_eq!(lines.len(), 10, "{lines:?}");
    assert_eq!(most_at_once(&lines), 2, "{lines:?}");
}

#[test]
fn exec_read_runs_beside_readers_and_write_runs_alone() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    // Each reader holds until `done` exists: the three overlap however late one of them starts.
    let done = witness.path("done");
    let read = |tag: &str| {
        format!(
            "echo \"start {tag}\" >> {log}; while [ ! -e {done} ]; do sleep 0.05; done; \
             echo \"end {tag}\" >> {log}",
            log = witness.log().display(),
            done = done.display()
        )
    };
    let mut readers: Vec<Child> = (0..3)
        .map(|i| {
            exec(
                &nodes,
                &["--resource", "catalog", "--read", "-w", "30s"],
                &read(&format!("read{i}")),
            )
            .spawn()
            .unwrap()
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || witness
        .lines()
        .iter()
        .filter(|l| l.starts_with("start read"))
        .count()
        == 3));
    let writer = exec(
        &nodes,
        &["--resource", "catalog", "--write", "-w", "30s"],
        &job(&witness, "write", "0.2"),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The readers end once the writer waits for them (its note is on a master).
    wait_for_report(
        || json_status(&nodes, "catalog"),
        "the writer's note",
        |r| {
            r["nodes"].as_array().is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n["writers_waiting"].as_u64().is_some_and(|w| w > 0))
            })
        },
    );
    std::fs::write(&done, "").unwrap();
    let writer = writer.wait_with_output().unwrap();
    assert_eq!(writer.status.code(), Some(0), "{}", text(&writer));
    assert_eq!(wait_all(&mut readers), [0; 3]);
    let lines = witness.lines();
    assert_eq!(most_at_once(&lines[..6]), 3, "readers share: {lines:?}");
    assert_eq!(
        &lines[6..],
        ["start write", "end write"],
        "the writer ran after every reader: {lines:?}"
    );
    let both = quorumlock(&nodes)
        .args(["exec", "--resource", "x", "--read", "--write", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
}

#[test]
fn elect_runs_one_leader_at_a_time_with_growing_terms_and_stops_on_sigterm() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let log = witness.log();
    let leader = |value: &str| {
        let mut cmd = quorumlock(&nodes);
        cmd.args(["elect", "--name", "sched", "--value", value, "--ttl", "3s", "--"])
            .args([
                "sh",
                "-c",
                &format!(
                    "echo \"start $QUORUMLOCK_FENCE\" >> {log}; sleep 0.3; echo \"end $QUORUMLOCK_FENCE\" >> {log}",
                    log = log.display()
                ),
            ]);
        cmd
    };
    let mut children: Vec<Child> = ["a", "b", "c"]
        .iter()
        .map(|v| leader(v).spawn().unwrap())
        .collect();
    assert_eq!(wait_all(&mut children), [0; 3]);
    let lines = witness.lines();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(most_at_once(&lines), 1, "{lines:?}");
    let terms: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|t| t.parse().unwrap())
        .collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");

    // A restarting candidate leads again and again until it is told to stop.
    let mut restarting = quorumlock(&nodes)
        .args(["elect", "--name", "loop", "--ttl", "3s", "--restart", "-c"])
        .arg(format!(
            "echo lead >> {}; sleep 0.1",
            witness.path("loop").display()
        ))
        .spawn()
        .unwrap();
    let led = |n: usize| {
        std::fs::read_to_string(witness.path("loop"))
            .unwrap_or_default()
            .lines()
            .count()
            >= n
    };
    assert!(wait_until(Duration::from_secs(10), || led(3)));
    kill(
        Pid::from_raw(i32::try_from(restarting.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(restarting.wait().unwrap().code(), Some(143));
    let status = quorumlock(&nodes)
        .args(["status", "loop"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0), "resigned: {}", text(&status));
}

#[test]
fn status_shows_permits_readers_and_the_leader() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let done = witness.path("done");
    // Each holder marks that it runs, then holds until `done` exists.
    let mut holders = vec![
        exec(
            &nodes,
            &["--resource", "exports", "--permits", "2"],
            &witness.until_done("permit"),
        )
        .spawn()
        .unwrap(),
        exec(
            &nodes,
            &["--resource", "catalog", "--read"],
            &witness.until_done("read"),
        )
        .spawn()
        .unwrap(),
    ];
    let mut elect = quorumlock(&nodes);
    elect
        .args(["elect", "--name", "sched", "--value", "host-a:80", "-c"])
        .arg(witness.until_done("leader"));
    holders.push(elect.spawn().unwrap());
    for mark in ["permit", "read", "leader"] {
        assert!(
            wait_for_file(&witness.path(mark), Duration::from_secs(10)),
            "{mark}"
        );
    }

    let status = |args: &[&str]| {
        let out = quorumlock(&nodes)
            .arg("status")
            .args(args)
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), shown, text(&out))
    };
    let (code, shown, all) = status(&["--permits", "2", "exports"]);
    assert_eq!(code, Some(0), "{all}");
    assert!(shown.contains("\"exports\": 1/2 permits free"), "{all}");
    assert_eq!(shown.matches(": held by ").count(), 1, "{all}");
    let (code, shown, all) = status(&["--permits", "2", "--json", "exports"]);
    assert_eq!(code, Some(0), "{all}");
    let json: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(json["free"], 1, "{json:#}");
    assert_eq!(json["slots"].as_array().unwrap().len(), 2, "{json:#}");

    // The read hold returned at a quorum: the last master gets it just after.
    wait_reader_everywhere(&nodes, "catalog");
    let (code, shown, all) = status(&["catalog"]);
    assert_eq!(code, Some(75), "{all}");
    assert!(
        shown.contains("read by 1+ reader(s), on 3/3 nodes"),
        "{all}"
    );
    let (_, shown, _) = status(&["--json", "catalog"]);
    let json: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(json["verdict"], "reading", "{json:#}");
    assert_eq!(json["nodes"][0]["readers"], 1, "{json:#}");

    let (code, shown, all) = status(&["sched"]);
    assert_eq!(code, Some(75), "{all}");
    assert!(shown.contains("leader: host-a:80"), "{all}");
    let (_, shown, _) = status(&["--json", "sched"]);
    let json: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(json["leader"], "host-a:80", "{json:#}");

    std::fs::write(&done, "").unwrap();
    assert_eq!(wait_all(&mut holders), [0; 3]);
    let (code, _, all) = status(&["--permits", "2", "exports"]);
    assert_eq!(code, Some(0), "{all}");
    let (code, _, all) = status(&["catalog"]);
    assert_eq!(code, Some(0), "{all}");
}

#[test]
fn metrics_show_waits_holds_gauges_and_node_errors_without_resource_names() {
    let mut nodes = RedisNodes::spawn(3).unwrap();
    nodes[2].kill().unwrap();
    let out = quorumlock(&nodes)
        .args([
            "--metrics",
            "exec",
            "--resource",
            "secret-resource-name",
            "--permits",
            "2",
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stderr);
    let line = |prefix: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix}: {shown}"))
            .to_owned()
    };
    assert!(line("quorumlock_wait_seconds_count{").contains("primitive=\"permit\""));
    assert!(line("quorumlock_wait_seconds_count{").contains("outcome=\"acquired\""));
    assert!(line("quorumlock_hold_seconds_count{primitive=\"permit\"}").ends_with(" 1"));
    assert!(line("quorumlock_held{primitive=\"permit\"}").ends_with(" 0"));
    assert!(line("quorumlock_waiting{primitive=\"permit\"}").ends_with(" 0"));
    let down = format!("node=\"127.0.0.1:{}\"", nodes[2].port());
    assert!(
        line("quorumlock_node_errors_total{").contains(&down),
        "{shown}"
    );
    assert!(!shown.contains("secret-resource-name"), "{shown}");
}

//! The wait line through the real binary: `quorumlock exec --wait` processes take their turns
//! one at a time in their arrival order, and `quorumlock status` shows the line on each master
//! and a key a release handed over to the first waiter (as `list` does).

use crate::common;

use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

use common::{exec, quorumlock, text, wait_for_file, wait_held_everywhere, wait_until, Witness};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::RedisNodes;
use serde_json::Value;

/// The `exec` processes a test started: any still running when the test ends (it failed) are
/// killed, by pid, and reaped.
#[derive(Default)]
struct Processes(Vec<Child>);

impl Processes {
    fn start(&mut self, mut cmd: std::process::Command) -> usize {
        self.0.push(cmd.spawn().unwrap());
        self.0.len() - 1
    }

    fn pid(&self, i: usize) -> Pid {
        Pid::from_raw(i32::try_from(self.0[i].id()).unwrap())
    }

    /// Waits up to `within` for every process to exit; their exit statuses, in start order
    /// (`None` for one still running).
    fn wait_all(&mut self, within: Duration) -> Vec<Option<ExitStatus>> {
        let deadline = Instant::now() + within;
        loop {
            let done: Vec<_> = self.0.iter_mut().map(|c| c.try_wait().unwrap()).collect();
            if done.iter().all(Option::is_some) || Instant::now() >= deadline {
                return done;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `exec` holding `resource` until `<witness>/done` exists, inside the witness's marker (so a
/// command that runs beside it sees it); returns once its command runs.
fn holder(nodes: &RedisNodes, witness: &Witness, resource: &str) -> std::process::Command {
    let (started, done) = (witness.path("holder.started"), witness.path("done"));
    exec(
        nodes,
        &["--resource", resource, "--ttl", "10s"],
        &format!(
            "{enter}\n touch {started}\n while [ ! -e {done} ]; do sleep 0.02; done\n {leave}",
            enter = enter(witness, "holder"),
            leave = leave(witness, "holder"),
            started = started.display(),
            done = done.display(),
        ),
    )
}

/// Shell lines that create the witness's marker file with O_EXCL (`set -C`) and log
/// `start <name>`; if another command is inside, they log `overlap <name>` and exit 1.
fn enter(witness: &Witness, name: &str) -> String {
    format!(
        "if ! ( set -C; echo {name} > {inside} ) 2>/dev/null; then\n\
           echo \"overlap {name}\" >> {log}; exit 1\n\
         fi\n\
         echo \"start {name}\" >> {log}",
        inside = witness.path("inside").display(),
        log = witness.log().display(),
    )
}

/// Shell lines that log `end <name>` and remove the marker.
fn leave(witness: &Witness, name: &str) -> String {
    format!(
        "echo \"end {name}\" >> {log}\n rm {inside}",
        inside = witness.path("inside").display(),
        log = witness.log().display(),
    )
}

/// A command that enters, works 50 ms, and leaves.
fn turn(witness: &Witness, name: &str) -> String {
    format!(
        "{}\n sleep 0.05\n {}",
        enter(witness, name),
        leave(witness, name)
    )
}

fn status_json(nodes: &RedisNodes, resource: &str) -> (Output, Value) {
    let out = quorumlock(nodes)
        .args(["status", "--json", resource])
        .output()
        .unwrap();
    let report =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    (out, report)
}

/// Each master's line in `report`: the waiters' ids, first to last.
fn lines(report: &Value) -> Vec<Vec<String>> {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            node["queue"]
                .as_array()
                .map(|queue| {
                    queue
                        .iter()
                        .map(|w| w["id"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// Polls `status --json` until every master's line has `len` waiters; the last report.
fn wait_for_line(nodes: &RedisNodes, resource: &str, len: usize) -> Value {
    let mut last = Value::Null;
    let reached = wait_until(Duration::from_secs(10), || {
        last = status_json(nodes, resource).1;
        lines(&last).iter().all(|line| line.len() == len)
    });
    assert!(
        reached,
        "the line never had {len} waiters on every master: {last:#}"
    );
    last
}

#[test]
fn status_shows_each_masters_line_in_arrival_order_and_a_key_handed_over_to_its_head() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut procs = Processes::default();
    let holding = procs.start(holder(&nodes, &witness, "report"));
    assert!(wait_for_file(
        &witness.path("holder.started"),
        Duration::from_secs(10)
    ));
    wait_held_everywhere(&nodes, "report");

    // Entry leases of ten node timeouts: 10 s with a 30 s TTL.
    let waiter = |name: &str| {
        exec(
            &nodes,
            &["--resource", "report", "--ttl", "30s", "--wait", "30s"],
            &turn(&witness, name),
        )
    };
    let first = procs.start(waiter("first"));
    let report = wait_for_line(&nodes, "report", 1);
    let first_id = lines(&report)[0][0].clone();
    procs.start(waiter("second"));
    let report = wait_for_line(&nodes, "report", 2);
    let second_id = lines(&report)[0][1].clone();

    let (out, report) = status_json(&nodes, "report");
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert_eq!(report["verdict"], "held", "{report:#}");
    assert_ne!(first_id, second_id);
    for (node, line) in report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(lines(&report))
    {
        assert_eq!(node["state"], "held", "{report:#}");
        assert_eq!(line, [first_id.clone(), second_id.clone()], "{report:#}");
        let queue = node["queue"].as_array().unwrap();
        let waited: Vec<u64> = queue
            .iter()
            .map(|w| w["waited_ms"].as_u64().unwrap())
            .collect();
        assert!(
            waited[0] >= waited[1],
            "the first has waited longer: {report:#}"
        );
        for w in queue {
            let lapses_in = w["lapses_in_ms"].as_u64().unwrap();
            assert!(
                lapses_in > 0 && lapses_in <= 10_000,
                "an entry lapses within its lease: {report:#}"
            );
        }
    }

    let table = quorumlock(&nodes)
        .args(["status", "report"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&table.stdout).into_owned();
    assert_eq!(table.status.code(), Some(75), "{}", text(&table));
    // The three masters agree on the line: it is shown once.
    let heading = "line on every master that answered (3), first to last:";
    assert_eq!(shown.matches("first to last:").count(), 1, "{shown}");
    let at = shown
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("no {heading:?}: {shown}"));
    let places: Vec<&str> = shown.lines().skip(at + 1).take(2).collect();
    assert!(
        places[0].starts_with(&format!("  1. waiter {first_id}  waited "))
            && places[1].starts_with(&format!("  2. waiter {second_id}  waited ")),
        "{shown}"
    );
    assert!(places.iter().all(|p| p.contains("lapses in")), "{shown}");

    // The first waiter, paused, cannot take the key its turn hands it: the masters keep it
    // reserved for that waiter, and the second waits behind it.
    kill(procs.pid(first), Signal::SIGSTOP).unwrap();
    std::fs::write(witness.path("done"), "").unwrap();
    assert!(procs.0[holding].wait().unwrap().success());
    let (out, report) = status_json(&nodes, "report");
    kill(procs.pid(first), Signal::SIGCONT).unwrap();
    assert_eq!(
        out.status.code(),
        Some(75),
        "handed over counts as held: {}",
        text(&out)
    );
    assert_eq!(report["verdict"], "handed_over", "{report:#}");
    assert_eq!(report["waiter"], first_id.as_str(), "{report:#}");
    assert_eq!(report["holding"], 3, "{report:#}");
    assert_eq!(report["holder"], Value::Null, "{report:#}");
    for node in report["nodes"].as_array().unwrap() {
        assert_eq!(node["state"], "reserved", "{report:#}");
        assert_eq!(node["waiter"], first_id.as_str(), "{report:#}");
        assert!(node["ttl_ms"].as_u64().unwrap() > 0, "{report:#}");
    }
    assert!(
        lines(&report).iter().all(|line| line.contains(&second_id)),
        "{report:#}"
    );

    let done = procs.wait_all(Duration::from_secs(20));
    assert!(
        done.iter().all(|s| s.is_some_and(|s| s.success())),
        "{done:?}: {:#?}",
        witness.lines()
    );
    assert_eq!(
        witness.lines(),
        [
            "start holder",
            "end holder",
            "start first",
            "end first",
            "start second",
            "end second"
        ],
    );
    let (out, report) = status_json(&nodes, "report");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(lines(&report).iter().all(Vec::is_empty), "{report:#}");
}

#[test]
fn status_and_list_say_a_key_is_handed_over_to_the_waiter_it_names() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut procs = Processes::default();
    let holding = procs.start(holder(&nodes, &witness, "job"));
    assert!(wait_for_file(
        &witness.path("holder.started"),
        Duration::from_secs(10)
    ));
    wait_held_everywhere(&nodes, "job");
    let waiting = procs.start(exec(
        &nodes,
        &["--resource", "job", "--ttl", "30s", "--wait", "30s"],
        &turn(&witness, "waiter"),
    ));
    let id = lines(&wait_for_line(&nodes, "job", 1))[0][0].clone();

    kill(procs.pid(waiting), Signal::SIGSTOP).unwrap();
    std::fs::write(witness.path("done"), "").unwrap();
    assert!(procs.0[holding].wait().unwrap().success());
    let table = quorumlock(&nodes).args(["status", "job"]).output().unwrap();
    let listed = quorumlock(&nodes)
        .args(["list", "--json"])
        .output()
        .unwrap();
    kill(procs.pid(waiting), Signal::SIGCONT).unwrap();
    let shown = String::from_utf8_lossy(&table.stdout).into_owned();
    assert_eq!(table.status.code(), Some(75), "{}", text(&table));
    assert!(
        shown.contains(&format!(
            "\"job\": handed over to waiter {id} on 3/3 nodes (quorum 2)"
        )),
        "{shown}"
    );
    let reserved = shown
        .lines()
        .filter(|l| l.contains(" reserved ") && l.contains(&format!("for {id}")))
        .count();
    assert_eq!(
        reserved, 3,
        "every master's row shows the reservation: {shown}"
    );
    assert!(!shown.contains("holder "), "nobody holds it yet: {shown}");
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");
    assert_eq!(listed[0]["resource"], "job", "{listed:#}");
    assert_eq!(listed[0]["state"], "handed-over", "{listed:#}");
    assert_eq!(listed[0]["waiter"], id.as_str(), "{listed:#}");
    assert_eq!(listed[0]["masters"], 3, "{listed:#}");

    let done = procs.wait_all(Duration::from_secs(20));
    assert!(
        done.iter().all(|s| s.is_some_and(|s| s.success())),
        "{done:?}: {:#?}",
        witness.lines()
    );
    assert_eq!(
        witness.lines(),
        ["start holder", "end holder", "start waiter", "end waiter"]
    );
}

#[test]
fn eight_exec_processes_waiting_for_one_resource_run_one_at_a_time_in_arrival_order() {
    const WAITERS: usize = 8;
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut procs = Processes::default();
    let holding = procs.start(holder(&nodes, &witness, "R"));
    assert!(wait_for_file(
        &witness.path("holder.started"),
        Duration::from_secs(10)
    ));
    wait_held_everywhere(&nodes, "R");

    // Each starts once the one before it has taken its place in line on every master.
    let mut ids = Vec::new();
    for i in 0..WAITERS {
        procs.start(exec(
            &nodes,
            &["--wait", "30s", "--resource", "R"],
            &turn(&witness, &i.to_string()),
        ));
        let report = wait_for_line(&nodes, "R", i + 1);
        ids = lines(&report)[0].clone();
    }
    let report = status_json(&nodes, "R").1;
    assert!(
        lines(&report).iter().all(|line| *line == ids),
        "every master has the same line: {report:#}"
    );

    std::fs::write(witness.path("done"), "").unwrap();
    let done = procs.wait_all(Duration::from_secs(20));
    let log = witness.lines();
    assert!(
        done[holding].is_some_and(|s| s.success()),
        "{done:?}: {log:#?}"
    );
    for (i, status) in done.iter().enumerate().skip(1) {
        assert!(
            status.is_some_and(|s| s.success()),
            "waiter {} exited {status:?}: {log:#?}",
            i - 1
        );
    }
    assert!(
        !log.iter().any(|l| l.starts_with("overlap")),
        "two commands ran at once: {log:#?}"
    );
    let expected: Vec<String> = ["holder".to_owned()]
        .into_iter()
        .chain((0..WAITERS).map(|i| i.to_string()))
        .flat_map(|name| [format!("start {name}"), format!("end {name}")])
        .collect();
    assert_eq!(log, expected, "one at a time, in arrival order");
    let (out, report) = status_json(&nodes, "R");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(lines(&report).iter().all(Vec::is_empty), "{report:#}");
}

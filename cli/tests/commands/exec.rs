//! `quorumlock exec`: the real binary against testkit masters — the lock, the exit codes, and the
//! habits it shares with `flock(1)` and `etcdctl lock`.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{
    exec, hold_until, json_status, quorumlock, text, wait_for_file, wait_for_report, wait_until,
    Witness,
};
use quorumlock_testkit::RedisNodes;

#[test]
fn exec_runs_the_command_exactly_once_across_four_concurrent_invocations() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs");
    let script = format!("echo run >> {}; sleep 1", log.display());
    let children: Vec<_> = (0..4)
        .map(|_| {
            exec(
                &nodes,
                &["--resource", "once", "--ttl", "3s", "-n"],
                &script,
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let codes: Vec<Option<i32>> = outputs.iter().map(|o| o.status.code()).collect();
    let runs = std::fs::read_to_string(&log).unwrap();
    assert_eq!(runs.lines().count(), 1, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(75)).count(),
        3,
        "{codes:?}"
    );
    let busy = outputs
        .iter()
        .find(|o| o.status.code() == Some(75))
        .unwrap();
    assert!(text(busy).contains("not acquired"), "{}", text(busy));
}

#[test]
fn exec_returns_the_commands_exit_code_and_passes_the_resource_and_fence() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = exec(
        &nodes,
        &["--resource", "job", "--fencing"],
        "echo \"$QUORUMLOCK_RESOURCE $QUORUMLOCK_FENCE\"; exit 7",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    // A fence is at least the master's clock in seconds × 10⁶, and grows from holder to holder.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (resource, fence) = stdout.trim().split_once(' ').unwrap();
    assert_eq!(resource, "job");
    let first: u64 = fence.parse().unwrap();
    assert!(first >= 1_000_000, "{first}");
    let again = exec(
        &nodes,
        &["--resource", "job", "--fencing"],
        "echo $QUORUMLOCK_FENCE",
    )
    .output()
    .unwrap();
    let second: u64 = String::from_utf8_lossy(&again.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(second > first, "{first} then {second}: {}", text(&again));
}

/// Waits until a waiter stands in `resource`'s line on some master: it is waiting, not about
/// to take the lock after the holder is gone.
fn in_line(nodes: &RedisNodes, resource: &str) {
    wait_for_report(
        || json_status(nodes, resource),
        "a waiter in line",
        |r| {
            r["nodes"].as_array().is_some_and(|nodes| {
                nodes
                    .iter()
                    .any(|n| n["queue"].as_array().is_some_and(|q| !q.is_empty()))
            })
        },
    );
}

#[test]
fn exec_exits_with_the_conflict_code_when_the_lock_is_busy() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    // The holder holds until told to stop, however long the attempts below take.
    let mut holder = exec(
        &nodes,
        &["--resource", "busy", "--ttl", "3s"],
        &hold_until(&started, &go),
    )
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(5)));

    let busy = exec(&nodes, &["--resource", "busy", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));
    assert!(busy.stdout.is_empty(), "the command must not run");
    let custom = exec(&nodes, &["--resource", "busy", "-E", "9", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(custom.status.code(), Some(9), "{}", text(&custom));
    // Waiting long enough gets it once the holder is done.
    let waiting = exec(&nodes, &["--resource", "busy", "--wait", "10s"], "echo ran")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    in_line(&nodes, "busy");
    std::fs::write(&go, "").unwrap();
    let waited = waiting.wait_with_output().unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert!(holder.wait().unwrap().success());
}

#[test]
fn a_command_handed_the_lock_by_a_shorter_lived_holder_runs_to_its_end() {
    // The holder's TTL (3 s) makes its hand-off short (its entry lease, 1.5 s); the waiter's
    // default TTL (30 s) puts its SIGKILL 1.5 s before the deadline: at once, unless the lease
    // is renewed before the command starts.
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let started = dir.path().join(format!("started{round}"));
        let mut holder = exec(
            &nodes,
            &["--resource", "handed", "--ttl", "3s"],
            &format!("touch {}; sleep 1", started.display()),
        )
        .spawn()
        .unwrap();
        assert!(wait_for_file(&started, Duration::from_secs(5)));
        let waited = exec(
            &nodes,
            &["--resource", "handed", "--wait", "10s"],
            "sleep 0.5; echo ran",
        )
        .output()
        .unwrap();
        assert_eq!(
            waited.status.code(),
            Some(0),
            "round {round}: {}",
            text(&waited)
        );
        assert_eq!(String::from_utf8_lossy(&waited.stdout), "ran\n");
        assert!(holder.wait().unwrap().success());
    }
}

#[test]
fn exec_sends_sigterm_and_exits_76_when_the_lock_is_lost() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, termed) = (dir.path().join("started"), dir.path().join("termed"));
    let script = format!(
        "trap 'echo term > {}; exit 0' TERM; touch {}; while true; do sleep 0.05; done",
        termed.display(),
        started.display()
    );
    // A lease of 3 s: at 1 s, each request to a master times out after 50 ms and the loss is
    // signalled a third of a second before the deadline, which a stall on a loaded machine can
    // turn into a loss before the command starts, or a SIGKILL before its trap runs.
    let child = exec(&nodes, &["--resource", "lost", "--ttl", "3s"], &script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(5)));
    // A majority stops answering: no renewal can reach a quorum.
    for i in [0, 1, 2] {
        nodes[i].pause().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    for i in [0, 1, 2] {
        nodes[i].resume().unwrap();
    }
    assert_eq!(out.status.code(), Some(76), "{}", text(&out));
    assert!(termed.exists(), "the command got SIGTERM: {}", text(&out));
    assert!(text(&out).contains("lost"), "{}", text(&out));
}

#[test]
fn exec_reports_a_command_that_cannot_run_and_releases_the_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let mut cmd = quorumlock(&nodes);
    let out = cmd
        .args(["exec", "--resource", "norun", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    let again = exec(&nodes, &["--resource", "norun"], "true")
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "the lock was released: {}",
        text(&again)
    );
}

#[test]
fn bench_measures_cycles_against_the_given_masters_and_leaves_no_key() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = quorumlock(&nodes)
        .args(["bench", "--workers", "4", "--duration", "1s"])
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("cycles"), "{shown}");
    // Every benchmark key was released. A release returns once a quorum has confirmed it and
    // the process may exit before the last master's reply, so a key may outlive the run on a
    // minority of masters (until its TTL), never on a quorum.
    let mut left: Vec<String> = Vec::new();
    for server in nodes.iter() {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("{quorumlock-bench:*")
            .query(&mut conn)
            .unwrap();
        left.extend(keys);
    }
    left.sort();
    for key in &left {
        let copies = left.iter().filter(|k| *k == key).count();
        assert!(copies < 2, "{key} is still on {copies} of 3 masters");
    }
}

#[test]
fn no_wait_wait_forever_and_negative_durations_behave_like_flock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let (started, go) = (witness.path("started"), witness.path("go"));
    // The holder holds until told to stop, however long the attempt below takes.
    let mut holder = exec(
        &nodes,
        &["--resource", "habits"],
        &hold_until(&started, &go),
    )
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(5)));

    let no_wait = exec(&nodes, &["--resource", "habits", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(no_wait.status.code(), Some(75), "{}", text(&no_wait));
    assert!(no_wait.stdout.is_empty(), "{}", text(&no_wait));
    let forever = exec(
        &nodes,
        &["--resource", "habits", "-w", "forever"],
        "echo waited",
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    in_line(&nodes, "habits");
    std::fs::write(&go, "").unwrap();
    let forever = forever.wait_with_output().unwrap();
    assert_eq!(forever.status.code(), Some(0), "{}", text(&forever));
    assert_eq!(String::from_utf8_lossy(&forever.stdout).trim(), "waited");
    assert!(holder.wait().unwrap().success());

    let negative = exec(&nodes, &["--resource", "habits", "--ttl", "-5s"], "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&negative.stderr);
    assert_eq!(negative.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"-5s\" is negative"), "{stderr}");
    assert!(
        !stderr.contains("tip"),
        "no advice to write `-- -5s`: {stderr}"
    );
    let both = exec(&nodes, &["--resource", "habits", "-n", "-w", "5s"], "true")
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
}

#[test]
fn dash_c_runs_a_command_string_with_sh() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = quorumlock(&nodes)
        .args(["exec", "--resource", "string", "-c"])
        .arg("echo \"$QUORUMLOCK_RESOURCE\" $((40 + 2)); exit 4")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "string 42");
    let both = quorumlock(&nodes)
        .args(["exec", "--resource", "string", "-c", "true", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
}

#[test]
fn without_a_command_the_lock_is_held_until_stdin_closes() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let mut holder = quorumlock(&nodes)
        .args(["exec", "--resource", "held", "--fencing"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let fence = first.trim().strip_prefix("locked held fence ");
    assert!(
        fence.is_some_and(|f| f.parse::<u64>().is_ok_and(|f| f > 0)),
        "{first}"
    );

    let busy = exec(&nodes, &["--resource", "held", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));
    // Typing does not end the hold; closing stdin does.
    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"anything\n").unwrap();
    drop(stdin);
    assert!(holder.wait().unwrap().success());
    let free = exec(&nodes, &["--resource", "held"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
}

#[test]
fn without_a_command_a_signal_ends_the_hold_and_releases() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let mut holder = quorumlock(&nodes)
        .args(["exec", "--resource", "held"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.trim(), "locked held");
    // Kept open until the end: `wait` would close it, which ends a hold too.
    let stdin = holder.stdin.take().unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(holder.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(holder.wait().unwrap().code(), Some(143));
    drop(stdin);
    let free = exec(&nodes, &["--resource", "held", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
}

/// Kills the process (ours, by pid) if the test fails while it runs.
struct KillOnPanic(u32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// `script` gives the command line a terminal of its own (a pty), as an interactive shell has.
fn at_a_terminal(command_line: &str) -> Command {
    let mut cmd = Command::new("script");
    cmd.args(["-qec", command_line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn at_a_terminal_the_command_reads_it_and_gets_ctrl_c_once() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let log = witness.log();
    // A background process group reading the terminal would be stopped by SIGTTIN: the
    // command must be in the foreground to read the line.
    let script = format!(
        "read line; echo \"got $line\" >> {log}; \
         trap 'echo int >> {log}; exit 5' INT; echo ready >> {log}; \
         while :; do sleep 0.05; done",
        log = log.display()
    );
    let command_line = format!(
        "QUORUMLOCK_NODES={} {} exec --resource tty -- sh -c \"{}\"",
        nodes.urls().join(","),
        env!("CARGO_BIN_EXE_quorumlock"),
        script.replace('"', "\\\"").replace('$', "\\$")
    );
    let mut terminal = at_a_terminal(&command_line).spawn().unwrap();
    let _cleanup = KillOnPanic(terminal.id());
    let mut keyboard = terminal.stdin.take().unwrap();
    keyboard.write_all(b"hello\n").unwrap();
    keyboard.flush().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || witness
            .lines()
            .contains(&"ready".to_owned())),
        "{:#?}",
        witness.lines()
    );
    keyboard.write_all(b"\x03").unwrap(); // Ctrl-C
    keyboard.flush().unwrap();
    let out = terminal.wait_with_output().unwrap();
    drop(keyboard);

    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let lines = witness.lines();
    assert!(lines.contains(&"got hello".to_owned()), "{lines:#?}");
    assert_eq!(
        lines.iter().filter(|l| *l == "int").count(),
        1,
        "one SIGINT: {lines:#?}"
    );
}

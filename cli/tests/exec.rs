//! `quorumlock exec` and `quorumlock status`: the real binary against testkit masters.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::RedisNodes;

fn quorumlock(nodes: &RedisNodes) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    cmd.env("QUORUMLOCK_NODES", nodes.urls().join(","));
    cmd
}

fn exec(nodes: &RedisNodes, extra: &[&str], script: &str) -> Command {
    let mut cmd = quorumlock(nodes);
    cmd.arg("exec").args(extra).args(["--", "sh", "-c", script]);
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wait_for_file(path: &Path, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn exec_runs_the_command_exactly_once_across_four_concurrent_invocations() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs");
    let script = format!("echo run >> {}; sleep 1", log.display());
    let children: Vec<_> = (0..4)
        .map(|_| {
            exec(&nodes, &["--resource", "once", "--ttl", "3s"], &script)
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
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "job 1");
    let again = exec(
        &nodes,
        &["--resource", "job", "--fencing"],
        "echo $QUORUMLOCK_FENCE",
    )
    .output()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "2",
        "{}",
        text(&again)
    );
}

#[test]
fn exec_exits_with_the_conflict_code_when_the_lock_is_busy() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut holder = exec(
        &nodes,
        &["--resource", "busy", "--ttl", "3s"],
        &format!("touch {}; sleep 2", started.display()),
    )
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(5)));

    let busy = exec(&nodes, &["--resource", "busy"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy));
    assert!(busy.stdout.is_empty(), "the command must not run");
    let custom = exec(&nodes, &["--resource", "busy", "-E", "9"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(custom.status.code(), Some(9), "{}", text(&custom));
    // Waiting long enough gets it once the holder is done.
    let waited = exec(&nodes, &["--resource", "busy", "--wait", "10s"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert!(holder.wait().unwrap().success());
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
    let child = exec(&nodes, &["--resource", "lost", "--ttl", "1s"], &script)
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

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_the_holder_and_the_verdict() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = quorumlock::Redlock::builder(nodes.urls()).build().unwrap();
    let lock = rl.acquire("shown", Duration::from_secs(30)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let out = quorumlock(&nodes)
        .args(["status", "shown"])
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(75), "held: {shown}");
    let fingerprint = lock.token().fingerprint();
    assert!(
        shown.contains(&format!("held by {fingerprint} on 3/3")),
        "{shown}"
    );
    assert!(!shown.contains(lock.token().expose()), "{shown}");
    lock.release().await.unwrap();
    let out = quorumlock(&nodes)
        .args(["status", "shown"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "free: {}", text(&out));
    assert!(text(&out).contains("\"shown\": free"), "{}", text(&out));
}

#[test]
fn errors_are_one_line_naming_the_problem() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args([
            "status",
            "--nodes",
            "redis://127.0.0.1:1,redis://127.0.0.1:1",
            "x",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("127.0.0.1:1") && stderr.contains("same"),
        "{stderr}"
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
    // Every benchmark key was released.
    for server in nodes.iter() {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert!(
            keys.iter().all(|k| !k.starts_with("quorumlock-bench:")),
            "{keys:?}"
        );
    }
}

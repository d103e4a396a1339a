//! One rule for exit codes (usage and configuration errors exit 2, as clap's own do), and the
//! command line as users of flock, etcdctl and consul write it: `elect NAME` as `exec RESOURCE`,
//! a name given twice said to be, compound durations and a unit on every number, the schemes a
//! voter takes, and log lines a person reads.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{exec, quorumlock, text, wait_for_file};
use quorumlock_testkit::RedisNodes;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The binary with `nodes` as QUORUMLOCK_NODES (any text: the point is to refuse it).
fn with_nodes(nodes: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    cmd.env("QUORUMLOCK_NODES", nodes)
        .env_remove("QUORUMLOCK_DURABLE")
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

#[test]
fn usage_and_configuration_errors_exit_2_before_any_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let urls = nodes.urls().join(",");
    let port = nodes[0].port();
    let cases: Vec<(String, Vec<String>, &str)> = vec![
        // Bad TTLs, each with its reason.
        (
            urls.clone(),
            args(&["exec", "r", "--ttl", "0", "--", "true"]),
            "too short",
        ),
        (
            urls.clone(),
            args(&["exec", "r", "--ttl", "500ms", "--", "true"]),
            "too short",
        ),
        (
            urls.clone(),
            args(&["exec", "r", "--ttl", "25h", "--", "true"]),
            "too long",
        ),
        (
            urls.clone(),
            args(&["exec", "r", "--ttl", "abc", "--", "true"]),
            "not a duration",
        ),
        (
            urls.clone(),
            args(&["exec", "r", "--ttl", "-5s", "--", "true"]),
            "negative",
        ),
        (
            urls.clone(),
            args(&["elect", "r", "--ttl", "0", "--", "true"]),
            "too short",
        ),
        // Bad voters.
        (
            format!("127.0.0.1:{port}"),
            args(&["status", "r"]),
            "needs a scheme",
        ),
        (
            "redis://127.0.0.1:99999".into(),
            args(&["status", "r"]),
            "not a port number",
        ),
        (
            format!("redis://127.0.0.1:{port}/abc"),
            args(&["status", "r"]),
            "127.0.0.1",
        ),
        (
            "redis+sentinel://127.0.0.1".into(),
            args(&["status", "r"]),
            "<master-name>",
        ),
        (
            "http://127.0.0.1:80".into(),
            args(&["status", "r"]),
            "redis+cluster://",
        ),
        ("".into(), args(&["status", "r"]), "no voter listed"),
        (
            " , ".into(),
            args(&["exec", "r", "--", "true"]),
            "no voter listed",
        ),
        // A semaphore of no permits.
        (
            urls.clone(),
            args(&["exec", "r", "--permits", "0", "--", "true"]),
            "--permits",
        ),
        (
            urls.clone(),
            args(&["status", "r", "--permits", "0"]),
            "--permits",
        ),
        // One server listed twice.
        (
            format!(
                "redis://127.0.0.1:{port},redis://localhost:{port},{}",
                nodes[1].url()
            ),
            args(&["exec", "r", "--", "true"]),
            "are the same Redis server",
        ),
    ];
    for (nodes, args, why) in cases {
        let out = with_nodes(&nodes).args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{nodes:?} {args:?}: {}",
            text(&out)
        );
        assert!(
            stdout(&out).is_empty(),
            "{nodes:?} {args:?}: {}",
            text(&out)
        );
        assert!(
            stderr(&out).contains(why),
            "{nodes:?} {args:?}: no {why:?} in {}",
            text(&out)
        );
    }
    // `--help` lists every code in one table, and says what 2 covers.
    let help = with_nodes("").arg("--help").output().unwrap();
    let help = stdout(&help);
    let table: String = help
        .lines()
        .skip_while(|l| !l.starts_with("Exit codes:"))
        .collect::<Vec<_>>()
        .join("\n");
    for words in [
        "2      usage or configuration error",
        "TTL",
        "listed twice",
        "replica",
    ] {
        assert!(table.contains(words), "{words:?} in {table}");
    }
}

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[test]
fn elect_takes_its_name_as_exec_takes_its_resource() {
    let nodes = RedisNodes::spawn(3).unwrap();
    for name_args in [
        &["scheduler"][..],
        &["--name", "scheduler"],
        &["--resource", "scheduler"],
    ] {
        let out = quorumlock(&nodes)
            .arg("elect")
            .args(name_args)
            .args(["--", "sh", "-c", "echo $QUORUMLOCK_RESOURCE"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name_args:?}: {}", text(&out));
        assert_eq!(stdout(&out).trim(), "scheduler", "{}", text(&out));
    }
    let help = quorumlock(&nodes)
        .args(["elect", "--help"])
        .output()
        .unwrap();
    let help = stdout(&help);
    assert!(help.contains("[NAME]"), "{help}");
    assert!(help.contains("quorumlock elect scheduler "), "{help}");
    assert!(!help.contains("elect --name"), "{help}");
}

#[test]
fn a_name_given_twice_is_refused_saying_so() {
    let nodes = RedisNodes::spawn(3).unwrap();
    for (args, what) in [
        (
            &["exec", "res1", "--resource", "res2", "--", "true"][..],
            "the resource was given twice",
        ),
        (
            &["exec", "res1", "--resource", "res2"],
            "the resource was given twice",
        ),
        (
            &["elect", "a", "--name", "b", "--", "true"],
            "the election's name was given twice",
        ),
        (
            &["elect", "a", "--resource", "b", "-c", "true"],
            "the election's name was given twice",
        ),
    ] {
        let out = quorumlock(&nodes).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(stderr(&out).contains(what), "{args:?}: {}", text(&out));
        assert!(
            !stderr(&out).contains("the command goes after"),
            "{}",
            text(&out)
        );
    }
    // A command without its `--` still gets that hint, for elect too.
    let out = quorumlock(&nodes)
        .args(["elect", "sched", "./run", "fast"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("-- ./run fast"), "{}", text(&out));
}

#[test]
fn durations_take_compound_forms_and_a_bare_number_is_refused() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = exec(&nodes, &["r", "--ttl", "1m30s", "-w", "1h0m1s"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out).trim(), "ran");
    for option in ["--ttl", "-w", "--grace"] {
        let out = exec(&nodes, &["r", option, "10"], "echo ran")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{option}: {}", text(&out));
        assert!(
            stderr(&out).contains("add one, as in 10s"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn verbose_logs_are_lines_a_person_reads() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut holder = exec(
        &nodes,
        &["r"],
        &format!("touch {}; sleep 1.2", started.display()),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(10)));
    // Waits in line, is handed the lock, holds it and releases it: most of what -vv says.
    let out = exec(
        &nodes,
        &["-vv", "r", "-w", "10s", "--ttl", "3s"],
        "sleep 1.1",
    )
    .output()
    .unwrap();
    assert!(holder.wait().unwrap().success());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = stderr(&out);
    assert!(said.lines().count() > 5, "{said}");
    for line in said.lines() {
        assert!(!line.contains(" { "), "a Rust dump: {line}");
        assert!(!line.contains("Some("), "a Rust Option: {line}");
    }
    assert!(
        said.contains("waiting in line") || said.contains("acquired"),
        "{said}"
    );
}

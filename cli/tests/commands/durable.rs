//! `--durable` (and `QUORUMLOCK_DURABLE`) on `exec`, `elect` and `bench`: over real primaries
//! with a real replica each, grants confirmed by the replica; over masters without replicas, a
//! refusal at connect naming what they lack; bad spellings refused as usage errors.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{hold_until, quorumlock, text, wait_for_file, wait_until};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use quorumlock_testkit::{RedisNodes, RedisServer, RedisServerBuilder};

/// The exit code for masters that cannot be used (`EX_UNAVAILABLE`).
const NO_QUORUM: i32 = 69;

/// What every refusal of a bad spelling names.
const FORMS: &str = "replicas=N, aof, or aof,replicas=N";

/// A primary and its replica, the replication link up.
struct Voter {
    primary: RedisServer,
    replica: RedisServer,
}

fn connection(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// The keys on `server` matching `pattern`.
fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut connection(server))
        .unwrap()
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut connection(server))
        .unwrap()
}

fn voter() -> Voter {
    let primary = RedisServerBuilder::new().spawn().unwrap();
    let replica = primary.spawn_replica(RedisServerBuilder::new()).unwrap();
    Voter { primary, replica }
}

fn voters(n: usize) -> Vec<Voter> {
    (0..n).map(|_| voter()).collect()
}

/// The binary, pointed at the voters' primaries, with stdin closed and no durability from the
/// environment.
fn over(voters: &[Voter]) -> Command {
    let urls: Vec<String> = voters.iter().map(|v| v.primary.url()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    cmd.env("QUORUMLOCK_NODES", urls.join(","))
        .env_remove("QUORUMLOCK_DURABLE")
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// The binary, pointed at `nodes`, with no durability from the environment.
fn plain(nodes: &RedisNodes) -> Command {
    let mut cmd = quorumlock(nodes);
    cmd.env_remove("QUORUMLOCK_DURABLE");
    cmd
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that `out` is the refusal of masters without replicas: exit 69, every master named
/// as unable to confirm for lack of replicas.
fn assert_refused_for_lack_of_replicas(out: &Output, nodes: &RedisNodes) {
    assert_eq!(out.status.code(), Some(NO_QUORUM), "{}", text(out));
    let shown = stderr(out);
    assert!(shown.contains("cannot confirm grants"), "{}", text(out));
    assert!(
        shown.contains("0 replicas connected, 1 needed"),
        "{}",
        text(out)
    );
    for url in nodes.urls() {
        let node = url.trim_start_matches("redis://");
        assert!(shown.contains(node), "{node} not named: {}", text(out));
    }
    for server in nodes.iter() {
        assert!(keys(server, "*").is_empty(), "written to {}", server.url());
    }
}

#[test]
fn exec_durable_replicas_runs_over_primaries_with_a_replica_and_leaves_no_key() {
    let voters = voters(3);
    let dir = tempfile::tempdir().unwrap();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let script = format!("{}; echo ran", hold_until(&started, &go));
    let child = over(&voters)
        .args(["exec", "--durable", "replicas=1", "--resource", "ledger"])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let began = wait_for_file(&started, Duration::from_secs(20));
    // While the command runs, a quorum of replicas has the lock its primary granted: each of
    // those grants counted only once its replica acknowledged it.
    let replicated = voters
        .iter()
        .filter(|v| {
            let held = get(&v.primary, "ledger");
            held.is_some() && get(&v.replica, "ledger") == held
        })
        .count();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(began, "the command never started: {}", text(&out));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out).trim(), "ran", "{}", text(&out));
    assert!(replicated >= 2, "on {replicated} replicas: {}", text(&out));
    // Released everywhere, with the holder's description and any place in line (the lock key
    // `ledger` and its companions `{ledger}:...`): on the primaries when exec returns,
    // on their replicas just after. (The library's key-layout
    // marker stays.)
    for v in &voters {
        assert_eq!(
            keys(&v.primary, "*ledger*"),
            Vec::<String>::new(),
            "{}",
            text(&out)
        );
        assert!(
            wait_until(Duration::from_secs(5), || keys(&v.replica, "*ledger*")
                .is_empty()),
            "left on a replica: {:?}",
            keys(&v.replica, "*ledger*")
        );
    }
}

#[test]
fn elect_and_bench_durable_replicas_run_over_primaries_with_a_replica() {
    let voters = voters(3);
    let out = over(&voters)
        .args(["elect", "--durable", "replicas=1", "--name", "scheduler"])
        .args(["--", "sh", "-c", "echo leader term=$QUORUMLOCK_FENCE"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout(&out).starts_with("leader term="), "{}", text(&out));

    let out = over(&voters)
        .args(["bench", "--durable", "replicas=1", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = stdout(&out);
    assert!(summary.contains("durable replicas=1"), "{}", text(&out));
    assert!(summary.contains("cycles"), "{}", text(&out));
}

#[test]
fn exec_and_bench_durable_replicas_are_refused_by_masters_without_replicas() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = plain(&nodes)
        .args(["exec", "--durable", "replicas=1", "--resource", "ledger"])
        .args(["--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_refused_for_lack_of_replicas(&out, &nodes);
    assert!(stdout(&out).is_empty(), "the command ran: {}", text(&out));

    let out = plain(&nodes)
        .args(["bench", "--durable", "replicas=1", "--duration", "1s"])
        .output()
        .unwrap();
    assert_refused_for_lack_of_replicas(&out, &nodes);
    assert!(!stdout(&out).contains("cycles"), "{}", text(&out));
}

#[test]
fn elect_durable_replicas_waits_for_masters_without_replicas_saying_why() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    // `elect` campaigns until it leads: it waits for masters that cannot be used, and -v says
    // why.
    let mut child = plain(&nodes)
        .args([
            "-v",
            "elect",
            "--durable",
            "replicas=1",
            "--name",
            "scheduler",
        ])
        .args(["--", "sh", "-c", "echo ran"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("cannot confirm grants")
    });
    let still_waiting = child.try_wait().unwrap().is_none();
    kill(
        Pid::from_raw(i32::try_from(child.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();
    let mut ran = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut ran).unwrap();
    let shown = std::fs::read_to_string(&log).unwrap();
    assert!(said, "{shown}");
    assert!(shown.contains("replicas connected"), "{shown}");
    assert_eq!(ran, "", "the command ran: {shown}");
    assert!(still_waiting, "elect gave up: {shown}");
    for server in nodes.iter() {
        assert!(keys(server, "*").is_empty(), "written to {}", server.url());
    }
}

#[test]
fn quorumlock_durable_in_the_environment_does_what_the_flag_does() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = plain(&nodes)
        .env("QUORUMLOCK_DURABLE", "replicas=1")
        .args(["exec", "--resource", "ledger", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_refused_for_lack_of_replicas(&out, &nodes);
    assert!(stdout(&out).is_empty(), "the command ran: {}", text(&out));
    // The same masters, the same command, without it: runs.
    let out = plain(&nodes)
        .args(["exec", "--resource", "ledger", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out).trim(), "ran", "{}", text(&out));
    // A bad spelling in the environment is a usage error too.
    let out = plain(&nodes)
        .env("QUORUMLOCK_DURABLE", "replicas=0")
        .args(["exec", "--resource", "ledger", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains(FORMS), "{}", text(&out));
}

#[test]
fn a_bad_spelling_is_a_usage_error_naming_the_accepted_forms() {
    // Nothing listens there: a usage error is reported before any master is contacted.
    let unreachable = "redis://127.0.0.1:1,redis://127.0.0.1:2,redis://127.0.0.1:3";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .env("QUORUMLOCK_NODES", unreachable)
            .env_remove("QUORUMLOCK_DURABLE")
            .stdin(Stdio::null())
            .args(args)
            .output()
            .unwrap()
    };
    for (spelling, why) in [
        ("replicas=0", "confirms nothing"),
        ("replicas=x", "not a replica count"),
        ("aof,fsync", "unknown \"fsync\""),
        ("", "empty"),
    ] {
        for subcommand in [
            &[
                "exec",
                "--resource",
                "r",
                "--durable",
                spelling,
                "--",
                "true",
            ][..],
            &["elect", "--name", "r", "--durable", spelling, "--", "true"][..],
            &["bench", "--durable", spelling][..],
        ] {
            let out = run(subcommand);
            assert_eq!(out.status.code(), Some(2), "{subcommand:?}: {}", text(&out));
            let shown = stderr(&out);
            assert!(shown.contains("--durable"), "{subcommand:?}: {shown}");
            assert!(shown.contains(why), "{subcommand:?}: {shown}");
            assert!(shown.contains(FORMS), "{subcommand:?}: {shown}");
            assert!(out.stdout.is_empty(), "{subcommand:?}: {}", text(&out));
        }
    }
}

#[test]
fn exec_elect_and_bench_help_describe_durable() {
    for subcommand in ["exec", "elect", "bench"] {
        let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .args([subcommand, "--help"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{subcommand}: {}", text(&out));
        let help = stdout(&out);
        for words in [
            "--durable <replicas=N|aof[,replicas=N]>",
            "QUORUMLOCK_DURABLE",
            "WAIT",
            "WAITAOF",
            "refused at connect",
        ] {
            assert!(help.contains(words), "{subcommand}: {words:?} in {help}");
        }
    }
}

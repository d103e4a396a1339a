//! What quorumlock says about the masters it is given: "no quorum answered" is not "busy",
//! aliases of one server are refused, weak setups are warned about, and mistakes in URLs or a
//! server that is not Redis are named on one line.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

use common::{exec, quorumlock, text};
use quorumlock_testkit::{RedisNodes, RedisServer};

fn with_nodes(urls: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    cmd.env("QUORUMLOCK_NODES", urls.join(","))
        .env_remove("RUST_LOG");
    cmd
}

/// A URL of a loopback port nothing listens on.
fn unused_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("redis://{}", listener.local_addr().unwrap())
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn no_quorum_of_masters_exits_69_not_the_busy_code() {
    // Every master down.
    let mut nodes = RedisNodes::spawn(3).unwrap();
    let down = nodes.urls();
    for i in 0..3 {
        nodes[i].kill().unwrap();
    }
    let out = with_nodes(&down)
        .args(["exec", "--resource", "r", "-E", "9", "--", "echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(out.stdout.is_empty(), "the command must not run");
    assert!(stderr(&out).contains("reachable"), "{}", text(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", text(&out));
    let status = with_nodes(&down).args(["status", "r"]).output().unwrap();
    assert_eq!(status.status.code(), Some(69), "{}", text(&status));

    // A wrong password everywhere.
    let secured =
        RedisNodes::spawn_with(3, &RedisServer::builder().arg("--requirepass").arg("right"))
            .unwrap();
    let wrong: Vec<String> = secured
        .iter()
        .map(|s| format!("redis://:wrong@{}", s.addr()))
        .collect();
    let out = with_nodes(&wrong)
        .args(["exec", "--resource", "r", "--", "echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(
        !text(&out).contains("wrong"),
        "no password shown: {}",
        text(&out)
    );

    // Ports mistyped on a majority: nothing listens there.
    let nodes = RedisNodes::spawn(1).unwrap();
    let typo = vec![nodes[0].url(), unused_port_url(), unused_port_url()];
    let out = with_nodes(&typo)
        .args(["exec", "--resource", "r", "--", "echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
}

#[test]
fn aliases_of_one_master_are_refused_before_any_lock() {
    let nodes = RedisNodes::spawn(2).unwrap();
    let port = nodes[0].port();
    for aliases in [
        vec![
            format!("redis://127.0.0.1:{port}"),
            format!("redis://localhost:{port}"),
            nodes[1].url(),
        ],
        // Two databases of one server are one server.
        vec![
            format!("redis://127.0.0.1:{port}/0"),
            format!("redis://127.0.0.1:{port}/1"),
            nodes[1].url(),
        ],
    ] {
        for args in [
            &["exec", "--resource", "a", "--", "echo", "ran"][..],
            &["status", "a"],
        ] {
            let out = with_nodes(&aliases).args(args).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{aliases:?}: {}", text(&out));
            assert!(out.stdout.is_empty(), "{}", text(&out));
            assert!(
                stderr(&out).contains("are the same Redis server"),
                "{}",
                text(&out)
            );
        }
    }
}

#[test]
fn weak_setups_are_warned_about_on_stderr() {
    let nodes = RedisNodes::spawn(4).unwrap();
    let one = exec(&nodes, &["--resource", "w"], "echo ran")
        .env("QUORUMLOCK_NODES", nodes[0].url())
        .output()
        .unwrap();
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    assert!(stderr(&one).contains("a single master"), "{}", text(&one));

    let four = exec(&nodes, &["--resource", "w"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(four.status.code(), Some(0), "{}", text(&four));
    assert!(stderr(&four).contains("even number"), "{}", text(&four));

    // One master of three wants a password the URL does not give.
    let secured = RedisServer::builder()
        .arg("--requirepass")
        .arg("right")
        .spawn()
        .unwrap();
    let urls = [nodes[0].url(), nodes[1].url(), secured.url()];
    let minority = with_nodes(&urls)
        .args(["exec", "--resource", "w", "--", "echo", "ran"])
        .output()
        .unwrap();
    assert_eq!(minority.status.code(), Some(0), "{}", text(&minority));
    let warning = stderr(&minority);
    assert!(
        warning.contains("WARN") && warning.contains(&secured.addr().to_string()),
        "{}",
        text(&minority)
    );
}

#[test]
fn node_urls_without_a_scheme_or_with_a_bad_port_get_a_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args(["status", "--nodes", "127.0.0.1:7101,redis://h:7102", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("write redis://127.0.0.1:7101"),
        "{}",
        text(&out)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args(["status", "--nodes", "redis://127.0.0.1:71010", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("not a port number"), "{}", text(&out));
}

#[test]
fn a_server_that_is_not_redis_takes_one_line_of_the_status_table() {
    let nodes = RedisNodes::spawn(2).unwrap();
    // Answers every connection with a multi-line HTTP error, as a web server would.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let not_redis = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>\n<body>\nno\n</body>\n</html>\n",
            );
        }
    });
    let mut urls = nodes.urls();
    urls.insert(1, format!("redis://{not_redis}"));
    let out = with_nodes(&urls).args(["status", "x"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "free: {}", text(&out));
    // A header, one row per node, the verdict.
    assert_eq!(stdout.lines().count(), 5, "{}", text(&out));
    // The warning about it is one line too.
    let stderr = stderr(&out);
    assert!(
        stderr.lines().all(|l| l.starts_with("WARN")),
        "{}",
        text(&out)
    );
    let row = stdout.lines().nth(2).unwrap();
    assert!(
        row.starts_with(&not_redis.to_string()) && row.contains("down"),
        "{}",
        text(&out)
    );
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
    let stderr = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("127.0.0.1:1") && stderr.contains("same"),
        "{stderr}"
    );
}

#[test]
fn verbose_and_rust_log_show_the_librarys_log() {
    let nodes = RedisNodes::spawn(3).unwrap();
    // The lease (3 s) is renewed every second: a command of 2.5 s sees a renewal even when one
    // comes a stall late.
    let quiet = quorumlock(&nodes)
        .args([
            "exec",
            "--resource",
            "v",
            "--ttl",
            "3s",
            "--",
            "sleep",
            "2.5",
        ])
        .output()
        .unwrap();
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert!(!stderr(&quiet).contains("renewed"), "{}", text(&quiet));
    let verbose = quorumlock(&nodes)
        .args([
            "-vv",
            "exec",
            "--resource",
            "v",
            "--ttl",
            "3s",
            "--",
            "sleep",
            "2.5",
        ])
        .output()
        .unwrap();
    assert_eq!(verbose.status.code(), Some(0), "{}", text(&verbose));
    assert!(stderr(&verbose).contains("renewed"), "{}", text(&verbose));
    let logged = quorumlock(&nodes)
        .env("RUST_LOG", "quorumlock=debug")
        .args([
            "exec",
            "--resource",
            "v",
            "--ttl",
            "3s",
            "--",
            "sleep",
            "2.5",
        ])
        .output()
        .unwrap();
    assert!(stderr(&logged).contains("renewed"), "{}", text(&logged));
}

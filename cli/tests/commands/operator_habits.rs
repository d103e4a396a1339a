//! What users of flock, etcdctl and consul expect from the messages and the operator commands:
//! counts of masters a user can check, a master that is not Redis named as such on one line, a
//! line of waiters shown once, and `unlock` for read-write locks and semaphores.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{
    exec, json_status, quorumlock, text, wait_for_file, wait_for_report, wait_held_everywhere,
    wait_reader_everywhere, wait_until, Witness,
};
use quorumlock_testkit::RedisNodes;

/// `exec <extra> -- <Witness::until_done(mark)>`, returned once its command runs.
fn hold(nodes: &RedisNodes, witness: &Witness, mark: &str, extra: &[&str]) -> Child {
    let child = exec(nodes, extra, &witness.until_done(mark))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_file(&witness.path(mark), Duration::from_secs(10)),
        "{mark} never started"
    );
    child
}

/// Lets the holders' commands end and waits for them, whatever their exit.
fn end(witness: &Witness, holders: Vec<Child>) {
    std::fs::write(witness.path("done"), "").unwrap();
    for mut holder in holders {
        holder.wait().unwrap();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_busy_lock_says_how_many_of_how_many_masters_granted_and_how_many_are_needed() {
    let nodes = RedisNodes::spawn(5).unwrap();
    let witness = Witness::new();
    let holder = hold(&nodes, &witness, "first", &["--resource", "job"]);
    // The holder's acquire returned at a quorum (3): a master it has not reached yet would
    // grant this attempt there.
    wait_held_everywhere(&nodes, "job");
    let out = run(&mut exec(&nodes, &["--resource", "job", "-n"], "true"));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(
        stderr(&out).contains("0 of 5 masters granted (3 needed)"),
        "{}",
        text(&out)
    );
    end(&witness, vec![holder]);
}

#[test]
fn too_few_masters_says_how_many_of_how_many_answered() {
    let mut nodes = RedisNodes::spawn(3).unwrap();
    nodes[0].kill().unwrap();
    nodes[1].kill().unwrap();
    let out = run(quorumlock(&nodes).arg("list"));
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(
        stderr(&out).contains("only 1 of 3 masters reachable (2 needed)"),
        "{}",
        text(&out)
    );
}

/// A web server where a master should be: answers anything with an HTML error page.
fn not_redis() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut request = [0; 4096];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(
                b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Type: text/html\r\n\
                  Connection: close\r\n\r\n<html>\r\n<head><title>400 Bad Request</title></head>\r\n\
                  <body>\r\n<center><h1>400 Bad Request</h1></center>\r\n</body>\r\n</html>\r\n",
            );
        }
    });
    port
}

#[test]
fn a_master_that_is_not_redis_is_called_so_on_one_line() {
    let nodes = RedisNodes::spawn(2).unwrap();
    let mut urls = nodes.urls();
    let web = not_redis();
    urls.push(format!("redis://127.0.0.1:{web}"));
    let out = run(quorumlock(&nodes)
        .env("QUORUMLOCK_NODES", urls.join(","))
        .args(["status", "job"]));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let row = stdout(&out)
        .lines()
        .find(|l| l.starts_with(&format!("127.0.0.1:{web} ")))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no row for the web server: {shown}"));
    assert!(row.contains("not a Redis server"), "{shown}");
    let logged = stderr(&out);
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains(&format!(":{web}")))
        .map(str::trim)
        .collect::<Vec<_>>();
    assert!(
        !warnings.is_empty() && warnings.iter().all(|l| l.contains("not a Redis server")),
        "{shown}"
    );
    assert!(!stderr(&out).contains("html"), "{shown}");
}

#[test]
fn status_prints_a_line_the_masters_agree_on_once() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let holder = hold(&nodes, &witness, "first", &["--resource", "job"]);
    let waiter = exec(&nodes, &["--resource", "job", "-w", "30s"], "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The waiter's entry reaches the three masters one by one: wait until every master has it
    // (status shows a line that only some masters have once per master, rightly).
    let mut shown = String::new();
    let agreed = wait_until(Duration::from_secs(10), || {
        shown = stdout(&run(quorumlock(&nodes).args(["status", "job"])));
        shown.contains("line on every master that answered (3), first to last:")
    });
    assert!(agreed, "the masters never agreed on the line: {shown}");
    assert_eq!(shown.matches("1. waiter ").count(), 1, "{shown}");
    end(&witness, vec![holder, waiter]);
}

#[test]
fn unlock_deletes_a_read_held_lock_and_names_a_semaphores_permits() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let reader = hold(
        &nodes,
        &witness,
        "reader",
        &["--resource", "catalog", "--read"],
    );
    // The read hold returned at a quorum: the last master gets it just after.
    wait_reader_everywhere(&nodes, "catalog");
    let dry = run(quorumlock(&nodes).args(["unlock", "catalog"]));
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    assert!(stdout(&dry).contains("held by readers"), "{}", text(&dry));
    assert!(
        stdout(&dry).contains("would delete {catalog}:readers"),
        "{}",
        text(&dry)
    );
    let forced = run(quorumlock(&nodes).args(["unlock", "catalog", "--force"]));
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    assert!(
        stdout(&forced).contains("readers deleted on 3/3 masters"),
        "{}",
        text(&forced)
    );
    let status = run(quorumlock(&nodes).args(["status", "catalog"]));
    assert_eq!(status.status.code(), Some(0), "{}", text(&status));

    let permit = hold(
        &nodes,
        &witness,
        "permit",
        &["--resource", "exports", "--permits", "2"],
    );
    let named = run(quorumlock(&nodes).args(["unlock", "exports", "--force"]));
    assert_eq!(named.status.code(), Some(2), "{}", text(&named));
    let shown = stdout(&named);
    assert!(shown.contains("is a semaphore"), "{}", text(&named));
    let slot = (0..2)
        .find(|i| shown.contains(&format!("\"exports:permit:{i}\"")))
        .unwrap_or_else(|| panic!("no permit named: {}", text(&named)));
    // Likewise the permit's acquire.
    wait_held_everywhere(&nodes, &format!("exports:permit:{slot}"));
    let one =
        run(quorumlock(&nodes).args(["unlock", &format!("exports:permit:{slot}"), "--force"]));
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    assert!(
        stdout(&one).contains("deleted on 3/3 masters"),
        "{}",
        text(&one)
    );
    end(&witness, vec![reader, permit]);
}

#[test]
fn status_says_when_the_recorded_holders_process_is_gone() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let mut holder = hold(
        &nodes,
        &witness,
        "first",
        &["--resource", "nightly", "--ttl", "1h"],
    );
    // The description is written beside the lock while the command starts.
    wait_for_report(
        || json_status(&nodes, "nightly"),
        "the holder's description",
        |r| r["holder_process"] == "running",
    );
    let live = run(quorumlock(&nodes).args(["status", "nightly"]));
    assert!(stdout(&live).contains("holder "), "{}", text(&live));
    assert!(!stdout(&live).contains("is gone"), "{}", text(&live));
    let json = run(quorumlock(&nodes).args(["status", "--json", "nightly"]));
    assert!(
        stdout(&json).contains(r#""holder_process":"running""#),
        "{}",
        text(&json)
    );

    // SIGKILL: nothing is released, the lock stays for its hour.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let dead = run(quorumlock(&nodes).args(["status", "nightly"]));
    let shown = stdout(&dead);
    assert!(shown.contains("held"), "{}", text(&dead));
    assert!(
        shown.contains(&format!(
            "its process is gone: no quorumlock process {} on this host",
            holder.id()
        )),
        "{}",
        text(&dead)
    );
    assert!(
        shown.contains("`quorumlock unlock nightly --force` frees it now"),
        "{}",
        text(&dead)
    );
    let json = run(quorumlock(&nodes).args(["status", "--json", "nightly"]));
    assert!(
        stdout(&json).contains(r#""holder_process":"gone""#),
        "{}",
        text(&json)
    );
    std::fs::write(witness.path("done"), "").unwrap();
}

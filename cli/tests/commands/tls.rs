//! The command over TLS, as managed services with encryption in transit run their servers:
//! TLS-only masters with a private CA that require client certificates (`--cacert`, `--cert`,
//! `--key`, or their environment variables), a TLS-only Redis Cluster voter
//! (`rediss+cluster://`), and a TLS Sentinel group whose Sentinels have a password of their own
//! (`rediss+sentinel://…?sentinel_password=…`). `exec` locks through them, `status` and `list`
//! read them over the command's own connections; a CA that signed none of the servers'
//! certificates is refused, naming the masters and never the passwords.
//!
//! Needs the `tls` feature (`cargo test -p quorumlock-cli --all-features --test commands tls::`).

#![cfg(feature = "tls")]

use crate::common;

use std::process::{Child, Command, Output};
use std::time::Duration;

use common::{exec, quorumlock, text, wait_for_file, wait_for_report, wait_until, Witness};
use quorumlock_testkit::tls::{TestCa, CA_CERT, CLIENT_CERT, CLIENT_KEY, OTHER_CA_CERT};
use quorumlock_testkit::{RedisCluster, RedisNodes, RedisServer, SentinelGroup};
use serde_json::Value;

const MASTER_PASSWORD: &str = "m4ster-pw-in-url";
const SENTINEL_PASSWORD: &str = "s3ntinel-pw-in-url";

/// `n` TLS-only masters that require a client certificate the CA signed.
fn tls_masters(ca: &TestCa, n: usize) -> RedisNodes {
    let tls = ca.server_tls().auth_clients(true).plain_port(false);
    RedisNodes::spawn_with(n, &RedisServer::builder().tls(tls)).unwrap()
}

/// Their `rediss://127.0.0.1:PORT` URLs.
fn tls_urls(masters: &RedisNodes) -> Vec<String> {
    masters.iter().map(|m| m.tls_url().unwrap()).collect()
}

/// The options that trust the test CA and present its client certificate.
fn certificates(ca: &TestCa) -> Vec<String> {
    [
        ("--cacert", CA_CERT),
        ("--cert", CLIENT_CERT),
        ("--key", CLIENT_KEY),
    ]
    .into_iter()
    .flat_map(|(option, file)| [option.to_owned(), ca.path(file).display().to_string()])
    .collect()
}

/// The binary with `voters` as QUORUMLOCK_NODES, and the certificates in QUORUMLOCK_CACERT,
/// QUORUMLOCK_CERT and QUORUMLOCK_KEY.
fn with_env(masters: &RedisNodes, voters: &str, ca: &TestCa) -> Command {
    let mut cmd = quorumlock(masters);
    cmd.env("QUORUMLOCK_NODES", voters)
        .env("QUORUMLOCK_CACERT", ca.path(CA_CERT))
        .env("QUORUMLOCK_CERT", ca.path(CLIENT_CERT))
        .env("QUORUMLOCK_KEY", ca.path(CLIENT_KEY));
    cmd
}

/// An `exec` holding `resource` through `voters`, the certificates given as options, while its
/// command waits for the file `done`; returns once the command runs.
fn holding(
    masters: &RedisNodes,
    voters: &str,
    ca: &TestCa,
    witness: &Witness,
    resource: &str,
) -> Child {
    let started = witness.path(&format!("{resource}.started"));
    // A lease of 20 s gives each voter the longest node timeout (1 s): a TLS voter's first
    // connection on a loaded machine can take longer than the half second of a 10 s lease, and
    // a voter its acquire missed never holds the lock.
    let mut extra = vec!["--resource", resource, "--ttl", "20s"];
    let certs = certificates(ca);
    extra.extend(certs.iter().map(String::as_str));
    let mut cmd = exec(
        masters,
        &extra,
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            witness.path("done").display()
        ),
    );
    cmd.env("QUORUMLOCK_NODES", voters);
    let child = cmd.spawn().unwrap();
    assert!(
        wait_for_file(&started, Duration::from_secs(20)),
        "exec did not start its command"
    );
    child
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// `exec` holds `resource` through `voters`; `status` shows it held by that process (the holder
/// description read over the command's own TLS connections) on every voter; `list` lists it;
/// once released, `status` says free.
fn lock_status_and_list(masters: &RedisNodes, voters: &str, ca: &TestCa, resource: &str) {
    let witness = Witness::new();
    let holder = holding(masters, voters, ca, &witness, resource);
    // The lock reaches the last voter, and the holder's description is written, after the
    // command starts. (A look at a voter has 250 ms, which a TLS voter on a loaded machine can
    // outlast: the looks below are taken again until one sees every voter.)
    let pid = holder.id();
    let (status, _) = wait_for_report(
        || {
            let mut cmd = with_env(masters, voters, ca);
            cmd.args(["status", "--json", resource]);
            cmd
        },
        "the lock and its description on every voter",
        |r| r["holding"] == 3 && r["holder"]["pid"] == pid,
    );
    assert_eq!(status.status.code(), Some(75), "{}", text(&status));
    let report = json(&status);
    assert_eq!(report["verdict"], "held", "{}", text(&status));
    assert_eq!(report["holding"], 3, "{}", text(&status));
    assert_eq!(report["holder"]["pid"], holder.id(), "{}", text(&status));

    let mut list = with_env(masters, voters, ca).arg("list").output().unwrap();
    let row = |list: &Output| {
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .find(|l| l.starts_with(&format!("{resource:?}")))
            .map(str::to_owned)
    };
    wait_until(Duration::from_secs(10), || {
        list = with_env(masters, voters, ca).arg("list").output().unwrap();
        let every = row(&list).is_some_and(|r| r.contains("3/3"));
        if !every {
            // A look is a process with TLS handshakes: a few a second.
            std::thread::sleep(Duration::from_millis(100));
        }
        every
    });
    assert_eq!(list.status.code(), Some(0), "{}", text(&list));
    let row = row(&list).unwrap_or_else(|| panic!("{}", text(&list)));
    assert!(row.contains("held") && row.contains("3/3"), "{row}");
    assert!(row.contains(&format!("pid {}", holder.id())), "{row}");

    std::fs::write(witness.path("done"), "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let free = with_env(masters, voters, ca)
        .args(["status", resource])
        .output()
        .unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
    for out in [&status, &list, &out, &free] {
        let shown = text(out);
        assert!(!shown.contains(MASTER_PASSWORD), "{shown}");
        assert!(!shown.contains(SENTINEL_PASSWORD), "{shown}");
    }
}

#[test]
fn exec_status_and_list_run_over_mutual_tls_with_a_private_ca() {
    let ca = TestCa::generate().unwrap();
    let masters = tls_masters(&ca, 3);
    let voters = tls_urls(&masters).join(",");
    lock_status_and_list(&masters, &voters, &ca, "jobs:tls");

    // Without the client certificate, the masters refuse the handshake: no quorum.
    let anonymous = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["status", "jobs:tls", "--cacert"])
        .arg(ca.path(CA_CERT))
        .output()
        .unwrap();
    assert_eq!(anonymous.status.code(), Some(69), "{}", text(&anonymous));
}

#[test]
fn a_tls_only_cluster_voter_is_locked_listed_and_looked_at() {
    let ca = TestCa::generate().unwrap();
    let masters = tls_masters(&ca, 2);
    let cluster = RedisCluster::builder()
        .primaries(3)
        .server(RedisServer::builder().tls(ca.server_tls().auth_clients(true)))
        .spawn()
        .unwrap();
    assert!(cluster.url().starts_with("rediss+cluster://"));
    let voters = format!("{},{}", tls_urls(&masters).join(","), cluster.url());
    lock_status_and_list(&masters, &voters, &ca, "reports:tls");
}

#[test]
fn a_tls_sentinel_group_with_a_sentinel_password_is_locked_listed_and_looked_at() {
    let ca = TestCa::generate().unwrap();
    let masters = tls_masters(&ca, 2);
    let group = SentinelGroup::builder()
        .server(RedisServer::builder().tls(ca.server_tls().auth_clients(true)))
        .master_password(MASTER_PASSWORD)
        .sentinel_password(SENTINEL_PASSWORD)
        .spawn()
        .unwrap();
    let url = group.url();
    let rest = url.strip_prefix("rediss+sentinel://").unwrap();
    let sentinels = format!(
        "rediss+sentinel://:{MASTER_PASSWORD}@{rest}?sentinel_password={SENTINEL_PASSWORD}"
    );
    let voters = format!("{},{sentinels}", tls_urls(&masters).join(","));
    lock_status_and_list(&masters, &voters, &ca, "nightly:tls");

    // Without the Sentinels' password, the group cannot be asked for its master; the two
    // standalone masters are a quorum still, and the group is named without any password.
    let without = format!(
        "{},rediss+sentinel://:{MASTER_PASSWORD}@{rest}",
        tls_urls(&masters).join(",")
    );
    let status = with_env(&masters, &without, &ca)
        .args(["status", "nightly:tls"])
        .output()
        .unwrap();
    let shown = text(&status);
    assert_eq!(status.status.code(), Some(0), "{shown}");
    assert!(!shown.contains(MASTER_PASSWORD), "{shown}");
}

#[test]
fn a_wrong_ca_is_refused_naming_the_masters_and_never_their_passwords() {
    let ca = TestCa::generate().unwrap();
    let masters = tls_masters(&ca, 3);
    // A password in the URL, which the handshake never gets to use.
    let voters: Vec<String> = masters
        .iter()
        .map(|m| {
            format!(
                "rediss://:{MASTER_PASSWORD}@127.0.0.1:{}",
                m.tls_port().unwrap()
            )
        })
        .collect();
    let out = with_env(&masters, &voters.join(","), &ca)
        .env("QUORUMLOCK_CACERT", ca.path(OTHER_CA_CERT))
        .args(["exec", "jobs:tls", "-n", "--", "true"])
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(69), "{shown}");
    for master in masters.iter() {
        let node = format!("127.0.0.1:{}", master.tls_port().unwrap());
        assert!(shown.contains(&node), "{node} not named: {shown}");
    }
    assert!(!shown.contains(MASTER_PASSWORD), "{shown}");
}

#[test]
fn a_certificate_file_that_cannot_be_used_or_a_cert_without_its_key_is_a_usage_error() {
    let ca = TestCa::generate().unwrap();
    let masters = tls_masters(&ca, 1);
    let voters = tls_urls(&masters).join(",");
    let missing = ca.path("missing.crt");
    let out = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["status", "x", "--cacert"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&missing.display().to_string()),
        "{}",
        text(&out)
    );

    // From the environment too, and a file that holds no PEM.
    let not_pem = ca.path("server.ext");
    let out = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .env("QUORUMLOCK_CACERT", &not_pem)
        .args(["list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&not_pem.display().to_string()),
        "{}",
        text(&out)
    );

    let alone = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["status", "x", "--cert"])
        .arg(ca.path(CLIENT_CERT))
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(2), "{}", text(&alone));
    assert!(text(&alone).contains("--key"), "{}", text(&alone));
}

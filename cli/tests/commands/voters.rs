//! `quorumlock exec` through voters that are a Redis Cluster (`redis+cluster://`) and a
//! Sentinel-managed master (`redis+sentinel://`), alone and mixed with a standalone master:
//! commands run one at a time, and no key is left behind after they end.

use std::process::{Command, Stdio};

use quorumlock_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// Every key on a server, but the layout marker.
fn keys_on(url: &str) -> Vec<String> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| !k.ends_with("quorumlock:layout"))
        .collect()
}

/// Starts `n` `quorumlock exec` at once on `resource` over `nodes` (given by environment or by
/// `--nodes`), each running a critical section that notes an overlap if it ever sees another
/// inside; returns the log.
fn serialised(nodes: &str, by_env: bool, resource: &str, n: usize) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (busy, log) = (dir.path().join("busy"), dir.path().join("log"));
    let script = format!(
        "if [ -e {busy} ]; then echo overlap >> {log}; fi; touch {busy}; sleep 0.3; \
         rm -f {busy}; echo run >> {log}",
        busy = busy.display(),
        log = log.display()
    );
    let children: Vec<_> = (0..n)
        .map(|_| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
            cmd.env_remove("QUORUMLOCK_KEY_PREFIX")
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .arg("exec");
            match by_env {
                true => cmd.env("QUORUMLOCK_NODES", nodes),
                false => cmd.env_remove("QUORUMLOCK_NODES").args(["--nodes", nodes]),
            };
            cmd.args([
                "--wait", "30s", "--ttl", "5s", resource, "--", "sh", "-c", &script,
            ])
            .spawn()
            .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{nodes}: exit {:?}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn exec_serialises_commands_through_cluster_and_sentinel_voters_and_leaves_no_key() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let group = SentinelGroup::spawn(1, 3).unwrap();
    let master = RedisServer::spawn().unwrap();
    let mixed = [master.url(), cluster.url(), group.url()].join(",");
    for (nodes, by_env) in [
        (cluster.url(), false),
        (group.url(), true),
        (mixed.clone(), true),
        (mixed, false),
    ] {
        let log = serialised(&nodes, by_env, "nightly-report", 3);
        assert_eq!(
            log.lines().filter(|l| *l == "run").count(),
            3,
            "{nodes}: {log}"
        );
        assert!(
            !log.contains("overlap"),
            "{nodes}: two commands at once: {log}"
        );
    }
    let mut left: Vec<String> = cluster
        .nodes()
        .iter()
        .flat_map(|n| keys_on(&n.url()))
        .collect();
    left.extend(keys_on(&master.url()));
    let primary = group.primary_addr().unwrap();
    left.extend(keys_on(&format!("redis://{primary}")));
    assert!(left.is_empty(), "keys left behind: {left:?}");
}

#[test]
fn a_cluster_node_given_as_a_master_is_refused_naming_the_cluster_spelling() {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env_remove("QUORUMLOCK_NODES")
        .stdin(Stdio::null())
        .args(["exec", "--nodes", &cluster.seed_url(), "job", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("redis+cluster://"), "{stderr}");
}

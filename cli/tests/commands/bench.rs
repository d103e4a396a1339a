//! `quorumlock bench` with every worker on one resource and a client of its own: the real
//! binary against testkit masters.

use std::process::Command;

use quorumlock_testkit::RedisNodes;

#[test]
fn bench_with_separate_clients_on_one_resource_reports_the_hand_off_and_leaves_no_key() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env("QUORUMLOCK_NODES", nodes.urls().join(","))
        .args(["bench", "--workers", "4", "--duration", "1s"])
        .args(["--contended", "--separate-clients", "--hold", "1ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shown = format!(
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{shown}");
    assert!(stdout.contains("on one resource, a client each"), "{shown}");
    let handoff = stdout
        .lines()
        .find(|l| l.starts_with("hand-off "))
        .unwrap_or_else(|| panic!("no hand-off row: {shown}"));
    assert!(!handoff.contains(" - "), "no hand-off measured: {shown}");
    let overlaps = stdout
        .lines()
        .find_map(|l| l.strip_prefix("overlaps"))
        .unwrap_or_else(|| panic!("no overlaps line: {shown}"));
    assert_eq!(overlaps.split_whitespace().next(), Some("0"), "{shown}");
    // The shared key and its line are gone from every master; only fencing counters may
    // stay, till they expire (key layout 2: `{quorumlock-bench:<run>:shared}:fence`).
    for server in nodes.iter() {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        assert!(
            keys.iter()
                .all(|k| !k.starts_with("{quorumlock-bench:") || k.ends_with("}:fence")),
            "{keys:?}\n{shown}"
        );
    }
}

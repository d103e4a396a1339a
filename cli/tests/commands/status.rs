//! `quorumlock status`, `unlock` and `list`: finding out who holds a lock, and breaking a stuck
//! one, with the real binary against testkit masters.

use crate::common;

use std::process::{Child, Output};
use std::time::Duration;

use common::{exec, quorumlock, text, wait_for_file, wait_for_report, wait_until, Witness};
use quorumlock_testkit::{RedisCluster, RedisNodes, SentinelGroup};
use serde_json::Value;

/// The lock key of `resource` (no key prefix): the name itself.
fn key(resource: &str) -> String {
    quorumlock::resource_key("", resource)
}

/// The holder description `exec` writes beside the lock of `resource`.
fn holder_key(resource: &str) -> String {
    quorumlock::companion_key(&key(resource), ":holder")
}

fn get(nodes: &RedisNodes, i: usize, key: &str) -> Option<String> {
    let mut conn = redis::Client::open(nodes[i].url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

/// An `exec` holding `resource` while its command waits for a file; returns once it runs.
fn holding(nodes: &RedisNodes, witness: &Witness, resource: &str) -> Child {
    holding_with(nodes, witness, resource, |_| {})
}

/// [`holding`], with the `exec` command adjusted by `adjust` first (its environment: other
/// voters, a key prefix).
fn holding_with(
    nodes: &RedisNodes,
    witness: &Witness,
    resource: &str,
    adjust: impl FnOnce(&mut std::process::Command),
) -> Child {
    // A file name for any resource name (`*`, `{`, `/`, ...).
    let file: String = resource
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let started = witness.path(&format!("{file}.{}.started", resource.len()));
    let mut cmd = exec(
        nodes,
        &["--resource", resource, "--ttl", "5s"],
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            witness.path("done").display()
        ),
    );
    adjust(&mut cmd);
    let child = cmd.spawn().unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(10)));
    child
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// Waits until `status` over `voters` shows `resource` held by all 3 and its holder `pid`: the
/// lock reaches the last voter, and the holder's description is written, after the command
/// starts.
fn wait_held_by(masters: &RedisNodes, voters: &str, resource: &str, pid: u32) {
    wait_for_report(
        || {
            let mut cmd = quorumlock(masters);
            cmd.env("QUORUMLOCK_NODES", voters)
                .args(["status", "--json", resource]);
            cmd
        },
        "the lock and its description on every voter",
        |r| r["holding"] == 3 && r["holder"]["pid"] == pid,
    );
}

#[test]
fn status_exits_0_when_free_75_when_held_69_without_a_quorum_and_names_the_holder() {
    let mut nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let free = quorumlock(&nodes).args(["status", "job"]).output().unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
    assert!(text(&free).contains("\"job\": free"), "{}", text(&free));

    let mut holder = holding(&nodes, &witness, "job");
    // The holder description is written beside the lock, best effort, just after it is taken;
    // the lock was on a quorum when the command started, and reaches the last master after.
    assert!(wait_until(Duration::from_secs(10), || {
        get(&nodes, 0, &holder_key("job")).is_some()
            && (0..3).all(|i| get(&nodes, i, &key("job")).is_some())
    }));
    let held = quorumlock(&nodes).args(["status", "job"]).output().unwrap();
    let shown = text(&held);
    assert_eq!(held.status.code(), Some(75), "{shown}");
    assert!(shown.contains(&format!("pid {}", holder.id())), "{shown}");
    assert!(shown.contains("running sh -c"), "{shown}");
    let token = get(&nodes, 0, &key("job")).unwrap();
    assert!(!shown.contains(&token), "the token is never shown: {shown}");

    let report = quorumlock(&nodes)
        .args(["status", "--json", "job"])
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(75), "{}", text(&report));
    assert!(!text(&report).contains(&token), "{}", text(&report));
    let report = json(&report);
    assert_eq!(report["verdict"], "held");
    assert_eq!(report["holding"], 3);
    assert_eq!(report["quorum"], 2);
    assert_eq!(report["holder"]["pid"], holder.id());
    assert_eq!(report["holder"]["lock"], report["token"]);
    assert_eq!(report["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(report["nodes"][0]["state"], "held");

    std::fs::write(witness.path("done"), "").unwrap();
    assert!(holder.wait().unwrap().success());
    // Released, and its description with it.
    assert_eq!(get(&nodes, 0, &holder_key("job")), None);

    nodes[0].kill().unwrap();
    nodes[1].kill().unwrap();
    let unknown = quorumlock(&nodes)
        .args(["status", "--json", "job"])
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(69), "{}", text(&unknown));
    assert_eq!(json(&unknown)["verdict"], "unknown");
    assert_eq!(json(&unknown)["nodes"][0]["state"], "down");
}

#[test]
fn unlock_shows_what_it_would_delete_and_deletes_only_with_force() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let holder = holding(&nodes, &witness, "stuck");
    // Every master has the lock and its description (each lands there after the command
    // starts), so that --force finds both everywhere.
    assert!(wait_until(Duration::from_secs(10), || (0..3).all(|i| {
        get(&nodes, i, &key("stuck")).is_some() && get(&nodes, i, &holder_key("stuck")).is_some()
    })));

    let dry = quorumlock(&nodes)
        .args(["unlock", "stuck"])
        .output()
        .unwrap();
    assert_eq!(
        dry.status.code(),
        Some(0),
        "a dry run is no failure: {}",
        text(&dry)
    );
    assert!(text(&dry).contains("would delete stuck "), "{}", text(&dry));
    assert!(
        text(&dry).contains(&format!("pid {}", holder.id())),
        "{}",
        text(&dry)
    );
    assert!(text(&dry).contains("--force"), "{}", text(&dry));
    assert!(get(&nodes, 0, &key("stuck")).is_some(), "nothing deleted");

    let forced = quorumlock(&nodes)
        .args(["unlock", "stuck", "--force"])
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    assert!(
        text(&forced).contains("deleted on 3/3 masters"),
        "{}",
        text(&forced)
    );
    for i in 0..3 {
        assert_eq!(get(&nodes, i, &key("stuck")), None);
        assert_eq!(get(&nodes, i, &holder_key("stuck")), None);
    }
    // The holder finds its token gone at its next renewal and stops its command at once.
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", text(&out));
    let again = exec(&nodes, &["--resource", "stuck", "-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
}

#[test]
fn list_shows_the_held_locks_under_a_prefix_with_their_holders() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let holders: Vec<Child> = ["reports:daily", "reports:weekly", "billing"]
        .into_iter()
        .map(|r| holding(&nodes, &witness, r))
        .collect();
    // Each lock reaches its last master after its command starts.
    assert!(wait_until(Duration::from_secs(10), || {
        get(&nodes, 0, &holder_key("billing")).is_some()
            && ["reports:daily", "reports:weekly", "billing"]
                .iter()
                .all(|r| (0..3).all(|i| get(&nodes, i, &key(r)).is_some()))
    }));

    let all = quorumlock(&nodes).args(["list"]).output().unwrap();
    assert_eq!(all.status.code(), Some(0), "{}", text(&all));
    let stdout = String::from_utf8_lossy(&all.stdout);
    // A header and three locks; the holder descriptions and fence counters are not locks.
    assert_eq!(stdout.lines().count(), 4, "{}", text(&all));
    assert!(
        stdout.contains(&format!("pid {}", holders[2].id())),
        "{stdout}"
    );

    let reports = quorumlock(&nodes)
        .args(["list", "--prefix", "reports:", "--json"])
        .output()
        .unwrap();
    assert_eq!(reports.status.code(), Some(0), "{}", text(&reports));
    let listed = json(&reports);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reports:daily", "reports:weekly"]);
    assert_eq!(listed[0]["state"], "held");
    assert_eq!(listed[0]["masters"], 3);

    std::fs::write(witness.path("done"), "").unwrap();
    for mut holder in holders {
        assert!(holder.wait().unwrap().success());
    }
    let none = quorumlock(&nodes).args(["list"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&none.stdout).trim(), "no locks");
}

#[test]
fn list_matches_names_and_prefixes_with_glob_characters_and_braces_literally() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let prefix = "k[1]:";
    let under = |p: &'static str| {
        move |cmd: &mut std::process::Command| {
            cmd.env("QUORUMLOCK_KEY_PREFIX", p);
        }
    };
    // (A name whose key has a `}` without a hash tag is refused by the library: `x{` is the
    // brace it takes alone.)
    let holders: Vec<Child> = ["x*1", "xy1", "x{1}", "x{"]
        .into_iter()
        .map(|r| holding_with(&nodes, &witness, r, under(prefix)))
        .chain([holding_with(&nodes, &witness, "x*2", under("k1:"))])
        .collect();
    let list = |args: &[&str]| {
        let out = quorumlock(&nodes)
            .args(["list", "--json", "--key-prefix", prefix])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let listed = json(&out);
        let mut names: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["resource"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    // Every lock under the prefix `k[1]:` (keys `{k[1]:...}`), and no other prefix's.
    assert_eq!(list(&[]), ["x*1", "xy1", "x{", "x{1}"]);
    // `*` is a character of the name, not a pattern.
    assert_eq!(list(&["--prefix", "x*"]), ["x*1"]);
    assert_eq!(list(&["--prefix", "x{"]), ["x{", "x{1}"]);

    std::fs::write(witness.path("done"), "").unwrap();
    for mut holder in holders {
        assert!(holder.wait().unwrap().success());
    }
}

#[test]
fn list_status_and_unlock_find_the_locks_on_a_redis_cluster_voter() {
    let masters = RedisNodes::spawn(2).unwrap();
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    // Two standalone masters and a cluster of three primaries: three voters.
    let voters = format!("{},{}", masters.urls().join(","), cluster.url());
    let on_voters = |cmd: &mut std::process::Command| {
        cmd.env("QUORUMLOCK_NODES", &voters);
    };
    // Resources whose keys live on every primary of the cluster, so that listing them takes a
    // SCAN of each.
    let mut resources: Vec<String> = Vec::new();
    let mut primaries = std::collections::BTreeSet::new();
    for i in 0.. {
        let resource = format!("reports:{i}");
        let owner = cluster
            .primary_for_key(quorumlock::resource_key("", &resource))
            .unwrap();
        if primaries.insert(owner) {
            resources.push(resource);
        }
        if primaries.len() == 3 {
            break;
        }
    }
    let witness = Witness::new();
    let holders: Vec<Child> = resources
        .iter()
        .map(|r| holding_with(&masters, &witness, r, on_voters))
        .collect();
    wait_held_by(&masters, &voters, &resources[0], holders[0].id());

    let listed = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["list", "--json"])
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let listed = json(&listed);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = resources.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(names, expected, "{listed:#}\n{}", cluster.logs());
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["state"] == "held"),
        "{listed:#}"
    );

    // status names the holder, whose description sits beside the lock on the cluster too.
    let status = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["status", "--json", &resources[0]])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(75), "{}", text(&status));
    assert_eq!(
        json(&status)["holder"]["pid"],
        holders[0].id(),
        "{}",
        text(&status)
    );

    // unlock --force deletes it on every voter, the cluster included.
    let forced = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["unlock", "--force", &resources[0]])
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    assert!(
        text(&forced).contains("deleted on 3/3 masters"),
        "{}",
        text(&forced)
    );
    let owner = cluster
        .primary_for_key(quorumlock::resource_key("", &resources[0]))
        .unwrap();
    let mut conn = redis::Client::open(cluster.nodes()[owner].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let left: Option<String> = redis::cmd("GET")
        .arg(quorumlock::resource_key("", &resources[0]))
        .query(&mut conn)
        .unwrap();
    assert_eq!(left, None);

    // Its holder finds its token gone at its next renewal and stops its command.
    let mut holders = holders.into_iter();
    let unlocked = holders.next().unwrap().wait_with_output().unwrap();
    assert_eq!(unlocked.status.code(), Some(76), "{}", text(&unlocked));
    std::fs::write(witness.path("done"), "").unwrap();
    for mut holder in holders {
        assert!(holder.wait().unwrap().success());
    }
}

#[test]
fn status_and_unlock_reach_the_master_a_sentinel_group_names() {
    let masters = RedisNodes::spawn(2).unwrap();
    let group = SentinelGroup::spawn(1, 3).unwrap();
    let voters = format!("{},{}", masters.urls().join(","), group.url());
    let witness = Witness::new();
    let holder = holding_with(&masters, &witness, "nightly", |cmd| {
        cmd.env("QUORUMLOCK_NODES", &voters);
    });
    wait_held_by(&masters, &voters, "nightly", holder.id());
    // The holder's description, written beside the lock on the master the Sentinels name, is
    // read back from there.
    let status = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["status", "--json", "nightly"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(75), "{}", text(&status));
    assert_eq!(
        json(&status)["holder"]["pid"],
        holder.id(),
        "{}",
        text(&status)
    );
    let forced = quorumlock(&masters)
        .env("QUORUMLOCK_NODES", &voters)
        .args(["unlock", "--force", "nightly"])
        .output()
        .unwrap();
    assert!(
        text(&forced).contains("deleted on 3/3 masters"),
        "{}",
        text(&forced)
    );
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", text(&out));
}

#[test]
fn list_cuts_a_very_long_name_for_its_table_and_json_keeps_it_whole() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    // Longer than a format width can be (65,535): the table once panicked on it.
    let name = "n".repeat(70_000);
    let started = witness.path("started");
    let mut holder = exec(
        &nodes,
        &[&name],
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            witness.path("done").display()
        ),
    )
    .spawn()
    .unwrap();
    assert!(wait_for_file(&started, Duration::from_secs(10)));
    let table = quorumlock(&nodes).arg("list").output().unwrap();
    let listed = quorumlock(&nodes)
        .args(["list", "--json"])
        .output()
        .unwrap();
    std::fs::write(witness.path("done"), "").unwrap();
    assert!(holder.wait().unwrap().success());

    assert_eq!(table.status.code(), Some(0), "{}", text(&table));
    let shown = String::from_utf8_lossy(&table.stdout);
    let row = shown.lines().nth(1).unwrap_or_default();
    assert!(row.contains("... (70000 characters)"), "{row:.300}");
    assert!(row.contains("held"), "{row:.300}");
    assert!(row.chars().count() < 500, "{row:.300}");
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    assert_eq!(json(&listed)[0]["resource"], name.as_str());
}

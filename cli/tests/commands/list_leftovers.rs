//! `quorumlock list` on masters that hold keys which look like locks but which key layout 3
//! refuses as a lock's name (a layout-2 lock `{orders:42}` left behind, another client's lock on
//! such a name): they are skipped with a warning naming them, and every valid lock is listed.

use crate::common;

use std::time::Duration;

use common::{quorumlock, text};
use quorumlock::Redlock;
use quorumlock_testkit::RedisNodes;
use serde_json::Value;

/// A token-shaped value: what a lock's key holds.
const TOKEN: &str = "ql-0123456789abcdef0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn list_skips_a_leftover_of_an_older_layout_with_a_warning_and_shows_the_held_locks() {
    let nodes = RedisNodes::spawn(3).unwrap();
    for server in nodes.iter() {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = redis::cmd("SET")
            .arg("{orders:42}")
            .arg(TOKEN)
            .arg("EX")
            .arg(60)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let rl = Redlock::builder(nodes.urls()).build().unwrap();
    let lock = rl.acquire("jobs:x", Duration::from_secs(30)).await.unwrap();

    let list = |json: bool| {
        let mut cmd = quorumlock(&nodes);
        cmd.arg("list");
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let table = list(false);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&table.stdout),
        String::from_utf8_lossy(&table.stderr),
    );
    assert_eq!(table.status.code(), Some(0), "{}", text(&table));
    assert!(stdout.contains("\"jobs:x\""), "{}", text(&table));
    assert!(stdout.contains("held"), "{}", text(&table));
    assert!(!stdout.contains("orders"), "{}", text(&table));
    assert!(stderr.contains("{orders:42}"), "{}", text(&table));
    assert!(stderr.contains("skipped"), "{}", text(&table));

    let json = list(true);
    assert_eq!(json.status.code(), Some(0), "{}", text(&json));
    let listed: Value = serde_json::from_slice(&json.stdout).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["jobs:x"], "{}", text(&json));
    assert!(
        String::from_utf8_lossy(&json.stderr).contains("{orders:42}"),
        "{}",
        text(&json)
    );

    lock.release().await.unwrap();
}

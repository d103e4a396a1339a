//! The commands quorumlock needs, feature by feature, as the ACL rules `docs/voters.md` lists
//! ("Commands and ACL rules"): each feature's behaviours run against servers whose only user
//! for the client has exactly that feature's rule, with no denial in any server's `ACL LOG`;
//! and each command a feature adds is shown to be needed, by taking it away and watching a
//! behaviour of that feature fail or a server deny it. So the table cannot drift.
//!
//! A feature's rule is the plain mutex's rule plus the feature's own commands; the key and
//! channel patterns are those of key layout 3 for the key prefix `locks:`. Nothing needs
//! `CONFIG`, `DEBUG` or `KEYS`: every rule starts from `-@all`.

use crate::common;

use std::time::Duration;

use common::{direct, eventually};
use quorumlock::{Durability, Redlock, RedlockBuilder};
use quorumlock_testkit::{RedisCluster, RedisNodes, RedisServer, SentinelGroup};

const TTL: Duration = Duration::from_secs(10);
const PREFIX: &str = "locks:";
const USER: &str = "quorumlock";
const PASSWORD: &str = "acl-pw-0f-the-client";
const SENTINEL_USER: &str = "quorumlock-sentinel";
const SENTINEL_PASSWORD: &str = "acl-pw-0n-the-sentinels";

/// The key and channel patterns of every rule (key layout 3, prefix `locks:`): lock keys and
/// the layout marker, companions in the lock key's slot, and the hand-off channels.
const PATTERNS: &[&str] = &["~locks:*", "~{locks:*", "&locks:*", "&{locks:*"];

/// The plain mutex: `try_acquire` (and `acquire` with `acquire_timeout(Duration::ZERO)`),
/// `extend`, `release` (by the script's source to a master that lost its scripts), a rollback,
/// and `connect()` (`INFO`: the checks that a master is standalone, that it can confirm durable
/// votes, and that no server is listed twice).
const MUTEX: &[&str] = &[
    "eval",
    "evalsha",
    "script|load",
    "set",
    "get",
    "del",
    "exists",
    "pexpire",
    "info",
];
/// Waiting in line (`acquire` while the resource is held) and the hand-off on release; a waiter
/// drops its hand-off channel a moment later (`SUNSUBSCRIBE`: refused, the channel stays
/// subscribed, logged as a denial).
const LINE: &[&str] = &[
    "zadd",
    "zrem",
    "zrange",
    "zscore",
    "pttl",
    "pexpiretime",
    "time",
    "spublish",
    "ssubscribe",
    "sunsubscribe",
];
/// Fencing tokens.
const FENCING: &[&str] = &["time"];
/// Durable votes confirmed by replicas (`Durability::Replicas`); `Durability::Aof` needs
/// `+waitaof` instead (Redis 7.2 or later, or Valkey).
const DURABLE: &[&str] = &["wait"];
/// A Redis Cluster voter, on every node: the cluster client's topology (`CLUSTER SLOTS`) and
/// its check of each new connection (`PING`: refused, the connection still works, but every new
/// connection is logged as a denial), and `connect()`'s comparison of node ids
/// (`CLUSTER NODES`).
const CLUSTER: &[&str] = &["cluster|slots", "cluster|nodes", "ping"];
/// A Sentinel voter, on its masters: the Sentinel client's check that the master it was named
/// is one (`ROLE`; refused, it falls back to `INFO replication`, logged as a denial).
const SENTINEL_MASTER: &[&str] = &["role"];
/// A Sentinel voter, on its Sentinels (a user of theirs, no keys): the lookup of the master and
/// the check that each Sentinel is one.
const SENTINELS: &[&str] = &["sentinel|masters", "role"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Mutex,
    Line,
    Fencing,
    Durable,
    Cluster,
    Sentinel,
}

const FEATURES: [Feature; 6] = [
    Feature::Mutex,
    Feature::Line,
    Feature::Fencing,
    Feature::Durable,
    Feature::Cluster,
    Feature::Sentinel,
];

impl Feature {
    /// The commands this feature adds to the plain mutex's (on the data nodes).
    fn own(self) -> &'static [&'static str] {
        match self {
            Feature::Mutex => MUTEX,
            Feature::Line => LINE,
            Feature::Fencing => FENCING,
            Feature::Durable => DURABLE,
            Feature::Cluster => CLUSTER,
            Feature::Sentinel => SENTINEL_MASTER,
        }
    }

    /// The whole rule's commands on the data nodes.
    fn commands(self) -> Vec<&'static str> {
        let mut all = MUTEX.to_vec();
        if self != Feature::Mutex {
            all.extend(self.own());
        }
        all
    }
}

/// `ACL SETUSER user reset on >password <patterns> -@all +<commands>`.
fn set_user(
    server: &RedisServer,
    user: &str,
    password: &str,
    patterns: &[&str],
    commands: &[&str],
) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"))
        .arg(patterns)
        .arg("-@all");
    for command in commands {
        cmd.arg(format!("+{command}"));
    }
    admin(server, &cmd);
    admin(server, redis::cmd("ACL").arg("LOG").arg("RESET"));
}

/// Runs `cmd` on `server` as the test kit's own user.
fn admin(server: &RedisServer, cmd: &redis::Cmd) {
    let mut conn = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: redis::Value = cmd.query(&mut conn).unwrap();
}

/// What `server` denied since its `ACL LOG` was last reset, as "object (reason)".
fn denials(server: &RedisServer) -> Vec<String> {
    let mut conn = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let entries: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut conn).unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let fields: Vec<String> = match entry {
                redis::Value::Array(items) => items
                    .into_iter()
                    .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                    .collect(),
                redis::Value::Map(pairs) => pairs
                    .into_iter()
                    .flat_map(|(k, v)| [k, v])
                    .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                    .collect(),
                _ => Vec::new(),
            };
            let field = |name: &str| {
                fields
                    .iter()
                    .position(|f| f == name)
                    .and_then(|i| fields.get(i + 1))
                    .cloned()
                    .unwrap_or_default()
            };
            format!("{} ({})", field("object"), field("reason"))
        })
        .collect()
}

/// The servers a feature runs on.
struct Servers {
    /// Standalone masters (with a replica each, for durable votes).
    masters: RedisNodes,
    _replicas: Vec<RedisServer>,
    cluster: RedisCluster,
    group: SentinelGroup,
}

impl Servers {
    fn spawn() -> Servers {
        let masters = RedisNodes::spawn(3).unwrap();
        let replicas = masters
            .iter()
            .map(|m| m.spawn_replica(RedisServer::builder()).unwrap())
            .collect();
        Servers {
            masters,
            _replicas: replicas,
            cluster: RedisCluster::spawn(3, 0).unwrap(),
            group: SentinelGroup::builder()
                .replicas(0)
                .sentinel_password("admin-pw-of-the-sentinels")
                .spawn()
                .unwrap(),
        }
    }

    /// The data nodes `feature` runs on.
    fn data_nodes(&self, feature: Feature) -> Vec<&RedisServer> {
        match feature {
            Feature::Cluster => self.cluster.nodes().iter().collect(),
            Feature::Sentinel => self.group.servers().iter().collect(),
            _ => self.masters.iter().collect(),
        }
    }

    /// Gives the client's user `commands` on `feature`'s data nodes (and the Sentinels' user
    /// `sentinel_commands` on the Sentinels), and flushes what earlier runs left.
    fn grant(&self, feature: Feature, commands: &[&str], sentinel_commands: &[&str]) {
        for server in self.data_nodes(feature) {
            if !matches!(feature, Feature::Cluster | Feature::Sentinel) {
                admin(server, &redis::cmd("FLUSHALL"));
                admin(server, redis::cmd("SCRIPT").arg("FLUSH"));
            }
            set_user(server, USER, PASSWORD, PATTERNS, commands);
        }
        if feature == Feature::Cluster {
            for node in self.cluster.nodes() {
                admin(node, &redis::cmd("FLUSHALL"));
                admin(node, redis::cmd("SCRIPT").arg("FLUSH"));
            }
        }
        if feature == Feature::Sentinel {
            let primary = &self.group[self.group.primary().unwrap()];
            admin(primary, &redis::cmd("FLUSHALL"));
            admin(primary, redis::cmd("SCRIPT").arg("FLUSH"));
            for sentinel in self.group.sentinels() {
                set_user(
                    sentinel,
                    SENTINEL_USER,
                    SENTINEL_PASSWORD,
                    &[],
                    sentinel_commands,
                );
            }
        }
    }

    /// Every denial on `feature`'s servers since [`grant`](Self::grant).
    fn denials(&self, feature: Feature) -> Vec<String> {
        let mut all: Vec<String> = self
            .data_nodes(feature)
            .into_iter()
            .flat_map(denials)
            .collect();
        if feature == Feature::Sentinel {
            all.extend(self.group.sentinels().iter().flat_map(denials));
        }
        all
    }

    /// A client of `feature`'s voters, logged in as the client's user.
    fn client(&self, feature: Feature) -> RedlockBuilder {
        let urls: Vec<String> = match feature {
            Feature::Cluster => {
                let url = self.cluster.url();
                let rest = url.strip_prefix("redis+cluster://").unwrap();
                vec![format!("redis+cluster://{USER}:{PASSWORD}@{rest}")]
            }
            Feature::Sentinel => {
                let url = self.group.url();
                let rest = url.strip_prefix("redis+sentinel://").unwrap();
                vec![format!(
                    "redis+sentinel://{USER}:{PASSWORD}@{rest}?sentinel_username={SENTINEL_USER}&sentinel_password={SENTINEL_PASSWORD}"
                )]
            }
            _ => self
                .masters
                .iter()
                .map(|s| format!("redis://{USER}:{PASSWORD}@127.0.0.1:{}", s.port()))
                .collect(),
        };
        let builder = Redlock::builder(urls)
            .key_prefix(PREFIX)
            .node_timeout(Duration::from_millis(500))
            .retry_count(2)
            .retry_delay(Duration::from_millis(20));
        match feature {
            Feature::Line => builder,
            Feature::Fencing => builder.fencing(true).acquire_timeout(Duration::ZERO),
            Feature::Durable => builder
                .durability(Durability::Replicas(1))
                .acquire_timeout(Duration::ZERO),
            _ => builder.acquire_timeout(Duration::ZERO),
        }
    }

    /// Sets a foreign holder's key for `resource` on the first `n` masters.
    fn hold_elsewhere(&self, resource: &str, n: usize) {
        let key = quorumlock::resource_key(PREFIX, resource);
        for server in self.masters.iter().take(n) {
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg("someone-else")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query(&mut direct(server))
                .unwrap();
        }
    }

    /// `feature`'s behaviours, as one client sees them; `Err` names the first that failed.
    async fn behaviours(&self, feature: Feature) -> Result<(), String> {
        let rl = self.client(feature).build().map_err(|e| e.to_string())?;
        let other = self.client(feature).build().map_err(|e| e.to_string())?;
        rl.connect().await.map_err(|e| format!("connect: {e}"))?;
        let mut lock = rl
            .acquire("orders:1", TTL)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        match other.try_acquire("orders:1", TTL).await {
            Err(e) if e.is_contention() => {}
            refused => return Err(format!("refuse a second holder: {refused:?}")),
        }
        lock.extend(TTL).await.map_err(|e| format!("extend: {e}"))?;
        match feature {
            Feature::Line => {
                // Waiting in line: the release hands the lock to the waiter, which then
                // keeps the hand-off channel a moment (its end is the only `SUNSUBSCRIBE`).
                let waiting = {
                    let other = other.clone();
                    tokio::spawn(async move { other.acquire("orders:1", TTL).await })
                };
                // Released once the waiter has its place in line and listens for the hand-off
                // (without `+ssubscribe` it never listens: then after a while).
                let line = quorumlock::companion_key(
                    &quorumlock::resource_key(PREFIX, "orders:1"),
                    ":queue",
                );
                let ready = |server: &RedisServer| {
                    let queued: usize = redis::cmd("ZCARD")
                        .arg(&line)
                        .query(&mut direct(server))
                        .unwrap();
                    let channels: Vec<String> = redis::cmd("PUBSUB")
                        .arg("SHARDCHANNELS")
                        .query(&mut direct(server))
                        .unwrap();
                    queued > 0 && !channels.is_empty()
                };
                eventually(Duration::from_secs(3), || self.masters.iter().all(ready)).await;
                lock.release().await.map_err(|e| format!("release: {e}"))?;
                let handed = waiting
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("wait in line: {e}"))?;
                if other.stats().wakeups == 0 {
                    return Err("the waiter was not handed the lock".into());
                }
                handed
                    .release()
                    .await
                    .map_err(|e| format!("release after the wait: {e}"))?;
                let subscribed = |server: &RedisServer| {
                    let channels: Vec<String> = redis::cmd("PUBSUB")
                        .arg("SHARDCHANNELS")
                        .query(&mut direct(server))
                        .unwrap();
                    !channels.is_empty()
                };
                let started = std::time::Instant::now();
                while self.masters.iter().any(subscribed) {
                    if started.elapsed() > Duration::from_secs(6) {
                        return Err("the hand-off channel was never unsubscribed".into());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Feature::Fencing => {
                let first = lock.fencing_token();
                lock.release().await.map_err(|e| format!("release: {e}"))?;
                // The second round: the counters disagree, and one master refuses.
                const AHEAD: u64 = 4_000_000_000_000_000;
                let key = quorumlock::resource_key(PREFIX, "orders:2");
                let fence = quorumlock::companion_key(&key, ":fence");
                for (i, server) in self.masters.iter().enumerate() {
                    let _: () = redis::cmd("SET")
                        .arg(&fence)
                        .arg(AHEAD + if i == 0 { 20 } else { 10 })
                        .query(&mut direct(server))
                        .unwrap();
                }
                let last = &self.masters[2];
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("someone-else")
                    .query(&mut direct(last))
                    .unwrap();
                let second = other
                    .acquire("orders:2", TTL)
                    .await
                    .map_err(|e| format!("fenced acquire: {e}"))?;
                if second.fencing_token() != Some(AHEAD + 21) || first.is_none() {
                    return Err(format!(
                        "fences {first:?} then {:?}",
                        second.fencing_token()
                    ));
                }
                second
                    .release()
                    .await
                    .map_err(|e| format!("fenced release: {e}"))?;
            }
            Feature::Mutex => {
                // A master that lost its scripts since the connection loaded them (an operator's
                // `SCRIPT FLUSH`, or a cluster's replica promoted with an empty cache) is sent
                // the release's source (`EVAL`).
                for server in &self.masters {
                    admin(server, redis::cmd("SCRIPT").arg("FLUSH"));
                }
                lock.release().await.map_err(|e| format!("release: {e}"))?;
            }
            _ => {
                lock.release().await.map_err(|e| format!("release: {e}"))?;
            }
        }
        if matches!(feature, Feature::Mutex | Feature::Durable) {
            // A rollback: two masters of three hold the resource for someone else, the third
            // grants and is given back by the script's source (`EVAL`).
            self.hold_elsewhere("orders:3", 2);
            match rl.try_acquire("orders:3", TTL).await {
                Err(e) if e.is_contention() => {}
                other => return Err(format!("contended attempt: {other:?}")),
            }
            let key = quorumlock::resource_key(PREFIX, "orders:3");
            let gone = eventually(Duration::from_secs(2), || {
                let left: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query(&mut direct(&self.masters[2]))
                    .unwrap();
                left.is_none()
            })
            .await;
            if !gone {
                return Err("the rollback left the third master's grant".into());
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_features_acl_rule_lets_its_behaviours_through_without_a_denial() {
    let servers = Servers::spawn();
    for feature in FEATURES {
        servers.grant(feature, &feature.commands(), SENTINELS);
        let outcome = servers.behaviours(feature).await;
        let denied = servers.denials(feature);
        println!("{feature:?}: {outcome:?}; denied {denied:?}");
        assert_eq!(outcome, Ok(()), "{feature:?}");
        assert!(
            denied.is_empty(),
            "{feature:?}: the servers denied {denied:?}"
        );
    }
    // Outside the rule, nothing: no CONFIG, DEBUG, KEYS or FLUSHALL, no other key.
    let mut conn = redis::Client::open(format!(
        "redis://{USER}:{PASSWORD}@127.0.0.1:{}",
        servers.masters[0].port()
    ))
    .unwrap()
    .get_connection()
    .unwrap();
    for forbidden in [
        redis::cmd("CONFIG").arg("GET").arg("*").to_owned(),
        redis::cmd("DEBUG").arg("SLEEP").arg("0").to_owned(),
        redis::cmd("KEYS").arg("*").to_owned(),
        redis::cmd("FLUSHALL"),
        redis::cmd("GET").arg("other:key").to_owned(),
    ] {
        let denied: redis::RedisResult<redis::Value> = forbidden.query(&mut conn);
        assert!(
            denied
                .as_ref()
                .is_err_and(|e| e.to_string().to_lowercase().contains("noperm")),
            "{denied:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_command_a_feature_adds_is_needed_by_that_feature() {
    let servers = Servers::spawn();
    let mut unneeded = Vec::new();
    for feature in FEATURES {
        let mut cases: Vec<(&str, Vec<&str>, Vec<&str>)> = feature
            .own()
            .iter()
            .map(|left_out| {
                let fewer: Vec<&str> = feature
                    .commands()
                    .into_iter()
                    .filter(|c| c != left_out)
                    .collect();
                (*left_out, fewer, SENTINELS.to_vec())
            })
            .collect();
        if feature == Feature::Sentinel {
            cases.extend(SENTINELS.iter().map(|left_out| {
                let fewer = SENTINELS
                    .iter()
                    .copied()
                    .filter(|c| c != left_out)
                    .collect();
                (*left_out, feature.commands(), fewer)
            }));
        }
        for (left_out, commands, sentinel_commands) in cases {
            servers.grant(feature, &commands, &sentinel_commands);
            let outcome = servers.behaviours(feature).await;
            let denied = servers.denials(feature);
            println!("{feature:?} without +{left_out}: {outcome:?}; denied {denied:?}");
            if outcome.is_ok() && denied.is_empty() {
                unneeded.push(format!("{feature:?}: {left_out}"));
            }
        }
    }
    assert!(unneeded.is_empty(), "not needed: {unneeded:?}");
}

/// The rules pasted in `docs/voters.md` ("Commands and ACL rules"), by the comment above each.
fn guide_rules() -> Vec<(String, Vec<String>)> {
    let guide = include_str!("../../docs/voters.md");
    let section = guide
        .split("### Commands and ACL rules")
        .nth(1)
        .expect("the section");
    let block = section.split("```text").nth(1).expect("the rules");
    let block = block.split("```").next().unwrap_or_default();
    let mut rules = Vec::new();
    let mut title = String::new();
    for line in block.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            title = comment.to_owned();
        } else if line.starts_with("ACL SETUSER") {
            let commands = line
                .split_whitespace()
                .filter_map(|w| w.strip_prefix('+'))
                .map(str::to_owned)
                .collect();
            rules.push((title.clone(), commands));
        }
    }
    rules
}

#[test]
fn the_rules_in_the_guide_are_the_rules_tested_here() {
    let owned = |cs: &[&str]| cs.iter().map(|c| c.to_string()).collect::<Vec<String>>();
    let mut durable = owned(DURABLE);
    durable.push("waitaof".to_owned());
    let expected: Vec<(&str, Vec<String>)> = vec![
        ("plain mutex", owned(MUTEX)),
        ("waiting in line", owned(LINE)),
        ("fencing tokens", owned(FENCING)),
        ("durable votes", durable),
        ("Redis Cluster voter", owned(CLUSTER)),
        ("Sentinel voter, on its masters", owned(SENTINEL_MASTER)),
        ("Sentinel voter, on each Sentinel", owned(SENTINELS)),
    ];
    let guide = guide_rules();
    assert_eq!(guide.len(), expected.len(), "{guide:?}");
    for ((title, commands), (starts, tested)) in guide.iter().zip(&expected) {
        assert!(title.starts_with(starts), "{title:?} is not {starts:?}");
        let mut commands = commands.clone();
        let mut tested = tested.clone();
        commands.sort();
        tested.sort();
        assert_eq!(commands, tested, "{title}");
    }
    // And the patterns of the plain mutex's rule are the ones tested.
    let block = include_str!("../../docs/voters.md");
    let line = block
        .lines()
        .find(|l| l.starts_with("ACL SETUSER quorumlock reset on >PASSWORD ~locks:*"))
        .unwrap();
    for pattern in PATTERNS {
        assert!(line.split_whitespace().any(|w| w == *pattern), "{line}");
    }
}

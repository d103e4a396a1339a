//! Redis Cluster and Sentinel topologies against real servers: `redis-server` (or the binary
//! named by `QUORUMLOCK_REDIS_SERVER`, such as a `valkey-server`), and `redis-cli` to create the
//! clusters.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use quorumlock_testkit::{
    key_slot, FailoverMode, RedisCluster, RedisServer, RedisServerBuilder, SentinelGroup,
};

/// A connection of its own to `server`.
fn connect(server: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(server.url()).unwrap();
    let connection = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    connection
}

fn role(server: &RedisServer) -> String {
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut connect(server)).unwrap();
    redis::from_redis_value_ref(&reply[0]).unwrap()
}

fn get(server: &RedisServer, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(&mut connect(server))
}

/// `count` keys whose names share `{tag}`, so they all live in one slot.
fn tagged_keys(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{{{tag}}}:key:{i}")).collect()
}

/// Polls `check` until it holds, for at most `timeout`.
fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn key_slot_agrees_with_cluster_keyslot() {
    let server = RedisServerBuilder::new()
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-config-file")
        .arg("nodes.conf")
        .spawn()
        .unwrap();
    let mut connection = connect(&server);
    let mut keys: Vec<String> = [
        "",
        "foo",
        "bar",
        "hello",
        "{user1000}.following",
        "{user1000}.followers",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{",
        "}{",
        "a{b",
        "quorumlock:jobs",
        "ключ",
    ]
    .map(String::from)
    .to_vec();
    keys.extend((0..500).map(|i| format!("key:{i}:{}", i * 7919)));
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
    }
    let slots: Vec<u16> = pipe.query(&mut connection).unwrap();
    for (key, slot) in keys.iter().zip(slots) {
        assert_eq!(key_slot(key), slot, "CLUSTER KEYSLOT {key:?}");
    }
}

#[test]
fn a_three_primary_cluster_serves_every_slot_from_the_primary_that_owns_it() {
    let cluster = RedisCluster::spawn(3, 1).unwrap();
    assert_eq!(cluster.len(), 6);
    assert_eq!(cluster.primaries().unwrap(), [0, 1, 2]);
    for primary in 0..3 {
        assert_eq!(role(&cluster[primary]), "master");
        assert_eq!(cluster.replicas_of(primary).unwrap(), [3 + primary]);
        assert_eq!(role(&cluster[3 + primary]), "slave");
    }
    assert_eq!(cluster.primary_for_slot(0).unwrap(), 0);
    assert_eq!(cluster.primary_for_slot(16383).unwrap(), 2);
    assert_eq!(cluster.seed_url(), cluster[0].url());
    let seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", seeds.join(","))
    );

    // One key for every slot, written to and read back from the primary that owns it.
    let mut key_of_slot: Vec<Option<String>> = vec![None; 16384];
    let mut missing = 16384;
    let mut n = 0u64;
    while missing > 0 {
        let key = format!("k{n}");
        let slot = &mut key_of_slot[usize::from(key_slot(&key))];
        if slot.is_none() {
            *slot = Some(key);
            missing -= 1;
        }
        n += 1;
    }
    let owners = slot_owners(&cluster);
    for slot in (0..16384u16).step_by(97).chain([16383]) {
        assert_eq!(
            cluster.primary_for_slot(slot).unwrap(),
            owners[usize::from(slot)]
        );
    }
    let mut by_primary: HashMap<usize, Vec<&str>> = HashMap::new();
    for key in key_of_slot.iter().flatten() {
        let primary = owners[usize::from(key_slot(key))];
        by_primary.entry(primary).or_default().push(key);
    }
    assert_eq!(by_primary.len(), 3);
    for (&primary, keys) in &by_primary {
        let mut connection = connect(&cluster[primary]);
        let mut set = redis::pipe();
        for key in keys {
            set.cmd("SET").arg(*key).arg(*key).ignore();
        }
        set.query::<()>(&mut connection).unwrap();
        let mut read = redis::pipe();
        for key in keys {
            read.cmd("GET").arg(*key);
        }
        let values: Vec<String> = read.query(&mut connection).unwrap();
        assert_eq!(values, *keys);
    }
    let total: usize = by_primary.values().map(Vec::len).sum();
    assert_eq!(total, 16384);
    // Asked of the wrong primary, a key is redirected to its owner.
    let key = by_primary[&0][0];
    let error = get(&cluster[1], key).unwrap_err();
    assert_eq!(error.code(), Some("MOVED"));
    assert_eq!(
        error.redirect_node(),
        Some((cluster[0].addr().to_string().as_str(), key_slot(key)))
    );
    assert_eq!(
        cluster.primary_for_key(key).unwrap(),
        0,
        "primary_for_key agrees with primary_for_slot"
    );
}

/// Whether a slot field of `CLUSTER NODES` (`5461-10922`, `93`, `[93->-id]`) serves `slot`.
fn range_serves(range: &str, slot: u16) -> bool {
    if range.starts_with('[') {
        return false;
    }
    let (start, end) = range.split_once('-').unwrap_or((range, range));
    (start.parse::<u16>().unwrap()..=end.parse::<u16>().unwrap()).contains(&slot)
}

/// The owner of every slot, read once from node 0's `CLUSTER NODES`.
fn slot_owners(cluster: &RedisCluster) -> Vec<usize> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut connect(&cluster[0]))
        .unwrap();
    let mut owners = vec![usize::MAX; 16384];
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let index = (0..cluster.len())
            .find(|&i| cluster.node_id(i) == Some(fields[0]))
            .unwrap();
        for range in &fields[8..] {
            for slot in 0..16384u16 {
                if range_serves(range, slot) {
                    owners[usize::from(slot)] = index;
                }
            }
        }
    }
    owners
}

#[test]
fn migrate_slot_moves_the_keys_and_every_node_agrees() {
    let cluster = RedisCluster::spawn(3, 1).unwrap();
    let keys = tagged_keys("orders", 250);
    let slot = key_slot(&keys[0]);
    let source = cluster.primary_for_slot(slot).unwrap();
    let target = (0..3).find(|&p| p != source).unwrap();
    let mut connection = connect(&cluster[source]);
    for key in &keys {
        redis::cmd("SET")
            .arg(key)
            .arg(key)
            .query::<()>(&mut connection)
            .unwrap();
    }

    cluster.migrate_slot(slot, target).unwrap();

    assert_eq!(cluster.primary_for_slot(slot).unwrap(), target);
    let target_id = cluster.node_id(target).unwrap().to_owned();
    for node in cluster.nodes() {
        let mut connection = connect(node);
        let keyslot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&keys[0])
            .query(&mut connection)
            .unwrap();
        assert_eq!(keyslot, slot);
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut connection)
            .unwrap();
        let line = nodes
            .lines()
            .find(|line| line.starts_with(&target_id))
            .unwrap();
        let serves = line
            .split_whitespace()
            .skip(8)
            .any(|range| range_serves(range, slot));
        assert!(serves, "{} says:\n{nodes}", node.addr());
    }
    let count: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut connect(&cluster[target]))
        .unwrap();
    assert_eq!(count, keys.len());
    let count: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut connect(&cluster[source]))
        .unwrap();
    assert_eq!(count, 0);
    for key in &keys {
        assert_eq!(get(&cluster[target], key).unwrap().as_deref(), Some(&**key));
    }
    let error = get(&cluster[source], &keys[0]).unwrap_err();
    assert_eq!(error.code(), Some("MOVED"));
    assert_eq!(
        error.redirect_node(),
        Some((cluster[target].addr().to_string().as_str(), slot))
    );
}

#[test]
fn a_moved_key_answers_ask_on_the_source_during_a_migration() {
    let cluster = RedisCluster::spawn(3, 1).unwrap();
    let keys = tagged_keys("lock", 10);
    let slot = key_slot(&keys[0]);
    let source = cluster.primary_for_slot(slot).unwrap();
    let target = (0..3).find(|&p| p != source).unwrap();
    for key in &keys {
        redis::cmd("SET")
            .arg(key)
            .arg(key)
            .query::<()>(&mut connect(&cluster[source]))
            .unwrap();
    }

    let mut migration = cluster.begin_migration(slot, target).unwrap();

    assert_eq!(
        (migration.slot(), migration.source(), migration.target()),
        (slot, source, target)
    );
    assert_eq!(migration.moved_keys().len(), 5);
    let (moved, stayed): (Vec<&String>, Vec<&String>) =
        keys.iter().partition(|key| migration.is_moved(key));
    let target_addr = cluster[target].addr().to_string();
    for key in &moved {
        let error = get(&cluster[source], key).unwrap_err();
        assert_eq!(error.code(), Some("ASK"), "{error}");
        assert_eq!(error.redirect_node(), Some((target_addr.as_str(), slot)));
        // The target serves it after ASKING, and redirects a plain GET back to the owner.
        let mut connection = connect(&cluster[target]);
        let (_, value): ((), Option<String>) = redis::pipe()
            .cmd("ASKING")
            .cmd("GET")
            .arg(*key)
            .query(&mut connection)
            .unwrap();
        assert_eq!(value.as_deref(), Some(key.as_str()));
        let error = get(&cluster[target], key).unwrap_err();
        assert_eq!(error.code(), Some("MOVED"), "{error}");
    }
    for key in &stayed {
        assert_eq!(
            get(&cluster[source], key).unwrap().as_deref(),
            Some(key.as_str())
        );
    }
    // A key that does not exist yet is sent to the target too.
    let error = get(&cluster[source], "{lock}:new").unwrap_err();
    assert_eq!(error.code(), Some("ASK"), "{error}");
    // One more key moved by hand.
    assert!(cluster.migrate_key(&mut migration, stayed[0]).unwrap());
    assert_eq!(
        get(&cluster[source], stayed[0]).unwrap_err().code(),
        Some("ASK")
    );

    cluster.finish_migration(migration).unwrap();

    assert_eq!(cluster.primary_for_slot(slot).unwrap(), target);
    for key in &keys {
        assert_eq!(
            get(&cluster[target], key).unwrap().as_deref(),
            Some(key.as_str())
        );
        assert_eq!(
            get(&cluster[source], key).unwrap_err().code(),
            Some("MOVED")
        );
    }
}

#[test]
fn killing_a_cluster_primary_promotes_its_replica_and_restart_brings_it_back_as_a_replica() {
    let mut cluster = RedisCluster::spawn(3, 1).unwrap();
    let slot = key_slot("jobs");
    let old = cluster.primary_for_slot(slot).unwrap();
    let replicas = cluster.replicas_of(old).unwrap();
    assert_eq!(replicas.len(), 1);

    let promotion = cluster.kill_primary(slot).unwrap();

    assert_eq!(promotion.old_primary, old);
    assert_eq!(promotion.new_primary, replicas[0]);
    assert!(!cluster[old].is_running());
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), replicas[0]);
    assert_eq!(role(&cluster[replicas[0]]), "master");
    redis::cmd("SET")
        .arg("jobs")
        .arg("after the failover")
        .query::<()>(&mut connect(&cluster[replicas[0]]))
        .unwrap();

    cluster.restart(old).unwrap();

    assert_eq!(role(&cluster[old]), "slave");
    assert_eq!(cluster.replicas_of(replicas[0]).unwrap(), [old]);
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), replicas[0]);
    // The restarted node replicates its new primary's data.
    eventually(
        "the restarted node has the key",
        Duration::from_secs(10),
        || {
            let mut connection = connect(&cluster[old]);
            let (_, value): ((), Option<String>) = redis::pipe()
                .cmd("READONLY")
                .cmd("GET")
                .arg("jobs")
                .query(&mut connection)
                .unwrap();
            value.as_deref() == Some("after the failover")
        },
    );
}

#[test]
fn a_graceful_cluster_failover_swaps_a_primary_and_its_replica() {
    let mut cluster = RedisCluster::spawn(3, 1).unwrap();
    let slot = 6000;
    let old = cluster.primary_for_slot(slot).unwrap();
    let replica = cluster.replicas_of(old).unwrap()[0];

    let promotion = cluster.failover(slot, FailoverMode::Graceful).unwrap();

    assert_eq!(
        (promotion.old_primary, promotion.new_primary),
        (old, replica)
    );
    assert_eq!(cluster.primary_for_slot(slot).unwrap(), replica);
    assert_eq!(role(&cluster[replica]), "master");
    assert_eq!(role(&cluster[old]), "slave");
    assert_eq!(cluster.replicas_of(replica).unwrap(), [old]);

    // And back, forced this time.
    let promotion = cluster.failover(slot, FailoverMode::Force).unwrap();

    assert_eq!(
        (promotion.old_primary, promotion.new_primary),
        (replica, old)
    );
    assert_eq!(role(&cluster[old]), "master");
    assert_eq!(role(&cluster[replica]), "slave");
}

/// What every Sentinel of `group` answers to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
fn sentinel_answers(group: &SentinelGroup) -> Vec<u16> {
    group
        .sentinels()
        .iter()
        .map(|sentinel| {
            let (_, port): (String, u16) = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(group.master_name())
                .query(&mut connect(sentinel))
                .unwrap();
            port
        })
        .collect()
}

#[test]
fn a_sentinel_failover_changes_the_primary_address_and_role() {
    let mut group = SentinelGroup::spawn(1, 3).unwrap();
    let sentinels: Vec<String> = group
        .sentinel_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        group.url(),
        format!("redis+sentinel://{}/mymaster", sentinels.join(","))
    );
    assert_eq!(group.master_name(), "mymaster");
    assert_eq!(group.primary().unwrap(), 0);
    assert_eq!(sentinel_answers(&group), [group[0].port(); 3]);
    assert_eq!(role(&group[0]), "master");
    assert_eq!(role(&group[1]), "slave");
    for sentinel in group.sentinels() {
        let master: HashMap<String, String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg("mymaster")
            .query(&mut connect(sentinel))
            .unwrap();
        assert_eq!(master["num-other-sentinels"], "2");
        assert_eq!(master["num-slaves"], "1");
        assert_eq!(master["quorum"], "2");
    }

    let promotion = group.failover().unwrap();

    assert_eq!((promotion.old_primary, promotion.new_primary), (0, 1));
    assert_eq!(group.primary().unwrap(), 1);
    assert_eq!(group.primary_addr().unwrap(), group[1].addr());
    assert_eq!(sentinel_answers(&group), [group[1].port(); 3]);
    assert_eq!(role(&group[1]), "master");
    redis::cmd("SET")
        .arg("jobs")
        .arg("on the new primary")
        .query::<()>(&mut connect(&group[1]))
        .unwrap();
}

#[test]
fn a_killed_sentinel_primary_is_replaced_and_comes_back_as_a_replica() {
    // With the default second, a loaded machine has seen the Sentinels find the new primary
    // silent just after the switch and fail over again, to the node that had just come back
    // (empty; it ended as the primary). Three seconds keep the test to the one failover.
    let mut group = SentinelGroup::builder()
        .replicas(1)
        .sentinels(3)
        .down_after(Duration::from_secs(3))
        .spawn()
        .unwrap();

    let promotion = group.kill_primary().unwrap();

    assert_eq!((promotion.old_primary, promotion.new_primary), (0, 1));
    assert!(!group[0].is_running());
    assert_eq!(group.primary().unwrap(), 1);
    assert_eq!(sentinel_answers(&group), [group[1].port(); 3]);
    assert_eq!(role(&group[1]), "master");

    group.restart(0).unwrap();

    assert!(group[0].is_running());
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut connect(&group[0]))
        .unwrap();
    assert_eq!(role(&group[0]), "slave", "{info}");
    assert_eq!(group.primary().unwrap(), 1);
    assert!(
        info.contains(&format!("master_port:{}", group[1].port())),
        "{info}"
    );
    assert!(info.contains("master_link_status:up"), "{info}");
}

//! Durable votes: with `Durability::Replicas(n)` a master's grant counts only once `n` of its
//! replicas acknowledged it (`WAIT`, in the same pipeline as the grant); with `Durability::Aof`
//! only once fsynced to the append-only file (`WAITAOF`). Against real primaries with real
//! replicas.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Durability, Error, Redlock};
use quorumlock_testkit::{RedisServer, RedisServerBuilder};

const TTL: Duration = Duration::from_secs(5);

/// A primary and its replica, the replication link up.
struct Voter {
    primary: RedisServer,
    replica: RedisServer,
}

fn info(server: &RedisServer, section: &str) -> String {
    query(server, redis::cmd("INFO").arg(section))
}

/// Servers that time a blocked `WAIT` out within 10 ms (`hz 100`) rather than 100 ms: an
/// unconfirmed grant is then reported as such well within the node timeouts used here.
fn server() -> RedisServerBuilder {
    RedisServerBuilder::new().arg("--hz").arg("100")
}

fn voter() -> Voter {
    let primary = server().spawn().unwrap();
    let replica = primary.spawn_replica(server()).unwrap();
    Voter { primary, replica }
}

fn voters(n: usize) -> Vec<Voter> {
    (0..n).map(|_| voter()).collect()
}

fn durable(voters: &[Voter], durability: Durability, node_timeout: Duration) -> Redlock {
    Redlock::builder(voters.iter().map(|v| v.primary.url()))
        .node_timeout(node_timeout)
        .retry_count(0)
        .durability(durability)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_counts_once_a_replica_has_it_and_so_does_an_extend() {
    let voters = voters(3);
    let rl = durable(&voters, Durability::Replicas(1), Duration::from_millis(500));
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    let mut lock = rl.acquire("ledger", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    // Read at once: every master that counted had its replica confirm the key first.
    let replicated = voters
        .iter()
        .filter(|v| get(&v.replica, &lock_key("ledger")).as_deref() == Some(token.as_str()))
        .count();
    assert!(replicated >= 2, "on {replicated} replicas");
    lock.extend(TTL * 4).await.unwrap();
    let renewed = voters
        .iter()
        .filter(|v| pttl(&v.replica, &lock_key("ledger")) > TTL.as_millis() as i64)
        .count();
    assert!(renewed >= 2, "renewed on {renewed} replicas");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn grants_their_replicas_do_not_confirm_do_not_count_and_are_rolled_back() {
    let voters = voters(3);
    let rl = durable(&voters, Durability::Replicas(1), Duration::from_millis(300));
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    // Two replicas stall: their primaries still grant, but cannot confirm.
    voters[0].replica.pause().unwrap();
    voters[1].replica.pause().unwrap();
    let err = rl.try_acquire("ledger", TTL).await.unwrap_err();
    let Error::NotAcquired { granted, nodes, .. } = &err else {
        panic!("not NotAcquired: {err}");
    };
    assert!(*granted <= 1, "{err}");
    let unconfirmed = nodes
        .iter()
        .filter(|e| {
            e.to_string()
                .contains("not confirmed durable: 0 of 1 replicas acknowledged it in time")
        })
        .count();
    assert_eq!(unconfirmed, 2, "{err}");
    // The rollback released the unconfirmed grants on the primaries.
    let gone = eventually(Duration::from_secs(2), || {
        voters
            .iter()
            .all(|v| get(&v.primary, &lock_key("ledger")).is_none())
    })
    .await;
    assert!(gone, "a grant was left behind");

    // One stalled replica is a minority: the other two voters confirm.
    voters[1].replica.resume().unwrap();
    let lock = rl.try_acquire("ledger", TTL).await.unwrap();
    lock.release().await.unwrap();
    voters[0].replica.resume().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extend_its_replicas_do_not_confirm_fails_and_promises_no_more_than_before() {
    let voters = voters(3);
    let rl = durable(&voters, Durability::Replicas(1), Duration::from_millis(300));
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    let mut lock = rl.acquire("ledger", TTL).await.unwrap();
    let before = lock.deadline();
    voters[0].replica.pause().unwrap();
    voters[1].replica.pause().unwrap();
    let err = lock.extend(TTL * 4).await.unwrap_err();
    let Error::NotExtended {
        extended, nodes, ..
    } = &err
    else {
        panic!("not NotExtended: {err}");
    };
    assert!(*extended <= 1, "{err}");
    assert!(
        nodes
            .iter()
            .any(|e| e.to_string().contains("not confirmed durable")),
        "{err}"
    );
    assert!(
        lock.deadline() <= before,
        "a failed extend moved the deadline on"
    );
    voters[0].replica.resume().unwrap();
    voters[1].replica.resume().unwrap();
    // Confirmed again, the extend counts.
    lock.extend(TTL * 4).await.unwrap();
    assert!(lock.deadline() > before);
    lock.release().await.unwrap();
}

/// A refusal grants nothing, so it stands whether its replica confirms or not: a held lock is
/// contention (the caller waits in line), never "unavailable" because the replicas lag.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_is_contention_even_when_the_replicas_do_not_confirm() {
    let voters = voters(3);
    let holder = durable(&voters, Durability::Replicas(1), Duration::from_millis(300));
    holder.connect().await.unwrap();
    let other = durable(&voters, Durability::Replicas(1), Duration::from_millis(300));
    holder.connect().await.unwrap();
    other.connect().await.unwrap();
    let lock = holder.acquire("ledger", TTL).await.unwrap();
    for v in &voters {
        v.replica.pause().unwrap();
    }
    let err = other.try_acquire("ledger", TTL).await.unwrap_err();
    for v in &voters {
        v.replica.resume().unwrap();
    }
    assert!(err.is_contention(), "{err}");
    assert!(!err.to_string().contains("not confirmed"), "{err}");
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_wait_for_replicas_shortens_the_validity() {
    let voters = voters(3);
    let rl = durable(&voters, Durability::Replicas(1), Duration::from_secs(2));
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    for v in &voters {
        v.replica.pause().unwrap();
    }
    let resume_after = Duration::from_millis(400);
    // A grant is a SET or a script on a primary; the wait for its replica follows.
    let grants = |v: &Voter| command_calls(&v.primary, "set") + script_calls(&v.primary);
    let before: Vec<u64> = voters.iter().map(grants).collect();
    let (granted_at, resumed_at, acquired_at, lock) = std::thread::scope(|scope| {
        let resuming = scope.spawn(|| {
            // Once a quorum of primaries has granted, the attempt has started: from then on,
            // the replicas stay paused a while longer.
            let granted = || {
                (0..voters.len())
                    .filter(|&i| grants(&voters[i]) > before[i])
                    .count()
            };
            while granted() < 2 {
                std::thread::sleep(Duration::from_millis(2));
            }
            let granted_at = Instant::now();
            std::thread::sleep(resume_after);
            // No replica can confirm before this instant.
            let resumed_at = Instant::now();
            for v in &voters {
                v.replica.resume().unwrap();
            }
            (granted_at, resumed_at)
        });
        let lock = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(rl.acquire("ledger", TTL))
        })
        .unwrap();
        let (granted_at, resumed_at) = resuming.join().unwrap();
        (granted_at, resumed_at, Instant::now(), lock)
    });
    assert!(
        acquired_at >= resumed_at,
        "acquired {:?} before the replicas resumed",
        resumed_at - acquired_at
    );
    // Measured from the attempt's start, before a quorum granted: the wait for the replicas is
    // gone from it. (Measured from the wait's end, past the resume, it would reach past this
    // by the 400 ms the replicas stayed paused after the grants.)
    let drift = TTL.mul_f64(quorumlock::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2);
    assert!(
        lock.deadline() < granted_at + TTL - drift,
        "the validity runs {:?} past the grants, a whole TTL less the drift",
        lock.deadline() - granted_at
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_that_cannot_confirm_is_refused_at_connect_naming_what_it_lacks() {
    let nodes = quorumlock_testkit::RedisNodes::spawn(3).unwrap();
    let rl = builder(&nodes)
        .durability(Durability::Replicas(1))
        .build()
        .unwrap();
    let err = rl.connect().await.unwrap_err();
    let Error::Unavailable { nodes: failed, .. } = &err else {
        panic!("not Unavailable: {err}");
    };
    assert_eq!(failed.len(), 3, "{err}");
    for e in failed {
        let shown = e.to_string();
        assert!(shown.contains("cannot confirm grants"), "{shown}");
        assert!(shown.contains("0 replicas connected, 1 needed"), "{shown}");
    }
    for server in nodes.iter() {
        assert_eq!(
            query::<usize>(server, &mut redis::cmd("DBSIZE")),
            0,
            "nothing written"
        );
    }
    let invalid = builder(&nodes).durability(Durability::Replicas(0)).build();
    assert!(invalid
        .unwrap_err()
        .to_string()
        .contains("confirms nothing"));
}

/// `Aof { local: true }` where the server has `WAITAOF` (Redis 7.2+, Valkey, as `make
/// test-valkey` runs it), over masters with `appendfsync everysec`: every grant that counted is
/// in its master's AOF file when `acquire` returns (read from the file itself: a killed process
/// does not lose what it already wrote to the kernel), and after every master is killed and
/// restarted from its AOF, each held lock is still on a quorum. Where the server has no
/// `WAITAOF` (Debian's Redis 7.0), connecting says so.
#[tokio::test(flavor = "multi_thread")]
async fn aof_votes_are_in_the_file_when_acquire_returns_and_survive_a_crash_restart() {
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServerBuilder::new()
                .arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg("everysec")
                .spawn()
                .unwrap()
        })
        .collect();
    let version = info(&servers[0], "server");
    let has_waitaof = !version.contains("redis_version:6.")
        && !version.contains("redis_version:7.0.")
        && !version.contains("redis_version:7.1.");
    let rl = Redlock::builder(servers.iter().map(RedisServer::url))
        .node_timeout(Duration::from_millis(1_500))
        .durability(Durability::Aof {
            local: true,
            replicas: 0,
        })
        .build()
        .unwrap();
    if !has_waitaof {
        let err = rl.connect().await.unwrap_err();
        assert!(err.to_string().contains("no WAITAOF"), "{err}");
        return;
    }
    rl.connect().await.unwrap();
    let mut held = Vec::new();
    for i in 0..10 {
        let lock = rl.acquire(&format!("ledger-{i}"), TTL * 12).await.unwrap();
        let token = lock.token().expose().to_owned();
        // At once, before the next fsync a second later could have written it anyway.
        let in_file = servers
            .iter()
            .filter(|s| aof_text(s).contains(&token))
            .count();
        assert!(
            in_file >= 2,
            "ledger-{i}: the token is in {in_file} AOF files"
        );
        held.push((format!("ledger-{i}"), token, lock));
    }
    // A crash of every master at once, and a restart from what the files hold.
    for server in &mut servers {
        server.restart().unwrap();
    }
    for (resource, token, _lock) in &held {
        let kept = servers
            .iter()
            .filter(|s| get(s, &lock_key(resource)).as_deref() == Some(token.as_str()))
            .count();
        assert!(
            kept >= 2,
            "{resource} is held on {kept} masters after the restart"
        );
    }
    let other = Redlock::builder(servers.iter().map(RedisServer::url))
        .retry_count(0)
        .build()
        .unwrap();
    assert!(other
        .try_acquire("ledger-0", TTL)
        .await
        .unwrap_err()
        .is_contention());
}

/// Everything the server's append-only files hold, as text.
fn aof_text(server: &RedisServer) -> String {
    let mut text = String::new();
    let mut dirs = vec![server.dir().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().contains(".aof") {
                text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
            }
        }
    }
    text
}

//! The real library against three simulated masters over loopback TCP: a lock is acquired,
//! extended and released, and a second client waits in the masters' line and is handed the
//! lock when the first releases it. The masters' keyspaces are checked after each step.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::{companion_key, resource_key, Redlock, KEY_LAYOUT, LAYOUT_MARKER};
use quorumlock_sim::{listen, lock, shared, Clock, Entry, Master, Server, Value};

const TTL: Duration = Duration::from_secs(10);

/// The wall clock, as the source the simulated masters read (the library runs in real time
/// here, so the masters must too).
fn wall() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

async fn three_masters() -> Vec<Server> {
    let mut servers = Vec::new();
    for _ in 0..3 {
        let master = Master::new(Clock::new(wall)).unwrap();
        servers.push(listen(shared(master)).await.unwrap());
    }
    servers
}

fn client(servers: &[Server]) -> Redlock {
    Redlock::builder(servers.iter().map(Server::url))
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_secs(1))
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn keyspace(server: &Server) -> BTreeMap<String, Entry> {
    lock(server.master())
        .keyspace()
        .into_iter()
        .map(|(k, e)| (String::from_utf8_lossy(&k).into_owned(), e))
        .collect()
}

fn string(entry: Option<&Entry>) -> Option<String> {
    match entry.map(|e| &e.value) {
        Some(Value::String(s)) => Some(String::from_utf8_lossy(s).into_owned()),
        _ => None,
    }
}

/// Polls `check` every 10 ms for up to `within`.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_library_acquires_extends_and_releases_a_lock_on_simulated_masters() {
    let servers = three_masters().await;
    let rl = client(&servers);
    rl.connect().await.unwrap();
    let key = resource_key("", "orders:42");

    let mut held = rl.acquire("orders:42", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    // A quorum answered before the acquire returned; the third master's grant may still be on
    // its way.
    let everywhere = eventually(Duration::from_secs(2), || {
        servers
            .iter()
            .all(|s| string(keyspace(s).get(&key)).as_deref() == Some(token.as_str()))
    })
    .await;
    assert!(everywhere, "{:?} {:?}", keyspace(&servers[2]), rl.stats());
    for server in &servers {
        let keys = keyspace(server);
        assert_eq!(string(keys.get(&key)), Some(token.clone()), "{keys:?}");
        let expires = keys[&key].expires_at.unwrap();
        let left = expires - wall().as_millis() as i64;
        assert!(left > 9_000 && left <= 10_000, "{left} ms left");
    }

    held.extend(Duration::from_secs(30)).await.unwrap();
    let extended = eventually(Duration::from_secs(2), || {
        servers.iter().all(|s| {
            let left = keyspace(s)
                .get(&key)
                .and_then(|e| e.expires_at)
                .map(|at| at - wall().as_millis() as i64);
            left.is_some_and(|left| left > 29_000 && left <= 30_000)
        })
    })
    .await;
    assert!(extended, "{:?}", keyspace(&servers[2]));

    held.release().await.unwrap();
    // Nothing of the lock's is left behind: only the layout marker may remain.
    let gone = eventually(Duration::from_secs(2), || {
        servers
            .iter()
            .all(|s| keyspace(s).keys().all(|k| !k.contains("orders:42")))
    })
    .await;
    assert!(gone, "{:?}", keyspace(&servers[2]));
    for server in &servers {
        let keys = keyspace(server);
        assert_eq!(keys.len(), 1, "{keys:?}");
        let layout = KEY_LAYOUT.to_string();
        assert_eq!(string(keys.get(LAYOUT_MARKER)), Some(layout), "{keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_stands_in_the_simulated_masters_line_and_is_handed_the_lock() {
    let servers = three_masters().await;
    let holder = client(&servers);
    // A waiter whose retries are far apart: it gets the lock from the masters' announcements
    // (sharded pub/sub over RESP3), not from a retry of its own.
    let waiter = Redlock::builder(servers.iter().map(Server::url))
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_secs(1))
        .acquire_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    holder.connect().await.unwrap();
    waiter.connect().await.unwrap();
    let key = resource_key("", "r");
    let queue = companion_key(&key, ":queue");

    let first = holder.acquire("r", TTL).await.unwrap();
    let first_token = first.token().expose().to_owned();
    let waiting = {
        let rl = waiter.clone();
        tokio::spawn(async move { rl.acquire("r", TTL).await })
    };
    let queued = eventually(Duration::from_secs(5), || {
        servers.iter().all(|s| {
            matches!(keyspace(s).get(&queue).map(|e| &e.value), Some(Value::SortedSet(z)) if z.len() == 1)
        })
    })
    .await;
    assert!(queued, "{:?}", keyspace(&servers[0]));
    assert!(!waiting.is_finished());

    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let token = second.token().expose().to_owned();
    assert!(
        token.starts_with("~queued:") || waiter.stats().wakeups > 0,
        "handed over or woken by an announcement: {token} {:?}",
        waiter.stats()
    );
    assert!(
        eventually(Duration::from_secs(2), || servers
            .iter()
            .all(|s| string(keyspace(s).get(&key)).as_deref() == Some(token.as_str())))
        .await,
        "the waiter's token {token} on every master (the holder's was {first_token}): {:?} {:?} {:?} {:?} {:?}",
        keyspace(&servers[0]), keyspace(&servers[1]), keyspace(&servers[2]), holder.stats(), waiter.stats()
    );
    let left_the_line = eventually(Duration::from_secs(2), || {
        servers.iter().all(|s| !keyspace(s).contains_key(&queue))
    })
    .await;
    assert!(left_the_line, "{:?}", keyspace(&servers[0]));

    second.release().await.unwrap();
    let gone = eventually(Duration::from_secs(2), || {
        servers
            .iter()
            .all(|s| keyspace(s).keys().all(|k| k == LAYOUT_MARKER))
    })
    .await;
    assert!(gone, "{:?}", keyspace(&servers[2]));
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_many_keys_read_write_locks_semaphores_and_elections_run_on_simulated_masters() {
    let servers = three_masters().await;
    let rl = Redlock::builder(servers.iter().map(Server::url))
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_secs(1))
        .fencing(true)
        .build()
        .unwrap();
    rl.connect().await.unwrap();

    // Fencing tokens rise from one holder to the next.
    let first = rl.acquire("fenced", TTL).await.unwrap();
    let one = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = rl.acquire("fenced", TTL).await.unwrap();
    let two = second.fencing_token().unwrap();
    assert!(two > one, "{two} after {one}");
    second.release().await.unwrap();

    // Several resources at once, all or nothing.
    let many = rl.acquire_many(&["x", "y"], TTL).await.unwrap();
    assert!(rl.try_acquire("y", TTL).await.is_err());
    many.release().await.unwrap();
    rl.try_acquire("y", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Readers share, a writer waits for them.
    let rw = rl.rw_lock("doc").unwrap();
    let (r1, r2) = (
        rw.try_read(TTL).await.unwrap(),
        rw.try_read(TTL).await.unwrap(),
    );
    assert!(rw.try_write(TTL).await.is_err());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = rw.try_write(TTL).await.unwrap();
    assert!(rw.try_read(TTL).await.is_err());
    w.release().await.unwrap();

    // Two permits, a third is refused.
    let permits = rl.semaphore("pool", 2).unwrap();
    let (p1, p2) = (
        permits.try_acquire(TTL).await.unwrap(),
        permits.try_acquire(TTL).await.unwrap(),
    );
    assert!(permits.try_acquire(TTL).await.is_err());
    drop((p1, p2));

    // An election, and who leads.
    let term = rl.elect("leader", TTL, "host-a").await.unwrap();
    let leader = rl.leader("leader").await.unwrap().unwrap();
    assert_eq!(leader.value, "host-a");
    term.release().await.unwrap();

    // Everything released (the permits by their drop, in the background): what is left is
    // the layout marker and the fencing counters, which outlive their grants by design.
    let after = eventually(Duration::from_secs(2), || {
        servers.iter().all(|s| {
            keyspace(s)
                .keys()
                .all(|k| k == LAYOUT_MARKER || k.ends_with(":fence"))
        })
    })
    .await;
    assert!(after, "{:?}", keyspace(&servers[0]));
    // A quorum of masters keeps a counter at least as high as the last fence given.
    let kept = servers
        .iter()
        .filter_map(|s| string(keyspace(s).get("{fenced}:fence")))
        .filter(|fence| fence.parse::<u64>().is_ok_and(|f| f >= two))
        .count();
    assert!(kept >= 2, "{kept} masters keep the fence {two}");
}

//! Fencing tokens: strictly increasing across successive holders, why "INCR and take the max"
//! alone is not enough, what AOF buys, and a stalled holder fenced out by the storage.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{
    History, RedisNodes, RedisServer, RedisServerBuilder, Releasing, Violation,
};

const TTL: Duration = Duration::from_secs(10);

fn fenced(nodes: &RedisNodes) -> Redlock {
    builder(nodes)
        .node_timeout(Duration::from_millis(100))
        .fencing(true)
        .build()
        .unwrap()
}

/// Releases `lock` and records the release (a release that times out on a loaded machine still
/// ends the lease: the key expires at its TTL).
async fn release(history: &History, client: usize, lock: Lock) {
    let releasing = Releasing::start(&lock);
    let result = lock.release().await;
    history.record(releasing.finished(client, &result));
}

/// Acquires `resource`, retrying past contention (the previous holder's keys expiring).
async fn acquire_eventually(rl: &Redlock, resource: &str, ttl: Duration) -> Lock {
    for _ in 0..100 {
        if let Ok(lock) = rl.acquire(resource, ttl).await {
            return lock;
        }
    }
    panic!("{resource} not acquired in 100 calls");
}

#[tokio::test(flavor = "multi_thread")]
async fn fences_strictly_increase_across_successive_holders() {
    let nodes = five();
    let clients: Vec<Redlock> = (0..3).map(|_| fenced(&nodes)).collect();
    let history = History::new();
    let mut fences = Vec::new();
    for round in 0..60 {
        let start = Instant::now();
        let lock = clients[round % 3].acquire("ledger", TTL).await.unwrap();
        record(&history, round % 3, start, &lock);
        fences.push(lock.fencing_token().unwrap());
        release(&history, round % 3, lock).await;
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let report = history.check();
    assert!(report.is_clean(), "{report}");
    // Without fencing there is no token.
    let plain = connected(&nodes)
        .await
        .acquire("ledger", TTL)
        .await
        .unwrap();
    assert_eq!(plain.fencing_token(), None);
}

/// The acquire script of one node, run directly: `SET NX PX` and `INCR` of the counter.
fn acquire_script(server: &RedisServer, key: &str, token: &str) -> i64 {
    redis::cmd("EVAL")
        .arg(
            "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
             return redis.call('INCR', KEYS[2]) end return 0",
        )
        .arg(2)
        .arg(key)
        .arg(quorumlock::companion_key(key, ":fence"))
        .arg(token)
        .arg(10_000)
        .query(&mut direct(server))
        .unwrap()
}

fn set_counters(nodes: &RedisNodes, key: &str, counters: [u64; 5]) {
    for (server, value) in nodes.iter().zip(counters) {
        let _: () = redis::cmd("SET")
            .arg(quorumlock::companion_key(key, ":fence"))
            .arg(value)
            .query(&mut direct(server))
            .unwrap();
        del(server, key);
    }
}

fn counters(nodes: &RedisNodes, key: &str) -> Vec<u64> {
    nodes
        .iter()
        .map(|s| {
            get(s, &quorumlock::companion_key(key, ":fence")).map_or(0, |v| v.parse().unwrap())
        })
        .collect()
}

/// Counters far above every master's clock floor (seconds × 10⁶ now), so that the counters
/// alone decide, as they do within one second.
const AHEAD: u64 = 4_000_000_000_000_000;

/// Counters [5, 1, 1, 1, 1] (above `AHEAD`): master 0 has seen more holders than the others (it
/// kept its counter while the others granted less, or the others lost theirs). Holder A locks
/// masters {0, 1, 2} and gets max(6, 2, 2) = 6; holder B, after A, locks {2, 3, 4}.
#[tokio::test(flavor = "multi_thread")]
async fn incr_and_take_the_max_hands_out_a_smaller_fence_and_the_second_round_prevents_it() {
    let nodes = five();
    let resource = "account:7";
    let key = &lock_key(resource);
    let ahead = |counters: [u64; 5]| counters.map(|c| AHEAD + c);

    // The max-only scheme, driven by hand on the masters.
    set_counters(&nodes, key, ahead([5, 1, 1, 1, 1]));
    let a = [0, 1, 2].map(|i| acquire_script(&nodes[i], key, "token-a"));
    let fence_a = *a.iter().max().unwrap();
    for i in [0, 1, 2] {
        del(&nodes[i], key); // A releases
    }
    let b = [2, 3, 4].map(|i| acquire_script(&nodes[i], key, "token-b"));
    let fence_b = *b.iter().max().unwrap();
    println!("max-only: A on {{0,1,2}} got {a:?} → fence {fence_a}; B on {{2,3,4}} got {b:?} → fence {fence_b}");
    assert_eq!((fence_a, fence_b), (AHEAD as i64 + 6, AHEAD as i64 + 3));
    assert!(fence_b < fence_a, "the later holder got the smaller fence");

    // The same state and the same grant sets through the library: masters 3 and 4 refuse A
    // (another token holds them), masters 0 and 1 refuse B.
    set_counters(&nodes, key, ahead([5, 1, 1, 1, 1]));
    let rl = fenced(&nodes);
    rl.connect().await.unwrap();
    for i in [3, 4] {
        set(&nodes[i], key, "someone-else", TTL);
    }
    let lock_a = rl.try_acquire(resource, TTL).await.unwrap();
    let lib_a = lock_a.fencing_token().unwrap();
    // The second round raised masters 1 and 2 to A's fence: a quorum now holds it.
    assert_eq!(counters(&nodes, key), ahead([6, 6, 6, 1, 1]).to_vec());
    lock_a.release().await.unwrap();
    // (The release returned at a quorum: master 2's may still be on its way, and B needs it.)
    assert!(
        eventually(Duration::from_secs(2), || (0..3)
            .all(|i| get(&nodes[i], key).is_none()))
        .await,
        "A's release never reached masters 0 to 2: {:?}",
        values(&nodes, key)
    );
    for i in [3, 4] {
        del(&nodes[i], key);
    }
    for i in [0, 1] {
        set(&nodes[i], key, "someone-else", TTL);
    }
    let lock_b = rl.try_acquire(resource, TTL).await.unwrap();
    let lib_b = lock_b.fencing_token().unwrap();
    println!(
        "quorumlock: A → fence {lib_a}; B → fence {lib_b}; counters now {:?}",
        counters(&nodes, key)
    );
    assert_eq!(lib_a, AHEAD + 6);
    assert_eq!(
        lib_b,
        AHEAD + 7,
        "master 2 carried A's fence into B's grant set"
    );
    assert!(lib_b > lib_a);
}

async fn acquire_release_rounds(rl: &Redlock, history: &History, rounds: usize) -> Vec<u64> {
    let mut fences = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let lock = rl
            .acquire("invoice", Duration::from_millis(200))
            .await
            .unwrap();
        record(history, 0, start, &lock);
        fences.push(lock.fencing_token().unwrap());
        release(history, 0, lock).await;
    }
    fences
}

fn fence_order_violations(history: &History) -> usize {
    history
        .check()
        .violations
        .iter()
        .filter(|v| matches!(v, Violation::FenceOrder { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn with_aof_fences_keep_increasing_when_every_master_crashes_and_restarts() {
    let mut nodes = RedisNodes::spawn_with(5, &RedisServerBuilder::new().aof(true)).unwrap();
    let rl = fenced(&nodes);
    rl.connect().await.unwrap();
    let history = History::new();
    let before = acquire_release_rounds(&rl, &history, 20).await;
    for i in 0..5 {
        nodes[i].restart().unwrap(); // SIGKILL, then start on the same AOF at once
    }
    let after = acquire_release_rounds(&rl, &history, 20).await;
    println!(
        "AOF: fences {}..={} before the restart, {}..={} after",
        before[0], before[19], after[0], after[19]
    );
    assert!(after[0] > before[19], "{before:?} then {after:?}");
    assert_eq!(fence_order_violations(&history), 0, "{}", history.check());
}

/// Fences need masters that keep their state: without AOF a restarted master comes back with
/// no counter, and once a quorum did, the next fence comes from the masters' clock floor alone
/// (seconds × 10⁶) — even when the restart waited a TTL, which is all mutual exclusion needs.
/// Within the second of the last fence, that floor is not above it: the fence goes backwards
/// (or repeats). The run starts at the beginning of a second so that the restart falls within
/// it; should the machine be slow enough to cross into the next second, the floor is above the
/// last fence and the test checks that instead.
#[tokio::test(flavor = "multi_thread")]
async fn without_aof_a_quorum_restarted_empty_sends_fences_backwards() {
    let mut nodes = five();
    let rl = fenced(&nodes);
    rl.connect().await.unwrap();
    rl.connect().await.unwrap();
    let history = History::new();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    tokio::time::sleep(Duration::from_nanos(
        1_000_000_000 - u64::from(now.subsec_nanos()),
    ))
    .await;
    let before = acquire_release_rounds(&rl, &history, 10).await;
    for i in 0..3 {
        nodes[i].kill().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(250)).await; // longer than the 200 ms TTL
    for i in 0..3 {
        nodes[i].restart().unwrap();
    }
    // Masters 3 and 4 are made to refuse, so the grants come from the three empty masters.
    for i in [3, 4] {
        set(&nodes[i], &lock_key("invoice"), "someone-else", TTL);
    }
    let start = Instant::now();
    let attempts_before = rl.stats().attempts;
    let lock = rl
        .acquire("invoice", Duration::from_millis(200))
        .await
        .unwrap();
    let attempts = rl.stats().attempts - attempts_before;
    record(&history, 1, start, &lock);
    println!(
        "no AOF: fence {} before three masters restarted empty, {:?} after, in {attempts} attempt(s)",
        before.last().unwrap(),
        lock.fencing_token()
    );
    let (last, fence) = (*before.last().unwrap(), lock.fencing_token().unwrap());
    let second = |fence: u64| fence / 1_000_000;
    if second(fence) == second(last) {
        // The clock floor alone; each earlier attempt of this acquire (a restarted master
        // still reconnecting fails the first on a loaded machine) left its counter one higher
        // on the masters that granted it before the rollback.
        let floor = second(last) * 1_000_000;
        assert!(
            (floor..floor + attempts).contains(&fence),
            "the clock floor alone, {attempts} attempt(s): {fence}"
        );
        assert!(fence <= last);
        assert_eq!(fence_order_violations(&history), 1, "{}", history.check());
    } else {
        println!("the restart crossed into the next second: the floor is above the last fence");
        assert!(fence > last);
        assert_eq!(fence_order_violations(&history), 0, "{}", history.check());
    }
}

/// A holder stalls (a GC pause, SIGSTOP) past its lease; another client acquires and writes;
/// then the stalled holder wakes and writes with its old fence. The storage, comparing fences,
/// rejects every such late write.
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_stalled_past_its_lease_has_every_late_write_rejected_by_its_fence() {
    const RESOURCES: usize = 10;
    const ROUNDS: usize = 10;
    let nodes = five();
    let history = History::new();
    let ttl = Duration::from_millis(200);
    let tasks: Vec<_> = (0..RESOURCES)
        .map(|r| {
            let (stalled, next) = (fenced(&nodes), fenced(&nodes));
            let history = history.clone();
            let register = history.fenced_register(format!("doc:{r}"));
            tokio::spawn(async move {
                let resource = format!("doc:{r}");
                let mut late = 0;
                for _ in 0..ROUNDS {
                    let start = Instant::now();
                    let old = acquire_eventually(&stalled, &resource, ttl).await;
                    record(&history, 0, start, &old);
                    let old_fence = old.fencing_token().unwrap();
                    register.write(old_fence, 0).unwrap();
                    // The stall: the lease runs out while the holder is frozen.
                    tokio::time::sleep_until((old.deadline() + ttl / 2).into()).await;
                    let start = Instant::now();
                    let new = acquire_eventually(&next, &resource, ttl).await;
                    record(&history, 1, start, &new);
                    assert!(new.fencing_token().unwrap() > old_fence);
                    register.write(new.fencing_token().unwrap(), 1).unwrap();
                    // The stalled holder wakes and writes with what it believes is its lock.
                    late += 1;
                    let _ = register.write(old_fence, 0);
                    release(&history, 1, new).await;
                    drop(old);
                }
                (register.counts(), late)
            })
        })
        .collect();
    let (mut late, mut rejected, mut accepted_late) = (0, 0, 0);
    for task in tasks {
        let (counts, attempted) = task.await.unwrap();
        late += attempted;
        let stalled = counts[&0];
        rejected += stalled.rejected;
        // The stalled holder's in-lease writes (one per round) were accepted.
        accepted_late += stalled.accepted - ROUNDS as u64;
    }
    println!(
        "stalled holder: {late} late writes, {rejected} rejected ({:.0} %), {accepted_late} accepted",
        100.0 * rejected as f64 / late as f64
    );
    assert_eq!(late, RESOURCES * ROUNDS);
    assert_eq!(rejected, late as u64, "100 % of late writes rejected");
    assert_eq!(accepted_late, 0);
    let report = history.check();
    assert!(report.is_clean(), "{report}");
}

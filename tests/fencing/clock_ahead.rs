//! Fencing tokens with a master's clock ahead of the others', through the testkit's clock
//! nemesis (libfaketime). The promise: tokens increase strictly from holder to holder while no
//! master's clock runs ahead of another's by `fence_grace` or more. Here the grace is the least
//! the builder accepts (1 s), one of three masters runs 0.6 s ahead, and the next holder comes
//! once the counters could have lapsed, without the fast master: its token must still be
//! greater. The negative control runs the fast master 1.5 s ahead, beyond the grace, and shows
//! a token that repeats.
//!
//! The masters run `valkey-server` (Valkey 9): Debian's `redis-server` cannot run under
//! Debian's libfaketime (see the testkit's `clock` module). `make test` fetches it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::Redlock;
use quorumlock_testkit::clock::Clock;
use quorumlock_testkit::{RedisServer, RedisServerBuilder};

const TTL: Duration = Duration::from_secs(5);

/// A server binary that runs under libfaketime: `QUORUMLOCK_VALKEY_SERVER`, or the one
/// `scripts/ensure-valkey-server.sh` fetched.
fn clock_server() -> PathBuf {
    if let Some(path) = std::env::var_os("QUORUMLOCK_VALKEY_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let fetched = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/valkey/valkey-server");
    assert!(
        fetched.is_file(),
        "no valkey-server at {}: run scripts/ensure-valkey-server.sh (make test does), or set \
         QUORUMLOCK_VALKEY_SERVER",
        fetched.display()
    );
    fetched
}

/// Three masters, the first with its clock `ahead` of the others (which keep the real one).
fn masters(ahead: Duration) -> Vec<RedisServer> {
    let fast = RedisServerBuilder::new()
        .binary(clock_server())
        .clock(Clock::ahead(ahead))
        .spawn()
        .unwrap();
    let plain = || {
        RedisServerBuilder::new()
            .binary(clock_server())
            .spawn()
            .unwrap()
    };
    vec![fast, plain(), plain()]
}

/// Waits until the real clock is between 0.50 s and 0.60 s into its second: the fast master's
/// floor is then already a second on, and 1.05 s later the others' floor has just reached it.
async fn align_to_mid_second() {
    loop {
        let into = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_millis();
        if (500..600).contains(&into) {
            return;
        }
        let wait = (1_550 - into) % 1_000;
        tokio::time::sleep(Duration::from_millis(u64::from(wait))).await;
    }
}

/// One holder with every master granting, then, `after` later, the next with the fast master
/// paused: their two tokens.
async fn two_holders(rl: &Redlock, fast: &RedisServer, after: Duration) -> (u64, u64) {
    align_to_mid_second().await;
    let first = rl.acquire("invoice", TTL).await.unwrap();
    let f1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    tokio::time::sleep(after).await;
    fast.pause().unwrap();
    let second = rl.acquire("invoice", TTL).await;
    fast.resume().unwrap();
    let second = second.unwrap();
    let f2 = second.fencing_token().unwrap();
    second.release().await.unwrap();
    (f1, f2)
}

fn client(servers: &[RedisServer]) -> Redlock {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    Redlock::builder(urls)
        .fencing(true)
        .fence_grace(quorumlock::MIN_FENCE_GRACE)
        .node_timeout(Duration::from_millis(100))
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn fences_increase_with_a_master_clock_ahead_by_less_than_the_grace() {
    let servers = masters(Duration::from_millis(599));
    let rl = client(&servers);
    assert_eq!(rl.connect().await.unwrap().reachable, 3);
    // Just past the grace (the counters of a grace alone would have lapsed, and the floor of
    // the masters behind would repeat the fast one's token), then past the grace and its second
    // (the counters lapsed: the floor alone).
    for after in [Duration::from_millis(1_050), Duration::from_millis(2_100)] {
        let (f1, f2) = two_holders(&rl, &servers[0], after).await;
        println!("0.599 s ahead, next holder {after:?} later: {f1} then {f2}");
        assert!(f2 > f1, "{f2} after {f1}, {after:?} later");
    }
}

/// The negative control: 1.5 s ahead with a 1 s grace is beyond what the README promises, and
/// the test sees the token repeat.
///
/// The first holder, half a second into the real second S, takes the fast master's floor, S + 2
/// (its clock is at S + 2.0 or more). The next, at S + 2.75 without the fast master, finds the
/// others' counters lapsed (written before S + 0.7, they last the grace and its second) and
/// their floor at S + 2 too: the same token. Both times, and the fast master's vote in the first
/// quorum, are what make the repeat: a first holder that finished after S + 0.7 (a loaded
/// machine) or whose token is not the fast master's floor is set up again, never judged.
#[tokio::test(flavor = "multi_thread")]
async fn a_master_clock_ahead_by_more_than_the_grace_repeats_a_fence() {
    let servers = masters(Duration::from_millis(1_500));
    let rl = client(&servers);
    assert_eq!(rl.connect().await.unwrap().reachable, 3);
    let since_epoch = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for _ in 0..10 {
        align_to_mid_second().await;
        let second = Duration::from_secs(since_epoch().as_secs());
        let first = rl.acquire("invoice", TTL).await.unwrap();
        let f1 = first.fencing_token().unwrap();
        first.release().await.unwrap();
        if since_epoch() >= second + Duration::from_millis(700) {
            println!("the first holder finished after S + 0.7 s: set up again");
            tokio::time::sleep(Duration::from_secs(3)).await;
            continue;
        }
        if f1 != (second.as_secs() + 2) * 1_000_000 {
            // The fast master's vote missed the quorum (its reply came after the node
            // timeout): the first token is not its floor.
            println!("the first token {f1} is not the fast master's floor: set up again");
            tokio::time::sleep(Duration::from_secs(3)).await;
            continue;
        }
        let next = second + Duration::from_millis(2_750);
        tokio::time::sleep(next.saturating_sub(since_epoch())).await;
        servers[0].pause().unwrap();
        let (at, attempts) = (since_epoch(), rl.stats().attempts);
        let taken = rl.acquire("invoice", TTL).await;
        let (done, attempts) = (since_epoch(), rl.stats().attempts - attempts);
        servers[0].resume().unwrap();
        let taken = taken.unwrap();
        let f2 = taken.fencing_token().unwrap();
        taken.release().await.unwrap();
        println!(
            "1.5 s ahead, next holder at S + {:?} to S + {:?} ({attempts} attempts): {f1} then {f2}",
            at - second,
            done - second
        );
        if done >= second + Duration::from_secs(3) {
            // Past S + 3 the others' floor has moved on: the setup no longer makes a repeat.
            println!("the next holder finished after S + 3 s: set up again");
            tokio::time::sleep(Duration::from_secs(3)).await;
            continue;
        }
        assert!(f2 <= f1, "{f2} after {f1}: the control saw no repeat");
        return;
    }
    panic!(
        "in 10 tries the setup never held: the first holder never took the fast master's floor \
         by S + 0.7 s with the next holder done by S + 3 s"
    );
}

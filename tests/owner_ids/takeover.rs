//! Attacks on mutual exclusion in the owner-id path (`Redlock::acquire_as`), against real
//! redis-server processes. Each test builds one order of requests on the masters and checks the
//! guarantee: while a lock says it holds (`remaining()`), its key stays on a quorum of masters
//! and no other client (another owner, or a plain `try_acquire`) can take the resource.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{FaultProxy, RedisNodes};

const TTL: Duration = Duration::from_secs(10);

/// Checks, once, that `lock` still holds as it says: its token on a quorum, and a plain
/// client and another owner both refused. Panics with what the masters hold otherwise.
async fn still_exclusive(nodes: &RedisNodes, lock: &Lock, what: &str) {
    let key = lock_key(lock.resource());
    let token = lock.token().expose().to_owned();
    let says = lock.remaining();
    let vals = values(nodes, &key);
    println!("[{what}] holder says {says:?} left; token {token}; masters {vals:?}");
    assert!(
        says > Duration::from_secs(1),
        "[{what}] the lock ran out: {says:?}"
    );
    let quorum = nodes.len() / 2 + 1;
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let plain = other.try_acquire(lock.resource(), TTL).await;
    let owner = other.acquire_as(lock.resource(), "intruder", TTL).await;
    let after = values(nodes, &key);
    assert!(
        plain.is_err() && owner.is_err(),
        "[{what}] MUTUAL EXCLUSION BROKEN: the holder says {says:?} left, yet a plain client \
         acquired: {} and another owner acquired: {}; masters before {vals:?}, after {after:?}",
        plain.is_ok(),
        owner.is_ok()
    );
    assert!(
        holders(nodes, &key, &token) >= quorum,
        "[{what}] the holder says {says:?} left but its token is on fewer than {quorum} \
         masters: {vals:?}"
    );
}

/// A later attempt of the same owner in the same process takes over the keys of an earlier
/// lock that is still held, then fails (its quorum answered too late to leave validity), and
/// its rollback deletes the keys it took over. The earlier lock still says it holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_later_failed_attempt_of_the_same_process_never_deletes_an_earlier_live_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &token)
            == 3)
        .await
    );

    // A second client of the same process (same process id, a later attempt number), under
    // the same owner, whose routes to masters 1 and 2 are slow: each request 520 ms late,
    // inside its 900 ms node timeout, but two requests (read, then compare-and-swap) take
    // longer than its 1 s TTL.
    let (proxies, urls) = reaching(&nodes, &[0, 1, 2]);
    let second = Redlock::builder(urls)
        .node_timeout(Duration::from_millis(900))
        .acquire_timeout(Duration::ZERO)
        .retry_count(0)
        .build()
        .unwrap();
    assert_eq!(second.connect().await.unwrap().reachable, 3);
    for proxy in &proxies[1..] {
        proxy.delay(Duration::from_millis(520), Duration::ZERO, Duration::ZERO);
    }
    let failed = second
        .acquire_as("r", "worker-7", Duration::from_millis(1000))
        .await;
    println!(
        "the later attempt: {:?}",
        failed.as_ref().map(|l| l.token().expose().to_owned())
    );
    assert!(failed.is_err(), "the later attempt was meant to fail");
    // Let its rollback land.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_exclusive(&nodes, &held, "after the later attempt's rollback").await;
    held.release().await.unwrap();
}

/// As above, but the later attempt is cancelled mid-way (its future dropped after it took the
/// keys over on some masters): the background rollback deletes them.
#[tokio::test(flavor = "multi_thread")]
async fn a_later_cancelled_attempt_of_the_same_process_never_deletes_an_earlier_live_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let first = Redlock::builder(nodes.urls()).connected().await;
    let held = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = held.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &token)
            == 3)
        .await
    );

    let (proxies, urls) = reaching(&nodes, &[0, 1, 2]);
    let second = Redlock::builder(urls)
        .node_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    assert_eq!(second.connect().await.unwrap().reachable, 3);
    for proxy in &proxies[1..] {
        proxy.delay(Duration::from_millis(400), Duration::ZERO, Duration::ZERO);
    }
    let attempt = second.acquire_as("r", "worker-7", TTL);
    // Master 0 answers at once (taken over); masters 1 and 2 have answered the read and the
    // compare-and-swap is on its way when the caller gives up.
    let cancelled = tokio::time::timeout(Duration::from_millis(600), attempt).await;
    assert!(cancelled.is_err(), "the attempt was meant to be cancelled");
    println!("cancelled; masters now {:?}", values(&nodes, &key));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    still_exclusive(&nodes, &held, "after the cancelled attempt's rollback").await;
    held.release().await.unwrap();
}

/// A client that waits slow routes out (3 s node timeout) and makes one attempt per acquire.
fn waiting_out(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap()
}

/// Connects `clients` and has each acquire and release under the owner id once, so that the
/// scripts are loaded on every master before a test slows a route.
async fn warmed_up(clients: &[&Redlock]) {
    for client in clients {
        assert_eq!(client.connect().await.unwrap().reachable, 3);
        let warm = client.acquire_as("warm-up", "worker-7", TTL).await.unwrap();
        warm.release().await.unwrap();
    }
}

/// Two processes of owner `worker-7` racing for `r` over three masters: X reaches each master
/// through a proxy of its own, A masters 0 and 1 directly and master 2 through a proxy; both
/// connected and warmed up, the routes not slowed yet.
struct OwnerRace {
    nodes: RedisNodes,
    x_routes: Vec<FaultProxy>,
    a_slow: FaultProxy,
    x: Redlock,
    a: Redlock,
}

impl OwnerRace {
    async fn start() -> Self {
        let nodes = RedisNodes::spawn(3).unwrap();
        let x_routes: Vec<FaultProxy> = (0..3)
            .map(|i| FaultProxy::start(nodes[i].addr()).unwrap())
            .collect();
        let a_slow = FaultProxy::start(nodes[2].addr()).unwrap();
        let x = waiting_out(x_routes.iter().map(FaultProxy::url).collect());
        let a = waiting_out(vec![nodes[0].url(), nodes[1].url(), a_slow.url()]);
        warmed_up(&[&x, &a]).await;
        OwnerRace {
            nodes,
            x_routes,
            a_slow,
            x,
            a,
        }
    }

    /// X acquires, A 50 ms later (so A's attempt is stamped after X's): A's lock, and X's
    /// outcome once it is decided.
    async fn run(&self) -> (Lock, Result<Lock, quorumlock::Error>) {
        let racing = {
            let x = self.x.clone();
            tokio::spawn(async move { x.acquire_as("r", "worker-7", TTL).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let a = self.a.acquire_as("r", "worker-7", TTL).await.unwrap();
        (a, racing.await.unwrap())
    }

    /// Whether A's token is on all three masters, waiting up to 3 s for its late requests.
    async fn a_everywhere(&self, a: &Lock) -> bool {
        let token = a.token().expose();
        eventually(Duration::from_secs(3), || {
            holders(&self.nodes, &lock_key("r"), token) == 3
        })
        .await
    }

    /// What the earlier attempt of a race leaves the later one, A, which won and holds all
    /// three masters: X, stamped earlier, holds none of A's keys, so that X's release leaves
    /// them all; if X won too, its extend fails (A took its keys over); A keeps every master
    /// and its exclusion against other clients.
    async fn the_later_keeps_its_keys(&self, a: &Lock, x: Result<Lock, quorumlock::Error>) {
        let (nodes, key) = (&self.nodes, lock_key("r"));
        let before = values(nodes, &key);
        if let Ok(mut x) = x {
            assert!(
                x.extend(TTL).await.is_err(),
                "X's extend succeeded while A, stamped after it, holds: {:?}",
                values(nodes, &key)
            );
            x.release().await.unwrap();
        }
        let after = values(nodes, &key);
        assert_eq!(
            holders(nodes, &key, a.token().expose()),
            3,
            "X, the earlier attempt, cost A a master: before X's release {before:?}, after \
             {after:?}"
        );
        still_exclusive(nodes, a, "after the earlier attempt's release").await;
    }
}

/// Two processes of one owner race, X first, A 50 ms later, and only A's requests are quick.
/// A takes master 0 over from X and is granted masters 1 and 2; X's requests to masters 1 and
/// 2 land after A's grants there and read A's value. Taking those over would win X the race
/// too (master 0's grant counted), and its release would then leave A on one master of three.
/// X, stamped before A, is refused them and loses.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_stamped_earlier_never_takes_over_a_later_ones_grants() {
    let race = OwnerRace::start().await;
    race.x_routes[1].delay(Duration::from_millis(500), Duration::ZERO, Duration::ZERO);
    race.x_routes[2].delay(Duration::from_millis(500), Duration::ZERO, Duration::ZERO);

    let (a, x) = race.run().await;
    assert!(
        race.a_everywhere(&a).await,
        "X, stamped before A, took A's grants over: {:?}",
        values(&race.nodes, &lock_key("r"))
    );
    let x_won = x.is_ok();
    race.the_later_keeps_its_keys(&a, x).await;
    assert!(!x_won, "X won on master 0 alone");
    a.release().await.unwrap();
}

/// Both win: X is granted master 0 (its reply on a slow route); A, 50 ms later, takes master
/// 0 over from X, is granted master 1 and wins, its request to master 2 on a slow route. X is
/// refused master 1 (A's, stamped after it), is granted master 2 and wins on masters 0 and 2.
/// A's late request then takes master 2 over from X (a value it named before it won): A holds
/// all three, and X's extend fails, as an earlier lock's does once the owner's later attempt
/// took it over.
#[tokio::test(flavor = "multi_thread")]
async fn when_both_win_the_attempt_stamped_later_holds_and_the_earliers_extend_fails() {
    let race = OwnerRace::start().await;
    race.x_routes[0].delay(Duration::ZERO, Duration::from_millis(2_000), Duration::ZERO);
    race.x_routes[1].delay(Duration::from_millis(300), Duration::ZERO, Duration::ZERO);
    race.x_routes[2].delay(Duration::from_millis(400), Duration::ZERO, Duration::ZERO);
    race.a_slow
        .delay(Duration::from_millis(1_000), Duration::ZERO, Duration::ZERO);

    let (a, x) = race.run().await;
    assert!(
        x.is_ok(),
        "X was meant to win on masters 0 and 2: {:?}",
        x.err()
    );
    // A's request lands on master 2 (1 s), and its takeover a second later.
    assert!(
        race.a_everywhere(&a).await,
        "A's late takeover of master 2: {:?}",
        values(&race.nodes, &lock_key("r"))
    );
    race.the_later_keeps_its_keys(&a, x).await;
    a.release().await.unwrap();
}

/// X is granted master 0; A, 50 ms later, takes master 0 over and is granted master 1: it
/// wins. X is refused master 1 (A's, stamped after it), and its request to master 2 never
/// arrives: X loses, and its rollback leaves A's keys alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_race_the_earlier_attempt_loses_costs_the_later_nothing() {
    let race = OwnerRace::start().await;
    race.x_routes[1].delay(Duration::from_millis(300), Duration::ZERO, Duration::ZERO);
    race.x_routes[2].blackhole();
    race.a_slow
        .delay(Duration::from_millis(1_000), Duration::ZERO, Duration::ZERO);

    let (a, x) = race.run().await;
    // A's request to master 2 lands after a second.
    assert!(
        race.a_everywhere(&a).await,
        "X, stamped before A, took A's grant over: {:?}",
        values(&race.nodes, &lock_key("r"))
    );
    let x_won = x.is_ok();
    race.the_later_keeps_its_keys(&a, x).await;
    assert!(!x_won, "X won on master 0 alone");
    a.release().await.unwrap();
}

/// A restarted worker's release frees what it took over from its own dead lock, the takeovers
/// answered after its win included: no later lock of the owner took a key from it, so nothing
/// goes back. O holds for 5 s and dies; A takes masters 0 and 1 over and wins, its takeover on
/// master 2 landing a second later; A extends to 60 s and releases: no key is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_workers_release_frees_even_what_its_late_takeover_took() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let dead_owner = waiting_out(nodes.urls());
    let a_slow = FaultProxy::start(nodes[2].addr()).unwrap();
    let a = waiting_out(vec![nodes[0].url(), nodes[1].url(), a_slow.url()]);
    warmed_up(&[&dead_owner, &a]).await;
    let dead = dead_owner
        .acquire_as("r", "worker-7", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(eventually(Duration::from_secs(2), || present(&nodes, &key) == 3).await);
    std::mem::forget(dead);
    a_slow.delay(Duration::from_millis(1_000), Duration::ZERO, Duration::ZERO);
    let mut lock = a.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = lock.token().expose().to_owned();
    // A's request lands on master 2 (1 s), and its takeover a second later.
    assert!(
        eventually(Duration::from_secs(3), || holders(&nodes, &key, &token)
            == 3)
        .await,
        "A's late takeover on master 2: {:?}",
        values(&nodes, &key)
    );
    lock.extend(Duration::from_secs(60)).await.unwrap();
    lock.release().await.unwrap();
    assert_gone_everywhere(&nodes, &key).await;
}

/// Another road to the defect of `tests/extends/late_requests.rs`
/// (`an_owners_lost_attempt_still_on_its_way_never_takes_over_a_later_grant`): the attempt that
/// wins started first (one of its requests was slow), and the attempt that loses started later.
/// The loser's request to one master runs late, reads the winner's grant there and names it; it
/// must take nothing over (its attempt has lost), nor may its rollback touch that key.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_attempt_with_a_later_number_never_takes_over_a_grant_won_after_it_started() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    // The winner's route to master 1 is slow (500 ms); the loser's route to master 2 is
    // slower (1 s each request). Both wait their routes out (3 s node timeout), one attempt.
    let winner_route = FaultProxy::start(nodes[1].addr()).unwrap();
    let loser_route = FaultProxy::start(nodes[2].addr()).unwrap();
    let winner = waiting_out(vec![nodes[0].url(), winner_route.url(), nodes[2].url()]);
    let loser = waiting_out(vec![nodes[0].url(), nodes[1].url(), loser_route.url()]);
    assert_eq!(winner.connect().await.unwrap().reachable, 3);
    assert_eq!(loser.connect().await.unwrap().reachable, 3);
    set(&nodes[0], &key, "someone-else", TTL);
    set(&nodes[1], &key, "someone-else", TTL);
    winner_route.delay(Duration::from_millis(500), Duration::ZERO, Duration::ZERO);
    loser_route.delay(Duration::from_secs(1), Duration::ZERO, Duration::ZERO);

    // The winner's attempt draws its number first: refused on master 0, granted on master 2,
    // its request to master 1 on its way.
    // Each step waits until the masters have run what it sent (however late its task started),
    // well within the routes' delays.
    let before: Vec<u64> = nodes.iter().map(script_calls).collect();
    let ran = |on: &[(usize, u64)]| {
        on.iter()
            .all(|&(i, n)| script_calls(&nodes[i]) >= before[i] + n)
    };
    // What the winner's route has passed on to master 1: nothing new until its request lands.
    let winner_sent = winner_route.stats().bytes_up;
    let winning = tokio::spawn(async move { winner.acquire_as("r", "worker-7", TTL).await });
    assert!(eventually(Duration::from_secs(2), || ran(&[(0, 1), (2, 1)])).await);
    // The loser's attempt draws the next number: refused on masters 0 and 1 at once, lost; its
    // request to master 2 is still on its way.
    let losing = tokio::spawn(async move {
        let lost = loser.acquire_as("r", "worker-7", TTL).await;
        (loser, lost)
    });
    assert!(eventually(Duration::from_secs(2), || ran(&[(0, 2), (1, 1)])).await);
    // Master 1 falls free before the winner's request lands there.
    del(&nodes[1], &key);
    assert_eq!(
        winner_route.stats().bytes_up,
        winner_sent,
        "the winner's request reached master 1 before it fell free: the scenario did not happen"
    );
    let lock = winning.await.unwrap().unwrap();
    let token = lock.token().expose().to_owned();
    println!("won {token} at {:?}", values(&nodes, &key));
    assert_eq!(holders(&nodes, &key, &token), 2);

    // The loser's request lands on master 2, and whatever follows (its compare-and-swap, its
    // rollback), 1 s apart each.
    let until = Instant::now() + Duration::from_secs(4);
    let mut seen: Vec<Vec<Option<String>>> = Vec::new();
    while Instant::now() < until {
        let vals = values(&nodes, &key);
        if seen.last() != Some(&vals) {
            println!(
                "{:?} left by the holder; masters {vals:?}",
                lock.remaining()
            );
            seen.push(vals);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (loser, lost) = losing.await.unwrap();
    assert!(lost.is_err(), "the second attempt was meant to lose");
    // Master 0's holder goes: the lock must still keep everyone else out.
    del(&nodes[0], &key);
    still_exclusive(&nodes, &lock, "after the loser's late requests").await;
    assert!(
        seen.iter().all(|vals| vals
            .iter()
            .filter(|v| v.as_deref() == Some(&*token))
            .count()
            >= 2),
        "the lock lost its quorum while its holder said it held: {seen:?}"
    );
    lock.release().await.unwrap();
    drop(loser);
}

/// An attempt that has won keeps its requests still out from taking over a later grant of the
/// same owner: process A's acquire wins on masters 0 and 1 while its request to master 2 is on
/// a slow route; process B, same owner id, then takes the lock over (masters 0 and 1) and is
/// granted master 2. A's late request lands on master 2 and reads B's value there; had it taken
/// that over, A's release would then free it, and B, still valid, would keep two masters of
/// three: one master lost (within what B's lock survives) and a third client takes the resource.
#[tokio::test(flavor = "multi_thread")]
async fn a_won_attempts_late_request_never_takes_over_a_later_grant_of_the_owner() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let slow = FaultProxy::start(nodes[2].addr()).unwrap();
    let first = waiting_out(vec![nodes[0].url(), nodes[1].url(), slow.url()]);
    assert_eq!(first.connect().await.unwrap().reachable, 3);
    let second = connected(&nodes).await;
    slow.delay(Duration::from_millis(600), Duration::ZERO, Duration::ZERO);

    let a = first.acquire_as("r", "worker-7", TTL).await.unwrap();
    let b = second.acquire_as("r", "worker-7", TTL).await.unwrap();
    let token = b.token().expose().to_owned();
    assert_eq!(
        holders(&nodes, &key, &token),
        3,
        "B was meant to hold every master before A's request lands: {:?}",
        values(&nodes, &key)
    );
    // A's request lands on master 2 (600 ms), and whatever it sends next (600 ms more).
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    println!("after A's late request: {:?}", values(&nodes, &key));
    a.release().await.ok();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        holders(&nodes, &key, &token),
        3,
        "the later grant kept every master it was granted: {:?}",
        values(&nodes, &key)
    );
    del(&nodes[0], &key);
    still_exclusive(&nodes, &b, "after master 0 lost B's key").await;
    b.release().await.unwrap();
}

/// A win that fails after its quorum (here: without its fences) is a loss for the takeovers
/// too. X of `worker-7` holds `r` on masters 0 and 2. A later attempt A of the owner, fencing,
/// takes master 0 over from X (whose fence counter there is far ahead) and is granted master 1;
/// its replies from masters 1 and 2 are held. Its grant on master 1 is then deleted and the
/// replies from master 1 delivered: A has a quorum, but its fences differ and the raise finds
/// its token gone on master 1, so the attempt fails and its rollback goes out. Then master 2's
/// reply arrives: X's value, which A named on master 0. A takeover sent now would hold master 2
/// until the cleanup behind it put X back, and X's extend would fail meanwhile (one master of
/// three). It must take nothing: X keeps masters 0 and 2 throughout, and its extend succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_win_that_fails_after_its_quorum_takes_nothing_over_with_its_requests_still_out() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let key = lock_key("r");
    let to_1 = FaultProxy::start(nodes[1].addr()).unwrap();
    let to_2 = FaultProxy::start(nodes[2].addr()).unwrap();
    let x_client = waiting_out(nodes.urls());
    let a_client = Redlock::builder(vec![nodes[0].url(), to_1.url(), to_2.url()])
        .node_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .fencing(true)
        .build()
        .unwrap();
    warmed_up(&[&x_client, &a_client]).await;
    let mut x = x_client.acquire_as("r", "worker-7", TTL).await.unwrap();
    let x_token = x.token().expose().to_owned();
    assert!(
        eventually(Duration::from_secs(2), || holders(&nodes, &key, &x_token)
            == 3)
        .await
    );
    del(&nodes[1], &key);
    set(
        &nodes[0],
        &quorumlock::companion_key(&key, ":fence"),
        "9000000000000000",
        TTL,
    );
    to_1.hold();
    to_2.hold();

    let attempt = {
        let a_client = a_client.clone();
        tokio::spawn(async move { a_client.acquire_as("r", "worker-7", TTL).await })
    };
    let granted_on_1 =
        eventually(Duration::from_secs(2), || values(&nodes, &key)[1].is_some()).await;
    assert!(granted_on_1, "A's request never reached master 1");
    del(&nodes[1], &key);
    to_1.deliver_held();
    // The attempt fails for its fences and rolls back: master 0 goes back to X.
    let rolled_back = eventually(Duration::from_secs(2), || {
        values(&nodes, &key)[0].as_deref() == Some(&*x_token)
    })
    .await;
    assert!(
        rolled_back,
        "A's rollback never gave master 0 back: {:?}",
        values(&nodes, &key)
    );
    // Master 2's replies from now on take a second: a takeover sent on the held reply would
    // hold master 2 at least that long before the attempt's cleanup behind it put X back.
    to_2.delay(Duration::ZERO, Duration::from_secs(1), Duration::ZERO);
    to_2.deliver_held();
    let deadline = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < deadline {
        let on_2 = values(&nodes, &key)[2].clone();
        assert_eq!(
            on_2.as_deref(),
            Some(&*x_token),
            "the failed attempt took master 2 over from X"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a = attempt.await.unwrap();
    assert!(
        matches!(a, Err(quorumlock::Error::NotAcquired { .. })),
        "A was meant to fail for its fences: {:?}",
        a.map(|l| l.token().expose().to_owned())
    );
    let after = values(&nodes, &key);
    assert_eq!(
        (after[0].as_deref(), after[2].as_deref()),
        (Some(&*x_token), Some(&*x_token)),
        "the failed attempt cost X a master: {after:?}"
    );
    x.extend(TTL).await.unwrap();
    x.release().await.unwrap();
}

//! Scenarios 22, 23, 28 and 29: voters that fail over two at a time while locks are held, with
//! and without durable votes.
//!
//! Three voters; separate clients contend for a few resources. Over and over, the fault driver
//! cuts the replication of two voters, lets the clients go on until both cut primaries hold a
//! grant their replicas lack (of one lock, held long when there is one; at most 400 ms, 800 ms
//! on clusters), then kills both primaries and promotes both replicas: two failovers in
//! the same window, which breaks the rule `f ≥ q − N + k` for any holder (q = 2, N = 3, k ≤ 3).
//! The dead primaries come back empty as the replicas of the promoted ones, ready for the next
//! round.
//!
//! * 22 and 23: each voter a standalone primary with an asynchronous replica that replicates
//!   through a fault proxy (the replication link); clients reach each voter through another
//!   proxy (its virtual IP). The cut swallows the replication stream; the failover is
//!   `REPLICAOF NO ONE` and the virtual IP moved to the replica.
//! * 28 and 29: each voter a Redis Cluster of 3 primaries with a replica each; the two struck
//!   shards are those that serve one resource's slot (a resource held long, when there is one),
//!   so the same resources lose their grants on both voters. The cut: the shard's replica is
//!   frozen (`SIGSTOP`) and its replication connection killed on the primary (`CLIENT KILL TYPE
//!   replica`), so that nothing written from then on reaches it (a frozen replica alone still
//!   finds the stream in its socket when thawed, and applies it). The failover: the primary
//!   killed, the replica thawed and promoted (`CLUSTER FAILOVER TAKEOVER`). After both, a prober
//!   asks for every resource once, as a newcomer would.
//!
//! With votes counted once answered (22, 28: the negative controls), grants made while the
//! replication was cut are lost with their primaries, and a second client takes a lock its first
//! holder still holds: the checker must find these overlaps. With durable votes (23, 29:
//! [`Durability::Replicas(1)`](Durability::Replicas)) a grant counts only once the replica
//! acknowledged it, so a cut voter's grants never count, and what counted is on the promoted
//! replica: 0 violations.

use std::collections::HashMap;
use std::io;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{Durability, Redlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::contenders::{contend, probe, victim, Contention, Holds};
use super::{percentiles, ChaosRun, Check, Length, Scenario};
use crate::direct::blocking;
use quorumlock_testkit::cluster::{key_slot, RedisClusterBuilder};
use quorumlock_testkit::failover::Pair;
use quorumlock_testkit::server::RedisServerBuilder;
use quorumlock_testkit::{History, RedisCluster, Violation};

const VOTERS: usize = 3;
const CLIENTS: usize = 16;
const RESOURCES: usize = 12;
/// Long enough for `WAIT` to hear from a live replica on a loaded machine (it waits about half
/// of it); a frozen one never answers within it. Short, because a failover brings back the
/// line of the replica's copy, whose stale entries hold the line up for one entry lease (ten
/// node timeouts) like waiters that died.
const NODE_TIMEOUT: Duration = Duration::from_millis(150);
/// Most holds are short; one in so many lasts long enough that a double failover often strikes
/// while it is held.
const SHORT_HOLD: Duration = Duration::from_millis(10);

/// How often the negative controls read the history for a second holder.
const CONTROL_LOOKS_EVERY: Duration = Duration::from_secs(2);

/// What differs between the standalone voters (22, 23) and the Cluster voters (28, 29).
struct Shape {
    clusters: bool,
    ttl: Duration,
    long_hold: RangeInclusive<Duration>,
    long_hold_one_in: u32,
    /// How long the replication of the two voters stays cut at most, waiting for a grant to
    /// strike.
    longest_freeze: Duration,
}

impl Shape {
    fn of(scenario: Scenario) -> Shape {
        match scenario {
            // A cluster's failover (the takeover, the cluster settling, the clients following
            // the slots) takes longer than moving a virtual IP: holds long enough that a lock
            // taken while the replication was cut is still held when both failovers are done.
            Scenario::ClusterFailoverNotDurable | Scenario::ClusterFailoverDurable => Shape {
                clusters: true,
                ttl: Duration::from_secs(3),
                long_hold: Duration::from_millis(2_000)..=Duration::from_millis(2_800),
                long_hold_one_in: 10,
                longest_freeze: Duration::from_millis(800),
            },
            // The negative control holds long enough that a lock granted while the replication
            // was cut is still held once both voters failed over (killed, promoted, the virtual
            // IP moved), which takes a few hundred milliseconds on a busy machine: with holds of
            // 80–200 ms a run beside other work once struck 31 rounds and made no second holder.
            Scenario::FailoverNotDurable => Shape {
                clusters: false,
                ttl: Duration::from_secs(2),
                long_hold: Duration::from_millis(300)..=Duration::from_millis(800),
                long_hold_one_in: 5,
                longest_freeze: Duration::from_millis(400),
            },
            _ => Shape {
                clusters: false,
                ttl: Duration::from_secs(1),
                long_hold: Duration::from_millis(80)..=Duration::from_millis(200),
                long_hold_one_in: 5,
                longest_freeze: Duration::from_millis(400),
            },
        }
    }

    fn time_limit(&self, length: Length) -> Duration {
        match (length, self.clusters) {
            (Length::Short, false) => Duration::from_secs(150),
            (Length::Short, true) => Duration::from_secs(300),
            (Length::Long, false) => Duration::from_secs(600),
            (Length::Long, true) => Duration::from_secs(1_500),
        }
    }

    /// Rounds of double failovers a run must go through, striking a grant on both voters. The
    /// short run of durable votes on Cluster voters (29) goes through fewer: it shows nothing is
    /// lost, which the long run shows at length, and `make test` has a time budget.
    fn min_rounds(&self, length: Length, durable: bool) -> usize {
        match (length, self.clusters, durable) {
            (Length::Short, false, _) => 30,
            (Length::Short, true, false) => 8,
            (Length::Short, true, true) => 5,
            (Length::Long, false, _) => 100,
            (Length::Long, true, _) => 60,
        }
    }
}

/// Runs scenario 22, 23, 28 or 29 (see the module docs) for `length` with `seed`.
///
/// # Errors
///
/// When a server, a cluster or a proxy cannot be started, or a failover step fails.
pub(super) async fn run(scenario: Scenario, length: Length, seed: u64) -> io::Result<ChaosRun> {
    let started = Instant::now();
    let shape = Shape::of(scenario);
    let durability = match scenario {
        Scenario::FailoverDurable | Scenario::ClusterFailoverDurable => Durability::Replicas(1),
        _ => Durability::Answered,
    };
    let voters = if shape.clusters {
        // One after another: on two cores, clusters created at once time out.
        Voters::Clusters(blocking(|| (0..VOTERS).map(|_| start_cluster()).collect()).await?)
    } else {
        Voters::Pairs(blocking(|| (0..VOTERS).map(|_| Pair::start()).collect()).await?)
    };
    let urls = voters.urls();
    let history = Arc::new(History::new());
    let shared = Arc::new(Shared {
        rounds_struck: AtomicUsize::new(0),
        clients: Arc::default(),
    });
    let holds = Holds {
        resources: RESOURCES,
        ttl: shape.ttl,
        short: SHORT_HOLD,
        long: shape.long_hold.clone(),
        long_one_in: shape.long_hold_one_in,
    };
    let target = scenario.target(length);
    let time_limit = shape.time_limit(length);
    let client = || {
        Redlock::builder(urls.clone())
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(Duration::from_millis(500))
            .durability(durability)
    };

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let rl = client()
            .retry_delay(Duration::from_millis(10))
            .retry_jitter(Duration::from_millis(10))
            .acquire_timeout(Duration::from_secs(5))
            .build()
            .map_err(io::Error::other)?;
        let rng = StdRng::seed_from_u64(seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9));
        clients.push(tokio::spawn(contend(
            rl,
            c,
            rng,
            holds.clone(),
            Arc::clone(&history),
            Arc::clone(&shared.clients),
        )));
    }

    let rng = StdRng::seed_from_u64(seed);
    let driver = match voters {
        Voters::Pairs(pairs) => tokio::spawn(fail_over_in_pairs(
            pairs,
            shape.longest_freeze,
            rng,
            Arc::clone(&history),
            Arc::clone(&shared),
        )),
        Voters::Clusters(clusters) => {
            let prober = client().build().map_err(io::Error::other)?;
            tokio::spawn(fail_over_shards_in_pairs(
                clusters,
                prober,
                shape.ttl,
                shape.longest_freeze,
                rng,
                Arc::clone(&history),
                Arc::clone(&shared),
            ))
        }
    };
    let min_rounds = shape.min_rounds(length, durability != Durability::Answered);
    // The negative controls (22, 28) go on until the checker sees a second holder, within
    // their time limit: a struck round makes one only when the lock it took from both voters
    // is still held once they failed over (a long hold granted while the replication was cut),
    // and such rounds come in bursts (8 struck rounds on Cluster voters once made none; 31 on
    // standalone voters have made 2).
    let until_caught = durability == Durability::Answered;
    let mut caught = !until_caught;
    let mut looked = Instant::now();
    while (shared.clients.acquisitions.load(Ordering::Relaxed) < target
        || shared.rounds_struck.load(Ordering::Relaxed) < min_rounds
        || !caught)
        && started.elapsed() < time_limit
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !caught && looked.elapsed() >= CONTROL_LOOKS_EVERY {
            looked = Instant::now();
            caught = history
                .check()
                .violations
                .iter()
                .any(|v| matches!(v, Violation::Overlap { .. }));
        }
    }
    shared.clients.stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    let rounds = driver.await.map_err(io::Error::other)??;

    let report = history.check();
    let mut latencies = std::mem::take(&mut *crate::mutex::lock(&shared.clients.latencies));
    let (p50, p99) = percentiles(&mut latencies);
    let lost: usize = rounds.iter().map(|r| r.keys_lost).sum();
    let struck = rounds.iter().filter(|r| r.struck).count();
    let checks = vec![
        Check::new(
            if shape.clusters {
                "two voters' shards failed over in one window, both losing a grant of one lock"
            } else {
                "two voters failed over in one window while both held a grant their replicas lacked"
            },
            struck >= min_rounds,
            format!(
                "{struck} of {} rounds of two failovers (at least {min_rounds})",
                rounds.len()
            ),
        ),
        Check::new(
            "failovers took keys their replicas never got",
            lost > 0,
            format!("{lost} keys on a dying primary and not on its replica"),
        ),
    ];
    Ok(ChaosRun {
        scenario,
        seed,
        length,
        acquisitions: shared.clients.acquisitions.load(Ordering::Relaxed),
        failures: shared.clients.failures.load(Ordering::Relaxed),
        violations: report.violations.len(),
        p50,
        p99,
        elapsed: started.elapsed(),
        report,
        checks,
    })
}

/// The three voters of a run.
enum Voters {
    /// 22, 23: primaries with a replica each, behind proxies.
    Pairs(Vec<Pair>),
    /// 28, 29: Redis Clusters.
    Clusters(Vec<RedisCluster>),
}

impl Voters {
    fn urls(&self) -> Vec<String> {
        match self {
            Voters::Pairs(pairs) => pairs.iter().map(|p| p.vip.url()).collect(),
            Voters::Clusters(clusters) => clusters.iter().map(RedisCluster::url).collect(),
        }
    }
}

/// A cluster voter of 28 and 29: 3 primaries with a replica each. `hz 100` times a blocked
/// `WAIT` out within 10 ms, so that an unconfirmed grant is reported in time (as in 22 and 23).
fn start_cluster() -> io::Result<RedisCluster> {
    RedisClusterBuilder::new()
        .primaries(3)
        .replicas_per_primary(1)
        .node_timeout(Duration::from_millis(1_000))
        .server(RedisServerBuilder::new().arg("--hz").arg("100"))
        .spawn()
}

struct Shared {
    /// Rounds whose failovers struck a grant on both voters.
    rounds_struck: AtomicUsize,
    /// The clients' (see `contenders`); the fault driver strikes their long holds first.
    clients: Arc<Contention>,
}

/// One round of the fault driver.
struct Round {
    /// Lock keys a dying primary held that its replica did not.
    keys_lost: usize,
    /// Whether the failovers took a grant of one lock from both voters: for 22 and 23, both
    /// primaries held one their replicas lacked when the failovers began; for 28 and 29, both
    /// promoted replicas lack one that both dying primaries held.
    struck: bool,
}

/// Until the clients stop: freeze the replication of two voters, wait, fail both over, rebuild
/// them, rest.
async fn fail_over_in_pairs(
    mut pairs: Vec<Pair>,
    longest_freeze: Duration,
    mut rng: StdRng,
    history: Arc<History>,
    shared: Arc<Shared>,
) -> io::Result<Vec<Round>> {
    let mut rounds = Vec::new();
    while !shared.clients.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(800..=1_600))).await;
        let first = rng.random_range(0..VOTERS);
        let second = (first + rng.random_range(1..VOTERS)) % VOTERS;
        let victims = [first, second];
        let fault = history.fault(format!(
            "replication of voters {first} and {second} frozen, then both failed over"
        ));
        for &v in &victims {
            pairs[v].freeze_replication();
        }
        // Strike once both frozen primaries hold a grant their replicas lack, of a lock held
        // long at best (a lock taken during the freeze, counted or not).
        let frozen_at = Instant::now();
        let long_holds = Arc::clone(&shared);
        let (back, struck) = blocking(move || {
            let struck = loop {
                let lost = victims.map(|v| tokens_only_on_the_primary(&pairs[v]));
                let on_both: Vec<&String> =
                    lost[0].iter().filter(|t| lost[1].contains(*t)).collect();
                let held_long = {
                    let long = crate::mutex::lock(&long_holds.clients.long_holds);
                    on_both.iter().any(|t| long.contains_key(*t))
                };
                let waited = frozen_at.elapsed();
                if held_long || (!on_both.is_empty() && waited >= longest_freeze / 2) {
                    break true;
                }
                if waited >= longest_freeze {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            Ok((pairs, struck))
        })
        .await?;
        let (back, keys_lost) = blocking(move || {
            let mut pairs = back;
            let mut keys_lost = 0;
            for &v in &victims {
                keys_lost += tokens_only_on_the_primary(&pairs[v]).len();
                pairs[v].fail_over()?;
            }
            // Both at once: a voter without a replica cannot confirm a durable grant.
            std::thread::scope(|scope| {
                let rebuilding: Vec<_> = pairs
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| victims.contains(i))
                    .map(|(_, pair)| scope.spawn(move || pair.rebuild()))
                    .collect();
                rebuilding.into_iter().try_for_each(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a rebuild panicked")))
                })
            })?;
            Ok((pairs, keys_lost))
        })
        .await?;
        pairs = back;
        history.heal(fault);
        if struck {
            shared.rounds_struck.fetch_add(1, Ordering::Relaxed);
        }
        rounds.push(Round { keys_lost, struck });
    }
    Ok(rounds)
}

/// The tokens of the lock keys on `pair`'s primary that its replica lacks.
fn tokens_only_on_the_primary(pair: &Pair) -> Vec<String> {
    let held = |server: &quorumlock_testkit::RedisServer| -> Vec<Option<String>> {
        crate::direct::query(server.addr(), Duration::from_millis(500), |c| {
            let mut mget = redis::cmd("MGET");
            for r in 0..RESOURCES {
                mget.arg(quorumlock::resource_key("", &Holds::resource(r)));
            }
            mget.query(c)
        })
        .unwrap_or_default()
    };
    let (primary, replica) = (held(&pair.master), held(&pair.replica));
    primary
        .into_iter()
        .enumerate()
        .filter_map(|(i, token)| {
            let token = token?;
            (replica.get(i).cloned().flatten().as_ref() != Some(&token)).then_some(token)
        })
        .collect()
}

/// 28 and 29, until the clients stop: pick a resource (one held long, when there is one), cut
/// the replication of its shard on two voters, wait, fail both shards over, let `prober` (a
/// client of its own) ask for every resource once, rebuild them, rest.
async fn fail_over_shards_in_pairs(
    clusters: Vec<RedisCluster>,
    prober: Redlock,
    ttl: Duration,
    longest_freeze: Duration,
    mut rng: StdRng,
    history: Arc<History>,
    shared: Arc<Shared>,
) -> io::Result<Vec<Round>> {
    let mut clusters = clusters;
    let mut rounds = Vec::new();
    while !shared.clients.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(800..=1_600))).await;
        // Wait for a long hold to strike, a second at most.
        let waited = Instant::now();
        while crate::mutex::lock(&shared.clients.long_holds).is_empty()
            && waited.elapsed() < Duration::from_secs(1)
            && !shared.clients.stop.load(Ordering::Relaxed)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if shared.clients.stop.load(Ordering::Relaxed) {
            break;
        }
        let resource = victim(&shared.clients, RESOURCES, &mut rng);
        let slot = key_slot(quorumlock::resource_key("", &resource));
        let first = rng.random_range(0..VOTERS);
        let second = (first + rng.random_range(1..VOTERS)) % VOTERS;
        let victims = [first, second];
        let fault = history.fault(format!(
            "the shards of slot {slot} ({resource:?}) on voters {first} and {second}: \
             replication cut, then both failed over"
        ));
        let long_holds = Arc::clone(&shared);
        let (back, lost) = blocking(move || {
            let mut shards = Vec::new();
            for &v in &victims {
                shards.push(Shard::cut(&clusters[v], slot)?);
            }
            // Strike once both cut primaries hold a grant of one lock (a lock held long, at
            // best), or at the longest freeze.
            let frozen_at = Instant::now();
            loop {
                let fresh: Vec<HashMap<String, String>> =
                    shards.iter_mut().map(Shard::fresh).collect();
                let on_both: Vec<&String> = fresh[0]
                    .values()
                    .filter(|t| fresh[1].values().any(|u| u == *t))
                    .collect();
                let held_long = {
                    let long = crate::mutex::lock(&long_holds.clients.long_holds);
                    on_both.iter().any(|t| long.contains_key(*t))
                };
                let waited = frozen_at.elapsed();
                if held_long
                    || (!on_both.is_empty() && waited >= longest_freeze / 2)
                    || waited >= longest_freeze
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            // Both primaries die before either replica is promoted: one window.
            let mut dying = Vec::new();
            for (shard, &v) in shards.iter_mut().zip(&victims) {
                let fresh = shard.fresh();
                clusters[v][shard.primary].kill()?;
                dying.push((shard.replica, fresh));
            }
            let mut lost = Vec::new();
            for ((replica, fresh), &v) in dying.into_iter().zip(&victims) {
                take_over(&mut clusters[v], replica)?;
                lost.push((replica, fresh));
            }
            let mut lost_tokens = Vec::new();
            for ((replica, fresh), &v) in lost.into_iter().zip(&victims) {
                clusters[v].wait_settled()?;
                let url = clusters[v][replica].url();
                lost_tokens.push(
                    fresh
                        .into_iter()
                        .filter(|(key, token)| get(&url, key).as_ref() != Some(token))
                        .map(|(_, token)| token)
                        .collect::<Vec<String>>(),
                );
            }
            Ok((clusters, lost_tokens))
        })
        .await?;
        clusters = back;
        probe(&prober, ttl, RESOURCES, CLIENTS, &history).await;
        // Both at once: a shard without a replica cannot confirm a durable grant.
        clusters = blocking(move || {
            let mut clusters = clusters;
            std::thread::scope(|scope| {
                let rebuilding: Vec<_> = clusters
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| victims.contains(i))
                    .map(|(_, cluster)| scope.spawn(move || restart_dead(cluster)))
                    .collect();
                rebuilding.into_iter().try_for_each(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a rebuild panicked")))
                })
            })?;
            Ok(clusters)
        })
        .await?;
        history.heal(fault);
        let struck = lost[0].iter().any(|token| lost[1].contains(token));
        if struck {
            shared.rounds_struck.fetch_add(1, Ordering::Relaxed);
        }
        rounds.push(Round {
            keys_lost: lost.iter().map(Vec::len).sum(),
            struck,
        });
    }
    Ok(rounds)
}

/// The shard of one slot on one cluster voter, its replication cut.
struct Shard {
    primary: usize,
    replica: usize,
    /// To the primary, for reading the keys it serves while the replica is frozen.
    connection: redis::Connection,
    /// The lock keys whose slots the primary serves.
    keys: Vec<String>,
    /// Their tokens when the replication was cut.
    before: HashMap<String, String>,
}

impl Shard {
    /// Cuts the replica of the shard that serves `slot` off from its primary
    /// ([`RedisCluster::cut_replication`]): nothing the primary writes from now on reaches it.
    fn cut(cluster: &RedisCluster, slot: u16) -> io::Result<Shard> {
        cluster.wait_settled()?;
        let primary = cluster.primary_for_slot(slot)?;
        let Some(&replica) = cluster.replicas_of(primary)?.first() else {
            return Err(io::Error::other(format!("slot {slot}: no replica")));
        };
        let mut keys = Vec::new();
        for r in 0..RESOURCES {
            let key = quorumlock::resource_key("", &Holds::resource(r));
            if cluster.primary_for_slot(key_slot(&key))? == primary {
                keys.push(key);
            }
        }
        let connection = connect(&cluster[primary].url())?;
        cluster.cut_replication(primary, replica)?;
        let mut shard = Shard {
            primary,
            replica,
            connection,
            keys,
            before: HashMap::new(),
        };
        shard.before = shard.tokens();
        Ok(shard)
    }

    /// The tokens of the primary's lock keys now (none when it does not answer).
    fn tokens(&mut self) -> HashMap<String, String> {
        let mut tokens = HashMap::new();
        for key in &self.keys {
            match redis::cmd("GET")
                .arg(key)
                .query::<Option<String>>(&mut self.connection)
            {
                Ok(Some(token)) => {
                    tokens.insert(key.clone(), token);
                }
                Ok(None) => {}
                Err(_) => return HashMap::new(),
            }
        }
        tokens
    }

    /// The grants the primary made since the cut and still holds: key → token.
    fn fresh(&mut self) -> HashMap<String, String> {
        let before = std::mem::take(&mut self.before);
        let fresh = self
            .tokens()
            .into_iter()
            .filter(|(key, token)| before.get(key) != Some(token))
            .collect();
        self.before = before;
        fresh
    }
}

/// Thaws `replica`, whose primary was killed, and promotes it at once (`CLUSTER FAILOVER
/// TAKEOVER`).
fn take_over(cluster: &mut RedisCluster, replica: usize) -> io::Result<()> {
    cluster[replica].resume()?;
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query::<()>(&mut connect(&cluster[replica].url())?)
        .map_err(io::Error::other)
}

/// Restarts, empty, every node of `cluster` that is down: each rejoins as a replica, and the
/// restart returns once its link to its primary is up.
fn restart_dead(cluster: &mut RedisCluster) -> io::Result<()> {
    for i in 0..cluster.len() {
        if !cluster[i].is_running() {
            cluster.restart(i)?;
        }
    }
    Ok(())
}

/// A plain connection with 2 s timeouts.
fn connect(url: &str) -> io::Result<redis::Connection> {
    let timeout = Duration::from_secs(2);
    let connection = redis::Client::open(url)
        .and_then(|client| client.get_connection_with_timeout(timeout))
        .map_err(io::Error::other)?;
    connection
        .set_read_timeout(Some(timeout))
        .map_err(io::Error::other)?;
    Ok(connection)
}

/// `GET key` on one server, `None` when unset or unreachable.
fn get(url: &str, key: &str) -> Option<String> {
    let mut connection = connect(url).ok()?;
    redis::cmd("GET").arg(key).query(&mut connection).ok()?
}

//! Scenarios 24–27: voters as Redis runs in production — Redis Clusters, Sentinel-managed
//! masters, and a mix of kinds with a standalone master — failing over while locks are held.
//!
//! Three voters; separate clients contend for a few resources (16 clients, 12 resources), most
//! holds short and one in five long. The fault driver strikes the voter holding a long-held
//! resource where it hurts: a **lossy failover** of the shard (or the Sentinel-managed master) that
//! holds the resource's key. The replica is frozen (`SIGSTOP`) first, so the writes of the next
//! moments reach the primary alone (on a cluster its replication connection is killed on the
//! primary too, or the thawed replica would apply what waited in its socket; the negative control
//! cuts both struck shards before it counts a grant as theirs alone); then the primary is killed,
//! the replica thawed and promoted at once (`CLUSTER FAILOVER TAKEOVER`, or `SENTINEL FAILOVER`):
//! the voter forgets those grants, as an asynchronous failover does. The old primary comes back
//! empty as the new one's replica. A cluster voter also has slots moved while their locks are held
//! (`MIGRATING`/`IMPORTING` and `MIGRATE`, so clients meet `ASK`); a standalone master is killed
//! and restarted empty after a TTL.
//!
//! * 24, 25, 26 keep the rule `f ≤ q − 1 − (N − k)` per voter: one voter at a time loses keys,
//!   only keys of locks that every other voter holds too (a failover loses every fresh grant of
//!   its shard, and a lock some voter refused has `k = N − 1`: the primary's writes are paused
//!   at a moment when none is fresh, or the failover is called off), and the next fault waits
//!   until the last faulted voter has been back for a TTL (and a reconnect's backoff), so every
//!   lock granted while it was away has expired. 0 violations.
//! * 27, the negative control: two cluster voters lose the same held resource's key in one
//!   window (q = 2, N = 3, k = 3: f = 2 > 1). The checker must find two holders.
//!
//! After every fault a prober, a client of its own, asks for every resource once, as a
//! newcomer would right after a failover.
//!
//! [`Scenario::run_over_tls`] runs the same scenarios on TLS-only servers (`rediss+cluster://`,
//! `rediss+sentinel://`, `rediss://`), their cluster bus, replication and Sentinel links on TLS
//! too, the way managed services with encryption in transit run them.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{Redlock, RedlockBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::contenders::{contend, probe, victim, Contention, Holds};
use super::{percentiles, ChaosRun, Check, Length, Scenario};
use crate::direct::blocking;
use quorumlock_testkit::cluster::{key_slot, RedisClusterBuilder};
use quorumlock_testkit::sentinel::SentinelGroupBuilder;
use quorumlock_testkit::server::{RedisServerBuilder, ServerTls};
use quorumlock_testkit::{History, RedisCluster, RedisServer, SentinelGroup};

const VOTERS: usize = 3;
const CLIENTS: usize = 16;
const RESOURCES: usize = 12;
/// Long enough for a lossy failover (a kill, a takeover, the clients finding the new primary)
/// to complete inside a long hold, so that the negative control can strike while it is held.
const TTL: Duration = Duration::from_secs(3);
const NODE_TIMEOUT: Duration = Duration::from_millis(150);
const SHORT_HOLD: Duration = Duration::from_millis(10);
const LONG_HOLD: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(600)..=Duration::from_millis(1_200);
/// The negative control's long holds: long enough that two failovers at once, on a loaded
/// machine, still fall inside one.
const CONTROL_LONG_HOLD: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(2_000)..=Duration::from_millis(2_800);
const LONG_HOLD_ONE_IN: u32 = 10;
/// How long a replica stays frozen at most, waiting for its primary to take a grant it will
/// lose (a long hold's, at best).
const LONGEST_FREEZE: Duration = Duration::from_millis(800);

/// How long a lossy failover of 24–26 waits for a moment when every grant it would lose is on
/// every other voter too (see [`pause_when_losses_keep_the_rule`]) before it is called off.
const KEEP_THE_RULE_WITHIN: Duration = Duration::from_secs(5);

/// After a voter is back, how long before another voter may be struck (24–26): a TTL, so that
/// the locks granted without it have expired, and the clients' reconnect backoff (at most 1 s).
const REST: Duration = Duration::from_millis(TTL.as_millis() as u64 + 1_500);

/// What one voter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Cluster,
    Sentinel,
    Master,
}

/// One running voter.
enum Voter {
    Cluster(RedisCluster),
    Sentinel(SentinelGroup),
    Master(RedisServer),
}

impl Voter {
    /// Starts a voter of `kind`; with `tls`, every server of it on TLS only.
    fn start(kind: Kind, tls: Option<&ServerTls>) -> io::Result<Voter> {
        let server = || match tls {
            Some(tls) => RedisServerBuilder::new().tls(tls.clone().plain_port(false)),
            None => RedisServerBuilder::new(),
        };
        Ok(match kind {
            Kind::Cluster => Voter::Cluster(
                RedisClusterBuilder::new()
                    .server(server())
                    .primaries(3)
                    .replicas_per_primary(1)
                    .node_timeout(Duration::from_millis(1_000))
                    .spawn()?,
            ),
            Kind::Sentinel => Voter::Sentinel(
                SentinelGroupBuilder::new()
                    .server(server())
                    .replicas(1)
                    .sentinels(3)
                    .down_after(Duration::from_millis(1_000))
                    .spawn()?,
            ),
            Kind::Master => Voter::Master(server().spawn()?),
        })
    }

    /// The URL of every server of this voter: whichever of them serves a key answers `GET` for
    /// it (a cluster node that does not serve its slot answers `MOVED`).
    fn servers(&self) -> Vec<String> {
        match self {
            Voter::Cluster(c) => (0..c.len()).map(|i| c[i].url()).collect(),
            Voter::Sentinel(g) => g.servers().iter().map(RedisServer::url).collect(),
            Voter::Master(m) => vec![m.url()],
        }
    }

    /// Brings back, empty, the servers the last strike killed: each rejoins as a replica.
    fn recover(&mut self) -> io::Result<()> {
        match self {
            Voter::Cluster(cluster) => {
                for i in 0..cluster.len() {
                    if !cluster[i].is_running() {
                        cluster.restart(i)?;
                    }
                }
            }
            Voter::Sentinel(group) => {
                for i in 0..group.servers().len() {
                    if !group[i].is_running() {
                        group.restart(i)?;
                    }
                }
            }
            Voter::Master(_) => {}
        }
        Ok(())
    }

    fn url(&self) -> String {
        match self {
            Voter::Cluster(c) => c.url(),
            Voter::Sentinel(g) => g.url(),
            Voter::Master(m) => m.tls_url().unwrap_or_else(|| m.url()),
        }
    }

    /// Whether every server of this voter listens on TLS alone (no plain port).
    fn tls_only(&self) -> bool {
        let servers: Vec<&RedisServer> = match self {
            Voter::Cluster(c) => c.nodes().iter().collect(),
            Voter::Sentinel(g) => g.servers().iter().chain(g.sentinels()).collect(),
            Voter::Master(m) => vec![m],
        };
        servers.iter().all(|s| s.tls_port() == Some(s.port()))
    }

    /// The fault this voter takes next, for the resource `resource` (in the negative control,
    /// always a lossy failover, its freeze met by the other struck voter's at `together`):
    /// returns its kind and the grants it lost; `None` when a lossy failover was called off
    /// because it could not keep the rule (see [`pause_when_losses_keep_the_rule`]). `peers`:
    /// the servers of every other voter.
    fn strike(
        &mut self,
        resource: &str,
        rng: &mut StdRng,
        shared: &Shared,
        together: Option<&Rendezvous>,
        peers: &[Vec<String>],
    ) -> io::Result<Option<(&'static str, Vec<String>)>> {
        let control = together.is_some();
        let key = quorumlock::resource_key("", resource);
        self.recover()?;
        match self {
            Voter::Cluster(cluster) if !control && rng.random_ratio(1, 4) => {
                let slot = key_slot(&key);
                let from = cluster.primary_for_slot(slot)?;
                let primaries = cluster.primaries()?;
                let to = primaries[(primaries.iter().position(|p| *p == from).unwrap_or(0) + 1)
                    % primaries.len()];
                let migration = cluster.begin_migration(slot, to)?;
                std::thread::sleep(
                    rng.random_range(Duration::from_millis(20)..=Duration::from_millis(300)),
                );
                cluster.finish_migration(migration)?;
                Ok(Some(("a cluster slot moved while held", Vec::new())))
            }
            Voter::Cluster(cluster) => {
                let Some(lost) = lossy_cluster_failover(cluster, &key, shared, together, peers)?
                else {
                    return Ok(None);
                };
                if control && !lost.is_empty() {
                    // The negative control's replica lost the older write too: the struck
                    // key is free there. A promoted replica that kept the value the lost write
                    // replaced (the previous holder's token, when a release handed the lock
                    // over) would let nobody in before it expires, and show the checker
                    // nothing.
                    let primary = cluster.primary_for_slot(key_slot(&key))?;
                    del(&cluster[primary].url(), &key);
                }
                Ok(Some(("a cluster shard failed over, losing writes", lost)))
            }
            Voter::Sentinel(group) => {
                let Some(lost) = lossy_sentinel_failover(group, shared, peers)? else {
                    return Ok(None);
                };
                Ok(Some(("a Sentinel master failed over, losing writes", lost)))
            }
            Voter::Master(master) => {
                let lost = get(&master.url(), &key).into_iter().collect();
                master.kill()?;
                std::thread::sleep(TTL);
                master.restart()?;
                Ok(Some((
                    "a standalone master restarted empty after a TTL",
                    lost,
                )))
            }
        }
    }
}

/// `DEL key` on one server; an unreachable one is left as it is.
fn del(url: &str, key: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) {
        let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
        let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(key).query(&mut conn);
    }
}

/// `GET key` on one server, `None` when unset or unreachable.
fn get(url: &str, key: &str) -> Option<String> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    redis::cmd("GET").arg(key).query(&mut conn).ok()?
}

/// Every resource's lock key whose slot `url` serves (all of them when `serves` says so), with
/// the token it holds there now.
fn tokens(url: &str, serves: impl Fn(&str) -> bool) -> HashMap<String, String> {
    (0..RESOURCES)
        .map(|r| quorumlock::resource_key("", &Holds::resource(r)))
        .filter(|key| serves(key))
        .filter_map(|key| get(url, &key).map(|token| (key, token)))
        .collect()
}

/// With the replica frozen: waits until the primary at `url` holds a grant made since the
/// freeze, a long hold's at best ([`LONGEST_FREEZE`] at most), and returns the grants made
/// since the freeze that it holds.
fn wait_for_unreplicated_grant(
    url: &str,
    serves: &dyn Fn(&str) -> bool,
    before: &HashMap<String, String>,
    shared: &Shared,
) -> HashMap<String, String> {
    let frozen = Instant::now();
    loop {
        let fresh = granted_since(url, serves, before);
        let long = {
            let holds = crate::mutex::lock(&shared.clients.long_holds);
            fresh.values().any(|token| holds.contains_key(token))
        };
        let waited = frozen.elapsed();
        if long || (!fresh.is_empty() && waited >= LONGEST_FREEZE / 2) || waited >= LONGEST_FREEZE {
            return fresh;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The grants the primary at `url` holds that it did not hold as `before`.
fn granted_since(
    url: &str,
    serves: &dyn Fn(&str) -> bool,
    before: &HashMap<String, String>,
) -> HashMap<String, String> {
    tokens(url, serves)
        .into_iter()
        .filter(|(key, token)| before.get(key) != Some(token))
        .collect()
}

/// With the replica frozen, in 24–26: stops the primary at `url` taking writes (`CLIENT PAUSE
/// … WRITE`) at a moment when every grant it took since the freeze is on every other voter too,
/// and returns those grants, which the failover will lose. The scenarios keep the rule
/// `f ≤ q − 1 − (N − k)`, and a lock granted by all voters but one (its request refused there,
/// or not yet landed) has `k = N − 1`: no voter may lose its key. The failover strikes one
/// resource, but loses every fresh grant of the shard, whoever holds it. `None`, writes taken
/// again, when no such moment came within [`KEEP_THE_RULE_WITHIN`].
fn pause_when_losses_keep_the_rule(
    url: &str,
    serves: &dyn Fn(&str) -> bool,
    before: &HashMap<String, String>,
    shared: &Shared,
    peers: &[Vec<String>],
) -> io::Result<Option<HashMap<String, String>>> {
    let on_every_peer = |key: &str, token: &str| {
        peers.iter().all(|servers| {
            servers
                .iter()
                .any(|u| get(u, key).as_deref() == Some(token))
        })
    };
    let called_off = Instant::now() + KEEP_THE_RULE_WITHIN;
    loop {
        wait_for_unreplicated_grant(url, serves, before, shared);
        client_pause(url, true)?;
        let fresh = granted_since(url, serves, before);
        if fresh.iter().all(|(key, token)| on_every_peer(key, token)) {
            return Ok(Some(fresh));
        }
        client_pause(url, false)?;
        if Instant::now() >= called_off {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `CLIENT PAUSE … WRITE` (for 10 s at most) or `CLIENT UNPAUSE` on the server at `url`.
fn client_pause(url: &str, pause: bool) -> io::Result<()> {
    let mut cmd = redis::cmd("CLIENT");
    match pause {
        true => cmd.arg("PAUSE").arg(10_000).arg("WRITE"),
        false => cmd.arg("UNPAUSE"),
    };
    let mut conn = redis::Client::open(url)
        .map_err(io::Error::other)?
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(io::Error::other)?;
    cmd.query::<()>(&mut conn).map_err(io::Error::other)
}

/// The tokens of `fresh` (key, token) the promoted primary at `url` lacks.
fn lost(url: &str, fresh: &HashMap<String, String>) -> Vec<String> {
    fresh
        .iter()
        .filter(|(key, token)| get(url, key).as_ref() != Some(*token))
        .map(|(_, token)| token.clone())
        .collect()
}

/// The struck voters of one round of the negative control: each freezes its replica, then waits
/// for the others' freezes (a few seconds at most: a strike that failed does not hold the others
/// up) before it notes what its primary holds. A grant made after that is then one that every
/// struck replica lacks, and the round's failovers lose it on every struck voter; freezes begun
/// apart would each miss the grants made before the later one on the other voter.
struct Rendezvous {
    frozen: AtomicUsize,
    voters: usize,
}

impl Rendezvous {
    fn new(voters: usize) -> Rendezvous {
        Rendezvous {
            frozen: AtomicUsize::new(0),
            voters,
        }
    }

    fn frozen_and_wait(&self) {
        self.frozen.fetch_add(1, Ordering::SeqCst);
        let since = Instant::now();
        while self.frozen.load(Ordering::SeqCst) < self.voters
            && since.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Fails the shard that serves `key` over to its replica, cut off from it
/// ([`RedisCluster::cut_replication`]) until the primary took a grant the replica lacks (with
/// `together`, counted once every struck voter cut its replica); the old primary rejoins empty
/// as a replica. Returns the grants the failover lost; `None` when, without `together`, it was
/// called off to keep the rule (see [`pause_when_losses_keep_the_rule`]: replication resumes).
fn lossy_cluster_failover(
    cluster: &mut RedisCluster,
    key: &str,
    shared: &Shared,
    together: Option<&Rendezvous>,
    peers: &[Vec<String>],
) -> io::Result<Option<Vec<String>>> {
    cluster.wait_settled()?;
    let slot = key_slot(key);
    let primary = cluster.primary_for_slot(slot)?;
    let Some(&replica) = cluster.replicas_of(primary)?.first() else {
        return Err(io::Error::other(format!("slot {slot}: no replica")));
    };
    let mut owner = HashMap::new();
    for r in 0..RESOURCES {
        let key = quorumlock::resource_key("", &Holds::resource(r));
        owner.insert(key.clone(), cluster.primary_for_slot(key_slot(&key))?);
    }
    let serves = move |key: &str| owner.get(key) == Some(&primary);
    let url = cluster[primary].url();
    cluster.cut_replication(primary, replica)?;
    if let Some(together) = together {
        together.frozen_and_wait();
    }
    // What the primary holds with its replica frozen: any grant after this one is lacking.
    let before = tokens(&url, &serves);
    let fresh = match together {
        Some(_) => wait_for_unreplicated_grant(&url, &serves, &before, shared),
        None => match pause_when_losses_keep_the_rule(&url, &serves, &before, shared, peers)? {
            Some(fresh) => fresh,
            None => {
                cluster[replica].resume()?;
                return Ok(None);
            }
        },
    };
    cluster[primary].kill()?;
    cluster[replica].resume()?;
    let mut takeover = redis::Client::open(cluster[replica].url())
        .map_err(io::Error::other)?
        .get_connection_with_timeout(Duration::from_secs(2))
        .map_err(io::Error::other)?;
    redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query::<()>(&mut takeover)
        .map_err(io::Error::other)?;
    cluster.wait_settled()?;
    // The old primary comes back at the next strike (see `Voter::recover`), so that the prober
    // meets the voter as the failover left it.
    Ok(Some(lost(&cluster[replica].url(), &fresh)))
}

/// As [`lossy_cluster_failover`], for the master of a Sentinel group.
fn lossy_sentinel_failover(
    group: &mut SentinelGroup,
    shared: &Shared,
    peers: &[Vec<String>],
) -> io::Result<Option<Vec<String>>> {
    group.wait_settled()?;
    let primary = group.primary()?;
    let Some(replica) = (0..group.servers().len()).find(|i| *i != primary) else {
        return Err(io::Error::other("no replica"));
    };
    let url = group[primary].url();
    let every = |_: &str| true;
    let before = tokens(&url, every);
    group[replica].pause()?;
    let Some(fresh) = pause_when_losses_keep_the_rule(&url, &every, &before, shared, peers)? else {
        group[replica].resume()?;
        return Ok(None);
    };
    group[primary].kill()?;
    group[replica].resume()?;
    let sentinel = group.sentinels()[0].url();
    let name = group.master_name().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    // The Sentinels promote the replica at once when told to; until the replica has answered
    // their INFO since it was thawed, they may find no good replica, and are asked again.
    while group.primary()? == primary {
        if Instant::now() > deadline {
            return Err(io::Error::other(format!("{name}: no failover within 20 s")));
        }
        if let Ok(client) = redis::Client::open(sentinel.as_str()) {
            if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) {
                let _: redis::RedisResult<()> = redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(&name)
                    .query(&mut conn);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(Some(lost(&group[replica].url(), &fresh)))
}

/// A run's TLS: how its servers are started, and what each client's builder is given (the CA,
/// a client certificate) before it is built.
struct Tls<'a> {
    server: ServerTls,
    client: &'a (dyn Fn(RedlockBuilder) -> RedlockBuilder + Sync),
}

impl Scenario {
    /// Runs scenario 24, 25, 26 or 27 as [`chaos::run`](super::run) does, on TLS-only servers:
    /// every node of its clusters and Sentinel groups, every Sentinel and the standalone master
    /// is started with `server` and its plain port off, so that the cluster bus, replication and
    /// the Sentinels' links run over TLS too, and the clients reach the voters through
    /// `rediss+cluster://`, `rediss+sentinel://` and `rediss://`. Each client's builder goes
    /// through `client` last, before it is built: give it the CA there (and a client
    /// certificate, when `server` requires one), with quorumlock's `tls` feature, and any
    /// setting of the scenario's (its node timeout, ...) to override. The fault steps reach the
    /// servers through their Unix sockets. The run's checks include that every voter ran on
    /// TLS only.
    ///
    /// ```no_run
    /// # async fn f() -> std::io::Result<()> {
    /// use quorumlock_verify::chaos::{Length, Scenario};
    /// use quorumlock_testkit::tls::{TestCa, CA_CERT};
    ///
    /// let ca = TestCa::generate()?;
    /// let _root = ca.read(CA_CERT)?;
    /// // With quorumlock's `tls` feature, the builder takes the CA:
    /// // `&|builder| builder.tls_root_certificate(_root.clone())`.
    /// let run = Scenario::MixedVoters
    ///     .run_over_tls(Length::Short, 42, ca.server_tls(), &|builder| builder)
    ///     .await?;
    /// assert_eq!(run.violations, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a scenario other than 24–27; else as
    /// [`chaos::run`](super::run).
    pub async fn run_over_tls(
        self,
        length: Length,
        seed: u64,
        server: ServerTls,
        client: &(dyn Fn(RedlockBuilder) -> RedlockBuilder + Sync),
    ) -> io::Result<ChaosRun> {
        match self {
            Scenario::ClusterVoters
            | Scenario::SentinelVoters
            | Scenario::MixedVoters
            | Scenario::ClusterVotersOneWindow => {
                run_on(self, length, seed, Some(Tls { server, client })).await
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("scenario {self} has no TLS version: only 24-27 have"),
            )),
        }
    }
}

/// Runs scenario 24, 25, 26 or 27 (see the module docs) for `length` with `seed`.
///
/// # Errors
///
/// When a server cannot be started, or a fault step fails.
pub(super) async fn run(scenario: Scenario, length: Length, seed: u64) -> io::Result<ChaosRun> {
    run_on(scenario, length, seed, None).await
}

/// [`run`], on TLS-only servers with `tls`.
async fn run_on(
    scenario: Scenario,
    length: Length,
    seed: u64,
    tls: Option<Tls<'_>>,
) -> io::Result<ChaosRun> {
    let started = Instant::now();
    let kinds = match scenario {
        Scenario::SentinelVoters => [Kind::Sentinel; VOTERS],
        Scenario::MixedVoters => [Kind::Cluster, Kind::Sentinel, Kind::Master],
        _ => [Kind::Cluster; VOTERS],
    };
    let control = scenario == Scenario::ClusterVotersOneWindow;
    // Started one after another: on two cores, three clusters coming up at once time out.
    let server_tls = tls.as_ref().map(|tls| tls.server.clone());
    let voters = blocking(move || {
        kinds
            .iter()
            .map(|k| Voter::start(*k, server_tls.as_ref()))
            .collect()
    })
    .await?;
    let voters: Vec<Voter> = voters;
    let urls: Vec<String> = voters.iter().map(Voter::url).collect();
    let tls_only = voters.iter().all(Voter::tls_only);
    // Each client, given the run's TLS settings last when it has them.
    let build = |builder: RedlockBuilder| {
        match &tls {
            Some(tls) => (tls.client)(builder),
            None => builder,
        }
        .build()
        .map_err(io::Error::other)
    };
    let history = Arc::new(History::new());
    let shared = Arc::new(Shared::default());
    let holds = Holds {
        resources: RESOURCES,
        ttl: TTL,
        short: SHORT_HOLD,
        long: match control {
            true => CONTROL_LONG_HOLD,
            false => LONG_HOLD,
        },
        long_one_in: LONG_HOLD_ONE_IN,
    };
    let target = scenario.target(length);
    let time_limit = match length {
        Length::Short => Duration::from_secs(240),
        Length::Long => Duration::from_secs(1_500),
    };

    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let rl = build(
            Redlock::builder(urls.clone())
                .node_timeout(NODE_TIMEOUT)
                .connect_timeout(Duration::from_millis(500))
                .retry_delay(Duration::from_millis(10))
                .retry_jitter(Duration::from_millis(10))
                .acquire_timeout(Duration::from_secs(5)),
        )?;
        let rng = StdRng::seed_from_u64(seed ^ (client as u64 + 1).wrapping_mul(0x9E37_79B9));
        clients.push(tokio::spawn(contend(
            rl,
            client,
            rng,
            holds.clone(),
            Arc::clone(&history),
            Arc::clone(&shared.clients),
        )));
    }

    let prober = build(
        Redlock::builder(urls.clone())
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(Duration::from_millis(500)),
    )?;
    let driver = tokio::spawn(strike(
        voters,
        prober,
        control,
        StdRng::seed_from_u64(seed),
        Arc::clone(&history),
        Arc::clone(&shared),
    ));
    let min_faults = min_faults(length, control);
    while (shared.clients.acquisitions.load(Ordering::Relaxed) < target
        || shared.faults.load(Ordering::Relaxed) < min_faults
        || shared.lost.load(Ordering::Relaxed) == 0
        || (control && shared.lost_on_both.load(Ordering::Relaxed) < min_faults))
        && started.elapsed() < time_limit
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shared.clients.stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    let log = driver.await.map_err(io::Error::other)??;

    let report = history.check();
    let mut latencies = std::mem::take(&mut *crate::mutex::lock(&shared.clients.latencies));
    let (p50, p99) = percentiles(&mut latencies);
    let lost: usize = log.iter().map(|f| f.lost).sum();
    let mut kinds_struck: Vec<&str> = log.iter().map(|f| f.kind).collect();
    kinds_struck.sort_unstable();
    kinds_struck.dedup();
    let mut checks = vec![
        Check::new(
            "faults struck held resources",
            log.len() >= min_faults,
            format!(
                "{} faults (at least {min_faults}); {} lossy failovers called off to keep the rule",
                log.len(),
                shared.called_off.load(Ordering::Relaxed)
            ),
        ),
        Check::new(
            "failovers lost grants their replicas never got",
            lost > 0,
            format!("{lost} grants lost with their primary"),
        ),
        Check::new(
            "the negative control lost a grant on both struck voters",
            !control || shared.lost_on_both.load(Ordering::Relaxed) >= min_faults,
            format!(
                "{} rounds (at least {min_faults})",
                shared.lost_on_both.load(Ordering::Relaxed)
            ),
        ),
        Check::new(
            "every kind of fault of these voters struck",
            kinds_struck.len() >= expected_kinds(scenario),
            kinds_struck.join("; "),
        ),
    ];
    if tls.is_some() {
        checks.push(Check::new(
            "every server on TLS only, every client over TLS",
            tls_only && urls.iter().all(|url| url.starts_with("rediss")),
            urls.join(", "),
        ));
    }
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

/// Faults a run must strike.
fn min_faults(length: Length, control: bool) -> usize {
    match (length, control) {
        (Length::Short, true) => 3,
        (Length::Short, false) => 4,
        (Length::Long, _) => 40,
    }
}

/// How many kinds of fault a run must show (see [`Voter::strike`]): lossy failovers and slot
/// moves on clusters; lossy failovers on Sentinel groups; and in the mix, the kill of the
/// standalone master too.
fn expected_kinds(scenario: Scenario) -> usize {
    match scenario {
        Scenario::ClusterVoters => 2,
        Scenario::MixedVoters => 3,
        _ => 1,
    }
}

#[derive(Default)]
struct Shared {
    faults: AtomicUsize,
    /// Grants the faults lost so far: a run goes on until one has been.
    lost: AtomicUsize,
    /// Rounds of the negative control that lost one grant on both struck voters.
    lost_on_both: AtomicUsize,
    /// Lossy failovers called off (24–26): a grant they would have lost was not on every other
    /// voter (see [`pause_when_losses_keep_the_rule`]).
    called_off: AtomicUsize,
    /// The clients' (see `contenders`): the fault driver strikes their long holds first.
    clients: Arc<Contention>,
}

/// One fault the driver struck.
struct Struck {
    kind: &'static str,
    /// Held keys it lost (1 or 0 per voter struck).
    lost: usize,
}

/// The fault driver, until the clients stop. 24–26: one voter at a time, a rest after each
/// (see [`REST`]). 27: two cluster voters at once, the same held resource on both.
async fn strike(
    voters: Vec<Voter>,
    prober: Redlock,
    control: bool,
    mut rng: StdRng,
    history: Arc<History>,
    shared: Arc<Shared>,
) -> io::Result<Vec<Struck>> {
    let servers: Vec<Vec<String>> = voters.iter().map(Voter::servers).collect();
    let voters: Vec<Arc<Mutex<Voter>>> = voters
        .into_iter()
        .map(|v| Arc::new(Mutex::new(v)))
        .collect();
    let mut log = Vec::new();
    while !shared.clients.stop.load(Ordering::Relaxed) {
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
        let first = rng.random_range(0..VOTERS);
        let struck: Vec<usize> = match control {
            true => vec![first, (first + rng.random_range(1..VOTERS)) % VOTERS],
            false => vec![first],
        };
        let fault = history.fault(format!("voters {struck:?} struck on {resource:?}"));
        let together = control.then(|| Arc::new(Rendezvous::new(struck.len())));
        let mut strikes = Vec::new();
        for &v in &struck {
            let (voter, resource) = (Arc::clone(&voters[v]), resource.clone());
            let shared = Arc::clone(&shared);
            let mut rng = StdRng::seed_from_u64(rng.random());
            let together = together.clone();
            let peers: Vec<Vec<String>> = (0..VOTERS)
                .filter(|&p| p != v)
                .map(|p| servers[p].clone())
                .collect();
            strikes.push(blocking(move || {
                crate::mutex::lock(&voter).strike(
                    &resource,
                    &mut rng,
                    &shared,
                    together.as_deref(),
                    &peers,
                )
            }));
        }
        let mut lost_here: Vec<Vec<String>> = Vec::new();
        for done in futures::future::join_all(strikes).await {
            let Some((kind, lost)) = done? else {
                shared.called_off.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            shared.lost.fetch_add(lost.len(), Ordering::Relaxed);
            lost_here.push(lost.clone());
            log.push(Struck {
                kind,
                lost: lost.len(),
            });
        }
        // The negative control's round counts once a grant was lost on both struck voters: a
        // lock that then has its key on one voter alone, which a client (the prober, next, or
        // any other) can take beside its holder while the hold lasts.
        if let [first, second] = lost_here.as_slice() {
            if first.iter().any(|token| second.contains(token)) {
                shared.lost_on_both.fetch_add(1, Ordering::Relaxed);
            }
        }
        history.heal(fault);
        shared.faults.fetch_add(1, Ordering::Relaxed);
        probe(&prober, TTL, RESOURCES, CLIENTS, &history).await;
        if !control {
            tokio::time::sleep(REST).await;
        }
    }
    Ok(log)
}

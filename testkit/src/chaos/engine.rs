//! The scenario engine: starts the masters (behind fault proxies when asked), runs contending
//! clients that record every operation into a [`History`], runs a scenario's fault driver beside
//! them, and stops everything once enough locks were taken or the time is up.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorumlock::{Error, Lock, Redlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{oneshot, Barrier};

use super::line::{self, HeadKill, Probe};
use super::{election, reentrant, rwlock, semaphore};
use crate::history::ReadWriteWitness;
use crate::mutex;
use crate::{
    FaultId, FaultProxy, FencedRegister, History, LostUpdateRegister, OccupancyWitness, Op, OpKind,
    Outcome, RedisNodes, RedisServerBuilder, Releasing,
};

/// Every lock key of a chaos run starts with this.
pub(super) const KEY_PREFIX: &str = "chaos:";

/// How often the key monitor looks at every master.
const MONITOR_EVERY: Duration = Duration::from_millis(100);

/// The stall meter's tick ...
const TICK: Duration = Duration::from_millis(5);
/// ... and how late it may wake before the lateness counts as a stall.
const STALL_THRESHOLD: Duration = Duration::from_millis(10);

/// When the run's tokio runtime could not run its tasks on time: each stall is a tick of the
/// meter that woke more than 10 ms late, from when it was due to when it woke. On a loaded
/// machine the whole test process is sometimes not scheduled for hundreds of milliseconds; a
/// waiter cannot move then, whatever the library does, so the line checks count every wait
/// less the stalls inside it.
#[derive(Clone, Debug, Default)]
pub(super) struct Stalls(Vec<(Instant, Instant)>);

impl Stalls {
    /// How much of `[from, to]` the runtime was stalled.
    pub(super) fn within(&self, from: Instant, to: Instant) -> Duration {
        self.0
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// `to - from`, less the stalls inside it.
    pub(super) fn net(&self, from: Instant, to: Instant) -> Duration {
        to.saturating_duration_since(from)
            .saturating_sub(self.within(from, to))
    }

    /// How many stalls, the longest, and their total.
    pub(super) fn summary(&self) -> String {
        let longest = self
            .0
            .iter()
            .map(|(a, b)| *b - *a)
            .max()
            .unwrap_or_default();
        let total: Duration = self.0.iter().map(|(a, b)| *b - *a).sum();
        format!(
            "runtime stalls over {}ms: {}, longest {:.0}ms, {:.0}ms in all",
            STALL_THRESHOLD.as_millis(),
            self.0.len(),
            longest.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        )
    }
}

/// Ticks every 5 ms until `stop`, noting each tick that woke more than 10 ms late.
async fn measure_stalls(stop: Arc<AtomicBool>) -> Stalls {
    let mut stalls = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let due = Instant::now() + TICK;
        tokio::time::sleep_until(due.into()).await;
        let woke = Instant::now();
        if woke > due + STALL_THRESHOLD {
            stalls.push((due, woke));
        }
    }
    Stalls(stalls)
}

/// What the clients of a run do.
#[derive(Clone, Debug, Default)]
pub(super) enum Workload {
    /// Each client locks random resources `r<i>`, as a mutex.
    #[default]
    Locks,
    /// The clients share one semaphore with this many permits (`resources` must equal them:
    /// one witness and register per slot).
    Semaphore(u32),
    /// The clients share one read-write lock (`resources` 1: the writers' witness and register).
    RwLock,
    /// Candidates campaign in one election while an observer reads who leads (`resources` 1:
    /// the leaders' witness and registers).
    Election(Arc<election::Board>),
    /// The clients nest holds of the locks they take on `resources`, ending them from several
    /// tasks.
    Reentrant(Arc<reentrant::Ledger>),
}

/// What a scenario runs: the masters, the clients and how they behave.
#[derive(Clone, Debug)]
pub(super) struct Setup {
    pub(super) masters: usize,
    pub(super) aof: bool,
    pub(super) proxied: bool,
    /// Each client also has proxies of its own, one straight to each master, so that one client
    /// can be cut off alone; the network faults of a master then strike every proxy in front of
    /// it.
    pub(super) own_proxies: bool,
    pub(super) clients: usize,
    pub(super) resources: usize,
    pub(super) ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) retry_count: u32,
    pub(super) retry_delay: Duration,
    pub(super) retry_jitter: Duration,
    /// How long `acquire` waits in line (`None`: the library's default).
    pub(super) acquire_timeout: Option<Duration>,
    pub(super) fencing: bool,
    /// Longest sleep inside a critical section.
    pub(super) critical_section: Duration,
    /// Chance that a holder extends its lock once inside the critical section.
    pub(super) extend_chance: f64,
    /// Chance that a holder "forgets" its lock past the lease, then extends and releases it late.
    pub(super) stale_chance: f64,
    /// Chance that a holder's process dies while holding (the lock is leaked, not released).
    pub(super) crash_chance: f64,
    /// Chance that an acquire is watched, and its task aborted once its waiter heads the line
    /// of a quorum of masters.
    pub(super) head_kill_chance: f64,
    /// Clients in groups of this size start each round at the same instant on one resource
    /// (0: free-running clients).
    pub(super) simultaneous_group: usize,
    /// Attempts each client makes per simultaneous round.
    pub(super) round_attempts: u32,
    /// What the clients do.
    pub(super) workload: Workload,
    /// Stop once this many acquisitions succeeded ...
    pub(super) target: usize,
    /// ... and this many waiters were killed at the head of a line (whether one gets there
    /// before it acquires is chance) ...
    pub(super) min_head_kills: usize,
    /// ... or after this long, whichever comes first.
    pub(super) time_limit: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            masters: 5,
            aof: false,
            proxied: false,
            own_proxies: false,
            clients: 8,
            resources: 8,
            ttl: Duration::from_millis(200),
            node_timeout: Duration::from_millis(30),
            retry_count: 3,
            retry_delay: Duration::from_millis(4),
            retry_jitter: Duration::from_millis(3),
            acquire_timeout: None,
            fencing: true,
            critical_section: Duration::from_millis(2),
            extend_chance: 0.1,
            stale_chance: 0.0,
            crash_chance: 0.0,
            head_kill_chance: 0.0,
            simultaneous_group: 0,
            round_attempts: 6,
            workload: Workload::Locks,
            target: 2_000,
            min_head_kills: 0,
            time_limit: Duration::from_secs(40),
        }
    }
}

impl Setup {
    /// The client every client task uses, over `urls`.
    pub(super) fn redlock(&self, urls: &[String]) -> Result<Redlock, Error> {
        let builder = Redlock::builder(urls)
            .key_prefix(KEY_PREFIX)
            .node_timeout(self.node_timeout)
            .connect_timeout(Duration::from_millis(500))
            .retry_count(self.retry_count)
            .retry_delay(self.retry_delay)
            .retry_jitter(self.retry_jitter)
            .fencing(self.fencing);
        match self.acquire_timeout {
            Some(timeout) => builder.acquire_timeout(timeout),
            None => builder,
        }
        .build()
    }

    pub(super) fn resource(i: usize) -> String {
        format!("r{i}")
    }

    /// The name resource `r` is locked by: `r<i>`, the semaphore's slot `r`, the read-write
    /// lock or the election.
    pub(super) fn lock_name(&self, r: usize) -> String {
        match self.workload {
            Workload::Locks | Workload::Reentrant(_) => Self::resource(r),
            Workload::Semaphore(_) => semaphore::slot_name(r),
            Workload::RwLock => rwlock::RW_LOCK.to_owned(),
            Workload::Election(_) => election::ELECTION.to_owned(),
        }
    }

    /// The semaphore's permits, when the clients share one.
    pub(super) fn permits(&self) -> Option<u32> {
        match self.workload {
            Workload::Semaphore(permits) => Some(permits),
            _ => None,
        }
    }

    /// How long a waiter's place in line lasts without renewal, as the library documents it:
    /// ten node timeouts, at least 50 ms. What a waiter that dies may cost its line.
    pub(super) fn entry_lease(&self) -> Duration {
        (self.node_timeout * 10).max(Duration::from_millis(50))
    }

    /// The drift allowance the library uses for this TTL (default factor).
    pub(super) fn drift(&self) -> Duration {
        self.ttl.mul_f64(quorumlock::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2)
    }
}

/// The masters of a run, and the proxies in front of them when the scenario needs network faults.
pub(super) struct Cluster {
    servers: Mutex<RedisNodes>,
    addrs: Vec<SocketAddr>,
    proxies: Vec<FaultProxy>,
    urls: Vec<String>,
    /// Per client, its own proxy to each master, when the setup gives them.
    own: Vec<Vec<FaultProxy>>,
}

impl Cluster {
    fn start(setup: &Setup) -> io::Result<Cluster> {
        let servers =
            RedisNodes::spawn_with(setup.masters, &RedisServerBuilder::new().aof(setup.aof))?;
        let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr()).collect();
        let proxies = if setup.proxied {
            addrs
                .iter()
                .map(|a| FaultProxy::start(*a))
                .collect::<io::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        let urls = if setup.proxied {
            proxies.iter().map(FaultProxy::url).collect()
        } else {
            servers.urls()
        };
        let own = if setup.own_proxies {
            (0..setup.clients)
                .map(|_| {
                    addrs
                        .iter()
                        .map(|a| FaultProxy::start(*a))
                        .collect::<io::Result<Vec<_>>>()
                })
                .collect::<io::Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Cluster {
            servers: Mutex::new(servers),
            addrs,
            proxies,
            urls,
            own,
        })
    }

    pub(super) fn servers(&self) -> MutexGuard<'_, RedisNodes> {
        mutex::lock(&self.servers)
    }

    /// The URLs the clients use (the proxies', when there are proxies).
    pub(super) fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The URLs client `client` uses: those of its own proxies when it has some, else
    /// [`urls`](Self::urls).
    pub(super) fn urls_of(&self, client: usize) -> Vec<String> {
        match self.own.get(client) {
            Some(own) => own.iter().map(FaultProxy::url).collect(),
            None => self.urls.clone(),
        }
    }

    /// Client `client`'s own proxies, one per master (empty when it has none).
    pub(super) fn own_proxies(&self, client: usize) -> &[FaultProxy] {
        self.own.get(client).map_or(&[], Vec::as_slice)
    }

    /// The servers' own addresses (not the proxies').
    pub(super) fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub(super) fn proxy(&self, i: usize) -> Option<&FaultProxy> {
        self.proxies.get(i)
    }

    /// Every proxy in front of master `i`: the shared one and every client's own.
    pub(super) fn network(&self, i: usize) -> Vec<&FaultProxy> {
        self.proxies
            .get(i)
            .into_iter()
            .chain(self.own.iter().filter_map(|own| own.get(i)))
            .collect()
    }

    pub(super) fn running(&self) -> Vec<bool> {
        self.servers().iter().map(|s| s.is_running()).collect()
    }

    /// The lock keys (fencing counters and wait lines excluded) on master `i`, read directly,
    /// bypassing any proxy; `None` when it does not answer within 200 ms (down or paused).
    pub(super) fn lock_keys(&self, i: usize) -> Option<Vec<String>> {
        let keys: Vec<String> = direct_query(self.addrs[i], Duration::from_millis(200), |c| {
            redis::cmd("KEYS").arg(format!("{KEY_PREFIX}*")).query(c)
        })?;
        Some(keys.into_iter().filter(|k| !is_auxiliary(k)).collect())
    }

    /// Lock keys on the running masters that answer.
    pub(super) fn lock_keys_everywhere(&self) -> usize {
        let running = self.running();
        (0..self.addrs.len())
            .filter(|i| running[*i])
            .filter_map(|i| self.lock_keys(i))
            .map(|k| k.len())
            .sum()
    }
}

/// Runs one query on a fresh plain connection with short timeouts.
pub(crate) fn direct_query<T>(
    addr: SocketAddr,
    timeout: Duration,
    query: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
) -> Option<T> {
    let client = redis::Client::open(format!("redis://{addr}")).ok()?;
    let mut conn = client.get_connection_with_timeout(timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    query(&mut conn).ok()
}

/// The fault driver's handle: fault verbs that record themselves in the history, the seeded
/// random source, and the stop signal.
pub(super) struct Ctl {
    pub(super) setup: Setup,
    pub(super) cluster: Arc<Cluster>,
    pub(super) history: History,
    pub(super) rng: StdRng,
    stop: Arc<AtomicBool>,
    go: Option<oneshot::Sender<()>>,
}

impl Ctl {
    /// Lets the clients start (they wait for it, so a driver can set faults up first).
    pub(super) fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    pub(super) fn fault(&self, description: impl Into<String>) -> FaultId {
        self.history.fault(description)
    }

    pub(super) fn heal(&self, id: FaultId) {
        self.history.heal(id);
    }

    /// Waits until the run stops.
    pub(super) async fn until_stopped(&self) {
        while self.sleep(Duration::from_millis(100)).await {}
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The flag that says the run stopped, for tasks the driver starts beside it.
    pub(super) fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Sleeps `d`, waking early when the run stops; `true` if the run goes on.
    pub(super) async fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(10))).await;
        }
        false
    }

    /// A uniformly random duration in `[lo, hi]` milliseconds.
    pub(super) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(lo..=hi))
    }

    /// Sleeps a uniformly random `[lo, hi]` milliseconds (see [`ms`](Self::ms)), waking early
    /// when the run stops; `true` if the run goes on.
    pub(super) async fn sleep_ms(&mut self, lo: u64, hi: u64) -> bool {
        let d = self.ms(lo, hi);
        self.sleep(d).await
    }

    /// Between 1 and `most` distinct masters (how many, uniformly random), chosen at random, sorted.
    pub(super) fn pick_up_to(&mut self, most: usize) -> Vec<usize> {
        let k = self.rng.random_range(1..=most);
        self.pick(k)
    }

    /// `k` distinct masters, chosen at random, sorted.
    pub(super) fn pick(&mut self, k: usize) -> Vec<usize> {
        let n = self.cluster.addrs.len();
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = self.rng.random_range(i..n);
            all.swap(i, j);
        }
        let mut picked = all[..k.min(n)].to_vec();
        picked.sort_unstable();
        picked
    }

    pub(super) async fn kill(&self, i: usize) -> io::Result<()> {
        self.blocking(move |nodes| nodes[i].kill()).await
    }

    pub(super) async fn restart(&self, i: usize) -> io::Result<()> {
        self.blocking(move |nodes| nodes[i].restart()).await
    }

    pub(super) fn pause(&self, i: usize) -> io::Result<()> {
        self.cluster.servers()[i].pause()
    }

    pub(super) fn resume(&self, i: usize) -> io::Result<()> {
        self.cluster.servers()[i].resume()
    }

    pub(super) fn proxy(&self, i: usize) -> io::Result<&FaultProxy> {
        self.cluster
            .proxy(i)
            .ok_or_else(|| io::Error::other("this scenario runs without proxies"))
    }

    /// Every proxy in front of master `i` (see [`Cluster::network`]): what a network fault of
    /// that master strikes.
    pub(super) fn network(&self, i: usize) -> io::Result<Vec<&FaultProxy>> {
        let proxies = self.cluster.network(i);
        if proxies.is_empty() {
            return Err(io::Error::other("this scenario runs without proxies"));
        }
        Ok(proxies)
    }

    async fn blocking(
        &self,
        f: impl FnOnce(&mut RedisNodes) -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        let cluster = Arc::clone(&self.cluster);
        tokio::task::spawn_blocking(move || f(&mut cluster.servers()))
            .await
            .map_err(io::Error::other)?
    }
}

/// What a stale holder (one that kept its lock past the lease) saw when it finally extended and
/// released.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StaleStats {
    pub(super) holders: usize,
    pub(super) extends_refused: usize,
    pub(super) releases: usize,
    /// Keys the stale releases deleted: must be 0.
    pub(super) keys_deleted: usize,
}

/// What the clients and the engine observed, beside the history.
pub(super) struct Ran {
    pub(super) setup: Setup,
    pub(super) history: History,
    pub(super) cluster: Arc<Cluster>,
    pub(super) latencies: Vec<Duration>,
    pub(super) stale: StaleStats,
    /// Resource and instant of every holder process killed while holding.
    pub(super) kills: Vec<(String, Instant)>,
    /// Acquires watched to be killed once their waiter heads the line ...
    pub(super) watched_waiters: usize,
    /// ... and each one killed there.
    pub(super) head_kills: Vec<HeadKill>,
    /// Per simultaneous round: the attempt at which the first client won (`None`: nobody won).
    pub(super) rounds: Vec<Option<u32>>,
    /// Lock keys the monitor found without a TTL, or with one above the lock TTL.
    pub(super) immortal_keys: Vec<String>,
    pub(super) elapsed: Duration,
    /// When the clients were told to stop.
    pub(super) stopped_at: Instant,
    /// When the clients and the fault driver had ended.
    pub(super) finished_at: Instant,
    /// When the runtime could not run its tasks on time.
    pub(super) stalls: Stalls,
    /// The semaphore's witness, which admits as many clients as it has permits.
    pub(super) capacity: Option<OccupancyWitness>,
    /// The read-write lock's witness.
    pub(super) rw: Option<ReadWriteWitness>,
    /// The library's own counts, summed over the clients of a lock workload.
    pub(super) counted: ClientCounts,
}

/// What the clients of a lock workload counted (see [`quorumlock::Stats`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ClientCounts {
    /// Attempts sent, retries included.
    pub(super) attempts: u64,
    /// Waits cut short by a hand-off.
    pub(super) wakeups: u64,
}

impl ClientCounts {
    fn add(&mut self, rl: &Redlock) {
        let stats = rl.stats();
        self.attempts += stats.attempts;
        self.wakeups += stats.wakeups;
    }
}

/// Shared by every client task of a run.
pub(super) struct Shared {
    pub(super) setup: Setup,
    urls: Vec<String>,
    /// Per client with proxies of its own, the URLs it uses.
    own_urls: Vec<Vec<String>>,
    /// The masters' own addresses, bypassing every proxy.
    pub(super) masters: Vec<SocketAddr>,
    pub(super) history: History,
    /// Per resource (or semaphore slot): who is inside, ...
    pub(super) witnesses: Vec<OccupancyWitness>,
    /// ... a read–sleep–write counter, ...
    pub(super) registers: Vec<LostUpdateRegister>,
    /// ... and fenced storage, when fencing is on.
    pub(super) fenced: Vec<FencedRegister>,
    /// The semaphore's own witness, when the clients share one.
    pub(super) capacity: Option<OccupancyWitness>,
    /// The read-write lock's witness, when the clients share one.
    pub(super) rw: Option<ReadWriteWitness>,
    pub(super) successes: AtomicUsize,
    stop: Arc<AtomicBool>,
    pub(super) latencies: Mutex<Vec<Duration>>,
    stale: Mutex<StaleStats>,
    kills: Mutex<Vec<(String, Instant)>>,
    /// Reads the masters' lines, for the acquires watched to be killed at the head of one.
    probe: Arc<Probe>,
    watched_waiters: AtomicUsize,
    /// The tasks that follow each waiter killed at the head of a line.
    head_kills: Mutex<Vec<tokio::task::JoinHandle<HeadKill>>>,
    counted: Mutex<ClientCounts>,
}

/// Runs `setup` with `driver` injecting faults, until the target or the time limit.
pub(super) async fn run<F, Fut>(setup: Setup, seed: u64, driver: F) -> io::Result<Ran>
where
    F: FnOnce(Ctl) -> Fut,
    Fut: std::future::Future<Output = io::Result<()>> + Send + 'static,
{
    let began = Instant::now();
    let cluster = {
        let setup = setup.clone();
        Arc::new(
            tokio::task::spawn_blocking(move || Cluster::start(&setup))
                .await
                .map_err(io::Error::other)??,
        )
    };
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let resources = setup.resources;
    match &setup.workload {
        Workload::RwLock => history.watch_rw_lock(rwlock::RW_LOCK),
        Workload::Election(_) => history.watch_election(election::ELECTION),
        _ => {}
    }
    let shared = Arc::new(Shared {
        urls: cluster.urls.clone(),
        own_urls: (0..cluster.own.len()).map(|c| cluster.urls_of(c)).collect(),
        masters: cluster.addrs().to_vec(),
        history: history.clone(),
        witnesses: (0..resources)
            .map(|r| history.occupancy_witness(setup.lock_name(r)))
            .collect(),
        registers: (0..resources)
            .map(|r| history.lost_update_register(setup.lock_name(r)))
            .collect(),
        fenced: if setup.fencing {
            (0..resources)
                .map(|r| history.fenced_register(setup.lock_name(r)))
                .collect()
        } else {
            Vec::new()
        },
        capacity: setup.permits().map(|permits| {
            let permits = permits as usize;
            history.watch_semaphore(semaphore::SEMAPHORE, permits);
            history.capacity_witness(semaphore::SEMAPHORE, permits)
        }),
        rw: matches!(setup.workload, Workload::RwLock)
            .then(|| history.read_write_witness(rwlock::RW_LOCK)),
        setup: setup.clone(),
        successes: AtomicUsize::new(0),
        stop: Arc::new(AtomicBool::new(false)),
        latencies: Mutex::new(Vec::new()),
        stale: Mutex::new(StaleStats::default()),
        kills: Mutex::new(Vec::new()),
        probe: Arc::new(Probe::new(cluster.addrs())),
        watched_waiters: AtomicUsize::new(0),
        head_kills: Mutex::new(Vec::new()),
        counted: Mutex::new(ClientCounts::default()),
    });

    let stall_meter = tokio::spawn(measure_stalls(Arc::clone(&stop)));
    let monitor = {
        let cluster = Arc::clone(&cluster);
        let stop = Arc::clone(&stop);
        let ttl = setup.ttl;
        tokio::task::spawn_blocking(move || monitor_keys(&cluster, &stop, ttl))
    };

    let (go, ready) = oneshot::channel();
    let driver = tokio::spawn(driver(Ctl {
        setup: setup.clone(),
        cluster: Arc::clone(&cluster),
        history: history.clone(),
        rng: StdRng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03),
        stop: Arc::clone(&stop),
        go: Some(go),
    }));
    // A driver that ends (or fails) without saying go lets the clients start all the same.
    let _ = ready.await;
    let started = Instant::now();

    let mut clients = Vec::new();
    let rounds = Arc::new(Mutex::new(Vec::new()));
    if let Some(groups) = setup.clients.checked_div(setup.simultaneous_group) {
        for g in 0..groups {
            let barrier = Arc::new(Barrier::new(setup.simultaneous_group));
            let go_on = Arc::new(AtomicBool::new(true));
            let round_wins = Arc::new(Mutex::new(Vec::<(usize, u32)>::new()));
            for m in 0..setup.simultaneous_group {
                let client = g * setup.simultaneous_group + m;
                clients.push(tokio::spawn(simultaneous_client(
                    Arc::clone(&shared),
                    client,
                    g % resources,
                    m == 0,
                    Arc::clone(&barrier),
                    Arc::clone(&go_on),
                    Arc::clone(&round_wins),
                    Arc::clone(&rounds),
                    client_rng(seed, client),
                )));
            }
        }
    } else {
        for client in 0..setup.clients {
            let (shared, rng) = (Arc::clone(&shared), client_rng(seed, client));
            clients.push(match &setup.workload {
                Workload::Locks => tokio::spawn(free_client(shared, client, rng)),
                Workload::Semaphore(_) => tokio::spawn(semaphore::client(shared, client, rng)),
                Workload::RwLock => tokio::spawn(rwlock::client(shared, client, rng)),
                Workload::Election(board) => {
                    tokio::spawn(election::client(shared, client, rng, Arc::clone(board)))
                }
                Workload::Reentrant(ledger) => {
                    tokio::spawn(reentrant::client(shared, client, rng, Arc::clone(ledger)))
                }
            });
        }
    }

    let deadline = started + setup.time_limit;
    let short = || {
        shared.successes.load(Ordering::SeqCst) < setup.target
            || mutex::lock(&shared.head_kills).len() < setup.min_head_kills
    };
    while short() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The clients stop first and finish what they are doing under the faults still active;
    // only then does the driver heal.
    let stopped_at = Instant::now();
    shared.stop.store(true, Ordering::SeqCst);
    let mut client_error = None;
    for c in clients {
        if let Err(e) = c.await {
            client_error.get_or_insert(io::Error::other(format!("a client task failed: {e}")));
        }
    }
    stop.store(true, Ordering::SeqCst);
    let driven = driver.await.map_err(io::Error::other)?;
    let immortal_keys = monitor.await.map_err(io::Error::other)?;
    let stalls = stall_meter.await.map_err(io::Error::other)?;
    let finished_at = Instant::now();
    driven?;
    if let Some(e) = client_error {
        return Err(e);
    }

    let latencies = std::mem::take(&mut *mutex::lock(&shared.latencies));
    let stale = *mutex::lock(&shared.stale);
    let kills = std::mem::take(&mut *mutex::lock(&shared.kills));
    let following = std::mem::take(&mut *mutex::lock(&shared.head_kills));
    let mut head_kills = Vec::new();
    for followed in following {
        head_kills.push(followed.await.map_err(io::Error::other)?);
    }
    let rounds = std::mem::take(&mut *mutex::lock(&rounds));
    let capacity = shared.capacity.clone();
    let rw = shared.rw.clone();
    let counted = *mutex::lock(&shared.counted);
    Ok(Ran {
        setup,
        history,
        cluster,
        latencies,
        stale,
        kills,
        watched_waiters: shared.watched_waiters.load(Ordering::SeqCst),
        head_kills,
        rounds,
        immortal_keys,
        elapsed: began.elapsed(),
        stopped_at,
        finished_at,
        stalls,
        capacity,
        rw,
        counted,
    })
}

fn client_rng(seed: u64, client: usize) -> StdRng {
    StdRng::seed_from_u64(
        seed.wrapping_add((client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    )
}

/// Whether `key` is one of the keys kept beside a lock key: a fencing counter (which expires a
/// fencing grace after its last grant), or a wait line and its leases (which expire with their
/// last entry's lease).
fn is_auxiliary(key: &str) -> bool {
    [":fence", ":queue", ":leases"]
        .iter()
        .any(|suffix| key.ends_with(suffix))
        || key.ends_with(quorumlock::LAYOUT_MARKER)
}

/// Every `MONITOR_EVERY`, reads every lock key's remaining TTL on every master that answers and
/// collects those that could outlive the lock TTL (no expiry at all, or a longer one), and the
/// wait lines and fencing counters with no expiry at all.
fn monitor_keys(cluster: &Cluster, stop: &AtomicBool, ttl: Duration) -> Vec<String> {
    const SCRIPT: &str = r"
local bad = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local t = redis.call('PTTL', k)
  local suffix = string.sub(k, -6)
  if suffix == ':queue' or suffix == ':fence' or string.sub(k, -7) == ':leases' then
    if t == -1 then table.insert(bad, k .. ' pttl ' .. t) end
  elseif string.sub(k, -17) ~= 'quorumlock:layout' then
    if t == -1 or t > tonumber(ARGV[2]) then table.insert(bad, k .. ' pttl ' .. t) end
  end
end
return bad";
    let mut found = Vec::new();
    let ttl_ms = ttl.as_millis() as u64;
    while !stop.load(Ordering::SeqCst) {
        for (i, addr) in cluster.addrs().iter().enumerate() {
            let bad: Option<Vec<String>> = direct_query(*addr, Duration::from_millis(50), |c| {
                redis::cmd("EVAL")
                    .arg(SCRIPT)
                    .arg(0)
                    .arg(format!("{KEY_PREFIX}*"))
                    .arg(ttl_ms)
                    .query(c)
            });
            for key in bad.unwrap_or_default() {
                found.push(format!("master {i}: {key}"));
            }
        }
        std::thread::sleep(MONITOR_EVERY);
    }
    found
}

impl Shared {
    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub(super) fn redlock(&self) -> Redlock {
        // The configuration is fixed and valid: a failure here is a bug in the scenario.
        match self.setup.redlock(&self.urls) {
            Ok(rl) => rl,
            Err(e) => panic!("invalid chaos client configuration: {e}"),
        }
    }

    /// A client for client task `client`, over its own proxies when it has some; an invalid
    /// configuration is returned, not panicked on.
    pub(super) fn redlock_of(&self, client: usize) -> Result<Redlock, Error> {
        self.setup
            .redlock(self.own_urls.get(client).unwrap_or(&self.urls))
    }

    /// Records a successful acquire of `lock` (or, with `read`, of a reader's hold) attempted
    /// from `start` until now, and counts it.
    pub(super) fn acquired(&self, client: usize, start: Instant, lock: &Lock, read: bool) {
        let end = Instant::now();
        self.history.record(if read {
            Op::read_acquired(client, start, end, lock)
        } else {
            Op::acquired(client, start, end, lock)
        });
        self.successes.fetch_add(1, Ordering::SeqCst);
        mutex::lock(&self.latencies).push(end - start);
    }

    /// Acquires `resource` with the library's retry policy and records the attempt.
    async fn acquire(
        &self,
        rl: &Redlock,
        client: usize,
        resource: &str,
        once: bool,
    ) -> Option<Lock> {
        let start = Instant::now();
        let result = if once {
            rl.try_acquire(resource, self.setup.ttl).await
        } else {
            rl.acquire(resource, self.setup.ttl).await
        };
        let end = Instant::now();
        match result {
            Ok(lock) => {
                self.history.record(Op::acquired(client, start, end, &lock));
                self.successes.fetch_add(1, Ordering::SeqCst);
                mutex::lock(&self.latencies).push(end - start);
                Some(lock)
            }
            Err(e) => {
                self.history
                    .record(Op::acquire_failed(client, resource, start, end, e));
                None
            }
        }
    }

    /// Acquires `resource` like [`acquire`](Self::acquire), in a task of its own that is aborted
    /// (the waiter dropped mid-wait, as its process would take it down) once its waiter heads the
    /// line of `resource` on a quorum of masters. `None` when it was aborted or failed.
    ///
    /// The waiter is told apart from the others by its order in the line: its arrival in
    /// milliseconds (read just before the library reads it) times 1000, plus a tiebreak below
    /// 1000. It is looked for only once its client has met contention and started a second
    /// attempt, the one that takes its place in line; if another waiter's order falls in the
    /// same two milliseconds, the probe sees two candidates and does not abort.
    async fn acquire_or_die_at_the_head(
        self: &Arc<Self>,
        rl: &Redlock,
        client: usize,
        resource: &str,
    ) -> Option<Lock> {
        self.watched_waiters.fetch_add(1, Ordering::SeqCst);
        let before = rl.stats();
        let (arrival, arrived) = oneshot::channel();
        let mut task = tokio::spawn({
            let (shared, rl, resource) = (Arc::clone(self), rl.clone(), resource.to_owned());
            async move {
                let _ = arrival.send(SystemTime::now());
                shared.acquire(&rl, client, &resource, false).await
            }
        });
        let arrived_ms = match arrived.await {
            Ok(at) => at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Err(_) => 0,
        };
        let (lo, hi) = (arrived_ms * 1000, (arrived_ms + 2) * 1000 - 1);
        let timeout = self
            .setup
            .acquire_timeout
            .unwrap_or(quorumlock::DEFAULT_ACQUIRE_TIMEOUT);
        let watch_until = Instant::now() + timeout;
        let watch = async {
            while Instant::now() < watch_until {
                let now = rl.stats();
                let in_line =
                    now.contended > before.contended && now.attempts >= before.attempts + 2;
                if in_line {
                    if let Some(id) = self.probe.head_in(resource, lo, hi).await {
                        return Some(id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            None
        };
        let mut killed = None;
        // An acquire that ends goes on to its critical section at once, not after the probe.
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            head = watch => {
                if let Some(id) = head {
                    task.abort();
                    killed = Some((id, Instant::now()));
                }
                (&mut task).await
            }
        };
        match joined {
            Ok(lock) => lock,
            Err(e) if e.is_cancelled() => {
                if let Some((id, at)) = killed {
                    let follow = line::follow_killed_head(
                        Arc::clone(&self.probe),
                        resource.to_owned(),
                        id,
                        at,
                        self.setup.clone(),
                    );
                    mutex::lock(&self.head_kills).push(tokio::spawn(follow));
                }
                None
            }
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    async fn extend(&self, client: usize, lock: &mut Lock) -> Result<(), Error> {
        let start = Instant::now();
        let result = lock.extend(self.setup.ttl).await;
        self.history.record(Op {
            client,
            resource: lock.resource().to_owned(),
            token: lock.token().expose().to_owned(),
            kind: OpKind::Extend,
            start,
            end: Instant::now(),
            outcome: match &result {
                Ok(()) => Outcome::Ok {
                    valid_until: Some(lock.deadline()),
                },
                Err(e) => Outcome::Failed {
                    reason: e.to_string(),
                },
            },
            fence: lock.fencing_token(),
        });
        result
    }

    async fn release(&self, client: usize, lock: Lock) -> Result<quorumlock::Released, Error> {
        let releasing = Releasing::start(&lock);
        let result = lock.release().await;
        self.history.record(releasing.finished(client, &result));
        result
    }

    /// The critical section: enter the witness, read–sleep–write the registers while the lease
    /// has a safety margin left, maybe extend, leave before the deadline.
    async fn critical_section(&self, client: usize, r: usize, lock: &mut Lock, rng: &mut StdRng) {
        let margin = self.setup.ttl / 10;
        let guard = self.witnesses[r].enter(client);
        let value = self.registers[r].read();
        let nap = rng.random_range(Duration::ZERO..=self.setup.critical_section);
        tokio::time::sleep(nap).await;
        if rng.random_bool(self.setup.extend_chance) && lock.remaining() > margin {
            let _ = self.extend(client, lock).await;
        }
        if lock.remaining() > margin {
            self.registers[r].write(value + 1);
            if let (Some(fenced), Some(fence)) = (self.fenced.get(r), lock.fencing_token()) {
                let _ = fenced.write(fence, client);
            }
        }
        drop(guard);
    }
}

/// A client that picks a random resource, acquires it (with retries), does its critical section
/// and releases, until the run stops; sometimes it goes stale or dies, as the setup says.
async fn free_client(shared: Arc<Shared>, client: usize, mut rng: StdRng) {
    let mut rl = shared.redlock();
    while !shared.stopped() {
        let r = rng.random_range(0..shared.setup.resources);
        let resource = Setup::resource(r);
        let acquired = if rng.random_bool(shared.setup.head_kill_chance) {
            shared
                .acquire_or_die_at_the_head(&rl, client, &resource)
                .await
        } else {
            shared.acquire(&rl, client, &resource, false).await
        };
        let Some(mut lock) = acquired else {
            continue;
        };
        shared
            .critical_section(client, r, &mut lock, &mut rng)
            .await;

        if rng.random_bool(shared.setup.crash_chance) {
            // The holder's process dies: nothing is released, its connections go away, and a
            // new process takes its place and wants the same resource at once.
            mutex::lock(&shared.kills).push((resource.clone(), Instant::now()));
            std::mem::forget(lock);
            mutex::lock(&shared.counted).add(&rl);
            rl = shared.redlock();
            while !shared.stopped() {
                if let Some(mut lock) = shared.acquire(&rl, client, &resource, false).await {
                    shared
                        .critical_section(client, r, &mut lock, &mut rng)
                        .await;
                    let _ = shared.release(client, lock).await;
                    break;
                }
            }
            continue;
        }

        if rng.random_bool(shared.setup.stale_chance) {
            // Keep the lock well past its lease (another client may take it meanwhile), then
            // try to extend and release it: neither may touch a newer holder's keys.
            let overdue = lock.deadline() + shared.setup.ttl / 2;
            tokio::time::sleep_until(overdue.into()).await;
            let refused = shared.extend(client, &mut lock).await.is_err();
            let released = shared.release(client, lock).await;
            let mut stale = mutex::lock(&shared.stale);
            stale.holders += 1;
            stale.extends_refused += usize::from(refused);
            if let Ok(released) = released {
                stale.releases += 1;
                stale.keys_deleted += released.deleted;
            }
            continue;
        }

        let _ = shared.release(client, lock).await;
    }
    mutex::lock(&shared.counted).add(&rl);
}

/// A client of a group that starts every round at the same instant on one resource: up to
/// `round_attempts` single attempts, a jittered pause between them, until it wins once.
#[allow(clippy::too_many_arguments)]
async fn simultaneous_client(
    shared: Arc<Shared>,
    client: usize,
    r: usize,
    leader: bool,
    barrier: Arc<Barrier>,
    go_on: Arc<AtomicBool>,
    round_wins: Arc<Mutex<Vec<(usize, u32)>>>,
    rounds: Arc<Mutex<Vec<Option<u32>>>>,
    mut rng: StdRng,
) {
    let rl = shared.redlock();
    let resource = Setup::resource(r);
    loop {
        // The leader decides for the whole group whether another round runs, so that nobody
        // waits at the barrier alone.
        if leader {
            go_on.store(!shared.stopped(), Ordering::SeqCst);
        }
        barrier.wait().await;
        if !go_on.load(Ordering::SeqCst) {
            return;
        }
        let mut won_at = None;
        for attempt in 1..=shared.setup.round_attempts {
            if let Some(mut lock) = shared.acquire(&rl, client, &resource, true).await {
                shared
                    .critical_section(client, r, &mut lock, &mut rng)
                    .await;
                let _ = shared.release(client, lock).await;
                won_at = Some(attempt);
                break;
            }
            let low = shared
                .setup
                .retry_delay
                .saturating_sub(shared.setup.retry_jitter);
            let high = shared.setup.retry_delay + shared.setup.retry_jitter;
            tokio::time::sleep(rng.random_range(low..=high)).await;
        }
        if let Some(attempt) = won_at {
            mutex::lock(&round_wins).push((client, attempt));
        }
        barrier.wait().await;
        if leader {
            let wins = std::mem::take(&mut *mutex::lock(&round_wins));
            let first = wins.iter().map(|(_, a)| *a).min();
            mutex::lock(&rounds).push(first);
        }
    }
}

//! Failover evidence: why Redlock runs over N independent masters rather than one master with a
//! replica, and where the guarantee of N masters ends.
//!
//! Every master here has an asynchronous replica that replicates through a [`FaultProxy`] (the
//! replication link), and clients reach the master through another proxy (the "virtual IP").
//! A failover is: the replica has not received the lock yet (its replication link is frozen),
//! the master dies, the replica is promoted (`REPLICAOF NO ONE`) and the virtual IP moves to it
//! ([`FaultProxy::retarget`]). The interleaving is driven step by step, so each case comes out
//! the same on every run.
//!
//! # The rule
//!
//! With N masters, quorum q = ⌊N/2⌋ + 1, a holder whose lock landed on k masters, and f of those
//! k masters failing over to replicas that lack the key (or restarting empty), another client can
//! find q masters without the key — and so a **second holder is possible — once f ≥ q − N + k**.
//! The masters without the key are the N − k the holder never locked plus the f that lost it, and
//! a second client needs q of them: N − k + f ≥ q. A holder on all N masters therefore tolerates
//! f = q − 1 lost keys (2 of 5); a holder on only q masters tolerates none. A single master with a
//! replica (N = k = q = 1) loses the lock on its first failover.
//!
//! [`run_failover_demo`] shows four cases: one master + replica (violation), five masters with
//! the lock on all five and one, then two, failovers (no second holder), and the boundary: the
//! lock on three of five and one failover (violation). It prints nothing; `quorumlock demo
//! --failover` and the tests present the [`FailoverReport`].

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quorumlock::{Lock, Redlock};

use crate::{FaultProxy, History, Op, RedisServer, RedisServerBuilder};

/// The lock TTL of the demo: long enough that the first holder's lease is still open when the
/// second client tries.
const TTL: Duration = Duration::from_secs(10);

/// How long a replica may take to finish its initial sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// One failover case and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailoverCase {
    /// What the case shows.
    pub description: String,
    /// Masters the clients use (N).
    pub masters: usize,
    /// Grants a lock needs (q).
    pub quorum: usize,
    /// Masters that held the first holder's key before the failovers (k).
    pub locked: usize,
    /// Of those, masters that failed over to a replica without the key (f).
    pub failed_over: usize,
    /// Whether a second client acquired the lock while the first holder's validity was open.
    pub second_holder: bool,
    /// Overlapping validity windows the history checker found.
    pub overlaps: usize,
    /// The second client's error, when it was refused.
    pub second_outcome: String,
}

impl FailoverCase {
    /// The rule's prediction: a second holder is possible once f ≥ q − N + k.
    pub fn predicted_violation(&self) -> bool {
        self.failed_over + self.masters >= self.quorum + self.locked
    }

    /// Whether what happened is what the rule predicts, and the checker agrees.
    pub fn as_predicted(&self) -> bool {
        self.second_holder == self.predicted_violation()
            && (self.overlaps > 0) == self.second_holder
    }
}

impl fmt::Display for FailoverCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: N={} q={} k={} f={} (f ≥ q−N+k = {}: {}) → second holder: {}, overlaps found: {}; {}",
            self.description,
            self.masters,
            self.quorum,
            self.locked,
            self.failed_over,
            self.quorum as i64 - self.masters as i64 + self.locked as i64,
            if self.predicted_violation() { "yes" } else { "no" },
            if self.second_holder { "YES" } else { "no" },
            self.overlaps,
            self.second_outcome
        )
    }
}

/// Every case of the failover demo.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FailoverReport {
    /// The cases, in the order they ran.
    pub cases: Vec<FailoverCase>,
}

impl FailoverReport {
    /// Whether every case came out as the rule predicts.
    pub fn as_predicted(&self) -> bool {
        !self.cases.is_empty() && self.cases.iter().all(FailoverCase::as_predicted)
    }
}

impl fmt::Display for FailoverReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            writeln!(f, "{case}")?;
        }
        Ok(())
    }
}

/// Runs every case: [`single_master_failover`] then [`independent_masters_failover`].
///
/// # Errors
///
/// When a server or proxy cannot be started, a replica does not sync, or a failover step fails.
pub async fn run_failover_demo() -> io::Result<FailoverReport> {
    let mut cases = single_master_failover().await?.cases;
    cases.extend(independent_masters_failover().await?.cases);
    Ok(FailoverReport { cases })
}

/// One master with an asynchronous replica: the lock is acquired on the master, the master dies
/// before the replica received it, the replica is promoted, and a second client acquires the
/// same lock while the first holder's lease is still open.
///
/// # Errors
///
/// As [`run_failover_demo`].
pub async fn single_master_failover() -> io::Result<FailoverReport> {
    let pair = blocking(Pair::start).await?;
    let history = History::new();
    let rl = |urls: Vec<String>| client(urls);
    let first = rl(vec![pair.vip.url()])?;
    let second = rl(vec![pair.vip.url()])?;

    pair.freeze_replication();
    let held = acquire(&first, 0, "orders:42", &history).await?;
    let pair = blocking(move || {
        let mut pair = pair;
        pair.fail_over().map(|()| pair)
    })
    .await?;
    let outcome = try_second(&second, "orders:42", &history, &held).await;
    drop(pair);
    Ok(FailoverReport {
        cases: vec![case(
            "one master + async replica, lock on the master, failover",
            1,
            1,
            1,
            &history,
            outcome,
        )],
    })
}

/// Five independent masters, each with its own asynchronous replica. A lock held on all five
/// survives one and then two failovers (no second holder); a lock held on only three of five
/// does not survive one (the boundary of the rule).
///
/// # Errors
///
/// As [`run_failover_demo`].
pub async fn independent_masters_failover() -> io::Result<FailoverReport> {
    let mut pairs = blocking(|| {
        std::thread::scope(|scope| {
            let starting: Vec<_> = (0..5).map(|_| scope.spawn(Pair::start)).collect();
            starting
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a start panicked")))
                })
                .collect::<io::Result<Vec<_>>>()
        })
    })
    .await?;
    let urls: Vec<String> = pairs.iter().map(|p| p.vip.url()).collect();
    let mut cases = Vec::new();

    // The lock on all five masters; the replicas never get it.
    for pair in &pairs {
        pair.freeze_replication();
    }
    let history = History::new();
    let first = client(urls.clone())?;
    let held = acquire(&first, 0, "orders:all", &history).await?;
    let token = held.lock.token().expose().to_owned();
    let locked = wait_for_holders(&pairs, "orders:all", &token, 5).await;
    for failed_over in 1..=2 {
        pairs = fail_over(pairs, failed_over - 1).await?;
        let second = client(urls.clone())?;
        let outcome = try_second(&second, "orders:all", &history, &held).await;
        cases.push(case(
            &format!("five masters, lock on {locked}, {failed_over} failover(s)"),
            5,
            locked,
            failed_over,
            &history,
            outcome,
        ));
    }

    // The boundary: the lock on exactly three masters (the two others unreachable for the
    // holder), then one of the three fails over.
    let history = History::new();
    let holder = client(urls.clone())?;
    for pair in &pairs[3..] {
        pair.vip.blackhole();
    }
    let held = acquire(&holder, 0, "orders:three", &history).await?;
    for pair in &pairs[3..] {
        // Never forwards the bytes swallowed mid-stream: those connections are reset.
        pair.vip.heal();
    }
    let token = held.lock.token().expose().to_owned();
    let locked = wait_for_holders(&pairs, "orders:three", &token, 3).await;
    pairs = fail_over(pairs, 2).await?;
    let second = client(urls)?;
    let outcome = try_second(&second, "orders:three", &history, &held).await;
    cases.push(case(
        &format!("five masters, lock on {locked} only, 1 failover"),
        5,
        locked,
        1,
        &history,
        outcome,
    ));
    drop(pairs);
    Ok(FailoverReport { cases })
}

/// A master and its asynchronous replica, replicating through a proxy, and the proxy clients
/// reach the master through (a virtual IP): the single-master topology whose failover loses
/// what the replica had not received. Give clients [`vip`](Self::vip)'s URL.
#[derive(Debug)]
pub struct Pair {
    /// The master (after [`rebuild`](Self::rebuild), the server promoted last).
    pub master: RedisServer,
    /// Its replica.
    pub replica: RedisServer,
    /// The replication link: the replica connects to the master through it.
    pub link: FaultProxy,
    /// The virtual IP clients connect to.
    pub vip: FaultProxy,
}

impl Pair {
    /// Starts a master and a replica, and waits until the replica has synced.
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`] and [`FaultProxy::start`]; [`io::ErrorKind::TimedOut`]
    /// when the replica has not synced within 10 s.
    pub fn start() -> io::Result<Pair> {
        // Both start a replica's full sync at once (Redis waits 5 s by default for more
        // replicas): the replica becomes a master at its failover. Both time a blocked `WAIT`
        // out within 10 ms (`hz 100`), so that an unconfirmed grant is reported in time.
        let server = || {
            RedisServerBuilder::new()
                .arg("--repl-diskless-sync-delay")
                .arg("0")
                .arg("--hz")
                .arg("100")
        };
        let master = server().spawn()?;
        let link = FaultProxy::start(master.addr())?;
        let replica = server()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(link.addr().port().to_string())
            .spawn()?;
        let vip = FaultProxy::start(master.addr())?;
        let pair = Pair {
            master,
            replica,
            link,
            vip,
        };
        pair.wait_synced()?;
        Ok(pair)
    }

    /// Waits until the replica's link to the master is up and the master counts it.
    fn wait_synced(&self) -> io::Result<()> {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        while !(info(self.replica.addr(), "replication").contains("master_link_status:up")
            && info(self.master.addr(), "replication").contains("connected_slaves:1"))
        {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("replica did not sync; log:\n{}", self.replica.log()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The replica stops receiving: the replication stream is swallowed from now on.
    pub fn freeze_replication(&self) {
        self.link.blackhole();
    }

    /// The master dies, the replica is promoted and the virtual IP moves to it.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::kill`]; an error when the replica refuses `REPLICAOF NO ONE`.
    pub fn fail_over(&mut self) -> io::Result<()> {
        self.master.kill()?;
        let promoted: Option<String> =
            crate::direct::query(self.replica.addr(), Duration::from_secs(2), |c| {
                redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(c)
            });
        if promoted.is_none() {
            return Err(io::Error::other("REPLICAOF NO ONE failed on the replica"));
        }
        self.vip.retarget(self.replica.addr());
        self.vip.reset();
        Ok(())
    }

    /// After [`fail_over`](Self::fail_over): the dead master comes back empty as the replica
    /// of the promoted one, through the replication link (healed), and the two swap roles, so
    /// that the pair can fail over again.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::restart`]; an error when the restarted master refuses `REPLICAOF`;
    /// [`io::ErrorKind::TimedOut`] when it has not synced within 10 s.
    pub fn rebuild(&mut self) -> io::Result<()> {
        self.link.retarget(self.replica.addr());
        self.link.heal();
        self.master.restart()?;
        let following: Option<String> =
            crate::direct::query(self.master.addr(), Duration::from_secs(2), |c| {
                redis::cmd("REPLICAOF")
                    .arg("127.0.0.1")
                    .arg(self.link.addr().port())
                    .query(c)
            });
        if following.is_none() {
            return Err(io::Error::other("REPLICAOF failed on the restarted master"));
        }
        std::mem::swap(&mut self.master, &mut self.replica);
        self.wait_synced()
    }

    /// The server the virtual IP points at now.
    fn current(&self) -> SocketAddr {
        if self.master.is_running() {
            self.master.addr()
        } else {
            self.replica.addr()
        }
    }
}

async fn fail_over(pairs: Vec<Pair>, i: usize) -> io::Result<Vec<Pair>> {
    blocking(move || {
        let mut pairs = pairs;
        pairs[i].fail_over().map(|()| pairs)
    })
    .await
}

fn client(urls: Vec<String>) -> io::Result<Redlock> {
    Redlock::builder(urls)
        .node_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(500))
        .retry_count(2)
        .retry_delay(Duration::from_millis(50))
        .build()
        .map_err(io::Error::other)
}

/// A held lock and when its holder's acquire returned.
struct Held {
    lock: Lock,
}

async fn acquire(
    rl: &Redlock,
    client: usize,
    resource: &str,
    history: &History,
) -> io::Result<Held> {
    let start = Instant::now();
    let lock = rl.acquire(resource, TTL).await.map_err(io::Error::other)?;
    history.record(Op::acquired(client, start, Instant::now(), &lock));
    Ok(Held { lock })
}

/// What the second client got: `Ok` if it acquired while the first lease was open.
async fn try_second(
    rl: &Redlock,
    resource: &str,
    history: &History,
    first: &Held,
) -> Result<(), String> {
    let start = Instant::now();
    // One attempt, while the first lease is open: `acquire` would wait in line until the first
    // holder's keys expire, and then take the lock legitimately.
    match rl.try_acquire(resource, TTL).await {
        Ok(lock) => {
            let end = Instant::now();
            history.record(Op::acquired(1, start, end, &lock));
            let open = first.lock.deadline() > end;
            // Keep the second lock until the end of the case: both are held at once.
            std::mem::forget(lock);
            if open {
                Ok(())
            } else {
                Err("acquired, but only after the first lease had ended".to_owned())
            }
        }
        Err(e) => {
            history.record(Op::acquire_failed(1, resource, start, Instant::now(), &e));
            Err(format!("second client refused: {e}"))
        }
    }
}

fn case(
    description: &str,
    masters: usize,
    locked: usize,
    failed_over: usize,
    history: &History,
    outcome: Result<(), String>,
) -> FailoverCase {
    let overlaps = history
        .check()
        .violations
        .iter()
        .filter(|v| matches!(v, crate::Violation::Overlap { .. }))
        .count();
    FailoverCase {
        description: description.to_owned(),
        masters,
        quorum: masters / 2 + 1,
        locked,
        failed_over,
        second_holder: outcome.is_ok(),
        overlaps,
        second_outcome: match outcome {
            Ok(()) => "second client acquired while the first still held it".to_owned(),
            Err(e) => e,
        },
    }
}

/// Waits (up to a second) until `want` masters hold `token` for `resource` (in its lock key,
/// the resource's name: the client has no key prefix), and returns how many do.
async fn wait_for_holders(pairs: &[Pair], resource: &str, token: &str, want: usize) -> usize {
    let key = quorumlock::resource_key("", resource);
    let addrs: Vec<SocketAddr> = pairs.iter().map(Pair::current).collect();
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let (key, token, addrs) = (key.to_owned(), token.to_owned(), addrs.clone());
        let holding = tokio::task::spawn_blocking(move || {
            addrs
                .iter()
                .filter(|a| {
                    crate::direct::query(**a, Duration::from_millis(500), |c| {
                        redis::cmd("GET").arg(&key).query::<Option<String>>(c)
                    })
                    .flatten()
                    .as_deref()
                        == Some(token.as_str())
                })
                .count()
        })
        .await
        .unwrap_or(0);
        if holding >= want || Instant::now() >= deadline {
            return holding;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn info(addr: SocketAddr, section: &str) -> String {
    crate::direct::query(addr, Duration::from_millis(500), |c| {
        redis::cmd("INFO").arg(section).query(c)
    })
    .unwrap_or_default()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(io::Error::other)?
}

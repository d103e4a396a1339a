//! **The unsafe read-write lock design, kept only as a negative control. Never use it.**
//!
//! [`NaiveRwLock`] spreads a read-write lock over N independent masters the tempting way: a
//! reader is granted on each master where no writer holds the key, a writer takes the key with
//! `SET NX` on each master, and either holds once a quorum of the configured masters granted it.
//! What it gets wrong is where the writer looks for readers: on **one** master (the first it is
//! configured with), not on each master it takes. Quorums of a reader and a writer share a
//! master, but not necessarily that one: with masters A, B and C, a reader that reached only
//! {B, C} is invisible on A, and the writer is granted on all three while the reader holds.
//!
//! It is here so that the history checker
//! ([`check_rw_exclusion`](quorumlock_testkit::history::check_rw_exclusion)) can be shown to catch that
//! counterexample against real masters (`tests/chaos/rwlock_control.rs`), beside the library's
//! [`RwLock`](quorumlock::RwLock), whose writer looks for live readers on every master it takes
//! and which refuses the writer under the same reachability.
//!
//! Each master keeps the readers in a sorted set, `<name>:readers`, each token scored by the
//! instant (by that master's clock) its hold lapses; the writer holds `<name>` itself.

use crate::naive_masters;
use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Script;

/// On one master: add the reader unless a writer holds the key.
/// KEYS[1] the writer's key, KEYS[2] the readers; ARGV[1] the token, ARGV[2] the TTL in ms.
/// 1 when granted, 0 when a writer holds it.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1",
    )
});

/// On one master: how many readers' holds are live. KEYS[1] the readers.
static LIVE_READERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')",
    )
});

/// On one master: delete the writer's key if it still holds this token.
/// KEYS[1] the writer's key; ARGV[1] the token. 1 when deleted.
static RELEASE_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0",
    )
});

/// The naive, **unsafe** read-write lock: a writer that looks for readers on one master only.
/// See the [module documentation](self) for why a writer and a reader can both hold it. A
/// negative control only.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock_verify::naive_rwlock::NaiveRwLock;
///
/// # async fn run(urls: Vec<String>) {
/// let naive = NaiveRwLock::connect(&urls, "catalog", Duration::from_millis(100)).await;
/// if let Ok(hold) = naive.try_write(Duration::from_secs(10)).await {
///     println!("granted by masters {:?}", hold.granted());
///     naive.release(&hold).await;
/// }
/// # }
/// ```
pub struct NaiveRwLock {
    name: String,
    node_timeout: Duration,
    /// One connection per configured master; `None` where it could not be opened.
    masters: Vec<Option<MultiplexedConnection>>,
}

impl fmt::Debug for NaiveRwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reachable = naive_masters::reachable(&self.masters);
        f.debug_struct("NaiveRwLock")
            .field("name", &self.name)
            .field("masters", &self.masters.len())
            .field("reachable", &reachable)
            .finish()
    }
}

/// Which side of a [`NaiveRwLock`] a hold is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NaiveAccess {
    /// A reader.
    Read,
    /// A writer.
    Write,
}

/// A hold of a [`NaiveRwLock`]: its side, its token and the masters that granted it.
#[derive(Clone)]
pub struct NaiveHold {
    access: NaiveAccess,
    token: String,
    granted: Vec<usize>,
    deadline: Instant,
}

impl fmt::Debug for NaiveHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NaiveHold")
            .field("access", &self.access)
            .field("granted", &self.granted)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl NaiveHold {
    /// Reader or writer.
    pub fn access(&self) -> NaiveAccess {
        self.access
    }

    /// The holder's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The masters (by index in the configured list) that granted this hold.
    pub fn granted(&self) -> &[usize] {
        &self.granted
    }

    /// When the hold stops being valid: the attempt's start plus the TTL, less the drift.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Why a [`NaiveRwLock`] refused a hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NaiveRwRefused {
    /// The one master the writer looks at shows live readers.
    Readers {
        /// That master.
        master: usize,
        /// How many.
        readers: u64,
    },
    /// Fewer than a quorum of masters granted in time (the grants were taken back).
    NoQuorum {
        /// The masters that granted.
        granted: Vec<usize>,
        /// The masters needed.
        quorum: usize,
    },
}

impl fmt::Display for NaiveRwRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NaiveRwRefused::Readers { master, readers } => {
                write!(
                    f,
                    "naive writer refused: {readers} live readers on master {master}"
                )
            }
            NaiveRwRefused::NoQuorum { granted, quorum } => write!(
                f,
                "naive hold refused: {}/{quorum} masters granted ({granted:?})",
                granted.len()
            ),
        }
    }
}

impl std::error::Error for NaiveRwRefused {}

impl NaiveRwLock {
    /// A read-write lock `name` over the masters at `urls`, connecting to each within
    /// `node_timeout`. A master that cannot be reached now is never asked, but still counts
    /// towards the quorum: the quorum is a majority of the configured masters.
    pub async fn connect(urls: &[String], name: &str, node_timeout: Duration) -> NaiveRwLock {
        let masters = naive_masters::connect(urls, node_timeout).await;
        NaiveRwLock {
            name: name.to_owned(),
            node_timeout,
            masters,
        }
    }

    /// The key the writer holds.
    pub fn key(&self) -> String {
        self.name.clone()
    }

    /// The key each master keeps the readers in.
    pub fn readers_key(&self) -> String {
        format!("{}:readers", self.name)
    }

    /// A majority of the configured masters.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// One reader's attempt: every reachable master where no writer holds the key grants; a
    /// hold when a quorum did with validity left, else the grants are taken back.
    ///
    /// # Errors
    ///
    /// [`NaiveRwRefused::NoQuorum`] when fewer than a quorum granted in time.
    pub async fn try_read(&self, ttl: Duration) -> Result<NaiveHold, NaiveRwRefused> {
        let start = Instant::now();
        let token = format!("{:032x}", rand::random::<u128>());
        let (key, readers) = (self.key(), self.readers_key());
        let ttl_ms = ttl.as_millis().to_string();
        let answers = futures::future::join_all(self.masters.iter().map(|master| {
            let (key, readers, token, ttl_ms) = (&key, &readers, &token, &ttl_ms);
            async move {
                let mut connection = master.clone()?;
                let mut call = READ.prepare_invoke();
                call.key(key).key(readers).arg(token).arg(ttl_ms);
                let granted: i64 =
                    tokio::time::timeout(self.node_timeout, call.invoke_async(&mut connection))
                        .await
                        .ok()?
                        .ok()?;
                Some(granted == 1)
            }
        }))
        .await;
        self.settle(NaiveAccess::Read, token, &answers, start, ttl)
            .await
    }

    /// One writer's attempt: look for live readers on the first reachable master only, then
    /// `SET NX` the key on every reachable master; a hold when a quorum granted with validity
    /// left, else the grants are taken back.
    ///
    /// # Errors
    ///
    /// [`NaiveRwRefused::Readers`] when that one master shows live readers;
    /// [`NaiveRwRefused::NoQuorum`] when fewer than a quorum granted in time.
    pub async fn try_write(&self, ttl: Duration) -> Result<NaiveHold, NaiveRwRefused> {
        let start = Instant::now();
        let token = format!("{:032x}", rand::random::<u128>());
        if let Some((master, connection)) = self
            .masters
            .iter()
            .enumerate()
            .find_map(|(i, m)| m.clone().map(|c| (i, c)))
        {
            let mut connection = connection;
            let mut call = LIVE_READERS.prepare_invoke();
            call.key(self.readers_key());
            let live = tokio::time::timeout(self.node_timeout, call.invoke_async(&mut connection))
                .await
                .ok()
                .and_then(Result::ok);
            if let Some(readers @ 1..) = live {
                return Err(NaiveRwRefused::Readers { master, readers });
            }
        }
        let key = self.key();
        let ttl_ms = ttl.as_millis() as u64;
        let answers = futures::future::join_all(self.masters.iter().map(|master| {
            let (key, token) = (&key, &token);
            async move {
                let mut connection = master.clone()?;
                let mut set = redis::cmd("SET");
                set.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                let set = set.query_async::<Option<String>>(&mut connection);
                let reply = tokio::time::timeout(self.node_timeout, set)
                    .await
                    .ok()?
                    .ok()?;
                Some(reply.is_some())
            }
        }))
        .await;
        self.settle(NaiveAccess::Write, token, &answers, start, ttl)
            .await
    }

    /// A hold when a quorum of `answers` granted in time; else the grants are taken back.
    async fn settle(
        &self,
        access: NaiveAccess,
        token: String,
        answers: &[Option<bool>],
        start: Instant,
        ttl: Duration,
    ) -> Result<NaiveHold, NaiveRwRefused> {
        let granted: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i] == Some(true))
            .collect();
        let deadline = naive_masters::deadline(start, ttl);
        let hold = NaiveHold {
            access,
            token,
            granted,
            deadline,
        };
        if hold.granted.len() >= self.quorum() && Instant::now() < deadline {
            return Ok(hold);
        }
        self.release(&hold).await;
        Err(NaiveRwRefused::NoQuorum {
            granted: hold.granted,
            quorum: self.quorum(),
        })
    }

    /// Ends the hold on every reachable master.
    pub async fn release(&self, hold: &NaiveHold) {
        let (key, readers) = (self.key(), self.readers_key());
        futures::future::join_all(self.masters.iter().flatten().map(|master| {
            let mut connection = master.clone();
            let (key, readers) = (&key, &readers);
            async move {
                let released = async {
                    match hold.access {
                        NaiveAccess::Read => {
                            let _: redis::RedisResult<i64> = redis::cmd("ZREM")
                                .arg(readers)
                                .arg(&hold.token)
                                .query_async(&mut connection)
                                .await;
                        }
                        NaiveAccess::Write => {
                            let mut call = RELEASE_WRITE.prepare_invoke();
                            call.key(key).arg(&hold.token);
                            let _: redis::RedisResult<i64> =
                                call.invoke_async(&mut connection).await;
                        }
                    }
                };
                let _ = tokio::time::timeout(self.node_timeout, released).await;
            }
        }))
        .await;
    }
}

//! **The unsafe semaphore design, kept only as a negative control. Never use it.**
//!
//! [`NaiveSemaphore`] is the tempting way to build a counting semaphore over N independent
//! masters: every master counts the semaphore's holders, grants a permit while its count is below
//! K, and a client holds a permit once a quorum of the configured masters granted it. It looks
//! like Redlock, and it does not work: quorums of *different* holders need not overlap on a full
//! master. With K = 2 on masters A, B and C, holder 1 is counted on {A, B} and holder 2 on
//! {B, C}; B is full, but A and C count one holder each, so holder 3 is granted on {A, C}, a
//! quorum: three holders of two permits, while every master's own count stays within K.
//!
//! It is here so that the history checker
//! ([`check_max_holders`](quorumlock_testkit::history::check_max_holders)) can be shown to catch that
//! counterexample against real masters (`tests/chaos/semaphore_control.rs`), beside the library's
//! [`Semaphore`](quorumlock::Semaphore), whose K slots are each an ordinary quorum lock and which
//! refuses the third holder under the same reachability.
//!
//! Each master keeps the holders in a sorted set, `<name>:holders`, each token scored by the
//! instant (by that master's clock) its permit lapses.

use crate::naive_masters;
use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Script;

/// On one master: drop the lapsed holders, then add the token if fewer than the permits remain.
/// KEYS[1] the holders; ARGV[1] the token, ARGV[2] the TTL in ms, ARGV[3] the permits.
/// 1 when granted, 0 when full.
static GRANT_IF_ROOM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0",
    )
});

/// The naive, **unsafe** counting semaphore: a count of holders per master, a permit granted at
/// a quorum of masters with room. See the [module documentation](self) for why it admits more
/// than K holders. A negative control only.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock_verify::naive_semaphore::NaiveSemaphore;
///
/// # async fn run(urls: Vec<String>) {
/// let naive = NaiveSemaphore::connect(&urls, "jobs", 2, Duration::from_millis(100)).await;
/// if let Ok(permit) = naive.try_acquire(Duration::from_secs(10)).await {
///     println!("granted by masters {:?}", permit.granted());
///     naive.release(&permit).await;
/// }
/// # }
/// ```
pub struct NaiveSemaphore {
    name: String,
    permits: u32,
    node_timeout: Duration,
    /// One connection per configured master; `None` where it could not be opened.
    masters: Vec<Option<MultiplexedConnection>>,
}

impl fmt::Debug for NaiveSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reachable = naive_masters::reachable(&self.masters);
        f.debug_struct("NaiveSemaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .field("masters", &self.masters.len())
            .field("reachable", &reachable)
            .finish()
    }
}

/// A permit of a [`NaiveSemaphore`]: its token and the masters that granted it.
#[derive(Clone)]
pub struct NaivePermit {
    token: String,
    granted: Vec<usize>,
    deadline: Instant,
}

impl fmt::Debug for NaivePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NaivePermit")
            .field("granted", &self.granted)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl NaivePermit {
    /// The holder's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The masters (by index in the configured list) that counted this holder.
    pub fn granted(&self) -> &[usize] {
        &self.granted
    }

    /// When the permit stops being valid: the attempt's start plus the TTL, less the drift.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Why a [`NaiveSemaphore`] refused a permit: fewer than a quorum of masters had room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NaiveRefused {
    /// The masters that granted (and were rolled back).
    pub granted: Vec<usize>,
    /// The masters needed.
    pub quorum: usize,
}

impl fmt::Display for NaiveRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "naive permit refused: {}/{} masters granted ({:?})",
            self.granted.len(),
            self.quorum,
            self.granted
        )
    }
}

impl std::error::Error for NaiveRefused {}

impl NaiveSemaphore {
    /// A semaphore `name` of `permits` over the masters at `urls`, connecting to each within
    /// `node_timeout`. A master that cannot be reached now is never asked, but still counts
    /// towards the quorum: the quorum is a majority of the configured masters.
    pub async fn connect(
        urls: &[String],
        name: &str,
        permits: u32,
        node_timeout: Duration,
    ) -> NaiveSemaphore {
        let masters = naive_masters::connect(urls, node_timeout).await;
        NaiveSemaphore {
            name: name.to_owned(),
            permits,
            node_timeout,
            masters,
        }
    }

    /// The key each master counts the holders in.
    pub fn key(&self) -> String {
        format!("{}:holders", self.name)
    }

    /// A majority of the configured masters.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// One attempt: every reachable master grants if it has room; a permit when a quorum did
    /// with validity left, else the grants are taken back.
    ///
    /// # Errors
    ///
    /// [`NaiveRefused`] when fewer than a quorum granted in time.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<NaivePermit, NaiveRefused> {
        let start = Instant::now();
        let token = format!("{:032x}", rand::random::<u128>());
        let key = self.key();
        let ttl_ms = ttl.as_millis().to_string();
        let permits = self.permits.to_string();
        let answers = futures::future::join_all(self.masters.iter().map(|master| {
            let (key, token, ttl_ms, permits) = (&key, &token, &ttl_ms, &permits);
            async move {
                let mut connection = master.clone()?;
                let mut call = GRANT_IF_ROOM.prepare_invoke();
                call.key(key).arg(token).arg(ttl_ms).arg(permits);
                let granted: i64 =
                    tokio::time::timeout(self.node_timeout, call.invoke_async(&mut connection))
                        .await
                        .ok()?
                        .ok()?;
                Some(granted == 1)
            }
        }))
        .await;
        let granted: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i] == Some(true))
            .collect();
        let deadline = naive_masters::deadline(start, ttl);
        let permit = NaivePermit {
            token,
            granted,
            deadline,
        };
        if permit.granted.len() >= self.quorum() && Instant::now() < deadline {
            return Ok(permit);
        }
        self.release(&permit).await;
        Err(NaiveRefused {
            granted: permit.granted,
            quorum: self.quorum(),
        })
    }

    /// Takes the holder off every reachable master's count.
    pub async fn release(&self, permit: &NaivePermit) {
        let key = self.key();
        futures::future::join_all(self.masters.iter().flatten().map(|master| {
            let mut connection = master.clone();
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&key).arg(&permit.token);
            async move {
                let removed = zrem.query_async::<i64>(&mut connection);
                let _ = tokio::time::timeout(self.node_timeout, removed).await;
            }
        }))
        .await;
    }
}

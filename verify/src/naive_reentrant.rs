//! **The unsafe reentrant lock design, kept only as a negative control. Never use it.**
//!
//! [`NaiveReentrant`] counts reentrant holds the way a single-Redis lock does (Redisson's
//! `RLock`): the lock is a hash on each master, one field per owner holding its count, `HINCRBY`
//! by one for every hold taken and by minus one for every hold ended, the key deleted when the
//! count reaches zero; a hold is taken or ended once a quorum of the configured masters did it.
//! Over N independent masters the counts drift apart: a master that misses one increment or one
//! decrement (a request lost, a timeout the quorum shrugged off) is off by one from then on. When
//! the owner has ended every hold, a master that missed a decrement still counts one — it keeps
//! the key, for nobody, until it expires — and one that missed an increment reached zero a hold
//! early.
//!
//! It is here so that the leak checker ([`check_left_behind`](quorumlock_testkit::history::check_left_behind))
//! can be shown to catch that drift against real masters (`tests/chaos/reentrant_control.rs`), beside
//! the library's [`ReentrantLock`](quorumlock::ReentrantLock), which counts holds in the client
//! and keeps one key with one token on the masters, released once.

use crate::naive_masters;
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;

/// Take a hold: where the key is free or already counts this owner, count one more and renew
/// the expiry. KEYS[1] the lock; ARGV[1] the owner, ARGV[2] the TTL in ms. The owner's count, or
/// 0 when another owner holds it.
static HOLD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return count
end
return 0",
    )
});

/// End a hold: count one less, deleting the key at zero. KEYS[1] the lock; ARGV[1] the owner,
/// ARGV[2] the TTL in ms. The owner's count left, or -1 when it held nothing here.
static END: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return count",
    )
});

/// The naive, **unsafe** reentrant lock: a hold count per master. See the
/// [module documentation](self) for how the counts drift apart. A negative control only.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock_verify::naive_reentrant::NaiveReentrant;
///
/// # async fn run(urls: Vec<String>) {
/// let naive = NaiveReentrant::connect(&urls, "ledger", Duration::from_millis(100)).await;
/// let ttl = Duration::from_secs(30);
/// if naive.hold("worker-7", ttl).await.is_held() {
///     let _inner = naive.hold("worker-7", ttl).await; // reentry: count 2 on each master
///     naive.end("worker-7", ttl).await;
///     naive.end("worker-7", ttl).await;
/// }
/// # }
/// ```
pub struct NaiveReentrant {
    name: String,
    quorum: usize,
    node_timeout: Duration,
    /// One connection per configured master; `None` where it could not be opened.
    masters: Vec<Option<MultiplexedConnection>>,
}

impl fmt::Debug for NaiveReentrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reachable = naive_masters::reachable(&self.masters);
        f.debug_struct("NaiveReentrant")
            .field("name", &self.name)
            .field("masters", &self.masters.len())
            .field("reachable", &reachable)
            .finish()
    }
}

/// What each master answered to one [`NaiveReentrant`] request: the owner's count there, `None`
/// where it did not answer in time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NaiveCounts {
    /// Per master, in configuration order.
    pub counts: Vec<Option<i64>>,
    quorum: usize,
}

impl NaiveCounts {
    /// For a hold: whether a quorum granted it (counted the owner).
    pub fn is_held(&self) -> bool {
        self.counts
            .iter()
            .filter(|c| matches!(c, Some(1..)))
            .count()
            >= self.quorum
    }

    /// How many masters answered.
    pub fn confirmed(&self) -> usize {
        self.counts.iter().flatten().count()
    }
}

impl NaiveReentrant {
    /// A reentrant lock `name` over the masters at `urls`, connecting to each within
    /// `node_timeout`. A master that cannot be reached now is never asked, but still counts
    /// towards the quorum: the quorum is a majority of the configured masters.
    pub async fn connect(urls: &[String], name: &str, node_timeout: Duration) -> NaiveReentrant {
        let masters = naive_masters::connect(urls, node_timeout).await;
        NaiveReentrant {
            name: name.to_owned(),
            quorum: masters.len() / 2 + 1,
            node_timeout,
            masters,
        }
    }

    /// The key of the lock's hash.
    pub fn key(&self) -> String {
        self.name.clone()
    }

    /// Takes one more hold for `owner` on every reachable master.
    pub async fn hold(&self, owner: &str, ttl: Duration) -> NaiveCounts {
        self.run(&HOLD, owner, ttl).await
    }

    /// Ends one hold of `owner` on every reachable master.
    pub async fn end(&self, owner: &str, ttl: Duration) -> NaiveCounts {
        self.run(&END, owner, ttl).await
    }

    async fn run(&self, script: &Script, owner: &str, ttl: Duration) -> NaiveCounts {
        let key = self.key();
        let ttl_ms = ttl.as_millis() as u64;
        let counts = futures::future::join_all(self.masters.iter().map(|master| {
            let key = &key;
            async move {
                let mut connection = master.clone()?;
                let mut call = script.prepare_invoke();
                call.key(key).arg(owner).arg(ttl_ms);
                tokio::time::timeout(self.node_timeout, call.invoke_async(&mut connection))
                    .await
                    .ok()?
                    .ok()
            }
        }))
        .await;
        NaiveCounts {
            counts,
            quorum: self.quorum,
        }
    }
}

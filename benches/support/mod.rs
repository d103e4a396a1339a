//! What the benchmarks share: the three clients under comparison behind one interface, and small
//! measurement helpers. Percentiles of samples come from `quorumlock_testkit::figures`.
//!
//! * [`Kind::Quorumlock`] — this library, with its default settings.
//! * [`Kind::Rslock`] — the `rslock` crate (the main Rust peer), with its default settings.
//! * [`Kind::Raw`] — the floor: the same `SET NX PX` fan-out and compare-and-delete `EVALSHA`,
//!   sent with the `redis` crate directly on one multiplexed connection per master, waiting for
//!   every reply. No timeouts of its own, no early decision, no background work.
//! * [`Kind::Bare`] — the bare early-quorum client: the same `SET NX PX` and compare-and-delete
//!   `EVALSHA` on the same connections, but it returns at the quorum's reply and lets the other
//!   requests finish in a spawned task, as quorumlock does. What quorumlock's own path (and its
//!   acquire script) costs beyond the wire, measured in the same run.

#![allow(dead_code)] // each bench binary uses its own subset

use std::fmt;
use std::time::Duration;

use futures::future::join_all;
use redis::aio::MultiplexedConnection;

/// The classic compare-and-delete script of the Redlock description, which the raw floor loads
/// once and runs by `EVALSHA`.
pub const RELEASE_LUA: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The TTL of every lock the benchmarks take: long enough that no lock expires during a run.
pub const TTL: Duration = Duration::from_secs(10);

/// Which client a measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Quorumlock,
    Rslock,
    Raw,
    Bare,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Quorumlock, Kind::Rslock, Kind::Raw];
    /// [`ALL`](Kind::ALL) and the bare early-quorum client, the reference of the healthy
    /// cases.
    pub const WITH_BARE: [Kind; 4] = [Kind::Quorumlock, Kind::Rslock, Kind::Raw, Kind::Bare];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Quorumlock => "quorumlock",
            Kind::Rslock => "rslock 0.10.0",
            Kind::Raw => "raw floor",
            Kind::Bare => "bare early-quorum",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// One client of any kind, connected to the same masters.
pub enum Client {
    Quorumlock(quorumlock::Redlock),
    Rslock(rslock::LockManager),
    Raw(Raw),
    Bare(Raw),
}

/// A lock held by a [`Client`].
pub enum Held {
    Quorumlock(quorumlock::Lock),
    Rslock(rslock::Lock),
    Raw { key: String, token: String },
    Bare { key: String, token: String },
}

impl Client {
    /// Builds a client of `kind` over `urls` and opens its connections (so that connecting is
    /// not part of any measurement).
    pub async fn connect(kind: Kind, urls: &[String]) -> Client {
        match kind {
            Kind::Quorumlock => {
                let rl = quorumlock::Redlock::builder(urls).build().unwrap();
                rl.connect().await.unwrap();
                Client::Quorumlock(rl)
            }
            Kind::Rslock => {
                let manager = rslock::LockManager::new(urls.to_vec());
                // rslock connects lazily on the first request; this touches every master once.
                let _ = manager.query_redis_for_key_value(b"bench:warm").await;
                Client::Rslock(manager)
            }
            Kind::Raw => Client::Raw(Raw::connect(urls).await),
            Kind::Bare => Client::Bare(Raw::connect(urls).await),
        }
    }

    /// One acquire with the client's own retry policy.
    pub async fn acquire(&self, resource: &str) -> Result<Held, String> {
        match self {
            Client::Quorumlock(rl) => rl
                .acquire(resource, TTL)
                .await
                .map(Held::Quorumlock)
                .map_err(|e| e.to_string()),
            Client::Rslock(manager) => manager
                .lock(resource, TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| e.to_string()),
            Client::Raw(raw) => raw
                .acquire(resource, TTL)
                .await
                .map(|token| Held::Raw {
                    key: resource.to_owned(),
                    token,
                })
                .ok_or_else(|| "no quorum".to_owned()),
            Client::Bare(raw) => raw
                .acquire_early(resource, TTL)
                .await
                .map(|token| Held::Bare {
                    key: resource.to_owned(),
                    token,
                })
                .ok_or_else(|| "no quorum".to_owned()),
        }
    }

    /// Releases `held` on every master.
    pub async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (Client::Quorumlock(_), Held::Quorumlock(lock)) => {
                lock.release().await.map(drop).map_err(|e| e.to_string())
            }
            (Client::Rslock(manager), Held::Rslock(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Client::Raw(raw), Held::Raw { key, token }) => {
                raw.release(&key, &token).await;
                Ok(())
            }
            (Client::Bare(raw), Held::Bare { key, token }) => {
                raw.release_early(&key, &token).await;
                Ok(())
            }
            _ => unreachable!("a lock is released by the client that took it"),
        }
    }
}

/// The raw floor: `SET NX PX` and `EVALSHA` on every master, no library logic.
pub struct Raw {
    connections: Vec<MultiplexedConnection>,
    release_sha: String,
    quorum: usize,
}

impl Raw {
    pub async fn connect(urls: &[String]) -> Raw {
        let mut connections = Vec::new();
        let mut release_sha = String::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut connection = client.get_multiplexed_async_connection().await.unwrap();
            release_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE_LUA)
                .query_async(&mut connection)
                .await
                .unwrap();
            connections.push(connection);
        }
        Raw {
            quorum: urls.len() / 2 + 1,
            connections,
            release_sha,
        }
    }

    /// `SET key token NX PX ttl` on every master; the token when a quorum granted (after
    /// hearing from all of them), otherwise `None` after releasing everywhere.
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Option<String> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let ttl_ms = ttl.as_millis() as u64;
        let replies = join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
            async move { cmd.query_async::<Option<String>>(&mut connection).await }
        }))
        .await;
        let granted = replies.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        if granted >= self.quorum {
            Some(token)
        } else {
            self.release(key, &token).await;
            None
        }
    }

    /// The bare early-quorum acquire: `SET key token NX PX ttl` on every master, the token as
    /// soon as a quorum granted; the other requests finish in a spawned task. Without a quorum,
    /// after hearing from all, it releases everywhere and returns `None`.
    pub async fn acquire_early(&self, key: &str, ttl: Duration) -> Option<String> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let token = uuid::Uuid::new_v4().simple().to_string();
        let ttl_ms = ttl.as_millis() as u64;
        let mut replies: FuturesUnordered<_> = self
            .connections
            .iter()
            .map(|connection| {
                let mut connection = connection.clone();
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
                async move { cmd.query_async::<Option<String>>(&mut connection).await }
            })
            .collect();
        let mut granted = 0;
        while let Some(reply) = replies.next().await {
            if matches!(reply, Ok(Some(_))) {
                granted += 1;
                if granted >= self.quorum {
                    tokio::spawn(replies.for_each(|_| async {}));
                    return Some(token);
                }
            }
        }
        self.release(key, &token).await;
        None
    }

    /// Compare-and-delete by `EVALSHA` on every master, returning at the quorum's reply (any
    /// reply); the other requests finish in a spawned task.
    pub async fn release_early(&self, key: &str, token: &str) {
        use futures::stream::{FuturesUnordered, StreamExt};
        let mut replies: FuturesUnordered<_> = self
            .connections
            .iter()
            .map(|connection| {
                let mut connection = connection.clone();
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&self.release_sha).arg(1).arg(key).arg(token);
                async move { cmd.query_async::<i64>(&mut connection).await }
            })
            .collect();
        let mut answered = 0;
        while replies.next().await.is_some() {
            answered += 1;
            if answered >= self.quorum {
                tokio::spawn(replies.for_each(|_| async {}));
                return;
            }
        }
    }

    /// `SET key token NX PX ttl` on every master, then the release; the time from sending to
    /// each reply, in arrival order: what deciding at the third reply instead of the fifth can
    /// save on these masters.
    pub async fn reply_times(&self, key: &str, ttl: Duration) -> Vec<Duration> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let token = uuid::Uuid::new_v4().simple().to_string();
        let started = std::time::Instant::now();
        let replies: FuturesUnordered<_> = self
            .connections
            .iter()
            .map(|connection| {
                let mut connection = connection.clone();
                let mut cmd = redis::cmd("SET");
                cmd.arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64);
                async move { cmd.query_async::<Option<String>>(&mut connection).await }
            })
            .collect();
        let times = replies.map(|_| started.elapsed()).collect().await;
        self.release(key, &token).await;
        times
    }

    /// Compare-and-delete by `EVALSHA` on every master; how many deleted the key.
    pub async fn release(&self, key: &str, token: &str) -> usize {
        let replies = join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.release_sha).arg(1).arg(key).arg(token);
            async move { cmd.query_async::<i64>(&mut connection).await }
        }))
        .await;
        replies.iter().filter(|r| matches!(r, Ok(1))).count()
    }
}

/// CPU time (user + system) used by this process so far, all threads included. The masters are
/// child processes and are not counted.
pub fn process_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let as_duration = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(tv.tv_sec() as u64) + Duration::from_micros(tv.tv_usec() as u64)
    };
    as_duration(usage.user_time()) + as_duration(usage.system_time())
}

/// CPU time (user + system) used so far by the processes `pids` (the masters), from
/// `/proc/PID/stat` (in ticks of 1/100 s, the fixed `USER_HZ` of the Linux ABI); zero where it
/// cannot be read.
pub fn servers_cpu(pids: &[u32]) -> Duration {
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which is in parentheses and may hold spaces).
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after `) `.
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    Duration::from_millis(ticks * 10)
}

/// Microseconds, saturating, for compact latency samples.
pub fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// The median of `values` (mean of the middle two for an even count), ignoring `NaN`s; `NaN`
/// when none is left. For a figure that sums up a few runs' figures (three or five), where
/// averaging the middle two is the usual reading; latency samples go through the testkit's
/// `figures::percentile` instead.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// An environment variable parsed, or `default` when unset or empty.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} does not parse")),
        _ => default,
    }
}

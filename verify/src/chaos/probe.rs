//! Direct reads and writes of the masters' wait lines ([`Probe`]), bypassing the proxies and the
//! library: for the wait-line fault drivers and checks, and for lock clients that kill their own
//! waiter once it heads the line and then follow it ([`follow_killed_head`]).
//!
//! Every key it reads is named from [`lock_key`], the one place that says how a lock key is built.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Script};

use super::setup::{keys_pattern, lock_key, Setup};
use crate::mutex;

/// How long the probe waits for one master: a paused master does not answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long it waits for a master to take a dead waiter.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Scheduling slack of the recovery checks: the machine running the suite is shared and small.
pub(super) const RECOVERY_SLACK: Duration = Duration::from_millis(100);

/// The first live waiter of a line, and the live waiters whose order lies in `[lo, hi]`.
/// KEYS[1] the line, KEYS[2] its leases; ARGV[1] lo, ARGV[2] hi.
static HEAD_AND_WINDOW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function live(id)
  local lapses = tonumber(redis.call('ZSCORE', KEYS[2], id))
  return lapses and lapses > now
end
local head = ''
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if live(id) then head = id break end
end
local found = {head}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYSCORE')) do
  if live(id) then table.insert(found, id) end
end
return found",
    )
});

/// A waiter that died at the head of the line: an entry of order 0 whose lease lapses one entry
/// lease from the master's time, as a waiter that crashed right after taking its place leaves.
/// KEYS[1] the line, KEYS[2] its leases; ARGV[1] the id, ARGV[2] the entry lease in ms.
static DEAD_HEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
if redis.call('PTTL', KEYS[2]) < lease then redis.call('PEXPIRE', KEYS[2], lease) end
return now + lease",
    )
});

/// Live entries over every line of the chaos keys. ARGV[1] the key pattern of the lines.
static LINE_ENTRIES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for _, line in ipairs(redis.call('KEYS', ARGV[1])) do
  local leases = string.sub(line, 1, -7) .. ':leases'
  n = n + redis.call('ZCOUNT', leases, '(' .. now, '+inf')
end
return n",
    )
});

/// Whether the waiter ARGV[1] has a live entry in a line, and whether the lock key is reserved
/// for it. KEYS[1] the lock key, KEYS[2] its line, KEYS[3] the line's leases.
static WHERE_IS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapses = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]))
local queued = 0
if lapses and lapses > now and redis.call('ZSCORE', KEYS[2], ARGV[1]) then queued = 1 end
local reserved = 0
if redis.call('GET', KEYS[1]) == '~queued:' .. ARGV[1] then reserved = 1 end
return {queued, reserved}",
    )
});

/// Per resource, whether its lock key is free (no holder, no reservation) while its line holds
/// live waiters: 1 or 0 each. KEYS: per resource its lock key, its line and its leases.
static FREE_AND_WAITED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = {}
for i = 1, #KEYS, 3 do
  local free = redis.call('EXISTS', KEYS[i]) == 0
  local waited = redis.call('ZCOUNT', KEYS[i + 2], '(' .. now, '+inf') > 0
  table.insert(found, (free and waited) and 1 or 0)
end
return found",
    )
});

/// Line keys (`:queue`, `:leases`) of the chaos keys, each with its PTTL in ms. ARGV[1] the
/// pattern of every chaos key.
static LINE_KEYS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local found = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  if string.sub(k, -6) == ':queue' or string.sub(k, -7) == ':leases' then
    table.insert(found, {k, redis.call('PTTL', k)})
  end
end
return found",
    )
});

/// The wait line of the lock key `key` and the line's leases, as the library names them.
fn line_of(key: &str) -> (String, String) {
    (
        quorumlock::companion_key(key, ":queue"),
        quorumlock::companion_key(key, ":leases"),
    )
}

/// Direct connections to every master, bypassing the proxies and the library: reads and writes
/// the wait lines. Each connection is opened on first use and again after it broke (a master
/// killed and restarted); a master that does not answer within 200 ms (paused, down) reads as
/// `None`.
pub(super) struct Probe {
    addrs: Vec<SocketAddr>,
    connections: Vec<Mutex<Option<MultiplexedConnection>>>,
}

impl Probe {
    pub(super) fn new(addrs: &[SocketAddr]) -> Self {
        Probe {
            addrs: addrs.to_vec(),
            connections: addrs.iter().map(|_| Mutex::new(None)).collect(),
        }
    }

    /// How many masters there are.
    pub(super) fn masters(&self) -> usize {
        self.addrs.len()
    }

    /// How many masters a lock needs.
    pub(super) fn quorum(&self) -> usize {
        self.addrs.len() / 2 + 1
    }

    async fn connection(&self, i: usize) -> Option<MultiplexedConnection> {
        if let Some(connection) = mutex::lock(&self.connections[i]).clone() {
            return Some(connection);
        }
        let client = redis::Client::open(format!("redis://{}", self.addrs[i])).ok()?;
        let connection =
            tokio::time::timeout(PROBE_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .ok()?
                .ok()?;
        *mutex::lock(&self.connections[i]) = Some(connection.clone());
        Some(connection)
    }

    /// Runs `script` on master `i`; `None` when it does not answer within `PROBE_TIMEOUT` or
    /// fails.
    async fn run<T: FromRedisValue>(
        &self,
        i: usize,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Option<T> {
        self.run_within(PROBE_TIMEOUT, i, script, keys, args).await
    }

    /// Runs `script` on master `i`; `None` when it does not answer within `timeout` or fails.
    async fn run_within<T: FromRedisValue>(
        &self,
        timeout: Duration,
        i: usize,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Option<T> {
        let mut connection = self.connection(i).await?;
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(arg);
        }
        match tokio::time::timeout(timeout, call.invoke_async(&mut connection)).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(_)) => {
                // Broken (the master went away): open a new one next time.
                *mutex::lock(&self.connections[i]) = None;
                None
            }
            Err(_) => None,
        }
    }

    /// `script` on every master at once, in master order.
    async fn run_everywhere<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[String],
    ) -> Vec<Option<T>> {
        futures::future::join_all((0..self.masters()).map(|i| self.run(i, script, keys, args)))
            .await
    }

    /// The id of the waiter whose order lies in `[lo, hi]`, if on a quorum of masters it is the
    /// only live waiter in that range and heads the line of `resource`.
    pub(super) async fn head_in(&self, resource: &str, lo: u64, hi: u64) -> Option<String> {
        let key = lock_key(resource);
        let (line, leases) = line_of(&key);
        let found: Vec<Option<Vec<String>>> = self
            .run_everywhere(
                &HEAD_AND_WINDOW,
                &[&line, &leases],
                &[lo.to_string(), hi.to_string()],
            )
            .await;
        let mut heads: Vec<&str> = Vec::new();
        for answer in found.iter().flatten() {
            if let [head, only] = answer.as_slice() {
                if head == only {
                    heads.push(head);
                }
            }
        }
        let first = *heads.first()?;
        let agree = heads.iter().filter(|h| **h == first).count();
        (agree >= self.quorum()).then(|| first.to_owned())
    }

    /// Writes a dead waiter `id` at the head of `resource`'s line on every master (see
    /// `DEAD_HEAD`); how many masters took it, and the latest time (in ms since the Unix epoch,
    /// by the masters' clocks) at which it lapses.
    pub(super) async fn kill_at_head(
        &self,
        resource: &str,
        id: &str,
        lease: Duration,
    ) -> (usize, Option<u64>) {
        let key = lock_key(resource);
        let (line, leases) = line_of(&key);
        let args = [id.to_owned(), lease.as_millis().to_string()];
        let keys = [line.as_str(), leases.as_str()];
        // Every master answers in this scenario: only a stalled test process delays the answer.
        let written: Vec<Option<u64>> = futures::future::join_all(
            (0..self.masters())
                .map(|i| self.run_within(WRITE_TIMEOUT, i, &DEAD_HEAD, &keys, &args)),
        )
        .await;
        let lapses = written.iter().flatten().max().copied();
        (written.iter().flatten().count(), lapses)
    }

    /// How many masters have `resource`'s key reserved for the waiter `id`.
    pub(super) async fn reserved_for(&self, resource: &str, id: &str) -> usize {
        let key = lock_key(resource);
        let reserved = format!("~queued:{id}");
        let values = futures::future::join_all((0..self.masters()).map(|i| {
            let key = key.clone();
            async move {
                let mut connection = self.connection(i).await?;
                let mut get = redis::cmd("GET");
                get.arg(&key);
                let value = get.query_async::<Option<String>>(&mut connection);
                tokio::time::timeout(PROBE_TIMEOUT, value)
                    .await
                    .ok()?
                    .ok()?
            }
        }))
        .await;
        values
            .iter()
            .filter(|v| v.as_deref() == Some(reserved.as_str()))
            .count()
    }

    /// On how many masters the waiter `id` has a live entry in `resource`'s line, and on how
    /// many the key is reserved for it.
    pub(super) async fn where_is(&self, resource: &str, id: &str) -> (usize, usize) {
        let key = lock_key(resource);
        let (line, leases) = line_of(&key);
        let found: Vec<Option<(u8, u8)>> = self
            .run_everywhere(&WHERE_IS, &[&key, &line, &leases], &[id.to_owned()])
            .await;
        found
            .iter()
            .flatten()
            .fold((0, 0), |(q, r), (queued, reserved)| {
                (q + usize::from(*queued), r + usize::from(*reserved))
            })
    }

    /// Live waiters over every line on master `i`; `None` when it does not answer.
    pub(super) async fn waiters_on(&self, i: usize) -> Option<u64> {
        let pattern = format!("{}:queue", keys_pattern());
        self.run(i, &LINE_ENTRIES, &[], &[pattern]).await
    }

    /// Per resource `0..resources`, on how many masters its key is free while waiters stand in
    /// its line (see `FREE_AND_WAITED`).
    pub(super) async fn free_and_waited(&self, resources: usize) -> Vec<usize> {
        let names: Vec<[String; 3]> = (0..resources)
            .map(|r| {
                let key = lock_key(&Setup::resource(r));
                let (line, leases) = line_of(&key);
                [line, leases, key]
            })
            .map(|[line, leases, key]| [key, line, leases])
            .collect();
        let keys: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
        let found: Vec<Option<Vec<u8>>> = self.run_everywhere(&FREE_AND_WAITED, &keys, &[]).await;
        (0..resources)
            .map(|r| {
                found
                    .iter()
                    .flatten()
                    .filter(|answer| answer.get(r) == Some(&1))
                    .count()
            })
            .collect()
    }

    /// The line keys left on the masters that answer (`master i: key`), each with its PTTL.
    pub(super) async fn line_keys(&self) -> Vec<(String, Duration)> {
        let found: Vec<Option<Vec<(String, i64)>>> = self
            .run_everywhere(&LINE_KEYS, &[], &[keys_pattern()])
            .await;
        found
            .into_iter()
            .enumerate()
            .flat_map(|(i, keys)| {
                keys.unwrap_or_default().into_iter().map(move |(k, pttl)| {
                    let pttl = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
                    (format!("master {i}: {k}"), pttl)
                })
            })
            .collect()
    }
}

/// A waiter whose acquiring task was aborted while it headed the line, and what the masters
/// showed of it afterwards.
#[derive(Debug, Clone)]
pub(super) struct HeadKill {
    pub(super) resource: String,
    /// Its id in the line.
    pub(super) id: String,
    /// When its task was aborted.
    pub(super) at: Instant,
    /// The most masters on which it still had a live entry, once the leaving it starts on drop
    /// had time to reach them (a node timeout and some slack after the kill) ...
    pub(super) lingered: usize,
    /// ... and on which the key was reserved for it.
    pub(super) reserved: usize,
    /// The most masters on which it was still in line, or the key reserved for it, one entry
    /// lease (and some slack) after the kill: what the documented bound forbids.
    pub(super) outlived: usize,
}

/// Watches the masters for the waiter `id`, killed at `at`, from a node timeout and some slack
/// after the kill until one entry lease and twice the slack after it.
pub(super) async fn follow_killed_head(
    probe: Arc<Probe>,
    resource: String,
    id: String,
    at: Instant,
    setup: Setup,
) -> HeadKill {
    let from = at + setup.node_timeout + RECOVERY_SLACK;
    let lapsed = at + setup.entry_lease() + RECOVERY_SLACK;
    let until = lapsed + RECOVERY_SLACK;
    tokio::time::sleep_until(from.into()).await;
    let (mut lingered, mut reserved, mut outlived) = (0, 0, 0);
    loop {
        let asked = Instant::now();
        let (queued, held) = probe.where_is(&resource, &id).await;
        lingered = lingered.max(queued);
        reserved = reserved.max(held);
        if asked >= lapsed {
            outlived = outlived.max(queued.max(held));
        }
        if asked >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    HeadKill {
        resource,
        id,
        at,
        lingered,
        reserved,
        outlived,
    }
}

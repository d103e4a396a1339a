//! The masters of a run ([`Cluster`]: five plain masters, not a Redis Cluster), the proxies in
//! front of them, and direct queries that bypass both the proxies and the library.

use std::io;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::setup::{keys_pattern, Setup};
use crate::mutex;
use quorumlock_testkit::clock::Clock;
use quorumlock_testkit::{FaultProxy, RedisNodes, RedisServerBuilder};

/// One query on a fresh plain connection with short timeouts, bypassing the proxies.
pub(super) use crate::direct::query as direct_query;

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
    /// Starts the masters `setup` asks for, and the proxies in front of them.
    pub(super) fn start(setup: &Setup) -> io::Result<Cluster> {
        let mut builder = RedisServerBuilder::new().aof(setup.aof);
        if let Some(binary) = &setup.server {
            builder = builder.binary(binary);
        }
        if setup.clocks {
            builder = builder.clock(Clock::real());
        }
        let servers = RedisNodes::spawn_with(setup.masters, &builder)?;
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

    /// Per client with proxies of its own, the URLs it uses (empty when no client has any).
    pub(super) fn own_urls(&self) -> Vec<Vec<String>> {
        (0..self.own.len()).map(|c| self.urls_of(c)).collect()
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
    /// bypassing any proxy; `None` when it does not answer within 200 ms (down or paused). A key
    /// kept only for its line, its holder's lease past (see `stretch` in the library's
    /// `lua/line.lua`), holds no lock: it counts as gone, as the line's scripts take it.
    pub(super) fn lock_keys(&self, i: usize) -> Option<Vec<String>> {
        let keys: Vec<String> = direct_query(self.addrs[i], Duration::from_millis(200), |c| {
            redis::cmd("EVAL")
                .arg(HOLDING_KEYS)
                .arg(0)
                .arg(keys_pattern())
                .query(c)
        })?;
        Some(keys.into_iter().filter(|k| !is_auxiliary(k)).collect())
    }

    /// The lock keys on the running masters that answer, each with its master, its value and
    /// its remaining time to live (`PTTL`), for a failing check to show.
    pub(super) fn lock_keys_described(&self) -> Vec<String> {
        let running = self.running();
        let mut out = Vec::new();
        for i in (0..self.addrs.len()).filter(|i| running[*i]) {
            for key in self.lock_keys(i).unwrap_or_default() {
                let read: Option<(Option<String>, i64)> =
                    direct_query(self.addrs[i], Duration::from_millis(200), |c| {
                        redis::pipe().get(&key).pttl(&key).query(c)
                    });
                let (value, pttl) = read.unwrap_or((None, -3));
                let value = value.unwrap_or_else(|| "(gone)".to_owned());
                out.push(format!("master {i}: {key} = {value}, PTTL {pttl} ms"));
            }
        }
        out
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

/// The keys matching ARGV[1] but lock keys whose record says their holder's lease has passed.
const HOLDING_KEYS: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local holding = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local record = redis.call('GET', '{' .. k .. '}:held')
  local lapsed = false
  if record then
    local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
    local value = redis.call('GET', k)
    lapsed = token ~= nil and (value == token or value == '~elected:' .. token)
      and redis.call('PEXPIRETIME', k) == tonumber(stretched) and tonumber(lease) <= now
  end
  if not lapsed then
    table.insert(holding, k)
  end
end
return holding";

/// Whether `key` is one of the keys kept beside a lock key: a fencing counter (which expires a
/// fencing grace after its last grant), or a wait line, its leases and the record of a lock key
/// stretched over it (which expire with their last entry's lease).
fn is_auxiliary(key: &str) -> bool {
    [":fence", ":queue", ":leases", ":held"]
        .iter()
        .any(|suffix| key.ends_with(suffix))
        || key.ends_with(quorumlock::LAYOUT_MARKER)
}

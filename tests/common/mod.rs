//! Shared helpers for the integration tests: real masters, and direct reads of what they hold.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::{Duration, Instant};

use quorumlock::{Lock, Redlock, RedlockBuilder};
use quorumlock_testkit::{FaultProxy, History, Op, RedisNodes, RedisServer};

/// Five independent masters.
pub fn five() -> RedisNodes {
    RedisNodes::spawn(5).unwrap()
}

/// A builder over these masters with settings that keep tests quick: short retry delays and a
/// node timeout far above loopback round trips, even on a loaded 2-core machine running a debug
/// build (yet short enough for sub-second TTLs).
pub fn builder(nodes: &RedisNodes) -> RedlockBuilder {
    Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(100))
}

pub fn client(nodes: &RedisNodes) -> Redlock {
    builder(nodes).build().unwrap()
}

/// [`client`], connected to every master before the test's first request: the node timeout
/// then bounds the test's requests, not also a first connection's handshake (its layout check
/// and script loads), which on a loaded 2-core machine running a debug build can take longer
/// than the 100 ms above and cost a master's vote in a test that is not about connecting.
pub async fn connected(nodes: &RedisNodes) -> Redlock {
    builder(nodes).connected().await
}

/// `n` clients over `nodes`, each connected first (see [`connected`]).
pub async fn connected_clients(nodes: &RedisNodes, n: usize) -> Vec<Redlock> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(connected(nodes).await);
    }
    clients
}

/// A builder's client, connected first (see [`connected`]).
pub trait ConnectFirst {
    /// Builds the client and connects it to every master.
    async fn connected(self) -> Redlock;
}

impl ConnectFirst for RedlockBuilder {
    async fn connected(self) -> Redlock {
        let rl = self.build().unwrap();
        rl.connect().await.unwrap();
        rl
    }
}

/// A direct connection to one server, bypassing the library.
pub fn direct(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap()
}

/// `cmd` run on `server` directly, bypassing the library.
pub fn query<T: redis::FromRedisValue>(server: &RedisServer, cmd: &mut redis::Cmd) -> T {
    cmd.query(&mut direct(server)).unwrap()
}

/// A proxy in front of every master, refusing every connection to those not in `reach`: the
/// URLs of a client that reaches only `reach` of the masters it is configured with.
pub fn reaching(nodes: &RedisNodes, reach: &[usize]) -> (Vec<FaultProxy>, Vec<String>) {
    let proxies: Vec<FaultProxy> = nodes
        .iter()
        .map(|server| FaultProxy::start(server.addr()).unwrap())
        .collect();
    for (i, proxy) in proxies.iter().enumerate() {
        if !reach.contains(&i) {
            proxy.refuse();
        }
    }
    let urls = proxies.iter().map(FaultProxy::url).collect();
    (proxies, urls)
}

/// The lock key of `resource` under no key prefix, as the masters store it (key layout 4: the
/// name itself). Every other key and channel of the resource is a companion of it.
pub fn lock_key(resource: &str) -> String {
    quorumlock::resource_key("", resource)
}

/// The fencing counter of `resource` under no key prefix: `{<resource>}:fence` (for a name
/// without a hash tag).
pub fn fence_key(resource: &str) -> String {
    quorumlock::companion_key(&lock_key(resource), ":fence")
}

/// The value of `key` on `server`.
pub fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut direct(server))
        .unwrap()
}

/// The remaining TTL of `key` on `server`, in milliseconds (`-2` when absent).
pub fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut direct(server))
        .unwrap()
}

/// How long each master keeps a hold past the deadline its holder counts on, in ms, longest
/// first (negative: the hold lapses there first): what `keeps` reads on the master (its hold's
/// remaining life, in ms) less what `remaining` says right after that read. Read in this
/// order, a stall between the two reads (a loaded machine) can only make a master look as if
/// it kept the hold longer, never shorter, so the figure errs towards passing by the stall and
/// never fails on timing alone; read the other way round, a stall of a few milliseconds did.
pub fn kept_past_deadline(
    nodes: &RedisNodes,
    keeps: impl Fn(&RedisServer) -> i64,
    remaining: impl Fn() -> Duration,
) -> Vec<i64> {
    let mut past: Vec<i64> = nodes
        .iter()
        .map(|s| keeps(s) - remaining().as_millis() as i64)
        .collect();
    past.sort_unstable_by(|a, b| b.cmp(a));
    past
}

/// Asserts that a quorum of `nodes` keeps a hold (`keeps`: its life on one master, in ms) at
/// least as long as its holder says (`remaining`), within the masters' whole milliseconds.
pub fn assert_quorum_keeps(
    nodes: &RedisNodes,
    what: &str,
    remaining: impl Fn() -> Duration,
    keeps: impl Fn(&RedisServer) -> i64,
) {
    let past = kept_past_deadline(nodes, keeps, &remaining);
    assert!(
        past[nodes.len() / 2] >= -5,
        "{what}: the holder says {:?} left; the masters keep it {past:?} ms past that",
        remaining()
    );
}

/// Waits (up to 2 s) until no master holds `key`, and panics naming what they hold if one
/// still does: a release returns once a quorum answered, and the rest lands after it.
pub async fn assert_gone_everywhere(nodes: &RedisNodes, key: &str) {
    assert!(
        eventually(Duration::from_secs(2), || present(nodes, key) == 0).await,
        "{key} left behind: {:?}",
        values(nodes, key)
    );
}

/// Waits (up to 2 s) until every master holds `token` at `key`. A grant returns once a quorum
/// granted, and the rest lands after it: another client's attempt that reached one of the last
/// masters first would be granted there (and roll back), not take its place in line or note
/// itself there, and the grant then refused there.
pub async fn granted_everywhere(nodes: &RedisNodes, key: &str, token: &str) {
    assert!(
        eventually(Duration::from_secs(2), || holders(nodes, key, token)
            == nodes.len())
        .await,
        "the grant of {key} never reached every master: {:?}",
        values(nodes, key)
    );
}

/// `resource`, acquired by `holder` for `ttl`, once its grant is on every master (see
/// [`granted_everywhere`]). The holder connects first: a first connection slower than its node
/// timeout (a loaded machine) would leave a master without the grant.
pub async fn acquired_everywhere(
    nodes: &RedisNodes,
    holder: &Redlock,
    resource: &str,
    ttl: Duration,
) -> Lock {
    holder.connect().await.ok();
    let lock = holder.acquire(resource, ttl).await.unwrap();
    granted_everywhere(nodes, &lock_key(resource), lock.token().expose()).await;
    lock
}

/// Sets `key` to `value` on `server` with a TTL, as another client would.
pub fn set(server: &RedisServer, key: &str, value: &str, ttl: Duration) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ttl.as_millis() as u64)
        .query(&mut direct(server))
        .unwrap();
}

/// Deletes `key` on `server`, as another client would.
pub fn del(server: &RedisServer, key: &str) {
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut direct(server))
        .unwrap();
}

/// Records in `history` a successful acquire of `lock` by `client`, started at `start`.
pub fn record(history: &History, client: usize, start: Instant, lock: &Lock) {
    history.record(Op::acquired(client, start, Instant::now(), lock));
}

/// How many of the running servers hold `key` with exactly `value`.
pub fn holders(nodes: &RedisNodes, key: &str, value: &str) -> usize {
    nodes
        .iter()
        .filter(|s| s.is_running())
        .filter(|s| get(s, key).as_deref() == Some(value))
        .count()
}

/// How many of the running servers have `key` at all.
pub fn present(nodes: &RedisNodes, key: &str) -> usize {
    nodes
        .iter()
        .filter(|s| s.is_running())
        .filter(|s| get(s, key).is_some())
        .count()
}

/// Polls `check` until it holds or `within` passes; returns whether it held.
pub async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The waiter ids in the line of `key` on `server`, first to last.
pub fn line(server: &RedisServer, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(quorumlock::companion_key(key, ":queue"))
        .arg(0)
        .arg(-1)
        .query(&mut direct(server))
        .unwrap()
}

/// Waits until every master has `waiters` waiters in the line of `key`.
pub async fn waiters_in_line(nodes: &RedisNodes, key: &str, waiters: usize) {
    assert!(
        eventually(Duration::from_secs(5), || {
            nodes.iter().all(|s| line(s, key).len() == waiters)
        })
        .await,
        "the waiters never took their places: lines {:?}, ttls {:?}",
        nodes.iter().map(|s| line(s, key)).collect::<Vec<_>>(),
        ttls(nodes, key)
    );
}

/// What each server holds at `key`, in order.
pub fn values(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    nodes.iter().map(|s| get(s, key)).collect()
}

/// The size of `resource`'s sorted set `suffix` (`:readers`, `:writers`, …; see
/// `quorumlock::companion_key`) on each server, in order.
pub fn companion_sizes(nodes: &RedisNodes, resource: &str, suffix: &str) -> Vec<usize> {
    let set = quorumlock::companion_key(&lock_key(resource), suffix);
    nodes
        .iter()
        .map(|s| query(s, redis::cmd("ZCARD").arg(&set)))
        .collect()
}

/// The remaining TTL of `key` on each server, in order, in milliseconds.
pub fn ttls(nodes: &RedisNodes, key: &str) -> Vec<i64> {
    nodes.iter().map(|s| pttl(s, key)).collect()
}

/// Waits (up to 5 s) until the servers `on` all hold one value of `owner` other than each of
/// `not`, an attempt of that owner that took the key over there; returns it.
pub async fn taken_over(
    nodes: &RedisNodes,
    key: &str,
    owner: &str,
    on: &[usize],
    not: &[&str],
) -> String {
    let mut found = None;
    let ok = eventually(Duration::from_secs(5), || {
        let vals: Vec<Option<String>> = on.iter().map(|&i| get(&nodes[i], key)).collect();
        let first = vals[0].clone();
        let good = first
            .as_deref()
            .is_some_and(|v| v.ends_with(&format!("@{owner}")) && !not.contains(&v))
            && vals.iter().all(|v| *v == first);
        if good {
            found = first;
        }
        good
    })
    .await;
    assert!(ok, "never taken over: {:?}", values(nodes, key));
    found.unwrap_or_default()
}

/// How many times `server` ran `command` since it started (`INFO commandstats`; commands that
/// scripts run count too).
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut direct(server))
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// How many scripts `server` has run (`EVALSHA` and `EVAL`) since it started.
pub fn script_calls(server: &RedisServer) -> u64 {
    command_calls(server, "evalsha") + command_calls(server, "eval")
}

/// Proxies in front of every master, all passing.
pub fn proxies(nodes: &RedisNodes) -> Vec<FaultProxy> {
    nodes
        .iter()
        .map(|server| FaultProxy::start(server.addr()).unwrap())
        .collect()
}

/// The URLs of `proxies`, in order.
pub fn urls(proxies: &[FaultProxy]) -> Vec<String> {
    proxies.iter().map(FaultProxy::url).collect()
}

/// The library's own script `body` (src/lua) as it sends it: `line.lua`, the line's helpers, in
/// place of its `--@line` marker, or ahead of it.
pub fn in_line(body: &str) -> String {
    let helpers = include_str!("../../src/lua/line.lua");
    match body.split_once("--@line\n") {
        Some((fast, rest)) => format!("{fast}{helpers}{rest}"),
        None => format!("{helpers}\n{body}"),
    }
}

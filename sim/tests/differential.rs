//! The simulated master against a real one: random sequences of the library's scripts, the plain
//! commands beside them, and waits of a few milliseconds, sent to a real `redis-server` (and a
//! `valkey-server` when `QUORUMLOCK_VALKEY_SERVER` names one) and to a simulated master; after
//! every step the replies and the whole keyspaces (values, types, expiries) must be equal.
//!
//! The simulated master's clock follows the real server's: each request goes to the real server
//! between two `TIME`s, and the simulated master runs it at the first of them (or, when the
//! request straddled a millisecond tick, at the second); each keyspace is read by one script on
//! the real server, and on the simulated master at that script's `TIME`. Replies, values and
//! expiries are then compared exactly.
//!
//! The seed is printed first; `QUORUMLOCK_SIM_SEED=<seed>` runs the same requests again (the
//! real server's timing differs from run to run), `QUORUMLOCK_SIM_STEPS` sets the number of
//! steps (default 3000).

#[path = "differential/ops.rs"]
mod ops;
#[path = "differential/resp.rs"]
mod resp;
#[path = "differential/scripts.rs"]
mod scripts;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorumlock_sim::{
    listen, lock, shared, Clock, Entry, Hash, Master, Server, SharedMaster, SortedSet, Value,
    VirtualTime,
};
use quorumlock_testkit::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use ops::{Gen, Op};
use resp::{Client, Resp};

/// Reads the whole keyspace in one script: the server's `TIME`, then each key (in byte order)
/// with its type, `PEXPIRETIME` and value.
const DUMP: &str = r#"
local t = redis.call('TIME')
local keys = redis.call('KEYS', '*')
table.sort(keys)
local out = {t[1], t[2]}
for _, k in ipairs(keys) do
  local ty = redis.call('TYPE', k).ok
  local v = ty
  if ty == 'string' then
    v = redis.call('GET', k)
  elseif ty == 'zset' then
    v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif ty == 'hash' then
    v = redis.call('HGETALL', k)
  end
  out[#out + 1] = {k, ty, redis.call('PEXPIRETIME', k), v}
end
return out
"#;

fn argv(args: &[&str]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// `[seconds, microseconds]` as a time since the epoch.
fn instant_of(reply: &Resp) -> Duration {
    let items = reply.items();
    let part = |i: usize| {
        items
            .get(i)
            .and_then(Resp::bulk_str)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("not a TIME reply: {reply}"))
    };
    Duration::from_secs(part(0)) + Duration::from_micros(part(1))
}

/// A reply as compared: `KEYS` comes in the server's own order, so it is sorted; a script's
/// error names the script's SHA1 on Redis (`script: <sha1>, on @user_script:3.`) and not on
/// Valkey (`script: on @user_script:3.`), so the SHA1 is left out.
fn normalised(op: &Op, reply: &Resp) -> Resp {
    match reply {
        Resp::Error(e) => match e.split_once("script: ") {
            Some((head, tail)) => {
                let tail = match tail.split_once(", on @") {
                    Some((sha, rest)) if sha.len() == 40 => format!("on @{rest}"),
                    _ => tail.to_owned(),
                };
                Resp::Error(format!("{head}script: {tail}"))
            }
            None => reply.clone(),
        },
        Resp::Array(Some(items)) if op.label.starts_with("KEYS") => {
            let mut items = items.clone();
            items.sort_by_key(|r| r.bulk_str());
            Resp::Array(Some(items))
        }
        other => other.clone(),
    }
}

/// The differences between two keyspace dumps (past their leading `TIME`), one line each.
fn keyspace_diff(real: &Resp, sim: &Resp) -> Vec<String> {
    let entries = |dump: &Resp| -> BTreeMap<String, String> {
        dump.items()
            .iter()
            .skip(2)
            .map(|e| {
                let items = e.items();
                let key = items.first().and_then(Resp::bulk_str).unwrap_or_default();
                let rest: Vec<String> = items.iter().skip(1).map(|r| r.to_string()).collect();
                (key, rest.join(" "))
            })
            .collect()
    };
    let (real, sim) = (entries(real), entries(sim));
    let mut diff = Vec::new();
    for key in real
        .keys()
        .chain(sim.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        match (real.get(key), sim.get(key)) {
            (a, b) if a == b => {}
            (a, b) => diff.push(format!("{key}: real {a:?}, sim {b:?}")),
        }
    }
    diff
}

/// What a run compared.
#[derive(Default)]
struct Tally {
    steps: usize,
    scripts: usize,
    errors: usize,
    sleeps: usize,
    /// Requests that straddled a millisecond tick on the real server and matched only at a
    /// later millisecond than the first `TIME`'s.
    second_instant: usize,
    /// Keyspace reads taken again (a key expiring within the real read's first microseconds).
    reread: usize,
    /// Scripts that ran across a millisecond tick on the real server, which read the clock
    /// before the tick and wrote an expiry (or read a PTTL) after it: the simulated master,
    /// whose time stands still during a script, cannot do both. Its reply must then be equal
    /// but for those times (see `within_a_tick`), and its keyspace is set to the real one.
    resynced: usize,
    max_keys: usize,
    /// Each request's kind (a script's name, a command's) and the shapes of its replies (times
    /// and counters shown as `T`), with how often each came: what the run reached.
    outcomes: BTreeMap<String, BTreeMap<String, usize>>,
}

/// A reply with its large numbers (times, fences) shown as `T` and strings cut short.
fn shape(reply: &Resp) -> String {
    match reply {
        Resp::Int(i) if i.abs() > 100_000 => "T".to_owned(),
        Resp::Bulk(Some(b))
            if std::str::from_utf8(b)
                .is_ok_and(|s| s.parse::<i64>().is_ok_and(|n| n.abs() > 100_000)) =>
        {
            "T".to_owned()
        }
        Resp::Error(e) => format!("-{}", e.split(' ').next().unwrap_or("")),
        Resp::Array(Some(items)) => {
            let inner: Vec<String> = items.iter().map(shape).collect();
            format!("[{}]", inner.join(","))
        }
        Resp::Bulk(Some(b)) => {
            let text = String::from_utf8_lossy(b);
            let cut: String = text.chars().take(10).collect();
            format!("{cut:?}")
        }
        other => other.to_string(),
    }
}

struct Pair<'a> {
    name: &'a str,
    real: Client,
    real_server: &'a RedisServer,
    sim: Client,
    master: SharedMaster,
    time: VirtualTime,
    history: VecDeque<String>,
    tally: Tally,
    seed: u64,
}

impl Pair<'_> {
    fn fail(&self, step: usize, what: String) -> ! {
        let history: Vec<&String> = self.history.iter().collect();
        panic!(
            "{} diverged at step {step} (seed {}): {what}\nlast steps:\n{}\nreal server log:\n{}",
            self.name,
            self.seed,
            history
                .iter()
                .map(|s| format!("  {s}"))
                .collect::<Vec<_>>()
                .join("\n"),
            self.real_server.log()
        );
    }

    /// Reads both keyspaces; the differences, after up to three reads.
    fn compare_keyspaces(&mut self) -> Result<usize, Vec<String>> {
        let mut last = Vec::new();
        for attempt in 0..3 {
            if attempt > 0 {
                self.tally.reread += 1;
            }
            let dump = argv(&["EVAL", DUMP, "0"]);
            let real = self.real.call(&dump);
            self.time
                .set(instant_of(&real.items()[0..2].to_vec().into_resp()));
            let sim = self.sim.call(&dump);
            if real == sim {
                return Ok(real.items().len() - 2);
            }
            last = keyspace_diff(&real, &sim);
            if std::env::var("DIFF_DEBUG").is_ok() {
                eprintln!(
                    "REREAD {:?} {last:?}",
                    instant_of(&real.items()[0..2].to_vec().into_resp())
                );
            }
            if last.is_empty() {
                last.push(format!("real {real}\nsim {sim}"));
            }
        }
        Err(last)
    }

    /// Runs `op` on both and compares; the differences when they are not explained.
    fn step(&mut self, step: usize, op: &Op) -> Result<(), String> {
        let time = argv(&["TIME"]);
        let replies = self
            .real
            .pipeline(&[time.clone(), op.argv.clone(), time.clone()]);
        let (t0, t1) = (instant_of(&replies[0]), instant_of(&replies[2]));
        let real = normalised(op, &replies[1]);
        let before = lock(&self.master).snapshot();
        // The instants the real server may have run it at: the first TIME, then the start of
        // each millisecond up to the second (when the machine is busy, several may pass).
        let mut candidates = vec![t0];
        let (first, last) = (t0.as_millis() as u64, t1.as_millis() as u64);
        candidates.extend((first + 1..=last).take(50).map(Duration::from_millis));
        let mut failures = Vec::new();
        let mut reply_matched = false;
        let mut reply_close = false;
        for (i, at) in candidates.iter().enumerate() {
            lock(&self.master).rewind(&before);
            self.time.set(*at);
            let sim = normalised(op, &self.sim.call(&op.argv));
            reply_close |= within_a_tick(&real, &sim);
            if sim != real {
                failures.push(format!(
                    "at {at:?}: {}\n  real: {real}\n  sim:  {sim}",
                    op.label
                ));
                continue;
            }
            reply_matched = true;
            match self.compare_keyspaces() {
                Ok(keys) => {
                    self.tally.max_keys = self.tally.max_keys.max(keys);
                    if i > 0 {
                        self.tally.second_instant += 1;
                    }
                    let shown: String = op.label.chars().take(160).collect();
                    self.history.push_back(format!("{step}: {shown} -> {real}"));
                    if self.history.len() > 12 {
                        self.history.pop_front();
                    }
                    if let Resp::Error(e) = &real {
                        if std::env::var("DIFF_DEBUG").is_ok() {
                            eprintln!("ERRREPLY {}", e.chars().take(70).collect::<String>());
                        }
                    }
                    if matches!(real, Resp::Error(_)) {
                        self.tally.errors += 1;
                    }
                    let kind = op.label.split(' ').next().unwrap_or("").to_owned();
                    *self
                        .tally
                        .outcomes
                        .entry(kind)
                        .or_default()
                        .entry(shape(&real))
                        .or_default() += 1;
                    return Ok(());
                }
                Err(diff) => failures.push(format!(
                    "at {at:?}: {} -> {real}\n  keyspaces differ:\n    {}",
                    op.label,
                    diff.join("\n    ")
                )),
            }
        }
        if (reply_matched || reply_close) && candidates.len() > 1 {
            self.resync();
            self.tally.resynced += 1;
            self.history
                .push_back(format!("{step}: (resynced after a tick) {}", op.label));
            return Ok(());
        }
        Err(format!(
            "(real TIMEs {t0:?} and {t1:?})\n{}",
            failures.join("\n")
        ))
    }
}

impl Pair<'_> {
    /// Sets the simulated keyspace to the real one as it is now.
    fn resync(&mut self) {
        let dump = self.real.call(&argv(&["EVAL", DUMP, "0"]));
        self.time
            .set(instant_of(&dump.items()[0..2].to_vec().into_resp()));
        let mut master = lock(&self.master);
        master.run(&["FLUSHALL"]);
        for entry in dump.items().iter().skip(2) {
            let items = entry.items();
            let key = match &items[0] {
                Resp::Bulk(Some(k)) => k.clone(),
                other => panic!("not a key: {other}"),
            };
            let expires_at = match items[2] {
                Resp::Int(-1) => None,
                Resp::Int(at) => Some(at),
                ref other => panic!("not an expiry: {other}"),
            };
            let bytes = |r: &Resp| match r {
                Resp::Bulk(Some(b)) => b.clone(),
                other => panic!("not a string: {other}"),
            };
            let value = match items[1].to_string().as_str() {
                "\"string\"" => Value::String(bytes(&items[3])),
                "\"zset\"" => {
                    let mut z = SortedSet::default();
                    for pair in items[3].items().chunks(2) {
                        let score: f64 = String::from_utf8_lossy(&bytes(&pair[1])).parse().unwrap();
                        z.insert(&bytes(&pair[0]), score);
                    }
                    Value::SortedSet(z)
                }
                "\"hash\"" => {
                    let mut h = Hash::default();
                    for pair in items[3].items().chunks(2) {
                        h.set(&bytes(&pair[0]), &bytes(&pair[1]));
                    }
                    Value::Hash(h)
                }
                other => panic!("a type the simulated master lacks: {other}"),
            };
            master.put(&key, Entry { value, expires_at });
        }
    }
}

/// Whether two replies are equal but for times read on either side of a millisecond tick:
/// numbers (integers, or strings of digits) at most 2 apart (a stretch doubles a difference of 1).
/// Redis 7.0 reads its clock afresh for each command inside a script (`PTTL`, `PX`, `PEXPIRE`)
/// while the script's `TIME` was read before, so a script that runs across a tick mixes the
/// two; the simulated master's time stands still during a script.
fn within_a_tick(real: &Resp, sim: &Resp) -> bool {
    let number = |r: &Resp| match r {
        Resp::Int(i) => Some(*i),
        Resp::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    };
    match (real, sim) {
        (Resp::Array(Some(a)), Resp::Array(Some(b))) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| within_a_tick(a, b))
        }
        (a, b) => match (number(a), number(b)) {
            (Some(a), Some(b)) => (a - b).abs() <= 2,
            _ => a == b,
        },
    }
}

trait IntoResp {
    fn into_resp(self) -> Resp;
}

impl IntoResp for Vec<Resp> {
    fn into_resp(self) -> Resp {
        Resp::Array(Some(self))
    }
}

/// A fresh simulated master served on a runtime of its own, paired with `real_server`.
fn pair<'a>(
    name: &'a str,
    real_server: &'a RedisServer,
    seed: u64,
) -> (tokio::runtime::Runtime, Server, Pair<'a>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let time = VirtualTime::new(Duration::from_secs(1));
    let master = shared(Master::new(Clock::following(&time)).unwrap());
    let server: Server = runtime.block_on(listen(master.clone())).unwrap();
    let pair = Pair {
        name,
        real: Client::connect(real_server.addr()),
        real_server,
        sim: Client::connect(server.addr()),
        master,
        time,
        history: VecDeque::new(),
        tally: Tally::default(),
        seed,
    };
    (runtime, server, pair)
}

/// Runs `steps` random steps against `real_server` and a fresh simulated master.
fn differential(name: &str, real_server: &RedisServer, seed: u64, steps: usize) -> Tally {
    let (_runtime, server, mut pair) = pair(name, real_server, seed);
    let scripts = scripts::all();
    let mut shas = BTreeMap::new();
    pair.real.call(&argv(&["FLUSHALL"]));
    pair.sim.call(&argv(&["FLUSHALL"]));
    for (name, source) in &scripts {
        let load = vec![
            b"SCRIPT".to_vec(),
            b"LOAD".to_vec(),
            source.clone().into_bytes(),
        ];
        let real = pair.real.call(&load);
        let sim = pair.sim.call(&load);
        assert_eq!(real, sim, "SCRIPT LOAD of {name}");
        shas.insert(*name, real.bulk_str().unwrap());
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for step in 0..steps {
        if rng.random_bool(0.08) {
            std::thread::sleep(Duration::from_millis(rng.random_range(1..=25)));
            pair.tally.sleeps += 1;
        }
        let op = Gen {
            rng: &mut rng,
            scripts: &scripts,
            shas: &shas,
        }
        .next();
        if op.argv[0].starts_with(b"EVAL") {
            pair.tally.scripts += 1;
        }
        if let Err(e) = pair.step(step, &op) {
            pair.fail(step, e);
        }
        pair.tally.steps += 1;
    }
    drop(server);
    pair.tally
}

fn report(name: &str, tally: &Tally, took: Duration) {
    let Tally { outcomes, .. } = tally;
    println!(
        "{name}: {} steps compared in {took:.1?} ({} scripts, {} error replies, {} waits; {} \
         requests matched at the second TIME, {} keyspace reads taken again, {} resyncs after a \
         script ran across a tick; up to {} keys)",
        tally.steps,
        tally.scripts,
        tally.errors,
        tally.sleeps,
        tally.second_instant,
        tally.reread,
        tally.resynced,
        tally.max_keys
    );
    for (kind, shapes) in outcomes {
        let mut shapes: Vec<(&String, &usize)> = shapes.iter().collect();
        shapes.sort_by(|a, b| b.1.cmp(a.1));
        let shown: Vec<String> = shapes
            .iter()
            .take(6)
            .map(|(s, n)| format!("{s} x{n}"))
            .collect();
        println!("  {kind}: {}", shown.join(", "));
    }
}

fn seed() -> u64 {
    match std::env::var("QUORUMLOCK_SIM_SEED") {
        Ok(seed) => seed.parse().expect("QUORUMLOCK_SIM_SEED is a number"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

fn steps() -> usize {
    std::env::var("QUORUMLOCK_SIM_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

#[test]
fn the_simulated_master_answers_as_a_real_redis_server_does() {
    let seed = seed();
    println!("redis-server seed {seed}");
    let started = Instant::now();
    let server = RedisServer::spawn().unwrap();
    let tally = differential("redis-server", &server, seed, steps());
    report("redis-server", &tally, started.elapsed());
    assert_eq!(tally.steps, steps());
    assert!(tally.scripts > steps() / 2, "{} scripts", tally.scripts);
}

#[test]
fn the_simulated_master_answers_as_a_real_valkey_server_does() {
    let Ok(binary) = std::env::var("QUORUMLOCK_VALKEY_SERVER") else {
        println!("QUORUMLOCK_VALKEY_SERVER is not set: nothing compared");
        return;
    };
    let seed = seed();
    println!("valkey-server seed {seed}");
    let started = Instant::now();
    let server = RedisServer::builder().binary(binary).spawn().unwrap();
    let tally = differential("valkey-server", &server, seed, steps());
    report("valkey-server", &tally, started.elapsed());
    assert_eq!(tally.steps, steps());
}

/// Requests the library never sends well-formed or not, whose replies (errors above all) must
/// read the same: each is sent to both servers at the real server's `TIME`.
const EDGES: &[&[&str]] = &[
    &["SET", "k", "v", "PX", "0"],
    &["SET", "k", "v", "PX", "x"],
    &["SET", "k", "v", "EX", "1", "PX", "1"],
    &["SET", "k", "v", "NX", "XX"],
    &["SET", "k", "v", "KEEPTTL", "EX", "5"],
    &["SET", "k", "v", "BOGUS"],
    &["SET", "k"],
    &["SET", "k", "v", "PXAT", "1000"],
    &["EXISTS", "k", "k"],
    &["SET", "k", "v", "PX", "50000"],
    &["SET", "k", "w", "NX", "GET"],
    &["SET", "k", "w", "XX", "GET", "KEEPTTL"],
    &["PTTL", "k"],
    &["PEXPIRE", "k", "10", "NX", "XX"],
    &["PEXPIRE", "k", "10", "GT", "LT"],
    &["PEXPIRE", "k", "10", "BOGUS"],
    &["PEXPIRE", "k", "x"],
    &["PEXPIRE", "k", "9223372036854775807"],
    &["PEXPIRE", "k", "100000", "GT"],
    &["PEXPIRE", "k", "10", "GT"],
    &["PEXPIRE", "k", "10", "LT"],
    &["PERSIST", "k"],
    &["PEXPIRE", "k", "10", "GT"],
    &["PEXPIRE", "k", "10", "XX"],
    &["PEXPIRE", "k", "10", "NX"],
    &["PEXPIRETIME", "missing"],
    &["PTTL", "missing"],
    &["PEXPIRE", "k", "-1"],
    &["TYPE", "k"],
    &["INCR", "n"],
    &["INCRBY", "n", "9223372036854775806"],
    &["INCR", "n"],
    &["SET", "s", "abc"],
    &["INCR", "s"],
    &[
        "ZADD", "z", "1.5", "a", "3", "b", "0.25", "c", "1e20", "d", "-inf", "e",
    ],
    &["ZSCORE", "z", "a"],
    &["ZSCORE", "z", "b"],
    &["ZSCORE", "z", "e"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["ZADD", "z", "nan", "x"],
    &["ZADD", "z", "x", "x"],
    &["ZADD", "z", "1"],
    &["ZADD", "z", "NX", "XX", "1", "a"],
    &["ZADD", "z", "NX", "GT", "1", "a"],
    &["ZADD", "z", "GT", "CH", "2", "a", "0", "b"],
    &["ZADD", "z", "INCR", "1", "a", "2", "b"],
    &["ZADD", "z", "INCR", "2", "a"],
    &["ZRANGE", "z", "(1", "+inf", "BYSCORE", "LIMIT", "1", "2"],
    &[
        "ZRANGE",
        "z",
        "+inf",
        "-inf",
        "BYSCORE",
        "REV",
        "WITHSCORES",
    ],
    &["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"],
    &["ZRANGE", "z", "x", "1", "BYSCORE"],
    &["ZRANGE", "z", "a", "1"],
    &["ZRANGE", "z", "-100", "100"],
    &["ZRANGE", "z", "0", "1", "BOGUS"],
    &["ZCOUNT", "z", "(1.5", "(3"],
    &["ZCOUNT", "z", "((1", "3"],
    &["ZREMRANGEBYSCORE", "z", "-inf", "(2"],
    &["ZCARD", "z"],
    &["ZREM", "z", "a", "b", "c", "d", "e", "zz"],
    &["EXISTS", "z"],
    &["HSET", "h", "f"],
    &["HSET", "h", "f", "1", "g", "2"],
    &["HGETALL", "h"],
    &["HDEL", "h", "f", "g"],
    &["TYPE", "h"],
    &["GET", "z"],
    &["ZADD", "s", "1", "a"],
    &["HGET", "s", "f"],
    &["GET"],
    &["NOSUCHCOMMAND", "a", "b"],
    &["EVAL", "return 3.99", "0"],
    &["EVAL", "return -3.99", "0"],
    &["EVAL", "return {1, 'a', false, true, {2}, nil, 3}", "0"],
    &["EVAL", "return redis.call('GET', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.pcall('INCR', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.call('NOSUCH')", "0"],
    &["EVAL", "return redis.call('GET')", "0"],
    &["EVAL", "return redis.call('GET', {})", "0"],
    &["EVAL", "return redis.call()", "0"],
    &["EVAL", "local x\nreturn x.y", "0"],
    &["EVAL", "return (", "0"],
    &["EVAL", "return 1", "2", "a"],
    &["EVAL", "return 1", "-1"],
    &["EVAL", "return redis.error_reply('MYCODE my message')", "0"],
    &["EVAL", "return redis.status_reply('FINE')", "0"],
    &["EVAL", "return redis.call('TYPE', KEYS[1])", "1", "h"],
    &[
        "EVAL",
        "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')",
        "1",
        "z",
    ],
    &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
    &["SCRIPT", "LOAD", "return 1"],
    &[
        "SCRIPT",
        "EXISTS",
        "e0e1f9fabfc9d4800c877a703b823ac0578ff8db",
        "0000",
    ],
    &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
    &["SPUBLISH", "ch", "hi"],
    &["SELECT", "0"],
    &["WAIT", "0", "0"],
    &["KEYS", "*"],
    &["ZADD", "f", "0.1", "c"],
    &["ZSCORE", "f", "c"],
    &["DEL", "f"],
    &["FLUSHALL"],
    &["DBSIZE"],
];

#[test]
fn the_simulated_master_errs_as_a_real_redis_server_does() {
    edges(&RedisServer::spawn().unwrap(), &[]);
}

/// Where the simulated master, which speaks as Redis 7.0 does, knowingly differs from Valkey:
/// Valkey writes a score by its shortest form (`0.1`, not `0.10000000000000001`) and words some
/// errors of `redis.call` and `EVALSHA` otherwise.
const VALKEY_WORDING: &[&str] = &[
    "ZADD f 0.1 c",
    "ZSCORE f c",
    "EVAL return redis.call('NOSUCH') 0",
    "EVAL return redis.call('GET') 0",
    "EVAL return redis.call('GET', {}) 0",
    "EVAL return redis.call() 0",
    "EVALSHA 0000000000000000000000000000000000000000 0",
];

#[test]
fn the_simulated_master_errs_as_a_real_valkey_server_does() {
    let Ok(binary) = std::env::var("QUORUMLOCK_VALKEY_SERVER") else {
        println!("QUORUMLOCK_VALKEY_SERVER is not set: nothing compared");
        return;
    };
    edges(
        &RedisServer::builder().binary(binary).spawn().unwrap(),
        VALKEY_WORDING,
    );
}

/// Sends every request of [`EDGES`] to both, comparing replies and keyspaces as the random
/// steps do; those in `known` may differ (and are printed, and the simulated keyspace is set to
/// the real one after them).
fn edges(real_server: &RedisServer, known: &[&str]) {
    let (_runtime, _server, mut pair) = pair("edges", real_server, 0);
    pair.real.call(&argv(&["FLUSHALL"]));
    pair.sim.call(&argv(&["FLUSHALL"]));
    let mut differ = Vec::new();
    for (step, args) in EDGES.iter().enumerate() {
        let op = Op {
            label: args.join(" "),
            argv: argv(args),
        };
        if let Err(e) = pair.step(step, &op) {
            if known.contains(&op.label.as_str()) {
                println!("known difference: {e}");
            } else {
                differ.push(e);
            }
            pair.resync();
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} differ:\n{}",
        differ.len(),
        EDGES.len(),
        differ.join("\n")
    );
}

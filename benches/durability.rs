//! What a durable vote costs: quorumlock's acquire + release cycle on three local masters, with
//! grants confirmed or not, at 1 worker and at 32 (each worker on its own resource).
//!
//! | case | masters | durability |
//! |---|---|---|
//! | off | plain (no AOF, no replica) | `Answered`, the default |
//! | replica | each with one replica | `Replicas(1)`: `WAIT 1` behind every grant |
//! | AOF | `appendonly yes`, `appendfsync everysec` | `Aof { local: true, replicas: 0 }`: `WAITAOF 1 0` |
//! | fsync always | `appendonly yes`, `appendfsync always` | `Answered`: the server fsyncs before it answers |
//!
//! In every case the workers share one client, hence one multiplexed connection per master; on
//! it a `WAIT` blocks the connection on the server (a blocked client's next commands are not read
//! until it is unblocked), so the workers queue behind each other's `WAIT`s. At 32 workers, off
//! and replica run a second time with a `Redlock` per worker (its own connection per master), to
//! see whether separate connections serve a durable vote better. On 2026-11-25 (2 cores, the
//! bench alone): the blocked `WAIT`s are most of the cost on a shared connection (`Replicas(1)`
//! at 0.28× shared off, against 0.73× per-worker off on connections of their own), but 96
//! connections cost the plain cycle about half (per-worker off at 0.49× shared off), so
//! per-worker `Replicas(1)` gains only 1.13× over the shared client's. A run on a machine loaded
//! by other jobs saw 0.95×.
//!
//! ```text
//! cargo bench --bench durability                            # the full run (about 2 minutes)
//! QUORUMLOCK_BENCH_QUICK=1 cargo bench --bench durability   # a smoke run
//! ```
//!
//! Every case runs valkey-server (Valkey 9, the path printed by `scripts/ensure-valkey-server.sh`,
//! which honours `QUORUMLOCK_VALKEY_SERVER`): all four run the same server, and it has
//! `WAITAOF`. The four sets of masters run side by side for the whole bench. Runs are
//! interleaved: each run measures every case at 1 worker, then at 32 (the per-worker clients
//! included), starting from a different case each run. Figures are medians over runs; ratios
//! against "off" are computed within each run, then their median taken.
//!
//! At one worker the AOF case is bound by the server's clock, not its disk: with `appendfsync
//! everysec` the fsync `WAITAOF` asks for is done by a background thread, and an idle server only
//! sees it done at its next `serverCron` tick (`hz`, 10 by default: up to 100 ms). Checked by hand
//! on one valkey-server 9.1.2, `SET` + `WAITAOF 1 0` in a loop: p50 100 ms at `hz 10`, 10 ms at
//! `hz 100`. More traffic wakes the server sooner, so 32 workers do not see it.
//!
//! Settings, by environment variable: `QUORUMLOCK_BENCH_SECS` (window, 2.5 s),
//! `QUORUMLOCK_BENCH_WARMUP` (0.5 s), `QUORUMLOCK_BENCH_RUNS` (3); `QUORUMLOCK_BENCH_QUICK=1`
//! makes them 0.5, 0.2 and 1. A full run also writes its report to
//! `benches/results/durability-DATE.md`.

mod support;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{Durability, Redlock};
use quorumlock_testkit::figures::{group_digits, percentile};
use quorumlock_testkit::{RedisServer, RedisServerBuilder};

use support::{env_or, median, TTL};

const MASTERS: usize = 3;
const MANY: usize = 32;
const WORKERS: [usize; 2] = [1, MANY];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Case {
    Off,
    Replica,
    Aof,
    FsyncAlways,
}

impl Case {
    const ALL: [Case; 4] = [Case::Off, Case::Replica, Case::Aof, Case::FsyncAlways];

    fn masters(self) -> &'static str {
        match self {
            Case::Off => "plain",
            Case::Replica => "one replica each",
            Case::Aof => "AOF, fsync everysec",
            Case::FsyncAlways => "AOF, fsync always",
        }
    }

    fn durability(self) -> Durability {
        match self {
            Case::Off | Case::FsyncAlways => Durability::Answered,
            Case::Replica => Durability::Replicas(1),
            Case::Aof => Durability::Aof {
                local: true,
                replicas: 0,
            },
        }
    }
}

/// One row of the table: a case at a worker count, its workers sharing one client or each with
/// its own (hence its own connection to each master).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Row {
    workers: usize,
    case: Case,
    own_clients: bool,
}

impl Row {
    /// Every case at each worker count on one shared client, then off and `Replicas(1)` at
    /// [`MANY`] workers with a client per worker.
    fn all() -> Vec<Row> {
        let shared = WORKERS.into_iter().flat_map(|workers| {
            Case::ALL.map(|case| Row {
                workers,
                case,
                own_clients: false,
            })
        });
        let own = [Case::Off, Case::Replica].map(|case| Row {
            workers: MANY,
            case,
            own_clients: true,
        });
        shared.chain(own).collect()
    }

    fn clients(self) -> &'static str {
        if self.own_clients {
            "one per worker"
        } else {
            "shared"
        }
    }
}

struct Config {
    secs: f64,
    warmup: f64,
    runs: usize,
    quick: bool,
}

impl Config {
    fn from_env() -> Config {
        let quick = env_or("QUORUMLOCK_BENCH_QUICK", 0u8) == 1;
        Config {
            secs: env_or("QUORUMLOCK_BENCH_SECS", if quick { 0.5 } else { 2.5 }),
            warmup: env_or("QUORUMLOCK_BENCH_WARMUP", if quick { 0.2 } else { 0.5 }),
            runs: env_or("QUORUMLOCK_BENCH_RUNS", if quick { 1 } else { 3 }),
            quick,
        }
    }
}

/// One case's masters, and the replicas behind them, running until dropped.
struct Masters {
    urls: Vec<String>,
    servers: Vec<RedisServer>,
}

fn spawn(case: Case, valkey: &Path) -> Masters {
    let server = RedisServerBuilder::new().binary(valkey);
    let master = match case {
        Case::Off => server.clone(),
        // Start the replica's full sync at once (the server waits 5 s for more replicas).
        Case::Replica => server.clone().arg("--repl-diskless-sync-delay").arg("0"),
        // `aof(true)` is `--appendonly yes --appendfsync always`; a later argument overrides.
        Case::Aof => server
            .clone()
            .aof(true)
            .arg("--appendfsync")
            .arg("everysec"),
        Case::FsyncAlways => server.clone().aof(true),
    };
    let mut servers: Vec<RedisServer> = (0..MASTERS)
        .map(|_| master.clone().spawn().unwrap())
        .collect();
    let urls = servers.iter().map(RedisServer::url).collect();
    if case == Case::Replica {
        let replicas: Vec<RedisServer> = servers
            .iter()
            .map(|m| {
                server
                    .clone()
                    .arg("--replicaof")
                    .arg("127.0.0.1")
                    .arg(m.port().to_string())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let started = Instant::now();
        while !servers
            .iter()
            .all(|m| info(m, "replication").contains("state=online"))
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "replicas never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        servers.extend(replicas);
    }
    Masters { urls, servers }
}

fn info(server: &RedisServer, section: &str) -> String {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("INFO")
        .arg(section)
        .query(&mut connection)
        .unwrap()
}

/// What the workers of one measurement saw inside the window.
#[derive(Default)]
struct Measurement {
    cycles: usize,
    secs: f64,
    /// Successful acquires, sorted.
    acquire: Vec<Duration>,
    /// Acquires or releases that failed.
    errors: usize,
    last_error: Option<String>,
}

impl Measurement {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.secs
    }

    fn acquire_p(&self, p: f64) -> Duration {
        percentile(&self.acquire, p).unwrap_or_default()
    }

    fn merge(&mut self, other: Measurement) {
        self.cycles += other.cycles;
        self.acquire.extend(other.acquire);
        self.errors += other.errors;
        self.last_error = other.last_error.or(self.last_error.take());
    }
}

/// The row's workers on fresh clients (one shared, or one each), each cycling acquire + release
/// on its own resource; what completed inside the window after the warm-up.
async fn measure(urls: &[String], row: Row, tag: &str, cfg: &Config) -> Measurement {
    let mut clients = Vec::new();
    for _ in 0..if row.own_clients { row.workers } else { 1 } {
        let rl = Redlock::builder(urls)
            .durability(row.case.durability())
            .build()
            .unwrap();
        let health = rl.connect().await.unwrap();
        assert!(health.unreachable.is_empty(), "{:?}", health.unreachable);
        clients.push(rl);
    }
    let counting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..row.workers)
        .map(|i| {
            let rl = clients[i % clients.len()].clone();
            let (counting, done) = (counting.clone(), done.clone());
            let resource = format!("r{i}:{tag}");
            tokio::spawn(async move {
                let mut seen = Measurement::default();
                while !done.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let acquired = rl.acquire(&resource, TTL).await;
                    let took = started.elapsed();
                    let cycle = match acquired {
                        Ok(lock) => lock.release().await.map(drop),
                        Err(e) => Err(e),
                    };
                    if counting.load(Ordering::Relaxed) {
                        match cycle {
                            Ok(()) => {
                                seen.cycles += 1;
                                seen.acquire.push(took);
                            }
                            Err(e) => {
                                seen.errors += 1;
                                seen.last_error = Some(e.to_string());
                            }
                        }
                    }
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(cfg.warmup)).await;
    counting.store(true, Ordering::Relaxed);
    let opened = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
    counting.store(false, Ordering::Relaxed);
    let mut m = Measurement {
        secs: opened.elapsed().as_secs_f64(),
        ..Measurement::default()
    };
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        m.merge(task.await.unwrap());
    }
    m.acquire.sort_unstable();
    m
}

fn main() {
    let cfg = Config::from_env();
    let started = Instant::now();
    let load_before = loadavg();
    let valkey = valkey_server();
    let masters: HashMap<Case, Masters> = Case::ALL
        .into_iter()
        .map(|case| (case, spawn(case, &valkey)))
        .collect();
    let version = server_version(&masters[&Case::Off]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Per row, one measurement per run, in run order.
    let mut results: HashMap<Row, Vec<Measurement>> = HashMap::new();
    let mut log = Vec::new();
    for run in 0..cfg.runs {
        for workers in WORKERS {
            let rows: Vec<Row> = Row::all()
                .into_iter()
                .filter(|r| r.workers == workers)
                .collect();
            for k in 0..rows.len() {
                let row = rows[(k + run) % rows.len()];
                let tag = format!("{run}:{workers}:{k}");
                let m = runtime.block_on(measure(&masters[&row.case].urls, row, &tag, &cfg));
                let line = format!(
                    "run {}/{} w={workers:<2} {:<14} {:<20} {:>6.0} cycles/s, acquire p50 {}, p99 {}, errors {}{}",
                    run + 1,
                    cfg.runs,
                    row.clients(),
                    row.case.masters(),
                    m.rate(),
                    latency(m.acquire_p(0.5)),
                    latency(m.acquire_p(0.99)),
                    m.errors,
                    m.last_error.as_deref().map(|e| format!(" (last: {e})")).unwrap_or_default(),
                );
                eprintln!("{line}");
                log.push(line);
                results.entry(row).or_default().push(m);
            }
        }
    }
    drop(runtime);
    drop(masters);

    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        "## What a durable vote costs: {MASTERS} masters, {version}"
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "`cargo bench --bench durability` on commit {}, {}. {} CPU(s), load average {load_before} before, {} after; server directories on {} ({}); {:.0} s.",
        sh("git", &["describe", "--always", "--dirty"]),
        sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        std::env::temp_dir().display(),
        sh("df", &["--output=fstype", &std::env::temp_dir().display().to_string()]).lines().last().unwrap_or("?").trim(),
        started.elapsed().as_secs_f64(),
    )
    .unwrap();
    writeln!(
        w,
        "Medians of {} interleaved run(s), {} s windows after {} s warm-up; ratios against shared-client \"off\" at the same worker count, computed within each run (per-run values in brackets), and for `Replicas(1)` on one client per worker also against \"off\" on one client per worker. One client per measurement, shared by its workers (one multiplexed connection per master, on which a blocked `WAIT` holds up every command behind it), except the rows \"one per worker\": a `Redlock` per worker, hence a connection per worker and master. Each worker on its own resource; TTL {TTL:?}, default settings otherwise (node timeout TTL / 20 = 500 ms).",
        cfg.runs, cfg.secs, cfg.warmup,
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(w, "| workers | clients | masters | durability | cycles/s | cycles/s vs off | acquire p50 | acquire p99 | p50 vs off | errors |").unwrap();
    writeln!(w, "|---:|---|---|---|---:|---|---:|---:|---|---:|").unwrap();
    let p50 = |m: &Measurement| m.acquire_p(0.5).as_secs_f64();
    for row in Row::all() {
        let runs = &results[&row];
        let of = |f: fn(&Measurement) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        // Against shared-client off; a durable row on its own clients also against off on its own.
        let vs = |f: fn(&Measurement) -> f64| {
            let off = |own_clients| {
                let off = Row {
                    case: Case::Off,
                    own_clients,
                    ..row
                };
                ratios(runs, &results[&off], f)
            };
            if row.own_clients && row.case != Case::Off {
                format!("{} (vs off, one per worker: {})", off(false), off(true))
            } else {
                off(false)
            }
        };
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.workers,
            row.clients(),
            row.case.masters(),
            match row.case.durability() {
                Durability::Answered => "off".to_owned(),
                d => format!("`{d:?}`"),
            },
            group_digits(of(Measurement::rate).round() as u64),
            vs(Measurement::rate),
            latency(Duration::from_secs_f64(of(p50))),
            latency(Duration::from_secs_f64(of(|m| m
                .acquire_p(0.99)
                .as_secs_f64()))),
            vs(p50),
            runs.iter().map(|m| m.errors).sum::<usize>(),
        )
        .unwrap();
    }
    let replica = |own_clients| {
        &results[&Row {
            workers: MANY,
            case: Case::Replica,
            own_clients,
        }]
    };
    writeln!(w).unwrap();
    writeln!(
        w,
        "Separate connections against the shared one, for `Replicas(1)` at {MANY} workers: one client per worker runs at {} the cycles/s of one shared client, with {} its acquire p50.",
        ratios(replica(true), replica(false), Measurement::rate),
        ratios(replica(true), replica(false), p50),
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(w, "Each measurement, in the order taken:").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "```text\n{}\n```", log.join("\n")).unwrap();

    println!("{out}");
    if cfg.quick {
        eprintln!("(a quick run: not saved)");
    } else {
        let date = sh("date", &["-u", "+%Y-%m-%d"]);
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("benches/results/durability-{date}.md"));
        std::fs::write(&path, &out).unwrap();
        eprintln!("written to {}", path.display());
    }
}

/// `f(a) / f(b)` within each run: "median× [run 1, run 2, …]".
fn ratios(a: &[Measurement], b: &[Measurement], f: fn(&Measurement) -> f64) -> String {
    let per_run: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    let list: Vec<String> = per_run.iter().map(|&r| digits(r)).collect();
    format!("{}× [{}]", digits(median(&per_run)), list.join(", "))
}

/// Two decimals, or four below 0.01 (so that a small ratio does not read as zero).
fn digits(r: f64) -> String {
    if r.abs() < 0.01 {
        format!("{r:.4}")
    } else {
        format!("{r:.2}")
    }
}

/// Microseconds below 10 ms, milliseconds above.
fn latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// The valkey-server binary, fetched into `target/valkey/` on first use.
fn valkey_server() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-valkey-server.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{} failed", script.display());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// "valkey 9.1.2" (or "redis 7.2.4" for a server that is not Valkey).
fn server_version(masters: &Masters) -> String {
    let info = info(&masters.servers[0], "server");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    match field("valkey_version:") {
        Some(v) => format!("valkey-server {v}"),
        None => format!("redis-server {}", field("redis_version:").unwrap_or("?")),
    }
}

/// The 1, 5 and 15 minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A command's trimmed stdout; empty when it cannot run.
fn sh(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

//! What a durable vote costs: quorumlock's acquire + release cycle on three voters, with grants
//! confirmed or not, at 1 worker and at 32 (each worker on its own resource), on two kinds of
//! voter: three standalone masters, and three Redis Cluster voters.
//!
//! | case | masters (each Cluster primary alike) | durability |
//! |---|---|---|
//! | off | plain (no AOF, no replica) | `Answered`, the default |
//! | replica | each with one replica | `Replicas(1)`: `WAIT 1` behind every grant |
//! | AOF | `appendonly yes`, `appendfsync everysec` | `Aof { local: true, replicas: 0 }`: `WAITAOF 1 0` |
//! | fsync always | `appendonly yes`, `appendfsync always` | `Answered`: the server fsyncs before it answers |
//!
//! A Cluster voter has 3 primaries (the fewest `redis-cli --cluster create` accepts), each with a
//! replica of its own in the replica case: 3 voters × 3 primaries, 9 more replicas for that case,
//! so 45 cluster nodes beside the 15 standalone servers, 60 processes for the whole bench (each
//! case's three clusters start one after another, about 6 s a case on this machine). On a Cluster
//! voter the `WAIT`/`WAITAOF` goes to the primary of the resource's slot, on the connection that
//! carried the script. The report has one table per kind of voter, measured in the same runs,
//! each row's ratios against "off" on the same kind of voter; the Cluster table also compares each
//! row with the standalone row of the same case.
//!
//! In every case the workers share one client, hence one multiplexed connection per master (per
//! shard primary on a Cluster voter); on it a `WAIT` blocks the connection on the server (a
//! blocked client's next commands are not read until it is unblocked), so the workers queue
//! behind each other's `WAIT`s. At 32 workers, off and replica on the standalone masters run a
//! second time with a `Redlock` per worker (its own connection per master), to see whether
//! separate connections serve a durable vote better. On 2026-11-25 (2 cores, the bench alone):
//! the blocked `WAIT`s are most of the cost on a shared connection (`Replicas(1)` at 0.28× shared
//! off, against 0.73× per-worker off on connections of their own), but 96 connections cost the
//! plain cycle about half (per-worker off at 0.49× shared off), so per-worker `Replicas(1)` gains
//! only 1.13× over the shared client's. A run on a machine loaded by other jobs saw 0.95×.
//!
//! On 2026-11-26, 5 runs with both kinds (`QUORUMLOCK_BENCH_RUNS=5`; 2 cores shared with other
//! jobs, load average 4.8 before and up to 21 during the run, so every figure is noisy;
//! `benches/results/durability-2026-11-26-cluster.md`), ratios against "off" of the same kind:
//!
//! | workers | durability | 3 standalone masters | 3 Cluster voters |
//! |---:|---|---|---|
//! | 1 | `Replicas(1)` | 0.47× | 0.55× |
//! | 1 | `Aof { local: true, replicas: 0 }` (everysec) | 0.0015× | 0.0028× |
//! | 1 | off, `appendfsync always` | 0.18× | 0.20× |
//! | 32 | `Replicas(1)` | 0.19× | 0.46× |
//! | 32 | `Aof { local: true, replicas: 0 }` (everysec) | 0.32× | 0.58× |
//! | 32 | off, `appendfsync always` | 0.34× | 0.48× |
//!
//! "Off" itself: 6,603 cycles/s on the masters and 5,771 on the Cluster voters at 1 worker
//! (0.87× per run's median), 30,955 and 16,244 at 32 (0.56×). A durable vote costs a Cluster voter
//! about what it costs a master at 1 worker; at 32 workers its ratios read higher, partly because
//! its "off" is lower, partly, presumably, because the workers' `WAIT`s block three primaries'
//! connections per voter rather than one: `Replicas(1)` ran at 1.35× the masters' cycles/s on the
//! Cluster voters (per run 1.62, 0.32, 1.36, 1.35, 1.29). An earlier full run the same day (3
//! runs, load 2.8 to 12.8) saw, at 32 workers, 0.33× for `Replicas(1)` on the Cluster voters
//! against 0.37× on the masters, and 1.06× the masters' cycles/s, so that difference is within
//! this machine's noise.
//!
//! ```text
//! cargo bench --bench durability                            # the full run (about 4 minutes)
//! QUORUMLOCK_BENCH_QUICK=1 cargo bench --bench durability   # a smoke run
//! ```
//!
//! Every case runs valkey-server (Valkey 9, the path printed by `scripts/ensure-valkey-server.sh`,
//! which honours `QUORUMLOCK_VALKEY_SERVER`): all eight (four cases, two kinds of voter) run the
//! same server, and it has `WAITAOF`. The eight sets of voters run side by side for the whole
//! bench. Runs are interleaved: each run measures every case of both kinds at 1 worker, then at
//! 32 (the per-worker clients included), starting from a different row each run. Figures are medians over runs; ratios
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
use quorumlock_testkit::{RedisCluster, RedisServer, RedisServerBuilder};

use support::{env_or, median, TTL};

/// Voters of each kind, in every case.
const VOTERS: usize = 3;
/// Primaries of each Cluster voter: the fewest `redis-cli --cluster create` accepts.
const PRIMARIES: usize = 3;
const MANY: usize = 32;
const WORKERS: [usize; 2] = [1, MANY];

/// What each of the three voters is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// A standalone master (`redis://`).
    Standalone,
    /// A Redis Cluster of [`PRIMARIES`] primaries (`redis+cluster://`).
    Cluster,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Standalone, Kind::Cluster];

    fn name(self) -> &'static str {
        match self {
            Kind::Standalone => "standalone",
            Kind::Cluster => "Cluster",
        }
    }
}

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

/// One row of the tables: a case at a worker count on voters of one kind, its workers sharing
/// one client or each with its own (hence its own connection to each master).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Row {
    kind: Kind,
    workers: usize,
    case: Case,
    own_clients: bool,
}

impl Row {
    /// Per kind of voter, every case at each worker count on one shared client; then, on the
    /// standalone masters, off and `Replicas(1)` at [`MANY`] workers with a client per worker.
    fn all() -> Vec<Row> {
        let shared = Kind::ALL.into_iter().flat_map(|kind| {
            WORKERS.into_iter().flat_map(move |workers| {
                Case::ALL.map(|case| Row {
                    kind,
                    workers,
                    case,
                    own_clients: false,
                })
            })
        });
        let own = [Case::Off, Case::Replica].map(|case| Row {
            kind: Kind::Standalone,
            workers: MANY,
            case,
            own_clients: true,
        });
        shared.chain(own).collect()
    }

    /// "Off" on the same voters, at the same worker count, on a shared client (or on a client
    /// per worker, with `own_clients`).
    fn off(self, own_clients: bool) -> Row {
        Row {
            case: Case::Off,
            own_clients,
            ..self
        }
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

/// One case's voters, and the replicas behind them, running until dropped.
struct Voters {
    urls: Vec<String>,
    servers: Vec<RedisServer>,
    clusters: Vec<RedisCluster>,
}

/// The server every node of `case` starts from.
fn server(case: Case, valkey: &Path) -> RedisServerBuilder {
    let server = RedisServerBuilder::new().binary(valkey);
    match case {
        Case::Off => server,
        // Start the replica's full sync at once (the server waits 5 s for more replicas).
        Case::Replica => server.arg("--repl-diskless-sync-delay").arg("0"),
        // `aof(true)` is `--appendonly yes --appendfsync always`; a later argument overrides.
        Case::Aof => server.aof(true).arg("--appendfsync").arg("everysec"),
        Case::FsyncAlways => server.aof(true),
    }
}

fn spawn(kind: Kind, case: Case, valkey: &Path) -> Voters {
    match kind {
        Kind::Standalone => spawn_masters(case, valkey),
        Kind::Cluster => spawn_clusters(case, valkey),
    }
}

fn spawn_masters(case: Case, valkey: &Path) -> Voters {
    let master = server(case, valkey);
    let mut servers: Vec<RedisServer> = (0..VOTERS)
        .map(|_| master.clone().spawn().unwrap())
        .collect();
    let urls = servers.iter().map(RedisServer::url).collect();
    if case == Case::Replica {
        let replicas: Vec<RedisServer> = servers
            .iter()
            .map(|m| {
                RedisServerBuilder::new()
                    .binary(valkey)
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
    Voters {
        urls,
        servers,
        clusters: Vec::new(),
    }
}

/// Three clusters of [`PRIMARIES`] primaries, each primary with a replica in the replica case,
/// started one after another (on two cores, clusters created at once time out). The cluster
/// builder returns once every replica's link is up.
fn spawn_clusters(case: Case, valkey: &Path) -> Voters {
    let replicas = usize::from(case == Case::Replica);
    let clusters: Vec<RedisCluster> = (0..VOTERS)
        .map(|_| {
            RedisCluster::builder()
                .primaries(PRIMARIES)
                .replicas_per_primary(replicas)
                .server(server(case, valkey))
                .spawn()
                .unwrap()
        })
        .collect();
    Voters {
        urls: clusters.iter().map(RedisCluster::url).collect(),
        servers: Vec::new(),
        clusters,
    }
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
    let voters: HashMap<(Kind, Case), Voters> = Kind::ALL
        .into_iter()
        .flat_map(|kind| Case::ALL.map(|case| (kind, case)))
        .map(|(kind, case)| {
            let spawning = Instant::now();
            let voters = spawn(kind, case, &valkey);
            eprintln!(
                "{} voters, {}: started in {:.1} s",
                kind.name(),
                case.masters(),
                spawning.elapsed().as_secs_f64()
            );
            ((kind, case), voters)
        })
        .collect();
    let processes: usize = voters
        .values()
        .map(|v| v.servers.len() + v.clusters.iter().map(RedisCluster::len).sum::<usize>())
        .sum();
    let version = server_version(&voters[&(Kind::Standalone, Case::Off)].servers[0]);
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
                let urls = &voters[&(row.kind, row.case)].urls;
                let m = runtime.block_on(measure(urls, row, &tag, &cfg));
                let line = format!(
                    "run {}/{} w={workers:<2} {:<10} {:<14} {:<20} {:>6.0} cycles/s, acquire p50 {}, p99 {}, errors {}{}; load {}",
                    run + 1,
                    cfg.runs,
                    row.kind.name(),
                    row.clients(),
                    row.case.masters(),
                    m.rate(),
                    latency(m.acquire_p(0.5)),
                    latency(m.acquire_p(0.99)),
                    m.errors,
                    m.last_error.as_deref().map(|e| format!(" (last: {e})")).unwrap_or_default(),
                    loadavg(),
                );
                eprintln!("{line}");
                log.push(line);
                results.entry(row).or_default().push(m);
            }
        }
    }
    drop(runtime);
    drop(voters);

    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        "## What a durable vote costs: {VOTERS} standalone masters, and {VOTERS} Cluster voters of {PRIMARIES} primaries; {version}"
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "`cargo bench --bench durability` on commit {}, {}. {} CPU(s), load average {load_before} before, {} after (see the load after each measurement below); {processes} server processes, all running for the whole bench; server directories on {} ({}); {:.0} s.",
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
        "Medians of {} interleaved run(s) (both kinds of voter in each run), {} s windows after {} s warm-up; ratios against shared-client \"off\" on the same kind of voter at the same worker count, computed within each run (per-run values in brackets), and for `Replicas(1)` on one client per worker also against \"off\" on one client per worker. One client per measurement, shared by its workers (one multiplexed connection per master or shard primary, on which a blocked `WAIT` holds up every command behind it), except the rows \"one per worker\": a `Redlock` per worker, hence a connection per worker and master. Each worker on its own resource; TTL {TTL:?}, default settings otherwise (node timeout TTL / 20 = 500 ms).",
        cfg.runs, cfg.secs, cfg.warmup,
    )
    .unwrap();
    let p50 = |m: &Measurement| m.acquire_p(0.5).as_secs_f64();
    let p99 = |m: &Measurement| m.acquire_p(0.99).as_secs_f64();
    let durability = |case: Case| match case.durability() {
        Durability::Answered => "off".to_owned(),
        d => format!("`{d:?}`"),
    };

    writeln!(w).unwrap();
    writeln!(w, "### {VOTERS} standalone masters").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "| workers | clients | masters | durability | cycles/s | cycles/s vs off | acquire p50 | acquire p99 | p50 vs off | errors |").unwrap();
    writeln!(w, "|---:|---|---|---|---:|---|---:|---:|---|---:|").unwrap();
    for row in Row::all()
        .into_iter()
        .filter(|r| r.kind == Kind::Standalone)
    {
        let runs = &results[&row];
        let of = |f: fn(&Measurement) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        // Against shared-client off; a durable row on its own clients also against off on its own.
        let vs = |f: fn(&Measurement) -> f64| {
            let off = |own_clients| ratios(runs, &results[&row.off(own_clients)], f);
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
            durability(row.case),
            group_digits(of(Measurement::rate).round() as u64),
            vs(Measurement::rate),
            latency(Duration::from_secs_f64(of(p50))),
            latency(Duration::from_secs_f64(of(p99))),
            vs(p50),
            runs.iter().map(|m| m.errors).sum::<usize>(),
        )
        .unwrap();
    }
    let replica = |own_clients| {
        &results[&Row {
            kind: Kind::Standalone,
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
    writeln!(w, "### {VOTERS} Cluster voters of {PRIMARIES} primaries").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "Every primary of a voter as the standalone masters of the same case (with a replica of its own in the replica case); a resource's keys live on one primary of each voter. \"vs standalone\": against the standalone masters' row of the same case and worker count, within each run.").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "| workers | primaries | durability | cycles/s | cycles/s vs off | cycles/s vs standalone | acquire p50 | acquire p99 | p50 vs off | errors |").unwrap();
    writeln!(w, "|---:|---|---|---:|---|---|---:|---:|---|---:|").unwrap();
    for row in Row::all().into_iter().filter(|r| r.kind == Kind::Cluster) {
        let runs = &results[&row];
        let of = |f: fn(&Measurement) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let off = &results[&row.off(false)];
        let standalone = &results[&Row {
            kind: Kind::Standalone,
            ..row
        }];
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.workers,
            row.case.masters(),
            durability(row.case),
            group_digits(of(Measurement::rate).round() as u64),
            ratios(runs, off, Measurement::rate),
            ratios(runs, standalone, Measurement::rate),
            latency(Duration::from_secs_f64(of(p50))),
            latency(Duration::from_secs_f64(of(p99))),
            ratios(runs, off, p50),
            runs.iter().map(|m| m.errors).sum::<usize>(),
        )
        .unwrap();
    }
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

/// "valkey-server 9.1.2" (or "redis-server 7.2.4" for a server that is not Valkey).
fn server_version(server: &RedisServer) -> String {
    let info = info(server, "server");
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

//! The side-by-side comparison: quorumlock, the `rslock` crate and the raw floor on the same local
//! masters, for every case of the performance issue. Prints a Markdown report on stdout (progress
//! on stderr).
//!
//! ```text
//! cargo bench --bench compare                           # the full run (about 5 minutes)
//! QUORUMLOCK_BENCH_QUICK=1 cargo bench --bench compare  # a smoke run (about 1 minute)
//! ```
//!
//! Every measurement builds fresh clients in a fresh tokio runtime, warms them up, then counts
//! the cycles that complete inside a fixed window. Runs are interleaved (quorumlock, rslock, raw,
//! quorumlock, rslock, raw, …) so that noise from the shared machine hits all three alike; each
//! figure is the median over runs, and each ratio is computed inside one run, then its median
//! taken.
//!
//! Settings, by environment variable (all optional):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `QUORUMLOCK_BENCH_QUICK` | unset | `1`: secs 0.5, warmup 0.2, settle 0.5, runs 1 |
//! | `QUORUMLOCK_BENCH_SECS` | 2 | measured window of one measurement, seconds |
//! | `QUORUMLOCK_BENCH_WARMUP` | 0.5 | warm-up before each window, seconds |
//! | `QUORUMLOCK_BENCH_SETTLE` | 1 | paused case: time between the pause and the window |
//! | `QUORUMLOCK_BENCH_GRACE` | 5 | how long in-flight cycles may run past a window |
//! | `QUORUMLOCK_BENCH_RUNS` | 3 | interleaved runs (medians need ≥ 3) |
//! | `QUORUMLOCK_BENCH_WORKERS` | 32 | the "many workers" count of cases 1–3 and 5 |
//! | `QUORUMLOCK_BENCH_CASES` | 1,2,3,4,5 | which cases to run (6, CPU, comes with 1) |
//!
//! With `QUORUMLOCK_BENCH_PROFILE` set, it runs a fixed number of cycles of one client instead,
//! for profiling (see `profile`).

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock_testkit::{FaultProxy, RedisNodes, RedisServer};

use support::{env_or, median, micros, process_cpu, quantile, servers_cpu, Client, Kind};

/// The latency the proxy adds to one master, per round trip (half each way).
const SLOW_BY: Duration = Duration::from_millis(20);
/// Workers on the one resource of the contended case.
const CONTENDED_WORKERS: usize = 8;
/// How long a contended worker waits after its release before it tries again.
const CONTENDED_PAUSE: Duration = Duration::from_millis(1);
/// Master counts of the scaling case.
const SCALING: [usize; 4] = [1, 3, 5, 7];

#[derive(Debug, Clone)]
struct Config {
    secs: f64,
    warmup: f64,
    settle: f64,
    grace: f64,
    runs: usize,
    workers: usize,
    cases: Vec<u8>,
}

impl Config {
    fn from_env() -> Config {
        let quick = env_or("QUORUMLOCK_BENCH_QUICK", 0u8) == 1;
        let cases: String = env_or("QUORUMLOCK_BENCH_CASES", "1,2,3,4,5".to_owned());
        Config {
            secs: env_or("QUORUMLOCK_BENCH_SECS", if quick { 0.5 } else { 2.0 }),
            warmup: env_or("QUORUMLOCK_BENCH_WARMUP", if quick { 0.2 } else { 0.5 }),
            settle: env_or("QUORUMLOCK_BENCH_SETTLE", if quick { 0.5 } else { 1.0 }),
            grace: env_or("QUORUMLOCK_BENCH_GRACE", 5.0),
            runs: env_or("QUORUMLOCK_BENCH_RUNS", if quick { 1 } else { 3 }),
            workers: env_or("QUORUMLOCK_BENCH_WORKERS", 32),
            cases: cases
                .split(',')
                .map(|c| {
                    c.trim()
                        .parse()
                        .expect("QUORUMLOCK_BENCH_CASES: numbers 1-6")
                })
                .collect(),
        }
    }

    fn has(&self, case: u8) -> bool {
        self.cases.contains(&case)
    }
}

/// What one measurement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    /// Cases 1 and 5: nothing wrong, `nodes` masters.
    Healthy,
    /// Case 2: master 0 of five behind a proxy adding [`SLOW_BY`].
    Slow,
    /// Case 3: master 0 of five paused with `SIGSTOP` during the window.
    Paused,
    /// Case 4: [`CONTENDED_WORKERS`] workers on one resource.
    Contended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    case: Case,
    nodes: usize,
    workers: usize,
    kind: Kind,
}

/// One measurement's results.
#[derive(Debug, Default, Clone)]
struct Measurement {
    /// Cycles (acquire + release) completed inside the window.
    cycles: usize,
    secs: f64,
    /// Sorted, microseconds.
    acquire: Vec<u32>,
    release: Vec<u32>,
    /// Contended: from a holder's call to release to the next holder's acquire returning.
    gaps: Vec<u32>,
    /// Cycles completed by each worker inside the window.
    per_worker: Vec<usize>,
    /// Acquires that returned an error inside the window (after the client's own retries).
    failed_acquires: usize,
    failed_releases: usize,
    last_error: Option<String>,
    /// Process CPU time (user + system) in the window, divided by the cycles.
    cpu_per_cycle: Option<Duration>,
    /// The masters' CPU time in the window, divided by the cycles.
    server_cpu_per_cycle: Option<Duration>,
    /// Workers still inside a cycle when the grace period after the window ran out.
    stalled: usize,
    /// Contended: times two workers were inside the critical section at once (must be 0).
    overlaps: usize,
}

impl Measurement {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.secs
    }

    fn acquire_p(&self, q: f64) -> f64 {
        f64::from(quantile(&self.acquire, q))
    }

    fn release_p(&self, q: f64) -> f64 {
        f64::from(quantile(&self.release, q))
    }

    fn gap_p(&self, q: f64) -> f64 {
        f64::from(quantile(&self.gaps, q))
    }

    fn fairness(&self) -> f64 {
        let min = self.per_worker.iter().min().copied().unwrap_or(0);
        let max = self.per_worker.iter().max().copied().unwrap_or(0);
        if max == 0 {
            f64::NAN
        } else {
            min as f64 / max as f64
        }
    }

    fn cpu_us(&self) -> f64 {
        self.cpu_per_cycle
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }

    fn server_cpu_us(&self) -> f64 {
        self.server_cpu_per_cycle
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }
}

/// What one worker saw.
#[derive(Default)]
struct WorkerLog {
    /// (completed at, acquire µs, release µs)
    cycles: Vec<(Instant, u32, u32)>,
    /// (acquired at, gap µs)
    gaps: Vec<(Instant, u32)>,
    failed_acquires: Vec<Instant>,
    failed_releases: Vec<Instant>,
    last_error: Option<String>,
}

/// State the workers of one measurement share.
struct Shared {
    stop: AtomicBool,
    contended: bool,
    /// Contended: when the last holder called release.
    last_release: Mutex<Option<Instant>>,
    inside: AtomicBool,
    overlaps: AtomicUsize,
}

async fn worker(client: Arc<Client>, resource: String, shared: Arc<Shared>) -> WorkerLog {
    let mut log = WorkerLog::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let held = match client.acquire(&resource).await {
            Ok(held) => held,
            Err(e) => {
                log.failed_acquires.push(Instant::now());
                log.last_error = Some(e);
                continue;
            }
        };
        let t1 = Instant::now();
        if shared.contended {
            if shared.inside.swap(true, Ordering::SeqCst) {
                shared.overlaps.fetch_add(1, Ordering::Relaxed);
            }
            let mut last = shared.last_release.lock().unwrap();
            if let Some(released) = last.take() {
                log.gaps
                    .push((t1, micros(t1.saturating_duration_since(released))));
            }
            shared.inside.store(false, Ordering::SeqCst);
            *last = Some(Instant::now());
        }
        let t2 = Instant::now();
        let released = client.release(held).await;
        let t3 = Instant::now();
        if let Err(e) = released {
            log.failed_releases.push(t3);
            log.last_error = Some(e);
        }
        log.cycles.push((t3, micros(t1 - t0), micros(t3 - t2)));
        if shared.contended {
            tokio::time::sleep(CONTENDED_PAUSE).await;
        }
    }
    log
}

/// What one measurement runs against.
struct Spec<'a> {
    kind: Kind,
    case: Case,
    urls: &'a [String],
    /// The masters' process ids, for their CPU time.
    pids: Vec<u32>,
    workers: usize,
    /// The master to pause during the window.
    pause: Option<&'a RedisServer>,
    /// Makes this measurement's keys its own.
    tag: String,
}

/// Runs one measurement in a fresh runtime with fresh clients.
fn measure(spec: &Spec<'_>, cfg: &Config) -> Measurement {
    let Spec {
        kind,
        case,
        urls,
        ref pids,
        workers,
        pause,
        ref tag,
    } = *spec;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let contended = case == Case::Contended;
    let m = runtime.block_on(async {
        let client = Arc::new(Client::connect(kind, urls).await);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            contended,
            last_release: Mutex::new(None),
            inside: AtomicBool::new(false),
            overlaps: AtomicUsize::new(0),
        });
        let mut handles: Vec<_> = (0..workers)
            .map(|w| {
                let resource = if contended {
                    format!("bench:{tag}:shared")
                } else {
                    format!("bench:{tag}:{w}")
                };
                tokio::spawn(worker(client.clone(), resource, shared.clone()))
            })
            .collect();

        tokio::time::sleep(Duration::from_secs_f64(cfg.warmup)).await;
        if let Some(server) = pause {
            server.pause().unwrap();
            tokio::time::sleep(Duration::from_secs_f64(cfg.settle)).await;
        }
        let (start, cpu_start, servers_start) = (Instant::now(), process_cpu(), servers_cpu(pids));
        tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
        let (end, cpu_end, servers_end) = (Instant::now(), process_cpu(), servers_cpu(pids));
        shared.stop.store(true, Ordering::Relaxed);

        let grace = tokio::time::Instant::now() + Duration::from_secs_f64(cfg.grace);
        let mut logs = Vec::new();
        let mut stalled = 0;
        for handle in &mut handles {
            match tokio::time::timeout_at(grace, &mut *handle).await {
                Ok(log) => logs.push(log.unwrap()),
                Err(_) => {
                    handle.abort();
                    stalled += 1;
                }
            }
        }
        if let Some(server) = pause {
            server.resume().unwrap();
        }

        let inside = |t: &Instant| *t >= start && *t < end;
        let mut m = Measurement {
            secs: (end - start).as_secs_f64(),
            stalled,
            overlaps: shared.overlaps.load(Ordering::Relaxed),
            ..Measurement::default()
        };
        for log in logs {
            let mut mine = 0;
            for (_, acquire, release) in log.cycles.iter().filter(|c| inside(&c.0)) {
                m.acquire.push(*acquire);
                m.release.push(*release);
                mine += 1;
            }
            m.cycles += mine;
            m.per_worker.push(mine);
            m.gaps
                .extend(log.gaps.iter().filter(|g| inside(&g.0)).map(|g| g.1));
            m.failed_acquires += log.failed_acquires.iter().filter(|t| inside(t)).count();
            m.failed_releases += log.failed_releases.iter().filter(|t| inside(t)).count();
            m.last_error = m.last_error.take().or(log.last_error);
        }
        m.per_worker.extend(std::iter::repeat_n(0, stalled));
        m.acquire.sort_unstable();
        m.release.sort_unstable();
        m.gaps.sort_unstable();
        if m.cycles > 0 {
            m.cpu_per_cycle = Some((cpu_end - cpu_start) / m.cycles as u32);
            m.server_cpu_per_cycle = Some((servers_end - servers_start) / m.cycles as u32);
        }
        m
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    m
}

/// Every measurement of every run, by what it measured.
#[derive(Default)]
struct Results(BTreeMap<Key, Vec<Measurement>>, Vec<ReplySpread>);

/// Per run: the median time from sending a `SET` to five healthy masters to its k-th reply,
/// k = 1..=5, microseconds (raw connections, one request in flight at a time).
type ReplySpread = [f64; 5];

/// How many fan-outs [`reply_spread`] times.
const SPREAD_SAMPLES: usize = 2000;

/// Times [`SPREAD_SAMPLES`] sequential `SET` fan-outs to `urls` on raw connections: what
/// deciding at the third reply instead of the fifth can save on these masters, whatever the
/// client.
fn reply_spread(urls: &[String]) -> ReplySpread {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let samples: Vec<Vec<Duration>> = runtime.block_on(async {
        let raw = support::Raw::connect(urls).await;
        let mut samples = Vec::with_capacity(SPREAD_SAMPLES);
        for _ in 0..SPREAD_SAMPLES {
            samples.push(raw.reply_times("bench:spread", support::TTL).await);
        }
        samples
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    std::array::from_fn(|k| {
        let kth: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.get(k))
            .map(|d| d.as_secs_f64() * 1e6)
            .collect();
        median(&kth)
    })
}

impl Results {
    fn runs(&self, key: Key) -> &[Measurement] {
        self.0.get(&key).map_or(&[], Vec::as_slice)
    }

    /// The median over runs of `f`.
    fn med(&self, key: Key, f: impl Fn(&Measurement) -> f64) -> f64 {
        median(&self.runs(key).iter().map(f).collect::<Vec<_>>())
    }

    /// `f(a) / f(b)` within each run, then: (median, per-run values).
    fn ratio(&self, a: Key, b: Key, f: impl Fn(&Measurement) -> f64) -> (f64, Vec<f64>) {
        let per_run: Vec<f64> = self
            .runs(a)
            .iter()
            .zip(self.runs(b))
            .map(|(x, y)| f(x) / f(y))
            .collect();
        (median(&per_run), per_run)
    }
}

fn main() {
    if let Ok(kind) = std::env::var("QUORUMLOCK_BENCH_PROFILE") {
        profile(&kind);
        return;
    }
    let cfg = Config::from_env();
    let started = Instant::now();
    let load_before = loadavg();
    eprintln!("compare: {cfg:?}");

    let nodes = RedisNodes::spawn(SCALING[SCALING.len() - 1]).unwrap();
    let all_urls = nodes.urls();
    let five: Vec<String> = all_urls[..5].to_vec();
    let proxy = FaultProxy::start(nodes[0].addr()).unwrap();
    proxy.delay(SLOW_BY / 2, SLOW_BY / 2, Duration::ZERO);
    let mut slow = five.clone();
    slow[0] = proxy.url();

    let mut results = Results::default();
    let worker_counts = [1, cfg.workers];
    for run in 0..cfg.runs {
        let mut plan: Vec<(Case, usize, usize)> = Vec::new();
        for workers in worker_counts {
            if cfg.has(1) || cfg.has(6) || cfg.has(5) || cfg.has(2) || cfg.has(3) {
                plan.push((Case::Healthy, 5, workers));
            }
        }
        if cfg.has(2) {
            plan.extend(worker_counts.map(|w| (Case::Slow, 5, w)));
        }
        if cfg.has(3) {
            plan.extend(worker_counts.map(|w| (Case::Paused, 5, w)));
        }
        if cfg.has(4) {
            plan.push((Case::Contended, 5, CONTENDED_WORKERS));
        }
        if cfg.has(5) {
            for n in SCALING.into_iter().filter(|&n| n != 5) {
                plan.extend(worker_counts.map(|w| (Case::Healthy, n, w)));
            }
        }
        if cfg.has(1) {
            results.1.push(reply_spread(&five));
        }
        for (case, n, workers) in plan {
            let kinds: &[Kind] = if case == Case::Contended {
                &[Kind::Quorumlock, Kind::Rslock]
            } else {
                &Kind::ALL
            };
            for &kind in kinds {
                let urls: &[String] = match case {
                    Case::Slow => &slow,
                    _ => &all_urls[..n],
                };
                let spec = Spec {
                    kind,
                    case,
                    urls,
                    pids: nodes.iter().take(n).filter_map(RedisServer::pid).collect(),
                    workers,
                    pause: (case == Case::Paused).then(|| &nodes[0]),
                    tag: format!("{run}:{case:?}:{n}:{workers}:{kind:?}"),
                };
                let m = measure(&spec, &cfg);
                eprintln!(
                    "[run {}/{} {:>6.0}s] {case:?} n={n} w={workers} {kind}: {:.0} cycles/s, acquire p50 {}, release p50 {}, failed {}, stalled {}{}",
                    run + 1,
                    cfg.runs,
                    started.elapsed().as_secs_f64(),
                    m.rate(),
                    us(m.acquire_p(0.5)),
                    us(m.release_p(0.5)),
                    m.failed_acquires,
                    m.stalled,
                    m.last_error.as_deref().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
                );
                results
                    .0
                    .entry(Key {
                        case,
                        nodes: n,
                        workers,
                        kind,
                    })
                    .or_default()
                    .push(m);
            }
        }
    }
    drop(proxy);
    for server in nodes.iter() {
        // Never leave a master stopped behind, even if a measurement panicked half-way.
        let _ = server.resume();
    }
    let redis_version = redis_version(&nodes);
    drop(nodes);

    let report = report(
        &results,
        &cfg,
        &Machine {
            load_before,
            load_after: loadavg(),
            redis_version,
            elapsed: started.elapsed(),
        },
    );
    println!("{report}");
}

/// Profiling mode: a fixed number of uncontended cycles of one client on a single-threaded
/// runtime (`QUORUMLOCK_BENCH_MULTI_THREAD=1` for the default multi-threaded one), so that an
/// instruction count (`valgrind --tool=callgrind`) is repeatable and can be divided by the cycle
/// count. The masters are child processes and are not traced. Prints wall and CPU time per
/// cycle, and the commands the masters ran per cycle (`INFO commandstats`).
///
/// ```text
/// QUORUMLOCK_BENCH_PROFILE=quorumlock|rslock|raw QUORUMLOCK_BENCH_CYCLES=5000 \
///   QUORUMLOCK_BENCH_NODES=5 QUORUMLOCK_BENCH_WORKERS=1 \
///   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*profile_cycles*' \
///   target/release/deps/compare-…
/// ```
fn profile(kind: &str) {
    let kind = match kind {
        "quorumlock" => Kind::Quorumlock,
        "rslock" => Kind::Rslock,
        "raw" => Kind::Raw,
        other => panic!("QUORUMLOCK_BENCH_PROFILE={other:?}: quorumlock, rslock or raw"),
    };
    let cycles: usize = env_or("QUORUMLOCK_BENCH_CYCLES", 5000);
    let workers: usize = env_or("QUORUMLOCK_BENCH_WORKERS", 1);
    let nodes = RedisNodes::spawn(env_or("QUORUMLOCK_BENCH_NODES", 5)).unwrap();
    let runtime = if env_or("QUORUMLOCK_BENCH_MULTI_THREAD", 0u8) == 1 {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
    .enable_all()
    .build()
    .unwrap();
    let client = Arc::new(runtime.block_on(Client::connect(kind, &nodes.urls())));
    // Warm up outside the counted region: connections, script caches, allocator.
    profile_cycles(&runtime, &client, workers, workers * 50, false);
    let (t0, cpu0) = (Instant::now(), process_cpu());
    profile_cycles(&runtime, &client, workers, cycles, true);
    let (wall, cpu) = (t0.elapsed(), process_cpu() - cpu0);
    eprintln!(
        "{kind}: {cycles} cycles, {workers} worker(s), {} masters: {:.1} µs wall, {:.1} µs CPU per cycle",
        nodes.len(),
        wall.as_secs_f64() * 1e6 / cycles as f64,
        cpu.as_secs_f64() * 1e6 / cycles as f64
    );
    drop(client);
    runtime.shutdown_timeout(Duration::from_secs(1));
    // What the masters executed, warm-up included (stragglers have had a second to land).
    std::thread::sleep(Duration::from_secs(1));
    let counted = cycles + workers * 50;
    let mut totals: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for server in nodes.iter() {
        let mut connection = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut connection)
            .unwrap();
        for line in stats.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let field = |f: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let entry = totals.entry(name.to_owned()).or_default();
            entry.0 += field("calls=") as u64;
            entry.1 += field("usec=");
        }
    }
    for (name, (calls, usec)) in totals {
        eprintln!(
            "  server: {name}: {:.2} calls/cycle, {:.2} µs/cycle",
            calls as f64 / counted as f64,
            usec / counted as f64
        );
    }
}

#[inline(never)]
fn profile_cycles(
    runtime: &tokio::runtime::Runtime,
    client: &Arc<Client>,
    workers: usize,
    cycles: usize,
    counted: bool,
) {
    let per_worker = cycles.div_ceil(workers);
    runtime.block_on(async {
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                let client = client.clone();
                tokio::spawn(async move {
                    let resource = format!("bench:profile:{counted}:{w}");
                    for _ in 0..per_worker {
                        let held = client.acquire(&resource).await.unwrap();
                        client.release(held).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

struct Machine {
    load_before: String,
    load_after: String,
    redis_version: String,
    elapsed: Duration,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

fn redis_version(nodes: &RedisNodes) -> String {
    let mut connection = redis::Client::open(nodes[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned()
}

fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Microseconds, shown as µs below 10 ms and as ms above.
fn us(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v < 10_000.0 {
        format!("{v:.0} µs")
    } else {
        format!("{:.1} ms", v / 1000.0)
    }
}

fn rate(v: f64) -> String {
    if v.is_nan() {
        return "–".into();
    }
    let whole = v.round() as u64;
    let s = whole.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 10.0 {
        format!("{v:.1}")
    } else {
        out
    }
}

fn x(v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        "–".into()
    } else {
        format!("{v:.2}×")
    }
}

fn runs_list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| {
            if v.is_finite() {
                format!("{v:.2}")
            } else {
                "–".into()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn report(r: &Results, cfg: &Config, machine: &Machine) -> String {
    let mut out = String::new();
    let key = |case, nodes, workers, kind| Key {
        case,
        nodes,
        workers,
        kind,
    };
    let w = cfg.workers;
    let rate_of = |m: &Measurement| m.rate();
    let p50 = |m: &Measurement| m.acquire_p(0.5);

    let _ = writeln!(out, "## quorumlock vs rslock vs the raw floor\n");
    let _ = writeln!(
        out,
        "{} × {}, redis-server {}, loopback; load average {} before, {} after; {} ({:.0} s)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        machine.redis_version,
        machine.load_before,
        machine.load_after,
        today(),
        machine.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "Medians of {} interleaved run(s), {} s windows after {} s warm-up; ratios computed within each run (per-run values in brackets). TTL 10 s, every client with its default settings.\n",
        cfg.runs, cfg.secs, cfg.warmup
    );

    let table_head = "| workers | client | cycles/s | acquire p50 | acquire p99 | release p50 | release p99 | CPU/cycle | failed acq. | stalled |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|";
    let row = |out: &mut String, k: Key| {
        if r.runs(k).is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            k.workers,
            k.kind,
            rate(r.med(k, rate_of)),
            us(r.med(k, p50)),
            us(r.med(k, |m| m.acquire_p(0.99))),
            us(r.med(k, |m| m.release_p(0.5))),
            us(r.med(k, |m| m.release_p(0.99))),
            if k.case == Case::Healthy {
                us(r.med(k, Measurement::cpu_us))
            } else {
                "–".into()
            },
            rate(r.med(k, |m| m.failed_acquires as f64)),
            rate(r.med(k, |m| m.stalled as f64)),
        );
    };

    for (title, case) in [
        ("### 1. Uncontended, five healthy masters", Case::Healthy),
        (
            "### 2. One of five masters slowed by 20 ms per round trip (testkit proxy)",
            Case::Slow,
        ),
        (
            "### 3. One of five masters paused (SIGSTOP) for the whole window",
            Case::Paused,
        ),
    ] {
        if r.runs(key(case, 5, 1, Kind::Quorumlock)).is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}\n\n{table_head}");
        for workers in [1, w] {
            for kind in Kind::ALL {
                row(&mut out, key(case, 5, workers, kind));
            }
        }
        let _ = writeln!(out);
        if case == Case::Healthy && !r.1.is_empty() {
            let kth = |k: usize| median(&r.1.iter().map(|s| s[k]).collect::<Vec<_>>());
            let _ = writeln!(
                out,
                "Time from sending one `SET` to its k-th reply from the five masters (raw connections, one fan-out at a time, median of {SPREAD_SAMPLES} per run): {} — the third reply comes at {:.0} % of the fifth's time; that is all deciding early can save here.\n",
                (0..5)
                    .map(|k| format!("{} {}", ["1st", "2nd", "3rd", "4th", "5th"][k], us(kth(k))))
                    .collect::<Vec<_>>()
                    .join(", "),
                100.0 * kth(2) / kth(4),
            );
        }
        for workers in [1, w] {
            let q = key(case, 5, workers, Kind::Quorumlock);
            let (vs_rs, rs_runs) = r.ratio(q, key(case, 5, workers, Kind::Rslock), rate_of);
            let (vs_raw, raw_runs) = r.ratio(q, key(case, 5, workers, Kind::Raw), rate_of);
            let _ = write!(
                out,
                "* {workers} worker(s): quorumlock cycles/s = {} rslock [{}], {} raw floor [{}]",
                x(vs_rs),
                runs_list(&rs_runs),
                x(vs_raw),
                runs_list(&raw_runs)
            );
            match case {
                Case::Slow => {
                    let healthy = key(Case::Healthy, 5, workers, Kind::Quorumlock);
                    let (own, own_runs) = r.ratio(q, healthy, p50);
                    let rs = key(case, 5, workers, Kind::Rslock);
                    let (rs_own, rs_runs) =
                        r.ratio(rs, key(Case::Healthy, 5, workers, Kind::Rslock), p50);
                    let _ = write!(
                        out,
                        "; acquire p50 = {} its own no-fault p50 [{}] (rslock: {} [{}])",
                        x(own),
                        runs_list(&own_runs),
                        x(rs_own),
                        runs_list(&rs_runs)
                    );
                }
                Case::Paused => {
                    let (own, own_runs) =
                        r.ratio(q, key(Case::Healthy, 5, workers, Kind::Quorumlock), rate_of);
                    let rs = key(case, 5, workers, Kind::Rslock);
                    let (rs_own, rs_runs) =
                        r.ratio(rs, key(Case::Healthy, 5, workers, Kind::Rslock), rate_of);
                    let _ = write!(
                        out,
                        "; throughput = {:.0} % of its own no-fault [{}] (rslock: {:.1} % [{}])",
                        own * 100.0,
                        runs_list(&own_runs),
                        rs_own * 100.0,
                        runs_list(&rs_runs)
                    );
                }
                _ => {}
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(out);
    }

    let qc = key(Case::Contended, 5, CONTENDED_WORKERS, Kind::Quorumlock);
    let rc = key(Case::Contended, 5, CONTENDED_WORKERS, Kind::Rslock);
    if !r.runs(qc).is_empty() {
        let _ = writeln!(
            out,
            "### 4. Contended: {CONTENDED_WORKERS} workers on one resource, {CONTENDED_PAUSE:?} pause after each release\n"
        );
        let _ = writeln!(out, "| client | critical sections/s | gap p50 | gap p99 | acquire p50 | acquire p99 | per-worker min/max | failed acquires/s | overlaps |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for k in [qc, rc] {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |",
                k.kind,
                rate(r.med(k, rate_of)),
                us(r.med(k, |m| m.gap_p(0.5))),
                us(r.med(k, |m| m.gap_p(0.99))),
                us(r.med(k, p50)),
                us(r.med(k, |m| m.acquire_p(0.99))),
                r.med(k, Measurement::fairness),
                rate(r.med(k, |m| m.failed_acquires as f64 / m.secs)),
                r.runs(k).iter().map(|m| m.overlaps).sum::<usize>(),
            );
        }
        let (vs, runs) = r.ratio(qc, rc, rate_of);
        let _ = writeln!(
            out,
            "\n* quorumlock critical sections/s = {} rslock [{}]. Gap: from the holder's call to release to the next holder's acquire returning.\n",
            x(vs),
            runs_list(&runs)
        );
    }

    if cfg.has(5) {
        let _ = writeln!(out, "### 5. Scaling with the number of masters\n");
        let _ = writeln!(out, "| masters | workers | quorumlock cycles/s | rslock | raw floor | quorumlock acquire p50 | rslock | raw floor | quorumlock / rslock | quorumlock / raw |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for workers in [1, w] {
            for n in SCALING {
                let k = |kind| key(Case::Healthy, n, workers, kind);
                let _ = writeln!(
                    out,
                    "| {n} | {workers} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    rate(r.med(k(Kind::Quorumlock), rate_of)),
                    rate(r.med(k(Kind::Rslock), rate_of)),
                    rate(r.med(k(Kind::Raw), rate_of)),
                    us(r.med(k(Kind::Quorumlock), p50)),
                    us(r.med(k(Kind::Rslock), p50)),
                    us(r.med(k(Kind::Raw), p50)),
                    x(r.ratio(k(Kind::Quorumlock), k(Kind::Rslock), rate_of).0),
                    x(r.ratio(k(Kind::Quorumlock), k(Kind::Raw), rate_of).0),
                );
            }
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(
        out,
        "### 6. Client CPU per cycle (process user + system time / cycles, five healthy masters)\n"
    );
    let _ = writeln!(out, "| workers | quorumlock | rslock | raw floor | quorumlock / raw | masters' CPU/cycle: quorumlock | rslock | raw floor | quorumlock / raw |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for workers in [1, w] {
        let k = |kind| key(Case::Healthy, 5, workers, kind);
        let (vs, runs) = r.ratio(k(Kind::Quorumlock), k(Kind::Raw), Measurement::cpu_us);
        let (svs, sruns) = r.ratio(
            k(Kind::Quorumlock),
            k(Kind::Raw),
            Measurement::server_cpu_us,
        );
        let _ = writeln!(
            out,
            "| {workers} | {} | {} | {} | {} [{}] | {} | {} | {} | {} [{}] |",
            us(r.med(k(Kind::Quorumlock), Measurement::cpu_us)),
            us(r.med(k(Kind::Rslock), Measurement::cpu_us)),
            us(r.med(k(Kind::Raw), Measurement::cpu_us)),
            x(vs),
            runs_list(&runs),
            us(r.med(k(Kind::Quorumlock), Measurement::server_cpu_us)),
            us(r.med(k(Kind::Rslock), Measurement::server_cpu_us)),
            us(r.med(k(Kind::Raw), Measurement::server_cpu_us)),
            x(svs),
            runs_list(&sruns)
        );
    }
    let _ = writeln!(
        out,
        "\nThe masters' CPU comes from `/proc/PID/stat` (10 ms ticks). On this 2-core box client and masters share the cores, so at 32 workers throughput ≈ 2 cores / (client + masters' CPU per cycle).\n"
    );

    // The targets of the issue, each as a ratio inside one run.
    let _ = writeln!(
        out,
        "### Targets\n\n| target | measured: median [per run] | met |\n|---|---|---|"
    );
    let target =
        |out: &mut String, name: &str, (med, runs): (f64, Vec<f64>), ok: fn(f64) -> bool| {
            let met = if med.is_nan() {
                "–"
            } else if ok(med) {
                "yes"
            } else {
                "**no**"
            };
            let _ = writeln!(
                out,
                "| {name} | {} [{}] | {met} |",
                x(med),
                runs_list(&runs)
            );
        };
    let q = |case, workers| key(case, 5, workers, Kind::Quorumlock);
    let rs = |case, workers| key(case, 5, workers, Kind::Rslock);
    let raw = |case, workers| key(case, 5, workers, Kind::Raw);
    target(
        &mut out,
        "1 worker: cycles/s ≥ 1.35× rslock",
        r.ratio(q(Case::Healthy, 1), rs(Case::Healthy, 1), rate_of),
        |v| v >= 1.35,
    );
    target(
        &mut out,
        &format!("{w} workers: cycles/s ≥ 1.2× rslock"),
        r.ratio(q(Case::Healthy, w), rs(Case::Healthy, w), rate_of),
        |v| v >= 1.2,
    );
    target(
        &mut out,
        &format!("{w} workers: cycles/s ≥ 0.95× raw floor"),
        r.ratio(q(Case::Healthy, w), raw(Case::Healthy, w), rate_of),
        |v| v >= 0.95,
    );
    for workers in [1, w] {
        target(
            &mut out,
            &format!("slowed master, {workers} worker(s): acquire p50 ≤ 1.25× own no-fault"),
            r.ratio(q(Case::Slow, workers), q(Case::Healthy, workers), p50),
            |v| v <= 1.25,
        );
    }
    for workers in [1, w] {
        target(
            &mut out,
            &format!("paused master, {workers} worker(s): cycles/s ≥ 0.80× own no-fault"),
            r.ratio(q(Case::Paused, workers), q(Case::Healthy, workers), rate_of),
            |v| v >= 0.8,
        );
    }
    let gap = r.med(qc, |m| m.gap_p(0.5));
    let _ = writeln!(
        out,
        "| contended: gap p50 ≤ 5 ms (with wake-up) | {} [{}] | {} |",
        us(gap),
        r.runs(qc)
            .iter()
            .map(|m| us(m.gap_p(0.5)))
            .collect::<Vec<_>>()
            .join(", "),
        if gap.is_nan() {
            "–"
        } else if gap <= 5000.0 {
            "yes"
        } else {
            "**no**"
        }
    );
    target(
        &mut out,
        "contended: critical sections/s ≥ 5× rslock",
        r.ratio(qc, rc, rate_of),
        |v| v >= 5.0,
    );
    for workers in [1, w] {
        target(
            &mut out,
            &format!("{workers} worker(s): client CPU/cycle ≤ 1.15× raw floor"),
            r.ratio(
                q(Case::Healthy, workers),
                raw(Case::Healthy, workers),
                Measurement::cpu_us,
            ),
            |v| v <= 1.15,
        );
    }
    out
}

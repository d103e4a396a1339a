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
//! | `QUORUMLOCK_BENCH_CASES` | 1,2,3,4,5,6,7,8 | which cases to run, in that order |
//!
//! With `QUORUMLOCK_BENCH_PROFILE` set, it runs a fixed number of cycles of one client instead,
//! for profiling (see `profile.rs`). With `QUORUMLOCK_BENCH_CHILD` set it is a worker process of
//! a separate-clients measurement, started by the bench itself (see `separate.rs`).
//!
//! # Layout
//!
//! * `config` — the settings, the cases (the report's numbered sections) and the plan of
//!   measurements they need;
//! * `measure` — one measurement: workers, window, what they saw; the masters' reply spread;
//! * `report` — the Markdown report from every run's measurements;
//! * `separate` — the separate-clients cases: workers in child processes of this binary, one
//!   client each, on one resource;
//! * `profile` — the profiling mode;
//! * `../support` — the three clients behind one interface, shared with the criterion bench.

mod config;
mod measure;
mod profile;
mod report;
mod separate;
#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use quorumlock_testkit::{FaultProxy, RedisNodes, RedisServer};

use config::{Case, Config, Setup, NODES, SCALING, SLOW_BY};
use measure::{measure, reply_spread, Results, Spec};
use report::{loadavg, redis_version, report, us, Machine};

fn main() {
    if let Ok(spec) = std::env::var(separate::CHILD_ENV) {
        separate::child(&spec);
    }
    if let Ok(kind) = std::env::var("QUORUMLOCK_BENCH_PROFILE") {
        profile::profile(&kind);
        return;
    }
    let cfg = Config::from_env();
    let started = Instant::now();
    let load_before = loadavg();
    eprintln!("compare: {cfg:?}");

    let nodes = RedisNodes::spawn(SCALING[SCALING.len() - 1]).unwrap();
    let all_urls = nodes.urls();
    let healthy: Vec<String> = all_urls[..NODES].to_vec();
    let proxy = FaultProxy::start(nodes[0].addr()).unwrap();
    proxy.delay(SLOW_BY / 2, SLOW_BY / 2, Duration::ZERO);
    let mut slow = healthy.clone();
    slow[0] = proxy.url();

    let mut results = Results::default();
    for run in 0..cfg.runs {
        if cfg.has(Case::Uncontended) {
            results.reply_spreads.push(reply_spread(&healthy));
        }
        for point in cfg.plan() {
            let n = point.nodes;
            for &kind in point.setup.kinds() {
                let spec = Spec {
                    kind,
                    setup: point.setup,
                    urls: match point.setup {
                        Setup::Slow => &slow,
                        _ => &all_urls[..n],
                    },
                    pids: nodes.iter().take(n).filter_map(RedisServer::pid).collect(),
                    workers: point.workers,
                    pause: (point.setup == Setup::Paused).then(|| &nodes[0]),
                    tag: format!("{run}:{:?}:{n}:{}:{kind:?}", point.setup, point.workers),
                };
                let m = match point.setup {
                    Setup::Separate { processes, work_us } => separate::measure(
                        &spec,
                        processes,
                        Duration::from_micros(work_us.into()),
                        &cfg,
                    ),
                    _ => measure(&spec, &cfg),
                };
                eprintln!(
                    "[run {}/{} {:>6.0}s] {:?} n={n} w={} {kind}: {:.0} cycles/s, acquire p50 {}, release p50 {}, gap p50 {}, failed {}, overlaps {}, stalled {}{}{}",
                    run + 1,
                    cfg.runs,
                    started.elapsed().as_secs_f64(),
                    point.setup,
                    point.workers,
                    m.rate(),
                    us(m.acquire_p(0.5)),
                    us(m.release_p(0.5)),
                    us(m.gap_p(0.5)),
                    m.failed_acquires,
                    m.overlaps,
                    m.stalled,
                    if m.late > 0 { format!(", {} process(es) late for the window", m.late) } else { String::new() },
                    m.last_error.as_deref().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
                );
                if !m.commands.is_empty() {
                    let [attempts, contended, wakeups] = m.per_acquired();
                    if !attempts.is_nan() {
                        eprintln!(
                            "    per lock acquired: {attempts:.2} attempts, {contended:.2} contended, {wakeups:.2} wake-ups"
                        );
                    }
                    eprintln!(
                        "    masters' commands per cycle: {}",
                        m.commands
                            .iter()
                            .map(|(name, (calls, usec))| format!(
                                "{name} {calls:.2} ({usec:.0} µs)"
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                results.add(point.with(kind), m);
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

//! Profiling mode: a fixed number of uncontended cycles of one client on a single-threaded
//! runtime (`QUORUMLOCK_BENCH_MULTI_THREAD=1` for the default multi-threaded one), so that an
//! instruction count (`valgrind --tool=callgrind`) is repeatable and can be divided by the cycle
//! count. The masters are child processes and are not traced. Prints wall and CPU time per
//! cycle, and the commands the masters ran per cycle (`INFO commandstats`).
//!
//! ```text
//! QUORUMLOCK_BENCH_PROFILE=quorumlock|rslock|raw|bare QUORUMLOCK_BENCH_CYCLES=5000 \
//!   QUORUMLOCK_BENCH_NODES=5 QUORUMLOCK_BENCH_WORKERS=1 \
//!   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*profile_cycles*' \
//!   target/release/deps/compare-…
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_testkit::RedisNodes;

use crate::support::{env_or, process_cpu, Client, Kind};

/// Runs the profiling mode for the client named `kind`.
pub fn profile(kind: &str) {
    let kind = match kind {
        "quorumlock" => Kind::Quorumlock,
        "rslock" => Kind::Rslock,
        "raw" => Kind::Raw,
        "bare" => Kind::Bare,
        other => panic!("QUORUMLOCK_BENCH_PROFILE={other:?}: quorumlock, rslock, raw or bare"),
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
    let io = io_stats(&nodes.urls());
    drop(client);
    runtime.shutdown_timeout(Duration::from_secs(1));
    // What the masters executed, warm-up included (stragglers have had a second to land).
    std::thread::sleep(Duration::from_secs(1));
    let counted = cycles + workers * 50;
    // How the commands reached the masters: many per read means pipelined batches, which cost a
    // master far less per command than one read and one write each.
    let [commands, reads, writes] = io;
    eprintln!(
        "  server: {:.2} commands, {:.2} reads, {:.2} writes per cycle ({:.2} commands per read)",
        commands as f64 / counted as f64,
        reads as f64 / counted as f64,
        writes as f64 / counted as f64,
        commands as f64 / reads.max(1) as f64
    );
    for (name, (calls, usec)) in command_stats(&nodes.urls()) {
        eprintln!(
            "  server: {name}: {:.2} calls/cycle, {:.2} µs/cycle",
            calls as f64 / counted as f64,
            usec / counted as f64
        );
    }
}

/// What the masters ran between two [`command_stats`] snapshots, per cycle: per command, the
/// calls and the microseconds (commands that scripts run count too).
pub fn commands_per_cycle(
    start: &BTreeMap<String, (u64, f64)>,
    end: BTreeMap<String, (u64, f64)>,
    cycles: usize,
) -> BTreeMap<String, (f64, f64)> {
    let per_cycle = cycles as f64;
    end.into_iter()
        .filter_map(|(name, (calls, usec))| {
            let (calls0, usec0) = start.get(&name).copied().unwrap_or_default();
            (calls > calls0).then(|| {
                let delta = (
                    (calls - calls0) as f64 / per_cycle,
                    (usec - usec0) / per_cycle,
                );
                (name, delta)
            })
        })
        .collect()
}

/// Per command, the calls and microseconds of every master together (`INFO commandstats`).
pub fn command_stats(urls: &[String]) -> BTreeMap<String, (u64, f64)> {
    let mut totals: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for url in urls {
        let stats = info(url, "commandstats");
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
    totals
}

/// `INFO <section>` of the master at `url`.
fn info(url: &str, section: &str) -> String {
    let mut connection = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("INFO")
        .arg(section)
        .query(&mut connection)
        .unwrap()
}

/// Commands processed, reads and writes of every master together (`INFO stats`).
fn io_stats(urls: &[String]) -> [u64; 3] {
    let mut totals = [0; 3];
    for url in urls {
        let stats = info(url, "stats");
        let field = |name: &str| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        totals[0] += field("total_commands_processed:");
        totals[1] += field("total_reads_processed:");
        totals[2] += field("total_writes_processed:");
    }
    totals
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

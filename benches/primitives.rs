//! The primitives beside the mutex, on five local masters, every worker with a client of its
//! own (as separate processes would have):
//!
//! 1. a semaphore with 4 permits and 16 workers, against the mutex with the same workers, 1 ms
//!    of work per hold;
//! 2. a read-write lock under a read-heavy load (90 % reads), against the mutex doing the same
//!    operations, with 1 ms and with 5 ms of work per hold, its clients retrying every 2 ms;
//!    and with 1 ms, its clients left at the default retry delay (200 ms), so that only the
//!    masters' release announcements make them attempt sooner;
//! 3. leader failover with a 1 s TTL: a leader process killed (SIGKILL) → a new leader seen by
//!    an observer's quorum reads, and elected.
//!
//! ```text
//! cargo bench --bench primitives                            # the full run (about 1 minute)
//! QUORUMLOCK_BENCH_QUICK=1 cargo bench --bench primitives   # a smoke run
//! ```
//!
//! Throughput cases run interleaved (mutex, then the primitive, `runs` times) and report the
//! median of each and the median of the per-run ratios. Every case also counts what must never
//! happen: more holders than permits, a writer beside anyone.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use quorumlock::Redlock;
use quorumlock_testkit::RedisNodes;

/// Set in a child process of this bench: the masters' URLs; the child campaigns and leads
/// until it is killed.
const LEADER_ENV: &str = "QUORUMLOCK_BENCH_LEADER";
const ELECTION: &str = "bench-election";
const FAILOVER_TTL: Duration = Duration::from_secs(1);
const WORKERS: usize = 16;
const PERMITS: u32 = 4;

struct Config {
    secs: Duration,
    runs: usize,
    failovers: usize,
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("QUORUMLOCK_BENCH_QUICK").is_ok_and(|v| v == "1");
        let num = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(default)
        };
        Config {
            secs: Duration::from_secs_f64(num(
                "QUORUMLOCK_BENCH_SECS",
                if quick { 0.5 } else { 3.0 },
            )),
            runs: num("QUORUMLOCK_BENCH_RUNS", if quick { 1.0 } else { 3.0 }) as usize,
            failovers: num("QUORUMLOCK_BENCH_FAILOVERS", if quick { 3.0 } else { 20.0 }) as usize,
        }
    }
}

/// What a workload does each cycle.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// The mutex, every cycle.
    Mutex,
    /// A permit of a semaphore.
    Permit,
    /// Nine reads in ten, one write, on a read-write lock, every client retrying every 2 ms.
    ReadWrite,
    /// The same with the default retry policy: waits cut short by release announcements.
    ReadWriteWoken,
}

/// Completed cycles in the window, and what must never happen.
struct Tally {
    cycles: usize,
    violations: usize,
    most_inside: usize,
}

/// A client with the default retry policy: the mutex and the semaphore wait in line, woken
/// by each release's hand-off, and retry only as a fallback.
fn client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(Duration::from_millis(200))
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Read-write holds are woken by the releases they wait for and retry as a fallback; these
/// clients retry every 2 ± 1 ms besides (a waiter in line also attempts every retry delay:
/// this would only add load to the mutex's masters).
fn retrying_client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(1))
        .acquire_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Runs `WORKERS` workers, a client each, doing `load` for `secs`; counts the cycles that
/// completed inside the window.
async fn measure(
    urls: &[String],
    load: Load,
    resource: &str,
    secs: Duration,
    work: Duration,
) -> Tally {
    let inside = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let rl = match load {
            Load::ReadWrite => retrying_client(urls),
            Load::Mutex | Load::Permit | Load::ReadWriteWoken => client(urls),
        };
        let resource = resource.to_owned();
        let (inside, writers, most, bad, counting, done, cycles) = (
            inside.clone(),
            writers.clone(),
            most.clone(),
            bad.clone(),
            counting.clone(),
            done.clone(),
            cycles.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let semaphore = rl.semaphore(&resource, PERMITS).unwrap();
            let rw = rl.rw_lock(&resource).unwrap();
            let ttl = Duration::from_secs(5);
            let mut n = w;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                let write = n % 10 == 0;
                let (lock, exclusive, limit) = match load {
                    Load::Mutex => (rl.acquire(&resource, ttl).await.unwrap(), true, 1),
                    Load::Permit => (
                        semaphore.acquire(ttl).await.unwrap().into_lock(),
                        false,
                        PERMITS as usize,
                    ),
                    Load::ReadWrite | Load::ReadWriteWoken if write => {
                        (rw.write(ttl).await.unwrap(), true, 1)
                    }
                    Load::ReadWrite | Load::ReadWriteWoken => {
                        (rw.read(ttl).await.unwrap(), false, usize::MAX)
                    }
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let writing = if exclusive {
                    writers.fetch_add(1, Ordering::SeqCst) + 1
                } else {
                    writers.load(Ordering::SeqCst)
                };
                if now > limit || (exclusive && now > 1) || (!exclusive && writing > 0) {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(work).await;
                if exclusive {
                    writers.fetch_sub(1, Ordering::SeqCst);
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                lock.release().await.unwrap();
                if counting.load(Ordering::Relaxed) {
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // warm up
    counting.store(true, Ordering::Relaxed);
    tokio::time::sleep(secs).await;
    counting.store(false, Ordering::Relaxed);
    let counted = cycles.load(Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    Tally {
        cycles: counted,
        violations: bad.load(Ordering::SeqCst),
        most_inside: most.load(Ordering::SeqCst),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or_default()
}

/// Throughput of `baseline` and `load`, interleaved `runs` times: medians and the median ratio.
async fn compare(
    urls: &[String],
    cfg: &Config,
    (baseline, load): (Load, Load),
    work: Duration,
    label: &str,
) {
    let (mut base, mut prim, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut violations, mut most) = (0, 0);
    for run in 0..cfg.runs {
        let a = measure(
            urls,
            baseline,
            &format!("{label}-base-{run}"),
            cfg.secs,
            work,
        )
        .await;
        let b = measure(urls, load, &format!("{label}-{run}"), cfg.secs, work).await;
        let (a_rate, b_rate) = (
            a.cycles as f64 / cfg.secs.as_secs_f64(),
            b.cycles as f64 / cfg.secs.as_secs_f64(),
        );
        eprintln!("  run {run}: {baseline:?} {a_rate:.0}/s, {load:?} {b_rate:.0}/s");
        base.push(a_rate);
        prim.push(b_rate);
        ratios.push(b_rate / a_rate.max(1.0));
        violations += a.violations + b.violations;
        most = most.max(b.most_inside);
    }
    println!(
        "| {label}, {work:?} of work | {:.0} | {:.0} | {:.2}× | {violations} | {most} |",
        median(&mut base),
        median(&mut prim),
        median(&mut ratios),
    );
}

/// A child process: campaigns for the election and leads until it is killed.
fn lead(urls: &str) -> ! {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
        let rl = client(&urls);
        rl.campaign(ELECTION, FAILOVER_TTL, "child", |_held| async {
            println!("elected");
            std::io::stdout().flush().unwrap();
            std::future::pending::<()>().await;
        })
        .await
        .unwrap();
    });
    std::process::exit(0)
}

/// Leader killed → new leader observed (by quorum reads every 5 ms) and elected (the next
/// candidate, waiting in line): `failovers` times.
async fn failover(urls: &[String], cfg: &Config) {
    let (mut observed, mut elected) = (Vec::new(), Vec::new());
    let observer = client(urls);
    for trial in 0..cfg.failovers {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(LEADER_ENV, urls.join(","))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "elected");
        let next = client(urls);
        let (won_tx, won) = tokio::sync::oneshot::channel();
        let (seen_tx, seen) = tokio::sync::oneshot::channel::<()>();
        let candidate = tokio::spawn(async move {
            next.campaign(ELECTION, FAILOVER_TTL, "next", |_held| async move {
                let _ = won_tx.send(Instant::now());
                // Lead until the observer has seen it, then resign for the next trial.
                let _ = seen.await;
            })
            .await
            .unwrap();
        });
        let mut changes = Box::pin(observer.observe(ELECTION, Duration::from_millis(5)));
        let first = changes.next().await.flatten().map(|l| l.value);
        assert_eq!(first.as_deref(), Some("child"));
        // Let the leader settle into its renewals, then kill it.
        tokio::time::sleep(Duration::from_millis(100 + 37 * (trial as u64 % 7))).await;
        let killed = Instant::now();
        child.kill().unwrap();
        child.wait().unwrap();
        loop {
            let seen = changes.next().await.flatten();
            if seen.is_some_and(|l| l.value == "next") {
                observed.push(killed.elapsed());
                break;
            }
        }
        elected.push(won.await.unwrap() - killed);
        let _ = seen_tx.send(());
        candidate.await.unwrap();
        eprintln!("  failover {trial}: observed {:?}", observed[trial]);
    }
    observed.sort_unstable();
    elected.sort_unstable();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    println!(
        "| leader killed → new leader observed (TTL 1 s, {} failovers) | {} | {} | {} |",
        observed.len(),
        ms(percentile(&observed, 0.5)),
        ms(percentile(&observed, 0.99)),
        ms(*observed.last().unwrap_or(&Duration::ZERO)),
    );
    println!(
        "| leader killed → next candidate elected | {} | {} | {} |",
        ms(percentile(&elected, 0.5)),
        ms(percentile(&elected, 0.99)),
        ms(*elected.last().unwrap_or(&Duration::ZERO)),
    );
}

fn main() {
    if let Ok(urls) = std::env::var(LEADER_ENV) {
        lead(&urls);
    }
    // `cargo bench` passes `--bench`; nothing else to parse.
    let cfg = Config::from_env();
    let nodes = RedisNodes::spawn(5).unwrap();
    let urls = nodes.urls();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!("## Primitives: {WORKERS} workers, a client each");
        println!();
        println!("| case | mutex (holds/s) | primitive (holds/s) | ratio (median of runs) | violations | most inside at once |");
        println!("|---|---|---|---|---|---|");
        let ms = Duration::from_millis;
        let semaphore = (Load::Mutex, Load::Permit);
        let read_heavy = (Load::Mutex, Load::ReadWrite);
        let woken = (Load::Mutex, Load::ReadWriteWoken);
        compare(&urls, &cfg, semaphore, ms(1), "semaphore, 4 permits").await;
        compare(&urls, &cfg, read_heavy, ms(1), "read-write lock, 90 % reads").await;
        let label = "read-write lock, 90 % reads, default retry delay";
        compare(&urls, &cfg, woken, ms(1), label).await;
        compare(&urls, &cfg, read_heavy, ms(5), "read-write lock, 90 % reads").await;
        println!();
        println!("| failover | p50 | p99 | max |");
        println!("|---|---|---|---|");
        failover(&urls, &cfg).await;
    });
}

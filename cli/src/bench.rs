//! `quorumlock bench`: acquire + release cycles against a user's own masters, to size a
//! deployment. Each worker locks a resource of its own (no contention), so the numbers are the
//! client's and the masters' cost of one lock, not queueing behind other holders.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use quorumlock::Redlock;
use quorumlock_testkit::figures::{group_digits, nearest_rank};

use crate::duration;

pub(crate) const EXAMPLES: &str = "\
Examples:
  # One worker for ten seconds against three masters.
  quorumlock bench --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379

  # 32 concurrent workers for a minute.
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
      quorumlock bench --workers 32 --duration 1m

Each worker acquires and releases a key of its own, named quorumlock-bench:<run>:<worker>;
every key is released at once (or expires after --ttl if the bench is killed).";

/// Options of `quorumlock bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The independent Redis masters, comma-separated
    /// (`redis://[user:password@]host:port[/db]`).
    #[arg(long, env = "QUORUMLOCK_NODES", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Concurrent workers, each cycling on its own resource.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// How long to run (Ctrl-C stops early and still prints the summary).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// The lease each cycle takes.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    ttl: Duration,
}

/// What every worker adds to while it runs; read by the progress line.
#[derive(Default)]
struct Live {
    cycles: AtomicU64,
    failed: AtomicU64,
    stop: AtomicBool,
}

/// What one worker measured.
#[derive(Default)]
struct WorkerReport {
    acquire: Histogram,
    release: Histogram,
    failed_acquires: u64,
    failed_releases: u64,
    last_error: Option<String>,
}

/// Runs the benchmark and prints its summary on stdout (progress goes to stderr).
///
/// # Errors
///
/// When the masters cannot be used at all: a bad URL or TTL, fewer than a quorum reachable, or
/// not one cycle completed.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let urls = args
        .nodes
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty());
    let rl = Redlock::builder(urls).build()?;
    let health = rl.connect().await.context("the masters are not usable")?;
    for unreachable in &health.unreachable {
        eprintln!("warning: {unreachable}");
    }
    // Checks the TTL against this configuration before any worker starts.
    let run_id = run_id();
    let probe = format!("quorumlock-bench:{run_id}:probe");
    rl.try_acquire(&probe, args.ttl)
        .await
        .context("a first acquire failed")?
        .release()
        .await
        .context("a first release failed")?;

    let live = Arc::new(Live::default());
    let started = Instant::now();
    let workers: Vec<_> = (0..args.workers)
        .map(|i| {
            let resource = format!("quorumlock-bench:{run_id}:{i}");
            tokio::spawn(worker(rl.clone(), resource, args.ttl, live.clone()))
        })
        .collect();

    let progress = progress_bar(args.duration);
    let interrupted = drive(&progress, &live, started, args.duration).await;
    live.stop.store(true, Ordering::Relaxed);
    let mut total = WorkerReport::default();
    for handle in workers {
        let report = handle.await.context("a worker panicked")?;
        total.acquire.merge(&report.acquire);
        total.release.merge(&report.release);
        total.failed_acquires += report.failed_acquires;
        total.failed_releases += report.failed_releases;
        total.last_error = report.last_error.or(total.last_error);
    }
    let elapsed = started.elapsed();
    progress.finish_and_clear();

    print_summary(&rl, &args, &total, elapsed, interrupted);
    if total.acquire.count() == 0 {
        anyhow::bail!(
            "no cycle completed{}",
            total
                .last_error
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// Tells this run's keys apart from those of other runs, here or on other machines.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:x}{nanos:08x}", std::process::id())
}

async fn worker(rl: Redlock, resource: String, ttl: Duration, live: Arc<Live>) -> WorkerReport {
    let mut report = WorkerReport::default();
    while !live.stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let lock = match rl.acquire(&resource, ttl).await {
            Ok(lock) => lock,
            Err(e) => {
                report.failed_acquires += 1;
                report.last_error = Some(e.to_string());
                live.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let t1 = Instant::now();
        if let Err(e) = lock.release().await {
            report.failed_releases += 1;
            report.last_error = Some(e.to_string());
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        let t2 = Instant::now();
        report.acquire.record(t1 - t0);
        report.release.record(t2 - t1);
        live.cycles.fetch_add(1, Ordering::Relaxed);
    }
    report
}

fn progress_bar(duration: Duration) -> ProgressBar {
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let bar = ProgressBar::new(millis);
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// Updates the progress line until `duration` has passed or Ctrl-C; `true` when interrupted.
async fn drive(bar: &ProgressBar, live: &Live, started: Instant, duration: Duration) -> bool {
    let deadline = tokio::time::Instant::from_std(started) + duration;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            _ = &mut ctrl_c => return true,
            _ = tick.tick() => {
                let elapsed = started.elapsed();
                let cycles = live.cycles.load(Ordering::Relaxed);
                let failed = live.failed.load(Ordering::Relaxed);
                bar.set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
                bar.set_message(format!(
                    "{} cycles, {}/s, {failed} failed",
                    group_digits(cycles),
                    group_digits(per_second(cycles, elapsed) as u64),
                ));
            }
        }
    }
}

fn print_summary(
    rl: &Redlock,
    args: &BenchArgs,
    total: &WorkerReport,
    elapsed: Duration,
    interrupted: bool,
) {
    let cycles = total.acquire.count();
    println!(
        "quorumlock bench: {} nodes (quorum {}), {} worker(s), TTL {:?}, {:.1} s{}",
        rl.node_count(),
        rl.quorum(),
        args.workers,
        args.ttl,
        elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    );
    println!("nodes: {}", rl.nodes().collect::<Vec<_>>().join(", "));
    println!();
    println!(
        "cycles      {:>12}   ({} acquire + release per second)",
        group_digits(cycles),
        group_digits(per_second(cycles, elapsed) as u64)
    );
    println!(
        "failed      {:>12}   ({} acquire(s), {} release(s))",
        group_digits(total.failed_acquires + total.failed_releases),
        total.failed_acquires,
        total.failed_releases
    );
    println!();
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10}",
        "latency", "p50", "p90", "p99", "max"
    );
    for (name, h) in [("acquire", &total.acquire), ("release", &total.release)] {
        println!(
            "{name:<10} {:>10} {:>10} {:>10} {:>10}",
            show(h.quantile(0.50)),
            show(h.quantile(0.90)),
            show(h.quantile(0.99)),
            show(h.max()),
        );
    }
    if let Some(e) = &total.last_error {
        println!();
        println!("last error: {e}");
    }
}

fn per_second(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn show(d: Option<Duration>) -> String {
    match d {
        None => "-".to_owned(),
        Some(d) if d < Duration::from_millis(10) => format!("{} µs", d.as_micros()),
        Some(d) if d < Duration::from_secs(10) => format!("{:.1} ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
    }
}

/// Sub-buckets per doubling of the value: quantiles are exact below this many microseconds
/// and within 1/64 (1.6 %) above.
const SUB_BUCKETS: u64 = 64;

/// A latency histogram in microseconds with log-linear buckets: constant memory however long
/// the bench runs.
#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    count: u64,
    max: u64,
}

impl Histogram {
    fn bucket(micros: u64) -> usize {
        if micros < SUB_BUCKETS {
            return micros as usize;
        }
        let exponent = u64::from(63 - micros.leading_zeros()); // ≥ 6
        let shift = exponent - 6; // keep the 6 bits after the leading one
        let mantissa = (micros >> shift) & (SUB_BUCKETS - 1);
        (SUB_BUCKETS + (exponent - 6) * SUB_BUCKETS + mantissa) as usize
    }

    /// The middle of a bucket's range.
    fn value(bucket: usize) -> u64 {
        let bucket = bucket as u64;
        if bucket < SUB_BUCKETS {
            return bucket;
        }
        let exponent = (bucket - SUB_BUCKETS) / SUB_BUCKETS + 6;
        let mantissa = (bucket - SUB_BUCKETS) % SUB_BUCKETS;
        let shift = exponent - 6;
        let low = (SUB_BUCKETS + mantissa) << shift;
        low + (1 << shift) / 2
    }

    fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = Self::bucket(micros);
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] += 1;
        self.count += 1;
        self.max = self.max.max(micros);
    }

    fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    fn count(&self) -> u64 {
        self.count
    }

    fn max(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_micros(self.max))
    }

    /// The `q`-quantile, by the nearest-rank definition every figure of the project uses
    /// ([`nearest_rank`]), read from the buckets: never above the largest value seen.
    fn quantile(&self, q: f64) -> Option<Duration> {
        let rank = nearest_rank(self.count, q)?;
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_micros(Self::value(bucket).min(self.max)));
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_large_ones_within_two_percent() {
        for micros in [0, 1, 63, 64, 100, 1_000, 12_345, 999_999, 86_400_000_000] {
            let value = Histogram::value(Histogram::bucket(micros));
            let error = value.abs_diff(micros) as f64 / micros.max(1) as f64;
            assert!(error <= 1.0 / 64.0, "{micros} µs read back as {value} µs");
            if micros < SUB_BUCKETS {
                assert_eq!(value, micros);
            }
        }
    }

    #[test]
    fn quantiles_follow_the_recorded_values() {
        let mut h = Histogram::default();
        for micros in 1..=1000 {
            h.record(Duration::from_micros(micros));
        }
        let p50 = h.quantile(0.5).unwrap().as_micros() as f64;
        let p99 = h.quantile(0.99).unwrap().as_micros() as f64;
        assert!((p50 - 500.0).abs() / 500.0 < 0.02, "{p50}");
        assert!((p99 - 990.0).abs() / 990.0 < 0.02, "{p99}");
        assert_eq!(h.max(), Some(Duration::from_micros(1000)));
        assert_eq!(h.count(), 1000);
    }

    #[test]
    fn merging_adds_counts_and_keeps_the_maximum() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(Duration::from_micros(10));
        b.record(Duration::from_millis(50));
        b.record(Duration::from_millis(50));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max(), Some(Duration::from_millis(50)));
        assert_eq!(Histogram::default().quantile(0.5), None);
    }
}

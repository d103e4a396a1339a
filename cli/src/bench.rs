//! `quorumlock bench`: acquire + release cycles against a user's own masters, to size a
//! deployment. By default each worker locks a resource of its own (no contention), so the
//! numbers are the client's and the masters' cost of one lock, not queueing behind other
//! holders. With `--contended` every worker locks one resource, and the summary adds the
//! hand-off gap (from one holder's call to release to the next holder's acquire returning),
//! each worker's share and an occupancy check; with `--separate-clients` each worker has a
//! client of its own, as separate processes would.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use quorumlock::Redlock;
use quorumlock_testkit::figures::{group_digits, nearest_rank};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::durable::DurableArg;
use crate::duration;
use crate::nodes::NodesArg;
use crate::output::out;

pub(crate) const EXAMPLES: &str = "\
Examples:
  # One worker for ten seconds against three masters.
  quorumlock bench --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379

  # 32 concurrent workers for a minute.
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 \\
      quorumlock bench --workers 32 --duration 1m

  # 8 workers on one resource, each with its own client, holding it 1 ms per cycle.
  quorumlock bench --nodes ... --workers 8 --contended --separate-clients --hold 1ms

  # Under the README's least-privilege ACL (keys locks:* and {locks:*).
  quorumlock bench --nodes redis://quorumlock:PASSWORD@10.0.0.1:6379,... --key-prefix locks:

Each worker acquires and releases a resource of its own, quorumlock-bench:<run>:<worker> (key
<prefix>quorumlock-bench:<run>:<worker>; with --contended, all share
quorumlock-bench:<run>:shared); every key is released at once
(or expires after --ttl if the bench is killed). Ctrl-C or SIGTERM stops the run early; the
summary is still printed.";

/// Options of `quorumlock bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    nodes: NodesArg,
    #[command(flatten)]
    durable: DurableArg,
    /// Concurrent workers, each cycling on its own resource.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// How long to run (Ctrl-C or SIGTERM stops early and still prints the summary).
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// The lease each cycle takes.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    ttl: Duration,
    /// Every worker on one resource: adds the hand-off gap (release called → next holder's
    /// acquire returning), each worker's share and an occupancy check to the summary.
    #[arg(long)]
    contended: bool,
    /// Each worker with a client of its own (its own connections), as separate processes
    /// would have; by default the workers share one client.
    #[arg(long)]
    separate_clients: bool,
    /// How long each cycle holds the lock (asleep) before releasing it.
    #[arg(long, default_value = "0s", value_parser = duration::parse)]
    hold: Duration,
}

/// What every worker adds to while it runs; read by the progress line.
#[derive(Default)]
struct Live {
    cycles: AtomicU64,
    failed: AtomicU64,
    stop: AtomicBool,
}

/// With `--contended`: what the holders of the one resource hand on to each other.
#[derive(Default)]
struct Handoff {
    /// When the last holder called release.
    released: Mutex<Option<Instant>>,
    /// Somebody is inside the critical section.
    inside: AtomicBool,
    /// Times a worker entered while another was inside (must stay 0).
    overlaps: AtomicUsize,
}

impl Handoff {
    /// A worker's acquire returned at `acquired`: the gap since the last release, if any.
    fn enter(&self, acquired: Instant) -> Option<Duration> {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        let released = self
            .released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        released.map(|r| acquired.saturating_duration_since(r))
    }

    /// The worker is about to call release.
    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
        *self.released.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }
}

/// What one worker measured.
#[derive(Default)]
struct WorkerReport {
    acquire: Histogram,
    release: Histogram,
    /// With `--contended`: the gaps before this worker's acquires returned.
    gap: Histogram,
    failed_acquires: u64,
    failed_releases: u64,
    last_error: Option<String>,
}

/// The reports of every worker together.
#[derive(Default)]
struct Total {
    all: WorkerReport,
    /// Cycles completed by each worker.
    per_worker: Vec<u64>,
    overlaps: usize,
    /// The clients' own counters over the run: attempts, acquired, contended, wake-ups.
    counters: [u64; 4],
}

/// Attempts, acquired, contended attempts and wake-ups, summed over `clients`.
fn counters(clients: &[Redlock]) -> [u64; 4] {
    clients.iter().map(Redlock::stats).fold([0; 4], |sum, s| {
        [
            sum[0] + s.attempts,
            sum[1] + s.acquired,
            sum[2] + s.contended,
            sum[3] + s.wakeups,
        ]
    })
}

/// Runs the benchmark and prints its summary on stdout (progress goes to stderr).
///
/// # Errors
///
/// When the masters cannot be used at all: a bad URL or TTL, fewer than a quorum reachable, or
/// not one cycle completed; when the summary cannot be written (a full disk; a reader that
/// has gone is a normal end, as for every subcommand).
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    // Listening from the start: a SIGTERM while connecting ends the run with its summary too.
    // Without a handler (only for lack of resources), SIGTERM ends the process as before.
    let mut term = signal(SignalKind::terminate()).ok();
    let rl = args.durable.apply(args.nodes.builder()).build()?;
    // The library warns about each master that did not answer.
    rl.connect().await.context("the masters are not usable")?;
    // Checks the TTL against this configuration before any worker starts.
    let run_id = run_id();
    let probe = format!("quorumlock-bench:{run_id}:probe");
    rl.try_acquire(&probe, args.ttl)
        .await
        .context("a first acquire failed")?
        .release()
        .await
        .context("a first release failed")?;

    // One client per worker (all connected before the clock starts), or one shared.
    let mut clients = Vec::new();
    if args.separate_clients {
        for _ in 0..args.workers {
            let own = args.durable.apply(args.nodes.builder()).build()?;
            own.connect().await.context("the masters are not usable")?;
            clients.push(own);
        }
    }
    let counted: Vec<Redlock> = if clients.is_empty() {
        vec![rl.clone()]
    } else {
        clients.clone()
    };
    let before = counters(&counted);
    let handoff = args.contended.then(|| Arc::new(Handoff::default()));
    let live = Arc::new(Live::default());
    let started = Instant::now();
    let workers: Vec<_> = (0..args.workers)
        .map(|i| {
            let resource = if args.contended {
                format!("quorumlock-bench:{run_id}:shared")
            } else {
                format!("quorumlock-bench:{run_id}:{i}")
            };
            let client = clients.pop().unwrap_or_else(|| rl.clone());
            let cycle = Cycle {
                resource,
                ttl: args.ttl,
                hold: args.hold,
                handoff: handoff.clone(),
            };
            tokio::spawn(worker(client, cycle, live.clone()))
        })
        .collect();

    let progress = progress_bar(args.duration);
    let interrupted = drive(&progress, &live, started, args.duration, term.as_mut()).await;
    live.stop.store(true, Ordering::Relaxed);
    let mut total = Total::default();
    for handle in workers {
        let report = handle.await.context("a worker panicked")?;
        total.per_worker.push(report.acquire.count());
        total.all.acquire.merge(&report.acquire);
        total.all.release.merge(&report.release);
        total.all.gap.merge(&report.gap);
        total.all.failed_acquires += report.failed_acquires;
        total.all.failed_releases += report.failed_releases;
        total.all.last_error = report.last_error.or(total.all.last_error);
    }
    total.overlaps = handoff.map_or(0, |h| h.overlaps.load(Ordering::Relaxed));
    let after = counters(&counted);
    total.counters = std::array::from_fn(|i| after[i].saturating_sub(before[i]));
    let elapsed = started.elapsed();
    progress.finish_and_clear();

    let printed = print_summary(&rl, &args, &total, elapsed, interrupted);
    if total.all.acquire.count() == 0 {
        anyhow::bail!(
            "no cycle completed{}",
            total
                .all
                .last_error
                .as_ref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        );
    }
    if total.overlaps > 0 {
        anyhow::bail!(
            "{} time(s) two workers held the lock at once",
            total.overlaps
        );
    }
    printed.context("writing the summary")
}

/// What each cycle of a worker does.
struct Cycle {
    resource: String,
    ttl: Duration,
    /// How long the lock is held.
    hold: Duration,
    /// With `--contended`: the state the workers on the one resource share.
    handoff: Option<Arc<Handoff>>,
}

/// Tells this run's keys apart from those of other runs, here or on other machines.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:x}{nanos:08x}", std::process::id())
}

async fn worker(rl: Redlock, cycle: Cycle, live: Arc<Live>) -> WorkerReport {
    let mut report = WorkerReport::default();
    while !live.stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let lock = match rl.acquire(&cycle.resource, cycle.ttl).await {
            Ok(lock) => lock,
            Err(e) => {
                report.failed_acquires += 1;
                report.last_error = Some(e.to_string());
                live.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let t1 = Instant::now();
        if let Some(gap) = cycle.handoff.as_ref().and_then(|h| h.enter(t1)) {
            report.gap.record(gap);
        }
        if !cycle.hold.is_zero() {
            tokio::time::sleep(cycle.hold).await;
        }
        if let Some(handoff) = &cycle.handoff {
            handoff.leave();
        }
        let t2 = Instant::now();
        if let Err(e) = lock.release().await {
            report.failed_releases += 1;
            report.last_error = Some(e.to_string());
            live.failed.fetch_add(1, Ordering::Relaxed);
        }
        let t3 = Instant::now();
        report.acquire.record(t1 - t0);
        report.release.record(t3 - t2);
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

/// Updates the progress line until `duration` has passed, Ctrl-C or SIGTERM; `true` when
/// interrupted.
async fn drive(
    bar: &ProgressBar,
    live: &Live,
    started: Instant,
    duration: Duration,
    term: Option<&mut Signal>,
) -> bool {
    let deadline = tokio::time::Instant::from_std(started) + duration;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let terminated = async {
        match term {
            Some(term) => term.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(terminated);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            _ = &mut ctrl_c => return true,
            _ = &mut terminated => return true,
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
    total: &Total,
    elapsed: Duration,
    interrupted: bool,
) -> std::io::Result<()> {
    let cycles = total.all.acquire.count();
    let mode = match (args.contended, args.separate_clients) {
        (false, false) => "",
        (true, false) => " on one resource",
        (false, true) => ", a client each",
        (true, true) => " on one resource, a client each",
    };
    let hold = if args.hold.is_zero() {
        String::new()
    } else {
        format!(", held {:?}", args.hold)
    };
    let durable = args
        .durable
        .spelled()
        .map(|d| format!(", durable {d}"))
        .unwrap_or_default();
    out!(
        "quorumlock bench: {} nodes (quorum {}), {} worker(s){mode}, TTL {:?}{hold}{durable}, {:.1} s{}",
        rl.node_count(),
        rl.quorum(),
        args.workers,
        args.ttl,
        elapsed.as_secs_f64(),
        if interrupted { " (interrupted)" } else { "" }
    )?;
    out!("nodes: {}", rl.nodes().collect::<Vec<_>>().join(", "))?;
    out!()?;
    out!(
        "cycles      {:>12}   ({} acquire + release per second)",
        group_digits(cycles),
        group_digits(per_second(cycles, elapsed) as u64)
    )?;
    let total_calls = cycles + total.all.failed_acquires;
    out!(
        "failed      {:>12}   ({} acquire(s), {:.2} % of acquire calls; {} release(s))",
        group_digits(total.all.failed_acquires + total.all.failed_releases),
        total.all.failed_acquires,
        100.0 * total.all.failed_acquires as f64 / total_calls.max(1) as f64,
        total.all.failed_releases
    )?;
    if args.contended {
        let min = total.per_worker.iter().min().copied().unwrap_or(0);
        let max = total.per_worker.iter().max().copied().unwrap_or(0);
        out!(
            "per worker  {:>12.2}   (min/max of the workers' cycles: {} to {})",
            min as f64 / max.max(1) as f64,
            group_digits(min),
            group_digits(max)
        )?;
        out!(
            "overlaps    {:>12}   (two workers inside at once; must be 0)",
            total.overlaps
        )?;
        let [attempts, acquired, contended, wakeups] = total.counters;
        let per = |n: u64| n as f64 / acquired.max(1) as f64;
        out!(
            "attempts    {:>12.2}   (per lock acquired; {:.2} met contention, {:.2} woken by a hand-off)",
            per(attempts),
            per(contended),
            per(wakeups)
        )?;
    }
    out!()?;
    out!(
        "{:<10} {:>10} {:>10} {:>10} {:>10}",
        "latency",
        "p50",
        "p90",
        "p99",
        "max"
    )?;
    let mut rows = vec![
        ("acquire", &total.all.acquire),
        ("release", &total.all.release),
    ];
    if args.contended {
        rows.push(("hand-off", &total.all.gap));
    }
    for (name, h) in rows {
        out!(
            "{name:<10} {:>10} {:>10} {:>10} {:>10}",
            show(h.quantile(0.50)),
            show(h.quantile(0.90)),
            show(h.quantile(0.99)),
            show(h.max()),
        )?;
    }
    if args.contended {
        out!()?;
        out!("hand-off: from one holder's call to release to the next holder's acquire returning")?;
    }
    if let Some(e) = &total.all.last_error {
        out!()?;
        out!("last error: {e}")?;
    }
    Ok(())
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

//! `quorumlock demo`: five local masters, workers contending for one resource while masters are
//! killed, restarted, paused and resumed, and a report that counts overlaps in the critical
//! section (there must be none).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{OccupancyWitness, RedisNodes};

use crate::duration;
use crate::output::out;

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock demo
  quorumlock demo --workers 12 --duration 20s --ttl 500ms
  quorumlock demo --failover   # one master + replica loses a lock on failover; five masters do not";

const MASTERS: usize = 5;
const RESOURCE: &str = "demo:nightly-report";
/// Time spent inside the critical section: far below the lease, as it must be.
const WORK: Duration = Duration::from_millis(2);

/// Options of `quorumlock demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Contending workers.
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// How long the workers contend.
    #[arg(long, default_value = "6s", value_parser = duration::parse)]
    duration: Duration,
    /// The lock's TTL.
    #[arg(long, default_value = "1s", value_parser = duration::parse)]
    ttl: Duration,
    /// Instead: reproduce a failover losing a lock on one master with an async replica, and the
    /// same failovers on five independent masters, with the rule for where that stops.
    #[arg(long)]
    failover: bool,
}

/// What the workers saw.
#[derive(Debug, Default)]
struct Tally {
    acquisitions: AtomicU64,
    refusals: AtomicU64,
    unavailable: AtomicU64,
    expired_in_section: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
}

/// The latencies recorded so far, even if a worker panicked while recording one.
fn latencies(tally: &Tally) -> std::sync::MutexGuard<'_, Vec<Duration>> {
    tally
        .latencies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<std::process::ExitCode> {
    if args.failover {
        return failover().await;
    }
    anyhow::ensure!(args.workers > 0, "--workers must be at least 1");
    out!("Starting {MASTERS} independent redis-server masters on free loopback ports...")?;
    let nodes = tokio::task::spawn_blocking(|| RedisNodes::spawn(MASTERS))
        .await?
        .context("starting the demo masters")?;
    for (i, server) in nodes.iter().enumerate() {
        out!("  master {}  {}", i + 1, server.url())?;
    }
    let rl = Redlock::builder(nodes.urls())
        .node_timeout(Duration::from_millis(50))
        .build()?;
    out!(
        "{} workers contend for {RESOURCE:?} (TTL {:?}, quorum {}/{}) for {:?}.\n",
        args.workers,
        args.ttl,
        rl.quorum(),
        rl.node_count(),
        args.duration
    )?;

    let tally = Arc::new(Tally::default());
    let witness = OccupancyWitness::new(RESOURCE);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = ProgressBar::new_spinner();
    progress.set_style(ProgressStyle::with_template(
        "{spinner} {elapsed:>3} {msg}",
    )?);
    progress.enable_steady_tick(Duration::from_millis(100));

    let workers: Vec<_> = (0..args.workers)
        .map(|id| {
            let (rl, tally, witness, stop) =
                (rl.clone(), tally.clone(), witness.clone(), stop.clone());
            tokio::spawn(worker(id, rl, args.ttl, tally, witness, stop))
        })
        .collect();

    let started = Instant::now();
    let faults = {
        let progress = progress.clone();
        let (ttl, length) = (args.ttl, args.duration);
        std::thread::spawn(move || inject_faults(nodes, ttl, length, started, &progress))
    };
    while started.elapsed() < args.duration {
        progress.set_message(status_line(&tally, &witness));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await?;
    }
    progress.finish_and_clear();
    let nodes = faults
        .join()
        .map_err(|_| anyhow::anyhow!("the fault injector panicked"))??;
    let overlaps = witness.violations().len();
    report(&args, &tally, &rl.stats(), overlaps, started.elapsed())?;
    drop(nodes);
    Ok(if overlaps == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(crate::exit::FAILURE)
    })
}

async fn worker(
    id: usize,
    rl: Redlock,
    ttl: Duration,
    tally: Arc<Tally>,
    witness: OccupancyWitness,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        match rl.try_acquire(RESOURCE, ttl).await {
            Ok(lock) => {
                let latency = start.elapsed();
                tally.acquisitions.fetch_add(1, Ordering::Relaxed);
                latencies(&tally).push(latency);
                {
                    let _inside = witness.enter(id);
                    tokio::time::sleep(WORK).await;
                    if !lock.is_valid() {
                        tally.expired_in_section.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // A failed release only leaves keys to expire at the TTL; the demo goes on.
                let _ = lock.release().await;
                // Step back briefly so the lock passes between workers.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => {
                let counter = if is_refusal(&e) {
                    &tally.refusals
                } else {
                    &tally.unavailable
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
    }
}

fn is_refusal(e: &Error) -> bool {
    e.is_contention()
}

/// Kills a master and restarts it after more than a TTL, then pauses another and resumes it,
/// printing each event as it happens. Returns the masters so they stop when the demo ends.
fn inject_faults(
    mut nodes: RedisNodes,
    ttl: Duration,
    length: Duration,
    started: Instant,
    progress: &ProgressBar,
) -> anyhow::Result<RedisNodes> {
    let at = |fraction: f64| started + length.mul_f64(fraction);
    let say = |what: String| {
        let line = format!("  [{:>6.2}s] {what}", started.elapsed().as_secs_f64());
        // A hidden bar (output not a terminal) swallows println: print plainly then.
        if progress.is_hidden() {
            out!("{line}")
        } else {
            progress.println(line);
            Ok(())
        }
    };
    sleep_until(at(0.15));
    nodes[2].kill()?;
    say("master 3 killed (SIGKILL): 4 of 5 masters left, quorum still reachable".into())?;
    // A master that lost its keys must stay away for at least one TTL before rejoining.
    sleep_until((at(0.15) + ttl + Duration::from_millis(100)).max(at(0.45)));
    nodes[2].restart()?;
    say(format!(
        "master 3 restarted empty after more than one TTL ({ttl:?})"
    ))?;
    sleep_until(at(0.6));
    nodes[4].pause()?;
    say("master 5 paused (SIGSTOP): it accepts requests and never answers".into())?;
    sleep_until(at(0.8));
    nodes[4].resume()?;
    say("master 5 resumed (SIGCONT)".into())?;
    Ok(nodes)
}

fn sleep_until(deadline: Instant) {
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
}

fn status_line(tally: &Tally, witness: &OccupancyWitness) -> String {
    format!(
        "acquisitions {}  refusals {}  unavailable {}  overlaps {}",
        tally.acquisitions.load(Ordering::Relaxed),
        tally.refusals.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
        witness.violations().len(),
    )
}

fn report(
    args: &DemoArgs,
    tally: &Tally,
    stats: &quorumlock::Stats,
    overlaps: usize,
    took: Duration,
) -> std::io::Result<()> {
    let mut latencies = latencies(tally).clone();
    latencies.sort();
    let pct = |p: f64| -> String {
        match latencies.len() {
            0 => "-".into(),
            n => {
                let i = ((n - 1) as f64 * p).round() as usize;
                format!("{:.2} ms", latencies[i].as_secs_f64() * 1000.0)
            }
        }
    };
    let acquisitions = tally.acquisitions.load(Ordering::Relaxed);
    out!(
        "\nquorumlock demo: {MASTERS} masters, {} workers, {:.1}s, TTL {:?}",
        args.workers,
        took.as_secs_f64(),
        args.ttl
    )?;
    out!(
        "  acquisitions        {acquisitions:>8}   ({:.0}/s)",
        acquisitions as f64 / took.as_secs_f64()
    )?;
    out!(
        "  refusals            {:>8}   (held by another worker)",
        tally.refusals.load(Ordering::Relaxed)
    )?;
    out!(
        "  unavailable         {:>8}   (attempts without a quorum of answering masters)",
        tally.unavailable.load(Ordering::Relaxed)
    )?;
    out!(
        "  expired in section  {:>8}   (leases that ran out during the work)",
        tally.expired_in_section.load(Ordering::Relaxed)
    )?;
    out!("  acquire latency     p50 {}   p99 {}", pct(0.5), pct(0.99))?;
    out!(
        "  attempts            {:>8}   (granted {}, contended {})",
        stats.attempts,
        stats.acquired,
        stats.contended
    )?;
    out!("  per master          node errors / of which timeouts")?;
    for (i, node) in stats.nodes.iter().enumerate() {
        out!(
            "    master {}  {:<21} {:>6} / {}",
            i + 1,
            node.node,
            node.errors,
            node.timeouts
        )?;
    }
    out!("overlaps: {overlaps}")
}

/// `--failover`: runs the failover cases and prints each with the rule's prediction.
async fn failover() -> anyhow::Result<std::process::ExitCode> {
    out!(
        "Failover: the replica has not received the lock, the master dies, the replica is promoted\n\
         and the address moves to it. A second holder is possible once the f masters that lost\n\
         the key satisfy f >= q - N + k (N masters, quorum q, the holder locked k of them).\n"
    )?;
    let report = quorumlock_testkit::failover::run_failover_demo()
        .await
        .context("running the failover cases")?;
    for case in &report.cases {
        out!("* {case}\n")?;
    }
    let as_predicted = report.as_predicted();
    out!(
        "every case as the rule predicts: {}",
        if as_predicted { "yes" } else { "NO" }
    )?;
    Ok(if as_predicted {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(crate::exit::FAILURE)
    })
}

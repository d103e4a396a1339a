//! Taking one measurement: fresh clients in a fresh runtime, workers cycling acquire + release,
//! and what they saw inside the window; plus the masters' reply spread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock_testkit::figures::percentile;
use quorumlock_testkit::RedisServer;

use crate::config::{Config, Key, Setup, CONTENDED_PAUSE};
use crate::profile::{command_stats, commands_per_cycle};
use crate::support::{self, median, micros, process_cpu, servers_cpu, Client, Kind};

/// One measurement's results.
#[derive(Debug, Default, Clone)]
pub struct Measurement {
    /// Cycles (acquire + release) completed inside the window.
    pub cycles: usize,
    pub secs: f64,
    /// Sorted, microseconds.
    pub acquire: Vec<u32>,
    pub release: Vec<u32>,
    /// Contended: from a holder's call to release to the next holder's acquire returning.
    pub gaps: Vec<u32>,
    /// Cycles completed by each worker inside the window.
    pub per_worker: Vec<usize>,
    /// Acquires that returned an error inside the window (after the client's own retries).
    pub failed_acquires: usize,
    pub failed_releases: usize,
    pub last_error: Option<String>,
    /// Process CPU time (user + system) in the window, divided by the cycles.
    pub cpu_per_cycle: Option<Duration>,
    /// The masters' CPU time in the window, divided by the cycles.
    pub server_cpu_per_cycle: Option<Duration>,
    /// Workers still inside a cycle when the grace period after the window ran out.
    pub stalled: usize,
    /// Contended: times two workers were inside the critical section at once (must be 0).
    pub overlaps: usize,
    /// Separate clients: `acquire` calls that returned inside the window, successful or not.
    pub acquire_calls: usize,
    /// Separate clients: time inside the critical section, sorted, microseconds.
    pub hold: Vec<u32>,
    /// Separate clients: processes that were still connecting when the window opened.
    pub late: usize,
    /// Separate clients, and one client with healthy masters: per command, the calls and the
    /// microseconds the masters spent on it in the window (`INFO commandstats`, every master
    /// together), divided by the cycles.
    pub commands: BTreeMap<String, (f64, f64)>,
    /// Separate clients, quorumlock: its own counters over the window, every client together:
    /// attempts, attempts that acquired, attempts that met contention, wake-ups by a hand-off.
    pub counters: [u64; 4],
}

impl Measurement {
    pub fn rate(&self) -> f64 {
        self.cycles as f64 / self.secs
    }

    pub fn acquire_p(&self, p: f64) -> f64 {
        at(&self.acquire, p)
    }

    pub fn release_p(&self, p: f64) -> f64 {
        at(&self.release, p)
    }

    pub fn gap_p(&self, p: f64) -> f64 {
        at(&self.gaps, p)
    }

    pub fn hold_p(&self, p: f64) -> f64 {
        at(&self.hold, p)
    }

    /// Failed `acquire` calls, percent of the calls that returned inside the window; `NaN`
    /// where the calls were not counted.
    pub fn failed_pct(&self) -> f64 {
        if self.acquire_calls == 0 {
            f64::NAN
        } else {
            100.0 * self.failed_acquires as f64 / self.acquire_calls as f64
        }
    }

    /// quorumlock's attempts, contended attempts and wake-ups per acquired lock, over the
    /// window; `NaN` where not counted.
    pub fn per_acquired(&self) -> [f64; 3] {
        let [attempts, acquired, contended, wakeups] = self.counters;
        if acquired == 0 {
            return [f64::NAN; 3];
        }
        [attempts, contended, wakeups].map(|n| n as f64 / acquired as f64)
    }

    pub fn fairness(&self) -> f64 {
        let min = self.per_worker.iter().min().copied().unwrap_or(0);
        let max = self.per_worker.iter().max().copied().unwrap_or(0);
        if max == 0 {
            f64::NAN
        } else {
            min as f64 / max as f64
        }
    }

    pub fn cpu_us(&self) -> f64 {
        self.cpu_per_cycle
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }

    pub fn server_cpu_us(&self) -> f64 {
        self.server_cpu_per_cycle
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }
}

/// The `p`-percentile of sorted microseconds; zero when there are none.
fn at(sorted_us: &[u32], p: f64) -> f64 {
    f64::from(percentile(sorted_us, p).unwrap_or(0))
}

/// Per run: the median time from sending a `SET` to five healthy masters to its k-th reply,
/// k = 1..=5, microseconds (raw connections, one request in flight at a time).
pub type ReplySpread = [f64; 5];

/// Every measurement of every run, by what it measured.
#[derive(Default)]
pub struct Results {
    /// Per key, one measurement per run, in run order.
    pub measurements: BTreeMap<Key, Vec<Measurement>>,
    /// One per run of the uncontended case.
    pub reply_spreads: Vec<ReplySpread>,
}

/// A ratio between two measurements, computed within each run.
#[derive(Debug, Clone)]
pub struct Ratio {
    /// The median over runs.
    pub median: f64,
    /// The ratio of each run, in run order.
    pub per_run: Vec<f64>,
}

impl Results {
    pub fn add(&mut self, key: Key, measurement: Measurement) {
        self.measurements.entry(key).or_default().push(measurement);
    }

    pub fn runs(&self, key: Key) -> &[Measurement] {
        self.measurements.get(&key).map_or(&[], Vec::as_slice)
    }

    /// The median over runs of `f`.
    pub fn med(&self, key: Key, f: impl Fn(&Measurement) -> f64) -> f64 {
        median(&self.runs(key).iter().map(f).collect::<Vec<_>>())
    }

    /// `f(a) / f(b)` within each run.
    pub fn ratio(&self, a: Key, b: Key, f: impl Fn(&Measurement) -> f64) -> Ratio {
        let per_run: Vec<f64> = self
            .runs(a)
            .iter()
            .zip(self.runs(b))
            .map(|(x, y)| f(x) / f(y))
            .collect();
        Ratio {
            median: median(&per_run),
            per_run,
        }
    }
}

/// What one measurement runs against.
pub struct Spec<'a> {
    pub kind: Kind,
    pub setup: Setup,
    pub urls: &'a [String],
    /// The masters' process ids, for their CPU time.
    pub pids: Vec<u32>,
    pub workers: usize,
    /// The master to pause during the window.
    pub pause: Option<&'a RedisServer>,
    /// Makes this measurement's keys its own.
    pub tag: String,
}

/// One cycle a worker completed.
struct Cycle {
    completed: Instant,
    acquire_us: u32,
    release_us: u32,
}

/// Contended: one hand-over from a holder to the next.
struct Gap {
    /// When the next holder's acquire returned.
    acquired: Instant,
    /// Since the previous holder's call to release.
    us: u32,
}

/// What one worker saw.
#[derive(Default)]
struct WorkerLog {
    cycles: Vec<Cycle>,
    gaps: Vec<Gap>,
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
                log.gaps.push(Gap {
                    acquired: t1,
                    us: micros(t1.saturating_duration_since(released)),
                });
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
        log.cycles.push(Cycle {
            completed: t3,
            acquire_us: micros(t1 - t0),
            release_us: micros(t3 - t2),
        });
        if shared.contended {
            tokio::time::sleep(CONTENDED_PAUSE).await;
        }
    }
    log
}

/// Runs one measurement in a fresh runtime with fresh clients.
pub fn measure(spec: &Spec<'_>, cfg: &Config) -> Measurement {
    let Spec {
        kind,
        setup,
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
    let contended = setup == Setup::Contended;
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
        // The masters' commands, healthy masters only: a paused one would not answer `INFO`.
        let count_commands = setup == Setup::Healthy;
        let commands_start = count_commands.then(|| command_stats(urls));
        tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
        let commands_end = count_commands.then(|| command_stats(urls));
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
            for cycle in log.cycles.iter().filter(|c| inside(&c.completed)) {
                m.acquire.push(cycle.acquire_us);
                m.release.push(cycle.release_us);
                mine += 1;
            }
            m.cycles += mine;
            m.per_worker.push(mine);
            m.gaps.extend(
                log.gaps
                    .iter()
                    .filter(|g| inside(&g.acquired))
                    .map(|g| g.us),
            );
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
            if let (Some(start), Some(end)) = (&commands_start, commands_end) {
                m.commands = commands_per_cycle(start, end, m.cycles);
            }
        }
        m
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    m
}

/// How many fan-outs [`reply_spread`] times.
pub const SPREAD_SAMPLES: usize = 2000;

/// Times [`SPREAD_SAMPLES`] sequential `SET` fan-outs to `urls` on raw connections: what
/// deciding at the third reply instead of the fifth can save on these masters, whatever the
/// client.
pub fn reply_spread(urls: &[String]) -> ReplySpread {
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

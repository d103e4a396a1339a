//! Separate clients on one resource: every worker with a client of its own, as separate
//! processes would have, in one OS process or spread over several.
//!
//! Every measurement of this kind runs its workers in child processes of this bench binary (one
//! child for the one-process variant), so both variants share one code path:
//!
//! * the parent picks a window on `CLOCK_MONOTONIC`, which every process on the machine shares
//!   (an `Instant` cannot travel between processes), and starts the children with their
//!   [`ChildSpec`] in [`CHILD_ENV`];
//! * a child connects one client per worker, prints `ready`, and its workers loop
//!   acquire → critical section → release until the window closes (warming up before it opens);
//!   then it prints every cycle's four instants and every failed call, one per line, and exits
//!   on its own (a watchdog ends it if its workers hang past the grace period);
//! * the parent merges the lines of all children: the hand-off gap is the time from one
//!   holder's release starting to the next acquire returning, over every worker's events in
//!   time order.
//!
//! Occupancy is checked across processes with a marker file created with `O_EXCL` on entering
//! the critical section and removed on leaving it: a worker that finds it already there counts
//! an overlap. It lives on `/dev/shm` where there is one, so it costs a few microseconds.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

use crate::config::Config;
use crate::measure::{Measurement, Spec};
use crate::profile::{command_stats, commands_per_cycle};
use crate::support::{micros, servers_cpu, Client, Kind};

/// The environment variable that makes this bench binary a child of a separate-clients
/// measurement; it holds the child's [`ChildSpec`].
pub const CHILD_ENV: &str = "QUORUMLOCK_BENCH_CHILD";

/// Time the children get to start and connect before their warm-up counts.
const STARTUP: Duration = Duration::from_millis(500);

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock every process of the machine shares.
pub fn mono_ns() -> u64 {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64
}

fn sleep_until_ns(at: u64) {
    let now = mono_ns();
    if at > now {
        std::thread::sleep(Duration::from_nanos(at - now));
    }
}

/// What one child process runs.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub kind: Kind,
    pub urls: Vec<String>,
    /// This child's workers.
    pub workers: usize,
    /// The index of its first worker among all the measurement's workers.
    pub first: usize,
    /// How long each worker holds the lock (asleep), per cycle.
    pub work: Duration,
    pub resource: String,
    /// When the measured window opens, `CLOCK_MONOTONIC` nanoseconds.
    pub start_ns: u64,
    /// When the workers stop starting cycles, `CLOCK_MONOTONIC` nanoseconds.
    pub end_ns: u64,
    /// How long workers may run past `end_ns` before they count as stalled.
    pub grace: Duration,
    /// The occupancy marker file.
    pub marker: PathBuf,
}

impl ChildSpec {
    fn encode(&self) -> String {
        let kind = match self.kind {
            Kind::Quorumlock => "quorumlock",
            Kind::Rslock => "rslock",
            Kind::Raw => "raw",
            Kind::Bare => "bare",
        };
        [
            format!("kind={kind}"),
            format!("urls={}", self.urls.join(",")),
            format!("workers={}", self.workers),
            format!("first={}", self.first),
            format!("work_us={}", self.work.as_micros()),
            format!("resource={}", self.resource),
            format!("start_ns={}", self.start_ns),
            format!("end_ns={}", self.end_ns),
            format!("grace_ms={}", self.grace.as_millis()),
            format!("marker={}", self.marker.display()),
        ]
        .join("\n")
    }

    fn decode(text: &str) -> ChildSpec {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("{CHILD_ENV}: no {name} in {text:?}"))
        };
        let number = |name: &str| -> u64 {
            field(name)
                .parse()
                .unwrap_or_else(|_| panic!("{CHILD_ENV}: {name} is not a number"))
        };
        ChildSpec {
            kind: match field("kind") {
                "quorumlock" => Kind::Quorumlock,
                "rslock" => Kind::Rslock,
                "raw" => Kind::Raw,
                "bare" => Kind::Bare,
                other => panic!("{CHILD_ENV}: unknown kind {other:?}"),
            },
            urls: field("urls").split(',').map(str::to_owned).collect(),
            workers: number("workers") as usize,
            first: number("first") as usize,
            work: Duration::from_micros(number("work_us")),
            resource: field("resource").to_owned(),
            start_ns: number("start_ns"),
            end_ns: number("end_ns"),
            grace: Duration::from_millis(number("grace_ms")),
            marker: PathBuf::from(field("marker")),
        }
    }
}

/// One completed cycle: acquire called, acquire returned, release called, release returned
/// (`CLOCK_MONOTONIC` nanoseconds).
type Cycle = [u64; 4];

/// What one worker saw. Kept behind a mutex so that a stalled worker's cycles still count.
#[derive(Default)]
struct WorkerLog {
    cycles: Vec<Cycle>,
    failed_acquires: Vec<u64>,
    failed_releases: Vec<u64>,
    overlaps: usize,
    last_error: Option<String>,
}

/// Enters the critical section: `true` when this worker created the marker, `false` when
/// another holder's marker was already there (an overlap).
fn enter(marker: &Path) -> bool {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(marker)
    {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => panic!("occupancy marker {}: {e}", marker.display()),
    }
}

async fn worker(client: Client, spec: Arc<ChildSpec>, log: Arc<Mutex<WorkerLog>>) {
    loop {
        let t0 = mono_ns();
        if t0 >= spec.end_ns {
            return;
        }
        let held = match client.acquire(&spec.resource).await {
            Ok(held) => held,
            Err(e) => {
                let mut log = log.lock().unwrap();
                log.failed_acquires.push(mono_ns());
                log.last_error = Some(e);
                continue;
            }
        };
        let t1 = mono_ns();
        let mine = enter(&spec.marker);
        if !spec.work.is_zero() {
            tokio::time::sleep(spec.work).await;
        }
        if mine {
            std::fs::remove_file(&spec.marker).unwrap();
        }
        let t2 = mono_ns();
        let released = client.release(held).await;
        let t3 = mono_ns();
        let mut log = log.lock().unwrap();
        if !mine {
            log.overlaps += 1;
        }
        if let Err(e) = released {
            log.failed_releases.push(t3);
            log.last_error = Some(e);
        }
        log.cycles.push([t0, t1, t2, t3]);
    }
}

/// Attempts, acquired, contended and wake-ups, summed over `redlocks`.
fn counters(redlocks: &[quorumlock::Redlock]) -> [u64; 4] {
    redlocks
        .iter()
        .map(quorumlock::Redlock::stats)
        .fold([0; 4], |sum, s| {
            [
                sum[0] + s.attempts,
                sum[1] + s.acquired,
                sum[2] + s.contended,
                sum[3] + s.wakeups,
            ]
        })
}

/// The child role: runs the workers of the spec in [`CHILD_ENV`], prints what they saw on
/// stdout and exits.
pub fn child(encoded: &str) -> ! {
    let spec = Arc::new(ChildSpec::decode(encoded));
    // Whatever happens to the workers, this process ends shortly after the grace period.
    let hard_end = spec.end_ns + spec.grace.as_nanos() as u64 + 10_000_000_000;
    std::thread::spawn(move || {
        sleep_until_ns(hard_end);
        eprintln!(
            "compare child {}: still running at its hard deadline",
            std::process::id()
        );
        std::process::exit(3);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (logs, stalled, counters) = runtime.block_on(async {
        let mut clients = Vec::with_capacity(spec.workers);
        for _ in 0..spec.workers {
            clients.push(Client::connect(spec.kind, &spec.urls).await);
        }
        println!("ready {}", mono_ns());
        // quorumlock's own counters over the window, every client of this process together.
        let redlocks: Vec<quorumlock::Redlock> = clients
            .iter()
            .filter_map(|c| match c {
                Client::Quorumlock(rl) => Some(rl.clone()),
                _ => None,
            })
            .collect();
        let (start_ns, end_ns) = (spec.start_ns, spec.end_ns);
        let counters = tokio::spawn(async move {
            let at =
                |ns: u64| tokio::time::sleep(Duration::from_nanos(ns.saturating_sub(mono_ns())));
            at(start_ns).await;
            let before = counters(&redlocks);
            at(end_ns).await;
            let after = counters(&redlocks);
            std::array::from_fn::<u64, 4, _>(|i| after[i] - before[i])
        });
        let logs: Vec<_> = (0..spec.workers)
            .map(|_| Arc::new(Mutex::new(WorkerLog::default())))
            .collect();
        let mut handles: Vec<_> = clients
            .into_iter()
            .zip(&logs)
            .map(|(client, log)| tokio::spawn(worker(client, spec.clone(), log.clone())))
            .collect();
        let grace = spec.end_ns + spec.grace.as_nanos() as u64;
        let mut stalled = 0;
        for handle in &mut handles {
            let left = Duration::from_nanos(grace.saturating_sub(mono_ns()));
            if tokio::time::timeout(left, &mut *handle).await.is_err() {
                handle.abort();
                stalled += 1;
            }
        }
        let counters = counters.await.unwrap();
        (logs, stalled, counters)
    });
    let mut out = String::new();
    for (i, log) in logs.iter().enumerate() {
        let log = log.lock().unwrap();
        let w = spec.first + i;
        let _ = writeln!(out, "worker {w}");
        for [t0, t1, t2, t3] in &log.cycles {
            let _ = writeln!(out, "cycle {w} {t0} {t1} {t2} {t3}");
        }
        for t in &log.failed_acquires {
            let _ = writeln!(out, "failed-acquire {w} {t}");
        }
        for t in &log.failed_releases {
            let _ = writeln!(out, "failed-release {w} {t}");
        }
        let _ = writeln!(out, "overlaps {}", log.overlaps);
        if let Some(e) = &log.last_error {
            let _ = writeln!(out, "error {}", e.replace('\n', " "));
        }
    }
    let _ = writeln!(out, "stalled {stalled}");
    let [attempts, acquired, contended, wakeups] = counters;
    let _ = writeln!(out, "counters {attempts} {acquired} {contended} {wakeups}");
    let _ = writeln!(out, "done");
    print!("{out}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // The runtime may hold aborted tasks or background connection tasks: do not wait for them.
    std::process::exit(0);
}

/// What the parent read from all children of one measurement.
#[derive(Default)]
struct Merged {
    /// Per worker, its cycles.
    cycles: Vec<Vec<Cycle>>,
    failed_acquires: Vec<u64>,
    failed_releases: Vec<u64>,
    overlaps: usize,
    stalled: usize,
    ready: Vec<u64>,
    /// quorumlock's counters over the window: attempts, acquired, contended, wake-ups.
    counters: [u64; 4],
    last_error: Option<String>,
}

impl Merged {
    fn read(&mut self, child: u32, output: impl BufRead) {
        let mut done = false;
        for line in output.lines() {
            let line = line.unwrap();
            let (tag, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            let numbers = || -> Vec<u64> {
                rest.split_whitespace()
                    .map(|n| {
                        n.parse()
                            .unwrap_or_else(|_| panic!("child {child}: {line:?}"))
                    })
                    .collect()
            };
            match tag {
                "ready" => self.ready.push(numbers()[0]),
                "worker" => {
                    let w = numbers()[0] as usize;
                    if self.cycles.len() <= w {
                        self.cycles.resize_with(w + 1, Vec::new);
                    }
                }
                "cycle" => {
                    let n = numbers();
                    self.cycles[n[0] as usize].push([n[1], n[2], n[3], n[4]]);
                }
                "failed-acquire" => self.failed_acquires.push(numbers()[1]),
                "failed-release" => self.failed_releases.push(numbers()[1]),
                "overlaps" => self.overlaps += numbers()[0] as usize,
                "stalled" => self.stalled += numbers()[0] as usize,
                "counters" => {
                    for (sum, n) in self.counters.iter_mut().zip(numbers()) {
                        *sum += n;
                    }
                }
                "error" => self.last_error = Some(rest.to_owned()),
                "done" => done = true,
                _ => panic!("child {child}: unexpected line {line:?}"),
            }
        }
        assert!(done, "child {child} ended without its report");
    }
}

/// Runs one separate-clients measurement: `spec.workers` workers spread over `processes`
/// child processes, each worker holding the lock for `work` per cycle.
pub fn measure(spec: &Spec<'_>, processes: usize, work: Duration, cfg: &Config) -> Measurement {
    let dir = marker_dir(&spec.tag);
    let marker = dir.join("held");
    let start = mono_ns() + (STARTUP + Duration::from_secs_f64(cfg.warmup)).as_nanos() as u64;
    let end = start + Duration::from_secs_f64(cfg.secs).as_nanos() as u64;
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::with_capacity(processes);
    let mut first = 0;
    for p in 0..processes {
        let workers = spec.workers / processes + usize::from(p < spec.workers % processes);
        let child = ChildSpec {
            kind: spec.kind,
            urls: spec.urls.to_vec(),
            workers,
            first,
            work,
            resource: format!("bench:{}:shared", spec.tag),
            start_ns: start,
            end_ns: end,
            grace: Duration::from_secs_f64(cfg.grace),
            marker: marker.clone(),
        };
        first += workers;
        children.push(
            Command::new(&exe)
                .env(CHILD_ENV, child.encode())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
    }
    // Readers drain every child's stdout while the window runs, so no child blocks on a full
    // pipe.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let (pid, stdout) = (child.id(), child.stdout.take().unwrap());
            std::thread::spawn(move || {
                let mut merged = Merged::default();
                merged.read(pid, BufReader::new(stdout));
                merged
            })
        })
        .collect();
    sleep_until_ns(start);
    let (servers_start, commands_start) = (servers_cpu(&spec.pids), command_stats(spec.urls));
    sleep_until_ns(end);
    let (servers_end, commands_end) = (servers_cpu(&spec.pids), command_stats(spec.urls));

    let mut merged = Merged::default();
    for (child, reader) in children.iter_mut().zip(readers) {
        let status = child.wait().unwrap();
        assert!(status.success(), "child {} ended with {status}", child.id());
        let part = reader.join().unwrap();
        if merged.cycles.len() < part.cycles.len() {
            merged.cycles.resize_with(part.cycles.len(), Vec::new);
        }
        for (w, cycles) in part.cycles.into_iter().enumerate() {
            merged.cycles[w].extend(cycles);
        }
        merged.failed_acquires.extend(part.failed_acquires);
        merged.failed_releases.extend(part.failed_releases);
        merged.overlaps += part.overlaps;
        merged.stalled += part.stalled;
        merged.ready.extend(part.ready);
        for (sum, n) in merged.counters.iter_mut().zip(part.counters) {
            *sum += n;
        }
        merged.last_error = part.last_error.or(merged.last_error);
    }
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_dir(&dir);

    let mut m = summarize(&merged, start, end);
    if m.cycles > 0 {
        m.server_cpu_per_cycle = Some((servers_end - servers_start) / m.cycles as u32);
        m.commands = commands_per_cycle(&commands_start, commands_end, m.cycles);
    }
    m
}

/// A directory of its own for one measurement's occupancy marker, on `/dev/shm` when there is
/// one.
fn marker_dir(tag: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let name: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = base.join(format!("quorumlock-bench-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.join("held"));
    dir
}

/// The figures of one measurement from every worker's events, inside the window
/// `[start, end)`.
fn summarize(merged: &Merged, start: u64, end: u64) -> Measurement {
    let inside = |t: u64| t >= start && t < end;
    let us = |ns: u64| micros(Duration::from_nanos(ns));
    let mut m = Measurement {
        secs: Duration::from_nanos(end - start).as_secs_f64(),
        overlaps: merged.overlaps,
        stalled: merged.stalled,
        late: merged.ready.iter().filter(|&&t| t > start).count(),
        counters: merged.counters,
        last_error: merged.last_error.clone(),
        ..Measurement::default()
    };
    // Every acquire return and release start, in time order: a release followed by an acquire
    // is one hand-off.
    let mut events: Vec<(u64, bool)> = Vec::new();
    for cycles in &merged.cycles {
        let mut mine = 0;
        for &[t0, t1, t2, t3] in cycles {
            events.push((t1, true));
            events.push((t2, false));
            if inside(t1) {
                m.acquire_calls += 1;
            }
            if inside(t3) {
                mine += 1;
                m.acquire.push(us(t1 - t0));
                m.hold.push(us(t2 - t1));
                m.release.push(us(t3 - t2));
            }
        }
        m.cycles += mine;
        m.per_worker.push(mine);
    }
    events.sort_unstable();
    for pair in events.windows(2) {
        if let [(released, false), (acquired, true)] = *pair {
            if inside(acquired) {
                m.gaps.push(us(acquired - released));
            }
        }
    }
    m.failed_acquires = merged
        .failed_acquires
        .iter()
        .filter(|&&t| inside(t))
        .count();
    m.acquire_calls += m.failed_acquires;
    m.failed_releases = merged
        .failed_releases
        .iter()
        .filter(|&&t| inside(t))
        .count();
    m.acquire.sort_unstable();
    m.hold.sort_unstable();
    m.release.sort_unstable();
    m.gaps.sort_unstable();
    m
}

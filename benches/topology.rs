//! Whether a Redis Cluster voter spreads the work: quorumlock's acquire + release cycle on three
//! standalone masters, against three Cluster voters of three primaries each.
//!
//! | case | voters | redis-server processes |
//! |---|---|---|
//! | A | 3 standalone masters (`redis://`) | 3 |
//! | B | 3 Redis Clusters of 3 primaries, no replica (`redis+cluster://`) | 9 |
//! | C | as B, on TLS only (`rediss+cluster://`), with the `tls` feature | 9 |
//!
//! C is what TLS costs a Cluster voter: its nodes have no plain port (`--port 0`), the cluster
//! bus on TLS too (`--tls-cluster yes`), with a throw-away CA (`testkit::tls::TestCa`) the client
//! trusts and no client certificate, the way managed cluster-mode services with encryption in
//! transit run. The report compares C with B, within each run: cycles/s, and the client's and
//! the servers' CPU per cycle. Without the `tls` feature the bench runs A and B alone.
//!
//! In both cases one `Redlock` over the three voters is shared by 64 workers (tokio tasks on a
//! multi-threaded runtime), each cycling acquire (TTL 10 s) + release on a resource of its own,
//! `r0`..`r63`. A standalone master serves every resource; on a Cluster voter a resource's keys
//! live under the hash tag `{r<i>}`, in one slot, hence on one of the three primaries (here 21,
//! 24 and 19 of the 64). The bench measures the cycles per second and, per server, the commands
//! it processed and the CPU it spent per cycle (`INFO stats`; `/proc/<pid>/stat` utime + stime,
//! before and after the window). The question: does each shard primary of a Cluster voter do a
//! third of a standalone master's work per cycle, so that the voter as a whole costs about as
//! much as one master?
//!
//! On 2026-11-25 (2 cores shared with other jobs' test suites: load average 7.3 to 8.3 during the
//! run, so the throughput figures are noisy): the commands spread as expected, each primary
//! processing 2.4 to 2.8 per cycle against a master's 7.3 to 8.3 (a third, roughly in proportion to
//! the resources it serves; all nine together 23.6 against A's 23.3), but the CPU does not: a
//! primary spends 0.52× a master's CPU per cycle (0.47× to 0.60× by primary), not 0.33×, because
//! each command costs it 2.0 to 2.4 µs against a master's 1.4 to 1.5 µs. Its requests arrive in
//! smaller batches (27 to 50 commands per read, against 53 to 103), but the primaries of the voter
//! with the smallest batches pay hardly more per command than the others, so most of the rest is
//! presumably cluster mode's own per-command work (slot checks, per-slot key bookkeeping), which
//! this bench does not separate. So a whole Cluster voter costs 1.55× a standalone master's CPU per
//! cycle ([1.60, 1.55, 1.54] by run), and the client 1.2× (53.5 against 44.0 µs per cycle).
//! Cycles/s B/A: 0.91× [0.91, 0.88, 1.14], both cases bound by the two shared cores. An earlier
//! full run the same day (load 8.5 to 9.8) saw 0.61× per primary, 1.83× per voter, the client at
//! 2.0×, and 0.55× the cycles/s [0.68, 0.34, 0.55].
//!
//! ```text
//! cargo bench --bench topology --features tls                            # the full run
//! QUORUMLOCK_BENCH_QUICK=1 cargo bench --bench topology --features tls   # a smoke run
//! ```
//!
//! Both topologies run side by side for the whole bench, on the `redis-server` the testkit finds
//! (`QUORUMLOCK_REDIS_SERVER`, else `PATH`; the clusters are created with `redis-cli`). Runs are
//! interleaved, the first case of each run rotating (A B C, B C A, ...). Figures are medians over
//! runs; the ratios (B/A, C/A, C/B) are computed within each run, then their median taken. Before the runs, each
//! topology's servers are watched idle for one window: a cluster node's gossip and cron cost a
//! little CPU of their own, which the per-cycle figures include.
//!
//! Settings, by environment variable: `QUORUMLOCK_BENCH_SECS` (window, 3 s),
//! `QUORUMLOCK_BENCH_WARMUP` (0.5 s), `QUORUMLOCK_BENCH_RUNS` (3); `QUORUMLOCK_BENCH_QUICK=1`
//! makes them 0.5, 0.2 and 1. A full run also writes its report to
//! `benches/results/topology-DATE.md`.

mod support;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{resource_key, Redlock};
use quorumlock_testkit::figures::{group_digits, percentile};
use quorumlock_testkit::tls::TestCa;
use quorumlock_testkit::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;

use support::{env_or, median, process_cpu, servers_cpu, TTL};

/// Voters in each case.
const VOTERS: usize = 3;
/// Primaries of each Cluster voter.
const PRIMARIES: usize = 3;
/// Workers, each on its own resource.
const WORKERS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Standalone,
    Cluster,
    TlsCluster,
}

impl Case {
    /// The cases this build runs: C needs the `tls` feature.
    const ALL: &'static [Case] = if cfg!(feature = "tls") {
        &[Case::Standalone, Case::Cluster, Case::TlsCluster]
    } else {
        &[Case::Standalone, Case::Cluster]
    };

    fn letter(self) -> &'static str {
        match self {
            Case::Standalone => "A",
            Case::Cluster => "B",
            Case::TlsCluster => "C",
        }
    }

    fn voters(self) -> String {
        match self {
            Case::Standalone => format!("{VOTERS} standalone masters"),
            Case::Cluster => format!("{VOTERS} clusters of {PRIMARIES} primaries"),
            Case::TlsCluster => format!("{VOTERS} TLS-only clusters of {PRIMARIES} primaries"),
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
            secs: env_or("QUORUMLOCK_BENCH_SECS", if quick { 0.5 } else { 3.0 }),
            warmup: env_or("QUORUMLOCK_BENCH_WARMUP", if quick { 0.2 } else { 0.5 }),
            runs: env_or("QUORUMLOCK_BENCH_RUNS", if quick { 1 } else { 3 }),
            quick,
        }
    }
}

/// One `redis-server` process of a topology.
struct Server {
    /// Which voter it belongs to (0-based).
    voter: usize,
    /// "master", or "primary k" (k 1-based, in slot order) of a cluster.
    name: String,
    pid: u32,
    /// `redis://127.0.0.1:PORT` (a TLS-only node's Unix socket), for `INFO stats`.
    url: String,
    /// How many of the workers' resources it serves.
    resources: usize,
}

/// One case's voters, running until dropped, and its client.
struct Topology {
    case: Case,
    urls: Vec<String>,
    servers: Vec<Server>,
    masters: Vec<RedisServer>,
    clusters: Vec<RedisCluster>,
    /// The CA whose certificates C's nodes present, which its client trusts.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    ca: Option<TestCa>,
}

impl Topology {
    fn spawn(case: Case) -> Topology {
        match case {
            Case::Standalone => {
                let masters: Vec<RedisServer> =
                    (0..VOTERS).map(|_| RedisServer::spawn().unwrap()).collect();
                let servers = masters
                    .iter()
                    .enumerate()
                    .map(|(voter, m)| Server {
                        voter,
                        name: "master".to_owned(),
                        pid: m.pid().unwrap(),
                        url: m.url(),
                        resources: WORKERS,
                    })
                    .collect();
                Topology {
                    case,
                    urls: masters.iter().map(RedisServer::url).collect(),
                    servers,
                    masters,
                    clusters: Vec::new(),
                    ca: None,
                }
            }
            Case::Cluster | Case::TlsCluster => {
                let ca = (case == Case::TlsCluster).then(|| TestCa::generate().unwrap());
                let clusters: Vec<RedisCluster> = (0..VOTERS)
                    .map(|_| {
                        let mut builder = RedisCluster::builder()
                            .primaries(PRIMARIES)
                            .replicas_per_primary(0);
                        if let Some(ca) = &ca {
                            builder = builder.server(RedisServer::builder().tls(ca.server_tls()));
                        }
                        builder.spawn().unwrap()
                    })
                    .collect();
                let mut servers = Vec::new();
                for (voter, cluster) in clusters.iter().enumerate() {
                    let mut served = [0; PRIMARIES];
                    for i in 0..WORKERS {
                        let key = resource_key("", &resource(i));
                        served[cluster.primary_for_key(&key).unwrap()] += 1;
                    }
                    for (k, node) in cluster.nodes()[..PRIMARIES].iter().enumerate() {
                        servers.push(Server {
                            voter,
                            name: format!("primary {}", k + 1),
                            pid: node.pid().unwrap(),
                            url: node.url(),
                            resources: served[k],
                        });
                    }
                }
                Topology {
                    case,
                    urls: clusters.iter().map(RedisCluster::url).collect(),
                    servers,
                    masters: Vec::new(),
                    clusters,
                    ca,
                }
            }
        }
    }

    /// The client of this case, shared by its workers: C's trusts the CA.
    fn client(&self) -> Redlock {
        let builder = Redlock::builder(&self.urls);
        #[cfg(feature = "tls")]
        let builder = match &self.ca {
            Some(ca) => {
                builder.tls_root_certificate(ca.read(quorumlock_testkit::tls::CA_CERT).unwrap())
            }
            None => builder,
        };
        builder.build().unwrap()
    }

    fn pids(&self) -> Vec<u32> {
        self.servers.iter().map(|s| s.pid).collect()
    }

    /// Each server's CPU time so far, in server order.
    fn cpu(&self) -> Vec<Duration> {
        self.servers.iter().map(|s| servers_cpu(&[s.pid])).collect()
    }

    /// A connection to each server, in server order, for [`counters`].
    async fn stats_connections(&self) -> Vec<MultiplexedConnection> {
        let mut connections = Vec::new();
        for s in &self.servers {
            let client = redis::Client::open(s.url.as_str()).unwrap();
            connections.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        connections
    }

    fn processes(&self) -> usize {
        self.masters.len() + self.clusters.iter().map(RedisCluster::len).sum::<usize>()
    }
}

fn resource(i: usize) -> String {
    format!("r{i}")
}

/// Commands processed and reads from client sockets so far (`total_commands_processed` and
/// `total_reads_processed` of `INFO stats`), by server. The commands include those scripts call.
async fn counters(connections: &[MultiplexedConnection]) -> Vec<(u64, u64)> {
    let mut counts = Vec::new();
    for connection in connections {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut connection.clone())
            .await
            .unwrap();
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        counts.push((
            field("total_commands_processed:"),
            field("total_reads_processed:"),
        ));
    }
    counts
}

/// What the workers of one measurement saw inside the window, and what it cost.
#[derive(Default)]
struct Measurement {
    cycles: usize,
    secs: f64,
    /// Successful acquires, sorted.
    acquire: Vec<Duration>,
    /// Successful releases, sorted.
    release: Vec<Duration>,
    /// Acquires or releases that failed.
    errors: usize,
    last_error: Option<String>,
    /// CPU each server spent in the window, in server order.
    servers: Vec<Duration>,
    /// Commands each server processed in the window.
    commands: Vec<u64>,
    /// Reads from client sockets each server did in the window.
    reads: Vec<u64>,
    /// CPU this process (the client and its workers) spent in the window.
    client: Duration,
}

impl Measurement {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.secs
    }

    fn acquire_p50(&self) -> f64 {
        percentile(&self.acquire, 0.5)
            .unwrap_or_default()
            .as_secs_f64()
    }

    fn release_p50(&self) -> f64 {
        percentile(&self.release, 0.5)
            .unwrap_or_default()
            .as_secs_f64()
    }

    /// Microseconds of CPU per cycle.
    fn per_cycle(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.cycles as f64
    }

    fn server_per_cycle(&self, i: usize) -> f64 {
        self.per_cycle(self.servers[i])
    }

    fn commands_per_cycle(&self, i: usize) -> f64 {
        self.commands[i] as f64 / self.cycles as f64
    }

    fn all_commands_per_cycle(&self) -> f64 {
        self.commands.iter().sum::<u64>() as f64 / self.cycles as f64
    }

    /// Commands per read from a client socket: how many commands arrive together.
    fn commands_per_read(&self, i: usize) -> f64 {
        self.commands[i] as f64 / self.reads[i] as f64
    }

    /// CPU per command, in µs.
    fn server_per_command(&self, i: usize) -> f64 {
        self.servers[i].as_secs_f64() * 1e6 / self.commands[i] as f64
    }

    fn total_per_cycle(&self) -> f64 {
        self.per_cycle(self.servers.iter().sum())
    }

    /// The mean over servers of their CPU per cycle.
    fn mean_server_per_cycle(&self) -> f64 {
        self.total_per_cycle() / self.servers.len() as f64
    }

    fn client_per_cycle(&self) -> f64 {
        self.per_cycle(self.client)
    }

    fn merge(&mut self, other: Measurement) {
        self.cycles += other.cycles;
        self.acquire.extend(other.acquire);
        self.release.extend(other.release);
        self.errors += other.errors;
        self.last_error = other.last_error.or(self.last_error.take());
    }
}

/// The workers on the shared client `rl`, each cycling acquire + release on its own resource;
/// what completed inside the window after the warm-up, and the CPU spent in it.
async fn measure(
    rl: &Redlock,
    topology: &Topology,
    stats: &[MultiplexedConnection],
    cfg: &Config,
) -> Measurement {
    let counting = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..WORKERS)
        .map(|i| {
            let rl = rl.clone();
            let (counting, done) = (counting.clone(), done.clone());
            let resource = resource(i);
            tokio::spawn(async move {
                let mut seen = Measurement::default();
                while !done.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let acquired = rl.acquire(&resource, TTL).await;
                    let took = started.elapsed();
                    let releasing = Instant::now();
                    let cycle = match acquired {
                        Ok(lock) => lock.release().await.map(drop),
                        Err(e) => Err(e),
                    };
                    let released = releasing.elapsed();
                    if counting.load(Ordering::Relaxed) {
                        match cycle {
                            Ok(()) => {
                                seen.cycles += 1;
                                seen.acquire.push(took);
                                seen.release.push(released);
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
    let counted_before = counters(stats).await;
    let (servers_before, client_before) = (topology.cpu(), process_cpu());
    counting.store(true, Ordering::Relaxed);
    let opened = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(cfg.secs)).await;
    counting.store(false, Ordering::Relaxed);
    let secs = opened.elapsed().as_secs_f64();
    let (servers_after, client_after) = (topology.cpu(), process_cpu());
    let counted = counters(stats).await;
    let (commands, reads) = counted
        .iter()
        .zip(&counted_before)
        .map(|(after, before)| (after.0 - before.0, after.1 - before.1))
        .unzip();
    let mut m = Measurement {
        secs,
        servers: servers_after
            .iter()
            .zip(&servers_before)
            .map(|(after, before)| after.saturating_sub(*before))
            .collect(),
        client: client_after.saturating_sub(client_before),
        commands,
        reads,
        ..Measurement::default()
    };
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        m.merge(task.await.unwrap());
    }
    m.acquire.sort_unstable();
    m.release.sort_unstable();
    m
}

fn main() {
    let cfg = Config::from_env();
    let started = Instant::now();
    let load_before = loadavg();
    let topologies: Vec<Topology> = Case::ALL.iter().map(|c| Topology::spawn(*c)).collect();
    let version = server_version(&topologies[0].masters[0]);
    for t in &topologies[1..] {
        let voters: Vec<String> = (0..VOTERS)
            .map(|v| {
                let served: Vec<String> = t
                    .servers
                    .iter()
                    .filter(|s| s.voter == v)
                    .map(|s| s.resources.to_string())
                    .collect();
                served.join("/")
            })
            .collect();
        eprintln!(
            "case {}: resources per primary, by voter: {}",
            t.case.letter(),
            voters.join(", ")
        );
    }

    // Idle: what the servers spend with no client at all, per second.
    let idle: Vec<f64> = topologies
        .iter()
        .map(|t| {
            let before = servers_cpu(&t.pids());
            std::thread::sleep(Duration::from_secs_f64(cfg.secs));
            servers_cpu(&t.pids()).saturating_sub(before).as_secs_f64() * 1e3 / cfg.secs
        })
        .collect();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    // One client per case, shared by its workers for the whole bench.
    let clients: Vec<Redlock> = topologies
        .iter()
        .map(|t| {
            runtime.block_on(async {
                let rl = t.client();
                let health = rl.connect().await.unwrap();
                assert!(health.unreachable.is_empty(), "{:?}", health.unreachable);
                rl
            })
        })
        .collect();
    let stats: Vec<Vec<MultiplexedConnection>> = topologies
        .iter()
        .map(|t| runtime.block_on(t.stats_connections()))
        .collect();
    // Per case, one measurement per run, in run order.
    let mut results: Vec<Vec<Measurement>> = topologies.iter().map(|_| Vec::new()).collect();
    let mut log = Vec::new();
    for run in 0..cfg.runs {
        for k in 0..topologies.len() {
            let c = (k + run) % topologies.len();
            let t = &topologies[c];
            let m = runtime.block_on(measure(&clients[c], t, &stats[c], &cfg));
            let line = format!(
                "run {}/{} {} {:>6.0} cycles/s, acquire p50 {}, release p50 {}, CPU per cycle: servers {:.1} µs [{}], client {:.1} µs; commands per cycle {:.2} [{}]; errors {}{}; load {}",
                run + 1,
                cfg.runs,
                t.case.letter(),
                m.rate(),
                latency(m.acquire_p50()),
                latency(m.release_p50()),
                m.total_per_cycle(),
                (0..t.servers.len())
                    .map(|i| format!("{:.1}", m.server_per_cycle(i)))
                    .collect::<Vec<_>>()
                    .join(" "),
                m.client_per_cycle(),
                m.all_commands_per_cycle(),
                (0..t.servers.len())
                    .map(|i| format!("{:.2}", m.commands_per_cycle(i)))
                    .collect::<Vec<_>>()
                    .join(" "),
                m.errors,
                m.last_error
                    .as_deref()
                    .map(|e| format!(" (last: {e})"))
                    .unwrap_or_default(),
                loadavg(),
            );
            eprintln!("{line}");
            log.push(line);
            results[c].push(m);
        }
    }
    drop(stats);
    drop(clients);
    drop(runtime);
    let processes: Vec<usize> = topologies.iter().map(Topology::processes).collect();
    let servers: Vec<Vec<(usize, String, usize)>> = topologies
        .iter()
        .map(|t| {
            t.servers
                .iter()
                .map(|s| (s.voter, s.name.clone(), s.resources))
                .collect()
        })
        .collect();
    drop(topologies);

    let (a, b) = (&results[0], &results[1]);
    let c = results.get(2);
    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        "## Whether a Cluster voter spreads the work: {VOTERS} voters, {WORKERS} workers, {version}"
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(
        w,
        "`cargo bench --bench topology` on commit {}, {}. {} CPU(s), load average {load_before} before, {} after (other jobs may be running: see the load after each measurement below); {:.0} s.",
        sh("git", &["describe", "--always", "--dirty"]),
        sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        started.elapsed().as_secs_f64(),
    )
    .unwrap();
    writeln!(
        w,
        "Medians of {} interleaved run(s) (the first case rotating by run), {} s windows after {} s warm-up; ratios against A computed within each run (per-run values in brackets). One `Redlock` per case, shared by the {WORKERS} workers (tokio tasks on a multi-threaded runtime), each on its own resource (`r0`..`r{}`); TTL {TTL:?}, default settings otherwise. CPU from `/proc/<pid>/stat` (utime + stime, in 10 ms ticks) before and after each window; the client's is this whole process's. Idle, with no client, the servers spend (ms of CPU per second): {}.",
        cfg.runs,
        cfg.secs,
        cfg.warmup,
        WORKERS - 1,
        Case::ALL
            .iter()
            .zip(&idle)
            .map(|(case, ms)| format!("{} {ms:.1}", case.letter()))
            .collect::<Vec<_>>()
            .join(", "),
    )
    .unwrap();
    writeln!(w).unwrap();
    writeln!(w, "| case | voters | redis-server processes | cycles/s | cycles/s vs A | acquire p50 | release p50 | server commands per cycle | server CPU per cycle | per voter | server CPU per cycle vs A | client CPU per cycle | errors |").unwrap();
    writeln!(
        w,
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|"
    )
    .unwrap();
    for (c, &case) in Case::ALL.iter().enumerate() {
        let runs = &results[c];
        let of = |f: fn(&Measurement) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} | {} | {} |",
            case.letter(),
            case.voters(),
            processes[c],
            group_digits(of(Measurement::rate).round() as u64),
            ratios(runs, a, Measurement::rate),
            latency(of(Measurement::acquire_p50)),
            latency(of(Measurement::release_p50)),
            of(Measurement::all_commands_per_cycle),
            micros(of(Measurement::total_per_cycle)),
            micros(of(Measurement::total_per_cycle) / VOTERS as f64),
            ratios(runs, a, Measurement::total_per_cycle),
            micros(of(Measurement::client_per_cycle)),
            runs.iter().map(|m| m.errors).sum::<usize>(),
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    writeln!(w, "Each server: how many of the {WORKERS} resources it serves (and that share), the commands it processed per cycle and per read from a client socket (`total_commands_processed` and `total_reads_processed` of `INFO stats`; the commands include those the library's scripts call, so 2 `EVALSHA`s a cycle count as 8; per read, they say how many requests arrive together), its CPU per command and per cycle, and its CPU per cycle against a standalone master's (the mean of A's three, within each run):").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "| case | voter | server | resources | commands per cycle | commands per read | CPU per command | CPU per cycle | CPU per cycle vs a standalone master |").unwrap();
    writeln!(w, "|---|---:|---|---:|---:|---:|---:|---:|---|").unwrap();
    for (c, &case) in Case::ALL.iter().enumerate() {
        let runs = &results[c];
        for (i, (voter, name, resources)) in servers[c].iter().enumerate() {
            let of = |f: fn(&Measurement, usize) -> f64| {
                median(&runs.iter().map(|m| f(m, i)).collect::<Vec<_>>())
            };
            let vs: Vec<f64> = runs
                .iter()
                .zip(a)
                .map(|(m, am)| m.server_per_cycle(i) / am.mean_server_per_cycle())
                .collect();
            writeln!(
                w,
                "| {} | {} | {name} | {resources} ({:.2}) | {:.2} | {:.1} | {} | {} | {} |",
                case.letter(),
                voter + 1,
                *resources as f64 / WORKERS as f64,
                of(Measurement::commands_per_cycle),
                of(Measurement::commands_per_read),
                micros(of(Measurement::server_per_command)),
                micros(of(Measurement::server_per_cycle)),
                listed(&vs),
            )
            .unwrap();
        }
    }
    writeln!(w).unwrap();
    writeln!(
        w,
        "Cycles/s B/A per run: {}. A shard primary of a Cluster voter spends {} the CPU per cycle of a standalone master; a whole Cluster voter (its {PRIMARIES} primaries) {}.",
        ratios(b, a, Measurement::rate),
        ratios(b, a, Measurement::mean_server_per_cycle),
        ratios(b, a, Measurement::total_per_cycle),
    )
    .unwrap();
    if let Some(c) = c {
        writeln!(w).unwrap();
        writeln!(
            w,
            "What TLS costs a Cluster voter, C against B within each run: cycles/s {}; client CPU per cycle {} ({} against {}); servers' CPU per cycle {} ({} against {}).",
            ratios(c, b, Measurement::rate),
            ratios(c, b, Measurement::client_per_cycle),
            micros(median(&c.iter().map(Measurement::client_per_cycle).collect::<Vec<_>>())),
            micros(median(&b.iter().map(Measurement::client_per_cycle).collect::<Vec<_>>())),
            ratios(c, b, Measurement::total_per_cycle),
            micros(median(&c.iter().map(Measurement::total_per_cycle).collect::<Vec<_>>())),
            micros(median(&b.iter().map(Measurement::total_per_cycle).collect::<Vec<_>>())),
        )
        .unwrap();
    }
    writeln!(w).unwrap();
    writeln!(w, "Each measurement, in the order taken (CPU and commands per cycle of each server in brackets, in the order of the table above; load average at its end):").unwrap();
    writeln!(w).unwrap();
    writeln!(w, "```text\n{}\n```", log.join("\n")).unwrap();

    println!("{out}");
    if cfg.quick {
        eprintln!("(a quick run: not saved)");
    } else {
        let date = sh("date", &["-u", "+%Y-%m-%d"]);
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("benches/results/topology-{date}.md"));
        std::fs::write(&path, &out).unwrap();
        eprintln!("written to {}", path.display());
    }
}

/// `f(a) / f(b)` within each run: "median× [run 1, run 2, …]".
fn ratios(a: &[Measurement], b: &[Measurement], f: fn(&Measurement) -> f64) -> String {
    let per_run: Vec<f64> = a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect();
    listed(&per_run)
}

/// "median× [run 1, run 2, …]".
fn listed(per_run: &[f64]) -> String {
    let list: Vec<String> = per_run.iter().map(|r| format!("{r:.2}")).collect();
    format!("{:.2}× [{}]", median(per_run), list.join(", "))
}

/// Microseconds of CPU, one decimal.
fn micros(us: f64) -> String {
    format!("{us:.1} µs")
}

/// Microseconds below 10 ms, milliseconds above.
fn latency(secs: f64) -> String {
    let us = secs * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// "redis-server 7.0.15" (or "valkey-server 9.1.2").
fn server_version(server: &RedisServer) -> String {
    let mut connection = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .unwrap();
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

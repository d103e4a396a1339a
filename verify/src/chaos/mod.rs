//! The chaos suite: seeded fault schedules over five real masters and several contending
//! clients, each run ending with the history checker's verdict and the scenario's own checks.
//!
//! One [`Scenario`] per fault pattern of the safety issue (baseline, kills, pauses, restarts,
//! latency, held replies, resets, partitions, simultaneous starts, stale holders, killed holders)
//! plus fenced crash/restart over AOF masters, the faults of the wait line (waiters that die at
//! the head of the line, masters that lose their lines, masters paused with waiters queued), and
//! the library's other primitives shared by separate clients under every kind of fault: a
//! counting semaphore, a read-write lock, an election, and reentrant holds. [`run`] drives one
//! of them for a [`Length`] and returns a [`ChaosRun`]: the figures (acquisitions, failures,
//! violations, acquire latency), the [`Report`] and the checks. Nothing here prints; the tests
//! assert and `examples/chaos.rs` prints the table.
//!
//! # Layout
//!
//! Three layers, each importing only from itself and the layers below (the `workload` module
//! docs say more, and a test below keeps the engine to it):
//!
//! * shared types: the `Workload` trait (`workload`), the setup and the key names (`setup`),
//!   the masters (`masters`), the fault driver's handle (`ctl`), the clients' shared state
//!   (`shared`), what a run hands back (`ran`), the wait-line reader (`probe`);
//! * the engine (`engine`), which runs any `Workload` under any fault driver;
//! * the workloads (`locks`, `simultaneous`, `semaphore`, `rwlock`, `election`, `reentrant`),
//!   several of them as one (`mix`), the fault drivers and checks (`line`, `mixed`), and
//!   `scenarios`, which gives each [`Scenario`] its workload, driver and checks. Scenarios
//!   22–29 run voters of their own, outside the engine: primaries with replicas, two failing
//!   over at a time (`durable`: 22, 23, and on Cluster voters 28, 29), and Clusters, Sentinel
//!   groups and a mix of kinds (`topology`: 24–27);
//! * the [`explore`]r, which draws a configuration per client and a fault schedule (clock
//!   faults included) from a seed, and runs the workloads above side by side, with rslock's
//!   clients beside them, through the same engine and checker.
//!
//! Every run is driven by a seed: which masters fail, when, for how long, and every client's
//! choices. [`seed`] reads it from [`CHAOS_SEED_ENV`] or falls back to the scenario's fixed
//! default, so a failing run can be replayed with the seed it printed. Timing on a real machine
//! is not seeded, so a replay follows the same schedule, not the same interleaving.
//!
//! # Example
//!
//! ```no_run
//! use quorumlock_verify::chaos::{self, Length, Scenario};
//!
//! # async fn demo() -> std::io::Result<()> {
//! let scenario = Scenario::MinorityPaused;
//! let seed = chaos::seed(scenario);
//! println!("{} seed {seed}", scenario.name());
//! let run = chaos::run(scenario, Length::Short, seed).await?;
//! assert!(run.passed(), "{run}");
//! # Ok(()) }
//! ```

// Shared types, below the engine (see `workload` for the layering).
mod ctl;
mod masters;
mod probe;
mod ran;
mod setup;
mod shared;
mod workload;

// The engine: knows the clients only through `workload::Workload`.
mod engine;

// Workloads, fault drivers and the scenarios that wire them into the engine.
mod contenders;
mod durable;
mod election;
pub mod explore;
mod line;
mod locks;
mod mix;
mod mixed;
mod reentrant;
mod rwlock;
mod scenarios;
mod semaphore;
mod simultaneous;
mod topology;

use std::fmt;
use std::io;
use std::time::Duration;

use quorumlock_testkit::figures::percentile;
use quorumlock_testkit::Report;

/// Environment variable with a seed (decimal or `0x` hex) to re-run chaos scenarios with.
pub const CHAOS_SEED_ENV: &str = "QUORUMLOCK_CHAOS_SEED";

/// One fault pattern of the chaos suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// 1. No faults.
    Baseline,
    /// 2. Two of five masters killed and left down.
    MinorityKilled,
    /// 3. Three of five masters killed before the clients start: no success may be reported, and
    ///    no key may be left behind on the live masters.
    MajorityKilled,
    /// 4. Two masters at a time paused with `SIGSTOP`, then resumed; stray keys are gone within a
    ///    TTL after the last resume (or after the clients' end, when they worked on past it).
    MinorityPaused,
    /// 5. One or two masters killed, left down for more than a TTL, restarted empty (no AOF).
    MinorityRestartedAfterTtl,
    /// 6. Latency below the node timeout on every master: the validity a client is given shrinks
    ///    by at least the round trip.
    LatencyBelowTimeout,
    /// 7. Latency beyond the TTL on three masters: no success may be reported.
    LatencyBeyondTtl,
    /// 8. Replies held back while the TTL passes, then delivered (responses in flight must not
    ///    count as acquired).
    HeldReplies,
    /// 9. Connections reset mid-request.
    ConnectionResets,
    /// 10. Minority and majority partitions, healed in turn.
    Partitions,
    /// 11. Groups of clients that start every round at the same instant: split votes resolve
    ///     within a few attempts.
    SimultaneousStarts,
    /// 12. Holders that keep their lock past the lease, then extend and release it: neither may
    ///     touch the next holder's keys.
    StaleHolders,
    /// 13. Holder processes killed while holding: the lock comes back within TTL + retry delay.
    HolderKilled,
    /// 14. Fenced locks over AOF masters killed and restarted at once: fences never go backwards.
    FencedAofRestarts,
    /// 15. Separate clients waiting in line on two resources, while waiters die at the head of
    ///     the line: acquiring tasks aborted mid-wait, and dead entries (a crashed process's,
    ///     which nobody removes) written at the head of a line on every master. The line goes
    ///     on within one entry lease; no waiter waits past its acquire timeout.
    WaiterKilledAtHead,
    /// 16. Separate clients waiting in line while one or two masters holding lines are killed,
    ///     left down for more than a TTL and restarted empty: their lines are lost. Holds last
    ///     up to 30 ms, so that waiters meet restarted masters without the holder's key. Like
    ///     15 and 17, it checks that waiters neither spin (wake-ups and attempts per release)
    ///     nor starve (a key free with waiters in line goes to the head within an entry lease).
    LineMasterRestarted,
    /// 17. Separate clients waiting in line while two masters at a time are paused (`SIGSTOP`)
    ///     with waiters queued, then resumed.
    LineMinorityPaused,
    /// 18. Separate clients share one counting semaphore of 3 permits
    ///     ([`quorumlock::Semaphore`]) while masters are killed and restarted empty after a TTL,
    ///     paused, partitioned away (minority and majority) and slowed down, one fault at a time:
    ///     never more than 3 holders at once, never two on one slot.
    Semaphore,
    /// 19. Separate clients share one read-write lock ([`quorumlock::RwLock`]), nine holds in
    ///     ten reads, under the faults of 18: never a writer's lease overlapping any other
    ///     holder's, while readers do share the lock.
    RwLock,
    /// 20. Separate candidates campaign in one election ([`quorumlock::Redlock::elect`]) with a
    ///     1 s TTL while an observer reads who leads, under the faults of 18 (kills restart from
    ///     an AOF) and leaders cut off from every master: never two leaderships overlapping,
    ///     terms growing in election order, and no read naming a leader out of its time. Each
    ///     election counts as an acquisition.
    Election,
    /// 21. Separate clients nest holds of their locks ([`quorumlock::ReentrantLock`]) and end
    ///     them from several tasks in random orders, sometimes dropping them, under the faults of
    ///     18: mutual exclusion as for the mutex, exactly one release per lock reaching the
    ///     masters, and no key left behind.
    Reentrant,
    /// 22. The negative control of 23: three voters, each a primary with an asynchronous
    ///     replica, two of them failed over in the same window again and again (replication
    ///     frozen first), votes counted once answered. The checker must find two holders.
    FailoverNotDurable,
    /// 23. As 22, with durable votes ([`quorumlock::Durability::Replicas`]`(1)`): a grant
    ///     counts only once its voter's replica has it. Never two holders.
    FailoverDurable,
    /// 24. Three Redis Cluster voters of 3 primaries with a replica each: shards of held
    ///     resources failed over to replicas frozen beforehand (the failover loses their last
    ///     writes), slots of held resources moved (clients meet `ASK`), one voter at a time.
    ///     Never two holders.
    ClusterVoters,
    /// 25. Three Sentinel-managed masters, each failed over to a replica frozen beforehand while
    ///     locks are held, one voter at a time. Never two holders.
    SentinelVoters,
    /// 26. A Cluster voter, a Sentinel voter and a standalone master, under the faults of 24
    ///     and 25 and kills of the master (restarted empty after a TTL), one voter at a time.
    ///     Never two holders.
    MixedVoters,
    /// 27. The negative control of 24: two Cluster voters lose the same held resource's key in
    ///     one window (both shards failed over to frozen replicas at once). The checker must
    ///     find two holders.
    ClusterVotersOneWindow,
    /// 28. The negative control of 29: three Redis Cluster voters of 3 primaries with a replica
    ///     each; the shards of one resource's slot on two of them failed over in the same window
    ///     again and again (their replication cut first), votes counted once answered. The
    ///     checker must find two holders.
    ClusterFailoverNotDurable,
    /// 29. As 28, with durable votes ([`quorumlock::Durability::Replicas`]`(1)`): a grant
    ///     counts only once the replica of the shard that took it has it. Never two holders.
    ClusterFailoverDurable,
}

impl Scenario {
    /// Every scenario, in the issue's order.
    pub const ALL: [Scenario; 29] = [
        Scenario::Baseline,
        Scenario::MinorityKilled,
        Scenario::MajorityKilled,
        Scenario::MinorityPaused,
        Scenario::MinorityRestartedAfterTtl,
        Scenario::LatencyBelowTimeout,
        Scenario::LatencyBeyondTtl,
        Scenario::HeldReplies,
        Scenario::ConnectionResets,
        Scenario::Partitions,
        Scenario::SimultaneousStarts,
        Scenario::StaleHolders,
        Scenario::HolderKilled,
        Scenario::FencedAofRestarts,
        Scenario::WaiterKilledAtHead,
        Scenario::LineMasterRestarted,
        Scenario::LineMinorityPaused,
        Scenario::Semaphore,
        Scenario::RwLock,
        Scenario::Election,
        Scenario::Reentrant,
        Scenario::FailoverNotDurable,
        Scenario::FailoverDurable,
        Scenario::ClusterVoters,
        Scenario::SentinelVoters,
        Scenario::MixedVoters,
        Scenario::ClusterVotersOneWindow,
        Scenario::ClusterFailoverNotDurable,
        Scenario::ClusterFailoverDurable,
    ];

    /// The scenario's number in the issue (14: the fencing figure; 15–17: the wait line; 18–21:
    /// the semaphore, the read-write lock, the election and reentrant holds).
    pub fn number(self) -> u32 {
        match self {
            Scenario::Baseline => 1,
            Scenario::MinorityKilled => 2,
            Scenario::MajorityKilled => 3,
            Scenario::MinorityPaused => 4,
            Scenario::MinorityRestartedAfterTtl => 5,
            Scenario::LatencyBelowTimeout => 6,
            Scenario::LatencyBeyondTtl => 7,
            Scenario::HeldReplies => 8,
            Scenario::ConnectionResets => 9,
            Scenario::Partitions => 10,
            Scenario::SimultaneousStarts => 11,
            Scenario::StaleHolders => 12,
            Scenario::HolderKilled => 13,
            Scenario::FencedAofRestarts => 14,
            Scenario::WaiterKilledAtHead => 15,
            Scenario::LineMasterRestarted => 16,
            Scenario::LineMinorityPaused => 17,
            Scenario::Semaphore => 18,
            Scenario::RwLock => 19,
            Scenario::Election => 20,
            Scenario::Reentrant => 21,
            Scenario::FailoverNotDurable => 22,
            Scenario::FailoverDurable => 23,
            Scenario::ClusterVoters => 24,
            Scenario::SentinelVoters => 25,
            Scenario::MixedVoters => 26,
            Scenario::ClusterVotersOneWindow => 27,
            Scenario::ClusterFailoverNotDurable => 28,
            Scenario::ClusterFailoverDurable => 29,
        }
    }

    /// A short kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::MinorityKilled => "minority-killed",
            Scenario::MajorityKilled => "majority-killed",
            Scenario::MinorityPaused => "minority-paused",
            Scenario::MinorityRestartedAfterTtl => "restart-after-ttl",
            Scenario::LatencyBelowTimeout => "latency-below-timeout",
            Scenario::LatencyBeyondTtl => "latency-beyond-ttl",
            Scenario::HeldReplies => "held-replies",
            Scenario::ConnectionResets => "connection-resets",
            Scenario::Partitions => "partitions",
            Scenario::SimultaneousStarts => "simultaneous-starts",
            Scenario::StaleHolders => "stale-holders",
            Scenario::HolderKilled => "holder-killed",
            Scenario::FencedAofRestarts => "fenced-aof-restarts",
            Scenario::WaiterKilledAtHead => "waiter-killed-at-head",
            Scenario::LineMasterRestarted => "line-master-restarted",
            Scenario::LineMinorityPaused => "line-minority-paused",
            Scenario::Semaphore => "semaphore",
            Scenario::RwLock => "rwlock",
            Scenario::Election => "election",
            Scenario::Reentrant => "reentrant",
            Scenario::FailoverNotDurable => "failover-not-durable",
            Scenario::FailoverDurable => "failover-durable",
            Scenario::ClusterVoters => "cluster-voters",
            Scenario::SentinelVoters => "sentinel-voters",
            Scenario::MixedVoters => "mixed-voters",
            Scenario::ClusterVotersOneWindow => "cluster-voters-one-window",
            Scenario::ClusterFailoverNotDurable => "cluster-failover-not-durable",
            Scenario::ClusterFailoverDurable => "cluster-failover-durable",
        }
    }

    /// Whether locks can be taken at all under this scenario's faults. Where they cannot, the
    /// scenario checks that none was reported instead of counting acquisitions.
    pub fn expects_success(self) -> bool {
        !matches!(self, Scenario::MajorityKilled | Scenario::LatencyBeyondTtl)
    }

    /// Whether this scenario is a negative control: its faults break the rule the library's
    /// guarantee rests on, and the checker must find the violations that follow.
    pub fn is_negative_control(self) -> bool {
        matches!(
            self,
            Scenario::FailoverNotDurable
                | Scenario::ClusterVotersOneWindow
                | Scenario::ClusterFailoverNotDurable
        )
    }

    /// Acquisitions a run of this scenario must reach: [`Length::target`], but for the short
    /// runs of the topology scenarios (24–29), whose time goes to starting clusters and Sentinel
    /// groups and to their faults, and whose negative controls need faults, not throughput.
    pub fn target(self, length: Length) -> usize {
        match (self, length) {
            (
                Scenario::ClusterVotersOneWindow
                | Scenario::ClusterFailoverNotDurable
                | Scenario::ClusterFailoverDurable,
                Length::Short,
            ) => length.target() / 4,
            (
                Scenario::ClusterVoters | Scenario::SentinelVoters | Scenario::MixedVoters,
                Length::Short,
            ) => length.target() / 2,
            _ => length.target(),
        }
    }

    /// The fixed seed used when [`CHAOS_SEED_ENV`] is not set.
    pub fn default_seed(self) -> u64 {
        0x5EED_0000 + u64::from(self.number())
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>2} {}", self.number(), self.name())
    }
}

/// How long a run goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Length {
    /// The version inside `make test`: at least 2,000 acquisitions per safety scenario.
    Short,
    /// The version of `make chaos`: at least 10,000 acquisitions per safety scenario.
    Long,
}

impl Length {
    /// Acquisitions a safety scenario must reach.
    pub fn target(self) -> usize {
        match self {
            Length::Short => 2_000,
            Length::Long => 10_000,
        }
    }

    fn scale(self) -> u32 {
        match self {
            Length::Short => 1,
            Length::Long => 5,
        }
    }
}

/// The seed for `scenario`: [`CHAOS_SEED_ENV`] when set (decimal or `0x` hex), else
/// [`Scenario::default_seed`].
pub fn seed(scenario: Scenario) -> u64 {
    std::env::var(CHAOS_SEED_ENV)
        .ok()
        .and_then(|s| parse_seed(&s))
        .unwrap_or_else(|| scenario.default_seed())
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// One scenario-specific check of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// What was checked.
    pub what: String,
    /// Whether it held.
    pub passed: bool,
    /// The figures behind the verdict.
    pub detail: String,
}

impl Check {
    pub(crate) fn new(what: impl Into<String>, passed: bool, detail: impl Into<String>) -> Self {
        Check {
            what: what.into(),
            passed,
            detail: detail.into(),
        }
    }
}

/// The outcome of one chaos run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ChaosRun {
    /// Which scenario ran.
    pub scenario: Scenario,
    /// Its seed.
    pub seed: u64,
    /// How long it was meant to run.
    pub length: Length,
    /// Successful acquisitions.
    pub acquisitions: usize,
    /// Failed acquire calls (each after the library's retries).
    pub failures: usize,
    /// Violations the history checker found (protocol level and witnesses).
    pub violations: usize,
    /// Median duration of a successful acquire call.
    pub p50: Duration,
    /// 99th percentile duration of a successful acquire call.
    pub p99: Duration,
    /// Wall time of the run, servers included.
    pub elapsed: Duration,
    /// The checker's verdict.
    pub report: Report,
    /// The scenario's own checks.
    pub checks: Vec<Check>,
}

impl ChaosRun {
    /// No violation (at least one for a [negative control](Scenario::is_negative_control)),
    /// and every check passed.
    pub fn passed(&self) -> bool {
        let verdict = match self.scenario.is_negative_control() {
            true => self.violations > 0,
            false => self.violations == 0,
        };
        verdict && self.checks.iter().all(|c| c.passed)
    }

    /// The header of the table [`row`](ChaosRun::row) prints.
    pub fn header() -> String {
        format!(
            "{:<26} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9} {:>8}  {}",
            "scenario",
            "seed",
            "acquisitions",
            "failures",
            "violations",
            "p50",
            "p99",
            "time",
            "checks"
        )
    }

    /// One line: scenario, seed, acquisitions, failures, violations, p50/p99 acquire latency.
    pub fn row(&self) -> String {
        let failed = self.checks.iter().filter(|c| !c.passed).count();
        let checks = if failed == 0 {
            format!("{} ok", self.checks.len())
        } else {
            format!("{failed}/{} FAILED", self.checks.len())
        };
        format!(
            "{:<26} {:>12} {:>12} {:>9} {:>10} {:>9} {:>9} {:>7.1}s  {}",
            self.scenario.to_string(),
            format!("{:#x}", self.seed),
            self.acquisitions,
            self.failures,
            self.violations,
            format!("{:.2}ms", self.p50.as_secs_f64() * 1e3),
            format!("{:.2}ms", self.p99.as_secs_f64() * 1e3),
            self.elapsed.as_secs_f64(),
            checks
        )
    }
}

impl fmt::Display for ChaosRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", Self::header())?;
        writeln!(f, "{}", self.row())?;
        for check in &self.checks {
            let verdict = if check.passed { "ok    " } else { "FAILED" };
            writeln!(f, "  {verdict} {}: {}", check.what, check.detail)?;
        }
        write!(f, "{}", self.report)
    }
}

/// Runs `scenario` for `length` with `seed`, over five fresh masters.
///
/// # Errors
///
/// When a server or proxy cannot be started or a fault cannot be injected; never for what the
/// clients observe, which is in the returned [`ChaosRun`].
pub async fn run(scenario: Scenario, length: Length, seed: u64) -> io::Result<ChaosRun> {
    scenarios::run(scenario, length, seed).await
}

/// The median and 99th percentile of `samples` (sorting them), zero when there are none.
fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |p: f64| percentile(samples, p).unwrap_or_default();
    (at(0.5), at(0.99))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed(" 0x2a "), Some(42));
        assert_eq!(parse_seed("nope"), None);
    }

    #[test]
    fn percentiles_pick_the_median_and_the_tail() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let (p50, p99) = percentiles(&mut samples);
        assert_eq!(p50, Duration::from_millis(50));
        assert_eq!(p99, Duration::from_millis(99));
        assert_eq!(percentiles(&mut []), (Duration::ZERO, Duration::ZERO));
    }

    /// The modules below the workloads, and the engine: a new workload plugs in through
    /// `workload::Workload` alone.
    const LOWER: [(&str, &str); 8] = [
        ("ctl", include_str!("ctl.rs")),
        ("masters", include_str!("masters.rs")),
        ("probe", include_str!("probe.rs")),
        ("ran", include_str!("ran.rs")),
        ("setup", include_str!("setup.rs")),
        ("shared", include_str!("shared.rs")),
        ("workload", include_str!("workload.rs")),
        ("engine", include_str!("engine.rs")),
    ];

    /// The first segment of every path `code` names through `super::` (or `chaos::`): in `use`
    /// lines, lists and nested lists included, and inline. Comments do not count.
    fn siblings(code: &str) -> Vec<String> {
        let code: Vec<&str> = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        let code = code.join("\n");
        let first = |path: &str| -> String {
            path.trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let mut found = Vec::new();
        for marker in ["super::", "chaos::"] {
            for (at, _) in code.match_indices(marker) {
                let rest = &code[at + marker.len()..];
                let Some(list) = rest.strip_prefix('{') else {
                    found.push(first(rest));
                    continue;
                };
                // The list's items, split at its own commas (not those of nested lists).
                let (mut depth, mut item) = (0usize, String::new());
                for c in list.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            found.push(first(&item));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                found.push(first(&item));
            }
        }
        found.retain(|name| !name.is_empty());
        found
    }

    /// The modules `module` imports that are neither a shared type nor an item of `chaos`.
    fn upward(module: &str, code: &str) -> Vec<String> {
        let below: Vec<&str> = LOWER.iter().map(|(name, _)| *name).collect();
        siblings(code)
            .into_iter()
            // Items of `chaos` itself (`Check`, ...) are types, not modules. The shared types
            // use each other, the engine uses them; nobody here uses the engine.
            .filter(|name| !name.starts_with(|c: char| c.is_uppercase()))
            .filter(|name| name == "engine" || !below.contains(&name.as_str()))
            .map(|name| format!("{module} imports {name}"))
            .collect()
    }

    #[test]
    fn the_engine_and_the_shared_types_import_only_from_below() {
        let upward: Vec<String> = LOWER
            .iter()
            .flat_map(|(module, code)| upward(module, code))
            .collect();
        assert!(upward.is_empty(), "imports that run upward: {upward:?}");
    }

    /// The modules of this crate outside `chaos` that `chaos` imports (everything reads masters
    /// through `direct`) never import it back: no cycle runs through the engine.
    #[test]
    fn the_modules_the_chaos_engine_imports_never_import_it() {
        let below = [
            ("direct", include_str!("../direct.rs")),
            ("mutex", include_str!("../mutex.rs")),
        ];
        for (module, code) in below {
            let code: Vec<&str> = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            assert!(
                !code.join("\n").contains("chaos::"),
                "{module} imports the chaos engine"
            );
        }
    }

    #[test]
    fn the_import_reader_sees_lists_nested_lists_and_inline_paths() {
        let code = "use super::engine::{self, Ran};\n\
                    use super::{election, line::{self, Probe}, Check};\n\
                    /// [`x`](super::scenarios)\n\
                    let d = crate::chaos::locks::Locks::default();";
        assert_eq!(
            siblings(code),
            ["engine", "election", "line", "Check", "locks"]
        );
        assert_eq!(
            upward("shared", code),
            [
                "shared imports engine",
                "shared imports election",
                "shared imports line",
                "shared imports locks"
            ]
        );
        assert!(upward("engine", "use super::shared::Shared;").is_empty());
    }

    #[test]
    fn every_scenario_has_a_distinct_number_name_and_seed() {
        let mut names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
        names.dedup();
        assert_eq!(names.len(), Scenario::ALL.len());
        for (i, s) in Scenario::ALL.iter().enumerate() {
            assert_eq!(s.number() as usize, i + 1);
        }
    }
}

//! What one exploration runs, drawn from its seed ([`Plan`]): the masters, the clients (each
//! with a configuration of its own) and the fault schedule.
//!
//! Everything is drawn up front from the seed, from random sources of its own for the
//! configuration and for the schedule, so that taking a kind of fault away
//! ([`Plan::without`]) leaves the configuration and every other fault as they were.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::super::setup::Tuning;

/// Salts of the plan's random sources, so that they draw independently of each other and of
/// the clients' (which the engine derives from the seed itself).
const CONFIG_SALT: u64 = 0x0C0F_1600_5A17_0001;
const SCHEDULE_SALT: u64 = 0x5C4E_D01E_5A17_0002;

/// The shortest and longest TTL a client asks for.
pub(super) const TTL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(30));

/// The least and most fencing grace drawn (the least is the library's minimum).
const GRACE_RANGE: (Duration, Duration) = (quorumlock::MIN_FENCE_GRACE, Duration::from_secs(8));

/// How much of the fencing grace the masters' clocks may drift apart, at most, in a plan that
/// stays within bounds.
const SKEW_SHARE: f64 = 0.95;

/// Most clients in one run (the machine has two cores).
const MAX_CLIENTS: usize = 16;

/// What a run may do, beside its seed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// How long the clients run (the masters' start and the final check come on top).
    pub duration: Duration,
    /// Whether a plan may be a negative control (one in four is, drawn from the seed).
    pub controls: bool,
    /// A negative control every plan is, whatever the seed draws.
    pub control: Option<Control>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duration: Duration::from_secs(30),
            controls: true,
            control: None,
        }
    }
}

/// A negative control: one fault beyond the bounds the README states, whose violation the
/// explorer must report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Control {
    /// Kleppmann's scenario: master clocks jump forward by more than the longest TTL (every
    /// master's, so that it strikes a quorum of those up whatever else is going on): every
    /// lock's keys lapse under its holder.
    ClockJump,
    /// One master's clock ahead of the others by more than the fencing grace (1 s) from the
    /// start, and paused now and then: a holder it did not grant to gets a smaller fence.
    SkewBeyondGrace,
}

impl fmt::Display for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Control::ClockJump => "control: clock jump beyond the TTL",
            Control::SkewBeyondGrace => "control: skew beyond the fence grace",
        })
    }
}

/// A kind of fault the explorer injects; [`Plan::without`] takes kinds away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// Masters killed and restarted from their AOF (when the plan's masters keep one).
    Kill,
    /// Masters killed and restarted empty after the longest TTL (masters without AOF).
    RestartEmpty,
    /// Masters frozen with `SIGSTOP`.
    Pause,
    /// Masters cut off through their proxies (a minority, or a majority).
    Partition,
    /// Latency through the proxies.
    Delay,
    /// Master clocks set apart from the start.
    Skew,
    /// A master clock stepped forward or back.
    Bump,
    /// A master clock flapping between two offsets.
    Strobe,
    /// A master clock running fast or slow.
    Rate,
}

impl FaultKind {
    /// Every kind, in the order the tables list them.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Kill,
        FaultKind::RestartEmpty,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Delay,
        FaultKind::Skew,
        FaultKind::Bump,
        FaultKind::Strobe,
        FaultKind::Rate,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::RestartEmpty => "restart-empty",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Delay => "delay",
            FaultKind::Skew => "skew",
            FaultKind::Bump => "bump",
            FaultKind::Strobe => "strobe",
            FaultKind::Rate => "rate",
        }
    }

    /// Whether it is a clock fault.
    pub fn is_clock(self) -> bool {
        matches!(
            self,
            FaultKind::Skew | FaultKind::Bump | FaultKind::Strobe | FaultKind::Rate
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A primitive a group of clients uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Primitive {
    /// Plain locks on `r0`, `r1`, ...: quorumlock's mutex (fenced or not, under owner ids or
    /// not) and rslock's.
    Mutex,
    /// One counting semaphore.
    Semaphore { permits: u32 },
    /// One read-write lock.
    RwLock,
    /// One election, with an observer.
    Election,
}

/// What one client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// quorumlock's mutex (fenced as its tuning says, under an owner id when it has one).
    Mutex,
    /// rslock's lock, on the same names.
    Rslock,
    /// A semaphore's client.
    Semaphore,
    /// A read-write lock's client (reads and writes).
    RwLock,
    /// A candidate of the election.
    Candidate,
    /// The election's observer, which reads who leads.
    Observer,
}

/// A group of clients on resources of their own.
#[derive(Clone, Debug)]
pub(super) struct GroupPlan {
    pub(super) primitive: Primitive,
    pub(super) resources: usize,
    pub(super) clients: Vec<(Role, Tuning)>,
}

/// One fault of the schedule.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Planned {
    /// When, from the clients' start.
    pub(super) at: Duration,
    pub(super) kind: FaultKind,
    pub(super) action: Action,
}

/// What a fault does. Clock offsets are signed milliseconds from the real clock.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Action {
    /// Killed, restarted `down` later (from the AOF, or empty).
    Kill { masters: Vec<usize>, down: Duration },
    /// Frozen for `lasts`.
    Pause {
        masters: Vec<usize>,
        lasts: Duration,
    },
    /// Cut off for `lasts`.
    Partition {
        masters: Vec<usize>,
        lasts: Duration,
    },
    /// Latency each way (± jitter) for `lasts`.
    Delay {
        masters: Vec<usize>,
        up: Duration,
        down: Duration,
        jitter: Duration,
        lasts: Duration,
    },
    /// Each master's clock offset from the start (before the clients start).
    Skew { offsets_ms: Vec<i64> },
    /// The masters' clocks step by `by_ms` (forward if positive), for good.
    Bump { masters: Vec<usize>, by_ms: i64 },
    /// The master's clock flaps between its offset and the offset plus `by_ms` every `every`,
    /// for `lasts`, then stays at its offset.
    Strobe {
        master: usize,
        by_ms: i64,
        every: Duration,
        lasts: Duration,
    },
    /// The master's clock runs at `rate` for `lasts` (without a step at either end), then at
    /// the real rate again, where it got to.
    Rate {
        master: usize,
        rate: f64,
        lasts: Duration,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Kill { masters, down } => {
                write!(f, "masters {masters:?} killed, back after {}", secs(*down))
            }
            Action::Pause { masters, lasts } => {
                write!(f, "masters {masters:?} paused for {}", secs(*lasts))
            }
            Action::Partition { masters, lasts } => write!(
                f,
                "masters {masters:?} partitioned away for {}",
                secs(*lasts)
            ),
            Action::Delay {
                masters,
                up,
                down,
                jitter,
                lasts,
            } => write!(
                f,
                "masters {masters:?} {}+{} ms latency (±{} ms) for {}",
                up.as_millis(),
                down.as_millis(),
                jitter.as_millis(),
                secs(*lasts)
            ),
            Action::Skew { offsets_ms } => {
                let offsets: Vec<String> = offsets_ms.iter().map(|ms| signed_ms(*ms)).collect();
                write!(f, "master clocks at {}", offsets.join(" "))
            }
            Action::Bump { masters, by_ms } => {
                write!(f, "master clocks {masters:?} step {}", signed_ms(*by_ms))
            }
            Action::Strobe {
                master,
                by_ms,
                every,
                lasts,
            } => write!(
                f,
                "master clock {master} flaps by {} every {} ms for {}",
                signed_ms(*by_ms),
                every.as_millis(),
                secs(*lasts)
            ),
            Action::Rate {
                master,
                rate,
                lasts,
            } => write!(
                f,
                "master clock {master} runs at x{rate:.4} for {}",
                secs(*lasts)
            ),
        }
    }
}

/// Everything one run does, drawn from its seed.
#[derive(Clone, Debug)]
pub struct Plan {
    pub(super) seed: u64,
    pub(super) duration: Duration,
    pub(super) masters: usize,
    pub(super) aof: bool,
    pub(super) groups: Vec<GroupPlan>,
    pub(super) faults: Vec<Planned>,
    pub(super) control: Option<Control>,
    /// Kinds taken away ([`Plan::without`]).
    pub(super) removed: BTreeSet<FaultKind>,
}

impl Plan {
    /// The plan of `seed`.
    pub fn draw(seed: u64, options: &Options) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ CONFIG_SALT);
        let masters = if rng.random_bool(0.35) { 3 } else { 5 };
        let aof = rng.random_bool(0.4);
        let drawn_control = match rng.random_bool(0.25) {
            true => Some(match rng.random_bool(0.5) {
                true => Control::ClockJump,
                false => Control::SkewBeyondGrace,
            }),
            false => None,
        };
        let control = options
            .control
            .or(drawn_control.filter(|_| options.controls));
        let groups = draw_groups(&mut rng, aof, control);
        let mut plan = Plan {
            seed,
            duration: options.duration,
            masters,
            aof,
            groups,
            faults: Vec::new(),
            control,
            removed: BTreeSet::new(),
        };
        let mut rng = StdRng::seed_from_u64(seed ^ SCHEDULE_SALT);
        plan.faults = draw_schedule(&mut rng, &plan);
        plan
    }

    /// This plan with the faults of `kinds` taken away; nothing else changes.
    pub fn without(&self, kinds: &BTreeSet<FaultKind>) -> Plan {
        let mut plan = self.clone();
        plan.removed.extend(kinds.iter().copied());
        plan
    }

    /// Its seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The negative control it is, if it is one.
    pub fn control(&self) -> Option<Control> {
        self.control
    }

    /// The faults it injects (those of kinds taken away left out), in the order they start.
    pub(super) fn active_faults(&self) -> impl Iterator<Item = &Planned> {
        self.faults
            .iter()
            .filter(|f| !self.removed.contains(&f.kind))
    }

    /// The kinds of fault it injects.
    pub fn kinds(&self) -> BTreeSet<FaultKind> {
        self.active_faults().map(|f| f.kind).collect()
    }

    /// The kinds taken away.
    pub fn removed(&self) -> &BTreeSet<FaultKind> {
        &self.removed
    }

    /// Every client's tuning and role, with its group.
    pub(super) fn clients(&self) -> impl Iterator<Item = (&GroupPlan, Role, &Tuning)> {
        self.groups
            .iter()
            .flat_map(|g| g.clients.iter().map(move |(role, t)| (g, *role, t)))
    }

    /// Whether any client's grants carry fences (fenced clients, election terms).
    pub(super) fn fenced(&self) -> bool {
        self.clients()
            .any(|(_, role, t)| role == Role::Candidate || (t.fencing && role != Role::Rslock))
    }

    /// The least fencing grace of the clients that fence (the library's default for one that
    /// sets none); `None` when none fences.
    pub(super) fn least_grace(&self) -> Option<Duration> {
        self.fence_graces().min()
    }

    /// The most fencing grace of the clients that fence.
    pub(super) fn most_grace(&self) -> Option<Duration> {
        self.fence_graces().max()
    }

    fn fence_graces(&self) -> impl Iterator<Item = Duration> + '_ {
        self.clients()
            .filter(|(_, role, t)| *role == Role::Candidate || (t.fencing && *role != Role::Rslock))
            .map(|(_, _, t)| t.fence_grace.unwrap_or(quorumlock::DEFAULT_FENCE_GRACE))
    }

    /// The longest TTL any client asks for, its extends' included.
    pub(super) fn longest_ttl(&self) -> Duration {
        self.clients()
            .map(|(_, _, t)| t.extend_ttl.map_or(t.ttl, |(_, hi)| hi.max(t.ttl)))
            .max()
            .unwrap_or(TTL_RANGE.1)
    }

    /// The least drift allowance of any lease a client asks for (its extends' included).
    pub(super) fn least_drift(&self) -> Duration {
        self.clients()
            .map(|(_, _, t)| {
                let shortest = t.extend_ttl.map_or(t.ttl, |(lo, _)| lo.min(t.ttl));
                t.drift(shortest)
            })
            .min()
            .unwrap_or(Duration::from_millis(2))
    }

    /// The least drift factor of any client.
    pub(super) fn least_drift_factor(&self) -> f64 {
        self.clients()
            .map(|(_, _, t)| t.drift_factor)
            .fold(f64::INFINITY, f64::min)
    }

    /// The quorum of its masters.
    pub(super) fn quorum(&self) -> usize {
        self.masters / 2 + 1
    }

    /// One line: the masters, the clients by role, the spread of their settings.
    pub fn summary(&self) -> String {
        let count = |want: &dyn Fn(Role, &Tuning) -> bool| {
            self.clients().filter(|(_, r, t)| want(*r, t)).count()
        };
        let mut roles = Vec::new();
        let mut add = |name: &str, n: usize| {
            if n > 0 {
                roles.push(format!("{name}×{n}"));
            }
        };
        add(
            "mutex",
            count(&|r, t| r == Role::Mutex && !t.fencing && t.owner.is_none()),
        );
        add(
            "fenced",
            count(&|r, t| r == Role::Mutex && t.fencing && t.owner.is_none()),
        );
        add(
            "owner",
            count(&|r, t| r == Role::Mutex && t.owner.is_some()),
        );
        add("rslock", count(&|r, _| r == Role::Rslock));
        add("sem", count(&|r, _| r == Role::Semaphore));
        add("rw", count(&|r, _| r == Role::RwLock));
        add(
            "elect",
            count(&|r, _| r == Role::Candidate || r == Role::Observer),
        );
        let tunings: Vec<&Tuning> = self.clients().map(|(_, _, t)| t).collect();
        let range = |f: &dyn Fn(&Tuning) -> f64| {
            let lo = tunings.iter().map(|t| f(t)).fold(f64::INFINITY, f64::min);
            let hi = tunings.iter().map(|t| f(t)).fold(0.0, f64::max);
            (lo, hi)
        };
        let (ttl_lo, ttl_hi) = range(&|t| t.ttl.as_secs_f64());
        let (nt_lo, nt_hi) = range(&|t| t.node_timeout.as_secs_f64() * 1e3);
        let grace = match (self.least_grace(), self.most_grace()) {
            (Some(lo), Some(hi)) => format!(" grace {}–{}", secs(lo), secs(hi)),
            _ => String::new(),
        };
        format!(
            "{}m{} {} TTL {ttl_lo:.1}–{ttl_hi:.1}s nt {nt_lo:.0}–{nt_hi:.0}ms{grace}{}",
            self.masters,
            if self.aof { " aof" } else { "" },
            roles.join(" "),
            match self.control {
                Some(Control::ClockJump) => " [control: jump]",
                Some(Control::SkewBeyondGrace) => " [control: skew]",
                None => "",
            }
        )
    }
}

impl fmt::Display for Plan {
    /// The whole drawn configuration and schedule, a line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {:#x}: {} masters (valkey-server under libfaketime){}, {} of clients{}",
            self.seed,
            self.masters,
            if self.aof {
                ", AOF (appendfsync always)"
            } else {
                ", no AOF"
            },
            secs(self.duration),
            match self.control {
                Some(control) => format!(", {control}"),
                None => String::new(),
            }
        )?;
        let mut client = 0;
        for (g, group) in self.groups.iter().enumerate() {
            let what = match group.primitive {
                Primitive::Mutex => format!("mutex r0..r{}", group.resources - 1),
                Primitive::Semaphore { permits } => format!("semaphore of {permits}"),
                Primitive::RwLock => "read-write lock".to_owned(),
                Primitive::Election => "election".to_owned(),
            };
            writeln!(f, "  group {g}: {what}")?;
            for (role, t) in &group.clients {
                writeln!(f, "    client {client:>2} {}", describe(*role, t))?;
                client += 1;
            }
        }
        if self.active_faults().next().is_none() {
            writeln!(f, "  no faults")?;
        }
        for fault in self.active_faults() {
            writeln!(
                f,
                "  at {:>6}: {:<13} {}",
                secs(fault.at),
                fault.kind.name(),
                fault.action
            )?;
        }
        if !self.removed.is_empty() {
            let removed: Vec<&str> = self.removed.iter().map(|k| k.name()).collect();
            writeln!(f, "  taken away: {}", removed.join(", "))?;
        }
        Ok(())
    }
}

/// One client's role and settings, on one line.
fn describe(role: Role, t: &Tuning) -> String {
    let what = match role {
        Role::Mutex => match (&t.owner, t.fencing) {
            (Some(owner), true) => format!("owner {owner} fenced"),
            (Some(owner), false) => format!("owner {owner}"),
            (None, true) => "mutex fenced".to_owned(),
            (None, false) => "mutex".to_owned(),
        },
        Role::Rslock => "rslock".to_owned(),
        Role::Semaphore if t.fencing => "semaphore fenced".to_owned(),
        Role::Semaphore => "semaphore".to_owned(),
        Role::RwLock if t.fencing => "rw fenced".to_owned(),
        Role::RwLock => "rw".to_owned(),
        Role::Candidate => "candidate".to_owned(),
        Role::Observer => "observer".to_owned(),
    };
    let fences =
        role == Role::Candidate || (t.fencing && !matches!(role, Role::Rslock | Role::Observer));
    let grace = match (fences, t.fence_grace) {
        (false, _) => String::new(),
        (true, Some(grace)) => format!(" grace {}", secs(grace)),
        (true, None) => " grace 1h (default)".to_owned(),
    };
    let extend = match t.extend_ttl {
        Some((lo, hi)) if t.extend_chance > 0.0 => format!(
            ", extends {:.0}% to {}–{}",
            t.extend_chance * 100.0,
            secs(lo),
            secs(hi)
        ),
        _ => String::new(),
    };
    let think = match t.think {
        Some((lo, hi)) => format!(", thinks {}–{}", secs(lo), secs(hi)),
        None => String::new(),
    };
    format!(
        "{what:<22} TTL {}{grace}{extend}, node timeout {} ms, retry {}×{}±{} ms, drift {:.3}, \
         waits ≤{}, holds ≤{} ms (long {:.0}%){think}",
        secs(t.ttl),
        t.node_timeout.as_millis(),
        t.retry_count,
        t.retry_delay.as_millis(),
        t.retry_jitter.as_millis(),
        t.drift_factor,
        t.acquire_timeout.map_or("default".to_owned(), secs),
        t.critical_section.as_millis(),
        t.long_hold_chance * 100.0
    )
}

/// `d` in seconds, to the millisecond (`1.25s`).
pub(super) fn secs(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

/// A signed offset in milliseconds, as seconds (`+0.6s`, `-1.2s`).
pub(super) fn signed_ms(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    format!("{sign}{}", secs(Duration::from_millis(ms.unsigned_abs())))
}

// ---------------------------------------------------------------------------------------------
// Drawing the configuration.

/// A duration drawn log-uniformly in `[lo, hi]`, whole milliseconds.
fn log_uniform(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    let (lo, hi) = (lo.as_secs_f64().max(1e-3), hi.as_secs_f64().max(1e-3));
    if hi <= lo {
        return Duration::from_millis((lo * 1e3).round() as u64);
    }
    let x = rng.random_range(lo.ln()..=hi.ln()).exp();
    Duration::from_millis((x * 1e3).round() as u64)
}

fn uniform(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    if hi <= lo {
        return lo;
    }
    Duration::from_millis(rng.random_range(lo.as_millis() as u64..=hi.as_millis() as u64))
}

/// The groups of clients: always the mutex group, the other primitives now and then.
fn draw_groups(rng: &mut StdRng, aof: bool, control: Option<Control>) -> Vec<GroupPlan> {
    let mut groups = Vec::new();

    // Plain locks: quorumlock's mutex (fenced, under owner ids), and rslock's.
    let resources = if control == Some(Control::SkewBeyondGrace) {
        // Few holders a name, so that a name's counters lapse between two of them.
        3
    } else if control.is_some() {
        rng.random_range(1..=2)
    } else {
        *[1, 1, 2, 2, 3, 4, 6]
            .get(rng.random_range(0..7))
            .unwrap_or(&2)
    };
    let mut ours = rng.random_range(2..=7);
    if control == Some(Control::SkewBeyondGrace) {
        ours = ours.max(5);
    }
    let theirs = if rng.random_bool(0.6) {
        rng.random_range(1..=2)
    } else {
        0
    };
    let mut clients = Vec::new();
    for c in 0..ours {
        let mut t = draw_tuning(rng, aof);
        match rng.random_range(0..3) {
            0 => t.fencing = false,
            1 => t.fencing = true,
            _ => {
                t.fencing = rng.random_bool(0.5);
                t.owner = Some(format!("worker-{c}@explore"));
            }
        }
        clients.push((Role::Mutex, t));
    }
    for _ in 0..theirs {
        let mut t = draw_tuning(rng, aof);
        t.fencing = false;
        t.owner = None;
        clients.push((Role::Rslock, t));
    }
    match control {
        Some(Control::SkewBeyondGrace) => {
            // Short holds, fenced at the least grace, with pauses between them longer than it
            // (and its second), so that counters lapse between two holders.
            for (role, t) in clients.iter_mut() {
                t.fencing = *role == Role::Mutex;
                t.fence_grace = Some(GRACE_RANGE.0);
                t.think = Some((Duration::from_millis(2_200), Duration::from_secs(4)));
                t.long_hold_chance = 0.0;
                t.extend_chance = 0.0;
                t.ttl = t.ttl.min(Duration::from_secs(3));
                t.node_timeout = t.node_timeout.min(t.ttl / 4);
            }
        }
        Some(Control::ClockJump) => {
            // Holders that keep their locks long, and contenders that wait for them.
            for (i, (_, t)) in clients.iter_mut().enumerate() {
                if i < 2 {
                    t.long_hold_chance = t.long_hold_chance.max(0.6);
                }
                t.acquire_timeout = Some(Duration::from_secs(3));
                t.think = None;
            }
        }
        None => {}
    }
    groups.push(GroupPlan {
        primitive: Primitive::Mutex,
        resources,
        clients,
    });

    let mut total: usize = groups.iter().map(|g| g.clients.len()).sum();
    if rng.random_bool(0.45) {
        let permits = rng.random_range(2..=3);
        let n = rng.random_range(permits as usize + 1..=permits as usize + 3);
        if total + n <= MAX_CLIENTS {
            let clients = (0..n)
                .map(|_| (Role::Semaphore, draw_tuning(rng, aof)))
                .collect();
            total += n;
            groups.push(GroupPlan {
                primitive: Primitive::Semaphore { permits },
                resources: permits as usize,
                clients,
            });
        }
    }
    if rng.random_bool(0.4) {
        let n = rng.random_range(3..=5);
        if total + n <= MAX_CLIENTS {
            let clients = (0..n)
                .map(|_| (Role::RwLock, draw_tuning(rng, aof)))
                .collect();
            total += n;
            groups.push(GroupPlan {
                primitive: Primitive::RwLock,
                resources: 1,
                clients,
            });
        }
    }
    if rng.random_bool(0.4) {
        let n = rng.random_range(2..=3);
        if total + n < MAX_CLIENTS {
            let mut clients: Vec<(Role, Tuning)> = (0..n)
                .map(|_| {
                    let mut t = draw_tuning(rng, aof);
                    t.fencing = true;
                    (Role::Candidate, t)
                })
                .collect();
            let mut observer = draw_tuning(rng, aof);
            observer.fencing = false;
            clients.push((Role::Observer, observer));
            groups.push(GroupPlan {
                primitive: Primitive::Election,
                resources: 1,
                clients,
            });
        }
    }
    groups
}

/// One client's settings.
fn draw_tuning(rng: &mut StdRng, aof: bool) -> Tuning {
    let ttl = log_uniform(rng, TTL_RANGE.0, TTL_RANGE.1);
    let node_timeout = log_uniform(
        rng,
        Duration::from_millis(5),
        Duration::from_millis(600).min(ttl / 4),
    );
    let retry_delay = log_uniform(rng, Duration::from_millis(5), Duration::from_millis(300));
    let retry_jitter = uniform(rng, Duration::ZERO, retry_delay);
    let drift_factor = if rng.random_bool(0.5) {
        quorumlock::DEFAULT_DRIFT_FACTOR
    } else {
        (rng.random_range(0.001..0.05f64) * 1e4).round() / 1e4
    };
    let fence_grace = if rng.random_bool(0.45) {
        Some(GRACE_RANGE.0)
    } else if aof && rng.random_bool(0.15) {
        // The library's default (an hour): masters that keep their counters need no other.
        None
    } else {
        let ms = rng.random_range(10..=GRACE_RANGE.1.as_millis() as u64 / 100) * 100;
        Some(Duration::from_millis(ms))
    };
    let drift = ttl.mul_f64(drift_factor) + Duration::from_millis(2);
    let extend_chance = if rng.random_bool(0.3) {
        0.0
    } else {
        rng.random_range(0.05..0.5)
    };
    // An extend must outlast the drift allowance and the node timeout (the library refuses
    // shorter ones).
    let shortest = (node_timeout * 3 + drift + Duration::from_millis(10)).max(ttl / 4);
    let extend_ttl = Some((shortest, (ttl * 2).min(TTL_RANGE.1).max(shortest)));
    let long_hold_chance = if rng.random_bool(0.4) {
        0.0
    } else {
        rng.random_range(0.05..0.5)
    };
    let think = match rng.random_range(0..20) {
        0..=6 => None,
        7..=12 => Some((Duration::ZERO, Duration::from_millis(50))),
        _ => {
            let lo = uniform(rng, Duration::from_millis(200), Duration::from_secs(1));
            Some((
                lo,
                lo + uniform(rng, Duration::from_millis(300), Duration::from_secs(2)),
            ))
        }
    };
    Tuning {
        ttl,
        extend_ttl,
        node_timeout,
        retry_count: rng.random_range(0..=5),
        retry_delay,
        retry_jitter,
        drift_factor,
        fencing: false,
        fence_grace,
        acquire_timeout: Some(log_uniform(
            rng,
            Duration::from_millis(100),
            Duration::from_secs(3),
        )),
        owner: None,
        critical_section: Duration::from_millis(rng.random_range(1..=20)),
        extend_chance,
        long_hold_chance,
        think,
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing the schedule.

/// `k` distinct masters of `n`, sorted.
fn pick(rng: &mut StdRng, n: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in 0..k.min(n) {
        let j = rng.random_range(i..n);
        all.swap(i, j);
    }
    let mut picked = all[..k.min(n)].to_vec();
    picked.sort_unstable();
    picked
}

/// Where each master's clock may go, so that the plan stays within the bounds: apart by less
/// than `SKEW_SHARE` of the least grace, stepping back by less than it, forward by no more
/// than half the least drift allowance.
struct ClockRoom {
    offsets: Vec<f64>,
    /// The most two clocks may be apart, in ms.
    apart: f64,
    /// The longest step forward, in ms.
    forward: f64,
}

impl ClockRoom {
    /// How far master `i` may move: (most back, most forward), in ms, both ≥ 0.
    fn room(&self, i: usize) -> (f64, f64) {
        let others = || (0..self.offsets.len()).filter(move |j| *j != i);
        let lowest = others()
            .map(|j| self.offsets[j])
            .fold(f64::INFINITY, f64::min);
        let highest = others()
            .map(|j| self.offsets[j])
            .fold(f64::NEG_INFINITY, f64::max);
        let me = self.offsets[i];
        let up = (self.apart - (me - lowest)).max(0.0);
        let down = (self.apart - (highest - me)).max(0.0);
        (down, up)
    }
}

fn draw_schedule(rng: &mut StdRng, plan: &Plan) -> Vec<Planned> {
    let n = plan.masters;
    let duration = plan.duration;
    let fenced = plan.fenced();
    let least_grace = plan.least_grace().unwrap_or(Duration::from_secs(10));
    let apart = if fenced {
        least_grace.as_secs_f64() * 1e3 * SKEW_SHARE
    } else {
        10_000.0
    };
    let mut room = ClockRoom {
        offsets: vec![0.0; n],
        apart,
        forward: plan.least_drift().as_secs_f64() * 1e3 / 2.0,
    };
    let longest_ttl = plan.longest_ttl();
    let minority = (n - 1) / 2;

    // Which kinds this run uses.
    let kill_kind = if plan.aof {
        FaultKind::Kill
    } else {
        FaultKind::RestartEmpty
    };
    let mut kinds: Vec<FaultKind> = [kill_kind, FaultKind::Pause, FaultKind::Partition]
        .into_iter()
        .chain([FaultKind::Delay])
        .filter(|_| rng.random_bool(0.7))
        .collect();
    kinds.extend(
        [
            FaultKind::Skew,
            FaultKind::Bump,
            FaultKind::Strobe,
            FaultKind::Rate,
        ]
        .into_iter()
        .filter(|_| rng.random_bool(0.45)),
    );

    let mut faults = Vec::new();
    // A master restarted empty is down for a TTL or more: one at a time.
    let mut empty_until = Duration::ZERO;
    if kinds.contains(&FaultKind::Skew) {
        if rng.random_bool(0.5) {
            // One master ahead of the others.
            let m = rng.random_range(0..n);
            room.offsets[m] = (rng.random_range(0.3..1.0) * apart).floor();
        } else {
            for offset in room.offsets.iter_mut() {
                *offset = (rng.random_range(-0.5..0.5) * apart).round();
            }
        }
        faults.push(Planned {
            at: Duration::ZERO,
            kind: FaultKind::Skew,
            action: Action::Skew {
                offsets_ms: room.offsets.iter().map(|o| *o as i64).collect(),
            },
        });
    }

    let events = kinds.iter().filter(|k| **k != FaultKind::Skew).count();
    let mut at = Duration::from_millis(rng.random_range(300..1_500));
    let end = duration.saturating_sub(Duration::from_millis(500));
    while events > 0 && at < end {
        let pool: Vec<FaultKind> = kinds
            .iter()
            .copied()
            .filter(|k| *k != FaultKind::Skew)
            .collect();
        let kind = pool[rng.random_range(0..pool.len())];
        let left = end - at;
        let action = match kind {
            FaultKind::Kill => {
                let k = rng.random_range(1..=minority.max(1));
                Some(Action::Kill {
                    masters: pick(rng, n, k),
                    down: uniform(rng, Duration::from_millis(100), Duration::from_secs(3)),
                })
            }
            FaultKind::RestartEmpty => {
                // Down for at least the longest TTL (and, with fences at stake, the longest
                // grace and its second): the README's condition for a master that forgets.
                let mut down = longest_ttl;
                if fenced {
                    let grace = plan.most_grace().unwrap_or(GRACE_RANGE.1);
                    down = down.max(grace + Duration::from_secs(1));
                }
                down += uniform(rng, Duration::from_millis(200), Duration::from_secs(2));
                let victims = pick(rng, n, 1);
                (at >= empty_until).then(|| {
                    empty_until = at + down;
                    Action::Kill {
                        masters: victims,
                        down,
                    }
                })
            }
            FaultKind::Pause => {
                let k = rng.random_range(1..=minority.max(1));
                Some(Action::Pause {
                    masters: pick(rng, n, k),
                    lasts: log_uniform(rng, Duration::from_millis(50), Duration::from_secs(2)),
                })
            }
            FaultKind::Partition => {
                let k = if rng.random_bool(0.25) {
                    plan.quorum()
                } else {
                    rng.random_range(1..=minority.max(1))
                };
                Some(Action::Partition {
                    masters: pick(rng, n, k),
                    lasts: log_uniform(rng, Duration::from_millis(50), Duration::from_secs(3)),
                })
            }
            FaultKind::Delay => {
                let k = rng.random_range(1..=n);
                let most = if rng.random_bool(0.7) { 20 } else { 400 };
                Some(Action::Delay {
                    masters: pick(rng, n, k),
                    up: Duration::from_millis(rng.random_range(1..=most)),
                    down: Duration::from_millis(rng.random_range(1..=most)),
                    jitter: Duration::from_millis(rng.random_range(0..=most / 4)),
                    lasts: log_uniform(rng, Duration::from_millis(200), Duration::from_secs(4)),
                })
            }
            FaultKind::Bump => {
                let m = rng.random_range(0..n);
                let (back, forward) = room.room(m);
                let forward = forward.min(room.forward);
                let back = back.min(apart);
                let by = if rng.random_bool(0.7) {
                    -(rng.random_range(0.0..=1.0) * back).floor()
                } else {
                    (rng.random_range(0.0..=1.0) * forward).floor()
                };
                room.offsets[m] += by;
                Some(Action::Bump {
                    masters: vec![m],
                    by_ms: by as i64,
                })
            }
            FaultKind::Strobe => {
                let m = rng.random_range(0..n);
                let (back, forward) = room.room(m);
                // Each flap steps back and forward by the amplitude.
                let most = back.min(forward).min(room.forward);
                let by = (rng.random_range(0.0..=1.0) * most).floor();
                let by = if rng.random_bool(0.5) { by } else { -by };
                Some(Action::Strobe {
                    master: m,
                    by_ms: by as i64,
                    every: Duration::from_millis(rng.random_range(10..=200)),
                    lasts: log_uniform(rng, Duration::from_millis(300), Duration::from_secs(4)),
                })
            }
            FaultKind::Rate => {
                let m = rng.random_range(0..n);
                let lasts =
                    log_uniform(rng, Duration::from_millis(500), Duration::from_secs(6)).min(left);
                let (back, forward) = room.room(m);
                let secs = lasts.as_secs_f64().max(1e-3);
                // Fast by at most half the least drift factor; the clock gets no further
                // than its room.
                let fastest =
                    (1.0 / (1.0 - plan.least_drift_factor() / 2.0)).min(1.0 + forward / 1e3 / secs);
                let slowest = (1.0 - back / 1e3 / secs).max(0.5);
                let rate = if rng.random_bool(0.5) {
                    rng.random_range(slowest..=1.0)
                } else {
                    rng.random_range(1.0..=fastest.max(1.0))
                };
                let rate = (rate * 1e5).floor() / 1e5;
                room.offsets[m] += (rate - 1.0) * secs * 1e3;
                Some(Action::Rate {
                    master: m,
                    rate,
                    lasts,
                })
            }
            FaultKind::Skew => None,
        };
        if let Some(action) = action {
            faults.push(Planned { at, kind, action });
        }
        at += log_uniform(
            rng,
            Duration::from_millis(300),
            Duration::from_millis(3_000),
        );
    }

    match plan.control {
        Some(Control::ClockJump) => {
            let by = longest_ttl + uniform(rng, Duration::from_secs(1), Duration::from_secs(3));
            let at = duration.mul_f64(rng.random_range(0.35..0.65));
            // On every master, so that it strikes a quorum of those up whatever else is
            // going on.
            faults.push(Planned {
                at,
                kind: FaultKind::Bump,
                action: Action::Bump {
                    masters: (0..n).collect(),
                    by_ms: by.as_millis() as i64,
                },
            });
        }
        Some(Control::SkewBeyondGrace) => {
            let m = rng.random_range(0..n);
            let ahead = least_grace + uniform(rng, Duration::from_secs(2), Duration::from_secs(5));
            let mut offsets = vec![0i64; n];
            offsets[m] = ahead.as_millis() as i64;
            // No other clock fault, and no master down for long: the fast one must be up, and
            // in a quorum without it, half of the time.
            faults.retain(|f| {
                !f.kind.is_clock() && !matches!(f.kind, FaultKind::Kill | FaultKind::RestartEmpty)
            });
            faults.push(Planned {
                at: Duration::ZERO,
                kind: FaultKind::Skew,
                action: Action::Skew {
                    offsets_ms: offsets,
                },
            });
            // The fast master frozen about half of the time, so that some holders are
            // granted without it.
            let mut at = Duration::from_secs(1);
            while at < end {
                let lasts = uniform(rng, Duration::from_millis(800), Duration::from_secs(3));
                faults.push(Planned {
                    at,
                    kind: FaultKind::Pause,
                    action: Action::Pause {
                        masters: vec![m],
                        lasts,
                    },
                });
                at += lasts + uniform(rng, Duration::from_millis(500), Duration::from_secs(2));
            }
        }
        None => {}
    }
    faults.sort_by_key(|f| f.at);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_one_plan_and_taking_a_kind_away_changes_nothing_else() {
        let options = Options::default();
        for seed in 0..50 {
            let a = Plan::draw(seed, &options);
            let b = Plan::draw(seed, &options);
            assert_eq!(a.to_string(), b.to_string());
            for kind in a.kinds() {
                let without = a.without(&BTreeSet::from([kind]));
                assert!(!without.kinds().contains(&kind));
                let left: Vec<&Planned> = without.active_faults().collect();
                let expected: Vec<&Planned> =
                    a.active_faults().filter(|f| f.kind != kind).collect();
                assert_eq!(left, expected);
                assert_eq!(without.summary(), a.summary());
            }
        }
    }

    #[test]
    fn every_client_asks_for_a_ttl_of_1_to_30_s_and_extends_the_library_accepts() {
        for seed in 0..200 {
            let plan = Plan::draw(seed, &Options::default());
            assert!(plan.clients().count() <= MAX_CLIENTS, "{plan}");
            for (_, _, t) in plan.clients() {
                assert!((TTL_RANGE.0..=TTL_RANGE.1).contains(&t.ttl), "{plan}");
                let (lo, _) = t.extend_ttl.unwrap();
                assert!(lo > t.drift(lo) + t.node_timeout, "{plan}");
                assert!(t.ttl > t.drift(t.ttl) + t.node_timeout, "{plan}");
                if let Some(grace) = t.fence_grace {
                    assert!(grace >= quorumlock::MIN_FENCE_GRACE);
                }
            }
        }
    }

    #[test]
    fn controls_come_one_plan_in_four_or_when_asked() {
        let drawn = (0..400)
            .filter(|seed| Plan::draw(*seed, &Options::default()).control.is_some())
            .count();
        assert!((60..=140).contains(&drawn), "{drawn} of 400");
        let never = Options {
            controls: false,
            ..Options::default()
        };
        assert!((0..100).all(|s| Plan::draw(s, &never).control.is_none()));
        let jump = Options {
            control: Some(Control::ClockJump),
            ..Options::default()
        };
        let plan = Plan::draw(7, &jump);
        assert_eq!(plan.control, Some(Control::ClockJump));
        assert!(plan.kinds().contains(&FaultKind::Bump), "{plan}");
    }

    #[test]
    fn durations_print_in_seconds() {
        assert_eq!(secs(Duration::from_millis(1_250)), "1.25s");
        assert_eq!(secs(Duration::from_secs(3)), "3s");
        assert_eq!(signed_ms(-600), "-0.6s");
        assert_eq!(signed_ms(1_500), "+1.5s");
    }
}

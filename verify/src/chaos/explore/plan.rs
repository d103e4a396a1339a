//! What one exploration runs, drawn from its seed ([`Plan`]): the masters, the clients (each
//! with a configuration of its own) and the fault schedule.
//!
//! Everything is drawn up front from the seed, from random sources of its own for the
//! configuration and for the schedule, so that taking a kind of fault away
//! ([`Plan::without`]) leaves the configuration and every other fault as they were.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use super::super::setup::Tuning;

/// The shortest and longest TTL a client asks for.
pub(super) const TTL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(30));

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
    /// quorumlock's mutex turned into nested holds (`ReentrantLock`), on the same names.
    Reentrant,
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
        add("reent", count(&|r, _| r == Role::Reentrant));
        add("aof-votes", count(&|_, t| t.durability.is_some()));
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
        Role::Mutex => {
            let kind = match (&t.owner, t.fencing) {
                (Some(owner), true) => format!("owner {owner} fenced"),
                (Some(owner), false) => format!("owner {owner}"),
                (None, true) => "mutex fenced".to_owned(),
                (None, false) => "mutex".to_owned(),
            };
            match t.durability {
                Some(_) => format!("{kind} waitaof"),
                None => kind,
            }
        }
        Role::Rslock => "rslock".to_owned(),
        Role::Reentrant => "reentrant".to_owned(),
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
    if role == Role::Rslock {
        // rslock has no node timeout, line, fencing or extend here.
        return format!(
            "{what:<22} TTL {}, retry {}×{} ms, drift {:.3}, holds ≤{} ms (long {:.0}%){think}",
            secs(t.ttl),
            t.retry_count.max(1),
            t.retry_delay.as_millis(),
            t.drift_factor,
            t.critical_section.as_millis(),
            t.long_hold_chance * 100.0
        );
    }
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

#[cfg(test)]
mod tests {
    use super::super::config::MAX_CLIENTS;
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

//! Which of a plan's faults stay within the bounds the README states, for each guarantee
//! ([`judge`]), and which guarantee a violation breaks ([`Guarantee::of`]).
//!
//! The README ("Guarantees — and what they assume", "Fencing, exactly"):
//!
//! * **Mutual exclusion** (leases, witnesses, registers, a semaphore's K, a read-write lock's
//!   writers, one leader) holds while clocks do not jump — the masters' expiry and the client's
//!   monotonic clock advance at about the same rate, the drift allowance covering small
//!   differences — and while a master that forgets (restarted without AOF) stays down for at
//!   least a TTL. So: a clock stepping forward by more than the least drift allowance of any
//!   lease, flapping by more than it, or running faster than `1 / (1 − drift factor)`, and a
//!   master restarted empty before the longest TTL, are beyond it. A clock set apart from the
//!   start, stepping back, or running slow is not: expiry is relative, and a key that lives
//!   longer only delays others.
//! * **Fences** (and election terms, which are fences) increase while no master's clock runs
//!   ahead of another's, or steps back, by the least fencing grace or more, and while masters
//!   keep their counters: a master restarted empty counts as its counters lapsing, which is
//!   within bounds once it was down for the longest grace plus its second.
//!
//! Partitions, pauses, latency and kills of masters that keep an AOF are within both.

use std::fmt;

use super::plan::{secs, signed_ms, Action, FaultKind, Plan, Planned};
use quorumlock_testkit::Violation;

/// A guarantee the explorer checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Guarantee {
    /// At most one holder (K for a semaphore, no writer beside anyone, one leader).
    Exclusion,
    /// Fences and terms strictly increase.
    Fencing,
    /// Waiters in line do not spin (see `liveness`): no fault is beyond its bounds.
    Liveness,
}

impl Guarantee {
    /// The guarantee `violation` breaks.
    pub fn of(violation: &Violation) -> Guarantee {
        match violation {
            Violation::FenceOrder { .. }
            | Violation::TermOrder { .. }
            | Violation::SharedFence { .. } => Guarantee::Fencing,
            _ => Guarantee::Exclusion,
        }
    }
}

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Guarantee::Exclusion => "exclusion",
            Guarantee::Fencing => "fencing",
            Guarantee::Liveness => "liveness",
        })
    }
}

/// The verdict on one fault: the guarantees whose bounds it goes beyond, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// The fault's kind.
    pub kind: FaultKind,
    /// What it does.
    pub description: String,
    /// Each guarantee it goes beyond the bounds of, with the reason; empty when within.
    pub beyond: Vec<(Guarantee, String)>,
}

impl Judged {
    /// Whether it stays within the bounds of every guarantee.
    pub fn within(&self) -> bool {
        self.beyond.is_empty()
    }

    /// Whether it stays within the bounds of `guarantee`.
    pub fn within_for(&self, guarantee: Guarantee) -> bool {
        self.beyond.iter().all(|(g, _)| *g != guarantee)
    }
}

/// The limits the plan's clients set.
struct Limits {
    /// The least drift allowance of any lease, in ms.
    drift_ms: f64,
    /// The fastest rate within the allowance: `1 / (1 − least drift factor)`.
    fastest: f64,
    /// The least fencing grace, in ms, when anything is fenced.
    grace_ms: Option<f64>,
    /// How long a master restarted empty must have been down, for each guarantee, in ms.
    down_ms: (f64, Option<f64>),
}

/// Every active fault of `plan` in the order they start, each judged against the bounds, the
/// clocks followed from fault to fault (a clock stepped by one fault stays where it went).
pub fn judge(plan: &Plan) -> Vec<Judged> {
    let grace_ms = plan
        .fenced()
        .then(|| plan.least_grace().map(|g| g.as_secs_f64() * 1e3))
        .flatten();
    let limits = Limits {
        drift_ms: plan.least_drift().as_secs_f64() * 1e3,
        fastest: 1.0 / (1.0 - plan.least_drift_factor()),
        grace_ms,
        down_ms: (
            plan.longest_ttl().as_secs_f64() * 1e3,
            plan.fenced()
                .then(|| plan.most_grace().map(|g| g.as_secs_f64() * 1e3 + 1e3))
                .flatten(),
        ),
    };
    let mut offsets = vec![0.0f64; plan.masters];
    plan.active_faults()
        .map(|fault| judge_one(plan, &limits, &mut offsets, fault))
        .collect()
}

fn judge_one(plan: &Plan, limits: &Limits, offsets: &mut [f64], fault: &Planned) -> Judged {
    let mut beyond = Vec::new();
    let mut exclusion = |why: String| beyond.push((Guarantee::Exclusion, why));
    let mut fencing = Vec::new();
    let mut peak = offsets.to_vec();
    match &fault.action {
        Action::Kill { down, .. } if !plan.aof => {
            let down_ms = down.as_secs_f64() * 1e3;
            if down_ms < limits.down_ms.0 {
                exclusion(format!(
                    "restarted empty after {} < the longest TTL {}",
                    secs(*down),
                    ms(limits.down_ms.0)
                ));
            }
            if let Some(need) = limits.down_ms.1.filter(|need| down_ms < *need) {
                fencing.push(format!(
                    "restarted empty after {} < the longest grace and its second {}",
                    secs(*down),
                    ms(need)
                ));
            }
        }
        Action::Kill { .. }
        | Action::Pause { .. }
        | Action::Partition { .. }
        | Action::Delay { .. } => {}
        Action::Skew { offsets_ms } => {
            for (i, o) in offsets_ms.iter().enumerate() {
                if let Some(slot) = offsets.get_mut(i) {
                    *slot = *o as f64;
                }
            }
            peak = offsets.to_vec();
        }
        Action::Bump { masters, by_ms } => {
            let by = *by_ms as f64;
            if by > limits.drift_ms {
                exclusion(format!(
                    "a clock steps forward {} > the least drift allowance {}",
                    signed_ms(*by_ms),
                    ms(limits.drift_ms)
                ));
            }
            if let Some(grace) = limits.grace_ms.filter(|g| -by >= *g) {
                fencing.push(format!(
                    "a clock steps back {} ≥ the least grace {}",
                    signed_ms(*by_ms),
                    ms(grace)
                ));
            }
            for m in masters {
                if let Some(slot) = offsets.get_mut(*m) {
                    *slot += by;
                }
            }
            peak = offsets.to_vec();
        }
        Action::Strobe { master, by_ms, .. } => {
            let by = *by_ms as f64;
            if by.abs() > limits.drift_ms {
                exclusion(format!(
                    "a clock flaps by {} > the least drift allowance {}",
                    signed_ms(*by_ms),
                    ms(limits.drift_ms)
                ));
            }
            if let Some(grace) = limits.grace_ms.filter(|g| by.abs() >= *g) {
                fencing.push(format!(
                    "a clock flaps back {} ≥ the least grace {}",
                    signed_ms(by_ms.abs()),
                    ms(grace)
                ));
            }
            if let Some(slot) = peak.get_mut(*master) {
                *slot += by;
            }
        }
        Action::Rate {
            master,
            rate,
            lasts,
        } => {
            if *rate > limits.fastest {
                exclusion(format!(
                    "a clock runs at x{rate:.4} > x{:.4}, what the least drift factor covers",
                    limits.fastest
                ));
            }
            if let Some(slot) = offsets.get_mut(*master) {
                *slot += (rate - 1.0) * lasts.as_secs_f64() * 1e3;
            }
            peak = offsets.to_vec();
        }
    }
    if let Some(grace) = limits.grace_ms {
        let hi = peak.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lo = peak.iter().copied().fold(f64::INFINITY, f64::min);
        if fault.kind.is_clock() && hi - lo >= grace {
            fencing.push(format!(
                "master clocks {} apart ≥ the least grace {}",
                ms(hi - lo),
                ms(grace)
            ));
        }
    }
    beyond.extend(fencing.into_iter().map(|why| (Guarantee::Fencing, why)));
    Judged {
        kind: fault.kind,
        description: fault.action.to_string(),
        beyond,
    }
}

fn ms(ms: f64) -> String {
    format!("{:.0} ms", ms)
}

#[cfg(test)]
mod tests {
    use super::super::plan::{Control, Options};
    use super::*;

    #[test]
    fn plans_that_are_not_controls_stay_within_the_bounds() {
        let options = Options {
            controls: false,
            ..Options::default()
        };
        for seed in 0..300 {
            let plan = Plan::draw(seed, &options);
            for judged in judge(&plan) {
                assert!(judged.within(), "{judged:?} in\n{plan}");
            }
        }
    }

    #[test]
    fn a_clock_jump_beyond_the_ttl_breaks_exclusion_and_a_skew_beyond_the_grace_fencing() {
        for seed in 0..40 {
            let jump = Plan::draw(
                seed,
                &Options {
                    control: Some(Control::ClockJump),
                    ..Options::default()
                },
            );
            assert!(
                judge(&jump)
                    .iter()
                    .any(|j| !j.within_for(Guarantee::Exclusion)),
                "{jump}"
            );
            let skew = Plan::draw(
                seed,
                &Options {
                    control: Some(Control::SkewBeyondGrace),
                    ..Options::default()
                },
            );
            let judged = judge(&skew);
            assert!(
                judged.iter().any(|j| !j.within_for(Guarantee::Fencing)),
                "{skew}"
            );
            assert!(
                judged.iter().all(|j| j.within_for(Guarantee::Exclusion)),
                "{skew}"
            );
        }
    }

    #[test]
    fn violations_are_sorted_by_the_guarantee_they_break() {
        let overlap = Violation::LostUpdate {
            resource: "r".into(),
            final_value: 1,
            expected: 2,
            writes: 2,
        };
        assert_eq!(Guarantee::of(&overlap), Guarantee::Exclusion);
        let shared = Violation::SharedFence {
            resource: "r".into(),
            fence: 3,
            first_client: 0,
            second_client: 1,
            at: std::time::Instant::now(),
        };
        assert_eq!(Guarantee::of(&shared), Guarantee::Fencing);
    }
}

//! Drawing a plan's fault schedule, from the plan's schedule source: which kinds of fault
//! the run uses, when each strikes, which masters, for how long — within the README's bounds
//! (see `bounds`), and, for a negative control, the one fault beyond them.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use super::config::{log_uniform, uniform, GRACE_RANGE};
use super::plan::{Action, Control, FaultKind, Plan, Planned};

/// How much of the fencing grace the masters' clocks may drift apart, at most, in a plan that
/// stays within bounds.
const SKEW_SHARE: f64 = 0.95;

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

/// `k` distinct masters of `n`, sorted; half of the time `favoured` among them, when there is
/// one.
fn pick_near(rng: &mut StdRng, n: usize, k: usize, favoured: Option<usize>) -> Vec<usize> {
    let mut picked = pick(rng, n, k);
    if let Some(f) = favoured.filter(|_| rng.random_bool(0.5)) {
        if !picked.contains(&f) {
            if let Some(slot) = picked.first_mut() {
                *slot = f;
            }
            picked.sort_unstable();
        }
    }
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

pub(super) fn draw_schedule(rng: &mut StdRng, plan: &Plan) -> Vec<Planned> {
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
            (FaultKind::Skew, 0.65),
            (FaultKind::Bump, 0.45),
            (FaultKind::Strobe, 0.45),
            (FaultKind::Rate, 0.45),
        ]
        .into_iter()
        .filter(|(_, p)| rng.random_bool(*p))
        .map(|(kind, _)| kind),
    );

    let mut faults = Vec::new();
    // A master restarted empty is down for a TTL or more: one at a time.
    let mut empty_until = Duration::ZERO;
    // The master whose clock is furthest ahead: the other faults strike it more often, so
    // that clock faults meet the faults that leave a master out of a quorum.
    let mut favoured = None;
    if kinds.contains(&FaultKind::Skew) {
        if rng.random_bool(0.6) {
            // One master ahead of the others, most of the time just under the bound.
            let m = rng.random_range(0..n);
            let share = if rng.random_bool(0.7) {
                rng.random_range(0.9..1.0)
            } else {
                rng.random_range(0.3..0.9)
            };
            room.offsets[m] = (share * apart).floor();
        } else {
            for offset in room.offsets.iter_mut() {
                *offset = (rng.random_range(-0.5..0.5) * apart).round();
            }
        }
        favoured = (0..n).max_by(|a, b| room.offsets[*a].total_cmp(&room.offsets[*b]));
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
                    masters: pick_near(rng, n, k, favoured),
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
            FaultKind::Pause => match favoured.filter(|_| rng.random_bool(0.4)) {
                // A flapping master: the one furthest ahead, paused and resumed again and
                // again, so that quorums form now with it, now without it.
                Some(m) => {
                    let until = at + uniform(rng, Duration::from_secs(2), Duration::from_secs(6));
                    let mut from = at;
                    while from < until.min(end) {
                        let lasts =
                            uniform(rng, Duration::from_millis(200), Duration::from_secs(1));
                        faults.push(Planned {
                            at: from,
                            kind,
                            action: Action::Pause {
                                masters: vec![m],
                                lasts,
                            },
                        });
                        from += lasts
                            + uniform(rng, Duration::from_millis(200), Duration::from_secs(1));
                    }
                    None
                }
                None => {
                    let k = rng.random_range(1..=minority.max(1));
                    Some(Action::Pause {
                        masters: pick_near(rng, n, k, favoured),
                        lasts: log_uniform(rng, Duration::from_millis(50), Duration::from_secs(2)),
                    })
                }
            },
            FaultKind::Partition => {
                let k = if rng.random_bool(0.25) {
                    plan.quorum()
                } else {
                    rng.random_range(1..=minority.max(1))
                };
                Some(Action::Partition {
                    masters: pick_near(rng, n, k, favoured),
                    lasts: log_uniform(rng, Duration::from_millis(50), Duration::from_secs(3)),
                })
            }
            FaultKind::Delay => {
                let k = rng.random_range(1..=n);
                let most = if rng.random_bool(0.7) { 20 } else { 400 };
                Some(Action::Delay {
                    masters: pick_near(rng, n, k, favoured),
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

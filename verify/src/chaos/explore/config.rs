//! Drawing a plan's clients: which primitives, how many clients of each, and each client's
//! [`Tuning`], from the plan's configuration source.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use super::super::setup::Tuning;
use super::plan::{Control, GroupPlan, Primitive, Role, TTL_RANGE};

/// The least and most fencing grace drawn (the least is the library's minimum).
pub(super) const GRACE_RANGE: (Duration, Duration) =
    (quorumlock::MIN_FENCE_GRACE, Duration::from_secs(8));

/// rslock's drift factor (its `CLOCK_DRIFT_FACTOR`), which it does not let a user set.
const RSLOCK_DRIFT_FACTOR: f64 = 0.01;

/// Most clients in one run (the machine has two cores).
pub(super) const MAX_CLIENTS: usize = 16;

/// A duration drawn log-uniformly in `[lo, hi]`, whole milliseconds.
pub(super) fn log_uniform(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    let (lo, hi) = (lo.as_secs_f64().max(1e-3), hi.as_secs_f64().max(1e-3));
    if hi <= lo {
        return Duration::from_millis((lo * 1e3).round() as u64);
    }
    let x = rng.random_range(lo.ln()..=hi.ln()).exp();
    Duration::from_millis((x * 1e3).round() as u64)
}

pub(super) fn uniform(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    if hi <= lo {
        return lo;
    }
    Duration::from_millis(rng.random_range(lo.as_millis() as u64..=hi.as_millis() as u64))
}

/// The groups of clients: always the mutex group, the other primitives now and then. `extra`
/// draws what came after the first plans (durable votes, reentrant clients), so that a seed
/// draws the rest as it did before.
pub(super) fn draw_groups(
    rng: &mut StdRng,
    extra: &mut StdRng,
    aof: bool,
    control: Option<Control>,
) -> Vec<GroupPlan> {
    let fleet = Fleet::draw(rng, aof);
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
        let mut t = draw_tuning(rng, &fleet);
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
        let mut t = draw_tuning(rng, &fleet);
        // What rslock has of its own: its drift factor, no fencing, no extends here.
        t.drift_factor = RSLOCK_DRIFT_FACTOR;
        t.fencing = false;
        t.owner = None;
        t.extend_chance = 0.0;
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
    // On masters with an AOF, some of quorumlock's clients count a grant once it is fsynced
    // there (`WAITAOF 1 0`).
    for (role, t) in clients.iter_mut() {
        if aof && *role == Role::Mutex && extra.random_bool(0.3) {
            t.durability = Some(quorumlock::Durability::Aof {
                local: true,
                replicas: 0,
            });
        }
    }
    // Reentrant clients on the same names: each lock nested into holds that tasks of their own
    // extend and end (scenario 21's workload), beside the plain holders.
    if control.is_none() && extra.random_bool(0.35) {
        for _ in 0..extra.random_range(1..=2) {
            clients.push((Role::Reentrant, draw_tuning(extra, &fleet)));
        }
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
                .map(|_| {
                    let mut t = draw_tuning(rng, &fleet);
                    t.fencing = rng.random_bool(0.5);
                    (Role::Semaphore, t)
                })
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
                .map(|_| {
                    let mut t = draw_tuning(rng, &fleet);
                    t.fencing = rng.random_bool(0.5);
                    (Role::RwLock, t)
                })
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
                    let mut t = draw_tuning(rng, &fleet);
                    t.fencing = true;
                    (Role::Candidate, t)
                })
                .collect();
            let mut observer = draw_tuning(rng, &fleet);
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

/// What a plan's clients have in common, when they do: a fleet shares its configuration more
/// often than not, and some fleets are busy while others take a lock now and then.
struct Fleet {
    aof: bool,
    /// One fencing grace for every client (`Some(None)`: the library's default).
    grace: Option<Option<Duration>>,
    /// Every client pauses between holds (a fleet that locks now and then: names fall idle).
    sparse: bool,
}

impl Fleet {
    fn draw(rng: &mut StdRng, aof: bool) -> Fleet {
        let grace = rng.random_bool(0.6).then(|| draw_grace(rng, aof));
        Fleet {
            aof,
            grace,
            sparse: rng.random_bool(0.45),
        }
    }
}

/// A fencing grace: the least (1 s) often, the library's default (1 h) now and then over
/// masters that keep their counters (`None`), else 1–8 s.
fn draw_grace(rng: &mut StdRng, aof: bool) -> Option<Duration> {
    if rng.random_bool(0.45) {
        Some(GRACE_RANGE.0)
    } else if aof && rng.random_bool(0.15) {
        // The library's default (an hour): masters that keep their counters need no other.
        None
    } else {
        let ms = rng.random_range(10..=GRACE_RANGE.1.as_millis() as u64 / 100) * 100;
        Some(Duration::from_millis(ms))
    }
}

/// One client's settings.
fn draw_tuning(rng: &mut StdRng, fleet: &Fleet) -> Tuning {
    let aof = fleet.aof;
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
    let fence_grace = draw_grace(rng, aof);
    let fence_grace = fleet.grace.unwrap_or(fence_grace);
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
        0..=6 if !fleet.sparse => None,
        7..=12 if !fleet.sparse => Some((Duration::ZERO, Duration::from_millis(50))),
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
        durability: None,
        critical_section: Duration::from_millis(rng.random_range(1..=20)),
        extend_chance,
        long_hold_chance,
        think,
    }
}

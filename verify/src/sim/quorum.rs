//! The second checker, on the masters' own state: while a quorumlock lock is valid (from the
//! acquire or extend that said so to the validity it reported, or to the start of its release),
//! its value is on a quorum of masters.
//!
//! The overlap checker sees a lock that promises more than its keys hold only when a second
//! holder happens to come by in time; this one sees it the moment the keys go. It is how the
//! defects of the owner id's takeovers were found by reading the keys (a late rollback deleting
//! a key that the owner's later grant counted on, with nobody else there yet to take it).
//!
//! The lock's value on a master: its token, the token marked elected, or, under an owner id,
//! any token of the same owner (an owner's attempts take keys over from each other by design).
//! A master that lost its data (restarted empty, failed over to an older copy) since the lock
//! was granted counts as holding it: that fault is the one Redlock answers by keeping the master
//! down for a TTL, not a defect of the lock.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use quorumlock_sim::{lock, SharedMaster, Value};
use quorumlock_testkit::{Op, OpKind, Outcome, TokenFingerprint};

use super::plan::{Plan, WorkerKind};

/// How long after a lock's acquire or extend ended its keys are first looked at: the log reads
/// the masters between the simulation's steps (1 ms apart), so a grant may show a step late.
const SLACK: Duration = Duration::from_millis(2);

/// The values of the resources' keys on every master, as they changed, and when masters lost
/// their data; times from the simulation's start.
#[derive(Debug, Default)]
pub struct KeyLog {
    keys: Vec<String>,
    /// By (master, resource): the value last seen.
    last: BTreeMap<(usize, usize), Option<Vec<u8>>>,
    changes: Vec<Change>,
    data_lost: Vec<(Duration, usize)>,
}

#[derive(Debug)]
struct Change {
    at: Duration,
    master: usize,
    resource: usize,
    value: Option<Vec<u8>>,
}

impl KeyLog {
    /// A log of the keys of `plan`'s resources (the lock key is the resource name).
    pub fn new(plan: &Plan) -> KeyLog {
        KeyLog {
            keys: plan.resources.clone(),
            ..KeyLog::default()
        }
    }

    /// Reads every resource's key on every master at `at`, noting what changed.
    pub fn observe(&mut self, at: Duration, masters: &[SharedMaster]) {
        for (m, master) in masters.iter().enumerate() {
            let master = lock(master);
            for (r, key) in self.keys.iter().enumerate() {
                let value = master.peek(key.as_bytes()).and_then(|e| match &e.value {
                    Value::String(v) => Some(v.as_slice()),
                    _ => None,
                });
                let last = self.last.entry((m, r)).or_default();
                if last.as_deref() != value {
                    *last = value.map(<[u8]>::to_vec);
                    self.changes.push(Change {
                        at,
                        master: m,
                        resource: r,
                        value: last.clone(),
                    });
                }
            }
        }
    }

    /// Notes that `master` lost its data at `at`.
    pub fn data_lost(&mut self, at: Duration, master: usize) {
        self.data_lost.push((at, master));
    }

    /// The value of `resource`'s key on `master` at `at`.
    fn value_at(&self, master: usize, resource: usize, at: Duration) -> Option<&[u8]> {
        self.changes
            .iter()
            .rev()
            .find(|c| c.master == master && c.resource == resource && c.at <= at)
            .and_then(|c| c.value.as_deref())
    }

    /// The changes of `resource`'s key from `from` to `to`, one line each, with the masters'
    /// data losses among them.
    fn changes_of(&self, resource: usize, from: Duration, to: Duration) -> Vec<String> {
        let ms = |t: Duration| t.as_secs_f64() * 1e3;
        let mut lines: Vec<(Duration, String)> = self
            .changes
            .iter()
            .filter(|c| c.resource == resource && c.at >= from && c.at <= to)
            .map(|c| {
                let value = c.value.as_deref().map_or("nothing".to_owned(), |v| {
                    String::from_utf8_lossy(v).into_owned()
                });
                (
                    c.at,
                    format!("{:>10.3} ms  m{}  {value}", ms(c.at), c.master),
                )
            })
            .chain(
                self.data_lost
                    .iter()
                    .filter(|&&(at, _)| at >= from && at <= to)
                    .map(|&(at, m)| (at, format!("{:>10.3} ms  m{m}  lost its data", ms(at)))),
            )
            .collect();
        lines.sort_by_key(|(at, _)| *at);
        lines.into_iter().map(|(_, line)| line).collect()
    }

    /// Whether `master` lost its data between `from` and `to`.
    pub(super) fn lost_between(&self, master: usize, from: Duration, to: Duration) -> bool {
        self.data_lost
            .iter()
            .any(|&(at, m)| m == master && at >= from && at <= to)
    }
}

/// A lock whose value was on fewer than a quorum of masters while it was valid.
#[derive(Debug, Clone)]
pub struct QuorumLoss {
    /// The resource.
    pub resource: String,
    /// The history's client that held it.
    pub client: usize,
    /// The token's fingerprint.
    pub token: String,
    /// When its value was on too few masters, from the run's start.
    pub at: Duration,
    /// Until when the lock said it was valid, from the run's start.
    pub valid_until: Duration,
    /// On how many masters it was then.
    pub held_on: usize,
    /// How many it needed.
    pub quorum: usize,
    /// Every master's value then.
    pub values: Vec<String>,
    /// How the key changed on the masters from the lease's start to just after the loss, one
    /// line each (time in ms from the run's start, master, value).
    pub changes: Vec<String>,
}

impl fmt::Display for QuorumLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client {}'s lock {} on {:?} held on {} of the masters (quorum {}) at {:.3} ms, \
             valid until {:.3} ms; the masters held {}",
            self.client,
            self.token,
            self.resource,
            self.held_on,
            self.quorum,
            self.at.as_secs_f64() * 1e3,
            self.valid_until.as_secs_f64() * 1e3,
            self.values.join(", ")
        )
    }
}

/// One stretch of a lock's validity: from an acquire or extend that succeeded to the validity
/// it reported, cut short by the lock's release.
struct Lease<'a> {
    op: &'a Op,
    /// When the acquire or extend started.
    started: Duration,
    from: Duration,
    until: Duration,
}

/// Every quorumlock lock of `ops` (with the owner's releases of `ended`, see
/// `run::with_owner_releases`) whose value was on fewer than a quorum of `plan`'s masters while
/// it was valid, by `log`; `origin` is the run's start. The first loss of each lock.
pub fn quorum_losses(plan: &Plan, ops: &[Op], log: &KeyLog, origin: Instant) -> Vec<QuorumLoss> {
    let since = |t: Instant| t.saturating_duration_since(origin);
    let quorum = plan.masters / 2 + 1;
    let ours = |client: usize| {
        client >= 1000
            || plan
                .workers
                .get(client)
                .is_some_and(|w| w.kind != WorkerKind::Foreign)
    };
    let released = |token: &str| {
        ops.iter()
            .filter(|op| op.kind == OpKind::Release && op.token == token)
            .map(|op| since(op.start))
            .min()
            .unwrap_or(Duration::MAX)
    };
    let mut losses = Vec::new();
    let mut reported = std::collections::BTreeSet::new();
    for op in ops {
        let (
            OpKind::Acquire | OpKind::Extend,
            Outcome::Ok {
                valid_until: Some(v),
            },
        ) = (op.kind, &op.outcome)
        else {
            continue;
        };
        if !ours(op.client) || reported.contains(&op.token) {
            continue;
        }
        let Some(resource) = plan.resources.iter().position(|r| *r == op.resource) else {
            continue;
        };
        let lease = Lease {
            op,
            started: since(op.start),
            from: since(op.end) + SLACK,
            until: since(*v).min(released(&op.token)),
        };
        if let Some(loss) = first_loss(&lease, resource, quorum, plan.masters, log) {
            reported.insert(op.token.clone());
            losses.push(loss);
        }
    }
    losses
}

/// The first moment of `lease` when its value was on fewer than `quorum` masters.
fn first_loss(
    lease: &Lease<'_>,
    resource: usize,
    quorum: usize,
    masters: usize,
    log: &KeyLog,
) -> Option<QuorumLoss> {
    if lease.from >= lease.until {
        return None;
    }
    let moments = std::iter::once(lease.from).chain(
        log.changes
            .iter()
            .filter(|c| c.resource == resource && c.at > lease.from && c.at < lease.until)
            .map(|c| c.at),
    );
    for at in moments {
        let values: Vec<Option<&[u8]>> = (0..masters)
            .map(|m| log.value_at(m, resource, at))
            .collect();
        let held_on = (0..masters)
            .filter(|&m| {
                values[m].is_some_and(|v| belongs(v, &lease.op.token))
                    // A master may have granted from the start of the acquire or extend on: one
                    // that lost its data since, even before the client heard of the grant,
                    // counts as holding.
                    || log.lost_between(m, lease.started, at)
            })
            .count();
        if held_on < quorum {
            return Some(QuorumLoss {
                resource: lease.op.resource.clone(),
                client: lease.op.client,
                token: lease.op.token_fingerprint().to_string(),
                at,
                valid_until: lease.until,
                held_on,
                quorum,
                values: values
                    .iter()
                    .map(|v| match v {
                        Some(v) => shown(v),
                        None => "nothing".to_owned(),
                    })
                    .collect(),
                changes: log.changes_of(resource, lease.started, at + Duration::from_millis(50)),
            });
        }
    }
    None
}

/// Whether a key's `value` is the lock of `token`: the token itself, the token marked elected,
/// or under an owner id (`<nonce>@<owner>`) a token of the same owner that comes after it (an
/// attempt stamped later, which takes the lock over by design; see `lua/line.lua`, `later`). A
/// key holding an earlier attempt of the owner is not the lock's: the earlier one's release
/// frees it.
pub(super) fn belongs(value: &[u8], token: &str) -> bool {
    let token = token.as_bytes();
    if value == token || value.strip_prefix(b"~elected:") == Some(token) {
        return true;
    }
    match (owner_of(value), owner_of(token)) {
        (Some(a), Some(b)) => a == b && value.get(3..35) > token.get(3..35),
        _ => false,
    }
}

/// The owner id of an owner's token: what follows `@` after the 35 characters of its nonce.
pub(super) fn owner_of(value: &[u8]) -> Option<&[u8]> {
    match value.get(35) {
        Some(b'@') if value.starts_with(b"ql-") => value.get(36..),
        _ => None,
    }
}

/// A value as the report shows it: an owner's token by its owner, another by its fingerprint.
pub(super) fn shown(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    match owner_of(value) {
        Some(owner) => format!(
            "{} (owner {})",
            TokenFingerprint::of(&text),
            String::from_utf8_lossy(owner)
        ),
        None => TokenFingerprint::of(&text).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "ql-0123456789abcdef0123456789abcdef";

    #[test]
    fn a_value_belongs_to_its_token_its_mark_and_its_owners_later_attempts() {
        let mine = format!("{A}@worker-1");
        let sibling = "ql-ffffffffffffffffffffffffffffffff@worker-1";
        let earlier = "ql-0000000000000000000000000000000f@worker-1";
        assert!(belongs(A.as_bytes(), A));
        assert!(belongs(format!("~elected:{A}").as_bytes(), A));
        assert!(belongs(sibling.as_bytes(), &mine));
        assert!(!belongs(earlier.as_bytes(), &mine));
        assert!(!belongs(sibling.as_bytes(), A));
        assert!(!belongs(
            b"ql-ffffffffffffffffffffffffffffffff@worker-2",
            &mine
        ));
        assert!(!belongs(b"someone else", A));
    }
}

//! The fourth checker, on each master's key: a renewal of a lock under an owner id that reached
//! a master and found the lock's value there (its token, or a later attempt of the owner that
//! took the key over from it, which the renewal keeps alive: `keep_taken` in `lua/extend.lua`)
//! keeps that key the lock's until the validity the renewal reported ends, or the lock's
//! release starts. A master that lost its data since is excepted.
//!
//! The quorum checker counts masters, and a lock that keeps its quorum passes it. This one
//! holds every master a renewal reached: it is how a failed takeover that costs a live lock a
//! master shows (the key expiring under the failed attempt's value, which the lock's renewal
//! did not keep alive, while the lock still holds a quorum elsewhere). A failed or cancelled
//! attempt costs the lock it took a key from nothing (`lua/acquire_owned.lua`).

use std::fmt;
use std::time::{Duration, Instant};

use quorumlock_testkit::{Op, OpKind, Outcome, TokenFingerprint};

use super::plan::{Fault, Plan};
use super::quorum::{belongs, owner_of, shown, KeyLog};
use super::wire::{OwnerRequest, RequestKind};

/// How long after its delivery a renewal has surely run (turmoil's latency is below 3 ms), and
/// the key log's step.
const SLACK: Duration = Duration::from_millis(4);

/// A key a renewal reached that stopped being the lock's while the renewal's validity lasted.
#[derive(Debug, Clone)]
pub struct LostKey {
    /// The resource.
    pub resource: String,
    /// The lock's token, by its fingerprint.
    pub token: String,
    /// The master.
    pub master: usize,
    /// When the renewal reached the master, from the run's start.
    pub renewed: Duration,
    /// When the key stopped being the lock's.
    pub at: Duration,
    /// Until when the renewal said the lock was valid (or its release started).
    pub valid_until: Duration,
    /// What the key held then.
    pub value: String,
    /// How the key changed on the masters from the renewal on, one line each.
    pub changes: Vec<String>,
}

impl fmt::Display for LostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "lock {} on {:?}: its renewal reached m{} at {:.3} ms, valid until {:.3} ms, yet \
             the key there held {} at {:.3} ms",
            self.token,
            self.resource,
            self.master,
            ms(self.renewed),
            ms(self.valid_until),
            self.value,
            ms(self.at)
        )
    }
}

/// Every key of an owner's lock in `ops` (with the owner's releases, see
/// `run::with_owner_releases`) that one of its renewals reached, by `requests`, and that
/// stopped being the lock's, by `log`, while that renewal's validity lasted; `origin` is the
/// run's start. The first of each renewal.
pub fn lost_keys(
    plan: &Plan,
    ops: &[Op],
    requests: &[OwnerRequest],
    log: &KeyLog,
    origin: Instant,
) -> Vec<LostKey> {
    let since = |t: Instant| t.saturating_duration_since(origin);
    let released = |token: &str| {
        ops.iter()
            .filter(|op| op.kind == OpKind::Release && op.token == token)
            .map(|op| since(op.start))
            .min()
            .unwrap_or(Duration::MAX)
    };
    let mut lost = Vec::new();
    for op in ops {
        let (
            OpKind::Extend,
            Outcome::Ok {
                valid_until: Some(v),
            },
        ) = (op.kind, &op.outcome)
        else {
            continue;
        };
        if owner_of(op.token.as_bytes()).is_none() {
            continue;
        }
        let Some(resource) = plan.resources.iter().position(|r| *r == op.resource) else {
            continue;
        };
        let until = since(*v).min(released(&op.token));
        for master in 0..plan.masters {
            let reached = requests.iter().find_map(|r| {
                (r.token == op.token.as_bytes()
                    && r.kind == RequestKind::Other
                    && r.master == master
                    && r.sent >= op.start
                    && r.sent <= op.end)
                    .then_some(r.delivered.map(|d| (since(r.connected), since(d))))
                    .flatten()
            });
            let Some((connected, renewed)) = reached else {
                continue;
            };
            // A connection that lived through a partition or a crash of its master may have
            // lost its requests for good (turmoil's streams resend nothing).
            if renewed + SLACK >= until || !reachable(plan, master, connected, renewed) {
                continue;
            }
            let ours = |value: Option<&[u8]>| value.is_some_and(|v| belongs(v, &op.token));
            // The renewal ran on the lock's value: its token, or a chain of takeovers from it,
            // then and as it ran.
            let found = taken_from(log, master, resource, renewed, &op.token)
                && log
                    .changes_on(master, resource, renewed, renewed + SLACK)
                    .all(|(_, value)| ours(value));
            if !found {
                continue;
            }
            let gone = log
                .changes_on(master, resource, renewed + SLACK, until)
                .find(|&(at, value)| {
                    at < until && !ours(value) && !log.lost_between(master, renewed, at)
                });
            if let Some((at, value)) = gone {
                lost.push(LostKey {
                    resource: op.resource.clone(),
                    token: TokenFingerprint::of(&op.token).to_string(),
                    master,
                    renewed,
                    at,
                    valid_until: until,
                    value: value.map_or("nothing".to_owned(), shown),
                    changes: log.changes_of(
                        resource,
                        since(op.start),
                        at + Duration::from_millis(50),
                    ),
                });
            }
        }
    }
    lost
}

/// Whether `resource`'s key on `master` holds at `at` the lock `token`'s value or a takeover
/// of it: every value it took since it last held the token is an attempt of the owner stamped
/// after it (which takes over from the one before, see `lua/line.lua`), with no gap. A value
/// of the owner that took a free key, or took over another value, is not the lock's way back:
/// no renewal of the lock keeps it, and none needs to.
fn taken_from(log: &KeyLog, master: usize, resource: usize, at: Duration, token: &str) -> bool {
    let since: Vec<_> = log
        .changes_on(master, resource, Duration::ZERO, at)
        .collect();
    for (_, value) in since.iter().rev() {
        match value {
            Some(v)
                if *v == token.as_bytes()
                    || v.strip_prefix(b"~elected:") == Some(token.as_bytes()) =>
            {
                return true
            }
            Some(v) if belongs(v, token) => {}
            _ => return false,
        }
    }
    false
}

/// Whether `master` was neither partitioned from the clients nor down from `from` to `to`: a
/// request delivered on a connection opened at `from` ran there.
fn reachable(plan: &Plan, master: usize, from: Duration, to: Duration) -> bool {
    plan.faults.iter().all(|(start, fault)| {
        let (m, lasts) = match fault {
            Fault::Partition { master, heal_after } => (*master, *heal_after),
            Fault::Crash { master, down, .. } | Fault::LossyFailover { master, down, .. } => {
                (*master, *down)
            }
            _ => return true,
        };
        m != master || *start > to + SLACK || *start + lasts + SLACK < from
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: &str = "ql-00000000000020000000000000000000@o";
    const EARLIER: &str = "ql-00000000000010000000000000000000@o";
    const LATER: &str = "ql-00000000000030000000000000000000@o";

    #[test]
    fn a_key_is_the_locks_way_back_only_through_takeovers_from_its_token() {
        let at = Duration::from_millis(100);
        // Taken over from L by a later attempt: L's renewal keeps it.
        let log = KeyLog::of(&[(1, Some(L)), (5, Some(LATER))]);
        assert!(taken_from(&log, 0, 0, at, L));
        // A later attempt that took over an earlier value, or a free key: not L's.
        let log = KeyLog::of(&[(1, Some(EARLIER)), (5, Some(LATER))]);
        assert!(!taken_from(&log, 0, 0, at, L));
        let log = KeyLog::of(&[(1, Some(L)), (3, None), (5, Some(LATER))]);
        assert!(!taken_from(&log, 0, 0, at, L));
    }
}

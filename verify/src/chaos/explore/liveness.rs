//! The line's liveness in an exploration: quorumlock's mutex clients wait in line without
//! spinning, whatever the faults (the check of scenarios 15–17, client by client, since every
//! client of an exploration has a poll interval of its own).
//!
//! A waiter attempts at arrival, once more as it takes its place in line, then only when a
//! hand-off wakes it or its poll interval ends (its retry delay less jitter, at most a third of
//! its entry lease). So each client's attempts are at most 2 per acquire call, plus its
//! wake-ups, plus the polls its waits allow. Wake-ups come from releases (one head per
//! resource each), from waiters that gave up passing a key reserved for them on, and from the
//! rollback of a polled attempt that reached a key reserved for another waiter: at most the
//! releases, plus the calls that failed, plus the polls. Faults cannot raise either count: a
//! failed attempt is retried after the retry delay, which is a poll. A client whose retry delay
//! is within its jitter may retry at once, as configured: its attempts have no bound, and it is
//! left out of the per-client check (its polls still count towards the wake-ups' bound).

use std::collections::BTreeMap;
use std::time::Duration;

use super::super::locks::ClientCounts;
use super::super::setup::Tuning;
use quorumlock_testkit::{Op, OpKind};

/// The least entry lease, and how many node timeouts one is (the library's
/// `MIN_ENTRY_LEASE`, `ENTRY_LEASE_NODE_TIMEOUTS`).
const MIN_ENTRY_LEASE: Duration = Duration::from_millis(50);
const ENTRY_LEASE_NODE_TIMEOUTS: u32 = 10;

/// A poll interval shorter than this bounds nothing a run can see.
const MIN_POLL: Duration = Duration::from_millis(1);

/// How often a waiter with `tuning` attempts when nothing wakes it.
fn poll_interval(tuning: &Tuning) -> Duration {
    let entry_lease = (tuning.node_timeout * ENTRY_LEASE_NODE_TIMEOUTS).max(MIN_ENTRY_LEASE);
    (entry_lease / 3).min(tuning.retry_delay.saturating_sub(tuning.retry_jitter))
}

/// What the check found: one line for the report, and how many counts went past their bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Spinning {
    pub(super) summary: String,
    pub(super) violations: Vec<String>,
}

/// Checks quorumlock's mutex clients `clients` (their numbers in the history, and tunings)
/// against what their libraries `counted`, over `ops` on the resources `is_resource` names.
/// `others` wait in the same lines uncounted (reentrant clients): their polls and the calls
/// they gave up may wake a waiter too.
pub(super) fn waiters_do_not_spin(
    ops: &[Op],
    is_resource: impl Fn(&str) -> bool,
    clients: &[(usize, Tuning)],
    others: &[(usize, Tuning)],
    counted: &BTreeMap<usize, ClientCounts>,
) -> Spinning {
    let calls_of = |client: usize| -> Vec<&Op> {
        ops.iter()
            .filter(|op| {
                is_resource(&op.resource) && op.client == client && op.kind == OpKind::Acquire
            })
            .collect()
    };
    let polls_of = |calls: &[&Op], tuning: &Tuning| -> u64 {
        let poll = poll_interval(tuning).as_micros().max(1);
        calls
            .iter()
            .map(|op| ((op.end - op.start).as_micros() / poll) as u64)
            .sum()
    };
    let failed_of = |calls: &[&Op]| calls.iter().filter(|op| !op.succeeded()).count() as u64;
    // Every release of these names may hand a key to one of the waiters (a reentrant client's
    // too; an rslock release hands nothing, and only loosens the bound).
    let releases = ops
        .iter()
        .filter(|op| is_resource(&op.resource) && op.kind == OpKind::Release && op.succeeded())
        .count() as u64;
    let mut violations = Vec::new();
    let (mut all_polls, mut all_failed, mut all_attempts, mut all_wakeups) = (0, 0, 0, 0);
    let (mut all_bounds, mut checked) = (0, 0);
    for (client, tuning) in others {
        let calls = calls_of(*client);
        all_polls += polls_of(&calls, tuning);
        all_failed += failed_of(&calls);
    }
    for (client, tuning) in clients {
        let poll = poll_interval(tuning);
        let calls = calls_of(*client);
        let polls = polls_of(&calls, tuning);
        let failed = failed_of(&calls);
        let ClientCounts { attempts, wakeups } = counted.get(client).copied().unwrap_or_default();
        all_polls += polls;
        all_failed += failed;
        all_wakeups += wakeups;
        if poll < MIN_POLL {
            // A retry delay within its jitter lets the library retry at once, as configured:
            // nothing bounds this client's attempts (its polls still bound others' wake-ups).
            continue;
        }
        checked += 1;
        let bound = 2 * calls.len() as u64 + wakeups + polls;
        if attempts > bound {
            violations.push(format!(
                "client {client} spun: {attempts} attempts, bound {bound} = 2 × {} calls + {wakeups} wake-ups + {polls} polls of {:.1}ms",
                calls.len(),
                poll.as_secs_f64() * 1e3
            ));
        }
        all_bounds += bound;
        all_attempts += attempts;
    }
    let woken_bound = releases + all_failed + all_polls;
    if all_wakeups > woken_bound {
        violations.push(format!(
            "{all_wakeups} wake-ups, bound {woken_bound} = {releases} releases + {all_failed} calls given up + {all_polls} polls"
        ));
    }
    Spinning {
        summary: format!(
            "the line: {all_attempts} attempts (bound {all_bounds}) of the {checked} of {} waiting \
             clients whose retry delay exceeds its jitter, and {all_wakeups} wake-ups (bound \
             {woken_bound}) for {releases} releases; {} over their bound",
            clients.len(),
            violations.len()
        ),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock_testkit::Outcome;
    use std::time::Instant;

    fn tuning() -> Tuning {
        let mut t = super::super::super::setup::Setup::default().tuning(0);
        t.node_timeout = Duration::from_millis(30); // entry lease 300 ms: polls every 100 ms
        t.retry_delay = Duration::from_millis(200);
        t.retry_jitter = Duration::ZERO;
        t
    }

    fn op(client: usize, kind: OpKind, start: Instant, ms: u64) -> Op {
        Op {
            client,
            resource: "r0".into(),
            token: String::new(),
            kind,
            start,
            end: start + Duration::from_millis(ms),
            outcome: Outcome::Ok {
                valid_until: Some(start + Duration::from_secs(10)),
            },
            fence: None,
        }
    }

    #[test]
    fn attempts_beyond_calls_wakeups_and_polls_are_spinning() {
        let t0 = Instant::now();
        // One call that waited 1 s: 10 polls of 100 ms, 2 for the call, 1 wake-up.
        let ops = vec![
            op(0, OpKind::Acquire, t0, 1000),
            op(0, OpKind::Release, t0, 1),
        ];
        let clients = vec![(0, tuning())];
        let within = BTreeMap::from([(
            0,
            ClientCounts {
                attempts: 13,
                wakeups: 1,
            },
        )]);
        let spun = BTreeMap::from([(
            0,
            ClientCounts {
                attempts: 14,
                wakeups: 1,
            },
        )]);
        let names = |r: &str| r == "r0";
        assert!(waiters_do_not_spin(&ops, names, &clients, &[], &within)
            .violations
            .is_empty());
        let found = waiters_do_not_spin(&ops, names, &clients, &[], &spun);
        assert_eq!(found.violations.len(), 1, "{found:?}");
        assert!(found.violations[0].contains("client 0 spun"), "{found:?}");
    }
}

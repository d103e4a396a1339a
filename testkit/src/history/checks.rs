//! Protocol-level checkers: what the clients' own timestamps and reported validities say.

use super::{Op, OpKind, TokenFingerprint, Violation};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// One stretch of time during which a holder believed it held a resource, as reported in a
/// [`Violation::Overlap`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The holder.
    pub client: usize,
    /// The lock's token fingerprint.
    pub token: TokenFingerprint,
    /// The fence its acquire returned, if any.
    pub fence: Option<u64>,
    /// When the lease began (the end of the successful acquire, or of an extend that started after
    /// the previous stretch had already expired).
    pub start: Instant,
    /// When it ended; `None` if it never did (no validity reported and never released).
    pub end: Option<Instant>,
}

impl Lease {
    pub(super) fn covers(&self, at: Instant) -> bool {
        self.end.is_none_or(|end| at < end)
    }
}

/// The later of two lease ends, where `None` means "never".
fn later_end(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    Some(a?.max(b?))
}

/// The earlier of two lease ends, where `None` means "never".
pub(super) fn earlier_end(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The leases of one token on one resource, from its ops sorted by start, by the rules described
/// on [`check_overlaps`]:
///
/// * A successful acquire or extend grants `[op.end, valid_until)`. If the token's current stretch
///   still covered the op's start, the grant extends that stretch to the later of the two ends;
///   otherwise it starts a new stretch, so the gap in between is not counted as held.
/// * A release, successful or failed, ends the current stretch at the release's start (and drops
///   it if it only began at or after that start).
fn token_leases(ops: &[&Op]) -> Vec<Lease> {
    let mut leases: Vec<Lease> = Vec::new();
    let mut holder: Option<(usize, Option<u64>)> = None;
    for op in ops {
        match op.kind {
            OpKind::Acquire | OpKind::Extend if op.succeeded() => {
                if op.kind == OpKind::Acquire {
                    holder = Some((op.client, op.fence));
                }
                let until = op.valid_until();
                match leases.last_mut() {
                    Some(current) if current.covers(op.start) => {
                        current.end = later_end(current.end, until);
                    }
                    _ => {
                        if until.is_none_or(|until| until > op.end) {
                            let (client, fence) = holder.unwrap_or((op.client, None));
                            leases.push(Lease {
                                client,
                                token: op.token_fingerprint(),
                                fence,
                                start: op.end,
                                end: until,
                            });
                        }
                    }
                }
            }
            OpKind::Release => {
                if let Some(current) = leases.last_mut() {
                    if current.start >= op.start {
                        leases.pop();
                    } else if current.covers(op.start) {
                        current.end = Some(op.start);
                    }
                }
            }
            _ => {}
        }
    }
    leases
}

/// Every lease of `ops`, by the rules of [`check_overlaps`], with its resource and token, ordered
/// by resource, then token, then start.
pub(super) fn leases<'a>(ops: impl Iterator<Item = &'a Op>) -> Vec<(&'a str, &'a str, Lease)> {
    let mut by_token: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_token
            .entry((op.resource.as_str(), op.token.as_str()))
            .or_default()
            .push(op);
    }
    let mut leases = Vec::new();
    for ((resource, token), mut token_ops) in by_token {
        // At equal starts an acquire comes before an extend before a release.
        token_ops.sort_by_key(|op| (op.start, op.kind));
        leases.extend(
            token_leases(&token_ops)
                .into_iter()
                .map(|lease| (resource, token, lease)),
        );
    }
    leases
}

/// Checks that, per resource, the leases of different tokens never overlap.
///
/// A lease is the protocol-level holding period of a successful acquire: from the acquire's end to
/// the latest `valid_until` reached by it and its successful extends (same resource and token),
/// cut short at the **start** of the first release of that token (see below). An extend that
/// starts after the lease had already expired begins a new stretch rather than covering the gap. A
/// successful acquire or extend that reported no `valid_until` is taken to hold until released.
///
/// The release cut uses the release's start, and applies to failed releases too: the holder stops
/// using the lock when it calls release, and a release reported as failed (its replies held back
/// or lost) may nevertheless have deleted the keys, after which another client may acquire.
/// Cutting at the release's end would report a false overlap whenever the next holder's acquire
/// completes while the release's replies are still in flight.
///
/// Returns one [`Violation::Overlap`] per overlapping pair of tokens, the earlier lease first.
pub fn check_overlaps(ops: &[Op]) -> Vec<Violation> {
    let mut by_resource: BTreeMap<&str, Vec<(&str, Lease)>> = BTreeMap::new();
    for (resource, token, lease) in leases(ops.iter()) {
        by_resource
            .entry(resource)
            .or_default()
            .push((token, lease));
    }

    let mut violations = Vec::new();
    for (resource, mut leases) in by_resource {
        leases.sort_by_key(|(_, lease)| lease.start);
        let mut reported: BTreeSet<(&str, &str)> = BTreeSet::new();
        for (i, (token_a, a)) in leases.iter().enumerate() {
            for (token_b, b) in &leases[i + 1..] {
                if !a.covers(b.start) {
                    break; // sorted by start: every later lease starts after `a` ended
                }
                let pair = ((*token_a).min(*token_b), (*token_a).max(*token_b));
                if token_a == token_b || !reported.insert(pair) {
                    continue;
                }
                violations.push(Violation::Overlap {
                    resource: resource.to_owned(),
                    first: a.clone(),
                    second: b.clone(),
                    from: b.start,
                    until: earlier_end(a.end, b.end),
                });
            }
        }
    }
    violations
}

/// A successful acquire as reported in a [`Violation::FenceOrder`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acquisition {
    /// The client that acquired.
    pub client: usize,
    /// The lock's token fingerprint.
    pub token: TokenFingerprint,
    /// The fencing token it was given.
    pub fence: u64,
    /// When the acquire started.
    pub start: Instant,
    /// When it returned (the lease's start).
    pub end: Instant,
}

impl Acquisition {
    pub(super) fn of(op: &Op, fence: u64) -> Self {
        Self {
            client: op.client,
            token: op.token_fingerprint(),
            fence,
            start: op.start,
            end: op.end,
        }
    }
}

/// Checks that, per resource, fencing tokens of successful acquires strictly increase in real-time
/// order: whenever acquire A returned (`A.end`) before acquire B started (`B.start`),
/// `fence(A) < fence(B)`. Acquires that overlap in time are not ordered; ops without a fence are
/// ignored.
///
/// Returns at most one [`Violation::FenceOrder`] per later acquire B, naming the earlier acquire
/// with the highest fence among those that precede B.
pub fn check_fence_order(ops: &[Op]) -> Vec<Violation> {
    let mut by_resource: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for op in ops {
        if let (OpKind::Acquire, true, Some(fence)) = (op.kind, op.succeeded(), op.fence) {
            by_resource
                .entry(op.resource.as_str())
                .or_default()
                .push((op, fence));
        }
    }

    let mut violations = Vec::new();
    for (resource, mut acquires) in by_resource {
        // `by_end[..k]` are the acquires that returned before some instant; `best[k - 1]` is the
        // one with the highest fence among them (the earliest such on ties).
        let mut by_end = acquires.clone();
        by_end.sort_by_key(|(op, _)| (op.end, op.start));
        let mut best: Vec<usize> = Vec::with_capacity(by_end.len());
        for (i, (_, fence)) in by_end.iter().enumerate() {
            let keep = match best.last() {
                Some(&b) if by_end[b].1 >= *fence => b,
                _ => i,
            };
            best.push(keep);
        }

        acquires.sort_by_key(|(op, _)| (op.start, op.end));
        for (later, later_fence) in acquires {
            let preceding = by_end.partition_point(|(op, _)| op.end < later.start);
            let Some(&b) = preceding.checked_sub(1).and_then(|k| best.get(k)) else {
                continue;
            };
            let (earlier, earlier_fence) = by_end[b];
            if earlier_fence >= later_fence {
                violations.push(Violation::FenceOrder {
                    resource: resource.to_owned(),
                    earlier: Acquisition::of(earlier, earlier_fence),
                    later: Acquisition::of(later, later_fence),
                });
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testing::{failed, Clock};
    use crate::history::Outcome;

    #[test]
    fn non_overlapping_leases_pass() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(2)),
            c.acquire(2, "tok-c", (200, 203), 300, Some(3)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn overlapping_leases_of_two_tokens_are_reported_with_both() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (50, 60), 150, Some(2)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::Overlap {
            first,
            second,
            from,
            until,
            ..
        } = &violations[0]
        else {
            panic!("not an overlap: {violations:?}");
        };
        assert_eq!((first.client, first.fence), (0, Some(1)));
        assert_eq!(first.token, TokenFingerprint::of("tok-a"));
        assert_eq!((second.client, second.fence), (1, Some(2)));
        assert_eq!(second.token, TokenFingerprint::of("tok-b"));
        assert_eq!((*from, *until), (c.at(60), Some(c.at(100))));
    }

    #[test]
    fn leases_of_one_token_never_overlap_themselves() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.extend(0, "tok-a", (30, 35), 130),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn an_extend_that_pushes_a_lease_into_a_later_holders_lease_is_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.extend(0, "tok-a", (90, 95), 190),
            // B acquires after A's original deadline but inside the extended one.
            c.acquire(1, "tok-b", (120, 125), 220, Some(2)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::Overlap {
            first,
            second,
            until,
            ..
        } = &violations[0]
        else {
            panic!("not an overlap: {violations:?}");
        };
        assert_eq!((first.client, first.end), (0, Some(c.at(190))));
        assert_eq!(second.client, 1);
        assert_eq!(*until, Some(c.at(190)));
    }

    #[test]
    fn an_extend_after_expiry_does_not_cover_the_gap() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            // B holds [105, 140) while A's lease has lapsed ...
            c.acquire(1, "tok-b", (100, 105), 200, Some(2)),
            c.release(1, "tok-b", (140, 145)),
            // ... then A's (buggy) extend succeeds after B released.
            c.extend(0, "tok-a", (150, 155), 250),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_failed_extend_does_not_lengthen_the_lease() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            failed(c.extend(0, "tok-a", (90, 95), 190)),
            c.acquire(1, "tok-b", (120, 125), 220, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_release_ends_the_lease() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.release(0, "tok-a", (40, 45)),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_lease_ends_when_release_is_called_even_if_the_release_reports_failure() {
        let c = Clock::new();
        // The release's replies were held back: it failed at 80, but B got in at 50.
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            failed(c.release(0, "tok-a", (40, 80))),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn a_lease_still_held_when_the_next_release_starts_is_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b", (45, 50), 150, Some(2)),
            c.release(0, "tok-a", (60, 65)),
        ];
        let violations = check_overlaps(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            matches!(&violations[0], Violation::Overlap { until, .. } if *until == Some(c.at(60)))
        );
    }

    #[test]
    fn a_successful_acquire_without_validity_is_held_until_released() {
        let c = Clock::new();
        let mut a = c.acquire(0, "tok-a", (0, 5), 0, Some(1));
        a.outcome = Outcome::Ok { valid_until: None };
        let ops = vec![a, c.acquire(1, "tok-b", (500, 505), 600, Some(2))];
        assert_eq!(check_overlaps(&ops).len(), 1);
    }

    #[test]
    fn failed_acquires_and_other_resources_hold_no_lease() {
        let c = Clock::new();
        let mut other = c.acquire(1, "tok-b", (10, 15), 100, Some(1));
        other.resource = "other".into();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(1)),
            other,
            failed(c.acquire(2, "tok-c", (20, 25), 120, None)),
        ];
        assert_eq!(check_overlaps(&ops), vec![]);
    }

    #[test]
    fn fences_that_go_backwards_in_real_time_order_are_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(7)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(5)),
        ];
        let violations = check_fence_order(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::FenceOrder { earlier, later, .. } = &violations[0] else {
            panic!("not a fence violation: {violations:?}");
        };
        assert_eq!((earlier.client, earlier.fence), (0, 7));
        assert_eq!((later.client, later.fence), (1, 5));
        assert!(violations[0].to_string().contains("went backwards"));
    }

    #[test]
    fn fences_that_repeat_in_real_time_order_are_reported() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(3)),
            c.acquire(1, "tok-b", (100, 105), 200, Some(4)),
            c.acquire(2, "tok-c", (200, 205), 300, Some(4)),
        ];
        let violations = check_fence_order(&ops);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::FenceOrder { earlier, later, .. } = &violations[0] else {
            panic!("not a fence violation: {violations:?}");
        };
        assert_eq!((earlier.client, later.client), (1, 2));
        assert!(violations[0].to_string().contains("repeated"));
    }

    #[test]
    fn increasing_fences_pass_and_unfenced_or_failed_acquires_are_ignored() {
        let c = Clock::new();
        let ops = vec![
            c.acquire(0, "tok-a", (0, 5), 100, Some(3)),
            c.acquire(1, "tok-b", (100, 105), 200, None),
            failed(c.acquire(2, "tok-c", (150, 155), 250, Some(1))),
            c.acquire(3, "tok-d", (200, 205), 300, Some(9)),
        ];
        assert_eq!(check_fence_order(&ops), vec![]);
    }

    #[test]
    fn concurrent_acquires_are_not_ordered_by_fence() {
        let c = Clock::new();
        // B started before A returned: either order of fences is acceptable.
        let ops = vec![
            c.acquire(0, "tok-a", (0, 10), 100, Some(2)),
            c.acquire(1, "tok-b", (5, 15), 100, Some(1)),
        ];
        assert_eq!(check_fence_order(&ops), vec![]);
    }
}

//! The semaphore checker: never more holders of a semaphore's permits at once than it has
//! permits.
//!
//! A semaphore's holders lock either one of its slots, `<semaphore>:permit:<i>` (the library's
//! [`Semaphore`](quorumlock::Semaphore)), or the semaphore's own name (a design without slots,
//! such as the naive one of the testkit). Each holder's lease is computed by the rules of
//! [`check_overlaps`](super::check_overlaps); the checker then sweeps the starts and ends of all
//! of them in time order and counts how many are open.

use std::collections::BTreeSet;
use std::time::Instant;

use super::checks::leases;
use super::{Lease, Op, Violation};

/// One holder's lease on a semaphore, as reported in a [`Violation::TooManyHolders`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitLease {
    /// What the holder locked: one of the semaphore's slots, or the semaphore itself.
    pub resource: String,
    /// The lease.
    pub lease: Lease,
}

/// Whether `resource` counts towards the semaphore `semaphore`: the semaphore's own name, or one
/// of its slots, `<semaphore>:permit:<i>`.
///
/// ```
/// use quorumlock_testkit::history::is_permit_of;
///
/// assert!(is_permit_of("exports:permit:2", "exports"));
/// assert!(is_permit_of("exports", "exports"));
/// assert!(!is_permit_of("exports:permit:2", "export"));
/// assert!(!is_permit_of("exports-old", "exports"));
/// ```
pub fn is_permit_of(resource: &str, semaphore: &str) -> bool {
    match resource.strip_prefix(semaphore) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix(":permit:")
            .is_some_and(|slot| !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Checks that at no instant more than `permits` holders of the semaphore `semaphore` held a
/// lease: over the ops on the semaphore's slots and on its own name (see [`is_permit_of`]),
/// other resources ignored.
///
/// Leases are those of [`check_overlaps`](super::check_overlaps): from the end of a successful
/// acquire to the reported validity (extends included), cut at the start of a release. A lease
/// that ends at the instant another starts does not overlap it.
///
/// Returns one [`Violation::TooManyHolders`] per stretch of time with more than `permits` leases
/// open, naming every lease open when the stretch was most crowded, in the order they started.
///
/// ```
/// use std::time::{Duration, Instant};
/// use quorumlock_testkit::history::check_max_holders;
/// use quorumlock_testkit::{Op, OpKind, Outcome};
///
/// let t0 = Instant::now();
/// let ms = |n| t0 + Duration::from_millis(n);
/// // Three holders of one permit each on a semaphore of 2: the third overlaps the other two.
/// let ops: Vec<Op> = (0..3)
///     .map(|i| Op {
///         client: i,
///         resource: format!("jobs:permit:{i}"),
///         token: format!("token-{i}"),
///         kind: OpKind::Acquire,
///         start: ms(10 * i as u64),
///         end: ms(10 * i as u64 + 1),
///         outcome: Outcome::Ok { valid_until: Some(ms(100)) },
///         fence: None,
///     })
///     .collect();
/// assert_eq!(check_max_holders("jobs", &ops, 3), vec![]);
/// let violations = check_max_holders("jobs", &ops, 2);
/// assert_eq!(violations.len(), 1);
/// assert!(violations[0].to_string().contains("3 holders of \"jobs\""));
/// ```
pub fn check_max_holders(semaphore: &str, ops: &[Op], permits: usize) -> Vec<Violation> {
    let leases = semaphore_leases(semaphore, ops);
    sweep(&leases, permits)
        .crowds
        .into_iter()
        .map(|mut crowd| {
            crowd.holders.sort_by_key(|&i| (leases[i].1.start, i));
            Violation::TooManyHolders {
                resource: semaphore.to_owned(),
                permits,
                holders: crowd
                    .holders
                    .iter()
                    .map(|&i| PermitLease {
                        resource: leases[i].0.to_owned(),
                        lease: leases[i].1.clone(),
                    })
                    .collect(),
                from: crowd.from,
                until: crowd.until,
            }
        })
        .collect()
}

/// The most holders of the semaphore `semaphore` that held a lease at one instant (0 when none
/// did), counted as [`check_max_holders`] counts them.
pub fn peak_holders(semaphore: &str, ops: &[Op]) -> usize {
    peak_open(&semaphore_leases(semaphore, ops))
}

/// The most of `leases` open at one instant (0 when there are none), a lease that ends at the
/// instant another starts not overlapping it.
pub(super) fn peak_open(leases: &[(&str, Lease)]) -> usize {
    sweep(leases, usize::MAX).peak
}

/// The leases on `semaphore`'s slots and name, with the resource each is on.
fn semaphore_leases<'a>(semaphore: &str, ops: &'a [Op]) -> Vec<(&'a str, Lease)> {
    leases(
        ops.iter()
            .filter(|op| is_permit_of(&op.resource, semaphore)),
    )
    .into_iter()
    .map(|(resource, _, lease)| (resource, lease))
    .collect()
}

/// A stretch of time with more leases open than there are permits.
struct Crowd {
    from: Instant,
    until: Option<Instant>,
    /// The leases open when it was most crowded (indices into the swept leases).
    holders: Vec<usize>,
}

/// What a sweep found.
struct Sweep {
    peak: usize,
    crowds: Vec<Crowd>,
}

/// Walks the starts and ends of `leases` in time order (at one instant, ends first) and notes
/// the most open at once and every stretch with more than `permits` open.
fn sweep(leases: &[(&str, Lease)], permits: usize) -> Sweep {
    // (instant, 0 for an end or 1 for a start, lease): sorting puts ends first at one instant.
    let mut events: Vec<(Instant, u8, usize)> = Vec::with_capacity(leases.len() * 2);
    for (i, (_, lease)) in leases.iter().enumerate() {
        events.push((lease.start, 1, i));
        if let Some(end) = lease.end {
            events.push((end, 0, i));
        }
    }
    events.sort_unstable();

    let mut open: BTreeSet<usize> = BTreeSet::new();
    let mut peak = 0;
    let mut crowds = Vec::new();
    let mut crowd: Option<Crowd> = None;
    for (at, starts, i) in events {
        if starts == 1 {
            open.insert(i);
            peak = peak.max(open.len());
            if open.len() > permits {
                match &mut crowd {
                    Some(c) if open.len() > c.holders.len() => {
                        c.holders = open.iter().copied().collect();
                    }
                    Some(_) => {}
                    None => {
                        crowd = Some(Crowd {
                            from: at,
                            until: None,
                            holders: open.iter().copied().collect(),
                        });
                    }
                }
            }
        } else {
            open.remove(&i);
            if open.len() <= permits {
                if let Some(mut c) = crowd.take() {
                    c.until = Some(at);
                    crowds.push(c);
                }
            }
        }
    }
    // A lease that never ended keeps the last crowd open to the end of the run.
    crowds.extend(crowd);
    Sweep { peak, crowds }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testing::{failed, Clock};
    use crate::history::{Outcome, TokenFingerprint};

    /// A successful acquire of `resource` by `client` (token `t<client>`), returned at `from` ms
    /// and valid until `until` ms.
    fn on(c: &Clock, resource: &str, client: usize, (from, until): (u64, u64)) -> Op {
        let mut op = c.acquire(client, &format!("t{client}"), (from, from), until, None);
        op.resource = resource.to_owned();
        op
    }

    fn slot(i: usize) -> String {
        format!("jobs:permit:{i}")
    }

    #[test]
    fn names_count_as_the_semaphore_itself_or_its_numbered_slots() {
        assert!(is_permit_of("jobs", "jobs"));
        assert!(is_permit_of("jobs:permit:0", "jobs"));
        assert!(is_permit_of("jobs:permit:1023", "jobs"));
        assert!(!is_permit_of("jobs:permit:", "jobs"));
        assert!(!is_permit_of("jobs:permit:x", "jobs"));
        assert!(!is_permit_of("jobs:other", "jobs"));
        assert!(!is_permit_of("jobs2:permit:0", "jobs"));
        assert!(!is_permit_of("job", "jobs"));
    }

    #[test]
    fn as_many_holders_as_permits_pass() {
        let c = Clock::new();
        let ops: Vec<Op> = (0..3).map(|i| on(&c, &slot(i), i, (0, 100))).collect();
        assert_eq!(check_max_holders("jobs", &ops, 3), vec![]);
        assert_eq!(peak_holders("jobs", &ops), 3);
    }

    #[test]
    fn one_holder_too_many_is_reported_with_every_holder_and_the_window() {
        let c = Clock::new();
        let ops = vec![
            on(&c, &slot(0), 0, (0, 100)),
            on(&c, &slot(1), 1, (10, 80)),
            on(&c, &slot(0), 2, (20, 150)),
        ];
        let violations = check_max_holders("jobs", &ops, 2);
        assert_eq!(violations.len(), 1, "{violations:?}");
        let Violation::TooManyHolders {
            resource,
            permits,
            holders,
            from,
            until,
        } = &violations[0]
        else {
            panic!("not too many holders: {violations:?}");
        };
        assert_eq!((resource.as_str(), *permits), ("jobs", 2));
        assert_eq!((*from, *until), (c.at(20), Some(c.at(80))));
        // In the order they started.
        let seen: Vec<(usize, &str)> = holders
            .iter()
            .map(|h| (h.lease.client, h.resource.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (0, "jobs:permit:0"),
                (1, "jobs:permit:1"),
                (2, "jobs:permit:0")
            ]
        );
        assert_eq!(holders[0].lease.token, TokenFingerprint::of("t0"));
        let text = violations[0].to_string();
        assert!(text.contains("3 holders of \"jobs\" at once, more than its 2 permits"));
        assert!(text.contains("\"jobs:permit:1\""), "{text}");
        assert!(!text.contains("t0"), "a token was printed: {text}");
    }

    #[test]
    fn the_naive_counterexample_on_the_semaphores_own_name_is_reported() {
        // Three holders of a 2-permit semaphore without slots, each granted on a different
        // quorum of three masters: all on the name "jobs".
        let c = Clock::new();
        let ops: Vec<Op> = (0..3)
            .map(|i| on(&c, "jobs", i, (i as u64, 1000)))
            .collect();
        let violations = check_max_holders("jobs", &ops, 2);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(matches!(
            &violations[0],
            Violation::TooManyHolders { holders, until: Some(_), .. } if holders.len() == 3
        ));
    }

    #[test]
    fn a_lease_ending_when_another_starts_does_not_count_twice() {
        let c = Clock::new();
        let ops = vec![
            on(&c, &slot(0), 0, (0, 50)),
            on(&c, &slot(1), 1, (0, 100)),
            on(&c, &slot(0), 2, (50, 150)),
        ];
        assert_eq!(check_max_holders("jobs", &ops, 2), vec![]);
        assert_eq!(peak_holders("jobs", &ops), 2);
    }

    #[test]
    fn a_release_ends_the_holders_lease() {
        let c = Clock::new();
        let mut release = c.release(0, "t0", (40, 45));
        release.resource = slot(0);
        let ops = vec![
            on(&c, &slot(0), 0, (0, 100)),
            release,
            on(&c, &slot(1), 1, (0, 100)),
            on(&c, &slot(0), 2, (45, 150)),
        ];
        assert_eq!(check_max_holders("jobs", &ops, 2), vec![]);
        assert_eq!(peak_holders("jobs", &ops), 2);
    }

    #[test]
    fn an_extend_that_pushes_a_lease_into_a_full_semaphore_is_reported() {
        let c = Clock::new();
        let mut extend = c.extend(0, "t0", (90, 95), 190);
        extend.resource = slot(0);
        let ops = vec![
            on(&c, &slot(0), 0, (0, 100)),
            extend,
            on(&c, &slot(1), 1, (0, 300)),
            on(&c, &slot(2), 2, (120, 300)),
        ];
        let violations = check_max_holders("jobs", &ops, 2);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(matches!(
            &violations[0],
            Violation::TooManyHolders { from, until, .. }
                if *from == c.at(120) && *until == Some(c.at(190))
        ));
    }

    #[test]
    fn each_crowded_stretch_is_one_violation_naming_its_peak() {
        let c = Clock::new();
        let ops = vec![
            // First stretch: 2, then 3 holders on a 1-permit semaphore.
            on(&c, &slot(0), 0, (0, 100)),
            on(&c, &slot(0), 1, (10, 100)),
            on(&c, &slot(0), 2, (20, 30)),
            // Second stretch, after everybody left.
            on(&c, &slot(0), 3, (200, 300)),
            on(&c, &slot(0), 4, (250, 260)),
        ];
        let violations = check_max_holders("jobs", &ops, 1);
        assert_eq!(violations.len(), 2, "{violations:?}");
        let sizes: Vec<(usize, Instant, Option<Instant>)> = violations
            .iter()
            .map(|v| match v {
                Violation::TooManyHolders {
                    holders,
                    from,
                    until,
                    ..
                } => (holders.len(), *from, *until),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            sizes,
            [
                (3, c.at(10), Some(c.at(100))),
                (2, c.at(250), Some(c.at(260)))
            ]
        );
    }

    #[test]
    fn a_lease_without_validity_is_held_to_the_end_of_the_run() {
        let c = Clock::new();
        let forever = |client| {
            let mut op = on(&c, &slot(client), client, (client as u64, 0));
            op.outcome = Outcome::Ok { valid_until: None };
            op
        };
        let ops = vec![forever(0), on(&c, &slot(1), 1, (500, 600))];
        let violations = check_max_holders("jobs", &ops, 1);
        assert!(
            matches!(
                violations.as_slice(),
                [Violation::TooManyHolders { from, until, .. }]
                    if *from == c.at(500) && *until == Some(c.at(600))
            ),
            "{violations:?}"
        );
        let ops = vec![forever(0), forever(1)];
        let violations = check_max_holders("jobs", &ops, 1);
        assert!(
            matches!(
                violations.as_slice(),
                [Violation::TooManyHolders { from, until: None, .. }] if *from == c.at(1)
            ),
            "{violations:?}"
        );
        assert!(violations[0].to_string().contains("end of run"));
    }

    #[test]
    fn other_resources_and_failed_acquires_hold_no_permit() {
        let c = Clock::new();
        let ops = vec![
            on(&c, &slot(0), 0, (0, 100)),
            on(&c, "jobs2:permit:0", 1, (0, 100)),
            on(&c, "other", 2, (0, 100)),
            failed(on(&c, &slot(1), 3, (0, 100))),
        ];
        assert_eq!(check_max_holders("jobs", &ops, 1), vec![]);
        assert_eq!(peak_holders("jobs", &ops), 1);
        assert_eq!(peak_holders("none", &ops), 0);
    }
}

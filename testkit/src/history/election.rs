//! The election checkers: terms that only grow in the order leaders were elected, and quorum
//! reads of who leads that never name a leader outside its time.
//!
//! Each leadership is recorded as one successful acquire on the election's name: from the start
//! of the campaign to the election, its validity running to the moment the leader stepped down
//! (resigned, or saw the loss signal), its fence the term. [`check_overlaps`](super::check_overlaps)
//! then keeps two leaders' validity windows apart, [`check_term_order`] keeps the terms growing,
//! and [`check_leader_reads`] holds every quorum read of the leader ([`LeaderRead`]) to the
//! leaderships recorded.

use std::collections::HashMap;
use std::time::Instant;

use quorumlock::{Leader, LockToken};

use super::{Acquisition, Op, OpKind, Violation};

/// One quorum read of who leads an election ([`Redlock::leader`](quorumlock::Redlock::leader)),
/// by an observer: when it started, when it returned and whom it named.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderRead {
    /// The observer.
    pub client: usize,
    /// The election read.
    pub election: String,
    /// When the read started.
    pub start: Instant,
    /// When it returned.
    pub end: Instant,
    /// The value the leader announced, `None` when no leader was on a quorum.
    pub value: Option<String>,
    /// The fingerprint of the named leader's token, as the library computes it
    /// ([`Leader::fingerprint`], [`LockToken::fingerprint_of`]).
    pub fingerprint: Option<String>,
}

impl LeaderRead {
    /// A read of `election` by `client` from `start` to `end` that returned `leader`.
    pub fn new(
        client: usize,
        election: &str,
        start: Instant,
        end: Instant,
        leader: Option<&Leader>,
    ) -> Self {
        let named = leader.map(|l| (l.value.as_str(), l.fingerprint.as_str()));
        Self::naming(client, election, start, end, named)
    }

    /// A read of `election` by `client` from `start` to `end` that named `named`: the announced
    /// value and the fingerprint of the token stored with it
    /// ([`LockToken::fingerprint_of`]), or nobody.
    pub fn naming(
        client: usize,
        election: &str,
        start: Instant,
        end: Instant,
        named: Option<(&str, &str)>,
    ) -> Self {
        LeaderRead {
            client,
            election: election.to_owned(),
            start,
            end,
            value: named.map(|(value, _)| value.to_owned()),
            fingerprint: named.map(|(_, fingerprint)| fingerprint.to_owned()),
        }
    }
}

/// The successful acquires on `election`, each a leadership, in the order they were elected
/// (their ends).
fn leaderships<'a>(election: &str, ops: &'a [Op]) -> Vec<&'a Op> {
    let mut terms: Vec<&Op> = ops
        .iter()
        .filter(|op| op.resource == election && op.kind == OpKind::Acquire && op.succeeded())
        .collect();
    terms.sort_by_key(|op| (op.end, op.start));
    terms
}

/// Checks that the terms (fences) of the election `election` strictly increase in the order its
/// leaders were elected: each successful acquire on `election`, ordered by the instant it
/// returned, carries a fence above every one elected before it. Acquires without a fence are
/// ignored.
///
/// [`check_fence_order`](super::check_fence_order) orders only acquires that did not overlap in
/// time, and candidates campaign side by side; an election orders them all, because two
/// leaderships never overlap.
///
/// Returns one [`Violation::TermOrder`] per leader whose term is not above the highest term of
/// the leaders elected before it, naming the one that held that term.
///
/// ```
/// use std::time::{Duration, Instant};
/// use quorumlock_testkit::history::check_term_order;
/// use quorumlock_testkit::{Op, OpKind, Outcome};
///
/// let t0 = Instant::now();
/// let ms = |n| t0 + Duration::from_millis(n);
/// let elected = |client: usize, at: u64, term: u64| Op {
///     client,
///     resource: "scheduler".into(),
///     token: format!("token-{client}:host-{client}"),
///     kind: OpKind::Acquire,
///     start: ms(0), // every candidate campaigned from the start
///     end: ms(at),
///     outcome: Outcome::Ok { valid_until: Some(ms(at + 10)) },
///     fence: Some(term),
/// };
/// let ops = vec![elected(0, 10, 4), elected(1, 20, 5), elected(2, 30, 7)];
/// assert_eq!(check_term_order("scheduler", &ops), vec![]);
/// let ops = vec![elected(0, 10, 4), elected(1, 20, 6), elected(2, 30, 5)];
/// assert_eq!(check_term_order("scheduler", &ops).len(), 1);
/// ```
pub fn check_term_order(election: &str, ops: &[Op]) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut highest: Option<(&Op, u64)> = None;
    for op in leaderships(election, ops) {
        let Some(term) = op.fence else {
            continue;
        };
        match highest {
            Some((earlier, top)) if term <= top => violations.push(Violation::TermOrder {
                resource: election.to_owned(),
                earlier: Acquisition::of(earlier, top),
                later: Acquisition::of(op, term),
            }),
            _ => highest = Some((op, term)),
        }
    }
    violations
}

/// Checks every quorum read of the election `election` in `reads` against its leaderships in
/// `ops` (successful acquires on `election`, whose token carries the announced value after its
/// first `:`, as the library stores it): a read that named a leader must have named one that led
/// at some point of the read, as far as the masters could tell. That is:
///
/// * the named leader was elected, its token's fingerprint the one the read returned, and its
///   value the one the read returned;
/// * its campaign had begun before the read returned;
/// * no later leader had been elected before the read began: from that moment a quorum of
///   masters held the later leader's key, and no quorum can have held the earlier one's since.
///
/// A leader that stepped down stays on the masters until its key is released or expires; a read
/// meanwhile names it, rightly, and passes. Reads that named no leader are not checked: a
/// campaign may be under way.
///
/// Returns one [`Violation::LeaderRead`] per read that fails.
pub fn check_leader_reads(election: &str, ops: &[Op], reads: &[LeaderRead]) -> Vec<Violation> {
    let terms = leaderships(election, ops);
    let by_fingerprint: HashMap<String, usize> = terms
        .iter()
        .enumerate()
        .map(|(i, op)| (LockToken::fingerprint_of(&op.token), i))
        .collect();
    let acquisition = |op: &Op| Acquisition::of(op, op.fence.unwrap_or_default());
    let mut violations = Vec::new();
    for read in reads.iter().filter(|r| r.election == election) {
        let (Some(value), Some(fingerprint)) = (&read.value, &read.fingerprint) else {
            continue;
        };
        let Some(&i) = by_fingerprint.get(fingerprint) else {
            violations.push(Violation::LeaderRead {
                resource: election.to_owned(),
                read: read.clone(),
                named: None,
                superseded_by: None,
            });
            continue;
        };
        let named = terms[i];
        let announced = named.token.split_once(':').map(|(_, v)| v);
        let superseded_by = terms.get(i + 1).filter(|next| next.end < read.start);
        if announced != Some(value.as_str()) || read.end < named.start || superseded_by.is_some() {
            violations.push(Violation::LeaderRead {
                resource: election.to_owned(),
                read: read.clone(),
                named: Some(acquisition(named)),
                superseded_by: superseded_by.map(|op| acquisition(op)),
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testing::{failed, Clock};
    use crate::history::Outcome;

    /// Candidate `client`'s leadership, announcing `host-<client>`: campaign from `campaign` ms,
    /// elected at `elected` ms, stepped down at `until` ms, in term `term`.
    fn led(c: &Clock, client: usize, (campaign, elected, until): (u64, u64, u64), term: u64) -> Op {
        let mut op = c.acquire(
            client,
            &format!("t{client}:host-{client}"),
            (campaign, elected),
            until,
            Some(term),
        );
        op.resource = "lead".into();
        op
    }

    fn read(c: &Clock, (from, to): (u64, u64), leader: Option<&Op>) -> LeaderRead {
        LeaderRead {
            client: 9,
            election: "lead".into(),
            start: c.at(from),
            end: c.at(to),
            value: leader.and_then(|op| op.token.split_once(':').map(|(_, v)| v.to_owned())),
            fingerprint: leader.map(|op| LockToken::fingerprint_of(&op.token)),
        }
    }

    #[test]
    fn terms_growing_in_election_order_pass_whatever_the_campaigns_overlap() {
        let c = Clock::new();
        let ops = vec![
            led(&c, 1, (0, 50, 60), 8),
            led(&c, 0, (0, 10, 20), 3),
            led(&c, 2, (5, 100, 110), 9),
            failed(led(&c, 3, (0, 105, 110), 1)),
        ];
        assert_eq!(check_term_order("lead", &ops), vec![]);
    }

    #[test]
    fn a_term_not_above_an_earlier_leaders_is_reported_against_the_highest() {
        let c = Clock::new();
        let ops = vec![
            led(&c, 0, (0, 10, 20), 3),
            led(&c, 1, (0, 30, 40), 7),
            led(&c, 2, (0, 50, 60), 7),
            led(&c, 3, (0, 70, 80), 5),
            led(&c, 4, (0, 90, 95), 8),
        ];
        let violations = check_term_order("lead", &ops);
        assert_eq!(violations.len(), 2, "{violations:?}");
        let pairs: Vec<(usize, u64, usize, u64)> = violations
            .iter()
            .map(|v| match v {
                Violation::TermOrder { earlier, later, .. } => {
                    (earlier.client, earlier.fence, later.client, later.fence)
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(pairs, [(1, 7, 2, 7), (1, 7, 3, 5)]);
        let text = violations[1].to_string();
        assert!(text.contains("term went backwards"), "{text}");
        assert!(violations[0].to_string().contains("term repeated"));
    }

    #[test]
    fn reads_of_the_current_or_a_stepped_down_but_unreplaced_leader_pass() {
        let c = Clock::new();
        let a = led(&c, 0, (0, 10, 50), 1);
        let b = led(&c, 1, (0, 80, 120), 2);
        let reads = vec![
            read(&c, (20, 25), Some(&a)),
            // A stepped down at 50; its key lingers until B is elected at 80.
            read(&c, (60, 70), Some(&a)),
            // Started before B's election returned.
            read(&c, (75, 90), Some(&a)),
            // B's campaign began at 0, before this read returned.
            read(&c, (5, 8), Some(&b)),
            read(&c, (100, 110), Some(&b)),
            read(&c, (200, 210), None),
        ];
        let ops = vec![a, b];
        assert_eq!(check_leader_reads("lead", &ops, &reads), vec![]);
    }

    #[test]
    fn a_read_of_a_superseded_leader_is_reported_with_its_successor() {
        let c = Clock::new();
        let a = led(&c, 0, (0, 10, 50), 1);
        let b = led(&c, 1, (0, 80, 120), 2);
        let reads = vec![read(&c, (81, 90), Some(&a))];
        let violations = check_leader_reads("lead", &[a, b], &reads);
        let [Violation::LeaderRead {
            named: Some(named),
            superseded_by: Some(next),
            ..
        }] = violations.as_slice()
        else {
            panic!("not a stale read: {violations:?}");
        };
        assert_eq!(
            (named.client, named.fence, next.client, next.fence),
            (0, 1, 1, 2)
        );
        let text = violations[0].to_string();
        assert!(text.contains("\"host-0\""), "{text}");
        assert!(text.contains("elected in its place"), "{text}");
        assert!(!text.contains("t0:"), "a token was printed: {text}");
    }

    #[test]
    fn a_read_of_a_leader_never_elected_or_before_its_campaign_is_reported() {
        let c = Clock::new();
        let a = led(&c, 0, (30, 40, 50), 1);
        let ghost = led(&c, 7, (0, 1, 2), 9);
        let mut wrong_value = read(&c, (41, 45), Some(&a));
        wrong_value.value = Some("host-9".into());
        let reads = vec![
            read(&c, (10, 20), Some(&ghost)),
            read(&c, (10, 20), Some(&a)),
            wrong_value,
        ];
        let violations = check_leader_reads("lead", &[a], &reads);
        assert_eq!(violations.len(), 3, "{violations:?}");
        assert!(matches!(
            &violations[0],
            Violation::LeaderRead { named: None, .. }
        ));
        assert!(violations[0].to_string().contains("never elected"));
        assert!(violations[1]
            .to_string()
            .contains("before its campaign began"));
        assert!(violations[2]
            .to_string()
            .contains("announced something else"));
    }

    #[test]
    fn reads_of_other_elections_are_left_alone() {
        let c = Clock::new();
        let mut other = read(&c, (0, 1), None);
        other.election = "other".into();
        other.value = Some("x".into());
        other.fingerprint = Some("00000000".into());
        assert_eq!(check_leader_reads("lead", &[], &[other]), vec![]);
        let mut op = led(&c, 0, (0, 1, 2), 1);
        op.outcome = Outcome::Ok { valid_until: None };
        assert_eq!(check_term_order("other", &[op]), vec![]);
    }
}

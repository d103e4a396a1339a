//! A multi-resource lock on a Redis Cluster voter. One script can only touch keys of one slot,
//! and the resources of an [`acquire_many`](crate::Redlock::acquire_many) hash to many, so on
//! a cluster the keys are taken one hash tag at a time, each group atomically by its own
//! script, all groups at once. The voter's vote is the conjunction: it grants only when every
//! group granted, and a voter where some group was refused rolls back the groups it granted
//! before it reports the refusal, so that a refusal still means "set nothing" (a give-back that
//! fails makes the voter's answer that failure instead). A group whose
//! request failed makes the whole voter's answer that failure, and the attempt's rollback then
//! releases every key on the voter, as for any voter that did not answer.
//!
//! "All or nothing" thus holds per voter in what the lock counts; between the groups' scripts
//! another client can see some of one voter's keys taken and others not, for the moment the
//! voter's answer takes.

use std::time::Duration;

use super::{Acquired, AttemptInput, HandOff, Keys};
use crate::error::NodeError;
use crate::node::Node;

/// The keys of one hash tag, and where each stood in the whole lock's key order.
pub(super) struct Group {
    pub(super) keys: Keys,
    positions: Vec<usize>,
}

/// What Redis Cluster hashes a key by: its hash tag, or the whole key without one. A lock key's
/// companions hash by the same (see `node::layout`).
fn hash_tag(key: &str) -> &str {
    crate::node::hash_tag(key).unwrap_or(key)
}

/// On a cluster voter, the keys of a multi-resource lock grouped by hash tag, when they span
/// more than one (each group lives in one slot); `None` where one script takes them all.
pub(super) fn groups(keys: &Keys, node: &Node) -> Option<Vec<Group>> {
    let Keys::Many(all) = keys else {
        return None;
    };
    if !node.is_cluster() {
        return None;
    }
    let mut by_tag: Vec<(&str, Vec<usize>)> = Vec::new();
    for (position, key) in all.iter().enumerate() {
        let tag = hash_tag(key);
        match by_tag.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, positions)) => positions.push(position),
            None => by_tag.push((tag, vec![position])),
        }
    }
    if by_tag.len() < 2 {
        return None;
    }
    Some(
        by_tag
            .into_iter()
            .map(|(_, positions)| Group {
                keys: Keys::Many(positions.iter().map(|&i| all[i].clone()).collect()),
                positions,
            })
            .collect(),
    )
}

/// [`Keys::acquire_on`] one group at a time (see the module docs).
pub(super) async fn acquire(
    groups: Vec<Group>,
    node: &Node,
    attempt: &AttemptInput<'_>,
    timeout: Duration,
) -> Result<Acquired, NodeError> {
    let AttemptInput {
        fenced,
        token,
        ttl_ms,
        in_line,
        ..
    } = *attempt;
    let answers = futures::future::join_all(
        groups
            .iter()
            .map(|group| Box::pin(group.keys.acquire_on(node, attempt, timeout))),
    )
    .await;
    let total: usize = groups.iter().map(|g| g.positions.len()).sum();
    let mut fences = vec![0; if fenced.is_some() { total } else { 0 }];
    let mut refused = None;
    let mut failed = None;
    let mut granted = Vec::with_capacity(groups.len());
    for (group, answer) in groups.iter().zip(answers) {
        match answer {
            Ok(Acquired::Granted(group_fences)) => {
                for (position, fence) in group.positions.iter().zip(group_fences) {
                    if let Some(slot) = fences.get_mut(*position) {
                        *slot = fence;
                    }
                }
                granted.push(group);
            }
            Ok(Acquired::Held(_)) => refused = Some(Acquired::Held(None)),
            Ok(Acquired::Line(_)) => refused = refused.or(Some(Acquired::Line(None))),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let Some(refused) = refused else {
        return Ok(Acquired::Granted(fences));
    };
    // Refused somewhere: give back what the other groups granted, so that the voter set
    // nothing, as a refusal says.
    let hand_off = match in_line {
        Some((ticket, entry_lease)) => HandOff {
            reserve: entry_lease,
            waiter: Some(ticket.clone()),
            requeue: None,
            takeovers: None,
        },
        None => HandOff::to_line(Duration::from_millis(ttl_ms)),
    };
    let rolled_back = granted
        .into_iter()
        .map(|group| Box::pin(group.keys.release_on(node, token, &hand_off, timeout)));
    // A group not given back would keep its keys until the TTL, and a waiter behind them that
    // long: the voter's answer is then that failure, not a refusal, so that the attempt's
    // rollback releases every key on the voter, and retries in the background until it answers,
    // as for any voter that did not answer.
    let given_back: Result<Vec<bool>, NodeError> = futures::future::join_all(rolled_back)
        .await
        .into_iter()
        .collect();
    given_back.map(|_| refused)
}

/// Runs `request` on every group at once; the answers in group order.
pub(super) async fn each<'a, T, F, Fut>(groups: &'a [Group], request: F) -> Vec<T>
where
    F: Fn(&'a Group) -> Fut,
    Fut: std::future::Future<Output = T> + 'a,
{
    futures::future::join_all(groups.iter().map(|g| Box::pin(request(g)))).await
}

impl Group {
    /// This group's share of fences given in the whole lock's key order.
    pub(super) fn fences(&self, all: &[u64]) -> Vec<u64> {
        self.positions
            .iter()
            .filter_map(|&i| all.get(i).copied())
            .collect()
    }
}

/// Every group's answer when all succeeded, or the first failure.
pub(super) fn all_ok(answers: Vec<Result<bool, NodeError>>) -> Result<Vec<bool>, NodeError> {
    answers.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::hash_tag;

    #[test]
    fn the_hash_tag_is_what_the_first_braces_enclose() {
        assert_eq!(hash_tag("{locks:a}:queue"), "locks:a");
        assert_eq!(hash_tag("user:{42}"), "42");
        assert_eq!(hash_tag("{a}b}"), "a");
        assert_eq!(hash_tag("{}a"), "{}a");
        assert_eq!(hash_tag("plain"), "plain");
    }
}

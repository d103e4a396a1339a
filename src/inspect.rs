//! Status: [`Redlock::inspect`] reads what every node holds for a resource, without taking or
//! changing anything, and says what a quorum of them agrees on.

use std::time::Duration;

use crate::error::{Error, NodeError};
use crate::keys;
use crate::quorum::DEFAULT_MAX_NODE_TIMEOUT;
use crate::redlock::Redlock;
use crate::scripts;
use crate::token::fingerprint;

/// What every node holds for one resource, from [`Redlock::inspect`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The resource inspected.
    pub resource: String,
    /// What a quorum of nodes agrees on.
    pub verdict: Verdict,
    /// How many nodes a lock needs.
    pub quorum: usize,
    /// Each node's state, in configuration order.
    pub nodes: Vec<NodeStatus>,
}

/// What a quorum of nodes says about a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of nodes holds the key with the same token.
    Held {
        /// The holder's token fingerprint (compare with
        /// [`LockToken::fingerprint`](crate::LockToken::fingerprint)).
        fingerprint: String,
        /// How many nodes hold it.
        nodes: usize,
    },
    /// A quorum of nodes does not have the key: an acquire would succeed now.
    Free,
    /// Enough nodes answered, but no quorum agrees: no token is on a quorum and fewer than a
    /// quorum are free (keys left over from a failed attempt, or two clients racing). Such
    /// keys expire at their TTL.
    Split,
    /// A quorum of nodes has handed the key to the same waiter, which is about to take it.
    HandedOver {
        /// The waiter's id, as in [`QueuedWaiter::id`].
        waiter: String,
        /// How many nodes reserved it.
        nodes: usize,
    },
    /// The key is free on a quorum, and readers of a read-write lock
    /// ([`RwLock`](crate::RwLock)) hold the resource on a quorum: a writer waits.
    Reading {
        /// At least this many readers' holds are live on each of a quorum of nodes.
        readers: usize,
        /// How many nodes have a live reader.
        nodes: usize,
    },
    /// Fewer than a quorum of nodes answered.
    Unknown,
}

/// One node's state for a resource, inside [`Inspection`].
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node, as `host:port`.
    pub node: String,
    /// What it holds.
    pub state: NodeState,
    /// The live waiters in the resource's line on this node, first to last (empty when the
    /// node did not answer).
    pub queue: Vec<QueuedWaiter>,
    /// Live readers' holds of the resource as a read-write lock on this node.
    pub readers: usize,
    /// Writers waiting for the resource as a read-write lock on this node (their notes hold
    /// new readers back).
    pub writers_waiting: usize,
}

/// One waiter in a resource's line on one node, inside [`NodeStatus`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's id (32 hex digits: its client's random id, then its own; not a token).
    pub id: String,
    /// How long it has waited: from the time its client took its place (the client's clock)
    /// to the node's time now.
    pub waited: Duration,
    /// How long its entry lives unless renewed.
    pub lapses_in: Duration,
}

/// What one node holds for a resource.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeState {
    /// The key exists.
    Held {
        /// A short, non-secret fingerprint of the token in the key (not the token).
        fingerprint: String,
        /// The key's remaining time to live; `None` when it has no expiry (it was not set by
        /// this library).
        ttl: Option<Duration>,
    },
    /// The key is reserved for the first waiter in line: a release handed it over, and that
    /// waiter's next attempt takes it.
    Reserved {
        /// The waiter's id, as in [`QueuedWaiter::id`].
        waiter: String,
        /// How long the reservation lasts.
        ttl: Option<Duration>,
    },
    /// The key does not exist.
    Free,
    /// The node did not answer.
    Unreachable(NodeError),
}

impl NodeStatus {
    /// `true` when the key exists on this node (held, or reserved for a waiter).
    pub fn exists(&self) -> bool {
        matches!(
            self.state,
            NodeState::Held { .. } | NodeState::Reserved { .. }
        )
    }

    /// The fingerprint of the token in the key, when it exists.
    pub fn fingerprint(&self) -> Option<&str> {
        match &self.state {
            NodeState::Held { fingerprint, .. } => Some(fingerprint),
            _ => None,
        }
    }

    /// The key's remaining time to live, when it exists and expires.
    pub fn ttl(&self) -> Option<Duration> {
        match &self.state {
            NodeState::Held { ttl, .. } | NodeState::Reserved { ttl, .. } => *ttl,
            _ => None,
        }
    }

    /// The waiter the key is reserved for, when a release handed it over.
    pub fn reserved_for(&self) -> Option<&str> {
        match &self.state {
            NodeState::Reserved { waiter, .. } => Some(waiter),
            _ => None,
        }
    }
}

impl Redlock {
    /// Reads, on every node at once, whether `resource` is locked, by which token (as a
    /// fingerprint) and for how much longer, and the quorum's [`Verdict`]. Takes and changes
    /// nothing; each node is bounded by the configured node timeout (or
    /// [`DEFAULT_MAX_NODE_TIMEOUT`]).
    ///
    /// ```no_run
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// let status = rl.inspect("reports:nightly").await?;
    /// println!("{:?}", status.verdict);
    /// for node in &status.nodes {
    ///     println!("{}: {:?} {:?}", node.node, node.fingerprint(), node.ttl());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for an empty name. Unreachable nodes are not an error: they
    /// are reported in [`Inspection::nodes`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self, resource: &str) -> Result<Inspection, Error> {
        let key = self.inner().key(resource)?;
        let timeout = self
            .inner()
            .settings()
            .node_timeout
            .unwrap_or(DEFAULT_MAX_NODE_TIMEOUT);
        let replies = futures::future::join_all((0..self.node_count()).map(|i| {
            let mut call = scripts::INSPECT.prepare_invoke();
            call.key(&*key)
                .key(keys::line_key(&key))
                .key(keys::leases_key(&key))
                .key(keys::readers_key(&key))
                .key(keys::writers_key(&key))
                .key(keys::held_key(&key));
            self.inner().node(i).invoke::<NodeReply>(call, timeout)
        }))
        .await;
        let nodes: Vec<NodeStatus> = self
            .nodes()
            .zip(replies)
            .map(|(node, reply)| match reply {
                Ok((value, pttl, now_ms, line, readers, writers_waiting)) => NodeStatus {
                    node: node.to_owned(),
                    state: node_state(value, pttl),
                    queue: line
                        .into_iter()
                        .map(|(id, order, lapses_in_ms)| QueuedWaiter {
                            id,
                            waited: Duration::from_millis(now_ms.saturating_sub(order / 1000)),
                            lapses_in: Duration::from_millis(lapses_in_ms),
                        })
                        .collect(),
                    readers,
                    writers_waiting,
                },
                Err(e) => NodeStatus {
                    node: node.to_owned(),
                    state: NodeState::Unreachable(e),
                    queue: Vec::new(),
                    readers: 0,
                    writers_waiting: 0,
                },
            })
            .collect();
        Ok(Inspection {
            resource: resource.to_owned(),
            verdict: verdict(self.quorum(), &nodes),
            quorum: self.quorum(),
            nodes,
        })
    }

    /// Whether `waiter`, read from a line by [`inspect`](Self::inspect), waits through this
    /// client (any of its tasks or clones): a program that waits in line can find its own place.
    ///
    /// ```no_run
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// let status = rl.inspect("reports:nightly").await?;
    /// for node in &status.nodes {
    ///     if let Some(place) = node.queue.iter().position(|w| rl.is_own_waiter(w)) {
    ///         println!("{}: place {} of {}", node.node, place + 1, node.queue.len());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_own_waiter(&self, waiter: &QueuedWaiter) -> bool {
        waiter.id.starts_with(self.inner().wakeup().client())
    }
}

/// One node's answer to `lua/inspect.lua`: the key's value and PTTL, the node's time in ms, the
/// live waiters as (id, order, ms until the entry lapses), live readers, waiting writers.
type NodeReply = (
    Option<String>,
    i64,
    u64,
    Vec<(String, u64, u64)>,
    usize,
    usize,
);

/// What a node holds, from the key's value and PTTL.
fn node_state(value: Option<String>, pttl: i64) -> NodeState {
    let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
    match value {
        None => NodeState::Free,
        Some(value) => match value.strip_prefix(keys::RESERVED_PREFIX) {
            Some(waiter) => NodeState::Reserved {
                waiter: waiter.to_owned(),
                ttl,
            },
            // An elected leader's key is its token marked: the same holder.
            None => NodeState::Held {
                fingerprint: fingerprint(
                    value.strip_prefix(keys::ELECTED_PREFIX).unwrap_or(&value),
                ),
                ttl,
            },
        },
    }
}

/// What a quorum of the nodes' states agrees on.
fn verdict(quorum: usize, nodes: &[NodeStatus]) -> Verdict {
    let answered = nodes
        .iter()
        .filter(|n| !matches!(n.state, NodeState::Unreachable(_)))
        .count();
    if answered < quorum {
        return Verdict::Unknown;
    }
    let free = nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Free))
        .count();
    if free >= quorum {
        // Readers leave the key alone: a quorum with live readers is a read hold.
        let mut readers: Vec<usize> = nodes.iter().map(|n| n.readers).collect();
        readers.sort_unstable_by(|a, b| b.cmp(a));
        let reading = readers.iter().filter(|r| **r > 0).count();
        return match readers.get(quorum - 1) {
            Some(&at_least) if at_least > 0 => Verdict::Reading {
                readers: at_least,
                nodes: reading,
            },
            _ => Verdict::Free,
        };
    }
    if let Some((print, nodes)) = agreed(quorum, nodes.iter().filter_map(NodeStatus::fingerprint)) {
        return Verdict::Held {
            fingerprint: print.to_owned(),
            nodes,
        };
    }
    match agreed(quorum, nodes.iter().filter_map(NodeStatus::reserved_for)) {
        Some((waiter, nodes)) => Verdict::HandedOver {
            waiter: waiter.to_owned(),
            nodes,
        },
        None => Verdict::Split,
    }
}

/// The value at least `quorum` of `values` share, with how many do.
fn agreed<'a>(quorum: usize, values: impl Iterator<Item = &'a str>) -> Option<(&'a str, usize)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for value in values {
        match counts.iter_mut().find(|(v, _)| *v == value) {
            Some((_, n)) => *n += 1,
            None => counts.push((value, 1)),
        }
    }
    counts.into_iter().find(|(_, n)| *n >= quorum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeErrorKind;

    fn held(f: &str) -> NodeStatus {
        NodeStatus {
            node: "n".into(),
            state: NodeState::Held {
                fingerprint: f.into(),
                ttl: Some(Duration::from_secs(1)),
            },
            queue: Vec::new(),
            readers: 0,
            writers_waiting: 0,
        }
    }

    fn free() -> NodeStatus {
        NodeStatus {
            node: "n".into(),
            state: NodeState::Free,
            queue: Vec::new(),
            readers: 0,
            writers_waiting: 0,
        }
    }

    fn down() -> NodeStatus {
        let e = NodeError::new("n:1", NodeErrorKind::Timeout(Duration::from_millis(5)));
        NodeStatus {
            node: "n".into(),
            state: NodeState::Unreachable(e),
            queue: Vec::new(),
            readers: 0,
            writers_waiting: 0,
        }
    }

    #[test]
    fn a_token_on_a_quorum_is_held() {
        let nodes = [held("a"), held("a"), free(), held("a"), down()];
        assert_eq!(
            verdict(3, &nodes),
            Verdict::Held {
                fingerprint: "a".into(),
                nodes: 3
            }
        );
    }

    #[test]
    fn a_quorum_without_the_key_is_free_even_if_a_minority_holds_it() {
        assert_eq!(
            verdict(3, &[held("a"), held("a"), free(), free(), free()]),
            Verdict::Free
        );
    }

    #[test]
    fn no_agreeing_quorum_is_split() {
        assert_eq!(
            verdict(3, &[held("a"), held("a"), held("b"), free(), free()]),
            Verdict::Split
        );
        assert_eq!(
            verdict(3, &[held("a"), held("a"), free(), free(), down()]),
            Verdict::Split
        );
    }

    #[test]
    fn a_key_reserved_for_one_waiter_on_a_quorum_is_handed_over() {
        let reserved = || node_state(Some("~queued:00000000000000ab".into()), 800);
        let nodes: Vec<NodeStatus> = (0..3)
            .map(|_| NodeStatus {
                state: reserved(),
                ..free()
            })
            .chain([free(), held("a")])
            .collect();
        assert_eq!(nodes[0].reserved_for(), Some("00000000000000ab"));
        assert_eq!(nodes[0].fingerprint(), None);
        assert_eq!(
            verdict(3, &nodes),
            Verdict::HandedOver {
                waiter: "00000000000000ab".into(),
                nodes: 3
            }
        );
    }

    #[test]
    fn readers_on_a_quorum_of_free_keys_are_reading_and_on_a_minority_free() {
        let reading = |readers| NodeStatus { readers, ..free() };
        assert_eq!(
            verdict(3, &[reading(2), reading(1), reading(3), free(), down()]),
            Verdict::Reading {
                readers: 1,
                nodes: 3
            }
        );
        assert_eq!(
            verdict(3, &[reading(2), reading(1), free(), free(), free()]),
            Verdict::Free
        );
        // A writer's key wins over leftover readers' entries.
        let nodes = [held("w"), held("w"), held("w"), reading(1), reading(1)];
        assert!(matches!(verdict(3, &nodes), Verdict::Held { .. }));
    }

    #[test]
    fn fewer_answers_than_a_quorum_is_unknown() {
        assert_eq!(
            verdict(3, &[free(), free(), down(), down(), down()]),
            Verdict::Unknown
        );
    }
}

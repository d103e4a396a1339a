//! Status: [`Redlock::inspect`] reads what every node holds for a resource, without taking or
//! changing anything, and says what a quorum of them agrees on.

use std::time::Duration;

use crate::builder::DEFAULT_MAX_NODE_TIMEOUT;
use crate::error::{Error, NodeError};
use crate::lock::fingerprint;
use crate::redlock::Redlock;
use crate::scripts;

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
    /// The key does not exist.
    Free,
    /// The node did not answer.
    Unreachable(NodeError),
}

impl NodeStatus {
    /// `true` when the key exists on this node.
    pub fn exists(&self) -> bool {
        matches!(self.state, NodeState::Held { .. })
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
            NodeState::Held { ttl, .. } => *ttl,
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
        let key = self.key(resource)?;
        let timeout = self
            .settings()
            .node_timeout
            .unwrap_or(DEFAULT_MAX_NODE_TIMEOUT);
        let replies = futures::future::join_all((0..self.node_count()).map(|i| {
            let mut call = scripts::INSPECT.prepare_invoke();
            call.key(&*key);
            self.node(i).invoke::<(Option<String>, i64)>(call, timeout)
        }))
        .await;
        let nodes: Vec<NodeStatus> = self
            .nodes()
            .zip(replies)
            .map(|(node, reply)| NodeStatus {
                node: node.to_owned(),
                state: match reply {
                    Ok((Some(token), pttl)) => NodeState::Held {
                        fingerprint: fingerprint(&token),
                        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                    },
                    Ok((None, _)) => NodeState::Free,
                    Err(e) => NodeState::Unreachable(e),
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
        return Verdict::Free;
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for print in nodes.iter().filter_map(NodeStatus::fingerprint) {
        match counts.iter_mut().find(|(f, _)| *f == print) {
            Some((_, n)) => *n += 1,
            None => counts.push((print, 1)),
        }
    }
    match counts.into_iter().find(|(_, n)| *n >= quorum) {
        Some((print, nodes)) => Verdict::Held {
            fingerprint: print.to_owned(),
            nodes,
        },
        None => Verdict::Split,
    }
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
        }
    }

    fn free() -> NodeStatus {
        NodeStatus {
            node: "n".into(),
            state: NodeState::Free,
        }
    }

    fn down() -> NodeStatus {
        let e = NodeError::new("n:1", NodeErrorKind::Timeout(Duration::from_millis(5)));
        NodeStatus {
            node: "n".into(),
            state: NodeState::Unreachable(e),
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
    fn fewer_answers_than_a_quorum_is_unknown() {
        assert_eq!(
            verdict(3, &[free(), free(), down(), down(), down()]),
            Verdict::Unknown
        );
    }
}

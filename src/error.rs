//! Errors: the operation's outcome, with every node's own outcome inside it.

use std::fmt;
use std::time::Duration;

/// Everything that can go wrong with a quorumlock operation.
///
/// One node's failure is not the operation's failure: the variants that talk to the nodes carry
/// each node's own outcome as a [`NodeError`], named by `host:port` (never by a URL with
/// credentials). Use the classification methods ([`is_contention`](Error::is_contention),
/// [`is_unavailable`](Error::is_unavailable), [`is_retriable`](Error::is_retriable)) rather than
/// matching on variants when deciding what to do next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The builder's settings are invalid, or two configured nodes are the same server.
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// The resource name cannot be locked.
    #[error("invalid resource name: {reason}")]
    InvalidResource {
        /// Why the name was rejected.
        reason: &'static str,
    },

    /// The task that called acquire already holds this resource through the same client. A
    /// lock is not reentrant: waiting would last until the lock's own TTL ran out.
    #[error(
        "{resource:?} is already held by this task through this client (a lock is not \
         reentrant: share it with Lock::into_reentrant, or take it under an owner id with \
         acquire_as)"
    )]
    AlreadyHeld {
        /// The resource that was asked for.
        resource: String,
    },

    /// The owner id of [`Redlock::acquire_as`](crate::Redlock::acquire_as) cannot be used.
    #[error("invalid owner id: {reason}")]
    InvalidOwner {
        /// Why it was rejected.
        reason: &'static str,
    },

    /// The value a candidate announces is too long.
    #[error("the leader value is {len} bytes long; at most {max} are kept")]
    InvalidLeaderValue {
        /// Its length in bytes.
        len: usize,
        /// The most an election keeps.
        max: usize,
    },

    /// A semaphore's number of permits is out of range.
    #[error("invalid number of permits {permits}: it must be between 1 and {max}")]
    InvalidPermits {
        /// The number that was asked for.
        permits: u32,
        /// The most a semaphore can have.
        max: u32,
    },

    /// The TTL is unusable with this configuration.
    #[error("invalid TTL {ttl:?}: {reason}")]
    InvalidTtl {
        /// The TTL that was asked for.
        ttl: Duration,
        /// Why it was rejected.
        reason: String,
    },

    /// Fewer than a quorum of nodes granted the lock.
    #[error(
        "{resource:?} not acquired: {granted} of {configured} masters granted ({quorum} needed) \
         after {attempts} attempt(s){}",
        NodeList(nodes)
    )]
    NotAcquired {
        /// The resource that was asked for.
        resource: String,
        /// How many nodes granted the last attempt.
        granted: usize,
        /// How many nodes are configured.
        configured: usize,
        /// How many grants a lock needs.
        quorum: usize,
        /// How many attempts were made.
        attempts: u32,
        /// Why each node that did not grant the last attempt refused.
        nodes: Vec<NodeError>,
    },

    /// A quorum granted the lock, but so late that no validity was left: the attempt was rolled back.
    #[error(
        "{resource:?} not acquired: a quorum granted it after {elapsed:?}, leaving no validity of the {ttl:?} TTL (after {attempts} attempt(s))"
    )]
    ValidityExhausted {
        /// The resource that was asked for.
        resource: String,
        /// Time from the start of the last attempt to the quorum's grant.
        elapsed: Duration,
        /// The TTL that was asked for.
        ttl: Duration,
        /// How many attempts were made.
        attempts: u32,
    },

    /// The lock's validity ran out before the operation could start; nothing was sent.
    #[error("{resource:?} lock has expired")]
    Expired {
        /// The lock's resource.
        resource: String,
    },

    /// Fewer than a quorum of nodes confirmed an extension before the lock's deadline.
    ///
    /// The lock keeps its old deadline and nothing was deleted.
    #[error(
        "{resource:?} not extended: {extended} master(s) confirmed before the deadline \
         ({quorum} needed){}",
        NodeList(nodes)
    )]
    NotExtended {
        /// The lock's resource.
        resource: String,
        /// How many nodes confirmed the extension.
        extended: usize,
        /// How many confirmations an extension needs.
        quorum: usize,
        /// Why each node that did not confirm failed.
        nodes: Vec<NodeError>,
    },

    /// Fewer than a quorum of nodes confirmed a release.
    ///
    /// The nodes that did not answer keep the key until its TTL runs out.
    #[error(
        "{resource:?} release confirmed by {confirmed} master(s) ({quorum} needed); the rest \
         keep it until its TTL{}",
        NodeList(nodes)
    )]
    NotReleased {
        /// The lock's resource.
        resource: String,
        /// How many nodes confirmed the key is gone.
        confirmed: usize,
        /// How many confirmations a release needs.
        quorum: usize,
        /// Why each node that did not confirm failed.
        nodes: Vec<NodeError>,
    },

    /// The lock held by [`Redlock::with_lock`](crate::Redlock::with_lock) ended before the
    /// body finished, and the body was stopped.
    ///
    /// The loss signal ([`Held::lost`](crate::Held::lost)) fired before the lease's deadline;
    /// the work the body had done so far may be incomplete, but none of it ran after the
    /// deadline.
    #[error(
        "{resource:?} lock lost after {renewals} renewal(s): {reason}{}",
        NodeList(nodes)
    )]
    Lost {
        /// The lock's resource.
        resource: String,
        /// Why the lease ended.
        reason: LossReason,
        /// How many renewals succeeded before.
        renewals: u32,
        /// Each node's outcome in the last renewal that failed (empty when none failed).
        nodes: Vec<NodeError>,
    },

    /// Fewer than a quorum of nodes could be reached. Every configured node is counted: those
    /// that answered in `reachable`, the others in `nodes`.
    #[error(
        "only {reachable} of {} masters reachable ({quorum} needed){}",
        reachable + nodes.len(),
        NodeList(nodes)
    )]
    Unavailable {
        /// How many nodes answered.
        reachable: usize,
        /// How many nodes any lock needs.
        quorum: usize,
        /// Why each unreachable node failed.
        nodes: Vec<NodeError>,
    },
}

impl Error {
    /// `true` when a lock held by [`Redlock::with_lock`](crate::Redlock::with_lock) ended before
    /// its body finished ([`Error::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// `true` when the lock is held by someone else: at least one node refused because another
    /// token holds the key.
    pub fn is_contention(&self) -> bool {
        match self {
            Error::NotAcquired { nodes, .. } => nodes.iter().any(NodeError::is_contention),
            _ => false,
        }
    }

    /// `true` when the failure came from nodes that could not take part (timeouts, refused or
    /// broken connections, server errors) rather than from another holder: no node that answered
    /// reported the key held by another token.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable { .. } => true,
            Error::Lost { reason, nodes, .. } => {
                *reason == LossReason::NotRenewed && nodes.iter().all(NodeError::is_unavailable)
            }
            Error::NotAcquired { nodes, .. }
            | Error::NotExtended { nodes, .. }
            | Error::NotReleased { nodes, .. } => {
                !nodes.is_empty() && nodes.iter().all(NodeError::is_unavailable)
            }
            _ => false,
        }
    }

    /// `true` when trying the same operation again later may succeed: contention, unavailable
    /// nodes, or validity lost to a slow quorum. Configuration and input errors, an expired lock,
    /// and an extension refused because the token is gone, are not retriable.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::NotAcquired { .. }
            | Error::ValidityExhausted { .. }
            | Error::NotReleased { .. }
            | Error::Unavailable { .. } => true,
            // Extending again helps only if nodes were out; a token gone from a majority is gone.
            Error::NotExtended { .. } => self.is_unavailable(),
            // Holding it again may work; hitting the configured limit again would not help.
            Error::Lost { reason, .. } => {
                !matches!(reason, LossReason::HoldLimit | LossReason::Cancelled)
            }
            Error::Config(_)
            | Error::InvalidResource { .. }
            | Error::InvalidPermits { .. }
            | Error::AlreadyHeld { .. }
            | Error::InvalidOwner { .. }
            | Error::InvalidLeaderValue { .. }
            | Error::InvalidTtl { .. }
            | Error::Expired { .. } => false,
        }
    }
}

/// Why a lock held by [`Redlock::with_lock`](crate::Redlock::with_lock) ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal reached a quorum in time (nodes down, paused or too slow): the loss signal
    /// fired the configured margin before the deadline.
    NotRenewed,
    /// A quorum of nodes no longer holds this lock's token (the keys expired or were lost, and
    /// may now belong to another holder).
    TokenGone,
    /// The hold reached [`HoldOptions::max_hold`](crate::HoldOptions::max_hold).
    HoldLimit,
    /// The `with_lock` future was dropped before its body finished; the lock is being released
    /// in the background. Only the body's [`Held`](crate::Held) clones see this reason.
    Cancelled,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotRenewed => "no renewal reached a quorum before the deadline",
            LossReason::TokenGone => "a quorum of nodes no longer holds the token",
            LossReason::HoldLimit => "the maximum hold time was reached",
            LossReason::Cancelled => "with_lock was cancelled",
        })
    }
}

/// An invalid setting found by [`RedlockBuilder::build`](crate::RedlockBuilder::build) or by
/// [`Redlock::connect`](crate::Redlock::connect).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node URLs were given.
    #[error("no nodes configured: a lock needs at least one Redis master")]
    NoNodes,

    /// A node URL could not be parsed.
    #[error("node URL {url:?} is invalid: {reason}")]
    InvalidUrl {
        /// The URL as given, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Two configured nodes are the same Redis server.
    #[error("nodes {first} and {second} are the same Redis server ({why}); each master must be listed once")]
    DuplicateNode {
        /// The first listing.
        first: String,
        /// The second listing.
        second: String,
        /// How the duplicate was recognised.
        why: &'static str,
    },

    /// The drift factor is outside `[0, 1)`.
    #[error("drift factor {0} is outside [0, 1)")]
    DriftFactor(f64),

    /// The per-node timeout is zero.
    #[error("node timeout must be greater than zero")]
    ZeroNodeTimeout,

    /// The durability asks for nothing: `Replicas(0)`, or `Aof` with neither the local file
    /// nor any replica.
    #[error("durability {0:?} confirms nothing: ask for at least one replica or the local AOF")]
    Durability(crate::Durability),

    /// The fencing grace is shorter than [`MIN_FENCE_GRACE`](crate::MIN_FENCE_GRACE).
    #[error("fence grace {0:?} is shorter than 1s: an expired counter must leave the clock floor past its last fence")]
    FenceGrace(std::time::Duration),
}

/// What went wrong on one node, named by its `host:port`.
#[derive(Debug)]
pub struct NodeError {
    node: String,
    kind: NodeErrorKind,
}

/// The reason one node did not do what was asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// The key is held by another token: the node refused to grant it.
    Held,
    /// The key was free but others wait in its line, and this attempt had no place in it (or,
    /// for a waiter, was not at its head): the node refused to grant it.
    Line,
    /// The key no longer holds this lock's token (it expired, or another holder has it since):
    /// the node refused to extend or fence it.
    TokenGone,
    /// No reply within the per-node timeout.
    Timeout(Duration),
    /// Not sent: the node's recent requests all timed out, and until it answers again only one
    /// request at a time goes to it (a probe) while the others fail at once instead of each
    /// waiting out the timeout.
    Unresponsive,
    /// The request failed: connection refused or broken, authentication, a server error.
    Redis(redis::RedisError),
    /// The server replied with something the scripts never return.
    UnexpectedReply(String),
    /// The node granted (or extended, or fenced), but did not confirm it as the client's
    /// [`Durability`](crate::Durability) asks within the node timeout: the grant does not count.
    Unconfirmed(String),
}

impl NodeError {
    pub(crate) fn new(node: &str, kind: NodeErrorKind) -> Self {
        NodeError {
            node: node.to_owned(),
            kind,
        }
    }

    /// The node, as `host:port`.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What went wrong.
    pub fn kind(&self) -> &NodeErrorKind {
        &self.kind
    }

    /// `true` when the node refused because another token holds the key, or others wait for
    /// it in line.
    pub fn is_contention(&self) -> bool {
        matches!(self.kind, NodeErrorKind::Held | NodeErrorKind::Line)
    }

    /// `true` when the node no longer holds this lock's token.
    pub fn is_token_gone(&self) -> bool {
        matches!(self.kind, NodeErrorKind::TokenGone)
    }

    /// `true` when the node did not answer within the per-node timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self.kind, NodeErrorKind::Timeout(_))
    }

    /// `true` when the node could not take part: a timeout, a connection or server error.
    pub fn is_unavailable(&self) -> bool {
        !self.is_contention() && !self.is_token_gone()
    }

    /// The client library's error, when the request itself failed.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match &self.kind {
            NodeErrorKind::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.kind)
    }
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeErrorKind::Held => f.write_str("held by another token"),
            NodeErrorKind::Line => f.write_str("others wait in line for it"),
            NodeErrorKind::TokenGone => f.write_str("no longer holds this lock's token"),
            NodeErrorKind::Timeout(t) => write!(f, "no reply within {t:?}"),
            NodeErrorKind::Unresponsive => {
                f.write_str("not contacted: its recent requests timed out, and a probe is pending")
            }
            // Something else listens there (a web server): the client's parser dump spans
            // lines and says nothing a user can act on.
            NodeErrorKind::Redis(e) if e.kind() == redis::ErrorKind::Parse => {
                f.write_str("not a Redis server (its reply is not the Redis protocol)")
            }
            NodeErrorKind::Redis(e) => write!(f, "{e}"),
            NodeErrorKind::UnexpectedReply(r) => write!(f, "unexpected reply {r}"),
            NodeErrorKind::Unconfirmed(why) => write!(f, "not confirmed durable: {why}"),
        }
    }
}

// The node's reason is part of this error's own message (there is one reason per node, not one
// source), so `source()` stays empty and nothing is printed twice.
impl std::error::Error for NodeError {}

/// Formats per-node errors as `" (a:1: reason; b:2: reason)"`, or nothing when there are none.
struct NodeList<'a>(&'a [NodeError]);

impl fmt::Display for NodeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        f.write_str(" (")?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(node: &str) -> NodeError {
        NodeError::new(node, NodeErrorKind::Held)
    }

    fn timed_out(node: &str) -> NodeError {
        NodeError::new(node, NodeErrorKind::Timeout(Duration::from_millis(50)))
    }

    fn not_acquired(nodes: Vec<NodeError>) -> Error {
        Error::NotAcquired {
            resource: "r".into(),
            granted: 1,
            configured: 5,
            quorum: 3,
            attempts: 2,
            nodes,
        }
    }

    #[test]
    fn a_refusal_by_another_token_is_contention_not_unavailability() {
        let e = not_acquired(vec![held("a:1"), held("b:2"), timed_out("c:3")]);
        assert!(e.is_contention());
        assert!(!e.is_unavailable());
        assert!(e.is_retriable());
    }

    #[test]
    fn failures_without_any_refusal_are_unavailability() {
        let e = not_acquired(vec![timed_out("a:1"), timed_out("b:2"), timed_out("c:3")]);
        assert!(!e.is_contention());
        assert!(e.is_unavailable());
        assert!(e.is_retriable());
    }

    #[test]
    fn display_names_every_node_and_its_reason_once() {
        let e = not_acquired(vec![held("a:1"), timed_out("b:2")]);
        assert_eq!(
            e.to_string(),
            "\"r\" not acquired: 1 of 5 masters granted (3 needed) after 2 attempt(s) \
             (a:1: held by another token; b:2: no reply within 50ms)"
        );
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn an_extend_refused_because_the_token_is_gone_is_not_retriable() {
        let gone_from = |node| NodeError::new(node, NodeErrorKind::TokenGone);
        let gone = Error::NotExtended {
            resource: "r".into(),
            extended: 1,
            quorum: 3,
            nodes: vec![gone_from("a:1"), gone_from("b:2"), timed_out("c:3")],
        };
        assert!(!gone.is_retriable());
        assert!(!gone.is_contention(), "a lost lease is not contention");
        assert!(!gone.is_unavailable());
        let cut_off = Error::NotExtended {
            resource: "r".into(),
            extended: 2,
            quorum: 3,
            nodes: vec![timed_out("a:1")],
        };
        assert!(cut_off.is_retriable());
    }

    #[test]
    fn bad_input_is_neither_retriable_nor_about_nodes() {
        let errors = [
            Error::Config(ConfigError::NoNodes),
            Error::InvalidResource {
                reason: "it is empty",
            },
            Error::InvalidTtl {
                ttl: Duration::ZERO,
                reason: "it must be at least 1 ms".into(),
            },
            Error::Expired {
                resource: "r".into(),
            },
        ];
        for e in errors {
            assert!(!e.is_retriable(), "{e}");
            assert!(!e.is_contention(), "{e}");
            assert!(!e.is_unavailable(), "{e}");
        }
    }
}

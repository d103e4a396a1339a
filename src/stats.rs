//! Counters of what a client has done, kept in relaxed atomics so that counting costs next to
//! nothing on the hot path, and read as a [`Stats`] snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::NodeError;
use crate::telemetry;

/// A snapshot of a client's counters since it was built, from [`Redlock::stats`](crate::Redlock::stats).
///
/// Every clone of a [`Redlock`](crate::Redlock) shares the same counters. The fields are read
/// one by one without a lock, so a snapshot taken while operations run may be a few events
/// apart between fields.
///
/// ```no_run
/// # async fn run(rl: quorumlock::Redlock) {
/// let stats = rl.stats();
/// println!("{} of {} attempts won; {} contended", stats.acquired, stats.attempts, stats.contended);
/// for node in &stats.nodes {
///     println!("{}: {} errors ({} timeouts)", node.node, node.errors, node.timeouts);
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquire attempts sent to the nodes (each retry counts; `acquire_many` included).
    pub attempts: u64,
    /// Attempts that won a quorum in time and returned a lock.
    pub acquired: u64,
    /// Failed attempts in which at least one node refused because another token held a key.
    pub contended: u64,
    /// Retries started early because a release was announced, instead of after the retry
    /// delay. Each release wakes one waiter of the client.
    pub wakeups: u64,
    /// Successful extensions: [`Lock::extend`](crate::Lock::extend),
    /// [`MultiLock::extend`](crate::MultiLock::extend) and the renewals of
    /// [`Redlock::with_lock`](crate::Redlock::with_lock).
    pub renewals: u64,
    /// Locks held by [`Redlock::with_lock`](crate::Redlock::with_lock) that ended before their
    /// body finished ([`Error::Lost`](crate::Error::Lost)).
    pub lost: u64,
    /// Per node, in configuration order.
    pub nodes: Vec<NodeStats>,
}

/// The counters of one node, inside [`Stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// The node, as `host:port`.
    pub node: String,
    /// Requests to this node that failed: timeouts, connection and server errors (a refusal
    /// because another token holds the key is not an error).
    pub errors: u64,
    /// How many of those errors were timeouts.
    pub timeouts: u64,
}

/// The live counters behind [`Stats`].
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) attempts: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) contended: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) lost: AtomicU64,
    nodes: Box<[NodeCounters]>,
}

#[derive(Debug, Default)]
struct NodeCounters {
    errors: AtomicU64,
    timeouts: AtomicU64,
}

impl Counters {
    pub(crate) fn new(node_count: usize) -> Self {
        Counters {
            attempts: AtomicU64::new(0),
            acquired: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            nodes: (0..node_count).map(|_| NodeCounters::default()).collect(),
        }
    }

    /// Adds one to a counter.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failed request to the node at `index`.
    pub(crate) fn node_error(&self, index: usize, error: &NodeError) {
        telemetry::node_error(error);
        if let Some(node) = self.nodes.get(index) {
            node.errors.fetch_add(1, Ordering::Relaxed);
            if error.is_timeout() {
                node.timeouts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Reads every counter; `ids` names the nodes in configuration order.
    pub(crate) fn snapshot<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Stats {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            attempts: load(&self.attempts),
            acquired: load(&self.acquired),
            contended: load(&self.contended),
            wakeups: load(&self.wakeups),
            renewals: load(&self.renewals),
            lost: load(&self.lost),
            nodes: ids
                .zip(self.nodes.iter())
                .map(|(id, n)| NodeStats {
                    node: id.to_owned(),
                    errors: load(&n.errors),
                    timeouts: load(&n.timeouts),
                })
                .collect(),
        }
    }
}

//! `Inner`: the client's state — its nodes, quorum, settings, counters, wake-up hub and
//! rollback retries — below the public [`Redlock`](crate::Redlock) type that wraps it. The
//! fan-out, the releases and the locks work on this, so none of them needs the client.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::node::Node;
use crate::quorum::{self, Lease};
use crate::retries::Retries;
use crate::retry::RetryPolicy;
use crate::stats::Counters;
use crate::task_holds::TaskHolds;
use crate::token::AttemptStamps;
use crate::wakeup::Wakeup;

/// The state every clone of one client shares.
#[derive(Debug)]
pub(crate) struct Inner {
    nodes: Arc<[Node]>,
    quorum: usize,
    settings: Settings,
    counters: Counters,
    wakeup: Wakeup,
    retries: Retries,
    task_holds: TaskHolds,
    /// The order of this client's attempts under owner ids.
    stamps: Arc<AttemptStamps>,
}

/// Validated settings, fixed at build time.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) retry: RetryPolicy,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) key_prefix: String,
    pub(crate) fencing: bool,
    /// How long a fencing counter lasts after its last grant.
    pub(crate) fence_grace: Duration,
    /// Whether a grant counts only once confirmed durable (see `durability`).
    pub(crate) durable: bool,
}

impl Inner {
    pub(crate) fn new(nodes: Vec<Node>, settings: Settings) -> Self {
        let nodes: Arc<[Node]> = nodes.into();
        Inner {
            quorum: quorum::quorum(nodes.len()),
            counters: Counters::new(nodes.len()),
            wakeup: Wakeup::new(nodes.len()),
            retries: Retries::new(&nodes),
            task_holds: TaskHolds::default(),
            stamps: Arc::default(),
            nodes,
            settings,
        }
    }

    /// The stamps of this client's attempts under owner ids.
    pub(crate) fn stamps(&self) -> &Arc<AttemptStamps> {
        &self.stamps
    }

    /// How many nodes must agree: ⌊N/2⌋ + 1 of the configured nodes.
    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// The nodes, shared with the background tasks that outlive a call (they hold them weakly,
    /// and end with the client).
    pub(crate) fn nodes(&self) -> &Arc<[Node]> {
        &self.nodes
    }

    pub(crate) fn all_nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub(crate) fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    pub(crate) fn wakeup(&self) -> &Wakeup {
        &self.wakeup
    }

    pub(crate) fn retries(&self) -> &Retries {
        &self.retries
    }

    /// The locks each task acquired through this client and still holds.
    pub(crate) fn task_holds(&self) -> &TaskHolds {
        &self.task_holds
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Validates a TTL against this configuration and derives the lease timing.
    pub(crate) fn lease(&self, ttl: Duration) -> Result<Lease, Error> {
        Lease::new(ttl, self.settings.drift_factor, self.settings.node_timeout)
    }

    /// The Redis key of a resource: `<prefix><resource>` (see [`crate::resource_key`]).
    ///
    /// Refused: an empty name; and a key that could be a layout marker or another resource's
    /// companion, or whose companions (its fencing counter, its line, ...) could not share its
    /// Redis Cluster slot (see `node::layout::check_lock_key`).
    pub(crate) fn key(&self, resource: &str) -> Result<Arc<str>, Error> {
        if resource.is_empty() {
            return Err(Error::InvalidResource {
                reason: "it is empty",
            });
        }
        let key = crate::node::resource_key(&self.settings.key_prefix, resource);
        if let Some(reason) = crate::node::check_lock_key(&key) {
            return Err(Error::InvalidResource { reason });
        }
        Ok(key.into())
    }
}

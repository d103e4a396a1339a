//! `Redlock`: the client. Fans each operation out to every node and decides on a quorum.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::builder::{RedlockBuilder, DEFAULT_MAX_NODE_TIMEOUT, DEFAULT_NODE_TIMEOUT_DIVISOR};
use crate::error::{ConfigError, Error, NodeError, NodeErrorKind};
use crate::fanout::Cleanup;
use crate::keys::{self, Acquired, Keys};
use crate::lock::{Lock, LockToken};
use crate::node::Node;
use crate::quorum::{self, Decision};
use crate::release::{Retries, Rollback};
use crate::retry::RetryPolicy;
use crate::stats::{Counters, Stats};
use crate::wakeup::Wakeup;

/// A distributed lock client over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside): share one per process. Connections to the nodes open on
/// first use, one multiplexed connection per node, and reconnect on their own.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # async fn run() -> Result<(), quorumlock::Error> {
/// let rl = Redlock::builder([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .build()?;
/// let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
/// // ... the critical section, finished well within lock.remaining() ...
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Vec<Node>,
    quorum: usize,
    settings: Settings,
    counters: Counters,
    wakeup: Wakeup,
    retries: Retries,
}

/// A [`Redlock`] that does not keep the client alive: background tasks hold this, and stop once
/// every `Redlock` clone is gone.
#[derive(Debug, Clone)]
pub(crate) struct WeakRedlock(Weak<Inner>);

impl WeakRedlock {
    pub(crate) fn upgrade(&self) -> Option<Redlock> {
        self.0.upgrade().map(|inner| Redlock { inner })
    }
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
}

/// The timing of one lease, derived from its TTL and validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    /// The TTL in whole milliseconds, as the nodes receive it.
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
    pub(crate) drift: Duration,
    pub(crate) node_timeout: Duration,
}

/// Why one acquire attempt failed.
pub(crate) enum Failure {
    NotGranted {
        granted: usize,
        nodes: Vec<NodeError>,
    },
    Late {
        elapsed: Duration,
        ttl: Duration,
    },
}

impl Failure {
    /// How many nodes granted the failed attempt.
    pub(crate) fn granted(&self) -> usize {
        match self {
            Failure::NotGranted { granted, .. } => *granted,
            Failure::Late { .. } => 0,
        }
    }

    /// `true` when a node refused because another token holds a key.
    pub(crate) fn is_contention(&self) -> bool {
        match self {
            Failure::NotGranted { nodes, .. } => nodes.iter().any(NodeError::is_contention),
            Failure::Late { .. } => false,
        }
    }
}

/// What the nodes that had answered a release said, when it returned.
///
/// Only answers count. A release returns once a quorum has confirmed, so `deleted + absent` is
/// at least the quorum and may be less than the node count: the releases still in flight finish
/// in the background, and a node whose acquire request was still in flight is released behind
/// it, counted in neither.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Nodes on which this lock's key was still present and was deleted.
    pub deleted: usize,
    /// Nodes on which the key had already expired or never landed.
    pub absent: usize,
}

/// How many nodes answered [`Redlock::connect`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Health {
    /// Nodes that answered.
    pub reachable: usize,
    /// The nodes that did not, and why.
    pub unreachable: Vec<NodeError>,
}

impl Redlock {
    /// Starts configuring a client for these node URLs (`redis://[user:password@]host:port[/db]`).
    /// List each independent master once; use an odd count (3, 5, 7).
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder::new(urls)
    }

    pub(crate) fn new(nodes: Vec<Node>, settings: Settings) -> Self {
        let quorum = quorum::quorum(nodes.len());
        Redlock {
            inner: Arc::new(Inner {
                counters: Counters::new(nodes.len()),
                wakeup: Wakeup::new(nodes.len()),
                retries: Retries::new(nodes.len()),
                nodes,
                quorum,
                settings,
            }),
        }
    }

    /// A snapshot of this client's counters (shared by all its clones): attempts, grants,
    /// contention, wake-ups, renewals, lost locks, and errors per node. Cheap: a handful of
    /// relaxed atomic loads, no I/O.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot(self.nodes())
    }

    /// How many nodes must agree: ⌊N/2⌋ + 1 of the **configured** nodes, however many are up.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// How many nodes are configured.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// The nodes as `host:port`, in configuration order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(Node::id)
    }

    /// Connects to every node now, instead of on first use, and checks that no server is listed
    /// twice under different names (by its `run_id`).
    ///
    /// # Errors
    ///
    /// [`ConfigError::DuplicateNode`] when two nodes report the same `run_id`;
    /// [`Error::Unavailable`] when fewer than a quorum answer. A minority down is not an error:
    /// it is reported in [`Health::unreachable`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn connect(&self) -> Result<Health, Error> {
        let answers =
            futures::future::join_all(self.inner.nodes.iter().map(|node| node.run_id())).await;
        let mut seen: Vec<(String, &str)> = Vec::new();
        let mut unreachable = Vec::new();
        for (node, answer) in self.inner.nodes.iter().zip(answers) {
            match answer {
                Ok(run_id) => {
                    if let Some((_, first)) = seen.iter().find(|(id, _)| *id == run_id) {
                        return Err(ConfigError::DuplicateNode {
                            first: (*first).to_owned(),
                            second: node.id().to_owned(),
                            why: "same run_id",
                        }
                        .into());
                    }
                    seen.push((run_id, node.id()));
                }
                Err(e) => unreachable.push(e),
            }
        }
        if seen.len() < self.inner.quorum {
            return Err(Error::Unavailable {
                reachable: seen.len(),
                quorum: self.inner.quorum,
                nodes: unreachable,
            });
        }
        for e in &unreachable {
            tracing::warn!(error = %e, "node unreachable");
        }
        Ok(Health {
            reachable: seen.len(),
            unreachable,
        })
    }

    /// Acquires `resource` for `ttl`, retrying by the configured policy (retry count, jittered
    /// delay, optional overall deadline).
    ///
    /// Once an attempt finds the resource held, the client subscribes to its release channel on
    /// every node (one shared subscriber connection per node, opened in the background) and
    /// retries as soon as a node announces a release; the jittered delay remains the fallback,
    /// for instance when the holder's lease simply expires. Each release wakes one waiter of
    /// this client and its clones: the one that has waited longest. An uncontended acquire
    /// never subscribes.
    ///
    /// On success the lock is valid for [`Lock::remaining`]: the TTL minus the time the
    /// successful attempt took, minus the clock-drift allowance. Finish the critical section
    /// within it, or [`extend`](Lock::extend) it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] / [`Error::InvalidTtl`] for bad input (no node is contacted);
    /// [`Error::NotAcquired`] with every node's outcome when the last attempt failed to gather
    /// a quorum; [`Error::ValidityExhausted`] when a quorum answered too late to leave validity.
    /// Every failed attempt has been rolled back on all nodes.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped mid-attempt, the partial acquisition is released in the
    /// background (when a tokio runtime is running); no lock is returned.
    pub async fn acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.lease(ttl)?;
        let keys = Keys::One(self.key(resource)?);
        self.acquire_keys(resource, &keys, &lease, true).await
    }

    /// Makes exactly one attempt to acquire `resource` for `ttl`.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Redlock::acquire), with `attempts` = 1.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Redlock::acquire).
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        let lease = self.lease(ttl)?;
        let keys = Keys::One(self.key(resource)?);
        self.acquire_keys(resource, &keys, &lease, false).await
    }

    pub(crate) fn give_up(&self, resource: &str, failure: Failure, attempts: u32) -> Error {
        match failure {
            Failure::NotGranted { granted, nodes } => Error::NotAcquired {
                resource: resource.to_owned(),
                granted,
                quorum: self.inner.quorum,
                attempts,
                nodes,
            },
            Failure::Late { elapsed, ttl } => Error::ValidityExhausted {
                resource: resource.to_owned(),
                elapsed,
                ttl,
                attempts,
            },
        }
    }

    /// One attempt of the algorithm: fan out, decide early, check validity, fence, or roll back.
    pub(crate) async fn attempt(
        &self,
        label: &str,
        keys: &Keys,
        lease: &Lease,
    ) -> Result<Lock, Failure> {
        let token = LockToken::generate();
        let fenced = self.inner.settings.fencing;
        // Armed until the lock is handed out: a dropped future releases on every node in the
        // background.
        Counters::bump(&self.inner.counters.attempts);
        let start = Instant::now();
        // By `start + ttl` every SET of the attempt that ran as it was sent has expired.
        let rollback = Rollback::new(self, keys, &token, lease.node_timeout, start + lease.ttl);

        let (ttl_ms, node_timeout) = (lease.ttl_ms, lease.node_timeout);
        let (outcome, stragglers) = self
            .fan_out(
                |rl, i| {
                    let (keys, token) = (keys.clone(), token.clone());
                    async move {
                        let node = rl.node(i);
                        keys.acquire_on(node, fenced, token.expose(), ttl_ms, node_timeout)
                            .await
                    }
                },
                |grant| match grant {
                    Acquired::Granted(fences) => Ok(fences),
                    Acquired::Held => Err(NodeErrorKind::Held),
                },
                None,
            )
            .await;

        let failure = match outcome.decision {
            Decision::Won => {
                let fences = match fenced {
                    false => Ok(None),
                    true => self
                        .settle_fence(keys, &token, &outcome.yes, lease)
                        .await
                        .map(Some),
                };
                let elapsed = start.elapsed();
                match (fences, quorum::validity(lease.ttl, elapsed, lease.drift)) {
                    (Ok(fences), Some(validity)) => {
                        rollback.disarm();
                        Counters::bump(&self.inner.counters.acquired);
                        tracing::debug!(?elapsed, ?validity, "acquired");
                        let gate = stragglers.finish_before_release(Cleanup {
                            redlock: self.clone(),
                            keys: keys.clone(),
                            token: token.clone(),
                            node_timeout: lease.node_timeout,
                            announce: true,
                        });
                        return Ok(Lock {
                            redlock: self.clone(),
                            resource: label.to_owned(),
                            keys: keys.clone(),
                            token,
                            lease: *lease,
                            deadline: start + elapsed + validity,
                            fences,
                            gate,
                            release_done: false,
                        });
                    }
                    (Err(nodes), _) => Failure::NotGranted {
                        granted: outcome.yes.len(),
                        nodes,
                    },
                    (Ok(_), None) => Failure::Late {
                        elapsed,
                        ttl: lease.ttl,
                    },
                }
            }
            Decision::Lost | Decision::Pending => Failure::NotGranted {
                granted: outcome.yes.len(),
                nodes: outcome.no,
            },
        };
        if failure.is_contention() {
            Counters::bump(&self.inner.counters.contended);
        }
        tracing::debug!(
            elapsed = ?start.elapsed(),
            granted = outcome.yes.len(),
            contended = failure.is_contention(),
            "attempt failed; rolling back"
        );
        stragglers.finish_then_release(Cleanup {
            redlock: self.clone(),
            keys: keys.clone(),
            token: token.clone(),
            node_timeout: lease.node_timeout,
            announce: false,
        });
        // A node that refused set nothing: only the others need the rollback.
        rollback.release_now(&outcome.refused).await;
        Err(failure)
    }

    /// Makes the fence T = max of the granted counters safe to hand out (per key, for a lock
    /// over several keys): unless a quorum of nodes already holds T, raise the counter to T on
    /// the granting nodes that hold less, where this token is still present, until a quorum
    /// holds at least T. Then any later majority overlaps one of them, and its INCR goes past T.
    async fn settle_fence(
        &self,
        keys: &Keys,
        token: &LockToken,
        granted: &[(usize, Vec<u64>)],
        lease: &Lease,
    ) -> Result<Vec<u64>, Vec<NodeError>> {
        let fence: Vec<u64> = (0..keys.len())
            .map(|k| {
                granted
                    .iter()
                    .filter_map(|(_, f)| f.get(k).copied())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let at_fence = granted.iter().filter(|(_, f)| *f == fence).count();
        if at_fence >= self.inner.quorum {
            return Ok(fence);
        }
        let behind: Vec<usize> = granted
            .iter()
            .filter(|(_, f)| *f != fence)
            .map(|(i, _)| *i)
            .collect();
        let raised = futures::future::join_all(behind.iter().map(|&i| {
            keys.raise_fence_on(
                &self.inner.nodes[i],
                token.expose(),
                &fence,
                lease.node_timeout,
            )
        }))
        .await;
        let mut nodes = Vec::new();
        let mut holding = at_fence;
        for (&i, result) in behind.iter().zip(raised) {
            match result {
                Ok(true) => holding += 1,
                Ok(false) => nodes.push(NodeError::new(
                    self.inner.nodes[i].id(),
                    NodeErrorKind::TokenGone,
                )),
                Err(e) => nodes.push(e),
            }
        }
        if holding >= self.inner.quorum {
            Ok(fence)
        } else {
            Err(nodes)
        }
    }

    /// Validates a TTL against this configuration and derives the lease timing.
    pub(crate) fn lease(&self, ttl: Duration) -> Result<Lease, Error> {
        let invalid = |reason: String| Error::InvalidTtl { ttl, reason };
        let ttl_ms = u64::try_from(ttl.as_millis())
            .ok()
            .filter(|ms| i64::try_from(*ms).is_ok())
            .ok_or_else(|| invalid("its milliseconds overflow".into()))?;
        if ttl_ms == 0 {
            return Err(invalid("it must be at least 1 ms".into()));
        }
        let ttl = Duration::from_millis(ttl_ms);
        if Instant::now().checked_add(ttl).is_none() {
            return Err(invalid("it overflows the clock".into()));
        }
        let drift = quorum::drift(ttl, self.inner.settings.drift_factor);
        let node_timeout = self.inner.settings.node_timeout.unwrap_or_else(|| {
            (ttl / DEFAULT_NODE_TIMEOUT_DIVISOR)
                .clamp(Duration::from_millis(1), DEFAULT_MAX_NODE_TIMEOUT)
        });
        if ttl <= drift + node_timeout {
            return Err(invalid(format!(
                "it must be longer than the drift allowance ({drift:?}) plus the node timeout ({node_timeout:?})"
            )));
        }
        Ok(Lease {
            ttl,
            ttl_ms,
            drift,
            node_timeout,
        })
    }

    /// The Redis key of a resource.
    ///
    /// A key ending in one of [`keys::RESERVED_SUFFIXES`] is refused: it would be the fencing
    /// counter (or another auxiliary key) of another resource, which a lock would overwrite
    /// and delete.
    pub(crate) fn key(&self, resource: &str) -> Result<Arc<str>, Error> {
        if resource.is_empty() {
            return Err(Error::InvalidResource {
                reason: "it is empty",
            });
        }
        let key = format!("{}{}", self.inner.settings.key_prefix, resource);
        if let Some(reason) = keys::reserved(&key) {
            return Err(Error::InvalidResource { reason });
        }
        Ok(key.into())
    }

    pub(crate) fn all_nodes(&self) -> &[Node] {
        &self.inner.nodes
    }

    pub(crate) fn node(&self, index: usize) -> &Node {
        &self.inner.nodes[index]
    }

    pub(crate) fn wakeup(&self) -> &Wakeup {
        &self.inner.wakeup
    }

    pub(crate) fn retries(&self) -> &Retries {
        &self.inner.retries
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub(crate) fn downgrade(&self) -> WeakRedlock {
        WeakRedlock(Arc::downgrade(&self.inner))
    }
}

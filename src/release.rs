//! Releases: compare-and-delete on every node, the rollback of a failed attempt (including its
//! cancellation), and the background releases that outlive the call that started them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::{NodeError, NodeErrorKind};
use crate::inner::Inner;
use crate::keys::{HandOff, Keys};
use crate::node::Node;
use crate::retries::Pending;
use crate::seam;
use crate::sync::lock;
use crate::token::LockToken;

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

impl Inner {
    /// Compare-and-delete on every node but those in `skip`, waiting for each (bounded by
    /// `node_timeout`). Each node hands a released key to the head of its line, if anybody
    /// waits. Returns what the nodes that answered said, and each that did not, by index.
    pub(crate) async fn release_except(
        &self,
        keys: &Keys,
        token: &LockToken,
        hand_off: &HandOff,
        node_timeout: Duration,
        skip: &[usize],
    ) -> (Released, Vec<(usize, NodeError)>) {
        let nodes = self.all_nodes().iter().enumerate();
        let sent = nodes.filter(|(i, _)| !skip.contains(i));
        let replies = futures::future::join_all(sent.map(|(i, node)| async move {
            let started = seam::now();
            let reply = keys.release_on(node, token.expose(), hand_off, node_timeout).await;
            tracing::debug!(node = node.id(), elapsed = ?seam::elapsed(started), reply = ?reply.as_ref().map_err(NodeError::kind), "release");
            (i, reply)
        }))
        .await;
        let mut released = Released {
            deleted: 0,
            absent: 0,
        };
        let mut failed = Vec::new();
        for (i, reply) in replies {
            match reply {
                Ok(true) => released.deleted += 1,
                Ok(false) => released.absent += 1,
                Err(e) => {
                    self.counters().node_error(i, &e);
                    failed.push((i, e))
                }
            }
        }
        (released, failed)
    }

    /// The holder's release: compare-and-delete on every node, handed to the line. A node in
    /// `behind` still has the lock's acquire request in flight: its release is sent once the
    /// signal says that request has completed, so that it runs after the `SET`. Returns as soon
    /// as a quorum has confirmed, or enough failed that no quorum can; the releases still in
    /// flight finish in the background.
    pub(crate) async fn release_at_quorum(
        self: &Arc<Self>,
        keys: &Keys,
        token: &LockToken,
        hand_off: &HandOff,
        node_timeout: Duration,
        behind: Vec<(usize, oneshot::Receiver<()>)>,
    ) -> (Released, Vec<NodeError>) {
        let behind = Mutex::new(behind);
        let (outcome, stragglers) = self
            .fan_out(
                |rl, i| {
                    let (keys, token, hand_off) = (keys.clone(), token.clone(), hand_off.clone());
                    let mut behind = lock(&behind);
                    let landed = behind.iter().position(|(node, _)| *node == i);
                    let landed = landed.map(|at| behind.swap_remove(at).1);
                    async move {
                        if let Some(landed) = landed {
                            // An error means the straggler task is gone: nothing to wait for.
                            let _ = landed.await;
                        }
                        keys.release_on(rl.node(i), token.expose(), &hand_off, node_timeout)
                            .await
                    }
                },
                // Every answer confirms: the key is gone from that node either way.
                Ok::<_, NodeErrorKind>,
                None,
            )
            .await;
        stragglers.finish();
        let deleted = outcome.yes.iter().filter(|(_, deleted)| *deleted).count();
        let released = Released {
            deleted,
            absent: outcome.yes.len() - deleted,
        };
        (released, outcome.no)
    }
}

/// Releases a token on every node unless disarmed: on failure explicitly, on cancellation from
/// `Drop` in the background.
pub(crate) struct Rollback<'a> {
    inner: &'a Arc<Inner>,
    keys: &'a Keys,
    token: &'a LockToken,
    /// How the released keys pass on to the line; for a waiter's attempt, it is put back in
    /// its place first.
    hand_off: HandOff,
    node_timeout: Duration,
    /// By then every `SET` of the attempt that ran as it was sent has expired: releases still
    /// unanswered are given up. (One that ran late was sent a release queued behind it on its
    /// own connection; see `Node::release`.)
    keys_expire: Instant,
    /// Per node, [`Node::sent`] when the attempt began.
    sent_before: Vec<u64>,
    armed: bool,
}

impl<'a> Rollback<'a> {
    /// An armed rollback of the attempt about to send `token` under `keys`, retried no later
    /// than `keys_expire`. Build it before the attempt sends anything: it notes how many
    /// requests each node has been sent so far.
    pub(crate) fn new(
        inner: &'a Arc<Inner>,
        keys: &'a Keys,
        token: &'a LockToken,
        hand_off: HandOff,
        node_timeout: Duration,
        keys_expire: Instant,
    ) -> Self {
        Rollback {
            inner,
            keys,
            token,
            hand_off,
            node_timeout,
            keys_expire,
            sent_before: inner.all_nodes().iter().map(Node::sent).collect(),
            armed: true,
        }
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases now on every node except those in `refused` (which set nothing) and those no
    /// request has been sent to since the attempt began (connection refused, or failing at once
    /// while unresponsive): nothing of the attempt can be on them. A request of the attempt
    /// still waiting for its connection is released behind it by the fan-out's stragglers.
    ///
    /// A release that gets no answer is handed to the node's retry task (see
    /// [`retry_releases`]).
    pub(crate) async fn release_now(mut self, refused: &[usize]) {
        self.armed = false;
        let mut skip = self.untouched();
        for &node in refused {
            if !skip.contains(&node) {
                skip.push(node);
            }
        }
        let (released, failed) = self
            .inner
            .release_except(
                self.keys,
                self.token,
                &self.hand_off,
                self.node_timeout,
                &skip,
            )
            .await;
        tracing::debug!(
            deleted = released.deleted,
            skipped = skip.len(),
            unreachable = failed.len(),
            "rolled back a failed attempt"
        );
        for (node, _) in failed {
            let release = Pending {
                keys: self.keys.clone(),
                token: self.token.clone(),
                // By the time it is answered the waiter may have acquired or given up.
                hand_off: self.hand_off.without_requeue(),
                node_timeout: self.node_timeout,
                expires: self.keys_expire,
            };
            self.inner.retries().push(node, release);
        }
    }

    /// The nodes no request has been sent to since the attempt began.
    fn untouched(&self) -> Vec<usize> {
        let nodes = self.inner.all_nodes().iter().zip(&self.sent_before);
        let counts = nodes.map(|(node, before)| node.sent() == *before);
        counts
            .enumerate()
            .filter(|(_, untouched)| *untouched)
            .map(|(i, _)| i)
            .collect()
    }
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if self.armed {
            // Cancelled: the waiter is leaving the line, so it is not put back.
            spawn_release(
                self.inner.clone(),
                self.keys.clone(),
                self.token.clone(),
                self.hand_off.without_requeue(),
                self.node_timeout,
                self.untouched(),
            );
        }
    }
}

/// Best-effort release in the background, when a tokio runtime is running, on every node but
/// those in `skip`.
pub(crate) fn spawn_release(
    inner: Arc<Inner>,
    keys: Keys,
    token: LockToken,
    hand_off: HandOff,
    node_timeout: Duration,
    skip: Vec<usize>,
) {
    let spawned = crate::sync::spawn(async move {
        let (released, failed) = inner
            .release_except(&keys, &token, &hand_off, node_timeout, &skip)
            .await;
        tracing::debug!(
            deleted = released.deleted,
            unreachable = failed.len(),
            "released in the background"
        );
    });
    if !spawned {
        tracing::warn!("no tokio runtime to release the lock from Drop; it expires at its TTL");
    }
}

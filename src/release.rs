//! Releases: compare-and-delete on every node, the rollback of a failed attempt (including its
//! cancellation), and the background releases that outlive the call that started them.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::{HandOff, Keys};
use crate::node::Node;
use crate::redlock::{Redlock, Released, WeakRedlock};
use crate::token::LockToken;

/// The first pause of a node's rollback retries; it doubles while the node does not answer, up
/// to [`RETRY_PAUSE_MAX`], and starts over once it does.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);

/// See [`RETRY_PAUSE_MIN`].
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

impl Redlock {
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
            let started = Instant::now();
            let reply = keys.release_on(node, token.expose(), hand_off, node_timeout).await;
            tracing::debug!(node = node.id(), elapsed = ?started.elapsed(), reply = ?reply.as_ref().map_err(NodeError::kind), "release");
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

    /// The holder's release: compare-and-delete on every node but those in `skip` (their
    /// acquire request is still in flight: they are released behind it, in the background),
    /// handed to the line. Returns as soon as a quorum of the nodes asked has confirmed, or
    /// enough failed that no quorum can; the releases still in flight finish in the
    /// background. The skipped nodes confirm nothing: they count as neither.
    pub(crate) async fn release_at_quorum(
        &self,
        keys: &Keys,
        token: &LockToken,
        hand_off: &HandOff,
        node_timeout: Duration,
        skip: &[usize],
    ) -> (Released, Vec<NodeError>) {
        let (outcome, stragglers) = self
            .fan_out_except(
                skip,
                |rl, i| {
                    let (keys, token, hand_off) = (keys.clone(), token.clone(), hand_off.clone());
                    async move {
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

    /// Hands a rollback release that got no answer to node `node`'s retry task, starting the
    /// task if the node has none.
    fn retry_release(&self, node: usize, release: Pending) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(queue) = self.retries().queues.get(node) else {
            return;
        };
        let mut queue = lock(queue);
        queue.pending.push(release);
        if !queue.worker {
            queue.worker = true;
            runtime.spawn(retry_releases(self.downgrade(), node));
        }
    }

    /// Sends `release` to node `node` once; `true` when the node answered.
    async fn resend(&self, node: usize, release: &Pending) -> bool {
        let token = release.token.expose();
        let sent = release
            .keys
            .release_on(self.node(node), token, &release.hand_off, release.node_timeout);
        sent.await.is_ok()
    }
}

/// Releases a token on every node unless disarmed: on failure explicitly, on cancellation from
/// `Drop` in the background.
pub(crate) struct Rollback<'a> {
    redlock: &'a Redlock,
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
        redlock: &'a Redlock,
        keys: &'a Keys,
        token: &'a LockToken,
        hand_off: HandOff,
        node_timeout: Duration,
        keys_expire: Instant,
    ) -> Self {
        Rollback {
            redlock,
            keys,
            token,
            hand_off,
            node_timeout,
            keys_expire,
            sent_before: redlock.all_nodes().iter().map(Node::sent).collect(),
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
            .redlock
            .release_except(self.keys, self.token, &self.hand_off, self.node_timeout, &skip)
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
                hand_off: self.hand_off.clone(),
                node_timeout: self.node_timeout,
                expires: self.keys_expire,
            };
            self.redlock.retry_release(node, release);
        }
    }

    /// The nodes no request has been sent to since the attempt began.
    fn untouched(&self) -> Vec<usize> {
        let nodes = self.redlock.all_nodes().iter().zip(&self.sent_before);
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
                self.redlock.clone(),
                self.keys.clone(),
                self.token.clone(),
                HandOff::to_line(self.hand_off.reserve),
                self.node_timeout,
                self.untouched(),
            );
        }
    }
}

/// Best-effort release in the background, when a tokio runtime is running, on every node but
/// those in `skip`.
pub(crate) fn spawn_release(
    redlock: Redlock,
    keys: Keys,
    token: LockToken,
    hand_off: HandOff,
    node_timeout: Duration,
    skip: Vec<usize>,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                let (released, failed) = redlock
                    .release_except(&keys, &token, &hand_off, node_timeout, &skip)
                    .await;
                tracing::debug!(
                    deleted = released.deleted,
                    unreachable = failed.len(),
                    "released in the background"
                );
            });
        }
        Err(_) => {
            tracing::warn!(
                key = keys.iter().next(),
                "no tokio runtime to release the lock from Drop; it expires at its TTL"
            )
        }
    }
}

/// Rollback releases that got no answer, per node, each node's retried by one background task
/// while it has any: a client that meets a down node on every attempt keeps one task for it,
/// not one per attempt.
#[derive(Debug)]
pub(crate) struct Retries {
    queues: Box<[Mutex<Queue>]>,
}

#[derive(Debug, Default)]
struct Queue {
    /// Oldest first.
    pending: Vec<Pending>,
    /// Whether the node's retry task is running.
    worker: bool,
}

/// One release to send again.
#[derive(Debug)]
struct Pending {
    keys: Keys,
    token: LockToken,
    hand_off: HandOff,
    node_timeout: Duration,
    /// Past this, the keys have expired on their own and the release is moot.
    expires: Instant,
}

impl Retries {
    pub(crate) fn new(node_count: usize) -> Self {
        Retries {
            queues: (0..node_count).map(|_| Mutex::default()).collect(),
        }
    }

    /// The live releases queued for `node`, taken out; `None` (and the node's task marked as
    /// gone, under the same lock) when there are none.
    fn take(&self, node: usize) -> Option<Vec<Pending>> {
        let mut queue = lock(self.queues.get(node)?);
        let now = Instant::now();
        queue.pending.retain(|release| release.expires > now);
        if queue.pending.is_empty() {
            queue.worker = false;
            return None;
        }
        Some(std::mem::take(&mut queue.pending))
    }

    /// Puts releases taken by [`take`](Self::take) back, ahead of those queued since.
    fn put_back(&self, node: usize, releases: Vec<Pending>) {
        if let Some(queue) = self.queues.get(node) {
            lock(queue).pending.splice(0..0, releases);
        }
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// The retry task of one node: re-sends its queued releases until each is answered or its keys
/// have expired, pausing between rounds. It holds the client weakly, only while sending, so it
/// ends with the client. Each round sends the oldest release first and the rest only once that
/// one is answered: a node that does not answer costs one request per round, and its
/// reconnections are paced by the node's own backoff.
async fn retry_releases(client: WeakRedlock, node: usize) {
    let mut pause = RETRY_PAUSE_MIN;
    loop {
        tokio::time::sleep(pause).await;
        let Some(rl) = client.upgrade() else {
            return;
        };
        let Some(mut due) = rl.retries().take(node) else {
            return;
        };
        let oldest = due.remove(0);
        let answered = rl.resend(node, &oldest).await;
        let unanswered = if answered {
            let replies = futures::future::join_all(due.iter().map(|r| rl.resend(node, r)));
            let replies = replies.await;
            let unanswered = due.into_iter().zip(replies).filter(|(_, ok)| !ok);
            unanswered.map(|(release, _)| release).collect()
        } else {
            due.insert(0, oldest);
            due
        };
        pause = match unanswered.is_empty() {
            true => RETRY_PAUSE_MIN,
            false => (pause * 2).min(RETRY_PAUSE_MAX),
        };
        rl.retries().put_back(node, unanswered);
    }
}

//! The rollback releases that got no answer, re-sent by one background task per node while it
//! has any: a client that meets a down node on every attempt keeps one task for it, not one per
//! attempt. The tasks hold the nodes weakly, so they end with the client.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::keys::{HandOff, Keys};
use crate::node::Node;
use crate::seam;
use crate::sync::lock;
use crate::token::LockToken;

/// The first pause of a node's rollback retries; it doubles while the node does not answer, up
/// to [`RETRY_PAUSE_MAX`], and starts over once it does.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);

/// See [`RETRY_PAUSE_MIN`].
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Rollback releases that got no answer, per node, each node's retried by one background task
/// while it has any: a client that meets a down node on every attempt keeps one task for it,
/// not one per attempt.
#[derive(Debug)]
pub(crate) struct Retries {
    nodes: Weak<[Node]>,
    queues: Arc<[Mutex<Queue>]>,
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
pub(crate) struct Pending {
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) hand_off: HandOff,
    pub(crate) node_timeout: Duration,
    /// Past this, the keys have expired on their own and the release is moot.
    pub(crate) expires: Instant,
}

impl Pending {
    /// Sends this release to `node` once; `true` when the node answered.
    async fn resend(&self, node: &Node) -> bool {
        let token = self.token.expose();
        let sent = self
            .keys
            .release_on(node, token, &self.hand_off, self.node_timeout);
        sent.await.is_ok()
    }
}

impl Retries {
    pub(crate) fn new(nodes: &Arc<[Node]>) -> Self {
        Retries {
            nodes: Arc::downgrade(nodes),
            queues: (0..nodes.len()).map(|_| Mutex::default()).collect(),
        }
    }

    /// Hands a rollback release that got no answer to node `node`'s retry task, starting the
    /// task if the node has none.
    pub(crate) fn push(&self, node: usize, release: Pending) {
        let Some(queue) = self.queues.get(node) else {
            return;
        };
        let mut queue = lock(queue);
        if queue.worker {
            queue.pending.push(release);
            return;
        }
        let task = retry_releases(self.nodes.clone(), self.queues.clone(), node);
        if crate::sync::spawn(task) {
            queue.pending.push(release);
            queue.worker = true;
        }
    }

    /// The live releases queued for `node`, taken out; `None` (and the node's task marked as
    /// gone, under the same lock) when there are none.
    fn take(queues: &[Mutex<Queue>], node: usize) -> Option<Vec<Pending>> {
        let mut queue = lock(queues.get(node)?);
        let now = seam::now();
        queue.pending.retain(|release| release.expires > now);
        if queue.pending.is_empty() {
            queue.worker = false;
            return None;
        }
        Some(std::mem::take(&mut queue.pending))
    }

    /// Puts releases taken by [`take`](Self::take) back, ahead of those queued since.
    fn put_back(queues: &[Mutex<Queue>], node: usize, releases: Vec<Pending>) {
        if let Some(queue) = queues.get(node) {
            lock(queue).pending.splice(0..0, releases);
        }
    }
}

/// The retry task of one node: re-sends its queued releases until each is answered or its keys
/// have expired, pausing between rounds. It holds the client weakly, only while sending, so it
/// ends with the client. Each round sends the oldest release first and the rest only once that
/// one is answered: a node that does not answer costs one request per round, and its
/// reconnections are paced by the node's own backoff.
async fn retry_releases(nodes: Weak<[Node]>, queues: Arc<[Mutex<Queue>]>, node: usize) {
    let mut pause = RETRY_PAUSE_MIN;
    loop {
        tokio::time::sleep(pause).await;
        let Some(nodes) = nodes.upgrade() else {
            return;
        };
        let (Some(target), Some(mut due)) = (nodes.get(node), Retries::take(&queues, node)) else {
            return;
        };
        let oldest = due.remove(0);
        let answered = oldest.resend(target).await;
        let unanswered = if answered {
            let replies = futures::future::join_all(due.iter().map(|r| r.resend(target)));
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
        Retries::put_back(&queues, node, unanswered);
    }
}

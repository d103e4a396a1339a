//! Releases: compare-and-delete on every node, the rollback of a failed attempt (including its
//! cancellation), and the background releases that outlive the call that started them.

use std::time::{Duration, Instant};

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::{HandOff, Keys};
use crate::redlock::{Redlock, Released};
use crate::token::LockToken;

impl Redlock {
    /// Compare-and-delete on every node but those in `skip` (counted as `absent`: they are
    /// released elsewhere or set nothing), waiting for each (bounded by `node_timeout`). Each
    /// node hands a released key to the head of its line, if anybody waits.
    pub(crate) async fn release_except(
        &self,
        keys: &Keys,
        token: &LockToken,
        hand_off: &HandOff,
        node_timeout: Duration,
        skip: &[usize],
    ) -> (Released, Vec<NodeError>) {
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
            absent: skip.len(),
        };
        let mut failed = Vec::new();
        for (i, reply) in replies {
            match reply {
                Ok(true) => released.deleted += 1,
                Ok(false) => released.absent += 1,
                Err(e) => {
                    self.counters().node_error(i, &e);
                    failed.push(e)
                }
            }
        }
        (released, failed)
    }

    /// The holder's release: compare-and-delete on every node but those in `skip` (counted as
    /// `absent`: they are released behind their acquire request), handed to the line. Returns
    /// as soon as a quorum has confirmed, or enough nodes failed that no quorum can; the
    /// releases still in flight finish in the background.
    pub(crate) async fn release_at_quorum(
        &self,
        keys: &Keys,
        token: &LockToken,
        hand_off: &HandOff,
        node_timeout: Duration,
        skip: &[usize],
    ) -> (Released, Vec<NodeError>) {
        let (outcome, stragglers) = self
            .fan_out(
                |rl, i| {
                    let sent = (!skip.contains(&i))
                        .then(|| (keys.clone(), token.clone(), hand_off.clone()));
                    async move {
                        let Some((keys, token, hand_off)) = sent else {
                            return Ok(None);
                        };
                        let node = rl.node(i);
                        keys.release_on(node, token.expose(), &hand_off, node_timeout)
                            .await
                            .map(Some)
                    }
                },
                // Every answer confirms: the key is gone from that node either way.
                Ok::<_, NodeErrorKind>,
                None,
            )
            .await;
        stragglers.finish();
        let deleted = outcome.yes.iter().filter(|(_, r)| *r == Some(true)).count();
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
    pub(crate) redlock: &'a Redlock,
    pub(crate) keys: &'a Keys,
    pub(crate) token: &'a LockToken,
    /// Puts a waiter's failed attempt back in its place in line.
    pub(crate) hand_off: HandOff,
    pub(crate) node_timeout: Duration,
    pub(crate) keys_expire: Instant,
    pub(crate) armed: bool,
}

impl Rollback<'_> {
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases now on every node except those in `refused` (which set nothing).
    pub(crate) async fn release_now(mut self, refused: &[usize]) {
        self.armed = false;
        let (released, failed) = self
            .redlock
            .release_except(
                self.keys,
                self.token,
                &self.hand_off,
                self.node_timeout,
                refused,
            )
            .await;
        tracing::debug!(
            deleted = released.deleted,
            unreachable = failed.len(),
            "rolled back a failed attempt"
        );
        // A release that got no answer may never have been written (say, the node's connection
        // was being replaced): keep sending it in the background until the node answers or the
        // keys have expired anyway.
        let unanswered: Vec<usize> = failed
            .iter()
            .filter_map(|e| {
                self.redlock
                    .all_nodes()
                    .iter()
                    .position(|n| n.id() == e.node())
            })
            .collect();
        if !unanswered.is_empty() {
            spawn_release_until(
                self.redlock.clone(),
                self.keys.clone(),
                self.token.clone(),
                self.hand_off.clone(),
                self.node_timeout,
                self.keys_expire,
                unanswered,
            );
        }
    }
}

/// Re-sends a rollback release to each of `nodes` until it answers or `keys_expire` passes,
/// backing off from the node timeout up to a quarter of a second between tries.
fn spawn_release_until(
    redlock: Redlock,
    keys: Keys,
    token: LockToken,
    hand_off: HandOff,
    node_timeout: Duration,
    keys_expire: Instant,
    nodes: Vec<usize>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let retries = nodes.into_iter().map(|i| {
            let (redlock, keys, token, hand_off) = (&redlock, &keys, &token, &hand_off);
            async move {
                let mut pause = node_timeout;
                while Instant::now() < keys_expire {
                    let node = redlock.node(i);
                    if keys
                        .release_on(node, token.expose(), hand_off, node_timeout)
                        .await
                        .is_ok()
                    {
                        return;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
            }
        });
        futures::future::join_all(retries).await;
    });
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
                Vec::new(),
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

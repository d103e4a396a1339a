//! The fan-out: one request per node at once, votes counted as they arrive, the decision taken
//! as soon as it is known, and the requests still in flight finished in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::lock::LockToken;
use crate::quorum::{Decision, Tally, Vote};
use crate::redlock::Redlock;

/// What the nodes that answered a fan-out said, as far as the decision needed.
#[derive(Debug)]
pub(crate) struct Outcome<T> {
    pub(crate) decision: Decision,
    /// Node index and value for each node that said yes.
    pub(crate) yes: Vec<(usize, T)>,
    /// Each node that said no, or failed.
    pub(crate) no: Vec<NodeError>,
    /// Index of each node that said no (as opposed to failing or not answering): the request
    /// took no effect there.
    pub(crate) refused: Vec<usize>,
}

/// One node's reply in a fan-out, tagged with the node's index.
type Reply<R> = Pin<Box<dyn Future<Output = (usize, Result<R, NodeError>)> + Send>>;

/// Requests still in flight when a fan-out was decided.
pub(crate) struct Stragglers<R> {
    pending: FuturesUnordered<Reply<R>>,
    /// Per node, whether its request is among `pending`.
    in_flight: Vec<bool>,
}

impl<R: Send + 'static> Stragglers<R> {
    /// Lets the remaining requests run to completion in the background (each is bounded by the
    /// node timeout).
    pub(crate) fn finish(self) {
        self.spawn(None);
    }

    /// As [`finish`](Self::finish), and releases the token on each straggling node once its
    /// request has completed and `gate` is closed: immediately for a failed attempt (pass a
    /// closed gate), or when the holder releases.
    pub(crate) fn finish_then_release(self, cleanup: Cleanup) {
        self.spawn(Some(cleanup));
    }

    /// A gate over this fan-out's nodes, closed or open, with the nodes still in flight.
    pub(crate) fn gate(&self, closed: bool) -> Arc<ReleaseGate> {
        Arc::new(ReleaseGate {
            state: Mutex::new(GateState {
                closed,
                in_flight: self.in_flight.clone(),
            }),
        })
    }

    fn spawn(mut self, cleanup: Option<Cleanup>) {
        if self.pending.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            while let Some((i, _)) = self.pending.next().await {
                let Some(c) = cleanup.as_ref().filter(|c| c.gate.landed(i)) else {
                    continue;
                };
                let node = c.redlock.node(i);
                let _ = c
                    .keys
                    .release_on(node, c.token.expose(), false, c.node_timeout)
                    .await;
            }
        });
    }
}

/// Orders a holder's release after the acquire requests still in flight, so that each node gets
/// exactly one release, and always after its `SET` has executed (a release that overtook a late
/// `SET` would leave the key behind until its TTL).
///
/// When the holder releases, it [`close`](ReleaseGate::close)s the gate: it sends its own
/// release to the nodes whose acquire request has completed, and the straggler task releases
/// each remaining node as its request completes.
#[derive(Debug)]
pub(crate) struct ReleaseGate {
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    closed: bool,
    in_flight: Vec<bool>,
}

impl ReleaseGate {
    /// Closes the gate and returns the nodes whose acquire request is still in flight: the
    /// caller leaves those to the straggler task.
    pub(crate) fn close(&self) -> Vec<usize> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        let in_flight = state.in_flight.iter().enumerate();
        in_flight.filter(|(_, f)| **f).map(|(i, _)| i).collect()
    }

    /// Node `i`'s request has completed; `true` when the gate is closed, so the node must be
    /// released now.
    fn landed(&self, i: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = state.in_flight.get_mut(i) {
            *f = false;
        }
        state.closed
    }
}

/// What a straggling request needs to clean up after itself.
pub(crate) struct Cleanup {
    pub(crate) redlock: Redlock,
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) node_timeout: Duration,
    pub(crate) gate: Arc<ReleaseGate>,
}

impl Redlock {
    /// Sends one request per node concurrently and counts the answers as they arrive, stopping
    /// as soon as the outcome is known, or at `deadline`: nodes that have not answered by then
    /// count as timed out. `judge` turns a node's reply into a yes (with a value) or a no (with
    /// the reason).
    ///
    /// The requests still in flight at the decision are handed back as [`Stragglers`]: the
    /// caller lets them finish in the background, so that a slow node still gets the key (or
    /// still gets cleaned up) instead of the request being abandoned half-way.
    pub(crate) async fn fan_out<R, T, Fut>(
        &self,
        request: impl Fn(Redlock, usize) -> Fut,
        judge: impl Fn(R) -> Result<T, NodeErrorKind>,
        deadline: Option<Instant>,
    ) -> (Outcome<T>, Stragglers<R>)
    where
        Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
        R: Send + 'static,
    {
        let nodes = &self.all_nodes();
        let mut pending: FuturesUnordered<Reply<R>> = (0..nodes.len())
            .map(|i| {
                let reply = request(self.clone(), i);
                Box::pin(async move { (i, reply.await) }) as Reply<R>
            })
            .collect();
        let mut answered = vec![false; nodes.len()];
        let mut tally = Tally::new(nodes.len());
        let mut outcome = Outcome {
            decision: Decision::Pending,
            yes: Vec::new(),
            no: Vec::new(),
            refused: Vec::new(),
        };
        let started = Instant::now();
        while outcome.decision == Decision::Pending {
            let next = match deadline {
                None => pending.next().await,
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline.into(), pending.next()).await {
                        Ok(next) => next,
                        Err(_deadline_passed) => {
                            let waited = started.elapsed();
                            let late = answered.iter().enumerate().filter(|(_, a)| !**a);
                            for (i, _) in late {
                                let timeout = NodeErrorKind::Timeout(waited);
                                outcome.no.push(NodeError::new(nodes[i].id(), timeout));
                            }
                            outcome.decision = Decision::Lost;
                            break;
                        }
                    }
                }
            };
            let Some((i, reply)) = next else {
                break;
            };
            answered[i] = true;
            let node = nodes[i].id();
            let vote = match reply.map(&judge) {
                Ok(Ok(value)) => {
                    tracing::debug!(node, elapsed = ?started.elapsed(), "yes");
                    outcome.yes.push((i, value));
                    Vote::Yes
                }
                Ok(Err(kind)) => {
                    tracing::debug!(node, elapsed = ?started.elapsed(), reason = %kind, "no");
                    outcome.no.push(NodeError::new(node, kind));
                    outcome.refused.push(i);
                    Vote::No
                }
                Err(e) => {
                    tracing::debug!(node, elapsed = ?started.elapsed(), error = %e.kind(), "failed");
                    self.counters().node_error(i, &e);
                    outcome.no.push(e);
                    Vote::No
                }
            };
            outcome.decision = tally.record(vote);
        }
        let in_flight = answered.iter().map(|a| !a).collect();
        (outcome, Stragglers { pending, in_flight })
    }
}

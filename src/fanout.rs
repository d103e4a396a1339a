//! The fan-out: one request per node at once, votes counted as they arrive, the decision taken
//! as soon as it is known, and the requests still in flight finished in the background.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

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

/// Requests still in flight when a fan-out was decided.
///
/// `F` is a node's request, resolving to the node's index and its reply.
pub(crate) struct Stragglers<F> {
    pending: FuturesUnordered<F>,
    /// Per node, whether its request is among `pending`.
    in_flight: Vec<bool>,
}

impl<F, R> Stragglers<F>
where
    F: Future<Output = (usize, Result<R, NodeError>)> + Send + 'static,
    R: Send + 'static,
{
    /// Lets the remaining requests run to completion in the background (each is bounded by the
    /// node timeout). They must not just be dropped: a request the connection has not written
    /// yet would then never be sent.
    pub(crate) fn finish(self) {
        self.spawn(None);
    }

    /// As [`finish`](Self::finish), and releases the token on each straggling node once its
    /// request has completed: the rollback of a failed attempt.
    pub(crate) fn finish_then_release(self, cleanup: Cleanup) {
        let gate = ReleaseGate::new(true, self.in_flight.clone());
        self.spawn(Some((cleanup, gate)));
    }

    /// For the attempt that won: as [`finish`](Self::finish), and once the holder releases,
    /// releases each straggling node after its request has completed. Returns the gate the
    /// holder's release goes through; `None` when nothing is left in flight.
    pub(crate) fn finish_before_release(mut self, cleanup: Cleanup) -> Option<Arc<ReleaseGate>> {
        self.collect_landed();
        if self.pending.is_empty() {
            return None;
        }
        let gate = ReleaseGate::new(false, self.in_flight.clone());
        self.spawn(Some((cleanup, gate.clone())));
        Some(gate)
    }

    /// Takes in the requests that have completed by now, without waiting.
    fn collect_landed(&mut self) {
        while let Some(Some((i, _))) = self.pending.next().now_or_never() {
            if let Some(f) = self.in_flight.get_mut(i) {
                *f = false;
            }
        }
    }

    fn spawn(mut self, cleanup: Option<(Cleanup, Arc<ReleaseGate>)>) {
        // Most stragglers of a healthy fan-out have landed by now: only those still in flight,
        // or landed but due a release, need a task.
        let mut due = Vec::new();
        while let Some(Some((i, _))) = self.pending.next().now_or_never() {
            if cleanup.as_ref().is_some_and(|(_, gate)| gate.landed(i)) {
                due.push(i);
            }
        }
        if self.pending.is_empty() && due.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let release = |i: usize| {
                let cleanup = cleanup.as_ref().map(|(c, _)| c);
                async move {
                    let Some(c) = cleanup else { return };
                    let node = c.redlock.node(i);
                    let token = c.token.expose();
                    let _ = c
                        .keys
                        .release_on(node, token, c.announce, c.node_timeout)
                        .await;
                }
            };
            for i in due {
                release(i).await;
            }
            while let Some((i, _)) = self.pending.next().await {
                if cleanup.as_ref().is_some_and(|(_, gate)| gate.landed(i)) {
                    release(i).await;
                }
            }
        });
    }
}

/// Orders a holder's release after the acquire requests still in flight, so that each node gets
/// exactly one release, and always after its `SET` has executed (a release that overtook a late
/// `SET` — say, one waiting for the node's connection to be re-established — would leave the
/// key behind until its TTL).
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
    fn new(closed: bool, in_flight: Vec<bool>) -> Arc<Self> {
        Arc::new(ReleaseGate {
            state: Mutex::new(GateState { closed, in_flight }),
        })
    }

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

/// What straggling acquire requests need to clean up after themselves.
pub(crate) struct Cleanup {
    pub(crate) redlock: Redlock,
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) node_timeout: Duration,
    /// Whether the releases are the holder's (announced to waiters) or a rollback's (silent).
    pub(crate) announce: bool,
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
    ) -> (
        Outcome<T>,
        Stragglers<impl Future<Output = (usize, Result<R, NodeError>)> + Send + 'static>,
    )
    where
        Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
        R: Send + 'static,
    {
        let nodes = &self.all_nodes();
        let mut pending: FuturesUnordered<_> = (0..nodes.len())
            .map(|i| {
                let reply = request(self.clone(), i);
                async move { (i, reply.await) }
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

//! The fan-out: one request per node at once, votes counted as they arrive, the decision taken
//! as soon as it is known, and the requests still in flight finished in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::oneshot;

use crate::error::{NodeError, NodeErrorKind};
use crate::inner::Inner;
use crate::keys::{HandOff, Keys};
use crate::quorum::{Decision, Tally, Vote};
use crate::seam;
use crate::sync::lock;
use crate::token::LockToken;

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

impl<T> Outcome<T> {
    /// Records node `i`'s judged reply, `started` after the fan-out began.
    fn record(
        &mut self,
        inner: &Inner,
        i: usize,
        reply: Result<Result<T, NodeErrorKind>, NodeError>,
        started: Instant,
    ) -> Vote {
        let node = inner.node(i).id();
        match reply {
            Ok(Ok(value)) => {
                tracing::debug!(node, elapsed = ?seam::elapsed(started), "yes");
                self.yes.push((i, value));
                Vote::Yes
            }
            Ok(Err(kind)) => {
                tracing::debug!(node, elapsed = ?seam::elapsed(started), reason = %kind, "no");
                self.no.push(NodeError::new(node, kind));
                self.refused.push(i);
                Vote::No
            }
            Err(e) => {
                tracing::debug!(node, elapsed = ?seam::elapsed(started), error = %e.kind(), "failed");
                inner.counters().node_error(i, &e);
                self.no.push(e);
                Vote::No
            }
        }
    }
}

/// Requests still in flight when a fan-out was decided.
pub(crate) struct Stragglers<F> {
    requests: InFlight<F>,
    /// For the counters: a straggler's failure is a node error like any other.
    inner: Arc<Inner>,
}

impl<F, R> Stragglers<F>
where
    F: Future<Output = Result<R, NodeError>> + Send + 'static,
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
        let gate = ReleaseGate::new(true, self.requests.in_flight());
        self.spawn(Some((cleanup, gate)));
    }

    /// For the attempt that won: as [`finish`](Self::finish), and once the holder releases,
    /// releases each straggling node after its request has completed. Returns the gate the
    /// holder's release goes through; `None` when nothing is left in flight.
    pub(crate) fn finish_before_release(mut self, cleanup: Cleanup) -> Option<Arc<ReleaseGate>> {
        self.collect_landed();
        if self.requests.is_empty() {
            return None;
        }
        let gate = ReleaseGate::new(false, self.requests.in_flight());
        self.spawn(Some((cleanup, gate.clone())));
        Some(gate)
    }

    /// Waits for every request still in flight (each is bounded by the node timeout) and
    /// records its answer in `outcome`, whose decision stays as it was. For a failed attempt
    /// that is going to wait anyway: its rollback then reaches only the nodes that may have set
    /// the key, instead of every node that had not answered at the decision.
    pub(crate) async fn hear_out<T>(
        &mut self,
        outcome: &mut Outcome<T>,
        judge: impl Fn(R) -> Result<T, NodeErrorKind>,
    ) {
        let started = seam::now();
        while let Some((i, reply)) = self.requests.next().await {
            outcome.record(&self.inner, i, reply.map(&judge), started);
        }
    }

    /// Takes in the requests that have completed by now, without waiting.
    fn collect_landed(&mut self) {
        while let Some(Some((i, reply))) = self.requests.next().now_or_never() {
            self.count(i, &reply);
        }
    }

    fn count(&self, node: usize, reply: &Result<R, NodeError>) {
        if let Err(e) = reply {
            self.inner.counters().node_error(node, e);
        }
    }

    fn spawn(mut self, cleanup: Option<(Cleanup, Arc<ReleaseGate>)>) {
        // Most stragglers of a healthy fan-out have landed by now: only those still in flight,
        // or landed but due a release, need a task.
        let mut due = Vec::new();
        while let Some(Some((i, reply))) = self.requests.next().now_or_never() {
            self.count(i, &reply);
            if cleanup.as_ref().is_some_and(|(_, gate)| gate.landed(i)) {
                due.push(i);
            }
        }
        if self.requests.is_empty() && due.is_empty() {
            return;
        }
        crate::sync::spawn(async move {
            let release = |i: usize| {
                let cleanup = cleanup.as_ref().map(|(c, _)| c);
                async move {
                    let Some(c) = cleanup else { return };
                    let node = c.inner.node(i);
                    let token = c.token.expose();
                    let _ = c
                        .keys
                        .release_on(node, token, &c.hand_off, c.node_timeout)
                        .await;
                }
            };
            for i in due {
                release(i).await;
            }
            while let Some((i, reply)) = self.requests.next().await {
                self.count(i, &reply);
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
/// When the holder releases, it closes the gate ([`close_for_release`]): it sends its release
/// to every node, and for a node whose acquire request is still in flight, only once the
/// straggler task says that request has completed — so that node's answer counts towards the
/// release's quorum too. A lock dropped unreleased [`close`](ReleaseGate::close)s it instead,
/// and the straggler task releases each remaining node as its request completes.
///
/// [`close_for_release`]: ReleaseGate::close_for_release
#[derive(Debug)]
pub(crate) struct ReleaseGate {
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    closed: bool,
    in_flight: Vec<bool>,
    /// Per node, the holder's release waiting for its acquire request to complete.
    releasing: Vec<Option<oneshot::Sender<()>>>,
}

impl ReleaseGate {
    fn new(closed: bool, in_flight: Vec<bool>) -> Arc<Self> {
        let releasing = in_flight.iter().map(|_| None).collect();
        Arc::new(ReleaseGate {
            state: Mutex::new(GateState {
                closed,
                in_flight,
                releasing,
            }),
        })
    }

    /// Closes the gate for the holder's release. Returns, per node whose acquire request is
    /// still in flight, a signal that completes once that request has: the holder sends its
    /// release there then. (If the holder gives up waiting, the straggler task releases it.)
    pub(crate) fn close_for_release(&self) -> Vec<(usize, oneshot::Receiver<()>)> {
        let mut state = lock(&self.state);
        state.closed = true;
        let GateState {
            in_flight,
            releasing,
            ..
        } = &mut *state;
        let mut signals = Vec::new();
        for (i, (flying, slot)) in in_flight.iter().zip(releasing.iter_mut()).enumerate() {
            if *flying {
                let (landed, signal) = oneshot::channel();
                *slot = Some(landed);
                signals.push((i, signal));
            }
        }
        signals
    }

    /// Closes the gate and returns the nodes whose acquire request is still in flight: the
    /// caller leaves those to the straggler task.
    pub(crate) fn close(&self) -> Vec<usize> {
        let mut state = lock(&self.state);
        state.closed = true;
        let in_flight = state.in_flight.iter().enumerate();
        in_flight.filter(|(_, f)| **f).map(|(i, _)| i).collect()
    }

    /// Node `i`'s request has completed; `true` when the gate is closed and the holder's
    /// release is not waiting to go there itself, so the straggler task must release it now.
    fn landed(&self, i: usize) -> bool {
        let mut state = lock(&self.state);
        if let Some(f) = state.in_flight.get_mut(i) {
            *f = false;
        }
        let holder = state.releasing.get_mut(i).and_then(Option::take);
        match holder {
            Some(release) => release.send(()).is_err(),
            None => state.closed,
        }
    }
}

/// What straggling acquire requests need to clean up after themselves.
pub(crate) struct Cleanup {
    pub(crate) inner: Arc<Inner>,
    pub(crate) keys: Keys,
    pub(crate) token: LockToken,
    pub(crate) node_timeout: Duration,
    /// How a released key is passed on to the line.
    pub(crate) hand_off: HandOff,
}

impl Inner {
    /// Sends one request per node concurrently and counts the answers as they arrive, stopping
    /// as soon as the outcome is known, or at `deadline`: nodes that have not answered by then
    /// count as timed out. `judge` turns a node's reply into a yes (with a value) or a no (with
    /// the reason).
    ///
    /// The requests still in flight at the decision are handed back as [`Stragglers`]: the
    /// caller lets them finish in the background, so that a slow node still gets the key (or
    /// still gets cleaned up) instead of the request being abandoned half-way.
    pub(crate) async fn fan_out<R, T, Fut>(
        self: &Arc<Self>,
        request: impl Fn(Arc<Inner>, usize) -> Fut,
        judge: impl Fn(R) -> Result<T, NodeErrorKind>,
        deadline: Option<Instant>,
    ) -> (Outcome<T>, Stragglers<Fut>)
    where
        Fut: Future<Output = Result<R, NodeError>> + Send + 'static,
        R: Send + 'static,
    {
        let nodes = &self.all_nodes();
        let requests = (0..nodes.len()).map(|i| Some(request(self.clone(), i)));
        let mut pending = InFlight::new(requests);
        let mut tally = Tally::new(nodes.len());
        let mut outcome = Outcome {
            decision: Decision::Pending,
            yes: Vec::new(),
            no: Vec::new(),
            refused: Vec::new(),
        };
        let started = seam::now();
        while outcome.decision == Decision::Pending {
            let next = match deadline {
                None => pending.next().await,
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline.into(), pending.next()).await {
                        Ok(next) => next,
                        Err(_deadline_passed) => {
                            let waited = seam::elapsed(started);
                            for i in pending.in_flight_nodes() {
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
            let vote = outcome.record(self, i, reply.map(&judge), started);
            outcome.decision = tally.record(vote);
        }
        let stragglers = Stragglers {
            requests: pending,
            inner: self.clone(),
        };
        (outcome, stragglers)
    }
}

/// The requests of one fan-out, one per node, polled together: each wake-up polls those still
/// pending. With a handful of nodes that costs less than a `FuturesUnordered`'s per-request
/// task, waker and queue.
struct InFlight<F> {
    /// By node index; `None` once the request has completed.
    slots: Vec<Option<Pin<Box<F>>>>,
    pending: usize,
}

impl<F: Future> InFlight<F> {
    /// One slot per node: its request, or `None` for a node not asked.
    fn new(requests: impl Iterator<Item = Option<F>>) -> Self {
        let slots: Vec<_> = requests.map(|f| f.map(Box::pin)).collect();
        InFlight {
            pending: slots.iter().filter(|s| s.is_some()).count(),
            slots,
        }
    }

    fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Per node, whether its request is still in flight.
    fn in_flight(&self) -> Vec<bool> {
        self.slots.iter().map(Option::is_some).collect()
    }

    fn in_flight_nodes(&self) -> impl Iterator<Item = usize> + '_ {
        let slots = self.slots.iter().enumerate();
        slots.filter(|(_, s)| s.is_some()).map(|(i, _)| i)
    }

    /// The next request to complete, with its node's index; `None` when none is left.
    async fn next(&mut self) -> Option<(usize, F::Output)> {
        futures::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, F::Output)>> {
        if self.pending == 0 {
            return Poll::Ready(None);
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(request) = slot else { continue };
            if let Poll::Ready(reply) = request.as_mut().poll(cx) {
                *slot = None;
                self.pending -= 1;
                return Poll::Ready(Some((i, reply)));
            }
        }
        Poll::Pending
    }
}

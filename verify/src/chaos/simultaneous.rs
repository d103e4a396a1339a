//! The workload of scenario 11 ([`SimultaneousStarts`]): groups of clients that start every
//! round at the same instant on one resource, so that their votes split, and the attempt at
//! which each round was won.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::Barrier;

use super::setup::Setup;
use super::shared::Shared;
use super::workload::Workload;
use crate::mutex;
use quorumlock_testkit::Op;

/// Attempts each client makes per round.
pub(super) const ROUND_ATTEMPTS: u32 = 6;

/// Clients in groups of `group` (client `g * group + m` is member `m` of group `g`; clients
/// past the last full group do nothing) that start each round at the same instant on
/// resource `g % resources`: up to [`ROUND_ATTEMPTS`] single attempts each, a jittered pause
/// between them, until it wins once.
pub(super) struct SimultaneousStarts {
    group: usize,
    groups: OnceLock<Vec<Group>>,
    /// Per round: the attempt at which the first client won (`None`: nobody won).
    rounds: Mutex<Vec<Option<u32>>>,
}

/// What the members of one group share.
struct Group {
    barrier: Barrier,
    /// Whether another round runs, as the group's leader decided.
    go_on: AtomicBool,
    /// The members that won this round, and at which attempt.
    round_wins: Mutex<Vec<(usize, u32)>>,
}

impl SimultaneousStarts {
    /// Clients in groups of `group`.
    pub(super) fn new(group: usize) -> Self {
        SimultaneousStarts {
            group,
            groups: OnceLock::new(),
            rounds: Mutex::new(Vec::new()),
        }
    }

    /// Per round so far: the attempt at which the first client won (`None`: nobody won).
    pub(super) fn rounds(&self) -> Vec<Option<u32>> {
        mutex::lock(&self.rounds).clone()
    }

    /// Member `m` of group `g`, on resource `r`: rounds until the run stops.
    async fn member(
        &self,
        shared: Arc<Shared>,
        client: usize,
        g: usize,
        m: usize,
        mut rng: StdRng,
    ) {
        let Some(group) = self.groups.get().and_then(|groups| groups.get(g)) else {
            return;
        };
        let (leader, r) = (m == 0, g % shared.setup.resources);
        // An invalid configuration is recorded as a failed attempt in every round: the member
        // still meets its group at the barrier, so that nobody waits there alone.
        let rl = shared.redlock_of(client);
        let resource = Setup::resource(r);
        loop {
            // The leader decides for the whole group whether another round runs, so that nobody
            // waits at the barrier alone.
            if leader {
                group.go_on.store(!shared.stopped(), Ordering::SeqCst);
            }
            group.barrier.wait().await;
            if !group.go_on.load(Ordering::SeqCst) {
                return;
            }
            let mut won_at = None;
            let rl = match &rl {
                Ok(rl) => rl,
                Err(e) => {
                    let now = Instant::now();
                    shared
                        .history
                        .record(Op::acquire_failed(client, &resource, now, now, e));
                    continue;
                }
            };
            for attempt in 1..=ROUND_ATTEMPTS {
                if let Some(mut lock) = shared.acquire(rl, client, &resource, true).await {
                    shared
                        .critical_section(client, r, &mut lock, &mut rng)
                        .await;
                    let _ = shared.release(client, lock).await;
                    won_at = Some(attempt);
                    break;
                }
                let low = shared
                    .setup
                    .retry_delay
                    .saturating_sub(shared.setup.retry_jitter);
                let high = shared.setup.retry_delay + shared.setup.retry_jitter;
                tokio::time::sleep(rng.random_range(low..=high)).await;
            }
            if let Some(attempt) = won_at {
                mutex::lock(&group.round_wins).push((client, attempt));
            }
            group.barrier.wait().await;
            if leader {
                let wins = std::mem::take(&mut *mutex::lock(&group.round_wins));
                let first = wins.iter().map(|(_, a)| *a).min();
                mutex::lock(&self.rounds).push(first);
            }
        }
    }
}

impl Workload for SimultaneousStarts {
    fn prepare(&self, shared: &Shared) {
        let groups = shared.setup.clients.checked_div(self.group).unwrap_or(0);
        let _ = self.groups.set(
            (0..groups)
                .map(|_| Group {
                    barrier: Barrier::new(self.group),
                    go_on: AtomicBool::new(true),
                    round_wins: Mutex::new(Vec::new()),
                })
                .collect(),
        );
    }

    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        let (g, m) = match self.group {
            0 => (usize::MAX, 0),
            group => (client / group, client % group),
        };
        Box::pin(async move { self.member(shared, client, g, m, rng).await })
    }
}

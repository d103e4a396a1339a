//! Scenario 18: separate clients, each its own `Redlock`, share one counting semaphore
//! ([`quorumlock::Semaphore`]) while masters are killed and restarted empty after a TTL, paused,
//! partitioned away, and slowed down.
//!
//! Each permit is recorded on its slot, `<semaphore>:permit:<i>`, so the history checks both
//! properties: per slot, the ordinary lock checks (leases never overlap; a witness and a
//! read–sleep–write register per slot); over the semaphore,
//! [`check_max_holders`](quorumlock_testkit::history::check_max_holders) (never more leases open at once than
//! permits) and a witness that admits as many clients as there are permits.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quorumlock::{Error, Permit, Semaphore};
use rand::rngs::StdRng;
use rand::Rng;

use super::ran::Ran;
use super::shared::{extend_ttl, long_hold_until, Shared};
use super::workload::Workload;
use super::Check;
use crate::mutex;
use quorumlock_testkit::history::peak_holders;
use quorumlock_testkit::{OccupancyWitness, Op, OpKind, Outcome, Releasing};

/// The semaphore the clients share.
pub(super) const SEMAPHORE: &str = "sem";

/// Its permits.
pub(super) const PERMITS: u32 = 3;

/// Chance that a client makes one attempt on each slot (`try_acquire`) instead of waiting in
/// every slot's line (`acquire`).
const TRY_CHANCE: f64 = 0.25;

/// Chance that a holder lets its permit lapse at its deadline instead of releasing it.
const LAPSE_CHANCE: f64 = 0.02;

/// The resource name of the semaphore's slot `slot`, as the library names it.
pub(super) fn slot_name(slot: usize) -> String {
    format!("{SEMAPHORE}:permit:{slot}")
}

/// The semaphore workload: the clients share one semaphore of `permits` permits, each slot
/// one of the setup's resources (`resources` must equal the permits: one witness and register
/// per slot).
pub(super) struct SharedSemaphore {
    permits: u32,
    /// The semaphore's own witness, which admits as many clients as it has permits.
    capacity: OnceLock<OccupancyWitness>,
}

impl SharedSemaphore {
    pub(super) fn new(permits: u32) -> Self {
        SharedSemaphore {
            permits,
            capacity: OnceLock::new(),
        }
    }
}

impl Workload for SharedSemaphore {
    fn lock_name(&self, r: usize) -> String {
        slot_name(r)
    }

    fn prepare(&self, shared: &Shared) {
        let permits = self.permits as usize;
        shared.history.watch_semaphore(SEMAPHORE, permits);
        let _ = self
            .capacity
            .set(shared.history.capacity_witness(SEMAPHORE, permits));
    }

    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move { run_client(&self, shared, client, rng).await })
    }
}

/// A client of the semaphore: takes a permit (waiting, or with one attempt per slot), does its
/// critical section on the permit's slot, and releases it (or lets it lapse), until the run
/// stops.
async fn run_client(
    workload: &SharedSemaphore,
    shared: Arc<Shared>,
    client: usize,
    mut rng: StdRng,
) {
    let permits = workload.permits;
    let semaphore = shared
        .redlock_of(client)
        .and_then(|rl| rl.semaphore(SEMAPHORE, permits));
    let semaphore = match semaphore {
        Ok(semaphore) => semaphore,
        Err(e) => {
            // Reported as this client's only acquire: the client checks then fail.
            let now = Instant::now();
            shared
                .history
                .record(Op::acquire_failed(client, SEMAPHORE, now, now, e));
            return;
        }
    };
    while !shared.stopped() {
        let once = rng.random_bool(TRY_CHANCE);
        let Some(mut permit) = shared.acquire_permit(&semaphore, client, once).await else {
            if once {
                // Every slot held, or the masters unreachable: back off as the retry policy would.
                let s = &shared.setup;
                let low = s.retry_delay.saturating_sub(s.retry_jitter);
                tokio::time::sleep(rng.random_range(low..=s.retry_delay + s.retry_jitter)).await;
            }
            continue;
        };
        shared
            .permit_section(workload.capacity.get(), client, &mut permit, &mut rng)
            .await;
        if rng.random_bool(LAPSE_CHANCE) {
            // Keep it to its deadline and walk away: the slot frees itself when its keys expire.
            shared.sleep_until(permit.deadline()).await;
            std::mem::forget(permit);
            continue;
        }
        let _ = shared.release_permit(client, permit).await;
        shared.think(client, &mut rng).await;
    }
}

impl Shared {
    /// Takes a permit of `semaphore` and records the attempt on the slot it got (or on the
    /// semaphore's name, when it got none).
    async fn acquire_permit(
        &self,
        semaphore: &Semaphore,
        client: usize,
        once: bool,
    ) -> Option<Permit> {
        let ttl = self.setup.ttl_of(client);
        let start = Instant::now();
        let result = if once {
            semaphore.try_acquire(ttl).await
        } else {
            semaphore.acquire(ttl).await
        };
        let end = Instant::now();
        match result {
            Ok(permit) => {
                self.history
                    .record(Op::permit_acquired(client, start, end, &permit));
                self.successes.fetch_add(1, Ordering::SeqCst);
                mutex::lock(&self.latencies).push(end - start);
                Some(permit)
            }
            Err(e) => {
                self.history
                    .record(Op::acquire_failed(client, SEMAPHORE, start, end, e));
                None
            }
        }
    }

    async fn extend_permit(
        &self,
        client: usize,
        permit: &mut Permit,
        ttl: Duration,
    ) -> Result<(), Error> {
        let start = Instant::now();
        let result = permit.extend(ttl).await;
        self.history.record(Op {
            client,
            resource: permit.resource().to_owned(),
            token: permit.token().expose().to_owned(),
            kind: OpKind::Extend,
            start,
            end: Instant::now(),
            outcome: match &result {
                Ok(()) => Outcome::Ok {
                    valid_until: Some(permit.deadline()),
                },
                Err(e) => Outcome::Failed {
                    reason: e.to_string(),
                },
            },
            fence: permit.fencing_token(),
        });
        result
    }

    async fn release_permit(
        &self,
        client: usize,
        permit: Permit,
    ) -> Result<quorumlock::Released, Error> {
        let releasing = Releasing::start_permit(&permit);
        let result = permit.release().await;
        self.history.record(releasing.finished(client, &result));
        result
    }

    /// The critical section on the permit's slot: enter the semaphore's witness (`capacity`) and
    /// the slot's, read–sleep–write the slot's registers while the lease has a safety margin
    /// left, maybe extend, leave before the deadline.
    async fn permit_section(
        &self,
        capacity: Option<&OccupancyWitness>,
        client: usize,
        permit: &mut Permit,
        rng: &mut StdRng,
    ) {
        let tuning = self.setup.tuning(client);
        let margin = tuning.margin();
        let long = tuning.long_hold_chance > 0.0 && rng.random_bool(tuning.long_hold_chance);
        let slot = permit.slot() as usize;
        let among_the_holders = capacity.map(|w| w.enter(client));
        let alone_on_the_slot = self.witnesses[slot].enter(client);
        let value = self.registers[slot].read();
        let most = if long {
            permit.remaining().saturating_sub(margin)
        } else {
            tuning.critical_section
        };
        let nap = rng.random_range(Duration::ZERO..=most);
        self.sleep_until(Instant::now() + nap).await;
        if rng.random_bool(tuning.extend_chance) && permit.remaining() > margin {
            let ttl = extend_ttl(&tuning, rng);
            let _ = self.extend_permit(client, permit, ttl).await;
        }
        if long {
            let until = long_hold_until(permit.deadline(), margin, rng);
            self.sleep_until(until).await;
        }
        if permit.remaining() > margin {
            self.registers[slot].write(value + 1);
            if let (Some(fenced), Some(fence)) = (self.fenced.get(slot), permit.fencing_token()) {
                let _ = fenced.write(fence, client);
            }
        }
        drop(alone_on_the_slot);
        drop(among_the_holders);
    }
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// Every client, each with its own `Redlock`, got permits.
pub(super) fn every_client_got_permits(ran: &Ran) -> Check {
    let mut got = vec![0usize; ran.setup.clients];
    for op in ran.history.ops() {
        if op.kind == OpKind::Acquire && op.succeeded() {
            if let Some(n) = got.get_mut(op.client) {
                *n += 1;
            }
        }
    }
    let without = got.iter().filter(|n| **n == 0).count();
    Check::new(
        "every separate client got permits",
        !got.is_empty() && without == 0,
        format!(
            "{} clients, each its own Redlock; permits per client {}; {without} got none",
            got.len(),
            got.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
}

/// The semaphore was full at times: as many leases open at once as it has permits (so the run
/// tests K holders, not one), and every slot taken.
pub(super) fn the_semaphore_filled_up(ran: &Ran, semaphore: &SharedSemaphore) -> Check {
    let permits = semaphore.permits as usize;
    let ops = ran.history.ops();
    let peak = peak_holders(SEMAPHORE, &ops);
    let inside = semaphore.capacity.get().map_or(0, |w| w.peak());
    let per_slot: Vec<usize> = (0..permits)
        .map(|slot| {
            let name = slot_name(slot);
            ops.iter()
                .filter(|op| op.kind == OpKind::Acquire && op.succeeded() && op.resource == name)
                .count()
        })
        .collect();
    Check::new(
        format!("the semaphore was full: {permits} holders at once, every slot taken"),
        peak == permits && per_slot.iter().all(|n| *n > 0),
        format!(
            "most leases open at once {peak}, most clients inside at once {inside}; acquisitions per slot {}",
            per_slot
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
}

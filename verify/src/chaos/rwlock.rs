//! Scenario 19: separate clients, each its own `Redlock`, share one read-write lock
//! ([`quorumlock::RwLock`]), nine holds in ten reads, while masters are killed and restarted
//! empty after a TTL, paused, partitioned away, and slowed down.
//!
//! Writers are recorded under the lock's name, readers under
//! [`readers_of`](quorumlock_testkit::history::readers_of) it. The history checks that writers never overlap
//! each other ([`check_overlaps`](crate::check_overlaps), a witness and a read–sleep–write
//! register only writers write) and never overlap a reader
//! ([`check_rw_exclusion`](quorumlock_testkit::history::check_rw_exclusion) and a
//! [`ReadWriteWitness`](quorumlock_testkit::history::ReadWriteWitness)); the scenario checks that readers did
//! share the lock, so that the check is not vacuous.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quorumlock::{Error, Lock, RwLock};
use rand::rngs::StdRng;
use rand::Rng;

use super::ran::Ran;
use super::shared::{extend_ttl, long_hold_until, Shared};
use super::workload::Workload;
use super::Check;
use quorumlock_testkit::history::{peak_readers, readers_of, Access, ReadWriteWitness};
use quorumlock_testkit::{Op, OpKind, Outcome, Releasing};

/// The read-write lock the clients share.
pub(super) const RW_LOCK: &str = "rw";

/// Chance that a hold is a write.
const WRITE_CHANCE: f64 = 0.1;

/// Chance that a client makes one attempt (`try_read` / `try_write`) instead of retrying until
/// its acquire timeout (`read` / `write`).
const TRY_CHANCE: f64 = 0.25;

/// Chance that a holder lets its hold lapse at its deadline instead of releasing it.
const LAPSE_CHANCE: f64 = 0.02;

/// The read-write lock workload: the clients share one read-write lock (`resources` 1: the
/// writers' witness and register).
#[derive(Default)]
pub(super) struct SharedRwLock {
    /// The read-write lock's witness.
    rw: OnceLock<ReadWriteWitness>,
}

impl Workload for SharedRwLock {
    fn lock_name(&self, _r: usize) -> String {
        RW_LOCK.to_owned()
    }

    fn prepare(&self, shared: &Shared) {
        shared.history.watch_rw_lock(RW_LOCK);
        let _ = self.rw.set(shared.history.read_write_witness(RW_LOCK));
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

/// A client of the read-write lock: reads or writes, does its critical section, and releases
/// (or lets the hold lapse), until the run stops.
async fn run_client(workload: &SharedRwLock, shared: Arc<Shared>, client: usize, mut rng: StdRng) {
    let lock = shared.redlock_of(client).and_then(|rl| rl.rw_lock(RW_LOCK));
    let rw = match lock {
        Ok(rw) => rw,
        Err(e) => {
            // Reported as this client's only acquire: the client checks then fail.
            let now = Instant::now();
            shared
                .history
                .record(Op::acquire_failed(client, RW_LOCK, now, now, e));
            return;
        }
    };
    while !shared.stopped() {
        let access = if rng.random_bool(WRITE_CHANCE) {
            Access::Write
        } else {
            Access::Read
        };
        let once = rng.random_bool(TRY_CHANCE);
        let Some(mut lock) = take(&shared, &rw, client, access, once).await else {
            if once {
                // Held the other way, or the masters unreachable: back off as a retry would.
                let s = &shared.setup;
                let low = s.retry_delay.saturating_sub(s.retry_jitter);
                tokio::time::sleep(rng.random_range(low..=s.retry_delay + s.retry_jitter)).await;
            }
            continue;
        };
        section(
            &shared,
            workload.rw.get(),
            client,
            access,
            &mut lock,
            &mut rng,
        )
        .await;
        if rng.random_bool(LAPSE_CHANCE) {
            // Keep it to its deadline and walk away: the hold lapses when its entry expires.
            shared.sleep_until(lock.deadline()).await;
            std::mem::forget(lock);
            continue;
        }
        let releasing = match access {
            Access::Read => Releasing::start_read(&lock),
            _ => Releasing::start(&lock),
        };
        let result = lock.release().await;
        shared.history.record(releasing.finished(client, &result));
        shared.think(client, &mut rng).await;
    }
}

/// The name holds of `access` are recorded under.
fn recorded_as(access: Access) -> String {
    match access {
        Access::Read => readers_of(RW_LOCK),
        _ => RW_LOCK.to_owned(),
    }
}

/// Takes a hold of `access` and records the attempt.
async fn take(
    shared: &Shared,
    rw: &RwLock,
    client: usize,
    access: Access,
    once: bool,
) -> Option<Lock> {
    let ttl = shared.setup.ttl_of(client);
    let start = Instant::now();
    let result = match (access, once) {
        (Access::Read, true) => rw.try_read(ttl).await,
        (Access::Read, false) => rw.read(ttl).await,
        (_, true) => rw.try_write(ttl).await,
        (_, false) => rw.write(ttl).await,
    };
    match result {
        Ok(lock) => {
            shared.acquired(client, start, &lock, access == Access::Read);
            Some(lock)
        }
        Err(e) => {
            let end = Instant::now();
            shared.history.record(Op::acquire_failed(
                client,
                &recorded_as(access),
                start,
                end,
                e,
            ));
            None
        }
    }
}

async fn extend(shared: &Shared, client: usize, access: Access, lock: &mut Lock, ttl: Duration) {
    let start = Instant::now();
    let result: Result<(), Error> = lock.extend(ttl).await;
    shared.history.record(Op {
        client,
        resource: recorded_as(access),
        token: lock.token().expose().to_owned(),
        kind: OpKind::Extend,
        start,
        end: Instant::now(),
        outcome: match &result {
            Ok(()) => Outcome::Ok {
                valid_until: Some(lock.deadline()),
            },
            Err(e) => Outcome::Failed {
                reason: e.to_string(),
            },
        },
        fence: lock.fencing_token(),
    });
}

/// The critical section: enter the read-write witness `rw` (and, for a writer, the writers'
/// witness), sleep, maybe extend, and for a writer read–sleep–write the register while the
/// lease has a safety margin left; leave before the deadline.
async fn section(
    shared: &Shared,
    rw: Option<&ReadWriteWitness>,
    client: usize,
    access: Access,
    lock: &mut Lock,
    rng: &mut StdRng,
) {
    let tuning = shared.setup.tuning(client);
    let margin = tuning.margin();
    let long = tuning.long_hold_chance > 0.0 && rng.random_bool(tuning.long_hold_chance);
    let inside = rw.map(|w| w.enter(client, access));
    let alone = (access == Access::Write).then(|| shared.witnesses[0].enter(client));
    let value = shared.registers[0].read();
    let most = if long {
        lock.remaining().saturating_sub(margin)
    } else {
        tuning.critical_section
    };
    let nap = rng.random_range(Duration::ZERO..=most);
    shared.sleep_until(Instant::now() + nap).await;
    if rng.random_bool(tuning.extend_chance) && lock.remaining() > margin {
        let ttl = extend_ttl(&tuning, rng);
        extend(shared, client, access, lock, ttl).await;
    }
    if long {
        let until = long_hold_until(lock.deadline(), margin, rng);
        shared.sleep_until(until).await;
    }
    if access == Access::Write && lock.remaining() > margin {
        shared.registers[0].write(value + 1);
    }
    drop(alone);
    drop(inside);
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// Every client, each with its own `Redlock`, both read and wrote.
pub(super) fn every_client_read_and_wrote(ran: &Ran) -> Check {
    let writers = RW_LOCK;
    let mut got = vec![(0usize, 0usize); ran.setup.clients];
    for op in ran.history.ops() {
        if op.kind == OpKind::Acquire && op.succeeded() {
            if let Some((reads, writes)) = got.get_mut(op.client) {
                if op.resource == writers {
                    *writes += 1;
                } else {
                    *reads += 1;
                }
            }
        }
    }
    let short = got.iter().filter(|(r, w)| *r == 0 || *w == 0).count();
    Check::new(
        "every separate client read and wrote",
        !got.is_empty() && short == 0,
        format!(
            "{} clients, each its own Redlock; reads/writes per client {}; {short} missed one",
            got.len(),
            got.iter()
                .map(|(r, w)| format!("{r}/{w}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
}

/// Readers did share the lock (several leases open at once, several readers inside at once),
/// and writers got it between them: the exclusion checks had something to check.
pub(super) fn readers_shared_and_writers_got_in(ran: &Ran, lock: &SharedRwLock) -> Check {
    let ops = ran.history.ops();
    let peak = peak_readers(RW_LOCK, &ops);
    let inside = lock.rw.get().map_or(0, |w| w.peak_readers());
    let (reads, writes) = lock.rw.get().map_or((0, 0), |w| w.entries());
    let write_failures = ops
        .iter()
        .filter(|op| op.kind == OpKind::Acquire && op.resource == RW_LOCK && !op.succeeded())
        .count();
    Check::new(
        "readers shared the lock, writers got in between them",
        peak >= 2 && inside >= 2 && writes > 0,
        format!(
            "most readers' leases open at once {peak}, most readers inside at once {inside}; \
             {reads} reads and {writes} writes inside; {write_failures} write attempts failed"
        ),
    )
}

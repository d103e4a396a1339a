//! The clients of the scenarios that run voters of their own (22–27): each acquires a random
//! resource among a few, holds it — most holds short, one in so many long — and releases it,
//! recording every step in the history. The fault drivers strike the long holds first.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use rand::rngs::StdRng;
use rand::Rng;

use quorumlock_testkit::{History, Op, Releasing};

/// How the clients hold their locks.
#[derive(Debug, Clone)]
pub(super) struct Holds {
    /// Resources `ledger-0` .. `ledger-<resources - 1>`.
    pub(super) resources: usize,
    pub(super) ttl: Duration,
    /// A short hold lasts up to this.
    pub(super) short: Duration,
    /// A long hold lasts this long, but never past its lease.
    pub(super) long: RangeInclusive<Duration>,
    /// One hold in this many is long.
    pub(super) long_one_in: u32,
}

impl Holds {
    /// The name of resource `r`.
    pub(super) fn resource(r: usize) -> String {
        format!("ledger-{r}")
    }
}

/// What the clients share with the run and its fault driver.
#[derive(Debug, Default)]
pub(super) struct Contention {
    pub(super) stop: AtomicBool,
    pub(super) acquisitions: AtomicUsize,
    pub(super) failures: AtomicUsize,
    pub(super) latencies: Mutex<Vec<Duration>>,
    /// The locks held long right now: token → resource.
    pub(super) long_holds: Mutex<HashMap<String, String>>,
}

impl Contention {
    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// One client, until the run stops.
pub(super) async fn contend(
    rl: Redlock,
    client: usize,
    mut rng: StdRng,
    holds: Holds,
    history: Arc<History>,
    shared: Arc<Contention>,
) {
    while !shared.stopped() {
        let resource = Holds::resource(rng.random_range(0..holds.resources));
        let start = Instant::now();
        match rl.acquire(&resource, holds.ttl).await {
            Ok(lock) => {
                let end = Instant::now();
                history.record(Op::acquired(client, start, end, &lock));
                shared.acquisitions.fetch_add(1, Ordering::Relaxed);
                crate::mutex::lock(&shared.latencies).push(end - start);
                if rng.random_ratio(1, holds.long_one_in) {
                    let token = lock.token().expose().to_owned();
                    crate::mutex::lock(&shared.long_holds).insert(token.clone(), resource);
                    let hold = rng.random_range(holds.long.clone()).min(lock.remaining());
                    tokio::time::sleep(hold).await;
                    crate::mutex::lock(&shared.long_holds).remove(&token);
                } else {
                    tokio::time::sleep(rng.random_range(Duration::ZERO..=holds.short)).await;
                }
                let releasing = Releasing::start(&lock);
                let result = lock.release().await;
                history.record(releasing.finished(client, &result));
            }
            Err(e) => {
                history.record(Op::acquire_failed(
                    client,
                    &resource,
                    start,
                    Instant::now(),
                    &e,
                ));
                shared.failures.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// Asks for each of `resources` once, as a newcomer would, recording as client `prober`: where
/// a fault took a held lock's key from too many voters, the prober gets the lock beside its
/// holder, and the history shows it. What it gets it releases at once.
pub(super) async fn probe(
    rl: &Redlock,
    ttl: Duration,
    resources: usize,
    prober: usize,
    history: &History,
) {
    for r in 0..resources {
        let resource = Holds::resource(r);
        let start = Instant::now();
        match rl.try_acquire(&resource, ttl).await {
            Ok(lock) => {
                history.record(Op::acquired(prober, start, Instant::now(), &lock));
                let releasing = Releasing::start(&lock);
                let result = lock.release().await;
                history.record(releasing.finished(prober, &result));
            }
            Err(e) => history.record(Op::acquire_failed(
                prober,
                &resource,
                start,
                Instant::now(),
                &e,
            )),
        }
    }
}

/// The resource for a fault to strike: one held long right now, or else any of `resources`.
pub(super) fn victim(clients: &Contention, resources: usize, rng: &mut StdRng) -> String {
    let long = crate::mutex::lock(&clients.long_holds);
    let held: Vec<&String> = long.values().collect();
    match held.is_empty() {
        false => held[rng.random_range(0..held.len())].clone(),
        true => Holds::resource(rng.random_range(0..resources)),
    }
}

//! What every client task of a run shares ([`Shared`]): the setup, the history it records into,
//! the witnesses and registers of each resource, the stop signal, and the recording steps every
//! lock workload takes (acquire, extend, release, the critical section).

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{Error, Lock, Redlock};
use rand::rngs::StdRng;
use rand::Rng;

use super::masters::Cluster;
use super::setup::Setup;
use crate::mutex;
use quorumlock_testkit::{
    FencedRegister, History, LostUpdateRegister, OccupancyWitness, Op, OpKind, Outcome, Releasing,
};

/// Shared by every client task of a run (or, made by [`part`](Shared::part), by those of one
/// part of it).
pub(super) struct Shared {
    pub(super) setup: Setup,
    urls: Vec<String>,
    /// Per client with proxies of its own, the URLs it uses.
    own_urls: Vec<Vec<String>>,
    /// The masters' own addresses, bypassing every proxy.
    pub(super) masters: Vec<SocketAddr>,
    pub(super) history: History,
    /// Per resource (or semaphore slot): who is inside, ...
    pub(super) witnesses: Vec<OccupancyWitness>,
    /// ... a read–sleep–write counter, ...
    pub(super) registers: Vec<LostUpdateRegister>,
    /// ... and fenced storage, when fencing is on.
    pub(super) fenced: Vec<FencedRegister>,
    /// Successful acquisitions, over every part of the run.
    pub(super) successes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    pub(super) latencies: Arc<Mutex<Vec<Duration>>>,
}

impl Shared {
    /// The state the clients of `setup` share over `cluster`, recording into `history`; the
    /// witness and registers of resource `r` go by `lock_name(r)`, the name the workload locks
    /// it by.
    pub(super) fn new(
        setup: Setup,
        cluster: &Cluster,
        history: &History,
        lock_name: impl Fn(usize) -> String,
    ) -> Self {
        let resources = setup.resources;
        let fenced = setup.fencing || setup.tunings.iter().any(|t| t.fencing);
        Shared {
            urls: cluster.urls().to_vec(),
            own_urls: cluster.own_urls(),
            masters: cluster.addrs().to_vec(),
            history: history.clone(),
            witnesses: (0..resources)
                .map(|r| history.occupancy_witness(lock_name(r)))
                .collect(),
            registers: (0..resources)
                .map(|r| history.lost_update_register(lock_name(r)))
                .collect(),
            fenced: if fenced {
                (0..resources)
                    .map(|r| history.fenced_register(lock_name(r)))
                    .collect()
            } else {
                Vec::new()
            },
            setup,
            successes: Arc::default(),
            stop: Arc::default(),
            latencies: Arc::default(),
        }
    }

    /// The state of one part of the run: the clients `clients` of this run, which the part's
    /// workload numbers from 0 and sees as `setup` describes them, on resources of their own
    /// (resource `r` locked by `lock_name(r)`, its witness and registers made afresh). The
    /// history, the counters and the stop signal are this run's.
    pub(super) fn part(
        &self,
        setup: Setup,
        clients: Range<usize>,
        lock_name: impl Fn(usize) -> String,
    ) -> Shared {
        let history = &self.history;
        let resources = setup.resources;
        let fenced = setup.fencing || setup.tunings.iter().any(|t| t.fencing);
        Shared {
            urls: self.urls.clone(),
            own_urls: self.own_urls.get(clients).unwrap_or_default().to_vec(),
            masters: self.masters.clone(),
            history: history.clone(),
            witnesses: (0..resources)
                .map(|r| history.occupancy_witness(lock_name(r)))
                .collect(),
            registers: (0..resources)
                .map(|r| history.lost_update_register(lock_name(r)))
                .collect(),
            fenced: if fenced {
                (0..resources)
                    .map(|r| history.fenced_register(lock_name(r)))
                    .collect()
            } else {
                Vec::new()
            },
            setup,
            successes: Arc::clone(&self.successes),
            stop: Arc::clone(&self.stop),
            latencies: Arc::clone(&self.latencies),
        }
    }

    /// Tells the clients to stop: they finish what they are doing and end.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps until `until`, waking early (within 20 ms) when the run stops; `true` if it slept
    /// the whole way.
    pub(super) async fn sleep_until(&self, until: Instant) -> bool {
        const TICK: Duration = Duration::from_millis(20);
        loop {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            if self.stopped() {
                return false;
            }
            tokio::time::sleep((until - now).min(TICK)).await;
        }
    }

    /// The URLs client task `client` reaches the masters by: its own proxies' when it has
    /// some, else the run's.
    pub(super) fn urls_of(&self, client: usize) -> &[String] {
        self.own_urls.get(client).unwrap_or(&self.urls)
    }

    /// A client for client task `client`, configured as its [`Tuning`](super::setup::Tuning)
    /// says, over its own proxies when it has some; an invalid configuration is returned, not
    /// panicked on.
    pub(super) fn redlock_of(&self, client: usize) -> Result<Redlock, Error> {
        self.setup.redlock(client, self.urls_of(client))
    }

    /// Records a successful acquire of `lock` (or, with `read`, of a reader's hold) attempted
    /// from `start` until now, and counts it.
    pub(super) fn acquired(&self, client: usize, start: Instant, lock: &Lock, read: bool) {
        let end = Instant::now();
        self.history.record(if read {
            Op::read_acquired(client, start, end, lock)
        } else {
            Op::acquired(client, start, end, lock)
        });
        self.successes.fetch_add(1, Ordering::SeqCst);
        mutex::lock(&self.latencies).push(end - start);
    }

    /// Acquires `resource` with the library's retry policy (with `once`, one attempt) and
    /// records the attempt; under the client's owner id when its tuning has one (`acquire_as`,
    /// which always follows the retry policy).
    pub(super) async fn acquire(
        &self,
        rl: &Redlock,
        client: usize,
        resource: &str,
        once: bool,
    ) -> Option<Lock> {
        let tuning = self.setup.tuning(client);
        let ttl = tuning.ttl;
        let start = Instant::now();
        let result = match (&tuning.owner, once) {
            (Some(owner), _) => rl.acquire_as(resource, owner, ttl).await,
            (None, true) => rl.try_acquire(resource, ttl).await,
            (None, false) => rl.acquire(resource, ttl).await,
        };
        let end = Instant::now();
        match result {
            Ok(lock) => {
                self.history.record(Op::acquired(client, start, end, &lock));
                self.successes.fetch_add(1, Ordering::SeqCst);
                mutex::lock(&self.latencies).push(end - start);
                Some(lock)
            }
            Err(e) => {
                self.history
                    .record(Op::acquire_failed(client, resource, start, end, e));
                None
            }
        }
    }

    /// Extends `lock` by `ttl` and records the attempt.
    pub(super) async fn extend(
        &self,
        client: usize,
        lock: &mut Lock,
        ttl: Duration,
    ) -> Result<(), Error> {
        let start = Instant::now();
        let result = lock.extend(ttl).await;
        self.history.record(Op {
            client,
            resource: lock.resource().to_owned(),
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
        result
    }

    /// Releases `lock` and records the attempt.
    pub(super) async fn release(
        &self,
        client: usize,
        lock: Lock,
    ) -> Result<quorumlock::Released, Error> {
        let releasing = Releasing::start(&lock);
        let result = lock.release().await;
        self.history.record(releasing.finished(client, &result));
        result
    }

    /// The critical section: enter the witness, read–sleep–write the registers while the lease
    /// has a safety margin left, maybe extend, leave before the deadline. A long hold (as
    /// often as the client's tuning says) sleeps, extends or not, until only the margin is
    /// left.
    pub(super) async fn critical_section(
        &self,
        client: usize,
        r: usize,
        lock: &mut Lock,
        rng: &mut StdRng,
    ) {
        let tuning = self.setup.tuning(client);
        let margin = tuning.margin();
        let long = tuning.long_hold_chance > 0.0 && rng.random_bool(tuning.long_hold_chance);
        let guard = self.witnesses[r].enter(client);
        let value = self.registers[r].read();
        let nap = if long {
            let left = lock.remaining().saturating_sub(margin);
            rng.random_range(Duration::ZERO..=left)
        } else {
            rng.random_range(Duration::ZERO..=tuning.critical_section)
        };
        self.sleep_until(Instant::now() + nap).await;
        if rng.random_bool(tuning.extend_chance) && lock.remaining() > margin {
            let ttl = extend_ttl(&tuning, rng);
            let _ = self.extend(client, lock, ttl).await;
        }
        if long {
            let until = long_hold_until(lock.deadline(), margin, rng);
            self.sleep_until(until).await;
        }
        if lock.remaining() > margin {
            self.registers[r].write(value + 1);
            if let (Some(fenced), Some(fence)) = (self.fenced.get(r), lock.fencing_token()) {
                let _ = fenced.write(fence, client);
            }
        }
        drop(guard);
    }

    /// The pause client `client` takes between two holds, as its tuning says (none by default).
    pub(super) async fn think(&self, client: usize, rng: &mut StdRng) {
        if let Some((lo, hi)) = self.setup.tuning(client).think {
            let pause = rng.random_range(lo..=hi.max(lo));
            self.sleep_until(Instant::now() + pause).await;
        }
    }
}

/// Until when a long hold goes on, once it has extended or not: half of the time until little
/// more than the `margin` is left before `deadline` (whatever an extend did to it, and the
/// write at the end still goes in), else to a random point before that.
pub(super) fn long_hold_until(deadline: Instant, margin: Duration, rng: &mut StdRng) -> Instant {
    let last = deadline
        .checked_sub(margin + margin / 2)
        .unwrap_or(deadline);
    let now = Instant::now();
    if last <= now || rng.random_bool(0.5) {
        return last;
    }
    now + rng.random_range(Duration::ZERO..=last - now)
}

/// The TTL an extend of `tuning`'s client asks for: drawn in its range, else its TTL.
pub(super) fn extend_ttl(tuning: &super::setup::Tuning, rng: &mut StdRng) -> Duration {
    match tuning.extend_ttl {
        Some((lo, hi)) => rng.random_range(lo..=hi.max(lo)),
        None => tuning.ttl,
    }
}

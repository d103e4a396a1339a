//! What every client task of a run shares ([`Shared`]): the setup, the history it records into,
//! the witnesses and registers of each resource, the stop signal, and the recording steps every
//! lock workload takes (acquire, extend, release, the critical section).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use quorumlock::{Error, Lock, Redlock};
use rand::rngs::StdRng;
use rand::Rng;

use super::masters::Cluster;
use super::setup::Setup;
use crate::mutex;
use crate::{
    FencedRegister, History, LostUpdateRegister, OccupancyWitness, Op, OpKind, Outcome, Releasing,
};

/// Shared by every client task of a run.
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
    pub(super) successes: AtomicUsize,
    stop: AtomicBool,
    pub(super) latencies: Mutex<Vec<Duration>>,
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
            fenced: if setup.fencing {
                (0..resources)
                    .map(|r| history.fenced_register(lock_name(r)))
                    .collect()
            } else {
                Vec::new()
            },
            setup,
            successes: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            latencies: Mutex::new(Vec::new()),
        }
    }

    /// Tells the clients to stop: they finish what they are doing and end.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    pub(super) fn redlock(&self) -> Redlock {
        // The configuration is fixed and valid: a failure here is a bug in the scenario.
        match self.setup.redlock(&self.urls) {
            Ok(rl) => rl,
            Err(e) => panic!("invalid chaos client configuration: {e}"),
        }
    }

    /// A client for client task `client`, over its own proxies when it has some; an invalid
    /// configuration is returned, not panicked on.
    pub(super) fn redlock_of(&self, client: usize) -> Result<Redlock, Error> {
        self.setup
            .redlock(self.own_urls.get(client).unwrap_or(&self.urls))
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
    /// records the attempt.
    pub(super) async fn acquire(
        &self,
        rl: &Redlock,
        client: usize,
        resource: &str,
        once: bool,
    ) -> Option<Lock> {
        let start = Instant::now();
        let result = if once {
            rl.try_acquire(resource, self.setup.ttl).await
        } else {
            rl.acquire(resource, self.setup.ttl).await
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

    /// Extends `lock` by the TTL and records the attempt.
    pub(super) async fn extend(&self, client: usize, lock: &mut Lock) -> Result<(), Error> {
        let start = Instant::now();
        let result = lock.extend(self.setup.ttl).await;
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
    /// has a safety margin left, maybe extend, leave before the deadline.
    pub(super) async fn critical_section(
        &self,
        client: usize,
        r: usize,
        lock: &mut Lock,
        rng: &mut StdRng,
    ) {
        let margin = self.setup.ttl / 10;
        let guard = self.witnesses[r].enter(client);
        let value = self.registers[r].read();
        let nap = rng.random_range(Duration::ZERO..=self.setup.critical_section);
        tokio::time::sleep(nap).await;
        if rng.random_bool(self.setup.extend_chance) && lock.remaining() > margin {
            let _ = self.extend(client, lock).await;
        }
        if lock.remaining() > margin {
            self.registers[r].write(value + 1);
            if let (Some(fenced), Some(fence)) = (self.fenced.get(r), lock.fencing_token()) {
                let _ = fenced.write(fence, client);
            }
        }
        drop(guard);
    }
}

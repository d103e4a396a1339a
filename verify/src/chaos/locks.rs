//! The mutex workload of scenarios 1–10 and 12–17 ([`Locks`]): clients that pick a random
//! resource, acquire it, do their critical section and release it — and, as its [`Config`] says,
//! go stale holding it, die holding it, or die waiting at the head of its line. What they saw
//! beside the history is the run's [`Observed`].

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use quorumlock::{Lock, Redlock};
use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::probe::{follow_killed_head, HeadKill, Probe};
use super::setup::Setup;
use super::shared::Shared;
use super::workload::Workload;
use crate::mutex;
use quorumlock_testkit::{Op, Releasing};

/// How the clients of a [`Locks`] workload misbehave, and what the run waits for.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Config {
    /// Chance that a holder "forgets" its lock past the lease, then extends and releases it late.
    pub(super) stale_chance: f64,
    /// Chance that a holder's process dies while holding (the lock is leaked, not released).
    pub(super) crash_chance: f64,
    /// Chance that an acquire is watched, and its task aborted once its waiter heads the line
    /// of a quorum of masters.
    pub(super) head_kill_chance: f64,
    /// The run goes on until this many waiters were killed at the head of a line (whether one
    /// gets there before it acquires is chance).
    pub(super) min_head_kills: usize,
}

/// The mutex workload: every client locks random resources `r<i>` (see the module docs).
#[derive(Default)]
pub(super) struct Locks {
    config: Config,
    /// Reads the masters' lines, for the acquires watched to be killed at the head of one.
    probe: OnceLock<Arc<Probe>>,
    stale: Mutex<StaleStats>,
    kills: Mutex<Vec<(String, Instant)>>,
    watched_waiters: AtomicUsize,
    /// The tasks that follow each waiter killed at the head of a line ...
    following: Mutex<Vec<JoinHandle<HeadKill>>>,
    /// ... and what they saw, once [`finish`](Workload::finish) awaited them.
    head_kills: Mutex<Vec<HeadKill>>,
    /// The library's counts, by client.
    counted: Mutex<BTreeMap<usize, ClientCounts>>,
}

/// What a stale holder (one that kept its lock past the lease) saw when it finally extended and
/// released.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StaleStats {
    pub(super) holders: usize,
    pub(super) extends_refused: usize,
    pub(super) releases: usize,
    /// Keys the stale releases deleted: must be 0.
    pub(super) keys_deleted: usize,
}

/// What the clients of a lock workload counted (see [`quorumlock::Stats`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ClientCounts {
    /// Attempts sent, retries included.
    pub(super) attempts: u64,
    /// Waits cut short by a hand-off.
    pub(super) wakeups: u64,
}

impl ClientCounts {
    fn add(&mut self, rl: &Redlock) {
        let stats = rl.stats();
        self.attempts += stats.attempts;
        self.wakeups += stats.wakeups;
    }
}

/// What the clients of a [`Locks`] workload observed beside the history.
#[derive(Debug, Default)]
pub(super) struct Observed {
    pub(super) stale: StaleStats,
    /// Resource and instant of every holder process killed while holding.
    pub(super) kills: Vec<(String, Instant)>,
    /// Acquires watched to be killed once their waiter heads the line ...
    pub(super) watched_waiters: usize,
    /// ... and each one killed there.
    pub(super) head_kills: Vec<HeadKill>,
    /// The library's own counts, summed over the clients ...
    pub(super) counted: ClientCounts,
    /// ... and by client.
    pub(super) counted_by_client: BTreeMap<usize, ClientCounts>,
}

impl Locks {
    pub(super) fn new(config: Config) -> Self {
        Locks {
            config,
            ..Locks::default()
        }
    }

    /// What the clients observed; once the run is over.
    pub(super) fn observed(&self) -> Observed {
        let counted = mutex::lock(&self.counted).clone();
        Observed {
            stale: *mutex::lock(&self.stale),
            kills: std::mem::take(&mut *mutex::lock(&self.kills)),
            watched_waiters: self.watched_waiters.load(Ordering::SeqCst),
            head_kills: std::mem::take(&mut *mutex::lock(&self.head_kills)),
            counted: counted
                .values()
                .fold(ClientCounts::default(), |sum, c| ClientCounts {
                    attempts: sum.attempts + c.attempts,
                    wakeups: sum.wakeups + c.wakeups,
                }),
            counted_by_client: counted,
        }
    }

    /// Adds what `rl`, one of `client`'s clients, counted.
    fn count(&self, client: usize, rl: &Redlock) {
        mutex::lock(&self.counted)
            .entry(client)
            .or_default()
            .add(rl);
    }

    fn probe(&self, shared: &Shared) -> Arc<Probe> {
        Arc::clone(
            self.probe
                .get_or_init(|| Arc::new(Probe::new(&shared.masters))),
        )
    }

    /// A client that picks a random resource, acquires it (with retries), does its critical
    /// section and releases, until the run stops; sometimes it goes stale or dies, as the
    /// config says.
    async fn run_client(&self, shared: Arc<Shared>, client: usize, mut rng: StdRng) {
        let Some(mut rl) = redlock(&shared, client) else {
            return;
        };
        while !shared.stopped() {
            let r = rng.random_range(0..shared.setup.resources);
            let resource = Setup::resource(r);
            let acquired = if rng.random_bool(self.config.head_kill_chance) {
                self.acquire_or_die_at_the_head(&shared, &rl, client, &resource)
                    .await
            } else {
                shared.acquire(&rl, client, &resource, false).await
            };
            let Some(mut lock) = acquired else {
                continue;
            };
            shared
                .critical_section(client, r, &mut lock, &mut rng)
                .await;

            if rng.random_bool(self.config.crash_chance) {
                // The holder's process dies: nothing is released, its connections go away, and a
                // new process takes its place and wants the same resource at once.
                mutex::lock(&self.kills).push((resource.clone(), Instant::now()));
                if shared.setup.tuning(client).owner.is_some() {
                    // Under an owner id the new process takes its own lock back at once (what
                    // `acquire_as` is for): the dead one's lease ends with it.
                    let died: Result<(), &str> = Err("the holder's process died");
                    shared
                        .history
                        .record(Releasing::start(&lock).finished(client, &died));
                }
                std::mem::forget(lock);
                self.count(client, &rl);
                let Some(new) = redlock(&shared, client) else {
                    return;
                };
                rl = new;
                while !shared.stopped() {
                    if let Some(mut lock) = shared.acquire(&rl, client, &resource, false).await {
                        shared
                            .critical_section(client, r, &mut lock, &mut rng)
                            .await;
                        let _ = shared.release(client, lock).await;
                        break;
                    }
                }
                continue;
            }

            if rng.random_bool(self.config.stale_chance) {
                // Keep the lock well past its lease (another client may take it meanwhile), then
                // try to extend and release it: neither may touch a newer holder's keys.
                let ttl = shared.setup.ttl_of(client);
                let overdue = lock.deadline() + ttl / 2;
                if !shared.sleep_until(overdue).await {
                    // The run stopped first: not a stale holder after all.
                    let _ = shared.release(client, lock).await;
                    continue;
                }
                let refused = shared.extend(client, &mut lock, ttl).await.is_err();
                let released = shared.release(client, lock).await;
                let mut stale = mutex::lock(&self.stale);
                stale.holders += 1;
                stale.extends_refused += usize::from(refused);
                if let Ok(released) = released {
                    stale.releases += 1;
                    stale.keys_deleted += released.deleted;
                }
                continue;
            }

            let _ = shared.release(client, lock).await;
            shared.think(client, &mut rng).await;
        }
        self.count(client, &rl);
    }

    /// Acquires `resource` like [`Shared::acquire`], in a task of its own that is aborted (the
    /// waiter dropped mid-wait, as its process would take it down) once its waiter heads the
    /// line of `resource` on a quorum of masters. `None` when it was aborted or failed.
    ///
    /// The waiter is told apart from the others by its order in the line: its arrival in
    /// milliseconds (read just before the library reads it) times 1000, plus a tiebreak below
    /// 1000. It is looked for only once its client has met contention and started a second
    /// attempt, the one that takes its place in line; if another waiter's order falls in the
    /// same two milliseconds, the probe sees two candidates and does not abort.
    async fn acquire_or_die_at_the_head(
        &self,
        shared: &Arc<Shared>,
        rl: &Redlock,
        client: usize,
        resource: &str,
    ) -> Option<Lock> {
        self.watched_waiters.fetch_add(1, Ordering::SeqCst);
        let probe = self.probe(shared);
        let before = rl.stats();
        let (arrival, arrived) = oneshot::channel();
        let mut task = tokio::spawn({
            let (shared, rl, resource) = (Arc::clone(shared), rl.clone(), resource.to_owned());
            async move {
                let _ = arrival.send(SystemTime::now());
                shared.acquire(&rl, client, &resource, false).await
            }
        });
        let arrived_ms = match arrived.await {
            Ok(at) => at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            Err(_) => 0,
        };
        let (lo, hi) = (arrived_ms * 1000, (arrived_ms + 2) * 1000 - 1);
        let timeout = shared
            .setup
            .acquire_timeout
            .unwrap_or(quorumlock::DEFAULT_ACQUIRE_TIMEOUT);
        let watch_until = Instant::now() + timeout;
        let watch = async {
            while Instant::now() < watch_until {
                let now = rl.stats();
                let in_line =
                    now.contended > before.contended && now.attempts >= before.attempts + 2;
                if in_line {
                    if let Some(id) = probe.head_in(resource, lo, hi).await {
                        return Some(id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            None
        };
        let mut killed = None;
        // An acquire that ends goes on to its critical section at once, not after the probe.
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            head = watch => {
                if let Some(id) = head {
                    task.abort();
                    killed = Some((id, Instant::now()));
                }
                (&mut task).await
            }
        };
        match joined {
            Ok(lock) => lock,
            Err(e) if e.is_cancelled() => {
                if let Some((id, at)) = killed {
                    let follow = follow_killed_head(
                        Arc::clone(&probe),
                        resource.to_owned(),
                        id,
                        at,
                        shared.setup.clone(),
                    );
                    mutex::lock(&self.following).push(tokio::spawn(follow));
                }
                None
            }
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Client `client`'s `Redlock`; `None` (its only acquire recorded as failed, so that the run's
/// checks see it) when its configuration is invalid.
fn redlock(shared: &Shared, client: usize) -> Option<Redlock> {
    match shared.redlock_of(client) {
        Ok(rl) => Some(rl),
        Err(e) => {
            let now = Instant::now();
            shared
                .history
                .record(Op::acquire_failed(client, "(configuration)", now, now, e));
            None
        }
    }
}

impl Workload for Locks {
    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move { self.run_client(shared, client, rng).await })
    }

    fn reached_goal(&self) -> bool {
        mutex::lock(&self.following).len() >= self.config.min_head_kills
    }

    fn finish(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            let following = std::mem::take(&mut *mutex::lock(&self.following));
            let mut head_kills = Vec::new();
            for followed in following {
                head_kills.push(followed.await.map_err(io::Error::other)?);
            }
            mutex::lock(&self.head_kills).extend(head_kills);
            Ok(())
        })
    }
}

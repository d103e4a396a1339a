//! The fault driver's handle ([`Ctl`]): fault verbs on the masters that record themselves in
//! the history, the driver's seeded random source, and the run's stop signal.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::oneshot;

use super::masters::Cluster;
use super::setup::Setup;
use quorumlock_testkit::clock::Clock;
use quorumlock_testkit::{FaultId, FaultProxy, History, RedisNodes};

/// The fault driver's handle: fault verbs that record themselves in the history, the seeded
/// random source, and the stop signal.
pub(super) struct Ctl {
    pub(super) setup: Setup,
    pub(super) cluster: Arc<Cluster>,
    pub(super) history: History,
    pub(super) rng: StdRng,
    stop: Arc<AtomicBool>,
    go: Option<oneshot::Sender<()>>,
}

impl Ctl {
    /// The handle of a run's driver: `stop` says the run stopped, `go` lets the clients start.
    pub(super) fn new(
        setup: Setup,
        cluster: Arc<Cluster>,
        history: History,
        rng: StdRng,
        stop: Arc<AtomicBool>,
        go: oneshot::Sender<()>,
    ) -> Self {
        Ctl {
            setup,
            cluster,
            history,
            rng,
            stop,
            go: Some(go),
        }
    }

    /// Lets the clients start (they wait for it, so a driver can set faults up first).
    pub(super) fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    pub(super) fn fault(&self, description: impl Into<String>) -> FaultId {
        self.history.fault(description)
    }

    pub(super) fn heal(&self, id: FaultId) {
        self.history.heal(id);
    }

    /// Waits until the run stops.
    pub(super) async fn until_stopped(&self) {
        while self.sleep(Duration::from_millis(100)).await {}
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The flag that says the run stopped, for tasks the driver starts beside it.
    pub(super) fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Sleeps `d`, waking early when the run stops; `true` if the run goes on.
    pub(super) async fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(10))).await;
        }
        false
    }

    /// A uniformly random duration in `[lo, hi]` milliseconds.
    pub(super) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(lo..=hi))
    }

    /// Sleeps a uniformly random `[lo, hi]` milliseconds (see [`ms`](Self::ms)), waking early
    /// when the run stops; `true` if the run goes on.
    pub(super) async fn sleep_ms(&mut self, lo: u64, hi: u64) -> bool {
        let d = self.ms(lo, hi);
        self.sleep(d).await
    }

    /// Between 1 and `most` distinct masters (how many, uniformly random), chosen at random, sorted.
    pub(super) fn pick_up_to(&mut self, most: usize) -> Vec<usize> {
        let k = self.rng.random_range(1..=most);
        self.pick(k)
    }

    /// `k` distinct masters, chosen at random, sorted.
    pub(super) fn pick(&mut self, k: usize) -> Vec<usize> {
        let n = self.cluster.addrs().len();
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = self.rng.random_range(i..n);
            all.swap(i, j);
        }
        let mut picked = all[..k.min(n)].to_vec();
        picked.sort_unstable();
        picked
    }

    pub(super) async fn kill(&self, i: usize) -> io::Result<()> {
        self.blocking(move |nodes| nodes[i].kill()).await
    }

    pub(super) async fn restart(&self, i: usize) -> io::Result<()> {
        self.blocking(move |nodes| nodes[i].restart()).await
    }

    pub(super) fn pause(&self, i: usize) -> io::Result<()> {
        self.cluster.servers()[i].pause()
    }

    pub(super) fn resume(&self, i: usize) -> io::Result<()> {
        self.cluster.servers()[i].resume()
    }

    /// Sets master `i`'s wall clock (the masters must run under clocks: `Setup::clocks`).
    pub(super) async fn set_clock(&self, i: usize, clock: Clock) -> io::Result<()> {
        self.blocking(move |nodes| nodes[i].set_clock(clock)).await
    }

    pub(super) fn proxy(&self, i: usize) -> io::Result<&FaultProxy> {
        self.cluster
            .proxy(i)
            .ok_or_else(|| io::Error::other("this scenario runs without proxies"))
    }

    /// Every proxy in front of master `i` (see [`Cluster::network`]): what a network fault of
    /// that master strikes.
    pub(super) fn network(&self, i: usize) -> io::Result<Vec<&FaultProxy>> {
        let proxies = self.cluster.network(i);
        if proxies.is_empty() {
            return Err(io::Error::other("this scenario runs without proxies"));
        }
        Ok(proxies)
    }

    async fn blocking(
        &self,
        f: impl FnOnce(&mut RedisNodes) -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        let cluster = Arc::clone(&self.cluster);
        tokio::task::spawn_blocking(move || f(&mut cluster.servers()))
            .await
            .map_err(io::Error::other)?
    }
}

//! What the engine hands back once a run is over ([`Ran`]), and the runtime stalls it measured
//! along the way ([`Stalls`]). What a workload observed of its own stays with the workload.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::masters::Cluster;
use super::setup::Setup;
use quorumlock_testkit::History;

/// The stall meter's tick ...
const TICK: Duration = Duration::from_millis(5);
/// ... and how late it may wake before the lateness counts as a stall.
const STALL_THRESHOLD: Duration = Duration::from_millis(10);

/// What the clients and the engine observed, beside the history.
pub(super) struct Ran {
    pub(super) setup: Setup,
    pub(super) history: History,
    pub(super) cluster: Arc<Cluster>,
    pub(super) latencies: Vec<Duration>,
    /// Lock keys the monitor found without a TTL, or with one above the lock TTL.
    pub(super) immortal_keys: Vec<String>,
    pub(super) elapsed: Duration,
    /// When the clients were told to stop.
    pub(super) stopped_at: Instant,
    /// When the last client had finished what it was doing then (the faults still active).
    pub(super) clients_ended: Instant,
    /// When the clients and the fault driver had ended.
    pub(super) finished_at: Instant,
    /// When the runtime could not run its tasks on time.
    pub(super) stalls: Stalls,
}

/// When the run's tokio runtime could not run its tasks on time: each stall is a tick of the
/// meter that woke more than 10 ms late, from when it was due to when it woke. On a loaded
/// machine the whole test process is sometimes not scheduled for hundreds of milliseconds; a
/// waiter cannot move then, whatever the library does, so the line checks count every wait
/// less the stalls inside it.
#[derive(Clone, Debug, Default)]
pub(super) struct Stalls(Vec<(Instant, Instant)>);

impl Stalls {
    /// How much of `[from, to]` the runtime was stalled.
    pub(super) fn within(&self, from: Instant, to: Instant) -> Duration {
        self.0
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// `to - from`, less the stalls inside it.
    pub(super) fn net(&self, from: Instant, to: Instant) -> Duration {
        to.saturating_duration_since(from)
            .saturating_sub(self.within(from, to))
    }

    /// How many stalls, the longest, and their total.
    pub(super) fn summary(&self) -> String {
        let longest = self
            .0
            .iter()
            .map(|(a, b)| *b - *a)
            .max()
            .unwrap_or_default();
        let total: Duration = self.0.iter().map(|(a, b)| *b - *a).sum();
        format!(
            "runtime stalls over {}ms: {}, longest {:.0}ms, {:.0}ms in all",
            STALL_THRESHOLD.as_millis(),
            self.0.len(),
            longest.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3
        )
    }
}

/// Ticks every 5 ms until `stop`, noting each tick that woke more than 10 ms late.
pub(super) async fn measure_stalls(stop: Arc<AtomicBool>) -> Stalls {
    let mut stalls = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let due = Instant::now() + TICK;
        tokio::time::sleep_until(due.into()).await;
        let woke = Instant::now();
        if woke > due + STALL_THRESHOLD {
            stalls.push((due, woke));
        }
    }
    Stalls(stalls)
}

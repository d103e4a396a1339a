//! What the clients of a run do: the [`Workload`] trait, through which alone the engine knows
//! them.
//!
//! # Layering
//!
//! The chaos modules form three layers; a module imports only from its own layer or the layers
//! below (a test in `chaos/mod.rs` keeps the engine to it):
//!
//! 1. **Shared types**, at the bottom: this trait, [`Setup`] and the key names (`setup`), the
//!    masters and direct queries (`masters`), the fault driver's handle (`ctl`), what the
//!    clients share (`shared`), what a run hands back (`ran`), and the direct reader of the
//!    masters' wait lines (`probe`).
//! 2. **The engine** (`engine`): starts the masters, makes the [`Shared`] state, asks the
//!    workload to [`prepare`](Workload::prepare), spawns one [`client`](Workload::client) task
//!    per client, runs the fault driver beside them, stops them, and hands back a `Ran`. It
//!    imports no workload and no scenario.
//! 3. **Workloads, fault drivers and scenarios**, on top: the lock workloads (`locks`,
//!    `simultaneous`), the primitives' (`semaphore`, `rwlock`, `election`, `reentrant`), the
//!    drivers and checks of the wait line (`line`) and of the mixed faults (`mixed`), and
//!    `scenarios`, which wires a workload, a driver and the checks into each scenario. A
//!    workload keeps what it observed beyond the history itself; the scenario that made it
//!    reads that back once the run is over.
//!
//! A new workload is a type implementing [`Workload`] and a scenario that runs it: the engine
//! does not change.

use std::io;
use std::sync::Arc;

use futures::future::BoxFuture;
use rand::rngs::StdRng;

use super::setup::Setup;
use super::shared::Shared;

/// What the clients of a run do, as the engine sees it.
///
/// The engine calls, in order: [`lock_name`](Self::lock_name) for each resource while it makes
/// the [`Shared`] state, [`prepare`](Self::prepare) once, [`client`](Self::client) for each
/// client `0..clients` once the fault driver says go, [`reached_goal`](Self::reached_goal)
/// while the run goes on, and [`finish`](Self::finish) once the clients and the driver ended.
pub(super) trait Workload: Send + Sync {
    /// The name resource (or slot) `r` is locked by: its witness and registers in [`Shared`]
    /// go by it. [`Setup::resource`] (`r<i>`) unless the workload locks something else.
    fn lock_name(&self, r: usize) -> String {
        Setup::resource(r)
    }

    /// Readies the workload once the shared state exists, before any client starts: has the
    /// history watch the workload's own properties and makes its own witnesses.
    fn prepare(&self, _shared: &Shared) {}

    /// The task of client `client`, with its own seeded random source: it works until
    /// [`Shared::stopped`], recording every operation into the history.
    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()>;

    /// Whether the workload reached its own goal, beside the setup's target of acquisitions:
    /// the run goes on until both are reached, or the time limit.
    fn reached_goal(&self) -> bool {
        true
    }

    /// Waits for what the workload still runs once its clients ended (watchers it started
    /// beside them), and keeps what they observed.
    ///
    /// # Errors
    ///
    /// When such a task failed.
    fn finish(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }
}

//! quorumlock's own verification, apart from what users test their code with
//! (`quorumlock-testkit`): not published.
//!
//! # Layout
//!
//! * [`chaos`]: the chaos scenarios against real servers (`tests/chaos`, `make chaos`), and
//!   [`chaos::explore`], the explorer: plans of clients' configurations and faults drawn from a
//!   seed (`make explore`).
//! * [`naive_election`], [`naive_reentrant`], [`naive_rwlock`], [`naive_semaphore`]: the negative
//!   controls, primitives built the obvious way, which the checkers must be shown to catch.
//! * `direct`, [`mutex`], `naive_masters`: what those share (a query bypassing every proxy, a
//!   mutex that survives a panic, also for `make sim`'s parallel runs; the naive primitives'
//!   masters).
//! * [`sim`]: the deterministic simulation of the real client and the real scripts: plans
//!   drawn from a seed, the simulated network, the workloads, the run, its checker and digest,
//!   and the shrinker. `make sim` explores seeds with it (`src/bin/sim.rs`); `make mutants`
//!   measures what it finds against the catalogue of known defects (`mutants/`).

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod chaos;
mod direct;
pub mod mutex;
pub mod naive_election;
mod naive_masters;
pub mod naive_reentrant;
pub mod naive_rwlock;
pub mod naive_semaphore;
pub mod sim;

//! quorumlock's own verification, apart from what users test their code with
//! (`quorumlock-testkit`): not published.
//!
//! # Layout
//!
//! * [`sim`]: the deterministic simulation of the real client and the real scripts: plans
//!   drawn from a seed, the simulated network, the workloads, the run, its checker and digest,
//!   and the shrinker. `make sim` explores seeds with it (`src/bin/sim.rs`); `make mutants`
//!   measures what it finds against the catalogue of known defects (`mutants/`).

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod sim;

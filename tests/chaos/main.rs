//! Chaos and exploration: the short chaos suite, chaos over TLS, the primitives' negative controls
//! and the explorer's fixed seeds. They load both cores and take turns (see `turns`).

#[path = "../common/mod.rs"]
mod common;

mod election_control;
mod explorer;
mod reentrant_control;
mod rwlock_control;
mod scenarios;
mod scenarios_over_tls;
mod semaphore_control;
mod turns;

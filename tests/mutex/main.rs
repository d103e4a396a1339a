//! The mutex and its quorum: grants on a majority within the validity window, rollback, cleanups
//! that remove only their own writes, bad input, inspection, counters, and how a client treats
//! slow, hung or restarted masters.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod cancellations_and_losses;
mod cleanups_remove_only_their_own_writes;
mod inspect;
mod node_health;
mod quorum;
mod stats;

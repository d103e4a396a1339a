//! Owner ids and reentrancy: a later attempt of one owner takes the lock over; a failed or dropped
//! one gives back what it took, in every order of requests; nested holds.

#[path = "../common/mod.rs"]
mod common;

mod reentrant;
mod rollback;
mod stamps;
mod takeover;
mod takeover_chains;

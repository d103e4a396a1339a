//! Semaphores, read-write locks, elections and `acquire_many`, against real masters.

#[path = "../common/mod.rs"]
mod common;

mod acquire_many;
mod election;
mod rwlock;
mod rwlock_try;
mod semaphore;

//! The wait line and the hand-off: each release hands the lock to one waiter, in arrival order, in
//! one trip; a key anybody waits for is kept alive over its line; waiters that leave or die block
//! nobody.

#[path = "../common/mod.rs"]
mod common;

mod fairness;
mod handoff;
mod order;
mod plain_attempt_beside_a_line;
mod stretch;
mod wakeups;

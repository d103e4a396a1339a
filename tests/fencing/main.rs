//! Fencing tokens: strictly increasing from holder to holder, what the masters keep for them, and a
//! master's clock ahead of the others' within and beyond the grace.

#[path = "../common/mod.rs"]
mod common;

mod clock_ahead;
mod counters;
mod tokens;

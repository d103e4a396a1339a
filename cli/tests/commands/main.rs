//! The `quorumlock` command, run as its users run it: `exec` with flock's habits, the line,
//! the primitives, voters and their checks, status and leftovers, setup, the demo, the benchmark
//! and every shell command of the docs, against real redis-server masters.

#[path = "../common/mod.rs"]
mod common;

mod bench;
mod demo;
mod docs_commands;
mod durable;
mod exec;
mod exec_habits;
mod exec_stops;
mod help;
mod line;
mod list_leftovers;
mod never_two_holders;
mod new_user;
mod operator_habits;
mod primitives;
mod setup;
mod status;
mod tls;
mod usage;
mod voter_checks;
mod voters;
mod waiting;

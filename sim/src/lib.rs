//! Simulated Redis masters for quorumlock's tests: an in-memory master that runs the commands
//! and the Lua scripts the library sends, with Redis's semantics, on a clock of its own, and
//! a RESP server that puts it behind any async stream.
//!
//! A master never reads the operating system's clock, spawns no thread, and keeps its data in
//! ordered maps: given the same commands at the same virtual instants, it gives the same
//! replies.
//!
//! # Layout
//!
//! | module | holds |
//! |---|---|
//! | `clock` | [`VirtualTime`], the simulation's time, and [`Clock`], one master's reading of it (offset, steps, rate) |
//! | `keyspace` | keys, values (strings, sorted sets, hashes) and expiries, judged at a given instant |
//! | `commands/` | the data commands, one module per kind of value (`strings`, `sorted_sets`, `hashes`), `keys` (and expiries) and `server` (`TIME`, `INFO`, `WAIT`, `WAITAOF`) |
//! | `lua` | the embedded Lua 5.1: the `redis` table and Redis's Lua ↔ reply conversions |
//! | `pubsub` | subscriptions and each connection's outbox |
//! | `data` | what the commands run against (keyspace, subscriptions, [`Config`]) |
//! | `master` | [`Master`]: connections, connection commands (`HELLO`, `AUTH`, `EVAL`, ...), faults (crash, snapshot, restore), the [`Monitor`] that sees every command |
//! | `reply` | [`Reply`] and how a score is written |
//! | `resp` | RESP2/RESP3 parsing and writing |
//! | `server` | [`serve`] over any async stream, [`listen`] on a loopback TCP port (or [`listen_on`] a given one) |
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use quorumlock_sim::{Clock, Master, Reply, VirtualTime};
//!
//! let time = VirtualTime::new(Duration::from_secs(1_700_000_000));
//! let mut master = Master::new(Clock::following(&time))?;
//! let reply = master.run(&["EVAL", "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 100)", "1", "k", "v"]);
//! assert_eq!(reply, Reply::Status("OK".to_owned()));
//! # Ok::<(), quorumlock_sim::MasterError>(())
//! ```

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

mod clock;
mod commands;
mod data;
mod keyspace;
mod lua;
mod master;
mod pubsub;
mod reply;
mod resp;
mod server;

pub use clock::{Clock, VirtualTime};
pub use keyspace::{Entry, Hash, SortedSet, Value};
pub use master::{
    Config, Error as MasterError, Master, Monitor, Monitored, Protocol, Snapshot, DEFAULT_VERSION,
};
pub use pubsub::ClientId;
pub use reply::{format_double, Reply};
pub use server::{listen, listen_on, lock, serve, shared, Server, SharedMaster};

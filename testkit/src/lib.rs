//! Test support for quorumlock: real `redis-server` processes on free loopback ports, a per-node TCP
//! fault proxy, and a checker for recorded lock histories.
//!
//! Shared by the library's integration tests, the benchmarks, the chaos suite and `quorumlock demo`.
//!
//! # Layout
//!
//! * [`RedisServer`] / [`RedisNodes`] — sandboxed masters with fault verbs (kill/restart,
//!   pause/resume).
//! * [`FaultProxy`] — a per-node TCP proxy: latency, blackhole, held replies, reset, refuse,
//!   retarget.
//! * [`History`] — records a run's operations and faults and checks them for violations.
//! * [`chaos`] — the chaos suite: seeded fault schedules, contending clients, figures.
//! * [`failover`] — failover evidence: one master + replica against N independent masters.

#![warn(missing_docs, missing_debug_implementations)]

pub mod chaos;
pub mod failover;
mod history;
mod proxy;
mod server;

pub use history::{
    check_fence_order, check_overlaps, Acquisition, Fault, FaultId, FencedCounts, FencedRegister,
    History, Lease, LostUpdateRegister, OccupancyGuard, OccupancyWitness, Occupant, Op, OpCounts,
    OpKind, Outcome, Releasing, Report, Stale, TokenFingerprint, Violation,
};
pub use proxy::{FaultProxy, ProxyStats};
pub use server::{RedisNodes, RedisServer, RedisServerBuilder, REDIS_SERVER_ENV};

//! Test support for quorumlock: real `redis-server` processes on free loopback ports, a per-node TCP
//! fault proxy, and a checker for recorded lock histories.
//!
//! Shared by the library's integration tests, the benchmarks, the chaos suite and `quorumlock demo`.
//!
//! # Layout
//!
//! * [`server`] — [`RedisServer`] / [`RedisNodes`]: sandboxed masters with fault verbs
//!   (kill/restart, pause/resume).
//! * [`proxy`] — [`FaultProxy`]: a per-node TCP proxy with latency, blackhole, held replies,
//!   reset, refuse/accept, retarget, and heal.
//! * [`history`] — [`History`]: records a run's operations and faults and checks them for
//!   violations, with the witnesses clients call inside their critical sections.
//! * [`chaos`] — the chaos suite: seeded fault schedules, contending clients, figures.
//! * [`failover`] — failover evidence: one master + replica against N independent masters.
//! * [`figures`] — percentiles by one definition, and digit grouping, for every printed figure.
//! * [`mutex`] — mutex access that survives a panic in another task.
//! * [`naive_semaphore`] — the **unsafe** per-master-count semaphore, a negative control only.
//! * [`naive_rwlock`] — the **unsafe** read-write lock whose writer looks for readers on one
//!   master, a negative control only.
//! * [`naive_election`] — the **unsafe** election on one master, a negative control only.
//! * [`naive_reentrant`] — the **unsafe** per-master hold count of a reentrant lock, a negative
//!   control only.
//!
//! The names used most are also at the crate root, grouped below by the module that defines them.

#![warn(missing_docs, missing_debug_implementations)]

pub mod chaos;
pub mod failover;
pub mod figures;
pub mod history;
pub mod mutex;
pub mod naive_election;
mod naive_masters;
pub mod naive_reentrant;
pub mod naive_rwlock;
pub mod naive_semaphore;
pub mod proxy;
pub mod server;

// Sandboxed masters.
#[doc(no_inline)]
pub use server::{RedisNodes, RedisServer, RedisServerBuilder, REDIS_SERVER_ENV};

// The fault proxy.
#[doc(no_inline)]
pub use proxy::{FaultProxy, ProxyStats};

// The history recorder and what it records.
#[doc(no_inline)]
pub use history::{Fault, FaultId, History, Op, OpKind, Outcome, Releasing, TokenFingerprint};

// Protocol-level checkers.
#[doc(no_inline)]
pub use history::{
    check_fence_order, check_leader_reads, check_left_behind, check_max_holders, check_overlaps,
    check_rw_exclusion, check_term_order, Acquisition, LeaderRead, Lease, PermitLease,
    ReleaseAudit,
};

// Effect-level witnesses.
#[doc(no_inline)]
pub use history::{
    Access, FencedCounts, FencedRegister, LostUpdateRegister, OccupancyGuard, OccupancyWitness,
    Occupant, ReadWriteGuard, ReadWriteWitness, Stale,
};

// The verdict on a history.
#[doc(no_inline)]
pub use history::{OpCounts, Report, Violation};

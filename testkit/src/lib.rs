//! Test your code against real Redis masters: `redis-server` processes on free loopback ports,
//! a per-master TCP fault proxy, and a checker for recorded lock histories. No mocks, no
//! containers: the faults are the real ones (a frozen process, a dropped route, a master that
//! comes back empty), so the code under test meets what production will show it.
//!
//! It is the test kit of [`quorumlock`], and it serves any code that talks to Redis.
//!
//! # Example: a worker that stops touching its resource once its lock is lost
//!
//! Five masters, each behind a fault proxy; the worker holds a lock with
//! [`Redlock::with_lock`](quorumlock::Redlock::with_lock) and touches the resource until the
//! lease is lost. One master paused and a minority partitioned leave it running; a majority
//! partitioned takes its lock, and it stops before the lease's deadline.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::{Duration, Instant};
//!
//! use quorumlock::Redlock;
//! use quorumlock_testkit::{FaultProxy, RedisNodes};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let masters = RedisNodes::spawn(5)?;
//! let proxies = masters
//!     .iter()
//!     .map(|m| FaultProxy::start(m.addr()))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let rl = Redlock::builder(proxies.iter().map(FaultProxy::url)).build()?;
//!
//! // The code under test: touches the resource every 10 ms while it holds the lock.
//! let touches: Arc<Mutex<Vec<Instant>>> = Arc::default();
//! let worker = {
//!     let (rl, touches) = (rl.clone(), touches.clone());
//!     tokio::spawn(async move {
//!         rl.with_lock("jobs", Duration::from_secs(3), |held| async move {
//!             loop {
//!                 tokio::select! {
//!                     _ = held.lost() => return,
//!                     _ = tokio::time::sleep(Duration::from_millis(10)) => {
//!                         touches.lock().unwrap().push(Instant::now());
//!                     }
//!                 }
//!             }
//!         })
//!         .await
//!     })
//! };
//! tokio::time::sleep(Duration::from_millis(200)).await;
//!
//! masters[0].pause()?; // one master frozen: four of five still answer
//! proxies[1].blackhole(); // and one more cut off: three of five, still a quorum
//! tokio::time::sleep(Duration::from_millis(700)).await;
//! assert!(!worker.is_finished(), "a minority down must not cost the lock");
//!
//! proxies[2].blackhole(); // now a majority is gone: the lease cannot be renewed
//! let cut = Instant::now();
//! let outcome = worker.await?;
//! assert!(outcome.is_err_and(|e| e.is_lost()));
//! let last = *touches.lock().unwrap().last().unwrap();
//! assert!(last < cut + Duration::from_secs(3), "touched after the lease ran out");
//! masters[0].resume()?;
//! # Ok(()) }
//! ```
//!
//! Every fault has its undo: [`RedisServer::pause`] / [`resume`](RedisServer::resume),
//! [`kill`](RedisServer::kill) / [`restart`](RedisServer::restart) (empty unless the server
//! was built with [`aof(true)`](RedisServerBuilder::aof)), [`FaultProxy::blackhole`] /
//! [`heal`](FaultProxy::heal), and [`delay`](FaultProxy::delay), [`hold`](FaultProxy::hold),
//! [`reset`](FaultProxy::reset), [`refuse`](FaultProxy::refuse). When a test panics,
//! [`RedisNodes`] prints the last lines of every master's log.
//!
//! # Requirements
//!
//! A `redis-server` binary (6.2 or newer; 7 recommended) on `PATH`, or named by the
//! [`QUORUMLOCK_REDIS_SERVER`](REDIS_SERVER_ENV) environment variable. Unix only (pause and
//! resume are `SIGSTOP` and `SIGCONT`). Servers listen on `127.0.0.1` only, each in its own
//! temporary directory, and are killed when dropped.
//!
//! # Layout
//!
//! * [`server`] — [`RedisServer`] / [`RedisNodes`]: sandboxed masters with fault verbs
//!   (kill/restart, pause/resume).
//! * [`cluster`] — [`RedisCluster`]: a real Redis Cluster (`redis-cli --cluster create`) with
//!   shard fault verbs (kill a primary and let its replica take over, `CLUSTER FAILOVER`, slot
//!   migration stopped halfway for `ASK` redirections), and [`key_slot`].
//! * [`sentinel`] — [`SentinelGroup`]: a primary, its replicas and the Sentinels watching them,
//!   with failover verbs (`SENTINEL FAILOVER`, a killed primary replaced).
//! * [`proxy`] — [`FaultProxy`]: a per-master TCP proxy with latency, blackhole, held replies,
//!   reset, refuse/accept, retarget, and heal.
//! * [`masters`] — [`Masters`]: the masters a small program was given, or three local ones
//!   (what quorumlock's examples use).
//! * [`history`] — [`History`]: records the operations of a test's clients and the faults, and
//!   checks them for violations (overlapping leases, fences out of order, two holders inside a
//!   critical section at once), with the witnesses clients call inside their critical sections.
//!
//! The names used most are also at the crate root.
//!
//! * [`failover`] — [`failover::Pair`]: a primary and its asynchronous replica behind a virtual
//!   IP, failed over by hand; and the failover evidence `quorumlock demo --failover` prints (a
//!   lock on one master with a replica lost at its failover, five masters keeping theirs).
//! * [`figures`] — percentiles by one definition (nearest rank), as every figure quorumlock
//!   prints is computed.
//!
//! # Stability
//!
//! The crate follows semver like `quorumlock` itself (see its README, "Versioning").
//! quorumlock's own verification (the chaos scenarios, the explorer, the negative controls and
//! the deterministic simulation) is in an unpublished crate of the workspace,
//! `quorumlock-verify`, built on this one.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod clock;
pub mod cluster;
mod direct;
pub mod failover;
pub mod figures;
pub mod history;
mod log_tail;
pub mod masters;
mod mutex;
pub mod proxy;
pub mod sentinel;
pub mod server;
pub mod tls;

// Sandboxed masters.
#[doc(no_inline)]
pub use server::{RedisNodes, RedisServer, RedisServerBuilder, ServerTls, REDIS_SERVER_ENV};

// Redis Cluster and Sentinel topologies.
#[doc(no_inline)]
pub use cluster::{
    key_slot, FailoverMode, Promotion, RedisCluster, RedisClusterBuilder, SlotMigration,
    REDIS_CLI_ENV,
};
#[doc(no_inline)]
pub use sentinel::{SentinelGroup, SentinelGroupBuilder};

// The masters an example runs against.
#[doc(no_inline)]
pub use masters::{Masters, NODES_ENV};

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

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

//! Distributed mutual exclusion over N independent Redis masters: the Redlock algorithm, with a
//! per-node timeout, a decision taken as soon as a quorum answers, rollback of every failed
//! attempt, and optional fencing tokens.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock::Redlock;
//!
//! # async fn run() -> Result<(), quorumlock::Error> {
//! let rl = Redlock::builder([
//!     "redis://10.0.0.1:6379",
//!     "redis://10.0.0.2:6379",
//!     "redis://10.0.0.3:6379",
//!     "redis://10.0.0.4:6379",
//!     "redis://10.0.0.5:6379",
//! ])
//! .build()?;
//! let lock = rl.acquire("orders:42", Duration::from_secs(10)).await?;
//! // Only one holder at a time gets here, for at most lock.remaining().
//! lock.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The guide
//!
//! Beside this reference, the repository's `docs/` holds one page per topic: the command
//! (`docs/cli.md`), the primitives, voters and topologies (Cluster, Sentinel, TLS, ACLs),
//! durable votes, testing your code, how it works, the guarantees and key names, the safety
//! evidence, performance, migrating from other Redlock clients, and configuration.
//!
//! # The algorithm
//!
//! With N masters, a lock needs a quorum q = ⌊N/2⌋ + 1 of the **configured** N. One attempt:
//!
//! 1. Note the start on the monotonic clock, and send `SET key token NX PX ttl` to every master
//!    at once over long-lived multiplexed connections, each request bounded by the node timeout.
//! 2. Count the answers as they arrive and decide as soon as the outcome is known: q grants win,
//!    N − q + 1 refusals or failures lose. A slow minority adds no latency.
//! 3. Validity = TTL − elapsed − drift (drift = TTL × drift factor + 2 ms). A win with no validity
//!    left is a loss.
//! 4. On a loss, release on every master that did not refuse, including those that timed out: a
//!    late `SET` is executed before the release queued behind it on the same connection. (A
//!    master that answered "held by another token" set nothing.)
//!
//! Release is compare-and-delete and extend is compare-and-`PEXPIRE`, both by Lua script, so a
//! holder whose lease ran out never touches the next holder's key.
//!
//! # Voters
//!
//! Each URL is one voter, and kinds mix freely: `redis://host:port` (a standalone master;
//! `rediss://` with the `tls` feature), `redis+cluster://host:port[,host:port…]` (a whole Redis
//! Cluster: requests go to the primary of the resource's slot, `MOVED` and `ASK` are followed),
//! `redis+sentinel://host[:26379][,host…]/<master-name>[/db]` (the master a Sentinel group
//! names, followed through a failover). A resource's lock key is `<prefix><resource>`
//! ([`resource_key`]), and every other key and channel of it is a [companion](companion_key) in
//! the lock key's hash slot, so a resource lives in one slot of a cluster. The
//! rule on lost keys below counts voters: a failover inside one (a shard's primary, a
//! Sentinel-managed master, replaced by a replica without the key) is that voter losing it.
//!
//! # Guarantees, and what they assume
//!
//! At most one holder's validity window is open at a time for a resource, **while**:
//! the holder finishes within the validity it was given; masters keep their keys across restarts
//! (AOF with `appendfsync always`) or stay down for at least one TTL after a crash; clocks do not
//! jump; and no master is listed twice. A paused holder (GC pause, `SIGSTOP`) can outlive its
//! lease without knowing: protect the resource itself with [fencing
//! tokens](RedlockBuilder::fencing).
//!
//! A single master with an asynchronous replica can lose a lock on failover. N independent
//! masters tolerate the loss of the keys on up to q − 1 − (N − k) of them, where k is how many
//! masters the holder actually locked.
//!
//! Use an odd number of masters: an even count tolerates no more failures than one fewer.
//!
//! # Holding a lock
//!
//! [`Redlock::with_lock`] holds a lock for as long as its body runs: it renews the lease every
//! TTL / 3, and if no renewal reaches a quorum it fires the body's loss signal
//! ([`Held::lost`]) **before** the lease's deadline, drops the body, and returns
//! [`Error::Lost`]. [`HoldOptions`] caps the hold time and tunes the renewal.
//!
//! ```no_run
//! # use std::time::Duration;
//! # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
//! let rows = rl
//!     .with_lock("orders:42", Duration::from_secs(10), |held| async move {
//!         // Pass held.fencing_token() to the storage; hand clones of `held` to subtasks.
//!         42
//!     })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Waiting for a busy lock
//!
//! After an attempt finds the resource held, [`Redlock::acquire`] takes a place in the
//! resource's line on every node, ordered by arrival and shared by every client. The holder's
//! release reserves the key for the first waiter in line and publishes that waiter's id on
//! `{<prefix><resource>}:released:<client>` (see [`companion_key`]), the channel of that waiter's client (sharded pub/sub); only that
//! waiter attempts, once a quorum of nodes has announced the hand-off. Waiting is bounded by the
//! [acquire timeout](RedlockBuilder::acquire_timeout) ([`DEFAULT_ACQUIRE_TIMEOUT`]). The line
//! decides who tries, never who holds: a lock still needs a quorum of grants within its
//! validity. [`Redlock::try_acquire`] makes one attempt and never waits.
//!
//! # Feature flags
//!
//! All are off by default; they are additive, and tokio stays the only runtime.
//!
//! * **`tls`** — `rediss://` masters, through rustls with the `ring` crypto provider: the
//!   system's root certificates, or a private CA with
//!   [`RedlockBuilder::tls_root_certificate`], and mutual TLS with
//!   [`RedlockBuilder::tls_client_certificate`]. A certificate that does not verify is a failed
//!   node, never a fallback to plain text. Without the feature, [`RedlockBuilder::build`]
//!   refuses `rediss://` URLs.
//! * **`metrics`** — records through the [`metrics`](https://docs.rs/metrics) facade (install
//!   any recorder, e.g. a Prometheus exporter); without it nothing is recorded and nothing is
//!   linked:
//!
//!   | name | type | labels | what |
//!   |---|---|---|---|
//!   | `quorumlock_wait_seconds` | histogram | `primitive`, `outcome` | time from an acquire call to its result |
//!   | `quorumlock_hold_seconds` | histogram | `primitive` | time from acquiring a lock to its release (or drop) |
//!   | `quorumlock_waiting` | gauge | `primitive` | acquire calls in progress |
//!   | `quorumlock_held` | gauge | `primitive` | locks held now |
//!   | `quorumlock_node_errors_total` | counter | `node`, `kind` | failed requests per master |
//!
//!   `primitive` is one of `mutex`, `multi`, `permit`, `read`, `write`, `owned`, `leader`;
//!   `outcome` is `acquired`, `contended`, `unavailable` or `failed`; `node` is a configured
//!   master's `host:port`; `kind` is `timeout`, `unresponsive`, `redis` or `protocol`. Resource
//!   names never appear.
//! * **`simulation`** — **not for production, and not covered by semver**: the
//!   `simulation` module, through which a deterministic simulation (turmoil, tokio's paused
//!   time) supplies the wall clock, the randomness and the connections to standalone masters,
//!   per thread. The monotonic clock needs no feature: the library reads tokio's, which is
//!   virtual while a runtime's time is paused.
//!
//! # Key layout
//!
//! The names of the keys on the masters are part of the contract between clients: two clients
//! that disagree on them do not see each other's locks. This version writes and expects layout
//! [`KEY_LAYOUT`], and marks every master it connects to at `<prefix>`[`LAYOUT_MARKER`]; a
//! master marked with another layout is not used, and every error about it says "key layout
//! mismatch" and names it. A change of layout is a breaking release, announced in the
//! CHANGELOG.
//!
//! # Layout
//!
//! * [`Redlock`] / [`RedlockBuilder`] — the client and its configuration.
//! * [`Lock`] / [`LockToken`] — a held lease: extend, release.
//! * [`Redlock::with_lock`] / [`Held`] / [`HoldOptions`] — holding with auto-renewal (`hold`).
//! * [`Redlock::acquire_many`] / [`MultiLock`] — several resources, all or nothing (`many`).
//! * [`Lock::into_reentrant`] / [`ReentrantLock`] / [`Redlock::acquire_as`] — nested holds, and
//!   a lock an owner id can take again (`reentrant`).
//! * [`Redlock::rw_lock`] / [`RwLock`] — many readers or one writer (`rwlock`).
//! * [`Redlock::campaign`] / [`Redlock::leader`] / [`Redlock::observe`] — leader election
//!   (`election`).
//! * [`Redlock::semaphore`] / [`Semaphore`] / [`Permit`] — at most K holders (`semaphore`).
//! * [`Redlock::inspect`] / [`Inspection`] — what every node holds (`inspect`).
//! * [`Redlock::stats`] / [`Stats`] — counters (`stats`).
//! * [`Error`] / [`NodeError`] — outcomes, with every node's own.
//!
//! # Layers
//!
//! Inside, each module imports only from its own layer or the layers below it, so the bottom
//! of any change is easy to find (`tests/house/layering.rs` reads this table and checks every `use`):
//!
//! | layer | modules | what they hold |
//! |---|---|---|
//! | L0 | `seam`, `simulation`, `error`, `token`, `quorum`, `retry`, `stats`, `sync`, `task_holds`, `telemetry`, `durability`, `wakeup::hub`, `wakeup::handed` | pure logic, no I/O: the clocks and randomness every module reads (and a simulation's overrides of them), errors, tokens, quorum and lease arithmetic, retry policy, counters, which task holds what, metrics, what confirms a durable vote, who a hand-off wakes, how long a hand-off holds |
//! | L1 | `scripts`, `node`, `node::health`, `node::layout`, `node::link`, `node::standalone`, `node::durable`, `node::conn`, `node::target`, `node::subscription`, `keys`, `keys::by_slot` | one voter: what it is (a master, a cluster, a Sentinel group) and its connection, its health, its key layout marker, the checks at connect (no cluster node as a master, durable votes possible), its wake-up subscriptions, the scripts and the requests on a lock's keys (one hash tag at a time on a cluster) |
//! | L2 | `inner`, `fanout`, `release`, `retries`, `wakeup`, `wakeup::subscriber` | all masters: the client's state, the fan-out, releases and rollbacks, the wait line |
//! | L3 | `lock`, `redlock`, `builder` | the client: a held lock, the acquire loop, configuration |
//! | L4 | `hold`, `many`, `inspect`, `semaphore`, `reentrant`, `rwlock`, `election` | features built on the client |

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod builder;
mod durability;
mod election;
mod error;
mod fanout;
mod hold;
mod inner;
mod inspect;
mod keys;
mod lock;
mod many;
mod node;
mod quorum;
mod redlock;
mod reentrant;
mod release;
mod retries;
mod retry;
mod rwlock;
mod scripts;
mod seam;
mod semaphore;
#[cfg(feature = "simulation")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
pub mod simulation;
mod stats;
mod sync;
mod task_holds;
mod telemetry;
mod token;
mod wakeup;

pub use builder::{
    RedlockBuilder, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR,
    DEFAULT_FENCE_GRACE, DEFAULT_MAX_NODE_TIMEOUT, DEFAULT_NODE_TIMEOUT_DIVISOR,
    DEFAULT_RETRY_COUNT, DEFAULT_RETRY_DELAY, DEFAULT_RETRY_JITTER, MIN_FENCE_GRACE,
};
pub use durability::Durability;
pub use election::{Leader, MAX_LEADER_VALUE};
pub use error::{ConfigError, Error, LossReason, NodeError, NodeErrorKind};
pub use hold::{Held, HoldOptions};
pub use inspect::{Inspection, NodeState, NodeStatus, QueuedWaiter, Verdict};
pub use lock::Lock;
pub use many::MultiLock;
pub use node::{
    companion_key, is_companion_key, lock_key_of_companion, resource_key, KEY_LAYOUT, LAYOUT_MARKER,
};
pub use redlock::{Health, Redlock};
pub use reentrant::{ReentrantLock, MAX_OWNER_LEN};
pub use release::Released;
pub use rwlock::RwLock;
pub use semaphore::{Permit, Semaphore, MAX_PERMITS};
pub use stats::{NodeStats, Stats};
pub use token::LockToken;

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's code examples (`docs/`), compiled as doc tests so they cannot rot.
#[cfg(doctest)]
pub mod guide_doctests {
    #[doc = include_str!("../docs/primitives.md")]
    pub struct Primitives;
    #[doc = include_str!("../docs/voters.md")]
    pub struct Voters;
    #[doc = include_str!("../docs/durable-votes.md")]
    pub struct DurableVotes;
    #[doc = include_str!("../docs/testing.md")]
    pub struct Testing;
}

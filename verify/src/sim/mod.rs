//! The deterministic simulation: the library's own code and its own Lua scripts, on simulated
//! masters ([`quorumlock_sim`]) and a simulated network (turmoil: every host in one thread, on
//! virtual time), every source of time and randomness of the library seeded (the `simulation`
//! feature's seam). A run is a function of its seed: its history's digest is the same every
//! time.
//!
//! * [`plan`]: a run's clients and faults, drawn from its seed.
//! * [`net`]: the clients' connections, with faults of their own (latency by direction, held
//!   requests that land after a newer connection's).
//! * [`workload`]: the clients: quorumlock's mutex and owner ids, and another Redlock client.
//! * [`run`](mod@run): one run; the overlap checker and the digest.
//! * [`quorum`]: the second checker, on the masters' keys: a valid lock's value on a quorum.
//! * [`wire`]: the requests as they leave the clients, and of them the owner's attempts'.
//! * [`takeovers`]: the third checker, on the wire: a decided attempt of an owner names no new
//!   value for a takeover.
//! * [`owner_keys`]: the fourth checker, on what the masters ran: a key of an owner's lock
//!   holds its value while the lock's grant and renewals there keep it.
//! * [`shrink`]: a failing plan made smaller (faults taken away one at a time, then clients, then
//!   time) while it still fails.

pub mod net;
pub mod owner_keys;
pub mod plan;
pub mod quorum;
pub mod run;
pub mod shrink;
pub mod takeovers;
pub mod wire;
pub mod workload;

pub use plan::Plan;
pub use run::{run, RunReport};

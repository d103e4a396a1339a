//! Test support for quorumlock: real `redis-server` processes on free loopback ports, a per-node TCP
//! fault proxy, and a checker for recorded lock histories.
//!
//! Shared by the library's integration tests, the benchmarks, the chaos suite and `quorumlock demo`.

#![warn(missing_docs, missing_debug_implementations)]

mod server;

pub use server::{RedisNodes, RedisServer, RedisServerBuilder, REDIS_SERVER_ENV};

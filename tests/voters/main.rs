//! Voters and durability: Redis Cluster and Sentinel voters, managed services (TLS, ACL rules,
//! Sentinel logins), durable votes, the failover evidence, security, and which server the suite
//! runs on.

#[path = "../common/mod.rs"]
mod common;

mod acl_rules;
mod captured;
mod cluster_and_sentinel;
mod cluster_durable;
mod cluster_node_refused;
mod durable_votes;
mod failover_evidence;
mod managed_tls;
mod security;
mod sentinel_auth;
mod server_kind;

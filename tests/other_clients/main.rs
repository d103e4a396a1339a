//! Beside other Redlock clients: the lock key is the resource name, so rslock and quorumlock
//! exclude each other on shared masters; the key layout marker; names that could collide with
//! another resource's keys.

#[path = "../common/mod.rs"]
mod common;

mod key_names;
mod layout_marker;
mod rslock_beside;

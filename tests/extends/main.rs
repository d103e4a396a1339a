//! Extends and renewals: an extend never shortens a key, whether it fails, is dropped, or runs late
//! on the masters; `with_lock` renews, signals a loss and stops at its hold limit.

#[path = "../common/mod.rs"]
mod common;

mod dropped_extends;
mod holding;
mod late_requests;

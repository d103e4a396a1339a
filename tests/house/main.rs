//! The house's own rules: the library's layering, the minimum Rust version, and the simulation seam
//! against real masters.

#[path = "../common/mod.rs"]
mod common;

mod layering;
mod msrv;
mod simulation_seam;

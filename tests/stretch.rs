//! A lock key kept alive over its wait line, so that the plain mutex's first attempt can be a
//! bare `SET NX PX` (see `stretch` in `lua/line.lua` and docs/how-it-works.md): what it must
//! keep (`line`), and the scenarios that try to break it (`attacks`, `attacks_2`). One binary,
//! so that the three share one build and one run.

mod common;

#[path = "stretch/attacks.rs"]
mod attacks;
#[path = "stretch/attacks_2.rs"]
mod attacks_2;
#[path = "stretch/line.rs"]
mod line;

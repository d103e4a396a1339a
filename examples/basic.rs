//! Acquire, work, release — the smallest useful program.
//!
//! ```text
//! cargo run --example basic   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example basic
//! cargo run --example basic -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//!
//! Copied out of this repository, it needs these dependencies (and `redis-server` on `PATH`
//! when it starts its own masters); `scripts/check-examples.sh` (run by `make test`) compiles it
//! with exactly these:
//!
//! ```toml
//! [dependencies]
//! quorumlock = { path = "../quorumlock" }             # a checkout of this repository
//! quorumlock-testkit = { path = "../quorumlock/testkit" }
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! ```

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::Masters;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let rl = Redlock::builder(masters.urls()).build()?;

    let lock = rl
        .acquire("reports:nightly", Duration::from_secs(30))
        .await?;
    println!(
        "holding {} for {:?} (token {})",
        lock.resource(),
        lock.remaining(),
        lock.token()
    );
    // ... the work that only one process may do at a time, finished within lock.remaining() ...
    let released = lock.release().await?;
    println!(
        "released: {} masters confirmed before the call returned",
        released.deleted + released.absent
    );
    Ok(())
}

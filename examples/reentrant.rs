//! Reentrant ownership: nested holds of one lock in one process, and a worker that restarts
//! under the same owner id taking its own lock back at once.
//!
//! ```text
//! cargo run --example reentrant   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example reentrant
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

use quorumlock::{Error, Redlock};
use quorumlock_testkit::Masters;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let rl = Redlock::builder(masters.urls()).build()?;
    let ttl = Duration::from_secs(10);

    // Nested holds: the count lives in this process; the key goes with the last hold.
    let outer = rl.acquire("ledger", ttl).await?.into_reentrant();
    let inner = outer.nested();
    println!("holds: {}", outer.holds());
    inner.extend(ttl).await?; // renews the one key every hold shares
    assert!(
        inner.release().await?.is_none(),
        "the outer hold keeps the key"
    );
    println!("released on the masters: {:?}", outer.release().await?);

    // A plain acquire of a lock this task holds would wait for itself: refused at once.
    let lock = rl.acquire("report", ttl).await?;
    match rl.acquire("report", ttl).await {
        Err(Error::AlreadyHeld { resource }) => println!("{resource:?}: already held by this task"),
        other => println!("unexpected: {other:?}"),
    }
    lock.release().await?;

    // A worker that crashes while holding, restarted under the same owner id, takes its lock
    // back without waiting for the lease to run out.
    let crashed = Redlock::builder(masters.urls()).build()?;
    std::mem::forget(crashed.acquire_as("shard:7", "worker-7", ttl).await?);
    let restarted = Redlock::builder(masters.urls()).build()?;
    let lock = restarted.acquire_as("shard:7", "worker-7", ttl).await?;
    println!("worker-7 took shard:7 back, {:?} left", lock.remaining());
    lock.release().await?;
    Ok(())
}

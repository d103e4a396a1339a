//! Hold a lock for as long as the work takes: renewed in the background, lost loudly.
//!
//! ```text
//! cargo run --example with_lock   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example with_lock
//! cargo run --example with_lock -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
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

use quorumlock::{HoldOptions, Redlock};
use quorumlock_testkit::Masters;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let rl = Redlock::builder(masters.urls()).build()?;

    // A 3 s lease renewed every second while the 10 s job runs; never held beyond a minute.
    let opts = HoldOptions::new().max_hold(Duration::from_secs(60));
    let result = rl
        .with_lock_opts(
            "jobs:reindex",
            Duration::from_secs(3),
            opts,
            |held| async move {
                for step in 1..=10 {
                    if !held.is_held() {
                        return Err("lock lost");
                    }
                    println!("step {step}/10, {:?} of lease left", held.remaining());
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(held.renewals())
            },
        )
        .await;
    match result {
        Ok(Ok(renewals)) => println!("done after {renewals} renewals"),
        Ok(Err(why)) => println!("stopped: {why}"),
        Err(e) if e.is_lost() => println!("the lease was lost and the job stopped: {e}"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

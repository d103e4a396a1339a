//! Hold a lock for as long as the work takes: renewed in the background, lost loudly.
//!
//! ```text
//! cargo run --example with_lock   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example with_lock
//! cargo run --example with_lock -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```
//!
//! Copied out of this repository, it needs `quorumlock`, `quorumlock-testkit` (its `Masters`
//! reads the masters to use, or starts three local ones) and `tokio` with the `rt-multi-thread`
//! and `macros` features.

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

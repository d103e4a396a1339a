//! At most 3 of 8 workers export at once, each worker with a client of its own (as separate
//! processes would have): a semaphore is 3 slots, each an ordinary quorum lock.
//!
//! ```text
//! cargo run --example semaphore   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example semaphore
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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::Masters;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let exporting = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..8 {
        let rl = Redlock::builder(masters.urls()).build()?;
        let exporting = exporting.clone();
        workers.push(tokio::spawn(async move {
            let exports = rl.semaphore("exports", 3)?;
            exports
                .with_permit(Duration::from_secs(10), |held| async move {
                    let now = exporting.fetch_add(1, Ordering::SeqCst) + 1;
                    println!(
                        "worker {worker} exports on {} ({now} at once)",
                        held.resource()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    exporting.fetch_sub(1, Ordering::SeqCst);
                })
                .await
        }));
    }
    for worker in workers {
        worker.await??;
    }
    println!("done: never more than 3 at once");
    Ok(())
}

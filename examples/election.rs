//! Leader election: three candidates, one leader at a time; each resigns after a moment and
//! the next takes over at once. An observer follows the changes as the masters announce them,
//! each confirmed by a quorum read.
//!
//! ```text
//! cargo run --example election   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example election
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
//! futures = "0.3"
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! ```

use std::time::Duration;

use futures::StreamExt;
use quorumlock::Redlock;
use quorumlock_testkit::Masters;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let observer = Redlock::builder(masters.urls()).build()?;
    let watching = tokio::spawn(async move {
        let mut leaders = Box::pin(observer.observe("scheduler", Duration::from_secs(1)));
        while let Some(leader) = leaders.next().await {
            match leader {
                Some(leader) => println!("observer: {} leads", leader.value),
                None => println!("observer: no leader"),
            }
        }
    });
    let mut candidates = Vec::new();
    for name in ["host-a", "host-b", "host-c"] {
        let rl = Redlock::builder(masters.urls()).build()?;
        candidates.push(tokio::spawn(async move {
            rl.campaign(
                "scheduler",
                Duration::from_secs(3),
                name,
                |held| async move {
                    println!("{name}: elected, term {:?}", held.fencing_token());
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    println!("{name}: resigning");
                },
            )
            .await
        }));
    }
    for candidate in candidates {
        candidate.await??;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    watching.abort();
    Ok(())
}

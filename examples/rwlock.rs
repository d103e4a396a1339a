//! Many readers or one writer: readers share a catalog, a writer rebuilds it alone, and new
//! readers wait behind a waiting writer.
//!
//! ```text
//! cargo run --example rwlock   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example rwlock
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
    let ttl = Duration::from_secs(10);
    let mut tasks = Vec::new();
    for reader in 0..3 {
        let rl = Redlock::builder(masters.urls())
            .retry_delay(Duration::from_millis(20))
            .build()?;
        tasks.push(tokio::spawn(async move {
            let catalog = rl.rw_lock("catalog")?;
            let reading = catalog.read(ttl).await?;
            println!("reader {reader} reads, beside the other readers");
            tokio::time::sleep(Duration::from_millis(300)).await;
            reading.release().await?;
            Ok::<_, quorumlock::Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let writer = Redlock::builder(masters.urls())
        .retry_delay(Duration::from_millis(20))
        .fencing(true)
        .build()?;
    let catalog = writer.rw_lock("catalog")?;
    let writing = catalog.write(ttl).await?;
    println!(
        "the writer rebuilds the catalog alone, fencing token {:?}",
        writing.fencing_token()
    );
    writing.release().await?;
    for task in tasks {
        task.await??;
    }
    Ok(())
}

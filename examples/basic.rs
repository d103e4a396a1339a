//! Acquire, work, release — the smallest useful program.
//!
//! ```text
//! cargo run --example basic -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
//! ```

use std::time::Duration;

use quorumlock::Redlock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls: Vec<String> = std::env::args().skip(1).collect();
    let rl = Redlock::builder(&urls).build()?;

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

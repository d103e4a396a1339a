//! Lock two accounts at once, all or nothing, to move money between them.
//!
//! ```text
//! cargo run --example acquire_many   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example acquire_many
//! cargo run --example acquire_many -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
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
    let rl = Redlock::builder(masters.urls())
        .key_prefix("bank:")
        .build()?;

    // Either both keys are set on a quorum of masters, or neither is anywhere.
    let mut both = rl
        .acquire_many(&["acct:1", "acct:2"], Duration::from_secs(5))
        .await?;
    println!("holding {:?} for {:?}", both.resources(), both.remaining());
    // ... debit acct:1, credit acct:2 ...
    both.extend(Duration::from_secs(5)).await?; // renews both together
    both.release().await?; // releases both together
    Ok(())
}

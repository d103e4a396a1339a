//! Fencing tokens: storage that rejects writes from a holder whose lease has run out.
//!
//! A holder can be paused (GC, SIGSTOP, a slow disk) past its lease while another client takes the
//! lock. Its late write then arrives after the new holder's. The fencing token — strictly greater
//! for every new holder — lets the storage tell the two apart. The masters must keep their state
//! (AOF with `appendfsync always`) for the tokens to stay monotonic across restarts.
//!
//! ```text
//! cargo run --example fencing   # starts three local masters for the run
//! QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 cargo run --example fencing
//! cargo run --example fencing -- redis://127.0.0.1:7001 redis://127.0.0.1:7002 redis://127.0.0.1:7003
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

use std::sync::Mutex;
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::Masters;

/// A store that remembers the highest fencing token it has seen and refuses anything older.
#[derive(Default)]
struct FencedStore {
    state: Mutex<(u64, String)>,
}

impl FencedStore {
    fn write(&self, fence: u64, value: &str) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if fence < state.0 {
            return Err(format!("stale fencing token {fence} < {}", state.0));
        }
        *state = (fence, value.to_owned());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let masters = Masters::find()?;
    let rl = Redlock::builder(masters.urls()).fencing(true).build()?;
    let store = FencedStore::default();

    // The first holder takes the lock, then stalls past its 200 ms lease.
    let stale = rl.acquire("report", Duration::from_millis(200)).await?;
    let stale_fence = stale.fencing_token().ok_or("fencing is on")?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Meanwhile the lease expired and a second holder took over and wrote.
    let current = rl.acquire("report", Duration::from_secs(5)).await?;
    let fence = current.fencing_token().ok_or("fencing is on")?;
    store.write(fence, "fresh report")?;

    // The first holder wakes up and writes: the store refuses.
    match store.write(stale_fence, "stale report") {
        Ok(()) => println!("stale write accepted (this must not happen)"),
        Err(why) => println!("stale write refused: {why}"),
    }
    current.release().await?;
    Ok(())
}

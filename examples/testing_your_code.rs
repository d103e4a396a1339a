//! Testing your own code against real masters with the test kit: a small worker holds a lock and
//! touches a resource from a task of its own; five masters run behind fault proxies; one is
//! paused, a minority partitioned, one restarted empty — the worker must keep going — and then a
//! majority is cut off, and the worker must stop touching the resource once its lock is lost.
//!
//! ```text
//! cargo run --example testing_your_code    # both workers, with what each did
//! cargo test --example testing_your_code   # the same as tests
//! ```
//!
//! The careless worker forgets to watch the loss signal in the task it spawned, and the same
//! scenario catches it: that is the test that tells the two apart.
//!
//! Copied out of this repository, it needs these dependencies (and `redis-server` on `PATH`
//! when it starts its own masters); `scripts/check-examples.sh` (run by `make test`) compiles it
//! with exactly these:
//!
//! ```toml
//! [dependencies]
//! quorumlock = { path = "../quorumlock" }             # a checkout of this repository
//! quorumlock-testkit = { path = "../quorumlock/testkit" }
//! tokio = { version = "1", features = ["rt-multi-thread", "macros", "time"] }
//! ```

use std::future::Future;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::{FaultProxy, RedisNodes};

const RESOURCE: &str = "jobs";
/// Well beyond each minority fault and the client's recovery from it: a master that missed
/// renewals for longer than the TTL has lost its copy of the lock for good (renewals extend a
/// copy, they never put one back), and such faults add up to a majority.
const TTL: Duration = Duration::from_secs(6);
const TICK: Duration = Duration::from_millis(10);
/// How long each minority fault lasts.
const FAULT: Duration = Duration::from_secs(1);
/// How long a master that was paused or partitioned gets to answer again before the next fault.
const SETTLE: Duration = Duration::from_millis(1500);

/// When the resource was touched.
type Touches = Arc<Mutex<Vec<Instant>>>;

fn touch(touches: &Touches) {
    touches
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Instant::now());
}

/// How many touches since `t`.
fn since(touches: &Touches, t: Instant) -> usize {
    let touches = touches.lock().unwrap_or_else(|e| e.into_inner());
    touches.iter().filter(|at| **at > t).count()
}

/// The worker: while it holds the lock, a task of its own touches the resource every tick, and
/// stops as soon as the lock is lost. (`with_lock` drops its body on a loss, but not a task the
/// body spawned.)
async fn worker(rl: Redlock, touches: Touches) -> Result<(), quorumlock::Error> {
    rl.with_lock(RESOURCE, TTL, |held| async move {
        let work = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = held.lost() => return,
                    _ = tokio::time::sleep(TICK) => touch(&touches),
                }
            }
        });
        let _ = work.await;
    })
    .await
}

/// The same worker, but its task never looks at the loss signal.
async fn careless_worker(rl: Redlock, touches: Touches) -> Result<(), quorumlock::Error> {
    rl.with_lock(RESOURCE, TTL, |_held| async move {
        let work = tokio::spawn(async move {
            // Runs for a minute whatever happens to the lock.
            for _ in 0..6_000 {
                tokio::time::sleep(TICK).await;
                touch(&touches);
            }
        });
        let _ = work.await;
    })
    .await
}

/// What a worker did in the scenario.
#[derive(Debug)]
struct Verdict {
    /// Touches while a minority of masters was down (it should keep working).
    with_a_minority_down: usize,
    /// The first minority fault it lost its lock under, if any (it should keep it).
    lost_under: Option<&'static str>,
    /// Whether `with_lock` ended with its lock lost.
    lost: bool,
    /// How `with_lock` ended.
    ended_with: String,
    /// Touches after the lock was reported lost, and after the next holder acquired it.
    after_the_loss: usize,
}

/// Five masters behind proxies; the worker under a minority of faults, then a majority cut off.
async fn scenario<W, F>(worker: W) -> Result<Verdict, Box<dyn std::error::Error>>
where
    W: FnOnce(Redlock, Touches) -> F,
    F: Future<Output = Result<(), quorumlock::Error>> + Send + 'static,
{
    let mut masters = RedisNodes::spawn(5)?;
    let proxies = masters
        .iter()
        .map(|m| FaultProxy::start(m.addr()))
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let touches = Touches::default();
    let running = tokio::spawn(worker(Redlock::builder(&urls).build()?, touches.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A minority down, three ways, one after the other. Each fault is shorter than the TTL and
    // undone, and the client given time to take the master back, before the next: two
    // minorities at once can be a majority.
    let t = Instant::now();
    masters[0].pause()?; // frozen (SIGSTOP): connections open, nothing answered
    tokio::time::sleep(FAULT).await;
    masters[0].resume()?;
    tokio::time::sleep(SETTLE).await;
    let mut lost_under = running.is_finished().then_some("one master paused");
    proxies[1].blackhole(); // two masters partitioned away
    proxies[2].blackhole();
    tokio::time::sleep(FAULT).await;
    proxies[1].heal();
    proxies[2].heal();
    tokio::time::sleep(SETTLE).await;
    if lost_under.is_none() && running.is_finished() {
        lost_under = Some("two masters partitioned");
    }
    masters[3].restart()?; // back empty: its copy of the lock is gone
    tokio::time::sleep(FAULT).await;
    let with_a_minority_down = since(&touches, t);
    if lost_under.is_none() && running.is_finished() {
        lost_under = Some("one master restarted empty");
    }

    // A majority cut off: no renewal reaches a quorum.
    for proxy in &proxies[..3] {
        proxy.blackhole();
    }
    let outcome = tokio::time::timeout(TTL * 2, running).await;
    let lost = matches!(&outcome, Ok(Ok(Err(e))) if e.is_lost());
    let ended_with = match &outcome {
        Ok(Ok(Err(e))) => e.to_string(),
        other => format!("{other:?}"),
    };
    let ended = Instant::now();
    for proxy in &proxies[..3] {
        proxy.heal();
    }
    // The next holder takes the lock once the partition heals.
    let next = Redlock::builder(&urls).build()?;
    let lock = next.acquire(RESOURCE, TTL).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_the_loss = since(&touches, ended);
    lock.release().await?;
    Ok(Verdict {
        with_a_minority_down,
        lost_under,
        lost,
        ended_with,
        after_the_loss,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    for (name, verdict) in [
        ("worker", scenario(worker).await),
        ("careless worker", scenario(careless_worker).await),
    ] {
        match verdict {
            Ok(v) => println!(
                "{name}: {} touches with a minority down (lock lost under: {}); lock lost once a \
                 majority was cut off: {}; {} touches after the loss\n  ({})",
                v.with_a_minority_down,
                v.lost_under.unwrap_or("none"),
                v.lost,
                v.after_the_loss,
                v.ended_with
            ),
            Err(e) => {
                eprintln!("{name}: the scenario failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn the_worker_keeps_its_lock_under_a_minority_of_faults_and_stops_once_it_is_lost() {
        let v = scenario(worker).await.unwrap();
        assert_eq!(v.lost_under, None, "{v:?}");
        assert!(v.with_a_minority_down > 100, "the worker stalled: {v:?}");
        assert!(v.lost, "{v:?}");
        assert_eq!(v.after_the_loss, 0, "touched without the lock: {v:?}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_scenario_catches_a_worker_that_ignores_the_loss() {
        let v = scenario(careless_worker).await.unwrap();
        assert!(v.lost, "{v:?}");
        assert!(v.after_the_loss > 0, "{v:?}");
    }
}

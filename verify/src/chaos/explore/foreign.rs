//! Foreign clients in the mix ([`Rslock`]): rslock 0.10 workers take the mutex group's names
//! beside quorumlock's clients, on the same masters and keys (key layout 3: the lock key is
//! the name), and record their holds into the same history, through the same witnesses and
//! registers. A foreign hold's validity window runs from the end of its `lock` call to the
//! start of that call plus rslock's `validity_time`: rslock computes it from the start of its
//! last attempt, which is later, so the window recorded is never longer than the one rslock
//! promises.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::Rng;

use super::super::setup::{lock_key, Setup};
use super::super::shared::{long_hold_until, Shared};
use super::super::workload::Workload;
use crate::mutex;
use quorumlock_testkit::{Op, OpKind, Outcome};

/// How long an unlock may take before the worker gives up on it (rslock has no timeout of its
/// own: a paused or cut-off master would hold the worker until the fault ends).
const UNLOCK_TIMEOUT: Duration = Duration::from_secs(1);

/// The rslock workload: each client locks random names of its group with rslock, holds, and
/// unlocks.
#[derive(Debug, Default)]
pub(super) struct Rslock;

impl Workload for Rslock {
    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        Box::pin(run_client(shared, client, rng))
    }
}

/// The value rslock wrote, as the history's token.
fn token(val: &[u8]) -> String {
    val.iter().map(|b| format!("{b:02x}")).collect()
}

async fn run_client(shared: Arc<Shared>, client: usize, mut rng: StdRng) {
    let tuning = shared.setup.tuning(client);
    let ttl = tuning.ttl;
    let mut manager = rslock::LockManager::new(shared.urls_of(client).to_vec());
    manager.set_retry(
        tuning.retry_count.max(1),
        tuning.retry_delay.max(Duration::from_millis(1)),
    );
    while !shared.stopped() {
        let r = rng.random_range(0..shared.setup.resources);
        let resource = Setup::resource(r);
        let key = lock_key(&resource);
        let start = Instant::now();
        // Bounded by the TTL: no validity is left after it anyway. A call cut short may
        // still have set keys, which expire with their TTL.
        let locked = tokio::time::timeout(ttl, manager.lock(key.as_str(), ttl)).await;
        let end = Instant::now();
        let lock = match locked {
            Ok(Ok(lock)) => lock,
            Ok(Err(e)) => {
                shared.history.record(Op::acquire_failed(
                    client,
                    &resource,
                    start,
                    end,
                    format!("rslock: {e:?}"),
                ));
                let delay = tuning.retry_delay;
                shared
                    .sleep_until(Instant::now() + rng.random_range(Duration::ZERO..=delay))
                    .await;
                continue;
            }
            Err(_) => {
                shared.history.record(Op::acquire_failed(
                    client,
                    &resource,
                    start,
                    end,
                    "rslock: no answer within the TTL",
                ));
                continue;
            }
        };
        let valid_until = start + Duration::from_millis(lock.validity_time as u64);
        let token = token(&lock.val);
        shared.history.record(Op {
            client,
            resource: resource.clone(),
            token: token.clone(),
            kind: OpKind::Acquire,
            start,
            end,
            outcome: Outcome::Ok {
                valid_until: Some(valid_until),
            },
            fence: None,
        });
        shared.successes.fetch_add(1, Ordering::SeqCst);
        mutex::lock(&shared.latencies).push(end - start);

        // The critical section, as quorumlock's clients do theirs (see
        // `Shared::critical_section`), against the window recorded above.
        let margin = tuning.margin();
        let long = tuning.long_hold_chance > 0.0 && rng.random_bool(tuning.long_hold_chance);
        let guard = shared.witnesses[r].enter(client);
        let value = shared.registers[r].read();
        let until = if long {
            long_hold_until(valid_until, margin, &mut rng)
        } else {
            Instant::now() + rng.random_range(Duration::ZERO..=tuning.critical_section)
        };
        shared.sleep_until(until).await;
        if valid_until.saturating_duration_since(Instant::now()) > margin {
            shared.registers[r].write(value + 1);
        }
        drop(guard);

        let released = Instant::now();
        let unlocked = tokio::time::timeout(UNLOCK_TIMEOUT, manager.unlock(&lock)).await;
        shared.history.record(Op {
            client,
            resource,
            token,
            kind: OpKind::Release,
            start: released,
            end: Instant::now(),
            outcome: match unlocked {
                Ok(()) => Outcome::Ok { valid_until: None },
                Err(_) => Outcome::Failed {
                    reason: "rslock: unlock timed out".to_owned(),
                },
            },
            fence: None,
        });
        shared.think(client, &mut rng).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_value_is_recorded_in_hex() {
        assert_eq!(token(&[0x00, 0xab, 0x7f]), "00ab7f");
    }
}

//! The clients of a run, each a simulated process: quorumlock's own (`acquire`, `acquire_as`,
//! extend, release, a lock used to its last millisecond or walked away from) and a client
//! written the way every other Redlock client is, on the same names. Each records what it was
//! told in the run's history, on the simulation's clock.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use quorumlock::{Lock, Redlock};
use quorumlock_testkit::{Op, OpKind, Outcome};
use redis::aio::MultiplexedConnection;

use super::net::{self, SharedLinks};
use super::plan::{Hold, Plan, WorkerKind, WorkerPlan};

/// The run's history: every operation, in the order they ended.
pub type Ops = Rc<RefCell<Vec<Op>>>;

/// The locks each worker holds as a `Lock` object, by worker: a worker that crashes drops them
/// where they stand, and a dropped `Lock` releases itself, so its leases end at the crash, or
/// where the release that the crash cut short started.
pub type Held = Rc<RefCell<std::collections::BTreeMap<usize, Vec<HeldLock>>>>;

/// A lock a worker holds (see [`Held`]).
#[derive(Clone, Debug)]
pub struct HeldLock {
    resource: String,
    token: String,
    fence: Option<u64>,
    /// When its release started, once it has.
    releasing: Option<std::time::Instant>,
}

/// Ends, at the crash of worker `index`, the leases of every lock it held (see [`Held`]).
pub fn crashed(index: usize, client: usize, held: &Held, ops: &Ops) {
    let locks = held.borrow_mut().remove(&index).unwrap_or_default();
    for lock in locks {
        let at = lock.releasing.unwrap_or_else(now);
        ops.borrow_mut().push(Op {
            client,
            resource: lock.resource,
            token: lock.token,
            kind: OpKind::Release,
            start: at,
            end: at,
            outcome: Outcome::Ok { valid_until: None },
            fence: lock.fence,
        });
    }
}

/// Starts a run: the foreign clients' values count from 0 again, as in every run of a seed.
pub fn reset() {
    VALUES.with(|v| v.set(0));
}

/// Now, on the simulation's clock, as the library reads it.
pub fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The history's client number of worker `index` (an owner's workers share the owner's, so
/// that the checker counts their holds as one holder's: they take the lock over from each
/// other by design).
pub fn client_of(plan: &Plan, index: usize) -> usize {
    match &plan.workers[index].kind {
        WorkerKind::Owner(owner) => {
            1000 + plan
                .workers
                .iter()
                .position(|w| w.kind == WorkerKind::Owner(owner.clone()))
                .unwrap_or(index)
        }
        _ => index,
    }
}

/// Runs worker `index` of `plan` until `end` (simulated), recording into `ops`.
pub async fn run_worker(
    plan: Rc<Plan>,
    index: usize,
    end: std::time::Instant,
    ops: Ops,
    held: Held,
) {
    let w = plan.workers[index].clone();
    let client = client_of(&plan, index);
    let resource = plan.resources[w.resource].clone();
    if w.kind == WorkerKind::Foreign {
        foreign(&plan, &w, index, client, &resource, end, &ops).await;
        return;
    }
    let urls: Vec<String> = (0..plan.masters)
        .map(|m| format!("redis://{}:{}", net::host(m, index), net::PORT))
        .collect();
    let mut builder = Redlock::builder(urls);
    if let Some(grace) = w.fence_grace {
        builder = builder.fencing(true).fence_grace(grace);
    }
    let rl = match builder
        .node_timeout(w.node_timeout)
        .connect_timeout(w.node_timeout * 4)
        .retry_delay(w.retry_delay)
        .retry_jitter(w.retry_delay / 2)
        .retry_count(1_000)
        .acquire_timeout(w.acquire_timeout)
        .build()
    {
        Ok(rl) => rl,
        Err(e) => {
            ops.borrow_mut()
                .push(Op::acquire_failed(client, &resource, now(), now(), e));
            return;
        }
    };
    while now() < end {
        let start = now();
        let got = match &w.kind {
            WorkerKind::Owner(owner) => rl.acquire_as(&resource, owner, w.ttl).await,
            _ => rl.acquire(&resource, w.ttl).await,
        };
        match got {
            Ok(lock) => {
                ops.borrow_mut()
                    .push(Op::acquired(client, start, now(), &lock));
                let token = lock.token().expose().to_owned();
                held.borrow_mut().entry(index).or_default().push(HeldLock {
                    resource: lock.resource().to_owned(),
                    token: token.clone(),
                    fence: lock.fencing_token(),
                    releasing: None,
                });
                let releasing = |at| {
                    if let Some(l) = held
                        .borrow_mut()
                        .get_mut(&index)
                        .and_then(|locks| locks.iter_mut().find(|l| l.token == token))
                    {
                        l.releasing = Some(at);
                    }
                };
                use_lock(lock, &w, client, &ops, releasing).await;
                if let Some(locks) = held.borrow_mut().get_mut(&index) {
                    locks.retain(|l| l.token != token);
                }
            }
            Err(e) => ops
                .borrow_mut()
                .push(Op::acquire_failed(client, &resource, start, now(), e)),
        }
        // Never less than a millisecond: a loop whose every call fails at once (an acquire of a
        // lock this task walked away from) would otherwise never let virtual time move.
        tokio::time::sleep(w.idle.max(Duration::from_millis(1))).await;
    }
}

/// Holds `lock` as `w` says, then releases it (or walks away from it), telling `releasing` when
/// the release starts.
async fn use_lock(
    mut lock: Lock,
    w: &WorkerPlan,
    client: usize,
    ops: &Ops,
    releasing: impl FnOnce(std::time::Instant),
) {
    let validity = lock.deadline().saturating_duration_since(now());
    match w.hold {
        Hold::Share(share) => tokio::time::sleep(validity.mul_f64(share)).await,
        Hold::ToTheDeadline => sleep_until(lock.deadline()).await,
        Hold::Extend { ttl, times } => {
            for _ in 0..times {
                tokio::time::sleep(lock.deadline().saturating_duration_since(now()) / 2).await;
                let start = now();
                let extended = lock.extend(ttl).await;
                ops.borrow_mut().push(Op {
                    client,
                    resource: lock.resource().to_owned(),
                    token: lock.token().expose().to_owned(),
                    kind: OpKind::Extend,
                    start,
                    end: now(),
                    outcome: match &extended {
                        Ok(()) => Outcome::Ok {
                            valid_until: Some(lock.deadline()),
                        },
                        Err(e) => Outcome::Failed {
                            reason: e.to_string(),
                        },
                    },
                    fence: lock.fencing_token(),
                });
                if extended.is_err() {
                    break;
                }
            }
            sleep_until(lock.deadline()).await;
        }
        Hold::Abandon(share) => {
            tokio::time::sleep(validity.mul_f64(share)).await;
            // A process that walks away: nothing released, its keys expire.
            std::mem::forget(lock);
            return;
        }
    }
    let (resource, token, fence) = (
        lock.resource().to_owned(),
        lock.token().expose().to_owned(),
        lock.fencing_token(),
    );
    let start = now();
    releasing(start);
    let released = lock.release().await;
    ops.borrow_mut().push(Op {
        client,
        resource,
        token,
        kind: OpKind::Release,
        start,
        end: now(),
        outcome: match released {
            Ok(_) => Outcome::Ok { valid_until: None },
            Err(e) => Outcome::Failed {
                reason: e.to_string(),
            },
        },
        fence,
    });
}

async fn sleep_until(at: std::time::Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
}

/// The drift allowance every Redlock client subtracts: 1 % of the TTL and 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A client as every other Redlock client is written (redsync, node-redlock, rslock): `SET key
/// value NX PX ttl` on every master at once, a quorum within the validity; a renewal that never
/// shortens the key (compare-and-`PEXPIRE … GT`, or a `PEXPIREAT` that lands on the key's own
/// millisecond when it already lives longer: writes the stretch's record once could not see);
/// release by compare-and-delete. Its values are 32 hex digits, as
/// node-redlock writes them.
async fn foreign(
    plan: &Plan,
    w: &WorkerPlan,
    index: usize,
    client: usize,
    resource: &str,
    end: std::time::Instant,
    ops: &Ops,
) {
    let quorum = plan.masters / 2 + 1;
    let mut conns: Vec<Option<MultiplexedConnection>> = vec![None; plan.masters];
    while now() < end {
        // A value of its own for every attempt, across restarts of this process too.
        let turn = VALUES.with(|v| {
            v.set(v.get() + 1);
            v.get()
        });
        let value = format!("{:016x}{:016x}", plan.seed, (index as u64) << 48 | turn);
        let start = now();
        let set = redis::cmd("SET")
            .arg(resource)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(w.ttl.as_millis() as u64)
            .clone();
        let granted = on_every_master(&mut conns, w, index, |mut c| {
            let set = set.clone();
            async move {
                let reply: Option<String> = set.query_async(&mut c).await?;
                Ok(reply.is_some())
            }
        })
        .await;
        let validity_end = start + w.ttl.saturating_sub(drift(w.ttl));
        if granted >= quorum && now() < validity_end {
            ops.borrow_mut().push(Op {
                client,
                resource: resource.to_owned(),
                token: value.clone(),
                kind: OpKind::Acquire,
                start,
                end: now(),
                outcome: Outcome::Ok {
                    valid_until: Some(validity_end),
                },
                fence: None,
            });
            let mut deadline = validity_end;
            let (ttl, times) = match w.hold {
                Hold::Extend { ttl, times } => (ttl, times),
                _ => (Duration::ZERO, 0),
            };
            for _ in 0..times {
                tokio::time::sleep(deadline.saturating_duration_since(now()) / 2).await;
                let renew_start = now();
                let renewed = renew(&mut conns, w, index, resource, &value, ttl).await >= quorum;
                let renew_end = renew_start + ttl.saturating_sub(drift(ttl));
                let in_time = now() < deadline;
                if renewed && in_time {
                    deadline = deadline.max(renew_end);
                }
                ops.borrow_mut().push(Op {
                    client,
                    resource: resource.to_owned(),
                    token: value.clone(),
                    kind: OpKind::Extend,
                    start: renew_start,
                    end: now(),
                    outcome: if renewed && in_time {
                        Outcome::Ok {
                            valid_until: Some(renew_end),
                        }
                    } else {
                        Outcome::Failed {
                            reason: "renewal not confirmed by a quorum in time".into(),
                        }
                    },
                    fence: None,
                });
                if !(renewed && in_time) {
                    break;
                }
            }
            match w.hold {
                Hold::Share(share) | Hold::Abandon(share) => {
                    let left = deadline.saturating_duration_since(now());
                    tokio::time::sleep(left.mul_f64(share)).await;
                }
                _ => sleep_until(deadline).await,
            }
            if !matches!(w.hold, Hold::Abandon(_)) {
                // Recorded as it starts: a release ends the holder's use of the lock whether or
                // not the process lives to hear the answers.
                let at = now();
                ops.borrow_mut().push(Op {
                    client,
                    resource: resource.to_owned(),
                    token: value.clone(),
                    kind: OpKind::Release,
                    start: at,
                    end: at,
                    outcome: Outcome::Ok { valid_until: None },
                    fence: None,
                });
                release(&mut conns, w, index, resource, &value).await;
            }
        } else {
            release(&mut conns, w, index, resource, &value).await;
            ops.borrow_mut().push(Op::acquire_failed(
                client,
                resource,
                start,
                now(),
                format!("{granted} of {} granted", plan.masters),
            ));
            tokio::time::sleep(w.retry_delay).await;
        }
        // Never less than a millisecond: a loop whose every call fails at once (an acquire of a
        // lock this task walked away from) would otherwise never let virtual time move.
        tokio::time::sleep(w.idle.max(Duration::from_millis(1))).await;
    }
}

/// Compare-and-`PEXPIRE … GT`: how many masters renewed.
async fn renew(
    conns: &mut [Option<MultiplexedConnection>],
    w: &WorkerPlan,
    index: usize,
    resource: &str,
    value: &str,
    ttl: Duration,
) -> usize {
    // Half the foreign clients renew with `PEXPIRE … GT`, the others with a `PEXPIREAT` to the
    // later of the key's expiry and the TTL from now: both never shorten a key, and both leave it
    // as it was when it already lives longer (the writes the stretch's record once missed).
    let script = redis::Script::new(if index.is_multiple_of(2) {
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT') return 1 end return 0"
    } else {
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           local t = redis.call('TIME') \
           local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
           local at = math.max(redis.call('PEXPIRETIME', KEYS[1]), now + tonumber(ARGV[2])) \
           redis.call('PEXPIREAT', KEYS[1], string.format('%d', at)) return 1 end return 0"
    });
    on_every_master(conns, w, index, |mut c| {
        let mut call = script.prepare_invoke();
        call.key(resource).arg(value).arg(ttl.as_millis() as u64);
        async move {
            let renewed: i64 = call.invoke_async(&mut c).await?;
            Ok(renewed == 1)
        }
    })
    .await
}

/// Compare-and-delete on every master.
async fn release(
    conns: &mut [Option<MultiplexedConnection>],
    w: &WorkerPlan,
    index: usize,
    resource: &str,
    value: &str,
) {
    let script = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('DEL', KEYS[1]) end return 0",
    );
    on_every_master(conns, w, index, |mut c| {
        let mut call = script.prepare_invoke();
        call.key(resource).arg(value);
        async move {
            let deleted: i64 = call.invoke_async(&mut c).await?;
            Ok(deleted == 1)
        }
    })
    .await;
}

/// Runs `request` on every master at once, each bounded by the node timeout (a master that
/// fails or times out loses its connection: the next request opens another); how many said
/// yes.
async fn on_every_master<F, Fut>(
    conns: &mut [Option<MultiplexedConnection>],
    w: &WorkerPlan,
    index: usize,
    request: F,
) -> usize
where
    F: Fn(MultiplexedConnection) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<bool>>,
{
    let mut asks = Vec::new();
    for (m, slot) in conns.iter_mut().enumerate() {
        let timeout = w.node_timeout;
        let mut conn = slot.take();
        let request = &request;
        asks.push(async move {
            let answer = tokio::time::timeout(timeout * 4, async {
                if conn.is_none() {
                    conn = Some(open(m, index).await?);
                }
                let Some(c) = conn.clone() else {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "no connection",
                    )));
                };
                tokio::time::timeout(timeout, request(c))
                    .await
                    .map_err(|_| redis::RedisError::from((redis::ErrorKind::Client, "timed out")))?
            })
            .await;
            match answer {
                Ok(Ok(yes)) => (conn, yes),
                _ => (None, false),
            }
        });
    }
    let answers = futures::future::join_all(asks).await;
    let mut yes = 0;
    for (slot, (conn, said_yes)) in conns.iter_mut().zip(answers) {
        *slot = conn;
        yes += usize::from(said_yes);
    }
    yes
}

/// A connection of the foreign client to master `m`, through the same network as the others.
async fn open(m: usize, index: usize) -> redis::RedisResult<MultiplexedConnection> {
    let links = LINKS.with(|l| l.borrow().clone());
    let Some(links) = links else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "no network installed",
        )));
    };
    let stream = net::connect(links, net::host(m, index)).await?;
    let info = redis::IntoConnectionInfo::into_connection_info(format!(
        "redis://{}:{}",
        net::host(m, index),
        net::PORT
    ))?;
    let (conn, driver) = MultiplexedConnection::new_with_config(
        info.redis_settings(),
        stream,
        redis::AsyncConnectionConfig::new(),
    )
    .await?;
    tokio::spawn(driver);
    Ok(conn)
}

thread_local! {
    /// How many values the foreign clients of this run have written (see [`reset`]).
    static VALUES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };

    /// The run's network, for the foreign client's connections.
    pub static LINKS: RefCell<Option<SharedLinks>> = const { RefCell::new(None) };
}

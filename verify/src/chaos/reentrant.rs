//! Scenario 21: separate clients, each its own `Redlock`, take locks on a few resources, turn
//! each into nested holds ([`Lock::into_reentrant`](quorumlock::Lock::into_reentrant),
//! [`ReentrantLock::nested`]), hand the holds to tasks of their own that extend and end them in
//! random orders — released, or dropped — under the mixed faults.
//!
//! A lock is recorded as one acquire, extended by any hold, and held until its last hold ends:
//! the ordinary lock checks then keep it apart from every other holder of its resource (leases,
//! a witness left by the last hold, a read–sleep–write register written by it). Beside them:
//!
//! * exactly one release per lock reaches the masters — the last hold's
//!   ([`ReentrantLock::release`] returns `Some` for it and `None` for every other hold), or none
//!   when the last hold was dropped (its `Drop` releases in the background), and `Some` only once
//!   every hold has ended;
//! * right after that release, no master that confirmed it still holds the lock for its token
//!   ([`check_left_behind`](quorumlock_testkit::history::check_left_behind), from direct reads of the
//!   masters);
//! * once the run is over and a TTL has passed, no lock key is left on any master.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quorumlock::ReentrantLock;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;

use super::ran::Ran;
use super::setup::{lock_key, Setup};
use super::shared::Shared;
use super::workload::Workload;
use super::Check;
use crate::mutex;
use quorumlock_testkit::history::ReleaseAudit;
use quorumlock_testkit::{OccupancyGuard, Op, OpKind, Outcome};

/// Most holds of one lock (the first included).
const MAX_HOLDS: usize = 5;

/// Chance that a hold is dropped instead of released.
const DROP_CHANCE: f64 = 0.15;

/// How long the auditor waits for one master.
const AUDIT_TIMEOUT: Duration = Duration::from_millis(100);

/// How late after its TTL Redis may still show a key (expiry runs on access and ten times a
/// second).
const EXPIRY_SLACK: Duration = Duration::from_millis(100);

/// The reentrant workload: the clients nest holds of the locks they take on the setup's
/// resources and end them from several tasks. It keeps what they note of every lock, and the
/// auditor that reads the masters directly.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Every lock whose holds have all ended.
    locks: Mutex<Vec<Nested>>,
    /// One direct connection per master (bypassing every proxy), opened on first use and again
    /// after a failure.
    auditor: Mutex<Vec<Option<MultiplexedConnection>>>,
}

/// One lock and its holds, as they ended.
#[derive(Debug, Default)]
struct Nested {
    holds: usize,
    /// Holds not yet ended.
    outstanding: AtomicUsize,
    /// Holds dropped, released with `None`, with `Some`, and with an error.
    dropped: AtomicUsize,
    none: AtomicUsize,
    some: AtomicUsize,
    failed: AtomicUsize,
    /// Releases that returned `Some` while another hold had not yet ended.
    early: AtomicUsize,
    /// Whether the hold created first ended last.
    first_last: AtomicBool,
}

/// What one lock's holds share in the client: the critical section the last hold ends.
struct Section {
    client: usize,
    r: usize,
    resource: String,
    token: String,
    value: u64,
    inside: Mutex<Option<OccupancyGuard>>,
    nested: Nested,
}

impl Workload for Ledger {
    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        Box::pin(run_client(shared, client, rng, self))
    }
}

/// A client: takes a lock, nests it, ends the holds from tasks of their own, and goes on until
/// the run stops.
async fn run_client(shared: Arc<Shared>, client: usize, mut rng: StdRng, ledger: Arc<Ledger>) {
    let Ok(rl) = shared.redlock_of(client) else {
        return;
    };
    while !shared.stopped() {
        let r = rng.random_range(0..shared.setup.resources);
        let resource = Setup::resource(r);
        let start = Instant::now();
        let lock = match rl.acquire(&resource, shared.setup.ttl).await {
            Ok(lock) => lock,
            Err(e) => {
                shared.history.record(Op::acquire_failed(
                    client,
                    &resource,
                    start,
                    Instant::now(),
                    e,
                ));
                continue;
            }
        };
        shared.acquired(client, start, &lock, false);
        let holds = rng.random_range(2..=MAX_HOLDS);
        let section = Arc::new(Section {
            client,
            r,
            token: lock.token().expose().to_owned(),
            resource,
            value: shared.registers[r].read(),
            inside: Mutex::new(Some(shared.witnesses[r].enter(client))),
            nested: Nested {
                holds,
                outstanding: AtomicUsize::new(holds),
                ..Nested::default()
            },
        });
        let first = lock.into_reentrant();
        let mut nested: Vec<(ReentrantLock, bool)> =
            (1..holds).map(|_| (first.nested(), false)).collect();
        // The first hold goes to a task too: every hold ends on a task of its own.
        nested.push((first, true));
        let handles: Vec<_> = nested
            .into_iter()
            .map(|(hold, first)| {
                tokio::spawn(end_hold(
                    Arc::clone(&shared),
                    Arc::clone(&ledger),
                    Arc::clone(&section),
                    hold,
                    first,
                    StdRng::seed_from_u64(rng.random()),
                ))
            })
            .collect();
        for handle in handles {
            let _ = handle.await;
        }
        let nested = match Arc::try_unwrap(section) {
            Ok(section) => section.nested,
            Err(_) => continue,
        };
        mutex::lock(&ledger.locks).push(nested);
    }
}

/// One hold's life on its own task: a nap, maybe an extend for every hold, then its end —
/// released or dropped. The hold that ends last ends the critical section.
async fn end_hold(
    shared: Arc<Shared>,
    ledger: Arc<Ledger>,
    section: Arc<Section>,
    hold: ReentrantLock,
    first: bool,
    mut rng: StdRng,
) {
    let ttl = shared.setup.ttl;
    let margin = ttl / 10;
    let nap = rng.random_range(Duration::ZERO..=shared.setup.critical_section);
    tokio::time::sleep(nap).await;
    if rng.random_bool(shared.setup.extend_chance) && hold.remaining() > margin {
        let start = Instant::now();
        let result = hold.extend(ttl).await;
        shared.history.record(Op {
            client: section.client,
            resource: section.resource.clone(),
            token: section.token.clone(),
            kind: OpKind::Extend,
            start,
            end: Instant::now(),
            outcome: match &result {
                Ok(()) => Outcome::Ok {
                    valid_until: Some(hold.deadline()),
                },
                Err(e) => Outcome::Failed {
                    reason: e.to_string(),
                },
            },
            fence: hold.fencing_token(),
        });
    }

    let nested = &section.nested;
    let last = nested.outstanding.fetch_sub(1, Ordering::SeqCst) == 1;
    if last {
        if hold.remaining() > margin {
            shared.registers[section.r].write(section.value + 1);
        }
        drop(mutex::lock(&section.inside).take());
        nested.first_last.store(first, Ordering::SeqCst);
    }
    let ended = Instant::now();
    let outcome = if rng.random_bool(DROP_CHANCE) {
        nested.dropped.fetch_add(1, Ordering::SeqCst);
        drop(hold);
        Outcome::Ok { valid_until: None }
    } else {
        match hold.release().await {
            Ok(Some(released)) => {
                nested.some.fetch_add(1, Ordering::SeqCst);
                if nested.outstanding.load(Ordering::SeqCst) != 0 {
                    nested.early.fetch_add(1, Ordering::SeqCst);
                }
                let at = Instant::now();
                let holding = ledger
                    .holding(&shared.masters, &section.resource, &section.token)
                    .await;
                shared.history.record_audit(ReleaseAudit::new(
                    section.client,
                    &section.resource,
                    &section.token,
                    at,
                    (released.deleted + released.absent, shared.masters.len()),
                    holding,
                ));
                Outcome::Ok { valid_until: None }
            }
            Ok(None) => {
                nested.none.fetch_add(1, Ordering::SeqCst);
                Outcome::Ok { valid_until: None }
            }
            Err(e) => {
                nested.failed.fetch_add(1, Ordering::SeqCst);
                Outcome::Failed {
                    reason: e.to_string(),
                }
            }
        }
    };
    if last {
        // The lock's lease ends with its last hold, whichever hold's release reaches the masters.
        shared.history.record(Op {
            client: section.client,
            resource: section.resource.clone(),
            token: section.token.clone(),
            kind: OpKind::Release,
            start: ended,
            end: Instant::now(),
            outcome,
            fence: None,
        });
    }
}

impl Ledger {
    /// The masters that hold `resource`'s key with `token`, read directly; a master that does
    /// not answer in time counts as not holding it.
    async fn holding(&self, masters: &[SocketAddr], resource: &str, token: &str) -> Vec<usize> {
        let key = lock_key(resource);
        let reads = masters.iter().enumerate().map(|(i, addr)| {
            let key = &key;
            async move {
                let mut connection = self.connection(i, *addr).await?;
                let mut get = redis::cmd("GET");
                get.arg(key);
                let read = get.query_async::<Option<String>>(&mut connection);
                match tokio::time::timeout(AUDIT_TIMEOUT, read).await {
                    Ok(Ok(value)) => Some((i, value)),
                    _ => {
                        if let Some(slot) = mutex::lock(&self.auditor).get_mut(i) {
                            *slot = None;
                        }
                        None
                    }
                }
            }
        });
        futures::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .filter(|(_, value)| value.as_deref() == Some(token))
            .map(|(i, _)| i)
            .collect()
    }

    /// The auditor's connection to master `i`, opened if need be.
    async fn connection(&self, i: usize, addr: SocketAddr) -> Option<MultiplexedConnection> {
        {
            let mut auditor = mutex::lock(&self.auditor);
            if auditor.len() <= i {
                auditor.resize(i + 1, None);
            }
            if let Some(connection) = &auditor[i] {
                return Some(connection.clone());
            }
        }
        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
        let connection =
            tokio::time::timeout(AUDIT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .ok()?
                .ok()?;
        if let Some(slot) = mutex::lock(&self.auditor).get_mut(i) {
            *slot = Some(connection.clone());
        }
        Some(connection)
    }
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// The scenario's own checks, over what `ledger` noted.
pub(super) async fn checks(ran: &Ran, ledger: &Ledger) -> Vec<Check> {
    let gone = no_key_left_once_a_ttl_has_passed(ran).await;
    let locks = mutex::lock(&ledger.locks);
    vec![
        every_client_nested_holds(ran, &locks),
        one_release_per_lock(&locks),
        releases_audited(ran),
        gone,
    ]
}

/// Every client took locks, and nested holds ended in every order.
fn every_client_nested_holds(ran: &Ran, locks: &[Nested]) -> Check {
    let mut per_client = vec![0usize; ran.setup.clients];
    for op in ran.history.ops() {
        if op.kind == OpKind::Acquire && op.succeeded() {
            if let Some(n) = per_client.get_mut(op.client) {
                *n += 1;
            }
        }
    }
    let holds: usize = locks.iter().map(|n| n.holds).sum();
    let first_last = locks
        .iter()
        .filter(|n| n.first_last.load(Ordering::SeqCst))
        .count();
    let without = per_client.iter().filter(|n| **n == 0).count();
    Check::new(
        "every separate client nested holds, ended in every order",
        without == 0 && !locks.is_empty() && first_last > 0 && first_last < locks.len(),
        format!(
            "locks per client {}; {} locks, {holds} holds ({} to {MAX_HOLDS} each); \
             the first hold ended last in {first_last}",
            per_client
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            locks.len(),
            locks.iter().map(|n| n.holds).min().unwrap_or_default(),
        ),
    )
}

/// Exactly one release per lock reached the masters: `Some` (or an error) for one hold when
/// every hold was released, for none when the last was dropped, never two, and only once every
/// hold had ended.
fn one_release_per_lock(locks: &[Nested]) -> Check {
    let load = |a: &AtomicUsize| a.load(Ordering::SeqCst);
    let mut twice = 0;
    let mut missing = 0;
    let (mut reached, mut background, mut early) = (0, 0, 0);
    let (mut dropped, mut none) = (0, 0);
    for n in locks {
        let to_masters = load(&n.some) + load(&n.failed);
        dropped += load(&n.dropped);
        none += load(&n.none);
        early += load(&n.early);
        match (to_masters, load(&n.dropped)) {
            (0, 0) => missing += 1,
            (0, _) => background += 1,
            (1, _) => reached += 1,
            _ => twice += 1,
        }
    }
    Check::new(
        "exactly one release per lock reaches the masters, once every hold has ended",
        !locks.is_empty() && twice == 0 && missing == 0 && early == 0 && background > 0,
        format!(
            "{} locks: released by a hold {reached}, by the drop of the last hold {background}, \
             twice {twice}, never {missing}; {none} holds released without reaching the masters, \
             {dropped} dropped; released while a hold remained {early}",
            locks.len()
        ),
    )
}

/// Releases were audited on the masters (their verdicts are among the violations).
fn releases_audited(ran: &Ran) -> Check {
    let audits = ran.history.audits();
    let still = audits.iter().filter(|a| !a.holding.is_empty()).count();
    let confirmed_by_all = audits.iter().filter(|a| a.confirmed == a.masters).count();
    Check::new(
        "the masters were read after every release that reached them",
        !audits.is_empty(),
        format!(
            "{} releases audited: {confirmed_by_all} confirmed by every master, \
             {still} with the key still on a master that had not answered",
            audits.len()
        ),
    )
}

/// No lock key is left on any master a TTL after the run ended.
async fn no_key_left_once_a_ttl_has_passed(ran: &Ran) -> Check {
    let ttl = ran.setup.ttl;
    tokio::time::sleep_until((ran.finished_at + ttl + EXPIRY_SLACK).into()).await;
    let cluster = Arc::clone(&ran.cluster);
    let left = tokio::task::spawn_blocking(move || {
        let running = cluster.running();
        (0..running.len())
            .filter(|i| running[*i])
            .flat_map(|i| {
                cluster
                    .lock_keys(i)
                    .unwrap_or_else(|| vec!["(no answer)".to_owned()])
                    .into_iter()
                    .map(move |k| format!("master {i}: {k}"))
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_else(|_| vec!["(the read failed)".to_owned()]);
    Check::new(
        "no lock key left on any master a TTL after the run",
        left.is_empty(),
        format!(
            "{} lock keys a TTL ({ttl:?}) after the run {}",
            left.len(),
            left.join(", ")
        ),
    )
}

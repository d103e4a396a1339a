//! A node's connection: opened on first use and again after it breaks or is replaced, one
//! attempt at a time and no more often than a backoff allows, with the scripts loaded ahead of
//! its first request; and the connection it last replaced, kept while requests written on it
//! may still run. Each new connection checks that a master is no Redis Cluster node (see
//! `standalone`) and its key layout marker (see `layout`).
//!
//! The connection is the voter's, whatever its kind (see `target`): a Sentinel group's master
//! is looked up again for every new connection, and a cluster's connection follows its
//! topology by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Shared};
use futures::FutureExt;
use redis::{AsyncConnectionConfig, RedisError};

use super::conn::Conn;
use super::durable;
use super::layout::{self, Marked};
use super::standalone;
use super::target::Target;
use crate::durability::Durability;
use crate::scripts;
use crate::seam;

/// The least time between the starts of two connection attempts to one node: a node that
/// accepts connections and drops them at once costs at most this rate of reconnections.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(50);

/// After a failed connection attempt, the next waits this long, doubling with each failure in
/// a row up to [`RECONNECT_BACKOFF_MAX`]; requests in the meantime fail at once, unsent (but
/// the probe of an unresponsive node, which waits).
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);

/// See [`RECONNECT_BACKOFF_MIN`]: a node that stays down is tried about once a second.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One connection to the node, numbered: a later connection has a larger number.
#[derive(Clone)]
pub(super) struct Connection {
    pub(super) number: u64,
    pub(super) conn: Conn,
}

/// Why [`Link::open`] returned no connection.
pub(super) struct NotOpened {
    pub(super) why: RedisError,
    /// Whether the request waited for an attempt that failed, rather than failing at once
    /// during the backoff after one.
    pub(super) tried: bool,
}

type Attempt = Shared<BoxFuture<'static, Result<Conn, RedisError>>>;

/// The node's connection and how to open the next one.
pub(super) struct Link {
    target: Arc<Target>,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    /// The key layout marker this client writes and checks on every new connection.
    marker: Arc<str>,
    /// How grants are confirmed: a master that cannot is refused on every new connection.
    durability: Durability,
    state: Arc<Mutex<State>>,
    /// Whether the state keeps a retired connection, readable without the lock: every release
    /// asks (see [`Link::retired`]), and there almost never is one. Written under the lock.
    has_retired: Arc<AtomicBool>,
}

struct State {
    current: Current,
    /// The connection replaced last (after its requests timed out), until a request on it is
    /// answered: requests written on it before may still run, and only a request queued
    /// behind them on the same connection is sure to run after them.
    retired: Option<Connection>,
    next_number: u64,
    /// No connection attempt starts before this.
    not_before: Option<Instant>,
    /// How long to wait after the next failed attempt.
    backoff: Duration,
}

enum Current {
    /// None needed yet, or the last one broke, failed to open, or was replaced.
    Closed {
        why: Option<RedisError>,
    },
    /// An attempt every request that needs the connection shares.
    Opening {
        number: u64,
        attempt: Attempt,
    },
    Open(Connection),
}

impl Link {
    pub(super) fn new(
        target: Arc<Target>,
        connect_timeout: Duration,
        marker: Arc<str>,
        durability: Durability,
    ) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // The per-request bound is the node's own, applied per operation.
            .set_response_timeout(None);
        Link {
            target,
            config,
            connect_timeout,
            marker,
            durability,
            has_retired: Arc::new(AtomicBool::new(false)),
            state: Arc::new(Mutex::new(State {
                current: Current::Closed { why: None },
                retired: None,
                next_number: 0,
                not_before: None,
                backoff: RECONNECT_BACKOFF_MIN,
            })),
        }
    }

    /// The open connection; or the attempt under way, joined; or a new attempt, bounded by the
    /// connect timeout. While a failed attempt's backoff runs, fails at once with that
    /// attempt's error, unless `patient`: then it waits the backoff out and tries again (the
    /// probe of an unresponsive node, the one request that may try to reach it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the attempt is shared, and whoever polls it next carries it on.
    pub(super) async fn open(&self, patient: bool) -> Result<Connection, NotOpened> {
        let (number, attempt) = loop {
            let wait = {
                let mut state = self.lock();
                match state.next(seam::now()) {
                    Next::Ready(connection) => return Ok(connection),
                    Next::Failed(why, until) if patient => {
                        tracing::debug!(error = %why, "waiting out the reconnect backoff");
                        until
                    }
                    Next::Failed(why, _) => return Err(NotOpened { why, tried: false }),
                    Next::Join(number, attempt) => break (number, attempt),
                    Next::Start(number) => {
                        let attempt = self.attempt();
                        state.current = Current::Opening {
                            number,
                            attempt: attempt.clone(),
                        };
                        break (number, attempt);
                    }
                    Next::Wait(until) => until,
                }
            };
            tokio::time::sleep_until(wait.into()).await;
        };
        let opened = attempt.await;
        self.lock().settle(number, &opened);
        match opened {
            Ok(conn) => Ok(Connection { number, conn }),
            Err(why) => Err(NotOpened { why, tried: true }),
        }
    }

    /// The open connection, if there is one now; `None` while it is closed or opening (then
    /// see [`Link::open`]). Takes no time and reads no clock: the path of nearly every request.
    pub(super) fn open_now(&self) -> Option<Connection> {
        match &self.lock().current {
            Current::Open(connection) => Some(connection.clone()),
            _ => None,
        }
    }

    /// The connection numbered `number` failed a request in a way that shows it is gone: the
    /// next request opens a new one.
    pub(super) fn broken(&self, number: u64, why: RedisError) {
        let mut state = self.lock();
        if state.is_open(number) {
            tracing::debug!(error = %why, "connection lost");
            state.current = Current::Closed { why: Some(why) };
        }
    }

    /// Replaces the connection numbered `number` (its requests time out) by a new one from the
    /// next request on, and keeps it as the retired connection: see [`Link::retired`].
    pub(super) fn retire(&self, number: u64) {
        let mut state = self.lock();
        if state.is_open(number) {
            if let Current::Open(connection) =
                std::mem::replace(&mut state.current, Current::Closed { why: None })
            {
                state.retired = Some(connection);
                self.has_retired.store(true, Ordering::Release);
            }
        }
    }

    /// The connection replaced last, while requests written on it may still run.
    pub(super) fn retired(&self) -> Option<Connection> {
        if !self.has_retired.load(Ordering::Acquire) {
            return None;
        }
        self.lock().retired.clone()
    }

    /// A handle that lets a request on the retired connection report that it was answered
    /// (see [`Drained::drained`]), without keeping the node alive.
    pub(super) fn drain_handle(&self) -> Drained {
        Drained(Arc::downgrade(&self.state), self.has_retired.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection attempt: connect (with the client library's handshake) within the connect
    /// timeout, and queue the loading of every script the node is sent by SHA1 ahead of any
    /// request. A node that restarted has forgotten its scripts, and an `EVALSHA` answered
    /// `NOSCRIPT` would need more round trips than one node timeout may allow. Then check the
    /// key layout marker: a master marked with another layout is not used.
    fn attempt(&self) -> Attempt {
        let (target, config) = (self.target.clone(), self.config.clone());
        let timeout = self.connect_timeout;
        let (marker, durability) = (self.marker.clone(), self.durability);
        async move {
            let opening = async {
                let conn = target.connect(&config).await?;
                load_scripts(&conn).await;
                let node = target.id();
                if !target.is_cluster() {
                    check_standalone(&conn, &node).await?;
                }
                check_durability(&conn, durability, &node).await?;
                check_layout(&conn, &marker, &node).await?;
                Ok(conn)
            };
            match tokio::time::timeout(timeout, opening).await {
                Ok(opened) => opened,
                Err(_elapsed) => Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {timeout:?}"),
                ))),
            }
        }
        .boxed()
        .shared()
    }
}

/// Loads the scripts sent by SHA1 on a new connection, queued ahead of any request on it: they
/// run before its first `EVALSHA` without a round trip of their own. A failure (an ACL without
/// `SCRIPT LOAD`, say) is left to each request's `NOSCRIPT` fallback.
async fn load_scripts(conn: &Conn) {
    let scripts = [
        &*scripts::RELEASE,
        &*scripts::EXTEND,
        &*scripts::ACQUIRE,
        &*scripts::RAISE_FENCE,
        &*scripts::ACQUIRE_MANY,
        &*scripts::INSPECT,
        &*scripts::ACQUIRE_QUEUED,
        &*scripts::DEQUEUE,
        &*scripts::ACQUIRE_OWNED,
        &*scripts::ACQUIRE_READ,
        &*scripts::ACQUIRE_WRITE,
        &*scripts::EXTEND_READ,
        &*scripts::RELEASE_READ,
        &*scripts::RELEASE_WRITE,
        &*scripts::READ_LEADER,
        &*scripts::CONFIRM_LEADER,
    ];
    let loads = scripts.map(|script| {
        let mut conn = conn.clone();
        async move { script.load_async(&mut conn).await }
    });
    let mut loads = Box::pin(futures::future::join_all(loads));
    // The first poll hands every `SCRIPT LOAD` to the connection; the replies are awaited in
    // the background (a request whose reply nobody awaits may be dropped unsent).
    if let std::task::Poll::Ready(loaded) = futures::poll!(&mut loads) {
        return log_failed_loads(loaded);
    }
    crate::sync::spawn(async move { log_failed_loads(loads.await) });
}

fn log_failed_loads(loaded: Vec<Result<String, RedisError>>) {
    for e in loaded.iter().filter_map(|l| l.as_ref().err()) {
        tracing::debug!(error = %e, "script not loaded on connect");
    }
}

/// Fails the connection to a node of a Redis Cluster (see `standalone`).
async fn check_standalone(conn: &Conn, node: &str) -> Result<(), RedisError> {
    standalone::check(conn).await.inspect_err(|e| {
        if e.kind() == redis::ErrorKind::Client {
            tracing::error!(%node, error = %e, "master not used: a Redis Cluster node");
        }
    })
}

/// Fails the connection to a master (or a cluster with a shard) that cannot confirm grants as
/// `durability` asks (see `durable`).
async fn check_durability(
    conn: &Conn,
    durability: Durability,
    node: &str,
) -> Result<(), RedisError> {
    durable::check(conn, durability).await.inspect_err(|e| {
        if e.kind() == redis::ErrorKind::Client {
            tracing::error!(%node, error = %e, "master not used: it cannot confirm grants");
        }
    })
}

/// Marks the master with this client's key layout where it has none, and fails the connection
/// when it is marked with another. A server that refuses the marker commands (an ACL that does
/// not cover the marker key) is used unchecked, with a warning.
async fn check_layout(conn: &Conn, marker: &str, node: &str) -> Result<(), RedisError> {
    match layout::mark(conn, marker).await {
        Ok(Marked::Same) => Ok(()),
        Ok(Marked::Other(theirs)) => {
            let e = layout::mismatch(marker, &theirs);
            tracing::error!(%node, error = %e, "master not used: mixed deployment");
            Err(e)
        }
        Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
            tracing::warn!(%node, marker, error = %e, "key layout marker not checked");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// What a request that needs the connection does next.
enum Next {
    Ready(Connection),
    /// The last attempt failed with this error; the next may start at this instant.
    Failed(RedisError, Instant),
    Join(u64, Attempt),
    Start(u64),
    Wait(Instant),
}

impl State {
    fn next(&mut self, now: Instant) -> Next {
        if let Current::Opening { number, attempt } = &self.current {
            let (number, attempt) = (*number, attempt.clone());
            match attempt.peek() {
                Some(opened) => {
                    let opened = opened.clone();
                    self.settle(number, &opened);
                }
                None => return Next::Join(number, attempt),
            }
        }
        match &self.current {
            Current::Open(connection) => Next::Ready(connection.clone()),
            Current::Opening { number, attempt } => Next::Join(*number, attempt.clone()),
            Current::Closed { why } => {
                let why = why.clone();
                match (self.not_before.filter(|t| now < *t), why) {
                    // A failed attempt's backoff: fail at once.
                    (Some(until), Some(why)) => Next::Failed(why, until),
                    // Soon after the last attempt started, the connection was replaced or
                    // lost: the wait is at most the reconnect interval, worth waiting out.
                    (Some(until), None) => Next::Wait(until),
                    (None, _) => {
                        let number = self.next_number;
                        self.next_number += 1;
                        self.not_before = Some(now + RECONNECT_INTERVAL);
                        Next::Start(number)
                    }
                }
            }
        }
    }

    /// Records how attempt `number` ended, unless the state has moved on since.
    fn settle(&mut self, number: u64, opened: &Result<Conn, RedisError>) {
        if !matches!(&self.current, Current::Opening { number: n, .. } if *n == number) {
            return;
        }
        match opened {
            Ok(conn) => {
                self.current = Current::Open(Connection {
                    number,
                    conn: conn.clone(),
                });
                self.backoff = RECONNECT_BACKOFF_MIN;
            }
            Err(why) => {
                tracing::debug!(error = %why, backoff = ?self.backoff, "connection attempt failed");
                let retry_at = seam::now() + self.backoff;
                self.not_before = Some(self.not_before.map_or(retry_at, |t| t.max(retry_at)));
                self.backoff = (self.backoff * 2).min(RECONNECT_BACKOFF_MAX);
                self.current = Current::Closed {
                    why: Some(why.clone()),
                };
            }
        }
    }

    fn is_open(&self, number: u64) -> bool {
        matches!(&self.current, Current::Open(c) if c.number == number)
    }
}

/// See [`Link::drain_handle`].
#[derive(Clone)]
pub(super) struct Drained(Weak<Mutex<State>>, Arc<AtomicBool>);

impl Drained {
    /// A request on retired connection `number` was answered: everything written on it before
    /// has run, and it need not be kept any longer.
    pub(super) fn drained(&self, number: u64) {
        let Some(state) = self.0.upgrade() else {
            return;
        };
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        if state.retired.as_ref().is_some_and(|c| c.number == number) {
            state.retired = None;
            self.1.store(false, Ordering::Release);
        }
    }
}

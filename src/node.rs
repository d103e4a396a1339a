//! One Redis master: its long-lived multiplexed connection, the per-request time bound, and the
//! commands and scripts the algorithm sends it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::{
    Client, Cmd, ConnectionInfo, ErrorKind, FromRedisValue, RedisResult, ScriptInvocation,
    ServerErrorKind,
};

use crate::error::{NodeError, NodeErrorKind};
use crate::scripts;

/// After this many timeouts in a row with no reply at all, spread over at least
/// [`SILENCE_BEFORE_UNRESPONSIVE`], the node is presumed unresponsive (a blackholed route or a
/// stopped process answers nothing and never closes the connection): its connection is replaced
/// by a fresh one, and until it answers again only one request at a time is sent to it, as a
/// probe. The others fail at once, so that a hung node costs the client neither a pile of
/// requests each waiting out the timeout, nor the work of tracking them.
const TIMEOUTS_BEFORE_UNRESPONSIVE: u32 = 3;

/// See [`TIMEOUTS_BEFORE_UNRESPONSIVE`]: a burst of timeouts from a moment of overload (short
/// node timeouts on a busy machine) is not a hung node, and skipping it would leave the keys
/// of the next locks on fewer nodes.
const SILENCE_BEFORE_UNRESPONSIVE: Duration = Duration::from_secs(1);

/// A node's answer to an acquire request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The key was set; with fencing, the node's new counter value.
    Granted { fence: Option<u64> },
    /// Another token holds the key.
    Held,
}

/// One configured master.
pub(crate) struct Node {
    /// `host:port` (or the socket path): how the node is named in errors and logs.
    id: String,
    client: Client,
    connect_timeout: Duration,
    /// Created lazily inside the caller's runtime on first use, so that building a `Redlock`
    /// does no I/O and needs no runtime. Cloning a `ConnectionManager` is cheap (an `Arc`).
    connection: Mutex<Option<ConnectionManager>>,
    timeouts_in_a_row: AtomicU32,
    /// When the first of those timed out, in milliseconds since `created`.
    silent_since_ms: AtomicU64,
    created: Instant,
    /// Whether a probe of an unresponsive node is in flight.
    probing: AtomicBool,
}

impl std::fmt::Debug for Node {
    // The client holds the connection info, password included: show the identity only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.id).finish()
    }
}

impl Node {
    pub(crate) fn new(info: ConnectionInfo, connect_timeout: Duration) -> RedisResult<Self> {
        Ok(Self::with_client(Client::open(info)?, connect_timeout))
    }

    /// A node over an already configured client (a `rediss://` one with its own certificates).
    #[cfg(feature = "tls")]
    pub(crate) fn with_tls(
        info: ConnectionInfo,
        certificates: redis::TlsCertificates,
        connect_timeout: Duration,
    ) -> RedisResult<Self> {
        Ok(Self::with_client(
            Client::build_with_tls(info, certificates)?,
            connect_timeout,
        ))
    }

    fn with_client(client: Client, connect_timeout: Duration) -> Self {
        Node {
            // `host:port` only: never the user or password of the connection info.
            id: client.get_connection_info().addr().to_string(),
            client,
            connect_timeout,
            connection: Mutex::new(None),
            timeouts_in_a_row: AtomicU32::new(0),
            silent_since_ms: AtomicU64::new(0),
            created: Instant::now(),
            probing: AtomicBool::new(false),
        }
    }

    /// `host:port` of this node.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// `SET key token NX PX ttl`, or the fenced acquire script when `fence_key` is given.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        fence_key: Option<&str>,
        token: &str,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<Grant, NodeError> {
        let mut conn = self.connection()?;
        match fence_key {
            None => {
                let mut cmd = Cmd::with_capacity(6, key.len() + token.len() + 32);
                cmd.arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms);
                let reply: Option<String> = self
                    .bounded(timeout, async move { cmd.query_async(&mut conn).await })
                    .await?;
                Ok(match reply {
                    Some(_) => Grant::Granted { fence: None },
                    None => Grant::Held,
                })
            }
            Some(fence_key) => {
                let mut call = scripts::ACQUIRE_FENCED.prepare_invoke();
                call.key(key).key(fence_key).arg(token).arg(ttl_ms);
                let fence: u64 = self
                    .bounded(timeout, async move { call.invoke_async(&mut conn).await })
                    .await?;
                Ok(match fence {
                    0 => Grant::Held,
                    fence => Grant::Granted { fence: Some(fence) },
                })
            }
        }
    }

    /// The release script (`lua/release.lua`) over `keys` (each lock key, then their lines, then
    /// their leases) with `args`. `Ok(true)` when at least one key still carried the token and
    /// was released.
    ///
    /// The holder's release (`hot`) sends the script's SHA1, with the source as the fallback on
    /// `NOSCRIPT`; a cleanup sends the source at once (see `scripts::RELEASE_SOURCE`).
    pub(crate) async fn release(
        &self,
        keys: &[String],
        args: &[String],
        hot: bool,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let mut conn = self.connection()?;
        let release = |by: &str, script: &str| {
            let size: usize = keys.iter().chain(args).map(String::len).sum();
            let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), size + script.len() + 32);
            cmd.arg(by).arg(script).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        let by_source = || release("EVAL", &scripts::RELEASE_SOURCE);
        let request = async move {
            if !hot {
                // A cleanup: one round trip whatever the node's script cache holds.
                return by_source().query_async(&mut conn).await;
            }
            // The holder's release is the hot path: send the script's SHA1, not its source. A
            // node that restarted has forgotten the script and says NOSCRIPT: send the source
            // then, within the same time bound.
            let by_sha = release("EVALSHA", scripts::RELEASE.get_hash());
            match by_sha.query_async(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    by_source().query_async(&mut conn).await
                }
                other => other,
            }
        };
        let released: i64 = self.bounded(timeout, request).await?;
        Ok(released > 0)
    }

    /// Compare-and-PEXPIRE. `Ok(true)` when renewed, `Ok(false)` when the token is gone.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let mut conn = self.connection()?;
        let mut call = scripts::EXTEND.prepare_invoke();
        call.key(key).arg(token).arg(ttl_ms);
        let renewed: i64 = self
            .bounded(timeout, async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(renewed == 1)
    }

    /// Raises the fencing counter to at least `fence` where `token` still holds the key.
    /// `Ok(true)` when the counter now holds at least `fence`.
    pub(crate) async fn raise_fence(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        fence: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let mut conn = self.connection()?;
        let mut call = scripts::RAISE_FENCE.prepare_invoke();
        call.key(key).key(fence_key).arg(token).arg(fence);
        let raised: i64 = self
            .bounded(timeout, async move { call.invoke_async(&mut conn).await })
            .await?;
        Ok(raised == 1)
    }

    /// Runs one script on the shared connection, bounded by `timeout`.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        call: ScriptInvocation<'static>,
        timeout: Duration,
    ) -> Result<T, NodeError> {
        let mut conn = self.connection()?;
        self.bounded(timeout, async move { call.invoke_async(&mut conn).await })
            .await
    }

    /// Opens a connection of its own for `SUBSCRIBE` (a RESP2 subscriber cannot share the
    /// multiplexed connection), bounded by the connect timeout.
    pub(crate) async fn subscriber(&self) -> Result<PubSub, NodeError> {
        match tokio::time::timeout(self.connect_timeout, self.client.get_async_pubsub()).await {
            Ok(reply) => reply.map_err(|e| NodeError::new(&self.id, NodeErrorKind::Redis(e))),
            Err(_elapsed) => Err(NodeError::new(
                &self.id,
                NodeErrorKind::Timeout(self.connect_timeout),
            )),
        }
    }

    /// The server's `run_id` from `INFO server`: it tells two listings of one server apart from
    /// two servers.
    pub(crate) async fn run_id(&self) -> Result<String, NodeError> {
        let mut conn = self.connection()?;
        let info: String = self
            .bounded(self.connect_timeout, async move {
                redis::cmd("INFO")
                    .arg("server")
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        info.lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())
            .ok_or_else(|| {
                NodeError::new(
                    &self.id,
                    NodeErrorKind::UnexpectedReply("INFO server without run_id".into()),
                )
            })
    }

    /// The node's connection, created on first use. It reconnects on its own after I/O errors.
    fn connection(&self) -> Result<ConnectionManager, NodeError> {
        let mut slot = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let config = ConnectionManagerConfig::new()
            // The per-request bound is ours (`bounded`), applied per operation.
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.connect_timeout))
            // Fail fast while a node is down: the next request starts a new connection attempt,
            // and the algorithm already tolerates a minority of failed nodes.
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| NodeError::new(&self.id, NodeErrorKind::Redis(e)))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Runs one request against this node, bounded by `timeout`; fails at once, without sending
    /// it, while the node is unresponsive and another request is probing it (see
    /// [`TIMEOUTS_BEFORE_UNRESPONSIVE`]).
    ///
    /// A request cut off by the timeout may still have been written to the connection; anything
    /// sent after it on the same connection is executed after it, which is what lets a rollback
    /// clean up an acquire that lands late.
    async fn bounded<T>(
        &self,
        timeout: Duration,
        request: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, NodeError> {
        let probe = match self.is_unresponsive() {
            false => None,
            true => match Probe::start(&self.probing) {
                Some(probe) => Some(probe),
                None => return Err(NodeError::new(&self.id, NodeErrorKind::Unresponsive)),
            },
        };
        match tokio::time::timeout(timeout, request).await {
            Ok(reply) => {
                // Only the server's own answer shows it is alive: a request failing because its
                // connection was dropped or could not be opened says nothing about that.
                let answered = match &reply {
                    Ok(_) => true,
                    Err(e) => matches!(e.kind(), ErrorKind::Server(_)),
                };
                if answered
                    && self.timeouts_in_a_row.swap(0, Ordering::Relaxed)
                        >= TIMEOUTS_BEFORE_UNRESPONSIVE
                {
                    tracing::debug!(node = %self.id, "answering again");
                }
                reply.map_err(|e| NodeError::new(&self.id, NodeErrorKind::Redis(e)))
            }
            Err(_elapsed) => {
                let in_a_row = self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                if in_a_row == 1 {
                    self.silent_since_ms.store(self.now_ms(), Ordering::Relaxed);
                }
                // A fresh connection after a few timeouts in a row, and for each next probe.
                if in_a_row == TIMEOUTS_BEFORE_UNRESPONSIVE || probe.is_some() {
                    self.forget_connection();
                }
                Err(NodeError::new(&self.id, NodeErrorKind::Timeout(timeout)))
            }
        }
    }

    /// Whether requests have timed out [`TIMEOUTS_BEFORE_UNRESPONSIVE`] times in a row, over at
    /// least [`SILENCE_BEFORE_UNRESPONSIVE`].
    fn is_unresponsive(&self) -> bool {
        self.timeouts_in_a_row.load(Ordering::Relaxed) >= TIMEOUTS_BEFORE_UNRESPONSIVE && {
            let since = self.silent_since_ms.load(Ordering::Relaxed);
            let silence = Duration::from_millis(self.now_ms().saturating_sub(since));
            silence >= SILENCE_BEFORE_UNRESPONSIVE
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn forget_connection(&self) {
        tracing::debug!(node = %self.id, "no reply to the last {TIMEOUTS_BEFORE_UNRESPONSIVE} requests or more; reconnecting");
        let mut slot = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        *slot = None;
    }
}

/// The one request in flight to an unresponsive node; the next request may probe once it ends,
/// however it ends (a reply, a timeout, or the caller dropping it).
struct Probe<'a>(&'a AtomicBool);

impl<'a> Probe<'a> {
    fn start(probing: &'a AtomicBool) -> Option<Self> {
        let free = probing.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed);
        // Not `then_some`: that would build (and drop, releasing the flag) a probe that lost.
        free.is_ok().then(|| Probe(probing))
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_at_a_time_and_a_start_that_lost_leaves_the_probe_alone() {
        let probing = AtomicBool::new(false);
        let first = Probe::start(&probing);
        assert!(first.is_some());
        assert!(Probe::start(&probing).is_none());
        assert!(
            Probe::start(&probing).is_none(),
            "the lost start released the flag"
        );
        drop(first);
        assert!(Probe::start(&probing).is_some());
    }
}

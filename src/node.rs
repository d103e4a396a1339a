//! One Redis master: its long-lived multiplexed connection, the per-request time bound, and the
//! commands and scripts the algorithm sends it.

mod conn;
mod durable;
mod health;
mod layout;
mod link;
mod standalone;
mod subscription;
mod target;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, Either};
use futures::FutureExt;
use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ScriptInvocation, ServerErrorKind,
};

use crate::durability::Durability;
use crate::error::{NodeError, NodeErrorKind};
use crate::scripts;
use crate::seam;
use conn::Conn;
use health::{Health, ProbeLease, TIMEOUTS_BEFORE_UNRESPONSIVE};
pub(crate) use layout::{check_lock_key, hash_tag, marker_key, Companion};
pub use layout::{
    companion_key, is_companion_key, lock_key_of_companion, resource_key, KEY_LAYOUT, LAYOUT_MARKER,
};
use link::{Connection, Link, NotOpened};
pub(crate) use subscription::Subscriber;
pub(crate) use target::{Login, Options as TargetOptions, Target, SENTINEL_PASSWORD_PARAM};

/// What a script call sends after the script: its key count, keys and arguments, written
/// straight into the command. A release sends the same input to every node; built as owned
/// strings, it cost eight allocations per node per release.
pub(crate) trait ScriptInput {
    /// How many arguments [`write`](ScriptInput::write) writes, the key count included.
    fn args(&self) -> usize;
    /// About how many bytes they take.
    fn bytes(&self) -> usize;
    /// Writes the key count, the keys and the arguments.
    fn write(&self, cmd: &mut Cmd);
}

/// `EVAL` (`by` the script's `source`) or `EVALSHA` (by its SHA1) of a script with `input`, built
/// straight into one command.
fn script_call(by: &str, script: &str, input: &(impl ScriptInput + ?Sized)) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + input.args(), input.bytes() + script.len() + 32);
    cmd.arg(by).arg(script);
    input.write(&mut cmd);
    cmd
}

/// One configured master.
pub(crate) struct Node {
    /// `host:port` (or the socket path, or a cluster's or Sentinel group's URL without its
    /// credentials): how the node is named in errors and logs.
    id: String,
    /// What the voter is and how to reach it.
    target: Arc<Target>,
    connect_timeout: Duration,
    /// How a grant of this node is confirmed before it counts.
    durability: Durability,
    /// Opened lazily inside the caller's runtime on first use, so that building a `Redlock`
    /// does no I/O and needs no runtime.
    link: Link,
    health: Health,
    /// Requests handed to a connection so far: see [`Node::sent`].
    sent: AtomicU64,
}

impl std::fmt::Debug for Node {
    // The client holds the connection info, password included: show the identity only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.id).finish()
    }
}

/// How long a confirmation (`WAIT`, `WAITAOF`) may wait on the server within a request bound of
/// `timeout`: a server times a blocked command out only at its next timer tick (every 100 ms at
/// the default `hz 10`), so the wait leaves that much room, or half the bound if it is short.
fn confirm_within(timeout: Duration) -> Duration {
    const TICK: Duration = Duration::from_millis(110);
    timeout.saturating_sub(TICK).max(timeout / 2)
}

/// `from + after`; when that overflows the clock, as far ahead as tokio's own timeouts go
/// (about 30 years).
fn deadline_after(from: Instant, after: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    from.checked_add(after)
        .or_else(|| from.checked_add(FAR))
        .unwrap_or(from)
}

/// The time bound of one request (see [`Node::bounded`]).
struct Bound<'a> {
    started: Instant,
    timeout: Duration,
    /// Held while the request is the probe of an unresponsive node.
    probe: Option<ProbeLease<'a>>,
}

impl Node {
    /// A voter of any kind (see `target`). `marker`: the key layout marker key, checked on
    /// every new connection; `durability`: how its grants are confirmed (see `durability`),
    /// also checked on every new connection.
    pub(crate) fn new(
        target: Target,
        connect_timeout: Duration,
        marker: Arc<str>,
        durability: Durability,
    ) -> Self {
        let target = Arc::new(target);
        Node {
            // Never the user or password of the connection info.
            id: target.id(),
            connect_timeout,
            durability,
            link: Link::new(target.clone(), connect_timeout, marker, durability),
            target,
            health: Health::new(),
            sent: AtomicU64::new(0),
        }
    }

    /// Whether this voter is a Redis Cluster (a multi-resource lock then goes by slot: see
    /// `keys::by_slot`).
    pub(crate) fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    /// How this node is named: `host:port`, or a cluster's or Sentinel group's URL.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// How many requests have been handed to a connection to this node so far. While it stays
    /// the same, nothing sent in the meantime can have reached the node: a request waiting for
    /// a connection, failing at once while the node is unresponsive, or refused a connection,
    /// is not counted. A request is counted as it is built on an open connection: one built
    /// and then dropped unpolled counts too, which costs a rollback no more than a release it
    /// did not need.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The release script (`lua/release.lua`) with the key count, keys and arguments `input`
    /// writes (each lock key, then their lines, then their leases; see `keys`). `Ok(true)` when at least one key still carried the token and
    /// was released.
    ///
    /// The holder's release (`hot`) sends the script's SHA1, with the source as the fallback on
    /// `NOSCRIPT`; a cleanup sends the source at once (see `scripts::RELEASE_SOURCE`).
    ///
    /// Like every request here, it is built when called (see [`Node::bounded`]).
    pub(crate) fn release<'a>(
        &'a self,
        input: &'a (impl ScriptInput + Sync + ?Sized),
        hot: bool,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + 'a {
        let deleted = if hot {
            let by_source = move || script_call("EVAL", &scripts::RELEASE_SOURCE, input);
            self.also_behind_retired(by_source, timeout);
            Either::Left(self.call_hot(&scripts::RELEASE, &scripts::RELEASE_SOURCE, input, timeout))
        } else {
            Either::Right(self.cleanup(&scripts::RELEASE_SOURCE, input, timeout))
        };
        deleted.map(|deleted| deleted.map(|deleted| deleted > 0))
    }

    /// A cleanup script, `source` with what `input` writes: sent by its source, one round trip
    /// whatever the node's script cache holds, and behind a retired connection too (see
    /// [`Node::also_behind_retired`]), so that it runs after anything of the same client still
    /// on its way there.
    fn cleanup<'a>(
        &'a self,
        source: &'static str,
        input: &'a (impl ScriptInput + Sync + ?Sized),
        timeout: Duration,
    ) -> impl Future<Output = Result<i64, NodeError>> + 'a {
        let by_source = move || script_call("EVAL", source, input);
        self.also_behind_retired(by_source, timeout);
        self.bounded(timeout, move |mut conn| async move {
            by_source().query_async::<i64>(&mut conn).await
        })
    }

    /// The rollback of an owner's takeover (`lua/restore.lua`) with the key count, keys and
    /// arguments `input` writes, sent as a cleanup (see [`Node::cleanup`]). `Ok(true)` when the
    /// value went back.
    pub(crate) fn restore<'a>(
        &'a self,
        input: &'a (impl ScriptInput + Sync + ?Sized),
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + 'a {
        self.cleanup(&scripts::RESTORE_SOURCE, input, timeout)
            .map(|restored| restored.map(|restored| restored > 0))
    }

    /// The plain attempt (`lua/acquire.lua`) with the key count, keys and arguments `input`
    /// writes, on a node whose grants need no confirmation (see
    /// [`confirms_grants`](Node::confirms_grants)): the script's reply.
    ///
    /// Like every request here, it is built when called (see [`Node::bounded`]).
    pub(crate) fn acquire<'a>(
        &'a self,
        input: &'a (impl ScriptInput + Sync + ?Sized),
        timeout: Duration,
    ) -> impl Future<Output = Result<i64, NodeError>> + 'a {
        self.call_hot(&scripts::ACQUIRE, &scripts::ACQUIRE_SOURCE, input, timeout)
    }

    /// The plain mutex's first attempt: a bare `SET key token NX PX ttl_ms`, on a node whose
    /// grants need no confirmation. `Ok(true)` when set. It takes a key only where the key does
    /// not exist, which, while anybody waits in the key's line, it always does (see `stretch` in
    /// `lua/line.lua`): it cannot jump a line. A refusal cannot tell a held key from one kept
    /// only for a line that has nobody live left; the attempts after it take the script's way
    /// (`lua/acquire.lua`), which can.
    pub(crate) fn set_nx<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl_ms: u64,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + 'a {
        self.bounded(timeout, move |mut conn| async move {
            let set: Option<redis::Value> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut conn)
                .await?;
            Ok(set.is_some())
        })
    }

    /// Whether this node's grants count only once confirmed durable (see `durability`).
    pub(crate) fn confirms_grants(&self) -> bool {
        self.durability.waits()
    }

    /// A script of the hot path, `script` (whose source is `source`) with `input`: its SHA1 is
    /// sent, not its source. A node that lost its scripts since the connection loaded them says
    /// NOSCRIPT: the source goes then, within the same time bound.
    fn call_hot<'a>(
        &'a self,
        script: &'static Script,
        source: &'static str,
        input: &'a (impl ScriptInput + Sync + ?Sized),
        timeout: Duration,
    ) -> impl Future<Output = Result<i64, NodeError>> + 'a {
        self.bounded(timeout, move |mut conn| async move {
            let by_sha = script_call("EVALSHA", script.get_hash(), input);
            match by_sha.query_async(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    script_call("EVAL", source, input)
                        .query_async(&mut conn)
                        .await
                }
                other => other,
            }
        })
    }

    /// Raises the fencing counter to at least `fence` where `token` still holds the key.
    /// `Ok(true)` when the counter now holds at least `fence`.
    pub(crate) async fn raise_fence(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        fence: u64,
        grace_ms: u64,
        timeout: Duration,
    ) -> Result<bool, NodeError> {
        let mut call = scripts::RAISE_FENCE.prepare_invoke();
        call.key(key)
            .key(fence_key)
            .arg(token)
            .arg(grace_ms)
            .arg(fence);
        let raised: i64 = self.invoke_granting(call, timeout, |r| *r == 1).await?;
        Ok(raised == 1)
    }

    /// Runs one script on the shared connection, bounded by `timeout`: `EVALSHA`, the script
    /// having been loaded when the connection opened (see `link.rs`); should the node have lost
    /// it since, `SCRIPT LOAD` and `EVALSHA` again, within the same bound.
    pub(crate) fn invoke<'a, T: FromRedisValue + Send + 'a>(
        &'a self,
        call: ScriptInvocation<'a>,
        timeout: Duration,
    ) -> impl Future<Output = Result<T, NodeError>> + 'a {
        self.bounded(timeout, |mut conn| async move {
            call.invoke_async(&mut conn).await
        })
    }

    /// Runs a script that grants or keeps a lock (an acquire, an extend, a fence), like
    /// [`invoke`](Self::invoke); with a [`Durability`], the confirmation (`WAIT`, `WAITAOF`)
    /// goes in the same pipeline right behind it, waiting on the server for less than `timeout`
    /// (see [`confirm_within`]: a missing confirmation is reported as such, not as a timeout).
    /// A reply that `granted` something counts only once confirmed: unconfirmed, it is this
    /// node's error, and the attempt's rollback releases what it granted. A refusal stands as
    /// it is, confirmed or not (it granted nothing to lose), so that contention is still told
    /// from unavailability.
    ///
    /// On a Redis Cluster voter the pipeline is routed as one request by the slot of the
    /// script's first key (the confirmation has no key of its own, and a key-less command in a
    /// pipeline does not change its route): the script and its `WAIT`/`WAITAOF` go to the
    /// primary of the resource's slot, on that primary's connection, and a `MOVED` or `ASK`
    /// sends both on again together. A `WAIT` sent alone would go to every primary.
    pub(crate) fn invoke_granting<'a, T: FromRedisValue + Send + 'a>(
        &'a self,
        call: ScriptInvocation<'a>,
        timeout: Duration,
        granted: impl FnOnce(&T) -> bool + Send + 'a,
    ) -> impl Future<Output = Result<T, NodeError>> + 'a {
        let Some(confirm) = self.durability.confirm_cmd(confirm_within(timeout)) else {
            return Either::Left(self.invoke(call, timeout));
        };
        let confirmed = self.bounded(timeout, |mut conn| async move {
            let mut pipe = redis::pipe();
            pipe.invoke_script(&call).add_command(confirm);
            match pipe.query_async(&mut conn).await {
                // The node lost its scripts since the connection loaded them.
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    call.load_async(&mut conn).await?;
                    pipe.query_async(&mut conn).await
                }
                other => other,
            }
        });
        // Boxed: a confirmation is a round trip to the replicas or the disk, and the requests
        // without one keep a smaller future.
        let judged: BoxFuture<'a, Result<T, NodeError>> = Box::pin(confirmed.map(move |replies| {
            let (reply, confirmed): (T, redis::Value) = replies?;
            if granted(&reply) {
                self.durability
                    .judge(&confirmed)
                    .map_err(|why| self.error(NodeErrorKind::Unconfirmed(why)))?;
            }
            Ok(reply)
        }));
        Either::Right(judged)
    }

    /// Opens a connection of its own for sharded subscriptions (see `subscription`), bounded
    /// by the connect timeout.
    pub(crate) async fn subscriber(&self) -> Result<Subscriber, NodeError> {
        let opening = self.target.subscriber(self.connect_timeout);
        match tokio::time::timeout(self.connect_timeout, opening).await {
            Ok(reply) => reply.map_err(|e| self.error(NodeErrorKind::Redis(e))),
            Err(_elapsed) => Err(self.error(NodeErrorKind::Timeout(self.connect_timeout))),
        }
    }

    /// What tells this voter from another: a master's `run_id` (from `INFO server`); a
    /// cluster's node ids (`CLUSTER NODES`, every node it knows). Two voters with an identity in
    /// common are one server or one cluster listed twice.
    pub(crate) async fn identities(&self) -> Result<Vec<String>, NodeError> {
        let cluster = self.target.is_cluster();
        let info: String = self
            .bounded(self.connect_timeout, |mut conn| async move {
                let cmd = match cluster {
                    true => redis::cmd("CLUSTER").arg("NODES").clone(),
                    false => redis::cmd("INFO").arg("server").clone(),
                };
                cmd.query_async(&mut conn).await
            })
            .await?;
        let ids: Vec<String> = match cluster {
            true => info
                .lines()
                .filter_map(|line| line.split_whitespace().next())
                .map(|id| format!("cluster node {id}"))
                .collect(),
            false => info
                .lines()
                .find_map(|line| line.strip_prefix("run_id:"))
                .map(|id| format!("run_id {}", id.trim()))
                .into_iter()
                .collect(),
        };
        if ids.is_empty() {
            return Err(self.error(NodeErrorKind::UnexpectedReply(
                "INFO server without run_id, or CLUSTER NODES without nodes".into(),
            )));
        }
        Ok(ids)
    }

    /// Runs one request against this node, bounded by `timeout`.
    ///
    /// The request waits for the node's connection within that bound, unless it is the probe
    /// of an unresponsive node (see [`TIMEOUTS_BEFORE_UNRESPONSIVE`]): the probe may take the
    /// connect timeout to connect (waiting out a reconnect backoff if need be) and then
    /// `timeout` for its reply, because on a slow link a new connection plus one request can
    /// take longer than the node timeout while one request alone does not, and a probe held to
    /// the node timeout would then never be answered. While the node is unresponsive and
    /// another request holds the probe, it fails at once, unsent; so does a request that finds
    /// the node's last connection attempt failed and its backoff running.
    ///
    /// A request cut off by the timeout may still have been written to the connection; anything
    /// sent after it on the same connection is executed after it, which is what lets a release
    /// clean up an acquire that lands late. A connection is replaced after timeouts in a row;
    /// releases then also go on the replaced one (see [`Node::also_behind_retired`]).
    ///
    /// Everything up to sending is done when called, the way nearly every request goes: the
    /// node's connection is open, and the future returned is the request under its time bound
    /// and nothing more. (It is boxed into each fan-out: a smaller future is a cheaper
    /// allocation.) A connection still to be opened is waited for in a boxed future of its own.
    fn bounded<'a, T, F, Fut>(
        &'a self,
        timeout: Duration,
        request: F,
    ) -> impl Future<Output = Result<T, NodeError>> + 'a
    where
        F: FnOnce(Conn) -> Fut + Send + 'a,
        Fut: Future<Output = RedisResult<T>> + Send + 'a,
        T: Send + 'a,
    {
        let started = seam::now();
        let probe = match self.health.is_unresponsive() {
            false => None,
            true => match self
                .health
                .start_probe(started, self.connect_timeout.saturating_add(timeout))
            {
                Some(probe) => Some(probe),
                None => {
                    let unresponsive = Err(self.error(NodeErrorKind::Unresponsive));
                    return Either::Left(Either::Left(std::future::ready(unresponsive)));
                }
            },
        };
        if let Some(connection) = self.link.open_now() {
            let bound = Bound {
                started,
                timeout,
                probe,
            };
            let deadline = deadline_after(started, timeout);
            let sent = self.send(connection, deadline, bound, request);
            return Either::Left(Either::Right(sent));
        }
        let connecting: BoxFuture<'a, Result<T, NodeError>> = Box::pin(async move {
            let connecting = match probe {
                Some(_) => self.connect_timeout,
                None => timeout,
            };
            let connection = self.connect(started, connecting, probe.is_some()).await?;
            let from = match probe {
                Some(_) => seam::now(),
                None => started,
            };
            let bound = Bound {
                started,
                timeout,
                probe,
            };
            let deadline = deadline_after(from, timeout);
            self.send(connection, deadline, bound, request).await
        });
        Either::Right(connecting)
    }

    /// Sends `request` on `connection`, to be answered by `deadline`: see [`Node::bounded`].
    fn send<'a, T, F, Fut>(
        &'a self,
        connection: Connection,
        deadline: Instant,
        bound: Bound<'a>,
        request: F,
    ) -> impl Future<Output = Result<T, NodeError>> + 'a
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>> + 'a,
        T: 'a,
    {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let Connection { number, conn } = connection;
        let reply = tokio::time::timeout_at(deadline.into(), request(conn));
        reply.map(move |reply| self.settle(reply, number, bound))
    }

    /// What the reply to a request sent on connection `number` (or its absence) says about
    /// the node: see [`Node::bounded`].
    fn settle<T>(
        &self,
        reply: Result<RedisResult<T>, tokio::time::error::Elapsed>,
        number: u64,
        bound: Bound<'_>,
    ) -> Result<T, NodeError> {
        match reply {
            Ok(reply) => {
                match &reply {
                    // Only the server's own answer shows it is alive.
                    Ok(_) => self.replied(),
                    // A master demoted to a replica (a Sentinel failover while the connection
                    // stayed open): alive, but no longer the voter's master. The next request
                    // asks the Sentinels again.
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) => {
                        self.replied();
                        self.link.broken(number, e.clone());
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => self.replied(),
                    Err(e) if e.is_io_error() || e.is_unrecoverable_error() => {
                        self.link.broken(number, e.clone())
                    }
                    Err(_) => {}
                }
                reply.map_err(|e| self.error(NodeErrorKind::Redis(e)))
            }
            Err(_elapsed) => {
                let in_a_row = self.health.timed_out(bound.started, seam::now());
                // A fresh connection after a few timeouts in a row, and for each next probe.
                if in_a_row == TIMEOUTS_BEFORE_UNRESPONSIVE || bound.probe.is_some() {
                    tracing::debug!(node = %self.id, in_a_row, "no reply to the last requests; reconnecting");
                    self.link.retire(number);
                }
                Err(self.error(NodeErrorKind::Timeout(bound.timeout)))
            }
        }
    }

    /// Waits for the node's connection to open (see [`Link::open`]), for at most `connecting`
    /// from `started`; a request that waited in vain counts as a timeout (see [`Health`]).
    async fn connect(
        &self,
        started: Instant,
        connecting: Duration,
        patient: bool,
    ) -> Result<Connection, NodeError> {
        let opening = self.link.open(patient);
        let until = deadline_after(started, connecting);
        match tokio::time::timeout_at(until.into(), opening).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(NotOpened { why, tried })) => {
                // A connection attempt this request waited for in vain is silence too; one
                // refused, or none made during a backoff, says nothing either way.
                if tried && why.is_timeout() {
                    self.health.timed_out(started, seam::now());
                }
                Err(self.error(NodeErrorKind::Redis(why)))
            }
            Err(_elapsed) => {
                self.health.timed_out(started, seam::now());
                Err(self.error(NodeErrorKind::Timeout(connecting)))
            }
        }
    }

    /// Sends the release `cmd` builds on the connection this node replaced last too, if it
    /// keeps one, in the background: a `SET` written there before it was replaced may still
    /// run (the node was paused, or the route is slow), and only a release queued behind it on
    /// the same connection is sure to run after it. A release sent on the new connection alone
    /// could overtake it and leave its key behind until its TTL.
    fn also_behind_retired(&self, cmd: impl FnOnce() -> Cmd, timeout: Duration) {
        let Some(retired) = self.link.retired() else {
            return;
        };
        let (cmd, drained) = (cmd(), self.link.drain_handle());
        let sent = crate::sync::spawn(async move {
            let mut conn = retired.conn;
            let reply = tokio::time::timeout(timeout, cmd.query_async::<redis::Value>(&mut conn));
            // Any reply shows that what was written before it has run; an error means the
            // connection is gone. Only silence keeps the connection.
            if reply.await.is_ok() {
                drained.drained(retired.number);
            }
        });
        if sent {
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn replied(&self) {
        if self.health.replied(seam::now()) >= TIMEOUTS_BEFORE_UNRESPONSIVE {
            tracing::debug!(node = %self.id, "answering again");
        }
    }

    fn error(&self, kind: NodeErrorKind) -> NodeError {
        NodeError::new(&self.id, kind)
    }
}

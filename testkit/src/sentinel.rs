//! A primary, its replicas and the Sentinels that watch them, in throw-away sandboxes.
//!
//! [`SentinelGroup`] starts one `redis-server` primary, replicas of it (`--replicaof`), and
//! Sentinels (`redis-server <conf> --sentinel`) that monitor it under a master name, with a
//! quorum of a majority of the Sentinels and short timeouts so that failovers take seconds. Its
//! verbs are the events a Sentinel client has to live through:
//!
//! * [`failover`](SentinelGroup::failover): an operator's `SENTINEL FAILOVER`; the primary
//!   changes while the old one is still up.
//! * [`kill_primary`](SentinelGroup::kill_primary): the primary crashes and the Sentinels agree to
//!   promote a replica; [`restart`](SentinelGroup::restart) brings the node back, and the
//!   Sentinels turn it into a replica.
//! * [`kill_sentinel`](SentinelGroup::kill_sentinel) /
//!   [`restart_sentinel`](SentinelGroup::restart_sentinel).
//!
//! Data nodes are named by their index in [`servers`](SentinelGroup::servers) (node 0 is the
//! first primary); which of them is primary is what the Sentinels say
//! ([`primary`](SentinelGroup::primary)). Everything here is synchronous, like
//! [`server`](crate::server).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::ops::{Index, IndexMut};
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::{query, wait_until, Promotion};
use crate::log_tail::tail;
use crate::server::{RedisServer, RedisServerBuilder, LOG_TAIL_LINES};

/// The master name the Sentinels monitor the primary under, unless
/// [`SentinelGroupBuilder::master_name`] says otherwise.
pub const DEFAULT_MASTER_NAME: &str = "mymaster";

/// How many replicas [`SentinelGroupBuilder::new`] starts.
pub const DEFAULT_REPLICAS: usize = 1;

/// How many Sentinels [`SentinelGroupBuilder::new`] starts.
pub const DEFAULT_SENTINELS: usize = 3;

/// The Sentinels' `down-after-milliseconds` unless [`SentinelGroupBuilder::down_after`] says
/// otherwise: how long the primary may not answer before a Sentinel thinks it is down.
pub const DEFAULT_DOWN_AFTER: Duration = Duration::from_millis(1000);

/// The Sentinels' `failover-timeout` unless [`SentinelGroupBuilder::failover_timeout`] says
/// otherwise. A failover that did not complete is retried after twice this.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);

/// How long a change may take to be seen by every Sentinel and node, beyond the failover timeout.
/// A Sentinel turns a node that came back as a primary into a replica only after about ten
/// seconds.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Read and write timeout of one command sent by the test kit.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause between two tries of `SENTINEL FAILOVER` while another failover is in progress.
const POLL: Duration = Duration::from_millis(50);

/// Configures and starts a [`SentinelGroup`].
///
/// The defaults are one replica, three Sentinels (quorum two), the master name
/// [`DEFAULT_MASTER_NAME`], [`DEFAULT_DOWN_AFTER`] and [`DEFAULT_FAILOVER_TIMEOUT`], and data
/// nodes from [`RedisServerBuilder::new`]. Sentinels run the same binary as the data nodes,
/// without their extra arguments. Setters never fail; everything is checked in
/// [`spawn`](Self::spawn).
///
/// ```no_run
/// use quorumlock_testkit::SentinelGroupBuilder;
///
/// let group = SentinelGroupBuilder::new()
///     .replicas(2)
///     .sentinels(5)
///     .master_name("orders")
///     .spawn()?;
/// assert!(group.url().ends_with("/orders"));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct SentinelGroupBuilder {
    replicas: usize,
    sentinels: usize,
    master_name: String,
    down_after: Duration,
    failover_timeout: Duration,
    server: RedisServerBuilder,
    master_password: Option<String>,
    sentinel_password: Option<String>,
}

impl fmt::Debug for SentinelGroupBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |set: &Option<String>| set.as_ref().map(|_| "<redacted>");
        f.debug_struct("SentinelGroupBuilder")
            .field("replicas", &self.replicas)
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("down_after", &self.down_after)
            .field("failover_timeout", &self.failover_timeout)
            .field("server", &self.server)
            .field("master_password", &hidden(&self.master_password))
            .field("sentinel_password", &hidden(&self.sentinel_password))
            .finish()
    }
}

impl Default for SentinelGroupBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SentinelGroupBuilder {
    /// A builder with the defaults described on [`SentinelGroupBuilder`].
    pub fn new() -> Self {
        Self {
            replicas: DEFAULT_REPLICAS,
            sentinels: DEFAULT_SENTINELS,
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            down_after: DEFAULT_DOWN_AFTER,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            server: RedisServerBuilder::new(),
            master_password: None,
            sentinel_password: None,
        }
    }

    /// How many replicas the primary gets ([`DEFAULT_REPLICAS`] by default). Without one there
    /// is nothing to fail over to.
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// How many Sentinels watch the primary ([`DEFAULT_SENTINELS`] by default), at least one;
    /// the quorum is a majority of them.
    pub fn sentinels(mut self, n: usize) -> Self {
        self.sentinels = n;
        self
    }

    /// The name the Sentinels know the primary by ([`DEFAULT_MASTER_NAME`] by default): a
    /// single word.
    pub fn master_name(mut self, name: impl Into<String>) -> Self {
        self.master_name = name.into();
        self
    }

    /// The Sentinels' `down-after-milliseconds` ([`DEFAULT_DOWN_AFTER`] by default), rounded
    /// down to whole milliseconds.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// The Sentinels' `failover-timeout` ([`DEFAULT_FAILOVER_TIMEOUT`] by default), rounded down
    /// to whole milliseconds.
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// The builder the primary and the replicas are started from (binary, persistence, extra
    /// arguments); `--repl-diskless-sync-delay 0` is appended, so that a replica syncs at once
    /// with whichever node is primary.
    ///
    /// With [`tls`](RedisServerBuilder::tls), the group runs on TLS only: the data nodes and
    /// the Sentinels have no plain port (`--port 0`), replication and the Sentinels' links to
    /// the nodes and to each other run over TLS (`--tls-replication yes`), and
    /// [`SentinelGroup::url`] reads `rediss+sentinel://`.
    pub fn server(mut self, builder: RedisServerBuilder) -> Self {
        self.server = builder;
        self
    }

    /// Protects the data nodes with this password (`--requirepass`, `--masterauth` for the
    /// replicas), which the Sentinels use too (`sentinel auth-pass`). None by default.
    pub fn master_password(mut self, password: impl Into<String>) -> Self {
        self.master_password = Some(password.into());
        self
    }

    /// Protects the Sentinels with a password of their own (`--requirepass` on each Sentinel,
    /// `sentinel sentinel-pass` for their links to each other). None by default.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_password = Some(password.into());
        self
    }

    /// Starts the primary, its replicas (each synced before the next starts) and the Sentinels,
    /// and waits until every Sentinel knows the primary, every replica and every other Sentinel.
    ///
    /// # Errors
    ///
    /// * [`io::ErrorKind::InvalidInput`] for no Sentinel, or a master name that is empty or holds
    ///   whitespace.
    /// * [`io::ErrorKind::TimedOut`] if the Sentinels do not discover each other and the replicas
    ///   within about half a minute; the message says what was missing.
    /// * As [`RedisServerBuilder::spawn`] and [`RedisServer::spawn_replica`].
    pub fn spawn(self) -> io::Result<SentinelGroup> {
        if self.sentinels == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a sentinel group needs at least one Sentinel",
            ));
        }
        let name = &self.master_name;
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the master name {name:?} must be one word"),
            ));
        }
        let mut server = self.server.arg("--repl-diskless-sync-delay").arg("0");
        let tls = server
            .tls_settings()
            .map(|tls| tls.clone().plain_port(false));
        if let Some(tls) = &tls {
            server = server.tls(tls.clone()).arg("--tls-replication").arg("yes");
        }
        if let Some(password) = &self.master_password {
            server = server
                .arg("--requirepass")
                .arg(password)
                .arg("--masterauth")
                .arg(password);
        }
        let primary = server.clone().spawn()?;
        let mut servers = Vec::with_capacity(self.replicas + 1);
        for _ in 0..self.replicas {
            servers.push(primary.spawn_replica(server.clone())?);
        }
        servers.insert(0, primary);
        let mut config = format!(
            "sentinel resolve-hostnames no\n\
             sentinel monitor {name} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {name} {down_after}\n\
             sentinel failover-timeout {name} {failover_timeout}\n\
             sentinel parallel-syncs {name} 1\n",
            port = servers[0].port(),
            quorum = self.sentinels / 2 + 1,
            down_after = self.down_after.as_millis().max(1),
            failover_timeout = self.failover_timeout.as_millis().max(1),
        );
        if let Some(password) = &self.master_password {
            config.push_str(&format!("sentinel auth-pass {name} {password}\n"));
        }
        if let Some(password) = &self.sentinel_password {
            config.push_str(&format!("sentinel sentinel-pass {password}\n"));
        }
        let mut sentinel = RedisServerBuilder::new()
            .binary(servers[0].binary())
            .config(config)
            .arg("--sentinel");
        if let Some(tls) = &tls {
            sentinel = sentinel
                .tls(tls.clone())
                .arg("--tls-replication")
                .arg("yes");
        }
        if let Some(password) = &self.sentinel_password {
            sentinel = sentinel.arg("--requirepass").arg(password);
        }
        let sentinels = thread::scope(|scope| {
            let handles: Vec<_> = (0..self.sentinels)
                .map(|_| scope.spawn(|| sentinel.clone().spawn()))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle.join().unwrap_or_else(|_| {
                        Err(io::Error::other("a thread starting a Sentinel panicked"))
                    })
                })
                .collect::<io::Result<Vec<_>>>()
        })?;
        let group = SentinelGroup {
            servers,
            sentinels,
            master_name: self.master_name,
            failover_timeout: self.failover_timeout,
        };
        let what = format!(
            "every Sentinel to know the primary, its {} replica(s) and the {} other Sentinel(s)",
            self.replicas,
            self.sentinels - 1
        );
        group.settle(&what)?;
        Ok(group)
    }
}

/// A primary, its replicas and the Sentinels that watch them: `redis-server` child processes on
/// loopback ports, each in its own temporary directory.
///
/// Data nodes are named by their index in [`servers`](Self::servers) (also `group[i]`); node 0 is
/// the first primary. Dropping the group kills every process; dropping it during a panic first
/// prints the last lines of every log.
///
/// # Examples
///
/// ```no_run
/// use quorumlock_testkit::SentinelGroup;
///
/// let mut group = SentinelGroup::spawn(1, 3)?;
/// let url = group.url(); // "redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster"
/// assert_eq!(group.primary()?, 0);
///
/// let promotion = group.failover()?; // SENTINEL FAILOVER: node 1 is primary now
/// let promotion = group.kill_primary()?; // and node 1 crashes: node 0 is primary again
/// group.restart(promotion.old_primary)?; // node 1 comes back, as a replica
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SentinelGroup {
    /// The data nodes; node 0 was the first primary.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    master_name: String,
    failover_timeout: Duration,
}

impl fmt::Debug for SentinelGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelGroup")
            .field("master_name", &self.master_name)
            .field("servers", &self.servers)
            .field("sentinels", &self.sentinels)
            .field("failover_timeout", &self.failover_timeout)
            .finish()
    }
}

impl SentinelGroup {
    /// Starts a primary with `replicas` replicas, watched by `sentinels` Sentinels, with the
    /// other defaults of [`SentinelGroupBuilder`].
    ///
    /// # Errors
    ///
    /// As [`SentinelGroupBuilder::spawn`].
    pub fn spawn(replicas: usize, sentinels: usize) -> io::Result<Self> {
        SentinelGroupBuilder::new()
            .replicas(replicas)
            .sentinels(sentinels)
            .spawn()
    }

    /// A builder for a group with non-default settings.
    pub fn builder() -> SentinelGroupBuilder {
        SentinelGroupBuilder::new()
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,.../NAME`: every Sentinel, and the master
    /// name; `rediss+sentinel://` for a group on TLS (see [`SentinelGroupBuilder::server`]).
    /// Without credentials.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port()))
            .collect();
        let scheme = if self.sentinels.iter().any(|s| s.tls().is_some()) {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        format!("{scheme}://{}/{}", sentinels.join(","), self.master_name)
    }

    /// The name the Sentinels know the primary by.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// Every Sentinel's address, in order.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// The data nodes, primary and replicas, by index; node 0 was the first primary.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The Sentinels, in order.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The index of the node that is primary now, as the first running Sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` says.
    ///
    /// # Errors
    ///
    /// If no Sentinel answers, or the address is none of the data nodes.
    pub fn primary(&self) -> io::Result<usize> {
        let mut last_error = None;
        for sentinel in (0..self.sentinels.len()).filter(|&s| self.sentinels[s].is_running()) {
            match self.primary_by(sentinel) {
                Ok(primary) => return Ok(primary),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no Sentinel is running")))
    }

    /// The address of the node that is primary now: see [`primary`](Self::primary).
    ///
    /// # Errors
    ///
    /// As [`primary`](Self::primary).
    pub fn primary_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.servers[self.primary()?].addr())
    }

    /// Forces a failover: `SENTINEL FAILOVER name` on the first running Sentinel (again while
    /// it answers `-INPROG`), then waits until every running Sentinel reports a new primary, that
    /// node answers `ROLE` as a master, and every other running replica replicates from it.
    ///
    /// The old primary is still up; the Sentinels turn it into a replica of the new one some ten
    /// seconds later. [`wait_settled`](Self::wait_settled) waits for that.
    ///
    /// # Errors
    ///
    /// An error if there is no running replica or no running Sentinel, or the Sentinel refuses
    /// the failover; [`io::ErrorKind::TimedOut`] if no replica is promoted in time.
    pub fn failover(&mut self) -> io::Result<Promotion> {
        let old = self.settle("the group to settle before the failover")?;
        self.check_replica(old)?;
        let Some(sentinel) = (0..self.sentinels.len()).find(|&s| self.sentinels[s].is_running())
        else {
            return Err(io::Error::other("no Sentinel is running"));
        };
        let mut failover = redis::cmd("SENTINEL");
        failover.arg("FAILOVER").arg(&self.master_name);
        let deadline = Instant::now() + self.timeout();
        loop {
            match query::<()>(&self.sentinels[sentinel], &failover, COMMAND_TIMEOUT) {
                Ok(()) => break,
                // A failover already under way (the Sentinels' own, or one that is ending).
                Err(error) if error.to_string().contains("INPROG") && Instant::now() < deadline => {
                    thread::sleep(POLL);
                }
                Err(error) => {
                    return Err(io::Error::new(
                        error.kind(),
                        format!(
                            "{}: SENTINEL FAILOVER {}: {error}",
                            self.sentinel_name(sentinel),
                            self.master_name
                        ),
                    ))
                }
            }
        }
        let new = self.wait_promoted(old)?;
        Ok(Promotion {
            old_primary: old,
            new_primary: new,
        })
    }

    /// Kills (`SIGKILL`) the primary, then waits until every running Sentinel reports one of
    /// its replicas as the primary, that node answers `ROLE` as a master, and every other
    /// running replica replicates from it. [`restart`](Self::restart) brings the killed node
    /// back.
    ///
    /// # Errors
    ///
    /// An error if there is no running replica to promote; [`io::ErrorKind::TimedOut`] if the
    /// Sentinels do not promote one in time.
    pub fn kill_primary(&mut self) -> io::Result<Promotion> {
        let old = self.settle("the group to settle before the kill")?;
        self.check_replica(old)?;
        self.servers[old].kill()?;
        let new = self.wait_promoted(old)?;
        Ok(Promotion {
            old_primary: old,
            new_primary: new,
        })
    }

    /// Starts data node `index` again (killing it first if it runs), on the same port with the
    /// same arguments, and waits until the group has settled (see
    /// [`wait_settled`](Self::wait_settled)): a node that was primary and was replaced comes back
    /// as a primary of its own, and the Sentinels turn it into a replica of the current primary,
    /// which takes them about ten seconds.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no node `index`; as
    /// [`RedisServer::restart`]; [`io::ErrorKind::TimedOut`] if the group does not settle.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        if index >= self.servers.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "there is no node {index}: the group has {} data nodes",
                    self.servers.len()
                ),
            ));
        }
        self.servers[index].restart()?;
        let what = format!("{} to rejoin the group", self.server_name(index));
        self.settle(&what)?;
        // A node that died again is skipped by the checks: say so rather than return.
        if self.servers[index].is_running() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{} exited after its restart; its log:\n{}",
                self.server_name(index),
                tail(&self.servers[index].log(), LOG_TAIL_LINES)
            )))
        }
    }

    /// Kills (`SIGKILL`) Sentinel `index`. [`restart_sentinel`](Self::restart_sentinel) brings
    /// it back.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no Sentinel `index`; as
    /// [`RedisServer::kill`].
    pub fn kill_sentinel(&mut self, index: usize) -> io::Result<()> {
        self.check_sentinel(index)?;
        self.sentinels[index].kill()
    }

    /// Starts Sentinel `index` again, from the configuration file it rewrote (so it remembers
    /// the primary, the replicas and the other Sentinels), and waits until the group has
    /// settled.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no Sentinel `index`; as
    /// [`RedisServer::restart`]; [`io::ErrorKind::TimedOut`] if the group does not settle.
    pub fn restart_sentinel(&mut self, index: usize) -> io::Result<()> {
        self.check_sentinel(index)?;
        self.sentinels[index].restart()?;
        let what = format!("{} to rejoin the group", self.sentinel_name(index));
        self.settle(&what).map(drop)
    }

    /// Waits until the group has settled: every running Sentinel names the same data node as
    /// primary and sees it up and not failing over, knows every other Sentinel and every running
    /// replica (as up); that node answers `ROLE` as a master; every other running data node is
    /// its replica with the link up. The verbs do this themselves, except
    /// [`failover`](Self::failover), which does not wait for the old primary to become a
    /// replica.
    ///
    /// A paused process never answers, so the wait times out while one is paused.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::TimedOut`] if the group has not settled within about half a minute,
    /// saying what it was still waiting for.
    pub fn wait_settled(&self) -> io::Result<()> {
        self.settle("the group to settle").map(drop)
    }

    /// Every data node's and every Sentinel's whole log, each headed by its role and address.
    pub fn logs(&self) -> String {
        let servers = (0..self.servers.len()).map(|i| {
            format!(
                "==== {} ====\n{}",
                self.server_name(i),
                self.servers[i].log()
            )
        });
        let sentinels = (0..self.sentinels.len()).map(|i| {
            format!(
                "==== {} ====\n{}",
                self.sentinel_name(i),
                self.sentinels[i].log()
            )
        });
        servers.chain(sentinels).collect::<Vec<_>>().join("\n")
    }

    /// Waits until every running Sentinel names the same running data node other than `old`
    /// as primary, it answers `ROLE` as a master, and every running data node but `old` and it
    /// replicates from it.
    fn wait_promoted(&self, old: usize) -> io::Result<usize> {
        let what = format!(
            "the Sentinels to promote a replica of {}",
            self.server_name(old)
        );
        wait_until(&what, self.timeout(), || {
            let primary = self.agreed_primary()?;
            if primary == old {
                return Err(format!("the Sentinels still name node {old}"));
            }
            self.check_primary(primary)?;
            for node in (0..self.servers.len()).filter(|&n| n != old && n != primary) {
                self.check_linked(node, primary)?;
            }
            Ok(primary)
        })
    }

    /// Polls until the group has settled (see [`wait_settled`](Self::wait_settled)); the
    /// primary's index.
    fn settle(&self, what: &str) -> io::Result<usize> {
        wait_until(what, self.timeout(), || self.snapshot())
    }

    /// The primary's index if the group has settled; else why not.
    fn snapshot(&self) -> Result<usize, String> {
        let primary = self.agreed_primary()?;
        self.check_primary(primary)?;
        for sentinel in (0..self.sentinels.len()).filter(|&s| self.sentinels[s].is_running()) {
            let name = self.sentinel_name(sentinel);
            let master = self
                .sentinel_query::<Vec<String>>(sentinel, "MASTER")
                .map(pairs)
                .map_err(|error| error.to_string())?;
            let field = |key: &str| master.get(key).map_or("(missing)", String::as_str);
            if field("flags") != "master" {
                return Err(format!("{name} flags the primary {:?}", field("flags")));
            }
            let others = self.sentinels.len() - 1;
            if field("num-other-sentinels") != others.to_string() {
                return Err(format!(
                    "{name} knows {} other Sentinel(s), not {others}",
                    field("num-other-sentinels")
                ));
            }
            let replicas: Vec<HashMap<String, String>> = self
                .sentinel_query::<Vec<Vec<String>>>(sentinel, "REPLICAS")
                .map_err(|error| error.to_string())?
                .into_iter()
                .map(pairs)
                .collect();
            for node in (0..self.servers.len()).filter(|&n| n != primary) {
                if !self.servers[node].is_running() {
                    continue;
                }
                let port = self.servers[node].port().to_string();
                let known = replicas
                    .iter()
                    .find(|replica| replica.get("port") == Some(&port));
                match known.and_then(|replica| replica.get("flags")) {
                    None => return Err(format!("{name} does not know node {node} yet")),
                    Some(flags) if flags != "slave" && flags != "replica" => {
                        return Err(format!("{name} flags node {node} {flags:?}"))
                    }
                    Some(_) => {}
                }
            }
        }
        for node in (0..self.servers.len()).filter(|&n| n != primary) {
            self.check_linked(node, primary)?;
        }
        Ok(primary)
    }

    /// The data node every running Sentinel names as primary; else why there is none.
    fn agreed_primary(&self) -> Result<usize, String> {
        let mut agreed: Option<(usize, usize)> = None;
        for sentinel in (0..self.sentinels.len()).filter(|&s| self.sentinels[s].is_running()) {
            let primary = self
                .primary_by(sentinel)
                .map_err(|error| error.to_string())?;
            match agreed {
                None => agreed = Some((sentinel, primary)),
                Some((first, named)) if named != primary => {
                    return Err(format!(
                        "Sentinel {first} names node {named} as primary, Sentinel {sentinel} \
                         node {primary}"
                    ))
                }
                Some(_) => {}
            }
        }
        agreed
            .map(|(_, primary)| primary)
            .ok_or_else(|| "no Sentinel is running".to_owned())
    }

    /// The data node Sentinel `sentinel` names as primary.
    fn primary_by(&self, sentinel: usize) -> io::Result<usize> {
        let name = self.sentinel_name(sentinel);
        let addr: Option<(String, u16)> = query(
            &self.sentinels[sentinel],
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master_name),
            COMMAND_TIMEOUT,
        )
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("{name}: SENTINEL GET-MASTER-ADDR-BY-NAME: {error}"),
            )
        })?;
        let Some((host, port)) = addr else {
            return Err(io::Error::other(format!(
                "{name} does not know the master {:?}",
                self.master_name
            )));
        };
        self.servers
            .iter()
            .position(|server| host == "127.0.0.1" && server.port() == port)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{name} names {host}:{port} as primary, which is none of the data nodes"
                ))
            })
    }

    /// Whether data node `node` is running and answers `ROLE` as a master.
    fn check_primary(&self, node: usize) -> Result<(), String> {
        if !self.servers[node].is_running() {
            return Err(format!("the Sentinels name node {node}, which is down"));
        }
        let role: Vec<redis::Value> =
            query(&self.servers[node], &redis::cmd("ROLE"), COMMAND_TIMEOUT)
                .map_err(|error| format!("{}: ROLE: {error}", self.server_name(node)))?;
        let role: Option<String> = role
            .first()
            .and_then(|role| redis::from_redis_value_ref(role).ok());
        match role.as_deref() {
            Some("master") => Ok(()),
            other => Err(format!(
                "{} answers ROLE {other:?}, not \"master\"",
                self.server_name(node)
            )),
        }
    }

    /// Whether data node `node`, if it runs, replicates from node `primary` with the link up.
    fn check_linked(&self, node: usize, primary: usize) -> Result<(), String> {
        if !self.servers[node].is_running() {
            return Ok(());
        }
        let info: String = query(
            &self.servers[node],
            redis::cmd("INFO").arg("replication"),
            COMMAND_TIMEOUT,
        )
        .map_err(|error| format!("{}: INFO: {error}", self.server_name(node)))?;
        let field = |key: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix(':'))
                .unwrap_or("(none)")
        };
        let port = self.servers[primary].port().to_string();
        if field("role") == "slave" && field("master_port") == port {
            if field("master_link_status") == "up" {
                return Ok(());
            }
            return Err(format!(
                "node {node}, replica of node {primary}, has master_link_status:{}",
                field("master_link_status")
            ));
        }
        Err(format!(
            "node {node} has role:{} master_port:{}, not a replica of node {primary} yet",
            field("role"),
            field("master_port")
        ))
    }

    /// `SENTINEL subcommand name` on Sentinel `sentinel`.
    fn sentinel_query<T: redis::FromRedisValue>(
        &self,
        sentinel: usize,
        subcommand: &str,
    ) -> io::Result<T> {
        query(
            &self.sentinels[sentinel],
            redis::cmd("SENTINEL")
                .arg(subcommand)
                .arg(&self.master_name),
            COMMAND_TIMEOUT,
        )
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{}: SENTINEL {subcommand}: {error}",
                    self.sentinel_name(sentinel)
                ),
            )
        })
    }

    fn check_replica(&self, primary: usize) -> io::Result<()> {
        if (0..self.servers.len()).any(|n| n != primary && self.servers[n].is_running()) {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{} is primary and no replica of it is running",
                self.server_name(primary)
            )))
        }
    }

    fn check_sentinel(&self, index: usize) -> io::Result<()> {
        if index < self.sentinels.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "there is no Sentinel {index}: the group has {}",
                    self.sentinels.len()
                ),
            ))
        }
    }

    /// How long a wait may take: the failover timeout twice (a failed election is retried after
    /// that), plus the time the Sentinels take to reconfigure a node.
    fn timeout(&self) -> Duration {
        SETTLE_TIMEOUT + self.failover_timeout.saturating_mul(2)
    }

    fn server_name(&self, index: usize) -> String {
        match self.servers.get(index) {
            Some(server) => format!("node {index} ({})", server.addr()),
            None => format!("node {index}"),
        }
    }

    fn sentinel_name(&self, index: usize) -> String {
        match self.sentinels.get(index) {
            Some(sentinel) => format!("Sentinel {index} ({})", sentinel.addr()),
            None => format!("Sentinel {index}"),
        }
    }
}

impl Index<usize> for SentinelGroup {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.servers[index]
    }
}

impl IndexMut<usize> for SentinelGroup {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.servers[index]
    }
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        if thread::panicking() {
            for index in 0..self.servers.len() {
                eprintln!(
                    "==== {} (last {LOG_TAIL_LINES} log lines) ====\n{}",
                    self.server_name(index),
                    tail(&self.servers[index].log(), LOG_TAIL_LINES)
                );
            }
            for index in 0..self.sentinels.len() {
                eprintln!(
                    "==== {} (last {LOG_TAIL_LINES} log lines) ====\n{}",
                    self.sentinel_name(index),
                    tail(&self.sentinels[index].log(), LOG_TAIL_LINES)
                );
            }
        }
    }
}

/// A flat `[key, value, key, value, ...]` reply as a map.
fn pairs(flat: Vec<String>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let mut items = flat.into_iter();
    while let (Some(key), Some(value)) = (items.next(), items.next()) {
        map.insert(key, value);
    }
    map
}

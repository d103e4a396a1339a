//! A real Redis Cluster in throw-away sandboxes, with fault verbs for its shards.
//!
//! [`RedisCluster`] starts `redis-server` (or `valkey-server`) processes with
//! `cluster-enabled yes`, joins them with `redis-cli --cluster create`, and returns once every node
//! says `cluster_state:ok`, every node agrees on who serves which slot and every replica's link to
//! its primary is up. Its verbs are the events a cluster client has to live through:
//!
//! * [`kill_primary`](RedisCluster::kill_primary): a shard's primary crashes and the cluster
//!   promotes its replica by itself; [`restart`](RedisCluster::restart) brings the node back, as a
//!   replica.
//! * [`failover`](RedisCluster::failover): an operator's `CLUSTER FAILOVER` (graceful, `FORCE` or
//!   `TAKEOVER`).
//! * [`migrate_slot`](RedisCluster::migrate_slot): resharding, step by step as `redis-cli` does it;
//!   [`begin_migration`](RedisCluster::begin_migration) stops halfway, with the slot `MIGRATING`
//!   on its owner and `IMPORTING` on the target and some of its keys moved, so that clients meet
//!   `ASK` redirections until [`finish_migration`](RedisCluster::finish_migration).
//!
//! Nodes are named by their index in [`nodes`](RedisCluster::nodes), which never changes; shards
//! are named by a slot they serve, which stays true across failovers. [`key_slot`] computes a
//! key's slot as Redis does.
//!
//! Everything here is synchronous, like [`server`](crate::server), and every verb waits until the
//! cluster has settled again before it returns.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::{Index, IndexMut};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{free_port, tail, RedisServer, RedisServerBuilder, LOG_TAIL_LINES};

/// Environment variable naming the `redis-cli` binary used to create clusters, instead of the one
/// beside the server binary or on `PATH`.
pub const REDIS_CLI_ENV: &str = "QUORUMLOCK_REDIS_CLI";

/// How many hash slots a Redis Cluster has.
pub const SLOTS: u16 = 16384;

/// How many primaries [`RedisClusterBuilder::new`] starts.
pub const DEFAULT_PRIMARIES: usize = 3;

/// How many replicas each primary gets from [`RedisClusterBuilder::new`].
pub const DEFAULT_REPLICAS_PER_PRIMARY: usize = 1;

/// The `cluster-node-timeout` of [`RedisClusterBuilder::new`]: a node that does not answer for
/// this long is suspected, and a primary down for a little longer is replaced by its replica.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(2000);

/// The `cluster-config-file` inside each node's directory; kept across restarts, so that a
/// restarted node knows the cluster.
const NODES_CONFIG_FILE: &str = "nodes.conf";

/// Names under which the cluster tool is looked for, beside the server binary and on `PATH`.
const CLI_NAMES: &[&str] = &["redis-cli", "valkey-cli"];

/// How long the cluster may take to settle after a change, beyond its node timeout.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `redis-cli --cluster create` may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Pause between two looks at the cluster while waiting for it.
const POLL: Duration = Duration::from_millis(100);

/// Connect timeout of one command sent by the test kit.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Read and write timeout of one command sent by the test kit.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The timeout `MIGRATE` is given to hand its keys over.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many keys one `MIGRATE` moves.
const MIGRATE_BATCH: usize = 100;

/// How many cluster bus ports a node start tries when the one it picked is taken.
const BUS_PORT_ATTEMPTS: usize = 5;

/// After this long without the promotion, a graceful `CLUSTER FAILOVER` is sent again (Redis
/// gives up on a manual failover after five seconds).
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(6);

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of the key, or of its
/// hash tag (the bytes between the first `{` and the next `}`, when there are any), modulo 16384.
///
/// ```
/// use quorumlock_testkit::cluster::key_slot;
///
/// assert_eq!(key_slot("foo"), 12182);
/// assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
/// ```
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    crc16(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed: its hash tag, if it has a non-empty one, else all of it.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &rest[..len],
        _ => key,
    }
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// Which `CLUSTER FAILOVER` [`RedisCluster::failover`] sends to the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailoverMode {
    /// `CLUSTER FAILOVER`: the replica catches up with its primary, which stops taking writes
    /// meanwhile, then takes over; no acknowledged write is lost. Needs the primary up.
    Graceful,
    /// `CLUSTER FAILOVER FORCE`: the replica takes over without asking its primary, with the
    /// votes of a majority of primaries.
    Force,
    /// `CLUSTER FAILOVER TAKEOVER`: the replica takes over on its own, without any vote.
    Takeover,
}

/// Which node lost its shard and which took it over, after a failover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Promotion {
    /// The index of the primary that was replaced.
    pub old_primary: usize,
    /// The index of the replica that is primary now.
    pub new_primary: usize,
}

/// A slot halfway through its move from one primary to another: see
/// [`RedisCluster::begin_migration`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMigration {
    slot: u16,
    source: usize,
    target: usize,
    moved: Vec<Vec<u8>>,
}

impl SlotMigration {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The index of the primary the slot is moving from, where it is `MIGRATING`.
    pub fn source(&self) -> usize {
        self.source
    }

    /// The index of the primary the slot is moving to, where it is `IMPORTING`.
    pub fn target(&self) -> usize {
        self.target
    }

    /// The keys moved to the target so far: the source answers `ASK` for them.
    pub fn moved_keys(&self) -> &[Vec<u8>] {
        &self.moved
    }

    /// Whether `key` has been moved to the target.
    pub fn is_moved(&self, key: impl AsRef<[u8]>) -> bool {
        self.moved.iter().any(|moved| moved == key.as_ref())
    }
}

/// Configures and starts a [`RedisCluster`].
///
/// The defaults are three primaries with one replica each, a `cluster-node-timeout` of
/// [`DEFAULT_NODE_TIMEOUT`], and servers from [`RedisServerBuilder::new`] (so the binary named by
/// [`REDIS_SERVER_ENV`](crate::REDIS_SERVER_ENV), or `redis-server` from `PATH`). Setters never
/// fail; everything is checked in [`spawn`](Self::spawn).
///
/// ```no_run
/// use std::time::Duration;
///
/// use quorumlock_testkit::{RedisClusterBuilder, RedisServerBuilder};
///
/// let cluster = RedisClusterBuilder::new()
///     .primaries(5)
///     .replicas_per_primary(2)
///     .node_timeout(Duration::from_secs(1))
///     .server(RedisServerBuilder::new().binary("/opt/valkey/bin/valkey-server"))
///     .spawn()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    primaries: usize,
    replicas_per_primary: usize,
    node_timeout: Duration,
    server: RedisServerBuilder,
    cli: Option<PathBuf>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RedisClusterBuilder {
    /// A builder with the defaults described on [`RedisClusterBuilder`].
    pub fn new() -> Self {
        Self {
            primaries: DEFAULT_PRIMARIES,
            replicas_per_primary: DEFAULT_REPLICAS_PER_PRIMARY,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            server: RedisServerBuilder::new(),
            cli: None,
        }
    }

    /// How many primaries share the slots; at least three ([`DEFAULT_PRIMARIES`] by default).
    pub fn primaries(mut self, n: usize) -> Self {
        self.primaries = n;
        self
    }

    /// How many replicas each primary gets ([`DEFAULT_REPLICAS_PER_PRIMARY`] by default). A shard
    /// without a replica cannot fail over.
    pub fn replicas_per_primary(mut self, n: usize) -> Self {
        self.replicas_per_primary = n;
        self
    }

    /// The `cluster-node-timeout` ([`DEFAULT_NODE_TIMEOUT`] by default), rounded down to whole
    /// milliseconds: how long a node may be unreachable before it is suspected, which bounds how
    /// fast a dead primary is replaced.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The builder every node is started from (binary, persistence, extra arguments). The
    /// cluster's own arguments (`--cluster-enabled yes`, its config file, node timeout and bus
    /// port, and `--repl-diskless-sync-delay 0`) are appended to it.
    pub fn server(mut self, builder: RedisServerBuilder) -> Self {
        self.server = builder;
        self
    }

    /// Runs this `redis-cli` to create the cluster, instead of the one named by
    /// [`REDIS_CLI_ENV`], found beside the server binary, or on `PATH` (`redis-cli`, then
    /// `valkey-cli`).
    pub fn cli(mut self, path: impl Into<PathBuf>) -> Self {
        self.cli = Some(path.into());
        self
    }

    /// Starts the nodes, creates the cluster with `redis-cli --cluster create` and waits until it
    /// has settled: `cluster_state:ok` on every node, every node agreeing on the owner of every
    /// slot and on every node's role, and every replica's link up.
    ///
    /// The nodes are then ordered by shard: nodes `0..primaries` are the primaries in slot order
    /// (node 0 serves slot 0), followed by the replicas of the first shard, of the second, and so
    /// on.
    ///
    /// # Errors
    ///
    /// * [`io::ErrorKind::InvalidInput`] for fewer than three primaries.
    /// * [`io::ErrorKind::NotFound`] if `redis-server` or `redis-cli` cannot be found.
    /// * [`io::ErrorKind::TimedOut`] if the cluster does not settle within about half a minute;
    ///   the message says what it was still waiting for.
    /// * As [`RedisServerBuilder::spawn`], and if `redis-cli` fails (with its output).
    pub fn spawn(self) -> io::Result<RedisCluster> {
        if self.primaries < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a Redis Cluster needs at least 3 primaries (redis-cli --cluster create \
                     refuses fewer), not {}",
                    self.primaries
                ),
            ));
        }
        let total = self
            .replicas_per_primary
            .checked_add(1)
            .and_then(|per_shard| per_shard.checked_mul(self.primaries))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too many nodes"))?;
        let node_timeout_ms = self.node_timeout.as_millis().max(1);
        let builder = self
            .server
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg(NODES_CONFIG_FILE)
            .arg("--cluster-node-timeout")
            .arg(node_timeout_ms.to_string())
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        let nodes = thread::scope(|scope| {
            let handles: Vec<_> = (0..total)
                .map(|_| scope.spawn(|| spawn_node(&builder)))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle.join().unwrap_or_else(|_| {
                        Err(io::Error::other(
                            "a thread starting a cluster node panicked",
                        ))
                    })
                })
                .collect::<io::Result<Vec<_>>>()
        })?;
        let mut cluster = RedisCluster {
            nodes,
            ids: Vec::new(),
            node_timeout: self.node_timeout,
        };
        cluster.ids = (0..total)
            .map(|i| cluster.own_id(i))
            .collect::<io::Result<_>>()?;
        let cli = match (self.cli, cluster.nodes.first()) {
            (Some(cli), _) => cli,
            (None, Some(node)) => find_cli(node.binary())?,
            (None, None) => return Err(io::Error::other("no cluster node was started")),
        };
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(cluster.nodes.iter().map(|node| node.addr().to_string()));
        args.extend([
            "--cluster-replicas".to_owned(),
            self.replicas_per_primary.to_string(),
            "--cluster-yes".to_owned(),
        ]);
        run_cli(&cli, &args)?;
        let snapshot = cluster.settle("the new cluster to settle", |_| Ok(()))?;
        cluster.order_by_shard(&snapshot);
        Ok(cluster)
    }
}

/// Starts one node with a cluster bus port of its own, trying another bus port if it is taken.
fn spawn_node(builder: &RedisServerBuilder) -> io::Result<RedisServer> {
    let mut last_error = None;
    for _ in 0..BUS_PORT_ATTEMPTS {
        let bus_port = free_port()?;
        match builder
            .clone()
            .arg("--cluster-port")
            .arg(bus_port.to_string())
            .spawn()
        {
            Ok(node) => return Ok(node),
            Err(error) if error.kind() == io::ErrorKind::AddrInUse => last_error = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("no cluster node could be started")))
}

/// The `redis-cli` to create the cluster with: [`REDIS_CLI_ENV`], else beside `server_binary`,
/// else on `PATH`.
fn find_cli(server_binary: &Path) -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os(REDIS_CLI_ENV).filter(|path| !path.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let beside = server_binary
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = beside.into_iter().chain(std::env::split_paths(&path));
    for dir in dirs {
        for name in CLI_NAMES {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "redis-cli was not found beside {} nor on PATH; it creates the cluster \
             (`redis-cli --cluster create`): install the Debian package `redis-tools` or set \
             {REDIS_CLI_ENV}=/path/to/redis-cli",
            server_binary.display()
        ),
    ))
}

/// Runs `cli args`, with a deadline, and returns what it printed.
fn run_cli(cli: &Path, args: &[String]) -> io::Result<String> {
    let mut output = tempfile::tempfile()?;
    let mut child = Command::new(cli)
        .args(args)
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output.try_clone()?)
        .spawn()
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "cannot run {} ({error}); install the Debian package `redis-tools` or set \
                     {REDIS_CLI_ENV}=/path/to/redis-cli",
                    cli.display()
                ),
            )
        })?;
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            // Not reaped yet, so the PID is still this child's.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(POLL);
    };
    let mut printed = Vec::new();
    output.seek(SeekFrom::Start(0))?;
    output.read_to_end(&mut printed)?;
    let printed = String::from_utf8_lossy(&printed).into_owned();
    let command = format!("{} {}", cli.display(), args.join(" "));
    match status {
        Some(status) if status.success() => Ok(printed),
        Some(status) => Err(io::Error::other(format!(
            "`{command}` failed ({status}); it printed:\n{printed}"
        ))),
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("`{command}` did not finish within {CLI_TIMEOUT:?}; it printed:\n{printed}"),
        )),
    }
}

/// A Redis Cluster of `redis-server` child processes on loopback ports, each in its own
/// temporary directory with its own `nodes.conf`.
///
/// Nodes are named by their index in [`nodes`](Self::nodes) (also `cluster[i]`), which is fixed
/// for the cluster's life; the roles move. Dropping the cluster kills every node; dropping it
/// during a panic first prints the last lines of every node's log.
///
/// # Examples
///
/// ```no_run
/// use quorumlock_testkit::{key_slot, RedisCluster};
///
/// let mut cluster = RedisCluster::spawn(3, 1)?;
/// let url = cluster.url(); // "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,..."
///
/// let slot = key_slot("jobs");
/// let primary = cluster.primary_for_slot(slot)?;
/// let promotion = cluster.kill_primary(slot)?; // its replica takes over
/// assert_eq!(promotion.old_primary, primary);
/// cluster.restart(primary)?; // and the old primary comes back as a replica
///
/// let target = cluster.primaries()?.into_iter().find(|&p| p != promotion.new_primary).unwrap();
/// cluster.migrate_slot(slot, target)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The cluster node ID of each node, by index; kept in `nodes.conf` across restarts.
    ids: Vec<String>,
    node_timeout: Duration,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .field("ids", &self.ids)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

impl RedisCluster {
    /// Starts a cluster of `primaries` primaries with `replicas_per_primary` replicas each, with
    /// the other defaults of [`RedisClusterBuilder`].
    ///
    /// # Errors
    ///
    /// As [`RedisClusterBuilder::spawn`].
    pub fn spawn(primaries: usize, replicas_per_primary: usize) -> io::Result<Self> {
        RedisClusterBuilder::new()
            .primaries(primaries)
            .replicas_per_primary(replicas_per_primary)
            .spawn()
    }

    /// A builder for a cluster with non-default settings.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::new()
    }

    /// Every node, primaries and replicas, by index.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never true for a spawned cluster).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The cluster node ID of node `index` (40 hex digits), or `None` if there is no such node.
    pub fn node_id(&self, index: usize) -> Option<&str> {
        self.ids.get(index).map(String::as_str)
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`, listing every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// `redis://127.0.0.1:PORT` of one primary: the first running node that serves slots as
    /// far as the cluster says, else the first running node, else node 0.
    pub fn seed_url(&self) -> String {
        let seed = self
            .primaries()
            .ok()
            .and_then(|primaries| primaries.first().copied())
            .or_else(|| self.nodes.iter().position(RedisServer::is_running))
            .unwrap_or(0);
        self.nodes
            .get(seed)
            .map_or_else(String::new, RedisServer::url)
    }

    /// The indexes of the primaries that serve slots, ordered by the first slot each serves.
    ///
    /// Like every query here, this is the view of the first running node that answers; once a
    /// verb has returned, every node shares it.
    ///
    /// # Errors
    ///
    /// If no node answers `CLUSTER NODES`.
    pub fn primaries(&self) -> io::Result<Vec<usize>> {
        let (_, entries) = self.view()?;
        let mut primaries: Vec<(u16, usize)> = entries
            .iter()
            .filter(|entry| entry.primary)
            .filter_map(|entry| {
                let first = entry.slots.iter().map(|&(start, _)| start).min()?;
                Some((first, self.index_of(&entry.id)?))
            })
            .collect();
        primaries.sort_unstable();
        Ok(primaries.into_iter().map(|(_, index)| index).collect())
    }

    /// The index of the primary that serves `slot`.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `slot` is not below [`SLOTS`]; an error if no node
    /// answers or the node that answers knows no owner of the slot.
    pub fn primary_for_slot(&self, slot: u16) -> io::Result<usize> {
        check_slot(slot)?;
        let (reporter, entries) = self.view()?;
        entries
            .iter()
            .find(|entry| entry.primary && entry.serves(slot))
            .and_then(|entry| self.index_of(&entry.id))
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{} knows no primary serving slot {slot}",
                    self.name(reporter)
                ))
            })
    }

    /// The index of the primary that serves `key`: [`primary_for_slot`](Self::primary_for_slot)
    /// of [`key_slot`]`(key)`.
    ///
    /// # Errors
    ///
    /// As [`primary_for_slot`](Self::primary_for_slot).
    pub fn primary_for_key(&self, key: impl AsRef<[u8]>) -> io::Result<usize> {
        self.primary_for_slot(key_slot(key))
    }

    /// The indexes of the replicas of node `primary` (running or not), in index order.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no node `primary`; an error if no node
    /// answers.
    pub fn replicas_of(&self, primary: usize) -> io::Result<Vec<usize>> {
        self.check_index(primary)?;
        let (_, entries) = self.view()?;
        let mut replicas: Vec<usize> = entries
            .iter()
            .filter(|entry| entry.primary_id.as_deref() == Some(self.ids[primary].as_str()))
            .filter_map(|entry| self.index_of(&entry.id))
            .collect();
        replicas.sort_unstable();
        Ok(replicas)
    }

    /// Kills (`SIGKILL`) the primary that serves `slot`, then waits until the cluster has
    /// promoted one of its replicas by itself (automatic failover) and has settled again.
    ///
    /// The killed node keeps its directory and `nodes.conf`: [`restart`](Self::restart) brings
    /// it back, and it rejoins as a replica of the node that replaced it (empty, unless the
    /// server builder turned persistence on).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a slot not below [`SLOTS`]; an error if the shard has
    /// no running replica to promote; [`io::ErrorKind::TimedOut`] if the cluster does not settle
    /// before or after the kill, saying what it was waiting for.
    pub fn kill_primary(&mut self, slot: u16) -> io::Result<Promotion> {
        check_slot(slot)?;
        let before = self.settle("the cluster to settle before the kill", |_| Ok(()))?;
        let old = before.owner(slot)?;
        if before.replicas_of(old).is_empty() {
            return Err(io::Error::other(format!(
                "{} serves slot {slot} but has no running replica to promote",
                self.name(old)
            )));
        }
        self.nodes[old].kill()?;
        let what = format!(
            "a replica of {} to take over slot {slot} and the cluster to settle",
            self.name(old)
        );
        let new = self.settle(&what, |snapshot| {
            let owner = snapshot.owner(slot).map_err(|error| error.to_string())?;
            if owner == old {
                Err(format!("slot {slot} is still served by node {old}"))
            } else {
                Ok(())
            }
        })?;
        Ok(Promotion {
            old_primary: old,
            new_primary: new.owner(slot)?,
        })
    }

    /// Starts node `index` again (killing it first if it runs), on the same port and from the
    /// same directory and `nodes.conf`, and waits until it has rejoined the cluster and the
    /// cluster has settled: a primary that was replaced comes back as a replica of its
    /// replacement, and its link to it is up.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no node `index`; as
    /// [`RedisServer::restart`]; [`io::ErrorKind::TimedOut`] if the cluster does not settle.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        self.check_index(index)?;
        self.nodes[index].restart()?;
        let what = format!("{} to rejoin the cluster", self.name(index));
        self.settle(&what, |_| Ok(()))?;
        // A node that died again is skipped by the checks: say so rather than return.
        if self.nodes[index].is_running() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{} exited after its restart; its log:\n{}",
                self.name(index),
                tail(&self.nodes[index].log(), LOG_TAIL_LINES)
            )))
        }
    }

    /// Sends `CLUSTER FAILOVER` (as `mode` says) to a running replica of the primary that serves
    /// `slot`, and waits until that replica serves the slot, the old primary (if it runs) has
    /// become its replica, and the cluster has settled.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a slot not below [`SLOTS`]; an error if the shard has
    /// no running replica or the replica refuses the command; [`io::ErrorKind::TimedOut`] if the
    /// failover does not happen or the cluster does not settle.
    pub fn failover(&mut self, slot: u16, mode: FailoverMode) -> io::Result<Promotion> {
        check_slot(slot)?;
        let before = self.settle("the cluster to settle before the failover", |_| Ok(()))?;
        let old = before.owner(slot)?;
        let Some(&candidate) = before.replicas_of(old).first() else {
            return Err(io::Error::other(format!(
                "{} serves slot {slot} but has no running replica to fail over to",
                self.name(old)
            )));
        };
        let mut failover = redis::cmd("CLUSTER");
        failover.arg("FAILOVER");
        match mode {
            FailoverMode::Graceful => {}
            FailoverMode::Force => {
                failover.arg("FORCE");
            }
            FailoverMode::Takeover => {
                failover.arg("TAKEOVER");
            }
        }
        self.run::<()>(candidate, &failover)?;
        let mut sent = Instant::now();
        let what = format!(
            "{} to take over slot {slot} from node {old} ({mode:?} failover)",
            self.name(candidate)
        );
        self.settle(&what, |snapshot| {
            let owner = snapshot.owner(slot).map_err(|error| error.to_string())?;
            if owner == candidate {
                return Ok(());
            }
            if mode == FailoverMode::Graceful && sent.elapsed() >= MANUAL_FAILOVER_RETRY {
                // Redis abandons a manual failover that did not complete within five seconds.
                self.run::<()>(candidate, &failover)
                    .map_err(|error| error.to_string())?;
                sent = Instant::now();
            }
            Err(format!("slot {slot} is still served by node {owner}"))
        })?;
        Ok(Promotion {
            old_primary: old,
            new_primary: candidate,
        })
    }

    /// Moves `slot` with all its keys to primary `to`:
    /// [`begin_migration`](Self::begin_migration) then
    /// [`finish_migration`](Self::finish_migration).
    ///
    /// # Errors
    ///
    /// As those two.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> io::Result<()> {
        let migration = self.begin_migration(slot, to)?;
        self.finish_migration(migration)
    }

    /// Starts moving `slot` to primary `to` as `redis-cli --cluster reshard` does, and stops
    /// halfway: `CLUSTER SETSLOT slot IMPORTING` on the target, `CLUSTER SETSLOT slot MIGRATING`
    /// on the owner, then the first half (rounded up) of the slot's keys, as
    /// `CLUSTER GETKEYSINSLOT` lists them, moved with `MIGRATE`.
    ///
    /// Until [`finish_migration`](Self::finish_migration), the owner answers `-ASK` for the moved
    /// keys and for keys that do not exist yet, and the target serves them only after `ASKING`;
    /// [`migrate_key`](Self::migrate_key) moves one more key.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a slot not below [`SLOTS`], if `to` is not a running
    /// primary, or already serves the slot; an error if the slot is already being moved or a
    /// command fails; [`io::ErrorKind::TimedOut`] if the cluster has not settled beforehand.
    pub fn begin_migration(&self, slot: u16, to: usize) -> io::Result<SlotMigration> {
        check_slot(slot)?;
        self.check_index(to)?;
        let before = self.settle("the cluster to settle before the migration", |_| Ok(()))?;
        let source = before.owner(slot)?;
        if source == to {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slot {slot} is already served by {}", self.name(to)),
            ));
        }
        if before.roles.get(to) != Some(&Some(Role::Primary)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a running primary", self.name(to)),
            ));
        }
        if let Some(&(node, _)) = before.open.iter().find(|(_, open)| open.slot == slot) {
            return Err(io::Error::other(format!(
                "slot {slot} is already being migrated ({} has it open)",
                self.name(node)
            )));
        }
        self.run::<()>(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&self.ids[source]),
        )?;
        self.run::<()>(
            source,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&self.ids[to]),
        )?;
        let count: usize = self.run(
            source,
            redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
        )?;
        let keys = self.keys_in_slot(source, slot, count.div_ceil(2))?;
        self.migrate(source, to, &keys)?;
        Ok(SlotMigration {
            slot,
            source,
            target: to,
            moved: keys,
        })
    }

    /// Moves one more key of a migration in progress to its target, and returns whether it
    /// existed on the source (`MIGRATE` said `OK` rather than `NOKEY`).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `key` is not in the migrating slot; an error if
    /// `MIGRATE` fails (for example because the target already holds the key).
    pub fn migrate_key(
        &self,
        migration: &mut SlotMigration,
        key: impl AsRef<[u8]>,
    ) -> io::Result<bool> {
        let key = key.as_ref();
        if key_slot(key) != migration.slot {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "key {:?} is in slot {}, not in the migrating slot {}",
                    String::from_utf8_lossy(key),
                    key_slot(key),
                    migration.slot
                ),
            ));
        }
        let moved = self.migrate(migration.source, migration.target, &[key.to_vec()])?;
        if moved {
            migration.moved.push(key.to_vec());
        }
        Ok(moved)
    }

    /// Completes a migration: moves the slot's remaining keys in batches with `MIGRATE`, then
    /// `CLUSTER SETSLOT slot NODE target` on the target, the source and every other primary, and
    /// waits until every node agrees that the target serves the slot and no node has it open.
    ///
    /// # Errors
    ///
    /// An error if a command fails; [`io::ErrorKind::TimedOut`] if the cluster does not settle.
    pub fn finish_migration(&self, migration: SlotMigration) -> io::Result<()> {
        let SlotMigration {
            slot,
            source,
            target,
            ..
        } = migration;
        loop {
            let keys = self.keys_in_slot(source, slot, MIGRATE_BATCH)?;
            if keys.is_empty() {
                break;
            }
            self.migrate(source, target, &keys)?;
        }
        let (_, entries) = self.view()?;
        let others = entries
            .iter()
            .filter(|entry| entry.primary)
            .filter_map(|entry| self.index_of(&entry.id))
            .filter(|&node| node != source && node != target && self.nodes[node].is_running());
        for node in [target, source].into_iter().chain(others) {
            self.run::<()>(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[target]),
            )?;
        }
        let what = format!(
            "every node to agree that {} serves slot {slot}",
            self.name(target)
        );
        self.settle(&what, |snapshot| {
            let owner = snapshot.owner(slot).map_err(|error| error.to_string())?;
            if owner != target {
                return Err(format!("slot {slot} is still served by node {owner}"));
            }
            match snapshot.open.iter().find(|(_, open)| open.slot == slot) {
                Some((node, _)) => Err(format!("node {node} still has slot {slot} open")),
                None => Ok(()),
            }
        })?;
        Ok(())
    }

    /// Waits until the cluster has settled: every running node says `cluster_state:ok`, knows
    /// every node and agrees with the others on the owner of every slot and on every running
    /// node's role; every slot is served by a running primary; no running node is flagged as
    /// failing; every running replica's link to its primary is up. The verbs do this themselves;
    /// this is for a test that killed, paused or restarted nodes directly.
    ///
    /// A paused node never answers, so the wait times out while one is paused.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::TimedOut`] if the cluster has not settled within about half a minute,
    /// saying what it was still waiting for.
    pub fn wait_settled(&self) -> io::Result<()> {
        self.settle("the cluster to settle", |_| Ok(())).map(drop)
    }

    /// Every node's whole log, each headed by its address and node ID.
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| format!("==== {} ====\n{}", self.name(i), self.nodes[i].log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Polls [`snapshot`](Self::snapshot) until the cluster has settled and `also` accepts it.
    fn settle(
        &self,
        what: &str,
        mut also: impl FnMut(&Snapshot) -> Result<(), String>,
    ) -> io::Result<Snapshot> {
        let timeout = SETTLE_TIMEOUT + self.node_timeout.saturating_mul(4);
        wait_until(what, timeout, || {
            let snapshot = self.snapshot()?;
            also(&snapshot)?;
            Ok(snapshot)
        })
    }

    /// The cluster as every running node sees it, if they all agree and it is healthy; else why
    /// not.
    fn snapshot(&self) -> Result<Snapshot, String> {
        let running: Vec<bool> = self.nodes.iter().map(RedisServer::is_running).collect();
        let mut agreed: Option<(usize, Snapshot)> = None;
        for reporter in (0..self.nodes.len()).filter(|&i| running[i]) {
            let view = self.view_of(reporter, &running)?;
            let Some((first, agreed)) = &mut agreed else {
                agreed = Some((reporter, view));
                continue;
            };
            let slots = 0..agreed.owners.len();
            if let Some(slot) = slots.clone().find(|&s| view.owners[s] != agreed.owners[s]) {
                return Err(format!(
                    "node {first} and node {reporter} disagree on the owner of slot {slot}: \
                     {:?} and {:?}",
                    agreed.owners[slot], view.owners[slot]
                ));
            }
            let nodes = 0..agreed.roles.len();
            if let Some(node) = nodes.clone().find(|&n| view.roles[n] != agreed.roles[n]) {
                return Err(format!(
                    "node {first} and node {reporter} disagree on the role of node {node}: \
                     {:?} and {:?}",
                    agreed.roles[node], view.roles[node]
                ));
            }
            agreed.open.extend(view.open);
        }
        let Some((_, snapshot)) = agreed else {
            return Err("no node is running".to_owned());
        };
        for (slot, owner) in snapshot.owners.iter().enumerate() {
            match *owner {
                None => return Err(format!("slot {slot} is not served by any node")),
                Some(node) if snapshot.roles[node] != Some(Role::Primary) => {
                    return Err(format!(
                        "slot {slot} is served by node {node}, which is down or not a primary"
                    ))
                }
                Some(_) => {}
            }
        }
        for (node, role) in snapshot.roles.iter().enumerate() {
            if let Some(Role::Replica(primary)) = *role {
                self.check_linked(node, primary)?;
            }
        }
        Ok(snapshot)
    }

    /// The cluster as node `reporter` sees it, if it says `cluster_state:ok`, knows every node
    /// as a member and flags none of the running ones as failing; else why not. `open` holds the
    /// slots the reporter itself has open.
    fn view_of(&self, reporter: usize, running: &[bool]) -> Result<Snapshot, String> {
        let name = self.name(reporter);
        let info: String = self
            .run(reporter, redis::cmd("CLUSTER").arg("INFO"))
            .map_err(|error| error.to_string())?;
        let state = info_field(&info, "cluster_state").unwrap_or("(missing)");
        if state != "ok" {
            return Err(format!("{name} says cluster_state:{state}"));
        }
        let entries = self.entries(reporter).map_err(|error| error.to_string())?;
        let mut by_index: Vec<Option<&Entry>> = vec![None; self.nodes.len()];
        for entry in &entries {
            let Some(index) = self.index_of(&entry.id) else {
                return Err(format!(
                    "{name} knows a node {} that is not one of ours (a handshake?)",
                    entry.id
                ));
            };
            if entry.joining {
                return Err(format!("{name} is still shaking hands with node {index}"));
            }
            if entry.failing && running[index] {
                return Err(format!("{name} flags node {index} as failing"));
            }
            by_index[index] = Some(entry);
        }
        let mut view = Snapshot {
            owners: vec![None; usize::from(SLOTS)],
            roles: vec![None; self.nodes.len()],
            open: Vec::new(),
        };
        for (index, entry) in by_index.iter().enumerate() {
            let Some(entry) = entry else {
                return Err(format!("{name} does not know node {index} yet"));
            };
            if entry.myself {
                view.open
                    .extend(entry.open.iter().map(|&open| (reporter, open)));
            }
            if entry.primary {
                for &(start, end) in &entry.slots {
                    for slot in start..=end.min(SLOTS - 1) {
                        view.owners[usize::from(slot)] = Some(index);
                    }
                }
            }
            if !running[index] {
                continue;
            }
            view.roles[index] = Some(if entry.primary {
                Role::Primary
            } else {
                let primary = entry.primary_id.as_deref().unwrap_or("-");
                let primary = self
                    .index_of(primary)
                    .ok_or_else(|| format!("{name} says node {index} replicates {primary}"))?;
                Role::Replica(primary)
            });
        }
        Ok(view)
    }

    /// Whether node `node` replicates node `primary` with the link up; else what it says.
    fn check_linked(&self, node: usize, primary: usize) -> Result<(), String> {
        let info: String = self
            .run(node, redis::cmd("INFO").arg("replication"))
            .map_err(|error| error.to_string())?;
        let port = self.nodes[primary].port().to_string();
        let master_port = info_field(&info, "master_port").unwrap_or("(none)");
        let link = info_field(&info, "master_link_status").unwrap_or("(none)");
        if master_port == port && link == "up" {
            Ok(())
        } else {
            Err(format!(
                "node {node}, replica of node {primary}, has master_port:{master_port} \
                 master_link_status:{link}"
            ))
        }
    }

    /// `CLUSTER NODES` of the first running node that answers, with that node's index.
    fn view(&self) -> io::Result<(usize, Vec<Entry>)> {
        let mut last_error = None;
        for index in (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running()) {
            match self.entries(index) {
                Ok(entries) => return Ok((index, entries)),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no cluster node is running")))
    }

    /// `CLUSTER NODES` of node `index`, parsed.
    fn entries(&self, index: usize) -> io::Result<Vec<Entry>> {
        let text: String = self.run(index, redis::cmd("CLUSTER").arg("NODES"))?;
        parse_nodes(&text).map_err(|error| {
            io::Error::other(format!(
                "{}: unexpected CLUSTER NODES ({error}):\n{text}",
                self.name(index)
            ))
        })
    }

    /// The node ID node `index` gives itself.
    fn own_id(&self, index: usize) -> io::Result<String> {
        self.entries(index)?
            .into_iter()
            .find(|entry| entry.myself)
            .map(|entry| entry.id)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{}: CLUSTER NODES has no `myself` line",
                    self.name(index)
                ))
            })
    }

    /// Up to `count` keys of `slot` on node `index`.
    fn keys_in_slot(&self, index: usize, slot: u16, count: usize) -> io::Result<Vec<Vec<u8>>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        self.run(
            index,
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(count),
        )
    }

    /// Moves `keys` from node `source` to node `target` with one `MIGRATE`; whether any of them
    /// existed (`OK` rather than `NOKEY`).
    fn migrate(&self, source: usize, target: usize, keys: &[Vec<u8>]) -> io::Result<bool> {
        if keys.is_empty() {
            return Ok(false);
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.nodes[target].port())
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT.as_millis().to_string())
            .arg("KEYS")
            .arg(keys);
        let reply: String = query(
            &self.nodes[source],
            &migrate,
            MIGRATE_TIMEOUT + COMMAND_TIMEOUT,
        )
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{}: MIGRATE of {} key(s) to node {target}: {error}",
                    self.name(source),
                    keys.len()
                ),
            )
        })?;
        Ok(reply == "OK")
    }

    /// Runs `cmd` on node `index`; errors name the node and the command.
    fn run<T: redis::FromRedisValue>(&self, index: usize, cmd: &redis::Cmd) -> io::Result<T> {
        query(&self.nodes[index], cmd, COMMAND_TIMEOUT).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("{}: {}: {error}", self.name(index), command_name(cmd)),
            )
        })
    }

    /// Reorders the nodes: primaries by their first slot, then the replicas shard by shard.
    fn order_by_shard(&mut self, snapshot: &Snapshot) {
        let mut primaries: Vec<(usize, usize)> = Vec::new();
        for (slot, owner) in snapshot.owners.iter().enumerate() {
            if let Some(owner) = *owner {
                if !primaries.iter().any(|&(_, node)| node == owner) {
                    primaries.push((slot, owner));
                }
            }
        }
        let shard_of = |node: usize| -> (usize, usize) {
            let primary = match snapshot.roles.get(node) {
                Some(Some(Role::Replica(primary))) => *primary,
                _ => node,
            };
            let shard = primaries
                .iter()
                .position(|&(_, p)| p == primary)
                .unwrap_or(usize::MAX);
            (usize::from(primary != node), shard)
        };
        let mut order: Vec<(usize, usize, usize)> = (0..self.nodes.len())
            .map(|node| {
                let (is_replica, shard) = shard_of(node);
                (is_replica, shard, node)
            })
            .collect();
        order.sort_unstable();
        let mut old: Vec<Option<(RedisServer, String)>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .zip(std::mem::take(&mut self.ids))
            .map(Some)
            .collect();
        for (_, _, node) in order {
            if let Some((server, id)) = old.get_mut(node).and_then(Option::take) {
                self.nodes.push(server);
                self.ids.push(id);
            }
        }
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|known| known == id)
    }

    fn check_index(&self, index: usize) -> io::Result<()> {
        if index < self.nodes.len() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "there is no node {index}: the cluster has {} nodes",
                    self.nodes.len()
                ),
            ))
        }
    }

    /// `node 3 (127.0.0.1:PORT)`, for messages.
    fn name(&self, index: usize) -> String {
        match self.nodes.get(index) {
            Some(node) => format!("node {index} ({})", node.addr()),
            None => format!("node {index}"),
        }
    }
}

impl Index<usize> for RedisCluster {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }
}

impl IndexMut<usize> for RedisCluster {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if thread::panicking() {
            for index in 0..self.nodes.len() {
                eprintln!(
                    "==== cluster {} {} (last {LOG_TAIL_LINES} log lines) ====\n{}",
                    self.name(index),
                    self.ids.get(index).map_or("", String::as_str),
                    tail(&self.nodes[index].log(), LOG_TAIL_LINES)
                );
            }
        }
    }
}

/// A node's role, as the cluster sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Primary,
    /// A replica of the node with this index.
    Replica(usize),
}

/// A slot a node has open for a migration (only its own `CLUSTER NODES` line shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpenSlot {
    slot: u16,
}

/// The settled cluster, as every running node agrees it is.
#[derive(Debug)]
struct Snapshot {
    /// The index of the primary serving each slot.
    owners: Vec<Option<usize>>,
    /// The role of each running node, by index; `None` for nodes that are down.
    roles: Vec<Option<Role>>,
    /// The slots each node has open (`MIGRATING` or `IMPORTING`), by the node's index.
    open: Vec<(usize, OpenSlot)>,
}

impl Snapshot {
    fn owner(&self, slot: u16) -> io::Result<usize> {
        self.owners
            .get(usize::from(slot))
            .copied()
            .flatten()
            .ok_or_else(|| io::Error::other(format!("slot {slot} is not served by any node")))
    }

    /// The running replicas of node `primary`, in index order.
    fn replicas_of(&self, primary: usize) -> Vec<usize> {
        (0..self.roles.len())
            .filter(|&node| self.roles[node] == Some(Role::Replica(primary)))
            .collect()
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: String,
    myself: bool,
    primary: bool,
    /// Flagged `fail` or `fail?`.
    failing: bool,
    /// Flagged `handshake` or `noaddr`: not yet a member.
    joining: bool,
    primary_id: Option<String>,
    slots: Vec<(u16, u16)>,
    open: Vec<OpenSlot>,
}

impl Entry {
    fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(start, end)| (start..=end).contains(&slot))
    }
}

/// Parses `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...`.
fn parse_nodes(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [id, _addr, flags, primary, _ping, _pong, _epoch, _link, slots @ ..] =
                fields.as_slice()
            else {
                return Err(format!("short line {line:?}"));
            };
            let flags: Vec<&str> = flags.split(',').collect();
            let has = |names: &[&str]| flags.iter().any(|flag| names.contains(flag));
            let mut entry = Entry {
                id: (*id).to_owned(),
                myself: has(&["myself"]),
                primary: has(&["master", "primary"]),
                failing: has(&["fail", "fail?"]),
                joining: has(&["handshake", "noaddr"]),
                primary_id: Some((*primary).to_owned()).filter(|id| id != "-"),
                slots: Vec::new(),
                open: Vec::new(),
            };
            for slot in slots {
                if let Some(open) = slot.strip_prefix('[') {
                    // `[slot->-id]` (migrating) or `[slot-<-id]` (importing).
                    let number = open
                        .split(['-', ']'])
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("bad open slot {slot:?}"))?;
                    entry.open.push(OpenSlot { slot: number });
                    continue;
                }
                let range = match slot.split_once('-') {
                    Some((start, end)) => (start.parse(), end.parse()),
                    None => (slot.parse(), slot.parse()),
                };
                match range {
                    (Ok(start), Ok(end)) if start <= end && end < SLOTS => {
                        entry.slots.push((start, end));
                    }
                    _ => return Err(format!("bad slot range {slot:?}")),
                }
            }
            Ok(entry)
        })
        .collect()
}

/// The value of `field:` in an `INFO`-style text.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

fn check_slot(slot: u16) -> io::Result<()> {
    if slot < SLOTS {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "slot {slot} does not exist: slots go from 0 to {}",
                SLOTS - 1
            ),
        ))
    }
}

/// The first word of `cmd` (or two, for a container command like `CLUSTER NODES`), for messages.
fn command_name(cmd: &redis::Cmd) -> String {
    let words: Vec<String> = cmd
        .args_iter()
        .take(2)
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        })
        .collect();
    match words.as_slice() {
        [first, second]
            if ["CLUSTER", "SENTINEL", "CONFIG"].contains(&first.to_uppercase().as_str()) =>
        {
            format!("{first} {second}")
        }
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// Runs `cmd` on `server` over a connection of its own, with `timeout` for reads and writes.
pub(crate) fn query<T: redis::FromRedisValue>(
    server: &RedisServer,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> io::Result<T> {
    let to_io = |error: redis::RedisError| {
        let kind = if error.is_timeout() {
            io::ErrorKind::TimedOut
        } else if error.is_connection_refusal() {
            io::ErrorKind::ConnectionRefused
        } else {
            io::ErrorKind::Other
        };
        io::Error::new(kind, error.to_string())
    };
    let client = redis::Client::open(server.url()).map_err(to_io)?;
    let mut connection = client
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(to_io)?;
    connection.set_read_timeout(Some(timeout)).map_err(to_io)?;
    connection.set_write_timeout(Some(timeout)).map_err(to_io)?;
    cmd.query(&mut connection).map_err(to_io)
}

/// Calls `check` every [`POLL`] until it gives a value, for at most `timeout`; then fails with
/// [`io::ErrorKind::TimedOut`], naming `what` was waited for and the last reason `check` gave.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> io::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("waited {timeout:?} for {what}; last seen: {last}"),
                ))
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn key_slot_matches_what_redis_answers() {
        // `CLUSTER KEYSLOT` of redis-server 7.0 and valkey-server 9.
        for (key, slot) in [
            ("foo", 12182),
            ("bar", 5061),
            ("hello", 866),
            ("", 0),
            ("{user1000}.following", 3443),
            ("user1000", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("quorumlock:jobs", 9626),
        ] {
            assert_eq!(key_slot(key), slot, "{key:?}");
        }
    }

    #[test]
    fn hash_tags_follow_the_redis_rules() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"nobraces"), b"nobraces");
    }

    #[test]
    fn cluster_nodes_lines_are_parsed() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail? - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
6ec23923021cf3ffec47632106199cb7f496ce01 :0@0 handshake - 0 0 0 connected
";
        let entries = parse_nodes(text).unwrap();
        assert_eq!(entries.len(), 5);
        assert!(!entries[0].primary);
        assert_eq!(
            entries[0].primary_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(entries[1].slots, [(5461, 10922)]);
        assert!(entries[2].failing && entries[2].primary);
        assert!(entries[3].myself && entries[3].serves(0) && !entries[3].serves(5461));
        assert_eq!(
            entries[3].open,
            [OpenSlot { slot: 5461 }, OpenSlot { slot: 93 }]
        );
        assert!(entries[4].joining);
        assert!(parse_nodes("abc 127.0.0.1:1@2 master").is_err());
        assert!(parse_nodes("a b master - 0 0 1 connected 10-5").is_err());
    }

    #[test]
    fn info_fields_are_found() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots"), None);
    }

    #[test]
    fn fewer_than_three_primaries_are_refused_before_anything_starts() {
        let error = RedisCluster::spawn(2, 1).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }
}

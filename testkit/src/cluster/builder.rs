//! Starting a cluster: [`RedisClusterBuilder`] spawns the nodes, each with a cluster bus port of
//! its own, runs `redis-cli --cluster create` on them, waits until the cluster has settled, and
//! orders the nodes by shard.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::command::POLL;
use super::view::{Role, Snapshot};
use super::RedisCluster;
use crate::server::{free_port, RedisServer, RedisServerBuilder};

/// Environment variable naming the `redis-cli` binary used to create clusters, instead of the one
/// beside the server binary or on `PATH`.
pub const REDIS_CLI_ENV: &str = "QUORUMLOCK_REDIS_CLI";

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

/// How long `redis-cli --cluster create` may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// How many cluster bus ports a node start tries when the one it picked is taken.
const BUS_PORT_ATTEMPTS: usize = 5;

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
    ///
    /// With [`tls`](RedisServerBuilder::tls), the cluster runs on TLS only, the way managed
    /// cluster-mode services with encryption in transit do: each node's plain port is off
    /// (`--port 0`), and the cluster bus and replication run over TLS (`--tls-cluster yes`,
    /// `--tls-replication yes`); `redis-cli --cluster create` connects with the CA and the
    /// server's certificate, and [`RedisCluster::url`] reads `rediss+cluster://`.
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
        // TLS: only TLS, for clients, the cluster bus and replication alike.
        let tls = self
            .server
            .tls_settings()
            .map(|tls| tls.clone().plain_port(false));
        let server = match &tls {
            Some(tls) => self
                .server
                .tls(tls.clone())
                .arg("--tls-cluster")
                .arg("yes")
                .arg("--tls-replication")
                .arg("yes"),
            None => self.server,
        };
        let builder = server
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
        if let Some(tls) = &tls {
            let path = |p: &Path| p.display().to_string();
            args.extend([
                "--tls".to_owned(),
                "--cacert".to_owned(),
                path(tls.ca_cert_file()),
                "--cert".to_owned(),
                path(tls.cert_file()),
                "--key".to_owned(),
                path(tls.key_file()),
            ]);
        }
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

impl RedisCluster {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_than_three_primaries_are_refused_before_anything_starts() {
        let error = RedisCluster::spawn(2, 1).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }
}

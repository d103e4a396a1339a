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

// Layout, by concept: `builder` starts the nodes and creates the cluster, `slot` computes hash
// slots, `view` reads `CLUSTER NODES` into the snapshot every verb waits on, `migration` moves
// slots, and `command` sends one command to one node. This file holds the cluster itself, its
// queries and its failover verbs.
mod builder;
mod command;
mod migration;
mod slot;
mod view;

use std::fmt;
use std::io;
use std::ops::{Index, IndexMut};
use std::thread;
use std::time::{Duration, Instant};

use crate::log_tail::tail;
use crate::server::{RedisServer, LOG_TAIL_LINES};

pub use builder::{
    RedisClusterBuilder, DEFAULT_NODE_TIMEOUT, DEFAULT_PRIMARIES, DEFAULT_REPLICAS_PER_PRIMARY,
    REDIS_CLI_ENV,
};
pub(crate) use command::{query, wait_until};
pub use migration::SlotMigration;
pub use slot::{key_slot, SLOTS};

use slot::check_slot;

/// After this long without the promotion, a graceful `CLUSTER FAILOVER` is sent again (Redis
/// gives up on a manual failover after five seconds).
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(6);

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

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`, listing every node as a seed;
    /// `rediss+cluster://` for a cluster on TLS (see [`RedisClusterBuilder::server`]).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let scheme = if self.is_tls() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{}", seeds.join(","))
    }

    /// Whether the cluster runs on TLS (see [`RedisClusterBuilder::server`]).
    pub fn is_tls(&self) -> bool {
        self.nodes.first().is_some_and(|node| node.tls().is_some())
    }

    /// [`RedisServer::url`] of one primary (`redis://127.0.0.1:PORT`, or on TLS its Unix
    /// socket): the first running node that serves slots as far as the cluster says, else the
    /// first running node, else node 0.
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

    /// Cuts node `replica` off from its primary, node `primary`: freezes it (`SIGSTOP`) and kills
    /// its replication connection on the primary (`CLIENT KILL TYPE replica`), so that nothing
    /// the primary writes from now on reaches it. (A replica frozen alone finds the stream
    /// waiting in its socket when thawed, and applies it.) [`RedisServer::resume`] thaws it.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if there is no such node; as [`RedisServer::pause`]; an
    /// error if the primary does not answer, or had no replication connection to kill.
    pub fn cut_replication(&self, primary: usize, replica: usize) -> io::Result<()> {
        self.check_index(primary)?;
        self.check_index(replica)?;
        self.nodes[replica].pause()?;
        let mut kill = redis::cmd("CLIENT");
        kill.arg("KILL").arg("TYPE").arg("replica");
        let killed: i64 = query(&self.nodes[primary], &kill, Duration::from_secs(2))?;
        if killed == 0 {
            return Err(io::Error::other(format!(
                "{} had no replication connection to cut",
                self.name(primary)
            )));
        }
        Ok(())
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

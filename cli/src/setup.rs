//! The check run before a lock is touched: every voter is a distinct server of the kind it is
//! listed as, can give the durability asked for, and a quorum of them answers — decided as soon
//! as the outcome is known, like an acquire: a hung minority costs no more than the quorum took.
//!
//! Each voter is asked over a plain connection (`INFO`, and the replicas' `INFO` for
//! `--durable aof,replicas=N`) while the library connects to all of them (its own checks: the key
//! layout, a Redis Cluster node, durability). Once a quorum has answered, the stragglers get as
//! long again as the quorum took (at least [`STRAGGLER_GRACE`]); those that have not answered by
//! then are left out of this command's plain requests (holder descriptions, listings) and named
//! in a warning. When too few answer the plain way, the library's own verdict decides (it may
//! reach voters this check cannot, and it names why each one failed).
//!
//! Refused at once, whatever the others say (exit 2): a server listed twice (the same `run_id`,
//! or nodes of one Redis Cluster), a replica or a Redis Cluster node listed as `redis://`, and
//! masters that cannot give `--durable` for want of an append-only file (theirs or their
//! replicas') or of `WAITAOF`. Too few replicas connected is an outage, not a setup: such a
//! master counts as not answering.

use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use quorumlock::{Durability, Redlock};

use crate::exit::Usage;
use crate::masters::{self, Conn, Master};

/// The node timeout of `status`, `list` and `unlock`: they only read, on connections the check
/// has just opened, so a master that takes longer for one reply is shown as not answering
/// rather than holding up the whole look (the library's look waits for every master).
pub(crate) const LOOK_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether `e` says that fewer than a quorum of masters answered (exit 69).
pub(crate) fn is_unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<quorumlock::Error>()
            .is_some_and(quorumlock::Error::is_unavailable)
    })
}

/// The least time the voters that have not answered get once a quorum has.
pub(crate) const STRAGGLER_GRACE: Duration = Duration::from_millis(50);

/// The voters as the check found them, in configuration order.
#[derive(Debug, Clone)]
pub(crate) struct Voters {
    masters: Vec<Master>,
    answered: Vec<bool>,
}

impl Voters {
    /// `masters`, unchecked: every one counts as answering.
    pub(crate) fn unchecked(masters: Vec<Master>) -> Voters {
        let answered = vec![true; masters.len()];
        Voters { masters, answered }
    }

    /// Every voter, answering or not, in configuration order.
    pub(crate) fn all(&self) -> &[Master] {
        &self.masters
    }

    /// The voters that answered the check: plain requests go to them only, so that a hung
    /// master costs them nothing.
    pub(crate) fn answering(&self) -> Vec<Master> {
        self.masters
            .iter()
            .zip(&self.answered)
            .filter(|(_, answered)| **answered)
            .map(|(m, _)| m.clone())
            .collect()
    }
}

/// What one voter said.
enum Probe {
    /// It answers and can be used; what identifies its server(s).
    Usable(Vec<String>),
    /// It cannot be used now (no reply, an error, too few replicas connected).
    Unusable(String),
    /// It is listed the wrong way, or cannot give what is asked whatever happens: a usage error.
    Wrong(String),
}

/// Checks the voters of `rl` (their plain connections are `masters`, in the same order) before
/// any lock is taken. Warns about setups that work but are weaker than they look, and names the
/// voters left out.
///
/// # Errors
///
/// [`Usage`] (exit 2) for a server listed twice, a voter listed the wrong way, or masters that
/// cannot give `durable`; the library's errors: [`quorumlock::Error::Unavailable`] when fewer
/// than a quorum answer, [`quorumlock::Error::Config`].
pub(crate) async fn check(
    rl: &Redlock,
    masters: Vec<Master>,
    durable: Option<Durability>,
) -> anyhow::Result<Voters> {
    if rl.node_count() == 1 {
        tracing::warn!(
            "a single master: the lock is only as safe as that one server and stops with it; \
             use 3 or 5 independent masters"
        );
    }
    let (n, quorum) = (rl.node_count(), rl.quorum());
    let started = Instant::now();
    // The library's own connect: its checks, and the connections the lock will use.
    let library = {
        let rl = rl.clone();
        AbortOnDrop(tokio::spawn(async move { rl.connect().await }))
    };
    let mut probes: FuturesUnordered<_> = masters
        .iter()
        .enumerate()
        .map(|(i, master)| async move { (i, probe(master, durable).await, started.elapsed()) })
        .collect();
    let mut answered = vec![false; n];
    let mut unusable: Vec<(usize, String)> = Vec::new();
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut grace_until: Option<tokio::time::Instant> = None;
    loop {
        let next = async {
            match grace_until {
                Some(until) => tokio::time::timeout_at(until, probes.next())
                    .await
                    .ok()
                    .flatten(),
                None => probes.next().await,
            }
        };
        let Some((i, outcome, took)) = next.await else {
            break;
        };
        match outcome {
            Probe::Wrong(why) => {
                return Err(Usage(format!("{}: {why}", masters[i].node())).into());
            }
            Probe::Unusable(why) => unusable.push((i, why)),
            Probe::Usable(identities) => {
                for identity in identities {
                    if let Some((_, first)) = seen.iter().find(|(id, _)| *id == identity) {
                        let (first, second) = (masters[*first].node(), masters[i].node());
                        let why = match identity.starts_with("cluster") {
                            true => "the same Redis Cluster",
                            false => "same run_id",
                        };
                        return Err(Usage(format!(
                            "nodes {first} and {second} are the same Redis server ({why}); \
                             each master must be listed once"
                        ))
                        .into());
                    }
                    seen.push((identity, i));
                }
                answered[i] = true;
                let usable = answered.iter().filter(|a| **a).count();
                if usable == quorum && grace_until.is_none() {
                    let grace = took.max(STRAGGLER_GRACE);
                    grace_until = Some(tokio::time::Instant::now() + grace);
                }
            }
        }
        if unusable.len() > n - quorum {
            break;
        }
    }
    drop(probes);
    let usable = answered.iter().filter(|a| **a).count();
    let pending: Vec<usize> = (0..n)
        .filter(|i| !answered[*i] && !unusable.iter().any(|(u, _)| u == i))
        .collect();
    let voters = Voters { masters, answered };
    if usable < quorum || pending.is_empty() {
        // Too few answered the plain way: the library decides, naming why each one failed. Or
        // every voter answered or failed: its connect is about done too, and its verdict (with
        // its own checks, and its warnings) stands.
        return match library.join().await {
            Some(Err(e)) => Err(e.into()),
            _ => Ok(voters),
        };
    }
    // A quorum answered, and the rest are not waited for.
    for (i, why) in &unusable {
        tracing::warn!("{}: not used: {why}", voters.masters[*i].node());
    }
    for i in &pending {
        tracing::warn!(
            "{}: no answer within {} ms; going on without it ({usable} of {n} answered, \
             {quorum} needed)",
            voters.masters[*i].node(),
            started.elapsed().as_millis()
        );
    }
    if library.0.is_finished() {
        // Its verdict is in: a refusal of its own stands.
        if let Some(Err(e)) = library.join().await {
            return Err(e.into());
        }
    }
    Ok(voters)
}

/// A task aborted when dropped: the library's connect, no longer awaited once the check has
/// decided without it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// Its result; `None` if it panicked or was cancelled.
    async fn join(mut self) -> Option<T> {
        (&mut self.0).await.ok()
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Asks one voter what it is.
async fn probe(master: &Master, durable: Option<Durability>) -> Probe {
    let mut conn = match master.connect().await {
        Ok(conn) => conn,
        Err(e) => return Probe::Unusable(e),
    };
    if let Conn::Cluster(_) = conn {
        // One voter of many servers: its nodes' ids tell one cluster listed twice.
        let nodes: Result<String, String> =
            masters::request(&mut conn, redis::cmd("CLUSTER").arg("NODES")).await;
        return match nodes {
            Ok(nodes) => Probe::Usable(
                nodes
                    .lines()
                    .filter_map(|line| line.split_whitespace().next())
                    .map(|id| format!("cluster node {id}"))
                    .collect(),
            ),
            Err(e) => Probe::Unusable(e),
        };
    }
    // `INFO` with no section: server, replication, persistence and cluster, on every version.
    let info: String = match masters::request(&mut conn, &redis::cmd("INFO")).await {
        Ok(info) => info,
        Err(e) => return Probe::Unusable(e),
    };
    let info = Info(&info);
    if info.field("cluster_enabled") == Some("1") {
        return Probe::Wrong(
            "a Redis Cluster node: cluster mode is on (cluster_enabled:1); list the cluster as \
             one voter, redis+cluster://host:port (a resource's keys live in one slot of it), \
             not one of its nodes as redis://"
                .to_owned(),
        );
    }
    if master.is_direct() && info.field("role") == Some("slave") {
        let of = match (info.field("master_host"), info.field("master_port")) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            _ => "<its master>".to_owned(),
        };
        return Probe::Wrong(format!(
            "a read-only replica (of {of}), not a master: a voter must be a master; list its \
             master, redis://{of}, or, when Sentinels manage it, the Sentinel group: \
             redis+sentinel://<sentinel>:26379/<master-name>"
        ));
    }
    if let Some(durability) = durable {
        if let Some(refusal) = durability_refusal(master, &info, durability).await {
            return refusal;
        }
    }
    match info.field("run_id") {
        Some(id) => Probe::Usable(vec![format!("run_id {id}")]),
        None => Probe::Unusable("INFO without run_id: not a Redis server".to_owned()),
    }
}

/// Why a master whose `INFO` is `info` cannot give `durability`: a usage error when it never
/// will as set up (no `WAITAOF`, no append-only file, replicas without one), unusable when
/// replicas are missing now. `None` when it can (or it cannot be told).
async fn durability_refusal(
    master: &Master,
    info: &Info<'_>,
    durability: Durability,
) -> Option<Probe> {
    let asked = crate::durable::spell(durability);
    let connected: u32 = info
        .field("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let replicas = match durability {
        Durability::Replicas(n) => n,
        Durability::Aof { local, replicas } => {
            let version = info.field("redis_version").unwrap_or("0");
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            if (major, minor) < (7, 2) {
                return Some(Probe::Wrong(format!(
                    "cannot give --durable {asked}: it has no WAITAOF (Redis {version}; Redis \
                     7.2 or later, or Valkey, has it)"
                )));
            }
            if local && info.field("aof_enabled") != Some("1") {
                return Some(Probe::Wrong(format!(
                    "cannot give --durable {asked}: it runs without an append-only file \
                     (appendonly no); turn it on (CONFIG SET appendonly yes, and in its \
                     config file), or leave aof out of --durable"
                )));
            }
            replicas
        }
        _ => return None,
    };
    if connected < replicas {
        return Some(Probe::Unusable(format!(
            "cannot confirm grants: {connected} replicas connected, {replicas} needed \
             (--durable {asked})"
        )));
    }
    if !matches!(durability, Durability::Aof { .. }) || replicas == 0 {
        return None;
    }
    // `aof,replicas=N`: N replicas must fsync to an AOF of their own. Ask each one; those that
    // cannot be asked (an address only the master can reach, an ACL) are given the benefit of
    // the doubt, and the grants' own confirmation decides for them.
    let mut with_aof = 0;
    let mut unknown = 0;
    let mut without = Vec::new();
    for (host, port) in info.replicas() {
        let aof = async {
            let mut conn = master.connect_to(&host, port).await?;
            let info: String =
                masters::request(&mut conn, redis::cmd("INFO").arg("persistence")).await?;
            Ok::<_, String>(Info(&info).field("aof_enabled") == Some("1"))
        };
        match aof.await {
            Ok(true) => with_aof += 1,
            Ok(false) => without.push(format!("{host}:{port}")),
            Err(e) => {
                tracing::debug!(replica = %format!("{host}:{port}"), error = %e, "replica's AOF not checked");
                unknown += 1;
            }
        }
    }
    if with_aof + unknown >= replicas {
        return None;
    }
    Some(Probe::Wrong(format!(
        "cannot give --durable {asked}: {with_aof} of its replicas run with an append-only \
         file, {replicas} needed; {} run without one (appendonly no): turn it on there, or ask \
         for --durable aof (this master's own AOF) or --durable replicas={replicas} (their \
         memory)",
        without.join(", ")
    )))
}

/// A server's `INFO` reply.
struct Info<'a>(&'a str);

impl Info<'_> {
    /// The value of `name:value`.
    fn field(&self, name: &str) -> Option<&str> {
        self.0.lines().find_map(|line| {
            line.trim()
                .strip_prefix(name)?
                .strip_prefix(':')
                .map(str::trim)
        })
    }

    /// The replicas a master lists (`slaveN:ip=...,port=...,state=online,...`), online ones only.
    fn replicas(&self) -> Vec<(String, u16)> {
        self.0
            .lines()
            .filter(|line| {
                line.starts_with("slave") && line.as_bytes().get(5).is_some_and(u8::is_ascii_digit)
            })
            .filter_map(|line| {
                let (_, fields) = line.trim().split_once(':')?;
                let field = |name: &str| {
                    fields
                        .split(',')
                        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                };
                if field("state").is_some_and(|s| s != "online") {
                    return None;
                }
                Some((field("ip")?.to_owned(), field("port")?.parse().ok()?))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Info;

    #[test]
    fn info_fields_and_online_replicas_are_read() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=6380,state=online,offset=1,lag=0\r\n\
                    slave1:ip=10.0.0.2,port=6381,state=wait_bgsave,offset=0,lag=0\r\n\
                    slave_read_only:1\r\nrun_id:abc\r\n";
        let info = Info(info);
        assert_eq!(info.field("role"), Some("master"));
        assert_eq!(info.field("run_id"), Some("abc"));
        assert_eq!(info.field("connected_slaves"), Some("2"));
        assert_eq!(info.field("aof_enabled"), None);
        assert_eq!(info.replicas(), [("127.0.0.1".to_owned(), 6380)]);
    }
}

//! What one voter is and how to reach it: a standalone master (`redis://host:port`), a Redis
//! Cluster (`redis+cluster://host:port[,host:port…]`, one vote for the whole cluster), or the
//! master a Sentinel group names (`redis+sentinel://host:port[,host:port…]/<master-name>`,
//! resolved again on every new connection, so that it follows a failover).
//!
//! Each kind opens the connection requests run on ([`Conn`]) and the connection a client's
//! wake-ups are heard on ([`Subscriber`]): sharded pub/sub (`SSUBSCRIBE`, Redis 7.0 or later),
//! whose channels live in the slot of the resource they announce.

use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Client, ConnectionInfo, ErrorKind, IntoConnectionInfo, ProtocolVersion,
    PushInfo, RedisConnectionInfo, RedisError, RedisResult,
};
use tokio::sync::mpsc;

use super::conn::Conn;
use super::subscription::Subscriber;

/// The default port of a Sentinel.
const SENTINEL_PORT: u16 = 26379;

/// One voter.
pub(crate) enum Target {
    /// A standalone master.
    Master {
        /// For requests (RESP2).
        client: Client,
        /// For wake-ups: the same server, spoken to in RESP3 (sharded subscriptions share a
        /// multiplexed connection only in RESP3).
        pushes: Client,
    },
    /// A Redis Cluster: its seed nodes. The cluster's topology is read from them and followed
    /// as it changes.
    Cluster {
        seeds: Vec<ConnectionInfo>,
        client: ClusterClient,
    },
    /// The master a Sentinel group monitors under `master`.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        /// How to log in to the master (user, password, database).
        login: RedisConnectionInfo,
    },
}

impl Target {
    /// A voter from a URL: `redis://`, `rediss://` and `unix://` name a standalone master
    /// (`certificates` configure a `rediss://` one, with the `tls` feature); `redis+cluster://`
    /// a cluster; `redis+sentinel://` (or `redis-sentinel://`) a Sentinel-managed master.
    ///
    /// # Errors
    ///
    /// Why the URL names no voter, in words.
    pub(crate) fn parse(url: &str, connect_timeout: Duration) -> Result<Target, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        match scheme.to_ascii_lowercase().as_str() {
            "redis+cluster" => cluster(rest, connect_timeout),
            "redis+sentinel" | "redis-sentinel" => sentinel(rest),
            "rediss+cluster" | "rediss+sentinel" | "rediss-sentinel" => Err(format!(
                "TLS to a cluster or a Sentinel group ({scheme}://) is not supported; list a \
                 cluster as redis+cluster:// or a Sentinel group as redis+sentinel:// over a \
                 private network, or standalone masters as rediss://"
            )),
            _ => {
                let info = url.into_connection_info().map_err(|e| e.to_string())?;
                Target::master(info)
            }
        }
    }

    /// A standalone master.
    pub(crate) fn master(info: ConnectionInfo) -> Result<Target, String> {
        let pushes = resp3(&info);
        Ok(Target::Master {
            client: Client::open(info).map_err(|e| e.to_string())?,
            pushes: Client::open(pushes).map_err(|e| e.to_string())?,
        })
    }

    /// A standalone master over TLS (`rediss://`), with these certificates.
    #[cfg(feature = "tls")]
    pub(crate) fn master_tls(
        info: ConnectionInfo,
        certificates: redis::TlsCertificates,
    ) -> Result<Target, String> {
        let pushes = resp3(&info);
        Ok(Target::Master {
            client: Client::build_with_tls(info, certificates.clone())
                .map_err(|e| e.to_string())?,
            pushes: Client::build_with_tls(pushes, certificates).map_err(|e| e.to_string())?,
        })
    }

    /// How the voter is named in errors, logs and metrics, never with credentials:
    /// `host:port` for a master; the URL's own spelling, without user and password, for a
    /// cluster or a Sentinel group.
    pub(crate) fn id(&self) -> String {
        match self {
            Target::Master { client, .. } => client.get_connection_info().addr().to_string(),
            Target::Cluster { seeds, .. } => format!("redis+cluster://{}", addrs(seeds)),
            Target::Sentinel {
                sentinels, master, ..
            } => format!("redis+sentinel://{}/{master}", addrs(sentinels)),
        }
    }

    /// What two listings of the same voter share: two voters with a name in common are one.
    /// A master: its address and database; a cluster: each seed's address; a Sentinel group:
    /// the master's name at each Sentinel.
    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            Target::Master { client, .. } => {
                let info = client.get_connection_info();
                let db = info.redis_settings().db();
                vec![format!("{} db {db}", info.addr()).to_ascii_lowercase()]
            }
            Target::Cluster { seeds, .. } => seeds
                .iter()
                .map(|seed| format!("{} db 0", seed.addr()).to_ascii_lowercase())
                .collect(),
            Target::Sentinel {
                sentinels, master, ..
            } => sentinels
                .iter()
                .map(|s| format!("{}/{master}", s.addr()).to_ascii_lowercase())
                .collect(),
        }
    }

    /// Whether this voter is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster { .. })
    }

    /// Opens a connection for requests. A Sentinel group is asked for its master first.
    ///
    /// # Errors
    ///
    /// The client library's, or the Sentinels'.
    pub(crate) async fn connect(&self, config: &AsyncConnectionConfig) -> RedisResult<Conn> {
        match self {
            Target::Master { client, .. } => client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(Conn::Master),
            Target::Cluster { client, .. } => client
                .get_async_connection()
                .await
                .map(Conn::Cluster)
                .map_err(not_a_cluster),
            Target::Sentinel { .. } => self
                .sentinel_master(ProtocolVersion::RESP2)
                .await?
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(Conn::Master),
        }
    }

    /// Opens a connection for sharded subscriptions (RESP3), whose messages arrive on the
    /// returned [`Subscriber`].
    ///
    /// # Errors
    ///
    /// The client library's, or the Sentinels'.
    pub(crate) async fn subscriber(&self, connect_timeout: Duration) -> RedisResult<Subscriber> {
        let (sender, pushes) = mpsc::unbounded_channel::<PushInfo>();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None)
            .set_push_sender(sender.clone());
        let conn = match self {
            Target::Master { pushes, .. } => Conn::Master(
                pushes
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            ),
            Target::Cluster { seeds, .. } => Conn::Cluster(
                cluster_client(seeds, connect_timeout)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(sender)
                    .build()?
                    .get_async_connection()
                    .await
                    .map_err(not_a_cluster)?,
            ),
            Target::Sentinel { .. } => Conn::Master(
                self.sentinel_master(ProtocolVersion::RESP3)
                    .await?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            ),
        };
        Ok(Subscriber::new(conn, pushes))
    }

    /// A client for the master the Sentinels name now (each call asks them again).
    async fn sentinel_master(&self, protocol: ProtocolVersion) -> RedisResult<Client> {
        let Target::Sentinel {
            sentinels,
            master,
            login,
        } = self
        else {
            return Err(RedisError::from((
                ErrorKind::Client,
                "not a Sentinel group",
            )));
        };
        let mut group = Sentinel::build(sentinels.clone())?;
        let login = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(login.clone().set_protocol(protocol));
        group.async_master_for(master, Some(&login)).await
    }
}

/// The same server and login, spoken to in RESP3.
fn resp3(info: &ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.clone().set_redis_settings(settings)
}

/// A cluster's connections: the crate's own request timeout is off (each request is bounded
/// by the node timeout, as for a master), and a redirection, a topology refresh or a
/// `TRYAGAIN` is retried within that bound. `TRYAGAIN` answers a script during its slot's
/// move (its keys are split between the two nodes for the moment `MIGRATE` takes); the
/// retries, 10 at most, 5 to 50 ms apart, let a request wait a short move out.
fn cluster_client(seeds: &[ConnectionInfo], connect_timeout: Duration) -> ClusterClientBuilder {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .response_timeout(Duration::from_secs(3600))
        .retries(10)
        .min_retry_wait(5)
        .max_retry_wait(50);
    if let Some(seed) = seeds.first() {
        let login = seed.redis_settings();
        if let Some(user) = login.username() {
            builder = builder.username(user);
        }
        if let Some(password) = login.password() {
            builder = builder.password(password);
        }
    }
    builder
}

/// A server that is no cluster node answers the cluster client's topology query with an error
/// that does not say what to do.
fn not_a_cluster(e: RedisError) -> RedisError {
    let text = e.to_string();
    if text.contains("cluster support disabled") || text.contains("cluster mode is not enabled") {
        return RedisError::from((
            ErrorKind::Client,
            "not a Redis Cluster",
            "cluster mode is off on the seed node (cluster_enabled:0): list a standalone master \
             as redis://host:port, not redis+cluster://"
                .to_owned(),
        ));
    }
    e
}

fn cluster(rest: &str, connect_timeout: Duration) -> Result<Target, String> {
    let (login, hosts, path) = split(rest)?;
    if !path.trim_matches('/').is_empty() {
        return Err(format!(
            "a cluster has one database and takes no path ({path:?}): redis+cluster://host:port[,host:port...]"
        ));
    }
    let seeds = hosts
        .iter()
        .map(|host| format!("redis://{login}{host}").into_connection_info())
        .collect::<RedisResult<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let client = cluster_client(&seeds, connect_timeout)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(Target::Cluster { seeds, client })
}

fn sentinel(rest: &str) -> Result<Target, String> {
    let (login, hosts, path) = split(rest)?;
    let mut parts = path.trim_matches('/').split('/');
    let master = parts.next().unwrap_or_default();
    if master.is_empty() {
        return Err(
            "no master name: redis+sentinel://host[:26379][,host...]/<master-name>[/db]".into(),
        );
    }
    let db = match parts.next() {
        None | Some("") => String::new(),
        Some(db) if db.parse::<i64>().is_ok() => format!("/{db}"),
        Some(other) => return Err(format!("{other:?} is no database number")),
    };
    let sentinels = hosts
        .iter()
        .map(|host| {
            let host = if has_port(host) {
                host.to_string()
            } else {
                format!("{host}:{SENTINEL_PORT}")
            };
            format!("redis://{host}").into_connection_info()
        })
        .collect::<RedisResult<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    // The master's login, read the way any redis:// URL is.
    let login = format!("redis://{login}localhost{db}")
        .into_connection_info()
        .map_err(|e| e.to_string())?
        .redis_settings()
        .clone();
    Ok(Target::Sentinel {
        sentinels,
        master: master.to_owned(),
        login,
    })
}

/// Splits `[user:password@]host[:port][,host[:port]...][/path]` into the user-info part (with
/// its `@`, or empty), the hosts, and the path.
fn split(rest: &str) -> Result<(&str, Vec<&str>, &str), String> {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if path.starts_with(['?', '#']) {
        return Err("query parameters are not supported here".into());
    }
    let (login, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err("an empty host in the list (host:port,host:port,...)".into());
    }
    Ok((login, hosts, path))
}

fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        // An IPv6 address without a port has colons too: `[::1]` ends with its bracket.
        Some((_, port)) => !host.ends_with(']') && port.parse::<u16>().is_ok(),
        None => false,
    }
}

fn addrs(infos: &[ConnectionInfo]) -> String {
    infos
        .iter()
        .map(|i| i.addr().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn a_cluster_url_lists_its_seeds_and_is_named_without_its_password() -> Result<(), String> {
        let t = Target::parse("redis+cluster://u:hunter2@127.0.0.1:7001,127.0.0.1:7002", T)?;
        assert!(t.is_cluster());
        assert_eq!(t.id(), "redis+cluster://127.0.0.1:7001,127.0.0.1:7002");
        assert_eq!(t.names().len(), 2);
        assert!(matches!(&t, Target::Cluster { seeds, .. }
            if seeds[0].redis_settings().password() == Some("hunter2")
                && seeds[1].redis_settings().username() == Some("u")));
        Ok(())
    }

    #[test]
    fn a_sentinel_url_names_the_master_and_defaults_the_sentinel_port() -> Result<(), String> {
        let t = Target::parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:5000/mymaster/3", T)?;
        assert_eq!(
            t.id(),
            "redis+sentinel://10.0.0.1:26379,10.0.0.2:5000/mymaster"
        );
        assert!(matches!(&t, Target::Sentinel { login, master, .. }
            if master == "mymaster" && login.password() == Some("pw") && login.db() == 3));
        assert!(Target::parse("redis-sentinel://h/m", T).is_ok());
        Ok(())
    }

    #[test]
    fn malformed_topology_urls_say_what_is_wrong() {
        let why = |url| Target::parse(url, T).err().unwrap_or_default();
        assert!(why("redis+sentinel://h:1").contains("no master name"));
        assert!(why("redis+sentinel://h:1/m/x").contains("no database"));
        assert!(why("redis+cluster://h:1,,h:2").contains("empty host"));
        assert!(why("redis+cluster://h:1/2").contains("takes no path"));
        assert!(why("rediss+cluster://h:1").contains("not supported"));
    }

    #[test]
    fn a_plain_url_is_a_master() -> Result<(), String> {
        let t = Target::parse("redis://:pw@127.0.0.1:6380/2", T)?;
        assert!(!t.is_cluster());
        assert_eq!(t.id(), "127.0.0.1:6380");
        assert_eq!(t.names(), vec!["127.0.0.1:6380 db 2"]);
        Ok(())
    }
}

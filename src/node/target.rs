//! What one voter is and how to reach it: a standalone master (`redis://host:port`), a Redis
//! Cluster (`redis+cluster://host:port[,host:port…]`, one vote for the whole cluster), or the
//! master a Sentinel group names (`redis+sentinel://host:port[,host:port…]/<master-name>`,
//! resolved again on every new connection, so that it follows a failover). With the `tls`
//! feature, `rediss+cluster://` and `rediss+sentinel://` reach every cluster node, or the
//! Sentinels and the masters they name, over TLS, with the certificates of `rediss://`.
//!
//! A Sentinel group's URL may carry the Sentinels' own login, apart from the master's:
//! `?sentinel_username=…&sentinel_password=…` (percent-encoded like the rest of a URL).
//!
//! Each kind opens the connection requests run on ([`Conn`]) and the connection a client's
//! wake-ups are heard on ([`Subscriber`]): sharded pub/sub (`SSUBSCRIBE`, Redis 7.0 or later),
//! whose channels live in the slot of the resource they announce.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    ProtocolVersion, PushInfo, RedisConnectionInfo, RedisError, RedisResult,
};
use tokio::sync::mpsc;

use super::conn::Conn;
use super::subscription::Subscriber;

/// The default port of a Sentinel.
const SENTINEL_PORT: u16 = 26379;

/// The query parameter of a Sentinel URL that names the Sentinels' own user.
pub(crate) const SENTINEL_USERNAME_PARAM: &str = "sentinel_username";

/// The query parameter of a Sentinel URL that carries the Sentinels' own password.
pub(crate) const SENTINEL_PASSWORD_PARAM: &str = "sentinel_password";

/// How a voter is reached beyond its URL: the builder's settings.
#[derive(Clone, Default)]
pub(crate) struct Options {
    /// Bound on opening a connection.
    pub(crate) connect_timeout: Duration,
    /// The Sentinels' own login, for a Sentinel URL that names none.
    pub(crate) sentinel_login: Login,
    /// The certificates of TLS voters (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`).
    #[cfg(feature = "tls")]
    pub(crate) certificates: Option<redis::TlsCertificates>,
}

/// A user name and password, kept out of `Debug`.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Login {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Login {
    fn is_empty(&self) -> bool {
        self.username.is_none() && self.password.is_none()
    }
}

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
        /// How its connections are opened (TLS, timeouts).
        options: Options,
    },
    /// The master a Sentinel group monitors under `master`.
    Sentinel {
        /// The Sentinels' addresses (`TcpTls` ones over TLS).
        sentinels: Vec<ConnectionAddr>,
        master: String,
        /// How to log in to the master (user, password, database).
        login: RedisConnectionInfo,
        /// How to log in to the Sentinels.
        sentinel_login: Login,
        /// How connections are opened (TLS).
        options: Options,
    },
}

impl Target {
    /// A voter from a URL: `redis://`, `rediss://` and `unix://` name a standalone master;
    /// `redis+cluster://` (`rediss+cluster://` over TLS) a cluster; `redis+sentinel://` (or
    /// `redis-sentinel://`; `rediss+sentinel://` or `rediss-sentinel://` over TLS) a
    /// Sentinel-managed master. TLS needs the `tls` feature, and takes its certificates from
    /// `options`.
    ///
    /// # Errors
    ///
    /// Why the URL names no voter, in words, never with a password.
    pub(crate) fn parse(url: &str, options: &Options) -> Result<Target, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let scheme = scheme.to_ascii_lowercase();
        let tls = scheme.starts_with("rediss");
        #[cfg(not(feature = "tls"))]
        if tls {
            return Err(format!(
                "TLS ({scheme}://) needs quorumlock's `tls` feature; list the voter as \
                 {}:// over a private network, or build with `features = [\"tls\"]`",
                scheme.replacen("rediss", "redis", 1)
            ));
        }
        match scheme.as_str() {
            "redis+cluster" | "rediss+cluster" => cluster(rest, tls, options),
            "redis+sentinel" | "redis-sentinel" | "rediss+sentinel" | "rediss-sentinel" => {
                sentinel(rest, tls, options)
            }
            _ => {
                let info = url.into_connection_info().map_err(|e| e.to_string())?;
                #[cfg(feature = "tls")]
                if tls {
                    return Target::master_tls(info, certificates(options));
                }
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
    /// `host:port` for a master; the URL's own spelling, without user, password or query, for a
    /// cluster or a Sentinel group.
    pub(crate) fn id(&self) -> String {
        match self {
            Target::Master { client, .. } => client.get_connection_info().addr().to_string(),
            Target::Cluster { seeds, .. } => {
                let tls = seeds.first().is_some_and(|s| is_tls(s.addr()));
                let scheme = if tls { "rediss" } else { "redis" };
                let seeds: Vec<&ConnectionAddr> = seeds.iter().map(ConnectionInfo::addr).collect();
                format!("{scheme}+cluster://{}", addrs(&seeds))
            }
            Target::Sentinel {
                sentinels, master, ..
            } => {
                let tls = sentinels.first().is_some_and(is_tls);
                let scheme = if tls { "rediss" } else { "redis" };
                let sentinels: Vec<&ConnectionAddr> = sentinels.iter().collect();
                format!("{scheme}+sentinel://{}/{master}", addrs(&sentinels))
            }
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
                .map(|s| format!("{s}/{master}").to_ascii_lowercase())
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
            Target::Master { client, .. } => open_master(client, config).await.map(Conn::Master),
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
            Target::Master { pushes, .. } => Conn::Master(open_master(pushes, &config).await?),
            Target::Cluster { seeds, options, .. } => Conn::Cluster(
                cluster_client(seeds, connect_timeout, options)
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

    /// A client for the master the Sentinels name now (each call asks them again), logged in
    /// to the Sentinels with their own login and to the master with its own; over TLS for a
    /// `rediss+sentinel://` group, to the Sentinels and to the master alike.
    async fn sentinel_master(&self, protocol: ProtocolVersion) -> RedisResult<Client> {
        let Target::Sentinel {
            sentinels,
            master,
            login,
            sentinel_login,
            options,
        } = self
        else {
            return Err(RedisError::from((
                ErrorKind::Client,
                "not a Sentinel group",
            )));
        };
        let mut group =
            SentinelClientBuilder::new(sentinels.clone(), master, SentinelServerType::Master)?
                .set_client_to_redis_protocol(protocol)
                .set_client_to_redis_db(login.db());
        if let Some(user) = login.username() {
            group = group.set_client_to_redis_username(user);
        }
        if let Some(password) = login.password() {
            group = group.set_client_to_redis_password(password);
        }
        if let Some(user) = &sentinel_login.username {
            group = group.set_client_to_sentinel_username(user);
        }
        if let Some(password) = &sentinel_login.password {
            group = group.set_client_to_sentinel_password(password);
        }
        #[cfg(feature = "tls")]
        if sentinels.first().is_some_and(is_tls) {
            let certificates = certificates(options);
            group = group
                .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_certificates(certificates);
        }
        #[cfg(not(feature = "tls"))]
        let _ = options;
        group.build()?.async_get_client().await
    }
}

/// A standalone master's multiplexed connection, with the handshake its URL asks for (`HELLO`
/// or `AUTH`, `SELECT`). Under the `simulation` feature, a plain `redis://host:port` master is
/// reached through the simulation's connector when one is installed on this thread.
async fn open_master(
    client: &Client,
    config: &AsyncConnectionConfig,
) -> RedisResult<MultiplexedConnection> {
    #[cfg(feature = "simulation")]
    if let Some(opening) = simulated(client, config) {
        return opening.await;
    }
    client
        .get_multiplexed_async_connection_with_config(config)
        .await
}

/// The connection to `client`'s master over the stream the simulation's connector opens, with
/// the handshake the client library does on its own streams; `None` when no connector is
/// installed or the master is no plain TCP one (TLS, Unix socket). The caller bounds it by the
/// connect timeout, as it bounds every connection attempt.
#[cfg(feature = "simulation")]
fn simulated(
    client: &Client,
    config: &AsyncConnectionConfig,
) -> Option<impl std::future::Future<Output = RedisResult<MultiplexedConnection>>> {
    let info = client.get_connection_info();
    let ConnectionAddr::Tcp(host, port) = info.addr() else {
        return None;
    };
    let stream = crate::seam::connect(host, *port)?;
    let (settings, config) = (info.redis_settings().clone(), config.clone());
    Some(async move {
        let stream = stream.await?;
        let (conn, driver) =
            MultiplexedConnection::new_with_config(&settings, stream, config).await?;
        // The driver runs until every clone of the connection is gone.
        if !crate::sync::spawn(driver) {
            return Err(RedisError::from((
                ErrorKind::Client,
                "no tokio runtime to drive the connection on",
            )));
        }
        Ok(conn)
    })
}

/// The certificates of TLS voters: those configured, or none (the system's roots, no client
/// certificate).
#[cfg(feature = "tls")]
fn certificates(options: &Options) -> redis::TlsCertificates {
    options
        .certificates
        .clone()
        .unwrap_or(redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        })
}

fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
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
///
/// Over TLS (seeds from `rediss+cluster://`), every node the cluster names is reached over TLS
/// with the configured certificates.
fn cluster_client(
    seeds: &[ConnectionInfo],
    connect_timeout: Duration,
    options: &Options,
) -> ClusterClientBuilder {
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
        #[cfg(feature = "tls")]
        if is_tls(seed.addr()) {
            builder = builder.certs(certificates(options));
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = options;
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

fn cluster(rest: &str, tls: bool, options: &Options) -> Result<Target, String> {
    let (login, hosts, path, query) = split(rest)?;
    if let Some((name, _)) = query.first() {
        return Err(format!(
            "a cluster URL takes no query parameters ({name:?}): redis+cluster://host:port[,host:port...]"
        ));
    }
    if !path.trim_matches('/').is_empty() {
        return Err(format!(
            "a cluster has one database and takes no path ({path:?}): redis+cluster://host:port[,host:port...]"
        ));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let seeds = hosts
        .iter()
        .map(|host| format!("{scheme}://{login}{host}").into_connection_info())
        .collect::<RedisResult<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let client = cluster_client(&seeds, options.connect_timeout, options)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(Target::Cluster {
        seeds,
        client,
        options: options.clone(),
    })
}

fn sentinel(rest: &str, tls: bool, options: &Options) -> Result<Target, String> {
    let (login, hosts, path, query) = split(rest)?;
    let mut sentinel_login = Login::default();
    for (name, value) in query {
        let value = percent_decode(&value).ok_or_else(|| {
            format!("the query parameter {name:?} is not valid percent-encoded UTF-8")
        })?;
        match name.as_str() {
            SENTINEL_USERNAME_PARAM => sentinel_login.username = Some(value),
            SENTINEL_PASSWORD_PARAM => sentinel_login.password = Some(value),
            other => {
                return Err(format!(
                    "unknown query parameter {other:?}: a Sentinel URL takes \
                     {SENTINEL_USERNAME_PARAM} and {SENTINEL_PASSWORD_PARAM}"
                ))
            }
        }
    }
    if sentinel_login.is_empty() {
        sentinel_login = options.sentinel_login.clone();
    }
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
    let scheme = if tls { "rediss" } else { "redis" };
    let sentinels = hosts
        .iter()
        .map(|host| {
            let host = if has_port(host) {
                host.to_string()
            } else {
                format!("{host}:{SENTINEL_PORT}")
            };
            format!("{scheme}://{host}")
                .into_connection_info()
                .map(|info| info.addr().clone())
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
        sentinel_login,
        options: options.clone(),
    })
}

/// What [`split`] returns: the user-info part (with its `@`, or empty), the hosts, the path, and
/// the query parameters (names and raw values).
type Parts<'a> = (&'a str, Vec<&'a str>, &'a str, Vec<(String, String)>);

/// Splits `[user:password@]host[:port][,host[:port]...][/path][?name=value&...]`.
fn split(rest: &str) -> Result<Parts<'_>, String> {
    if rest.contains('#') {
        return Err("a fragment (#...) is not supported here".into());
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (login, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        return Err("an empty host in the list (host:port,host:port,...)".into());
    }
    let query = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (name.to_owned(), value.to_owned())
        })
        .collect();
    Ok((login, hosts, path, query))
}

/// `text` with its `%XX` escapes decoded; `None` when an escape is malformed or the result is
/// not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(b);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        // An IPv6 address without a port has colons too: `[::1]` ends with its bracket.
        Some((_, port)) => !host.ends_with(']') && port.parse::<u16>().is_ok(),
        None => false,
    }
}

fn addrs(addrs: &[&ConnectionAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            connect_timeout: Duration::from_secs(1),
            ..Options::default()
        }
    }

    fn parse(url: &str) -> Result<Target, String> {
        Target::parse(url, &opts())
    }

    #[test]
    fn a_cluster_url_lists_its_seeds_and_is_named_without_its_password() -> Result<(), String> {
        let t = parse("redis+cluster://u:hunter2@127.0.0.1:7001,127.0.0.1:7002")?;
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
        let t = parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:5000/mymaster/3")?;
        assert_eq!(
            t.id(),
            "redis+sentinel://10.0.0.1:26379,10.0.0.2:5000/mymaster"
        );
        assert!(
            matches!(&t, Target::Sentinel { login, master, sentinel_login, .. }
            if master == "mymaster" && login.password() == Some("pw") && login.db() == 3
                && sentinel_login.is_empty())
        );
        assert!(parse("redis-sentinel://h/m").is_ok());
        Ok(())
    }

    #[test]
    fn a_sentinel_url_carries_the_sentinels_own_login_apart_from_the_masters() -> Result<(), String>
    {
        let t = parse(
            "redis+sentinel://app:master-pw@h1,h2/orders/2?sentinel_username=watch&sentinel_password=s%40nt%26pw",
        )?;
        assert_eq!(t.id(), "redis+sentinel://h1:26379,h2:26379/orders");
        assert!(!t.id().contains("pw") && !t.names().concat().contains("pw"));
        let Target::Sentinel {
            login,
            sentinel_login,
            ..
        } = &t
        else {
            return Err("not a Sentinel group".into());
        };
        assert_eq!(login.username(), Some("app"));
        assert_eq!(login.password(), Some("master-pw"));
        assert_eq!(login.db(), 2);
        assert_eq!(sentinel_login.username.as_deref(), Some("watch"));
        assert_eq!(sentinel_login.password.as_deref(), Some("s@nt&pw"));
        assert!(!format!("{sentinel_login:?}").contains("s@nt&pw"));
        // The builder's Sentinel login applies where the URL names none.
        let builder_login = Login {
            username: None,
            password: Some("from-builder".into()),
        };
        let options = Options {
            sentinel_login: builder_login.clone(),
            ..opts()
        };
        let t = Target::parse("redis+sentinel://h/m", &options)?;
        assert!(
            matches!(&t, Target::Sentinel { sentinel_login, .. } if *sentinel_login == builder_login)
        );
        let t = Target::parse("redis+sentinel://h/m?sentinel_password=url", &options)?;
        assert!(matches!(&t, Target::Sentinel { sentinel_login, .. }
            if sentinel_login.password.as_deref() == Some("url")));
        Ok(())
    }

    #[test]
    fn malformed_topology_urls_say_what_is_wrong() {
        let why = |url| parse(url).err().unwrap_or_default();
        assert!(why("redis+sentinel://h:1").contains("no master name"));
        assert!(why("redis+sentinel://h:1/m/x").contains("no database"));
        assert!(why("redis+cluster://h:1,,h:2").contains("empty host"));
        assert!(why("redis+cluster://h:1/2").contains("takes no path"));
        assert!(why("redis+cluster://h:1?x=1").contains("no query parameters"));
        let unknown = why("redis+sentinel://h:1/m?sentinel_pasword=secret");
        assert!(unknown.contains("unknown query parameter"), "{unknown}");
        assert!(!unknown.contains("secret"), "{unknown}");
        assert!(why("redis+sentinel://h:1/m?sentinel_password=%zz").contains("percent-encoded"));
        #[cfg(not(feature = "tls"))]
        assert!(why("rediss+cluster://h:1").contains("`tls` feature"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_cluster_and_sentinel_urls_reach_every_node_over_tls() -> Result<(), String> {
        let t = parse("rediss+cluster://u:pw@127.0.0.1:7001,127.0.0.1:7002")?;
        assert_eq!(t.id(), "rediss+cluster://127.0.0.1:7001,127.0.0.1:7002");
        assert!(matches!(&t, Target::Cluster { seeds, .. }
            if seeds.iter().all(|s| is_tls(s.addr()))));
        let t = parse("rediss+sentinel://h1,h2:5000/m?sentinel_password=x")?;
        assert_eq!(t.id(), "rediss+sentinel://h1:26379,h2:5000/m");
        assert!(matches!(&t, Target::Sentinel { sentinels, .. } if sentinels.iter().all(is_tls)));
        assert!(parse("rediss-sentinel://h/m").is_ok());
        Ok(())
    }

    #[test]
    fn a_plain_url_is_a_master() -> Result<(), String> {
        let t = parse("redis://:pw@127.0.0.1:6380/2")?;
        assert!(!t.is_cluster());
        assert_eq!(t.id(), "127.0.0.1:6380");
        assert_eq!(t.names(), vec!["127.0.0.1:6380 db 2"]);
        Ok(())
    }
}

//! Plain connections to each voter, for what lies beside a lock rather than in it: the holder
//! description, forced unlocks, listing the held keys. The lock itself only ever goes through the
//! library.
//!
//! A voter is reached the way the library reaches it: a standalone master directly
//! (`redis://`, `rediss://`, `unix://`); the master a Sentinel group names, asked of the
//! Sentinels on every connection (`redis+sentinel://`, logged in to the Sentinels with the
//! URL's `sentinel_username` and `sentinel_password`); a Redis Cluster through a cluster
//! connection, which routes each key to the primary of its slot (`redis+cluster://`). Every key
//! of one resource shares one hash tag, so one request per key is enough on a cluster too;
//! only a listing ([`scan`]) asks every primary. Over TLS (`rediss://`, `rediss+cluster://`,
//! `rediss+sentinel://`), every server is reached with the certificates of `--cacert`, `--cert`
//! and `--key`, as the library reaches it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{Client, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisConnectionInfo};
use redis::{RedisFuture, Value};
use tokio::sync::OnceCell;

use crate::tls::TlsArgs;

/// How long one plain request to one master may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// The default port of a Sentinel.
const SENTINEL_PORT: u16 = 26379;

/// One voter, reached without the library. Cheap to clone: clones share the connection, which
/// is opened on first use and kept.
#[derive(Clone)]
pub(crate) struct Master {
    node: String,
    /// How to reach it; why not, when its URL names no voter.
    reach: Arc<Result<Reach, String>>,
    /// The connection, once opened.
    conn: Arc<OnceCell<Conn>>,
}

/// How a voter is reached.
enum Reach {
    /// A standalone master.
    Direct(Client),
    /// A Redis Cluster, by its seed nodes (boxed: a cluster client is large).
    Cluster(Box<ClusterClient>),
    /// The master a Sentinel group monitors under `master`.
    Sentinel {
        sentinels: Vec<ConnectionAddr>,
        master: String,
        /// The master's login.
        login: RedisConnectionInfo,
        /// The Sentinels' own login: a username and a password.
        sentinel_login: (Option<String>, Option<String>),
        /// The certificates, for a group reached over TLS (`rediss+sentinel://`).
        tls: Option<TlsArgs>,
    },
}

impl fmt::Debug for Master {
    // The URL carries credentials: only the voter's name is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Master")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Master {
    /// `node` is the voter as the library names it (`host:port` for a master), `url` how to
    /// reach it (a URL the library accepted), `tls` the certificates of TLS voters.
    pub(crate) fn new(node: &str, url: &str, tls: &TlsArgs) -> Self {
        Master {
            node: node.to_owned(),
            reach: Arc::new(Reach::parse(url, tls)),
            conn: Arc::default(),
        }
    }

    /// The voter as the library names it: `host:port` for a master.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// Opens a connection, bounded by [`REQUEST_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// Why the voter cannot be used, on one line, without credentials.
    pub(crate) async fn connect(&self) -> Result<Conn, String> {
        let reach = self.reach.as_ref().as_ref().map_err(Clone::clone)?;
        let conn = self
            .conn
            .get_or_try_init(|| async {
                match tokio::time::timeout(REQUEST_TIMEOUT, reach.connect()).await {
                    Ok(Ok(conn)) => Ok(conn),
                    Ok(Err(e)) => Err(one_line(&e)),
                    Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
                }
            })
            .await?;
        Ok(conn.clone())
    }

    /// Whether it is listed as a standalone master (`redis://`, `rediss://`, `unix://`), rather
    /// than reached through Sentinels or as a Redis Cluster.
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self.reach.as_ref(), Ok(Reach::Direct(_)))
    }

    /// A connection to another server of this voter's deployment (one of its master's replicas,
    /// at `host:port`), with the same credentials and TLS settings, bounded by
    /// [`REQUEST_TIMEOUT`]. Only for a master listed directly or through Sentinels.
    ///
    /// # Errors
    ///
    /// Why it cannot be reached, on one line.
    pub(crate) async fn connect_to(&self, host: &str, port: u16) -> Result<Conn, String> {
        let info = match self.reach.as_ref() {
            Ok(Reach::Direct(client)) => {
                let mut addr = client.get_connection_info().addr().clone();
                match &mut addr {
                    ConnectionAddr::TcpTls {
                        host: tls_host,
                        port: tls_port,
                        ..
                    } => {
                        host.clone_into(tls_host);
                        *tls_port = port;
                    }
                    _ => addr = ConnectionAddr::Tcp(host.to_owned(), port),
                }
                client.get_connection_info().clone().set_addr(addr)
            }
            Ok(Reach::Sentinel { login, tls, .. }) => {
                let addr = match tls {
                    Some(_) => ConnectionAddr::TcpTls {
                        host: host.to_owned(),
                        port,
                        insecure: false,
                        tls_params: None,
                    },
                    None => ConnectionAddr::Tcp(host.to_owned(), port),
                };
                let info = addr
                    .into_connection_info()
                    .map_err(|e| one_line(&e))?
                    .set_redis_settings(login.clone());
                match tls {
                    #[cfg(feature = "tls")]
                    Some(tls) => Client::build_with_tls(info, tls.certificates())
                        .map_err(|e| one_line(&e))?
                        .get_connection_info()
                        .clone(),
                    _ => info,
                }
            }
            _ => return Err("not a standalone master".to_owned()),
        };
        let client = Client::open(info).map_err(|e| one_line(&e))?;
        match tokio::time::timeout(REQUEST_TIMEOUT, client.get_multiplexed_async_connection()).await
        {
            Ok(Ok(conn)) => Ok(Conn::Master(conn)),
            Ok(Err(e)) => Err(one_line(&e)),
            Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
        }
    }
}

impl Reach {
    fn parse(url: &str, tls: &TlsArgs) -> Result<Reach, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let scheme = scheme.to_ascii_lowercase();
        let secure = scheme.starts_with("rediss");
        let seed_scheme = if secure { "rediss" } else { "redis" };
        match scheme.as_str() {
            "redis+cluster" | "rediss+cluster" => {
                let (login, hosts, _, _) = split(rest)?;
                let seeds = hosts
                    .iter()
                    .map(|host| format!("{seed_scheme}://{login}{host}").into_connection_info())
                    .collect::<redis::RedisResult<Vec<_>>>()
                    .map_err(|e| one_line(&e))?;
                let mut builder = ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(REQUEST_TIMEOUT)
                    .response_timeout(REQUEST_TIMEOUT)
                    .retries(1);
                if let Some(seed) = seeds.first() {
                    let login = seed.redis_settings();
                    if let Some(user) = login.username() {
                        builder = builder.username(user);
                    }
                    if let Some(password) = login.password() {
                        builder = builder.password(password);
                    }
                }
                #[cfg(feature = "tls")]
                if secure {
                    builder = builder.certs(tls.certificates());
                }
                builder
                    .build()
                    .map(|client| Reach::Cluster(Box::new(client)))
                    .map_err(|e| one_line(&e))
            }
            "redis+sentinel" | "redis-sentinel" | "rediss+sentinel" | "rediss-sentinel" => {
                let (login, hosts, path, query) = split(rest)?;
                let mut sentinel_login = (None, None);
                for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let value = percent_decode(value)
                        .ok_or_else(|| format!("{name}: not valid percent-encoded UTF-8"))?;
                    match name {
                        "sentinel_username" => sentinel_login.0 = Some(value),
                        "sentinel_password" => sentinel_login.1 = Some(value),
                        other => return Err(format!("unknown query parameter {other:?}")),
                    }
                }
                let mut parts = path.trim_matches('/').split('/');
                let master = parts.next().unwrap_or_default().to_owned();
                let db = parts.next().filter(|db| !db.is_empty());
                let sentinels = hosts
                    .iter()
                    .map(|host| {
                        let host = match has_port(host) {
                            true => (*host).to_owned(),
                            false => format!("{host}:{SENTINEL_PORT}"),
                        };
                        format!("{seed_scheme}://{host}")
                            .into_connection_info()
                            .map(|info| info.addr().clone())
                    })
                    .collect::<redis::RedisResult<Vec<_>>>()
                    .map_err(|e| one_line(&e))?;
                let db = db.map_or(String::new(), |db| format!("/{db}"));
                let login = format!("redis://{login}localhost{db}")
                    .into_connection_info()
                    .map_err(|e| one_line(&e))?
                    .redis_settings()
                    .clone();
                Ok(Reach::Sentinel {
                    sentinels,
                    master,
                    login,
                    sentinel_login,
                    tls: secure.then(|| tls.clone()),
                })
            }
            #[cfg(feature = "tls")]
            "rediss" => Client::build_with_tls(url, tls.certificates())
                .map(Reach::Direct)
                .map_err(|e| one_line(&e)),
            _ => Client::open(url)
                .map(Reach::Direct)
                .map_err(|e| one_line(&e)),
        }
    }

    async fn connect(&self) -> redis::RedisResult<Conn> {
        match self {
            Reach::Direct(client) => client
                .get_multiplexed_async_connection()
                .await
                .map(Conn::Master),
            Reach::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
            Reach::Sentinel {
                sentinels,
                master,
                login,
                sentinel_login,
                tls,
            } => {
                let mut group = SentinelClientBuilder::new(
                    sentinels.clone(),
                    master,
                    SentinelServerType::Master,
                )?
                .set_client_to_redis_db(login.db());
                if let Some(user) = login.username() {
                    group = group.set_client_to_redis_username(user);
                }
                if let Some(password) = login.password() {
                    group = group.set_client_to_redis_password(password);
                }
                if let Some(user) = &sentinel_login.0 {
                    group = group.set_client_to_sentinel_username(user);
                }
                if let Some(password) = &sentinel_login.1 {
                    group = group.set_client_to_sentinel_password(password);
                }
                #[cfg(feature = "tls")]
                if let Some(tls) = tls {
                    group = group
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_redis_certificates(tls.certificates())
                        .set_client_to_sentinel_certificates(tls.certificates());
                }
                #[cfg(not(feature = "tls"))]
                let _ = tls;
                group
                    .build()?
                    .async_get_client()
                    .await?
                    .get_multiplexed_async_connection()
                    .await
                    .map(Conn::Master)
            }
        }
    }
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

/// Splits `[user:password@]host[:port][,host[:port]...][/path][?query]` into the user-info
/// part (with its `@`, or empty), the hosts, the path and the query (without its `?`): the
/// spelling of `redis+cluster://` and `redis+sentinel://` URLs.
///
/// # Errors
///
/// An empty host in the list.
pub(crate) fn split(rest: &str) -> Result<(&str, Vec<&str>, &str, &str), String> {
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
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
    Ok((login, hosts, path, query))
}

/// Whether `host` (`host[:port]`) names its port.
fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        // An IPv6 address without a port has colons too: `[::1]` ends with its bracket.
        Some((_, port)) => !host.ends_with(']') && port.parse::<u16>().is_ok(),
        None => false,
    }
}

/// A connection to one voter. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A master's own connection (a standalone master, or the one the Sentinels name).
    Master(MultiplexedConnection),
    /// A cluster's connection: each request goes to the primary of its key's slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Master(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Master(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Master(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Runs one request bounded by [`REQUEST_TIMEOUT`].
///
/// # Errors
///
/// The server's error or the timeout, on one line.
pub(crate) async fn request<T: redis::FromRedisValue>(
    conn: &mut Conn,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, cmd.query_async(conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// Runs a script bounded by [`REQUEST_TIMEOUT`].
///
/// # Errors
///
/// As [`request`].
pub(crate) async fn invoke<T: redis::FromRedisValue>(
    conn: &mut Conn,
    call: &redis::ScriptInvocation<'_>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call.invoke_async(conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// Keys scanned per master at most: a listing, not an export.
pub(crate) const MAX_KEYS: usize = 100_000;

/// The keys of type `kind` (`string`, `zset`) on `conn` matching the glob `pattern` (see
/// [`glob_escape`]), at most [`MAX_KEYS`], found with `SCAN` (which a least-privilege ACL must
/// grant: `+scan`). On a cluster, every primary is scanned.
///
/// # Errors
///
/// The first request that failed (a `NOPERM` when the ACL does not grant `SCAN`), on one line.
pub(crate) async fn scan(
    conn: &mut Conn,
    pattern: &str,
    kind: &str,
) -> Result<Vec<String>, String> {
    let scan = |cursor: u64| {
        redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .arg("TYPE")
            .arg(kind)
            .clone()
    };
    let mut keys = Vec::new();
    let Conn::Cluster(cluster) = conn else {
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) = request(conn, &scan(cursor)).await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 || keys.len() >= MAX_KEYS {
                return Ok(keys);
            }
        }
    };
    // Each primary has a cursor of its own: the first page from all of them at once, each
    // reply under its primary's address, then each primary's next pages from it alone.
    let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let first = routed(cluster, scan(0), all).await?;
    let pages: Vec<(Value, Value)> = match first {
        Value::Map(pages) => pages,
        other => return Err(format!("SCAN on every primary: unexpected reply {other:?}")),
    };
    for (address, page) in pages {
        let address: String = redis::from_redis_value(address).map_err(|e| one_line(&e))?;
        let (mut cursor, batch): (u64, Vec<String>) =
            redis::from_redis_value(page).map_err(|e| format!("{address}: {}", one_line(&e)))?;
        keys.extend(batch);
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("a primary at {address:?}"))?;
        while cursor != 0 && keys.len() < MAX_KEYS {
            let there = SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port,
            };
            let page = routed(cluster, scan(cursor), RoutingInfo::SingleNode(there)).await?;
            let (next, batch): (u64, Vec<String>) = redis::from_redis_value(page)
                .map_err(|e| format!("{address}: {}", one_line(&e)))?;
            keys.extend(batch);
            cursor = next;
        }
    }
    Ok(keys)
}

/// `cmd` sent where `routing` says on a cluster, bounded by [`REQUEST_TIMEOUT`].
async fn routed(
    cluster: &mut ClusterConnection,
    cmd: Cmd,
    routing: RoutingInfo,
) -> Result<Value, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, cluster.route_command(cmd, routing)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// `text` with SCAN's glob characters escaped, to match it literally.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The slots of the semaphore `resource` under the key prefix `prefix` that some voter has a
/// key for (its permits are the resources `<resource>:permit:<i>`, `exec --permits`, whose
/// lock keys are `<prefix><resource>:permit:<i>`), in order. Empty when none do, or when no
/// voter lets us look (an ACL without `+scan`).
pub(crate) async fn permit_slots(masters: &[Master], prefix: &str, resource: &str) -> Vec<u32> {
    let start = format!("{prefix}{resource}:permit:");
    let pattern = format!("{}*", glob_escape(&start));
    let found = futures::future::join_all(masters.iter().map(|master| {
        let pattern = &pattern;
        async move {
            let mut conn = master.connect().await?;
            scan(&mut conn, pattern, "string").await
        }
    }))
    .await;
    let mut slots: Vec<u32> = Vec::new();
    for (master, keys) in masters.iter().zip(found) {
        match keys {
            Ok(keys) => slots.extend(
                keys.iter()
                    .filter_map(|k| k.strip_prefix(&start)?.parse::<u32>().ok()),
            ),
            Err(e) => tracing::debug!(node = master.node(), error = %e, "no look for permits"),
        }
    }
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The values of `keys` (strings) on `conn`, bounded by [`REQUEST_TIMEOUT`]: in one round trip
/// on a master; on a cluster, each from the primary of its slot.
///
/// # Errors
///
/// As [`request`].
pub(crate) async fn get_all(
    conn: &mut Conn,
    keys: &[String],
) -> Result<Vec<Option<String>>, String> {
    let values = async {
        match conn {
            Conn::Master(conn) => {
                let mut gets = redis::pipe();
                for key in keys {
                    gets.cmd("GET").arg(key);
                }
                gets.query_async(conn).await
            }
            Conn::Cluster(conn) => {
                let gets = keys.iter().map(|key| {
                    let mut conn = conn.clone();
                    async move { redis::cmd("GET").arg(key).query_async(&mut conn).await }
                });
                futures::future::try_join_all(gets).await
            }
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, values).await {
        Ok(Ok(values)) => Ok(values),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// An error's text on one line, at most 120 characters: a table row stays a row even when a
/// server that is not Redis answers with something long.
pub(crate) fn one_line(e: &dyn std::fmt::Display) -> String {
    const MAX: usize = 120;
    let text = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::{glob_escape, one_line};

    #[test]
    fn glob_characters_match_literally() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("reports:"), "reports:");
    }

    #[test]
    fn one_line_joins_lines_and_cuts_long_text() {
        assert_eq!(one_line(&"a\n  b\r\nc"), "a b c");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 123);
    }
}

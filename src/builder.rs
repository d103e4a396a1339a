//! `RedlockBuilder`: consuming setters with documented defaults, validated once in `build()`.

use std::time::Duration;

use crate::durability::Durability;
use crate::error::{ConfigError, Error};
use crate::inner::{Inner, Settings};
use crate::node::{marker_key, Login, Node, Target, TargetOptions, SENTINEL_PASSWORD_PARAM};
pub use crate::quorum::{DEFAULT_MAX_NODE_TIMEOUT, DEFAULT_NODE_TIMEOUT_DIVISOR};
use crate::redlock::Redlock;
use crate::retry::RetryPolicy;
pub use crate::retry::DEFAULT_ACQUIRE_TIMEOUT;

/// Retries after the first attempt, by default.
pub const DEFAULT_RETRY_COUNT: u32 = 3;
/// Base delay between attempts, by default.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// Spread of the delay between attempts (`delay ± jitter`), by default.
pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(100);
/// Clock-drift allowance as a fraction of the TTL, by default (2 ms are always added).
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// How long a resource's fencing counter lasts after its last grant, by default.
pub const DEFAULT_FENCE_GRACE: Duration = Duration::from_secs(3600);
/// The shortest fencing grace [`RedlockBuilder::fence_grace`] accepts. Tokens stay strictly
/// increasing while no master's clock runs ahead of another's by the grace or more.
pub const MIN_FENCE_GRACE: Duration = Duration::from_secs(1);
/// Bound on opening a connection to a node, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Configures a [`Redlock`]. Setters never fail; [`build`](RedlockBuilder::build) validates.
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// let rl = Redlock::builder([
///     "redis://127.0.0.1:7001",
///     "redis://127.0.0.1:7002",
///     "redis://127.0.0.1:7003",
/// ])
/// .retry_count(5)
/// .retry_delay(Duration::from_millis(100))
/// .node_timeout(Duration::from_millis(50))
/// .key_prefix("locks:")
/// .build()?; // no I/O happens here
/// assert_eq!(rl.quorum(), 2);
/// # Ok::<(), quorumlock::Error>(())
/// ```
#[derive(Clone)]
pub struct RedlockBuilder {
    urls: Vec<String>,
    retry: RetryPolicy,
    drift_factor: f64,
    node_timeout: Option<Duration>,
    connect_timeout: Duration,
    acquire_timeout: Option<Duration>,
    key_prefix: String,
    fencing: bool,
    fence_grace: Duration,
    durability: Durability,
    /// The Sentinels' own login, for Sentinel URLs that name none.
    sentinel_login: Login,
    #[cfg(feature = "tls")]
    tls: TlsSettings,
}

/// Certificates for `rediss://` nodes (PEM), kept out of `Debug`.
#[cfg(feature = "tls")]
#[derive(Clone, Default)]
struct TlsSettings {
    root_certificate: Option<Vec<u8>>,
    client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |set: bool| if set { "<set>" } else { "<system roots>" };
        f.debug_struct("TlsSettings")
            .field("root_certificate", &shown(self.root_certificate.is_some()))
            .field(
                "client_certificate",
                &if self.client_certificate.is_some() {
                    "<set>"
                } else {
                    "<none>"
                },
            )
            .finish()
    }
}

#[cfg(feature = "tls")]
impl TlsSettings {
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client_certificate.as_ref().map(|(cert, key)| {
                redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }
            }),
            root_cert: self.root_certificate.clone(),
        }
    }
}

impl std::fmt::Debug for RedlockBuilder {
    // URLs may carry passwords: show them redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        let mut f = f.debug_struct("RedlockBuilder");
        f.field("urls", &urls)
            .field("retry", &self.retry)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("key_prefix", &self.key_prefix)
            .field("fencing", &self.fencing)
            .field("fence_grace", &self.fence_grace)
            .field("durability", &self.durability)
            .field("sentinel_login", &self.sentinel_login);
        #[cfg(feature = "tls")]
        f.field("tls", &self.tls);
        f.finish()
    }
}

impl RedlockBuilder {
    pub(crate) fn new<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder {
            urls: urls.into_iter().map(|u| u.as_ref().to_owned()).collect(),
            retry: RetryPolicy {
                retries: DEFAULT_RETRY_COUNT,
                delay: DEFAULT_RETRY_DELAY,
                jitter: DEFAULT_RETRY_JITTER,
            },
            drift_factor: DEFAULT_DRIFT_FACTOR,
            node_timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            acquire_timeout: None,
            key_prefix: String::new(),
            fencing: false,
            fence_grace: DEFAULT_FENCE_GRACE,
            durability: Durability::Answered,
            sentinel_login: Login::default(),
            #[cfg(feature = "tls")]
            tls: TlsSettings::default(),
        }
    }

    /// Retries after the first attempt in [`Redlock::acquire`]. Default: [`DEFAULT_RETRY_COUNT`].
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.retry.retries = retries;
        self
    }

    /// Base delay between attempts. Default: [`DEFAULT_RETRY_DELAY`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry.delay = delay;
        self
    }

    /// Each delay is drawn uniformly from `retry_delay ± jitter` (never below zero), so clients
    /// that collided spread out. Default: [`DEFAULT_RETRY_JITTER`].
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry.jitter = jitter;
        self
    }

    /// Clock-drift allowance as a fraction of the TTL, in `[0, 1)`; 2 ms are always added.
    /// Default: [`DEFAULT_DRIFT_FACTOR`].
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Bound on each request to one node, so a hung node cannot stall an operation. Default:
    /// the TTL / [`DEFAULT_NODE_TIMEOUT_DIVISOR`], at most [`DEFAULT_MAX_NODE_TIMEOUT`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Bound on opening a connection to a node. Default: [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long [`Redlock::acquire`] waits for a held resource: no attempt starts after it.
    /// While the resource is held, attempts wait in line and do not use up the retry count;
    /// this bounds the wait. [`Duration::ZERO`] makes one attempt and never waits in line;
    /// [`Duration::MAX`] waits for as long as it takes. Default: [`DEFAULT_ACQUIRE_TIMEOUT`].
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// Prepended to every resource name to form the Redis key. Default: none, the key is the
    /// resource name itself.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Gives every lock a fencing token ([`Lock::fencing_token`](crate::Lock::fencing_token)),
    /// strictly increasing across successive holders of a resource. It keeps a counter per
    /// resource beside its lock key (`{<prefix><resource>}:fence`, see
    /// [`companion_key`](crate::companion_key)), which lasts
    /// [`fence_grace`](Self::fence_grace) after the resource's last grant; a token is one above
    /// the counter and never below the master's clock in whole seconds times a million, so a
    /// token issued after the counter expired is still greater. It needs nodes that keep their data
    /// across restarts (AOF) and clocks that agree (see the README's "Fencing tokens").
    /// Default: off.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// How a master's grant must be confirmed before it counts toward the quorum: by its
    /// replicas ([`Durability::Replicas`], `WAIT`) or its append-only files
    /// ([`Durability::Aof`], `WAITAOF`), in the same round trip as the grant. A grant not
    /// confirmed within the node timeout counts as refused and is rolled back. Extends and
    /// fence increments are confirmed the same way. The validity window is still measured from
    /// the start of the attempt, so the wait shortens it. A master that cannot confirm (too few
    /// replicas connected, no AOF, a server without `WAITAOF`) is refused when the client
    /// connects to it, with an error naming what it lacks. On a Redis Cluster voter the
    /// confirmation goes to the primary that took the write, on the connection that carried it
    /// (each shard's primary counts its own replicas), and every primary is checked at connect:
    /// the error names each shard that cannot confirm, by its primary and its slots. Default:
    /// [`Durability::Answered`] (a grant counts once answered).
    ///
    /// ```
    /// use quorumlock::{Durability, Redlock};
    ///
    /// let rl = Redlock::builder(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
    ///     .durability(Durability::Replicas(1))
    ///     .build()?;
    /// # Ok::<(), quorumlock::Error>(())
    /// ```
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How long a resource's fencing counter lasts after its last grant, less one second (with
    /// [`fencing`](Self::fencing)): a master keeps one counter per resource granted within the
    /// grace and a second, not one per resource ever locked. (The second covers the clock floor
    /// of a token, which counts whole seconds.) Tokens stay strictly increasing as long as no master's
    /// clock runs ahead of another's, or steps back, by this much or more (exactly: a skew
    /// strictly below the grace keeps them increasing). From
    /// [`MIN_FENCE_GRACE`] (1 s); default [`DEFAULT_FENCE_GRACE`] (1 h).
    pub fn fence_grace(mut self, grace: Duration) -> Self {
        self.fence_grace = grace;
        self
    }

    /// Logs in to the Sentinels of `redis+sentinel://` voters as this user (Redis 6 ACLs), apart
    /// from the master's own login in the URL. A voter's URL may name its own instead
    /// (`?sentinel_username=…`), which then takes precedence for that voter. Default: none
    /// (the `default` user, with [`sentinel_password`](Self::sentinel_password) if set).
    pub fn sentinel_username(mut self, username: impl Into<String>) -> Self {
        self.sentinel_login.username = Some(username.into());
        self
    }

    /// Logs in to the Sentinels of `redis+sentinel://` voters with this password (a Sentinel's
    /// `requirepass`), apart from the master's own password in the URL. It never appears in
    /// `Debug` output, errors or logs. A voter's URL may carry its own instead
    /// (`?sentinel_password=…`, percent-encoded), which then takes precedence for that voter,
    /// together with any `sentinel_username` beside it. Default: none.
    ///
    /// ```
    /// use quorumlock::Redlock;
    ///
    /// let rl = Redlock::builder([
    ///     "redis+sentinel://:master-pw@10.0.2.1,10.0.2.2,10.0.2.3/locks",
    ///     "redis+sentinel://:master-pw@10.0.3.1,10.0.3.2,10.0.3.3/locks",
    ///     // This group's Sentinels have a login of their own, in the URL.
    ///     "redis+sentinel://:master-pw@10.0.4.1/locks?sentinel_username=watch&sentinel_password=s3cr3t",
    /// ])
    /// .sentinel_password("sentinel-pw") // the first two groups' Sentinels
    /// .build()?;
    /// assert!(!format!("{rl:?}").contains("sentinel-pw"));
    /// # Ok::<(), quorumlock::Error>(())
    /// ```
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_login.password = Some(password.into());
        self
    }

    /// Trusts only this certificate authority (PEM) for TLS voters (`rediss://`,
    /// `rediss+cluster://`, `rediss+sentinel://`: every cluster node, every Sentinel and every
    /// master a Sentinel names), instead of the system's root certificates. A node whose
    /// certificate it did not sign fails its TLS handshake and counts as a failed node; nothing
    /// is ever sent in plain text instead. Needs the `tls` feature.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_certificate = Some(ca_pem.into());
        self
    }

    /// Presents this client certificate and private key (PEM) to TLS voters that require mutual
    /// TLS (`tls-auth-clients yes`): `rediss://` masters, every node of a `rediss+cluster://`
    /// cluster, the Sentinels of a `rediss+sentinel://` group and the masters they name. Needs
    /// the `tls` feature.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_certificate = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Validates the configuration and creates the client. Does no I/O: connections open on
    /// first use, so nodes that are down at start-up do not stop construction.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when no node is given, a URL does not parse (the error names it, with
    /// any password hidden), a TLS URL is given without the `tls` feature, the same node (or
    /// cluster seed, or Sentinel master) is listed twice, the drift factor is outside `[0, 1)`,
    /// or a timeout is zero.
    pub fn build(self) -> Result<Redlock, Error> {
        if self.urls.is_empty() {
            return Err(ConfigError::NoNodes.into());
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(ConfigError::DriftFactor(self.drift_factor).into());
        }
        if self.node_timeout == Some(Duration::ZERO) || self.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout.into());
        }
        if !self.durability.is_valid() {
            return Err(ConfigError::Durability(self.durability).into());
        }
        if self.fence_grace < MIN_FENCE_GRACE {
            return Err(ConfigError::FenceGrace(self.fence_grace).into());
        }

        let options = self.target_options();
        let mut nodes: Vec<Node> = Vec::with_capacity(self.urls.len());
        let mut seen: Vec<(String, String)> = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let invalid = |reason: String| ConfigError::InvalidUrl {
                url: redact(url),
                reason,
            };
            let target = self.target(url, &options).map_err(invalid)?;
            let id = target.id();
            for name in target.names() {
                if let Some((first, _)) = seen.iter().find(|(_, seen)| *seen == name) {
                    return Err(ConfigError::DuplicateNode {
                        first: first.clone(),
                        second: id,
                        why: "same address and database, or the same cluster seed or Sentinel master",
                    }
                    .into());
                }
                seen.push((id.clone(), name));
            }
            nodes.push(Node::new(
                target,
                self.connect_timeout,
                marker_key(&self.key_prefix).into(),
                self.durability,
            ));
        }

        if nodes.len().is_multiple_of(2) {
            tracing::warn!(
                nodes = nodes.len(),
                "an even number of nodes tolerates no more failures than one node fewer; prefer an odd count"
            );
        }

        Ok(Redlock::new(Inner::new(
            nodes,
            Settings {
                retry: self.retry,
                drift_factor: self.drift_factor,
                node_timeout: self.node_timeout,
                acquire_timeout: self.acquire_timeout,
                key_prefix: self.key_prefix,
                fencing: self.fencing,
                fence_grace: self.fence_grace,
                durable: self.durability.waits(),
            },
        )))
    }
}

impl Redlock {
    /// Starts configuring a client for these voter URLs, each one vote: a standalone master
    /// (`redis://[user:password@]host:port[/db]`), a Redis Cluster
    /// (`redis+cluster://[user:password@]host:port[,host:port…]`) or a Sentinel-managed master
    /// (`redis+sentinel://[user:password@]host[:26379][,host…]/<master-name>[/db]`, where the
    /// login is the master's; the Sentinels' own goes in
    /// `?sentinel_username=…&sentinel_password=…` or
    /// [`sentinel_password`](RedlockBuilder::sentinel_password)). With the `tls` feature,
    /// `rediss://`, `rediss+cluster://` and `rediss+sentinel://` reach the same voters over TLS
    /// (see `tls_root_certificate`). List each independent voter once; use an odd count (3, 5,
    /// 7).
    ///
    /// ```no_run
    /// # fn run() -> Result<(), quorumlock::Error> {
    /// let rl = quorumlock::Redlock::builder([
    ///     "redis+cluster://10.0.1.1:6379,10.0.1.2:6379",
    ///     "redis+sentinel://10.0.2.1,10.0.2.2,10.0.2.3/locks",
    ///     "redis://10.0.3.1:6379",
    /// ])
    /// .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder<I, S>(urls: I) -> RedlockBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedlockBuilder::new(urls)
    }
}

impl RedlockBuilder {
    /// How every voter is reached beyond its URL.
    fn target_options(&self) -> TargetOptions {
        TargetOptions {
            connect_timeout: self.connect_timeout,
            sentinel_login: self.sentinel_login.clone(),
            #[cfg(feature = "tls")]
            certificates: Some(self.tls.certificates()),
        }
    }

    /// One voter from its URL (see `node::target`): TLS voters get the configured certificates
    /// (with the `tls` feature).
    fn target(&self, url: &str, options: &TargetOptions) -> Result<Target, String> {
        #[cfg(feature = "tls")]
        if url
            .get(..6)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss"))
        {
            // rustls needs a process-wide crypto provider; install ours unless the application
            // already chose one (then this does nothing).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Target::parse(url, options)
    }
}

/// The URL with any password (or whole user-info part) replaced by `***`, and so is the value
/// of a `sentinel_password` query parameter.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let redacted = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    };
    let Some((before, query)) = redacted.split_once('?') else {
        return redacted;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case(SENTINEL_PASSWORD_PARAM) => {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{before}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_user_info_and_keeps_the_rest() {
        assert_eq!(redact("redis://:hunter2@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("rediss://u:p@w@h:1"), "rediss://***@h:1");
        assert_eq!(redact("redis://h:1/0?x=@"), "redis://h:1/0?x=@");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn redact_hides_the_sentinels_password_too() {
        assert_eq!(
            redact("redis+sentinel://:pw@h/m?sentinel_username=u&sentinel_password=hunter2"),
            "redis+sentinel://***@h/m?sentinel_username=u&sentinel_password=***"
        );
        assert_eq!(
            redact("redis+sentinel://h/m?sentinel_password=hunter2#x"),
            "redis+sentinel://h/m?sentinel_password=***"
        );
    }
}

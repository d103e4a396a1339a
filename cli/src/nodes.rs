//! The `--nodes` option shared by the subcommands that talk to a user's masters, and the checks
//! run before a lock is touched: every master is a distinct server, and a quorum answers.

use quorumlock::{Redlock, RedlockBuilder};

use crate::masters::Master;

/// Where the masters are.
#[derive(Debug, clap::Args)]
pub(crate) struct NodesArg {
    /// The independent Redis masters, comma-separated
    /// (`redis://[user:password@]host:port[/db]`; `rediss://` for TLS).
    #[arg(
        long,
        env = "QUORUMLOCK_NODES",
        value_delimiter = ',',
        required = true,
        value_parser = parse_url,
        // `--help` would show the variable's value, passwords included.
        hide_env_values = true
    )]
    nodes: Vec<String>,
    /// Prefix of every lock key (the key is the prefix plus the resource name).
    #[arg(long, env = "QUORUMLOCK_KEY_PREFIX", default_value = "")]
    key_prefix: String,
}

impl NodesArg {
    /// The node URLs as given, without empty entries (a trailing comma).
    pub(crate) fn urls(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .map(|u| u.trim())
            .filter(|u| !u.is_empty())
            .collect()
    }

    /// The key prefix.
    pub(crate) fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The Redis key of `resource`, as the library names it.
    pub(crate) fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.key_prefix)
    }

    /// A builder for these masters and key prefix.
    pub(crate) fn builder(&self) -> RedlockBuilder {
        Redlock::builder(self.urls()).key_prefix(self.key_prefix.clone())
    }

    /// Plain connections to the same masters, named as the client names them.
    pub(crate) fn masters(&self, rl: &Redlock) -> Vec<Master> {
        rl.nodes()
            .zip(self.urls())
            .map(|(node, url)| Master::new(node, url))
            .collect()
    }
}

/// Connects `rl` to every master and checks the setup before any lock is taken: no server is
/// listed twice under two names (same `run_id`), and a quorum answers. Warns on stderr about
/// setups that work but are weaker than they look; the library warns about an even count and
/// about each master that did not answer.
///
/// # Errors
///
/// [`quorumlock::Error::Config`] for a server listed twice; [`quorumlock::Error::Unavailable`]
/// when fewer than a quorum answer.
pub(crate) async fn check(rl: &Redlock) -> Result<(), quorumlock::Error> {
    if rl.node_count() == 1 {
        tracing::warn!(
            "a single master: the lock is only as safe as that one server and stops with it; \
             use 3 or 5 independent masters"
        );
    }
    rl.connect().await.map(|_health| ())
}

/// Accepts a node URL, or says how to fix it: a missing scheme, a port out of range, anything
/// else the Redis client cannot parse. A password in the URL is never echoed back.
fn parse_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with("unix:") || text.starts_with("redis+unix:") {
        return Ok(text.to_owned());
    }
    let Some((_scheme, rest)) = text.split_once("://") else {
        let hint = match text.rsplit_once('@') {
            Some((_, host)) => format!("redis://user:password@{host}"),
            None => format!("redis://{text}"),
        };
        return Err(format!(
            "a node URL needs a scheme: write {hint} (rediss:// for TLS)"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = match host_port.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host_port.rsplit_once(':').map(|(_, p)| p),
    };
    let shown = redact(text);
    if let Some(port) = port {
        if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
            return Err(format!(
                "{shown}: port {port:?} is not a port number (1-65535)"
            ));
        }
    }
    redis::Client::open(text)
        .map(|_| text.to_owned())
        .map_err(|e| format!("{shown}: {e}"))
}

/// The URL with any user and password replaced by `***`.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn a_url_without_a_scheme_gets_the_fix_and_hides_its_password() {
        assert_eq!(
            parse_url("127.0.0.1:7101").unwrap_err(),
            "a node URL needs a scheme: write redis://127.0.0.1:7101 (rediss:// for TLS)"
        );
        let secret = parse_url(":hunter2@10.0.0.1:6379").unwrap_err();
        assert!(!secret.contains("hunter2"), "{secret}");
        assert!(
            secret.contains("redis://user:password@10.0.0.1:6379"),
            "{secret}"
        );
        assert_eq!(
            parse_url(" redis://h:1 ").as_deref(),
            Ok("redis://h:1"),
            "URLs with a scheme pass"
        );
    }

    #[test]
    fn a_port_out_of_range_is_named() {
        let typo = parse_url("redis://:hunter2@127.0.0.1:71020").unwrap_err();
        assert_eq!(
            typo,
            "redis://***@127.0.0.1:71020: port \"71020\" is not a port number (1-65535)"
        );
        assert!(parse_url("redis://[::1]:6379").is_ok());
        assert!(parse_url("redis://[::1]:0").is_err());
        assert!(parse_url("redis://h").is_ok(), "the default port");
    }
}

//! The `--nodes` option shared by the subcommands that talk to a user's masters (the checks run
//! before a lock is touched are in `setup`).

use quorumlock::{Durability, Redlock, RedlockBuilder};

use crate::masters::Master;
use crate::setup::{self, Voters};
use crate::tls::TlsArgs;

/// Where the masters are.
#[derive(Debug, clap::Args)]
pub(crate) struct NodesArg {
    /// The independent voters, comma-separated, each in one of three spellings:
    /// `redis://[user:pass@]host:port[/db]` (a standalone master; `rediss://` for TLS),
    /// `redis+cluster://host:port[,host:port...]` (a Redis Cluster, one voter),
    /// `redis+sentinel://host[:26379][,host...]/<master-name>[/db]` (a Sentinel-managed master;
    /// `?sentinel_username=U&sentinel_password=P` logs in to the Sentinels). Over TLS:
    /// `rediss://`, `rediss+cluster://`, `rediss+sentinel://`, with --cacert, --cert and --key.
    #[arg(
        long,
        env = "QUORUMLOCK_NODES",
        required = true,
        value_parser = parse_list,
        // `--help` would show the variable's value, passwords included.
        hide_env_values = true
    )]
    nodes: Vec<String>,
    /// Prefix of every lock key (a resource's key is `<prefix><resource>`).
    #[arg(long, env = "QUORUMLOCK_KEY_PREFIX", default_value = "")]
    key_prefix: String,
    #[command(flatten)]
    tls: TlsArgs,
}

impl NodesArg {
    /// The voter URLs as given, without empty entries (a trailing comma).
    pub(crate) fn urls(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .flat_map(|list| split_list(list))
            .collect()
    }

    /// The key prefix.
    pub(crate) fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The Redis key of `resource`, as the library names it: `<prefix><resource>` (key layout
    /// 3). Every other key of the resource is a companion of it (`quorumlock::companion_key`).
    pub(crate) fn key(&self, resource: &str) -> String {
        quorumlock::resource_key(&self.key_prefix, resource)
    }

    /// A builder for these masters and key prefix.
    pub(crate) fn builder(&self) -> RedlockBuilder {
        self.tls
            .apply(Redlock::builder(self.urls()))
            .key_prefix(self.key_prefix.clone())
    }

    /// Plain connections to the same masters, named as the client names them.
    pub(crate) fn masters(&self, rl: &Redlock) -> Vec<Master> {
        rl.nodes()
            .zip(self.urls())
            .map(|(node, url)| Master::new(node, url, &self.tls))
            .collect()
    }

    /// Checks the voters of `rl` before any lock is taken, deciding at the quorum (see
    /// [`setup::check`]); `durable` is the durability the lock will ask for.
    ///
    /// # Errors
    ///
    /// As [`setup::check`].
    pub(crate) async fn check(
        &self,
        rl: &Redlock,
        durable: Option<Durability>,
    ) -> anyhow::Result<Voters> {
        setup::check(rl, self.masters(rl), durable).await
    }
}

/// The schemes of a voter that is more than one server: its URL lists several hosts,
/// comma-separated, inside the comma-separated list of voters.
const TOPOLOGIES: [&str; 6] = [
    "redis+cluster://",
    "redis+sentinel://",
    "redis-sentinel://",
    "rediss+cluster://",
    "rediss+sentinel://",
    "rediss-sentinel://",
];

fn is_topology(url: &str) -> bool {
    TOPOLOGIES.iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
    })
}

/// A comma-separated list of voters, split into their URLs: an entry without a scheme right
/// after a `redis+cluster://` or `redis+sentinel://` URL whose path has not begun is one more
/// host of that URL (`redis+cluster://a:7000,b:7000`); empty entries (a trailing comma) are
/// dropped.
fn split_list(list: &str) -> Vec<&str> {
    let mut urls: Vec<&str> = Vec::new();
    let mut start: Option<usize> = None;
    let mut offset = 0;
    for piece in list.split(',') {
        let (at, end) = (offset, offset + piece.len());
        offset = end + 1;
        let trimmed = piece.trim();
        let continues = !trimmed.is_empty()
            && !trimmed.contains("://")
            && !trimmed.starts_with("unix:")
            && start.is_some_and(|s| {
                // The URL so far, up to the comma before this entry.
                let url = list[s..at - 1].trim_start();
                is_topology(url) && !url.split_once("://").is_some_and(|(_, r)| r.contains('/'))
            });
        match (continues, start) {
            (true, _) => {}
            (false, Some(s)) => {
                urls.push(list[s..at - 1].trim());
                start = Some(at);
            }
            (false, None) => start = Some(at),
        }
    }
    if let Some(s) = start {
        urls.push(list[s..].trim());
    }
    urls.retain(|u| !u.is_empty());
    urls
}

/// Accepts a comma-separated list of voter URLs (see [`split_list`]), or says how to fix the
/// first wrong one.
fn parse_list(text: &str) -> Result<String, String> {
    let urls = split_list(text);
    if urls.is_empty() {
        return Err(format!(
            "no voter listed: give one or more (3 or 5 independent masters), comma-separated: {}",
            SCHEMES
        ));
    }
    for url in urls {
        parse_url(url)?;
    }
    Ok(text.to_owned())
}

/// The schemes of a voter's URL, as every refusal of another one lists them.
const SCHEMES: &str = "redis://host:port (a master; rediss:// for TLS), \
    redis+cluster://host:port,... (a Redis Cluster; rediss+cluster:// for TLS), \
    redis+sentinel://host,.../<master-name> (a Sentinel-managed master; rediss+sentinel:// for \
    TLS), unix:///path/to/socket";

/// Whether `scheme` (without `://`) names a kind of voter the library reaches.
fn is_known_scheme(scheme: &str) -> bool {
    const KNOWN: [&str; 10] = [
        "redis",
        "rediss",
        "unix",
        "redis+unix",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "redis-sentinel",
        "rediss+sentinel",
        "rediss-sentinel",
    ];
    KNOWN.iter().any(|k| k.eq_ignore_ascii_case(scheme))
}

/// Accepts a voter URL, or says how to fix it: a missing scheme, a port out of range, anything
/// else the Redis client cannot parse. A password in the URL is never echoed back. A cluster's
/// or a Sentinel group's URL is checked for its hosts' ports here, and for the rest by the
/// library.
fn parse_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() || text.starts_with("unix:") || text.starts_with("redis+unix:") {
        return Ok(text.to_owned());
    }
    if is_topology(text) {
        let (scheme, rest) = text.split_once("://").unwrap_or_default();
        let sentinel = scheme.to_ascii_lowercase().contains("sentinel");
        let path = rest.find(['/', '?', '#']).map_or("", |at| &rest[at..]);
        if sentinel
            && path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or("")
                .is_empty()
        {
            return Err(format!(
                "{}: a Sentinel group's URL names the master it monitors: \
                 redis+sentinel://host[:26379][,host...]/<master-name>[/db]",
                redact(text)
            ));
        }
        let (_, hosts, _, _) =
            crate::masters::split(rest).map_err(|e| format!("{}: {e}", redact(text)))?;
        for host in hosts {
            if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']')) {
                if !matches!(port.parse::<u16>(), Ok(p) if p > 0) {
                    return Err(format!(
                        "{}: port {port:?} is not a port number (1-65535)",
                        redact(text)
                    ));
                }
            }
        }
        return Ok(text.to_owned());
    }
    if let Some((scheme, _)) = text.split_once("://") {
        if !is_known_scheme(scheme) {
            return Err(format!(
                "{}: {scheme}:// is not a kind of voter; write one of {SCHEMES}",
                redact(text)
            ));
        }
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

/// The URL with any user and password replaced by `***`, and so is the value of a
/// `sentinel_password` query parameter.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    let Some((before, query)) = rest.split_once('?') else {
        return format!("{scheme}://{rest}");
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("sentinel_password") => {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{scheme}://{before}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::{parse_list, parse_url, redact, split_list};

    #[test]
    fn redact_hides_the_masters_and_the_sentinels_passwords() {
        assert_eq!(redact("redis://:hunter2@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1/0?x=@"), "redis://h:1/0?x=@");
        assert_eq!(
            redact("rediss+sentinel://:pw@h1,h2/m?sentinel_username=u&sentinel_password=hunter2"),
            "rediss+sentinel://***@h1,h2/m?sentinel_username=u&sentinel_password=***"
        );
        assert_eq!(
            redact("redis+sentinel://h/m?SENTINEL_PASSWORD=hunter2"),
            "redis+sentinel://h/m?SENTINEL_PASSWORD=***"
        );
        let refused = parse_url("redis+sentinel://h1:0/m?sentinel_password=hunter2").unwrap_err();
        assert!(!refused.contains("hunter2"), "{refused}");
    }

    #[test]
    fn the_hosts_of_a_cluster_or_a_sentinel_group_stay_in_its_url() {
        assert_eq!(
            split_list("redis://a:1, redis+cluster://b:2,c:3 ,redis://d:4,"),
            ["redis://a:1", "redis+cluster://b:2,c:3", "redis://d:4"]
        );
        assert_eq!(
            split_list("redis+sentinel://:pw@s1,s2:26380/mymaster/2,redis://m:6379"),
            [
                "redis+sentinel://:pw@s1,s2:26380/mymaster/2",
                "redis://m:6379"
            ]
        );
        assert_eq!(split_list("redis://a:1,,b:2"), ["redis://a:1", "b:2"]);
        assert_eq!(
            split_list("redis+sentinel://s1/m,b:2"),
            ["redis+sentinel://s1/m", "b:2"],
            "no host after the master's name"
        );
        assert!(split_list(" , ").is_empty());
        assert!(parse_list("redis+cluster://a:7000,b:7001").is_ok());
        assert!(parse_list("redis-sentinel://a,b/m").is_ok());
        let typo = parse_list("redis+cluster://:hunter2@a:7000,b:70010").unwrap_err();
        assert!(typo.contains("\"70010\" is not a port"), "{typo}");
        assert!(!typo.contains("hunter2"), "{typo}");
        // After a standalone master, a host without a scheme is a mistake, not another host.
        let missing = parse_list("redis://a:1,b:2").unwrap_err();
        assert!(missing.contains("write redis://b:2"), "{missing}");
    }

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
    fn another_scheme_an_empty_list_or_a_sentinel_group_without_its_master_is_refused() {
        let http = parse_url("http://127.0.0.1:6379").unwrap_err();
        assert!(http.contains("http:// is not a kind of voter"), "{http}");
        for scheme in [
            "redis://",
            "rediss://",
            "redis+cluster://",
            "redis+sentinel://",
        ] {
            assert!(http.contains(scheme), "{http}");
        }
        assert!(parse_url("REDIS://h:1").is_ok());
        assert!(parse_list("").unwrap_err().contains("no voter listed"));
        assert!(parse_list(" , ").unwrap_err().contains("no voter listed"));
        let nameless = parse_url("redis+sentinel://:pw@h1,h2").unwrap_err();
        assert!(nameless.contains("<master-name>"), "{nameless}");
        assert!(!nameless.contains("pw@"), "{nameless}");
        assert!(parse_url("redis+sentinel://h1/").is_err());
        assert!(parse_url("redis+sentinel://h1/m").is_ok());
        assert!(parse_url("redis+cluster://h1:1").is_ok());
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

//! The `--nodes` option shared by the subcommands that talk to a user's masters.

use quorumlock::RedlockBuilder;

/// Where the masters are.
#[derive(Debug, clap::Args)]
pub(crate) struct NodesArg {
    /// The independent Redis masters, comma-separated
    /// (`redis://[user:password@]host:port[/db]`; `rediss://` for TLS).
    #[arg(long, env = "QUORUMLOCK_NODES", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Prefix of every lock key (the key is the prefix plus the resource name).
    #[arg(long, env = "QUORUMLOCK_KEY_PREFIX", default_value = "")]
    key_prefix: String,
}

impl NodesArg {
    pub(crate) fn builder(&self) -> RedlockBuilder {
        let urls = self
            .nodes
            .iter()
            .map(|u| u.trim())
            .filter(|u| !u.is_empty());
        quorumlock::Redlock::builder(urls).key_prefix(self.key_prefix.clone())
    }
}

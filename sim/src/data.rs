//! What a master's commands run against (its keyspace, its subscriptions, its setup), apart from
//! the master that owns it, so that the commands need nothing of the master itself.

use crate::keyspace::Keyspace;
use crate::pubsub::PubSub;

/// How a master is set up.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Whether it runs with an append-only file (`INFO`'s `aof_enabled`, `WAITAOF`).
    pub aof: bool,
    /// The default user's password, if connections must log in.
    pub password: Option<String>,
    /// The version `INFO` and `HELLO` report.
    pub version: String,
}

/// The version a master reports unless told otherwise: one with `WAITAOF`.
pub const DEFAULT_VERSION: &str = "7.2.4";

impl Default for Config {
    fn default() -> Self {
        Config {
            aof: false,
            password: None,
            version: DEFAULT_VERSION.to_owned(),
        }
    }
}

impl Config {
    /// With or without an append-only file.
    pub fn aof(mut self, on: bool) -> Self {
        self.aof = on;
        self
    }

    /// With a password for the default user.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Reporting `version`.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }
}

/// What the commands run against: the keyspace, the subscriptions, the setup.
#[derive(Debug)]
pub(crate) struct Data {
    pub(crate) keyspace: Keyspace,
    pub(crate) pubsub: PubSub,
    pub(crate) config: Config,
    /// `INFO`'s `run_id`: 40 hex digits, new at each start, as Redis makes one.
    pub(crate) run_id: String,
}

//! **The unsafe election design, kept only as a negative control. Never use it.**
//!
//! [`NaiveElection`] elects a leader the tempting way: `SET NX PX` of the election's key on one
//! master, the term an `INCR` of a counter beside it on the same master, and the leader read from
//! that master. It trusts that master to keep what it was told. When the master fails over to a
//! replica that had not received the key, or restarts without its data, the key and the counter
//! are gone: the next candidate is elected while the leader still holds its term, and with the
//! same term number, since the counter starts again.
//!
//! It is here so that the history checkers ([`check_overlaps`](crate::check_overlaps),
//! [`check_term_order`](quorumlock_testkit::history::check_term_order)) can be shown to catch that
//! counterexample against a real master (`tests/chaos/election_control.rs`), beside the library's
//! election, which needs a quorum of independent masters and keeps its leader and its terms
//! through the same restart.

use crate::naive_masters;
use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use quorumlock::LockToken;
use redis::aio::MultiplexedConnection;
use redis::Script;

/// `SET NX PX` of the election's key, and on success the next term.
/// KEYS[1] the key, KEYS[2] the term counter; ARGV[1] the stored value, ARGV[2] the TTL in ms.
/// The term, or 0 when another leader holds the key.
static ELECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0",
    )
});

/// Deletes the key if it still holds this leader's value. KEYS[1] the key; ARGV[1] the value.
static RESIGN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0",
    )
});

/// The naive, **unsafe** election on one master. See the [module documentation](self) for why
/// two leaders can hold the same term at once. A negative control only.
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock_verify::naive_election::NaiveElection;
///
/// # async fn run(url: &str) -> redis::RedisResult<()> {
/// let election = NaiveElection::connect(url, "scheduler", Duration::from_millis(100)).await?;
/// if let Ok(term) = election.campaign("host-a", Duration::from_secs(10)).await {
///     println!("leading in term {}", term.term());
///     election.resign(&term).await?;
/// }
/// # Ok(()) }
/// ```
pub struct NaiveElection {
    name: String,
    node_timeout: Duration,
    connection: MultiplexedConnection,
}

impl fmt::Debug for NaiveElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NaiveElection")
            .field("name", &self.name)
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

/// A term won in a [`NaiveElection`].
#[derive(Clone)]
pub struct NaiveTerm {
    stored: String,
    value: String,
    term: u64,
    deadline: Instant,
}

impl fmt::Debug for NaiveTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NaiveTerm")
            .field("value", &self.value)
            .field("term", &self.term)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl NaiveTerm {
    /// What the master stores: a random token, `:`, and the announced value, as the library
    /// stores a leader. Treat it as a secret, like a token.
    pub fn stored(&self) -> &str {
        &self.stored
    }

    /// The announced value.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// When the term stops being valid: the campaign's start plus the TTL, less the drift.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Why a [`NaiveElection`] campaign failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NaiveNotElected {
    /// Another leader holds the key.
    Held,
    /// The master did not answer in time, or failed.
    Unavailable(String),
}

impl fmt::Display for NaiveNotElected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NaiveNotElected::Held => f.write_str("naive campaign lost: another leader holds it"),
            NaiveNotElected::Unavailable(why) => write!(f, "naive campaign failed: {why}"),
        }
    }
}

impl std::error::Error for NaiveNotElected {}

impl NaiveElection {
    /// The election `name` on the master at `url`, connecting within `node_timeout`.
    ///
    /// # Errors
    ///
    /// When the master cannot be reached.
    pub async fn connect(
        url: &str,
        name: &str,
        node_timeout: Duration,
    ) -> redis::RedisResult<NaiveElection> {
        let client = redis::Client::open(url)?;
        let connection =
            tokio::time::timeout(node_timeout, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| {
                    redis::RedisError::from((redis::ErrorKind::Io, "connect timed out"))
                })??;
        Ok(NaiveElection {
            name: name.to_owned(),
            node_timeout,
            connection,
        })
    }

    /// The key the leader holds.
    pub fn key(&self) -> String {
        self.name.clone()
    }

    /// The key the terms are counted in.
    pub fn term_key(&self) -> String {
        format!("{}:term", self.name)
    }

    /// One campaign announcing `value` for `ttl`: elected when the key was free on the master.
    ///
    /// # Errors
    ///
    /// [`NaiveNotElected::Held`] when another leader holds it;
    /// [`NaiveNotElected::Unavailable`] when the master did not answer in time.
    pub async fn campaign(&self, value: &str, ttl: Duration) -> Result<NaiveTerm, NaiveNotElected> {
        let start = Instant::now();
        let stored = format!("{:032x}:{value}", rand::random::<u128>());
        let mut call = ELECT.prepare_invoke();
        call.key(self.key())
            .key(self.term_key())
            .arg(&stored)
            .arg(ttl.as_millis() as u64);
        let mut connection = self.connection.clone();
        let term: u64 = tokio::time::timeout(self.node_timeout, call.invoke_async(&mut connection))
            .await
            .map_err(|_| NaiveNotElected::Unavailable("timed out".to_owned()))?
            .map_err(|e| NaiveNotElected::Unavailable(e.to_string()))?;
        if term == 0 {
            return Err(NaiveNotElected::Held);
        }
        Ok(NaiveTerm {
            stored,
            value: value.to_owned(),
            term,
            deadline: naive_masters::deadline(start, ttl),
        })
    }

    /// Who leads, as the master says: the announced value and the fingerprint of what it stores
    /// (as [`Leader::fingerprint`](quorumlock::Leader::fingerprint) would show it).
    ///
    /// # Errors
    ///
    /// When the master does not answer.
    pub async fn leader(&self) -> redis::RedisResult<Option<(String, String)>> {
        let mut connection = self.connection.clone();
        let stored: Option<String> = redis::cmd("GET")
            .arg(self.key())
            .query_async(&mut connection)
            .await?;
        Ok(stored.and_then(|stored| {
            let (_, value) = stored.split_once(':')?;
            Some((value.to_owned(), LockToken::fingerprint_of(&stored)))
        }))
    }

    /// Gives the term up, if the master still holds it.
    ///
    /// # Errors
    ///
    /// When the master does not answer.
    pub async fn resign(&self, term: &NaiveTerm) -> redis::RedisResult<()> {
        let mut call = RESIGN.prepare_invoke();
        call.key(self.key()).arg(&term.stored);
        let mut connection = self.connection.clone();
        let _: i64 = call.invoke_async(&mut connection).await?;
        Ok(())
    }
}

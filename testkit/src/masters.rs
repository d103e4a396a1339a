//! The masters a small program or example runs against: the URLs it was given, or else local
//! masters started for the run.

use std::io;

use crate::RedisNodes;

/// The environment variable that names the masters, comma-separated, as the `quorumlock` command
/// reads it.
pub const NODES_ENV: &str = "QUORUMLOCK_NODES";

/// The masters a program runs against: URLs from its command line, else from
/// [`QUORUMLOCK_NODES`](NODES_ENV), else three local `redis-server` masters started for the run
/// and stopped when this value is dropped.
///
/// Meant for examples and quick trials, where a reader may or may not have masters of their own.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::Redlock;
/// use quorumlock_testkit::Masters;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let masters = Masters::find()?; // keep it alive: local masters stop when it is dropped
/// let rl = Redlock::builder(masters.urls()).build()?;
/// # drop(rl); Ok(()) }
/// ```
#[derive(Debug)]
pub struct Masters {
    urls: Vec<String>,
    /// Local masters started for this run; dropping them stops them.
    local: Option<RedisNodes>,
}

impl Masters {
    /// Reads the command line's arguments, then [`QUORUMLOCK_NODES`](NODES_ENV); starts three
    /// local masters when neither names any (and says so on stderr).
    ///
    /// # Errors
    ///
    /// When local masters are needed and cannot be started (see [`RedisNodes::spawn`]).
    pub fn find() -> io::Result<Masters> {
        let args = std::env::args().skip(1).collect();
        Masters::from_sources(args, std::env::var(NODES_ENV).ok())
    }

    /// As [`find`](Self::find), from the given arguments and variable value instead of the
    /// process's own.
    ///
    /// # Errors
    ///
    /// As [`find`](Self::find).
    pub fn from_sources(args: Vec<String>, env: Option<String>) -> io::Result<Masters> {
        let mut urls = args;
        if urls.is_empty() {
            urls = env
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if !urls.is_empty() {
            return Ok(Masters { urls, local: None });
        }
        eprintln!("No masters given (arguments or {NODES_ENV}): starting three local ones.");
        let local = RedisNodes::spawn(3)?;
        Ok(Masters {
            urls: local.urls(),
            local: Some(local),
        })
    }

    /// The masters' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The local masters started for this run, if any: to pause or kill one in a demonstration.
    pub fn local(&mut self) -> Option<&mut RedisNodes> {
        self.local.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::Masters;

    #[test]
    fn arguments_come_first_then_the_variable() {
        let env = Some("redis://e:1, redis://e:2,".to_owned());
        let given = Masters::from_sources(vec!["redis://a:1".into()], env.clone()).unwrap();
        assert_eq!(given.urls(), ["redis://a:1"]);
        let from_env = Masters::from_sources(Vec::new(), env).unwrap();
        assert_eq!(from_env.urls(), ["redis://e:1", "redis://e:2"]);
    }

    #[test]
    fn without_either_three_local_masters_answer() {
        let mut local = Masters::from_sources(Vec::new(), None).unwrap();
        assert_eq!(local.urls().len(), 3);
        assert_eq!(local.local().map(|n| n.len()), Some(3));
        for url in local.urls() {
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
            assert_eq!(pong, "PONG");
        }
    }
}

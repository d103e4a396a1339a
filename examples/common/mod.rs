//! Where the examples find their masters: URLs on the command line, else `QUORUMLOCK_NODES`
//! (comma-separated, as the `quorumlock` command reads it), else three local `redis-server`
//! masters started for the run by the testkit and stopped at its end.

use quorumlock_testkit::RedisNodes;

/// The masters an example runs against.
pub struct Masters {
    urls: Vec<String>,
    /// Local masters started for this run; dropping them stops them.
    _local: Option<RedisNodes>,
}

impl Masters {
    /// Reads the command line, then `QUORUMLOCK_NODES`; starts three local masters when
    /// neither names any.
    pub fn find() -> std::io::Result<Masters> {
        let mut urls: Vec<String> = std::env::args().skip(1).collect();
        if urls.is_empty() {
            urls = std::env::var("QUORUMLOCK_NODES")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if !urls.is_empty() {
            return Ok(Masters { urls, _local: None });
        }
        eprintln!("No masters given (arguments or QUORUMLOCK_NODES): starting three local ones.");
        let local = RedisNodes::spawn(3)?;
        Ok(Masters {
            urls: local.urls(),
            _local: Some(local),
        })
    }

    /// The masters' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }
}

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
        let args = std::env::args().skip(1).collect();
        Masters::from_sources(args, std::env::var("QUORUMLOCK_NODES").ok())
    }

    fn from_sources(args: Vec<String>, env: Option<String>) -> std::io::Result<Masters> {
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

#[cfg(test)]
mod tests {
    use super::Masters;

    #[test]
    fn arguments_come_first_then_quorumlock_nodes() {
        let env = Some("redis://e:1, redis://e:2,".to_owned());
        let given = Masters::from_sources(vec!["redis://a:1".into()], env.clone()).unwrap();
        assert_eq!(given.urls(), ["redis://a:1"]);
        let from_env = Masters::from_sources(Vec::new(), env).unwrap();
        assert_eq!(from_env.urls(), ["redis://e:1", "redis://e:2"]);
    }

    #[test]
    fn without_either_three_local_masters_answer() {
        let local = Masters::from_sources(Vec::new(), None).unwrap();
        assert_eq!(local.urls().len(), 3);
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

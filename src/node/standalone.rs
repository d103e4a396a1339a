//! Whether a master is a standalone server: a voter must be one, since a resource's keys (the
//! lock, its line, its fencing counter, ...) are used together in one script. A node of a Redis
//! Cluster answers such a script with `CROSSSLOT` or `MOVED` for most resources and runs it for
//! others, so a client pointed at one would acquire some locks, refuse others and leave keys it
//! cannot release. It is refused at connect instead, with an error that says why.

use super::conn::Conn;
use redis::{ErrorKind, RedisError};

/// Fails when the server has cluster mode on (`INFO cluster` says `cluster_enabled:1`). A server
/// that refuses `INFO` (an ACL without it) is used unchecked, with a warning.
///
/// # Errors
///
/// The connection's error, or the refusal of a cluster node.
pub(super) async fn check(conn: &Conn) -> Result<(), RedisError> {
    let mut conn = conn.clone();
    let info: Result<String, RedisError> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut conn)
        .await;
    match info {
        Ok(info) if cluster_enabled(&info) => Err(cluster_node()),
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
            tracing::warn!(error = %e, "not checked for cluster mode");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn cluster_enabled(info: &str) -> bool {
    info.lines().any(|line| line.trim() == "cluster_enabled:1")
}

/// The error every request to a cluster node fails with.
fn cluster_node() -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "a Redis Cluster node",
        "cluster mode is on (cluster_enabled:1): list the cluster as one voter, \
         redis+cluster://host:port (a resource's keys live in one slot of it), not one of its \
         nodes as redis://; a standalone master is listed as redis://"
            .to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_mode_is_read_from_info() {
        assert!(cluster_enabled("# Cluster\r\ncluster_enabled:1\r\n"));
        assert!(!cluster_enabled("# Cluster\r\ncluster_enabled:0\r\n"));
        assert!(!cluster_enabled(""));
    }

    #[test]
    fn the_refusal_says_what_the_node_is_and_what_to_list() {
        let e = cluster_node().to_string();
        assert!(e.contains("Redis Cluster node"), "{e}");
        assert!(e.contains("redis+cluster://host:port"), "{e}");
    }
}

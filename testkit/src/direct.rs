//! One query on a fresh plain connection, bypassing every proxy and client library: how the
//! failover evidence reads and steers the servers themselves.

use std::net::SocketAddr;
use std::time::Duration;

/// Runs `query` on a fresh plain connection to `addr` with `timeout` for the connection and
/// every read and write; `None` when any step fails.
pub(crate) fn query<T>(
    addr: SocketAddr,
    timeout: Duration,
    query: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
) -> Option<T> {
    let client = redis::Client::open(format!("redis://{addr}")).ok()?;
    let mut conn = client.get_connection_with_timeout(timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    query(&mut conn).ok()
}

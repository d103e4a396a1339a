//! One query on a fresh plain connection, bypassing every proxy and client library: how the
//! chaos engine's monitors read the masters themselves; and blocking fault steps run off the
//! runtime's threads.

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

/// Runs `f` (a fault step that blocks: a server started, killed, failed over) on tokio's
/// blocking pool, so that the clients' tasks keep running meanwhile.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(std::io::Error::other)?
}

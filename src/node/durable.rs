//! Whether a master can confirm grants as the client's [`Durability`] asks (see `durability`):
//! a master that cannot is refused at connect, never used with a silent downgrade.

use super::conn::Conn;
use redis::{ErrorKind, RedisError};

use crate::durability::{self, Durability};

/// Fails a new connection to a master that cannot confirm grants as `durability` asks: too few
/// replicas connected, no AOF, or a server without `WAITAOF`. A server that refuses `INFO` (an
/// ACL without it) is used unchecked, with a warning: its grants still count only once
/// confirmed.
///
/// # Errors
///
/// The connection's error, or the refusal, naming what the master lacks.
pub(super) async fn check(conn: &Conn, durability: Durability) -> Result<(), RedisError> {
    if !durability.waits() {
        return Ok(());
    }
    let mut conn = conn.clone();
    let info: Result<String, RedisError> = redis::cmd("INFO")
        .arg("replication")
        .arg("persistence")
        .arg("server")
        .query_async(&mut conn)
        .await;
    let info = match info {
        Ok(info) => info,
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
            tracing::warn!(error = %e, "durability not checked at connect");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    match durability::lacks(durability, &info) {
        None => Ok(()),
        Some(lack) => Err(RedisError::from((
            ErrorKind::Client,
            "cannot confirm grants",
            format!("{lack}, and durability is {durability:?}"),
        ))),
    }
}

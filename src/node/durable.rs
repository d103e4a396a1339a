//! Whether a voter can confirm grants as the client's [`Durability`] asks (see `durability`):
//! a master that cannot is refused at connect, never used with a silent downgrade. On a Redis
//! Cluster voter every shard's primary is checked, and the shards that cannot confirm are named.

use super::conn::Conn;
use redis::{ErrorKind, RedisError, Value};

use crate::durability::{self, Durability};

/// The sections of `INFO` the check reads: replicas connected, AOF, and the server's version.
fn info_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("replication").arg("persistence").arg("server");
    cmd
}

/// Fails a new connection to a voter that cannot confirm grants as `durability` asks: too few
/// replicas connected, no AOF, or a server without `WAITAOF`. A server that refuses `INFO` (an
/// ACL without it) is used unchecked, with a warning: its grants still count only once
/// confirmed.
///
/// On a cluster, `INFO` goes to every primary; a primary that lacks something fails the whole
/// voter (a resource in its slots could never be granted), and the error names each such
/// primary with the slots it serves.
///
/// # Errors
///
/// The connection's error, or the refusal, naming what the master (or which shard) lacks.
pub(super) async fn check(conn: &Conn, durability: Durability) -> Result<(), RedisError> {
    if !durability.waits() {
        return Ok(());
    }
    let mut conn = conn.clone();
    let info: Result<Value, RedisError> = info_cmd().query_async(&mut conn).await;
    let info = match info {
        Ok(info) => info,
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
            tracing::warn!(error = %e, "durability not checked at connect");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let refuse = |what: String| {
        Err(RedisError::from((
            ErrorKind::Client,
            "cannot confirm grants",
            format!("{what}, and durability is {durability:?}"),
        )))
    };
    match (&conn, info) {
        (Conn::Cluster(_), Value::Map(primaries)) => {
            let mut lacking = Vec::new();
            for (addr, info) in primaries {
                let addr: String = redis::from_redis_value(addr).unwrap_or_default();
                let info = match info {
                    Value::ServerError(e) => {
                        tracing::warn!(primary = %addr, error = ?e, "durability not checked at connect");
                        continue;
                    }
                    info => redis::from_redis_value::<String>(info)?,
                };
                if let Some(lack) = durability::lacks(durability, &info) {
                    lacking.push((addr, lack));
                }
            }
            if lacking.is_empty() {
                return Ok(());
            }
            lacking.sort();
            let slots = slots_by_primary(&mut conn).await;
            let shards: Vec<String> = lacking
                .iter()
                .map(|(addr, lack)| match slots.iter().find(|(a, _)| a == addr) {
                    Some((_, ranges)) => {
                        format!("the shard of primary {addr} (slots {ranges}): {lack}")
                    }
                    None => format!("the shard of primary {addr}: {lack}"),
                })
                .collect();
            refuse(shards.join("; "))
        }
        (_, info) => {
            let info: String = redis::from_redis_value(info)?;
            match durability::lacks(durability, &info) {
                None => Ok(()),
                Some(lack) => refuse(lack),
            }
        }
    }
}

/// Each primary's slot ranges (`0-5460,10923`), from `CLUSTER SLOTS`, to name a shard; empty
/// when the cluster does not say (the shard is then named by its primary alone).
async fn slots_by_primary(conn: &mut Conn) -> Vec<(String, String)> {
    let reply: Result<Vec<Vec<Value>>, RedisError> =
        redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await;
    let mut by_primary: Vec<(String, Vec<(i64, i64)>)> = Vec::new();
    for range in reply.unwrap_or_default() {
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        };
        let (Some(start), Some(end)) = (int(range.first()), int(range.get(1))) else {
            continue;
        };
        let Some(Value::Array(primary)) = range.get(2) else {
            continue;
        };
        let host: String = primary
            .first()
            .and_then(|h| redis::from_redis_value_ref(h).ok())
            .unwrap_or_default();
        let Some(port) = int(primary.get(1)) else {
            continue;
        };
        let addr = format!("{host}:{port}");
        match by_primary.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, ranges)) => ranges.push((start, end)),
            None => by_primary.push((addr, vec![(start, end)])),
        }
    }
    by_primary
        .into_iter()
        .map(|(addr, mut ranges)| {
            ranges.sort_unstable();
            let ranges: Vec<String> = ranges
                .into_iter()
                .map(|(start, end)| match start == end {
                    true => start.to_string(),
                    false => format!("{start}-{end}"),
                })
                .collect();
            (addr, ranges.join(","))
        })
        .collect()
}

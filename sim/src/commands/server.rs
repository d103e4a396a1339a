//! The server's own commands: `TIME`, `PING`, `INFO`, `WAIT`, `WAITAOF`.

use super::{parse_i64, Ctx};
use crate::reply::{errors, Reply};

/// `TIME`: the master's clock, seconds and microseconds.
pub(super) fn time(ctx: &mut Ctx<'_>) -> Reply {
    let now = ctx.now;
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ])
}

/// `PING [message]`.
pub(super) fn ping(args: &[Vec<u8>]) -> Reply {
    match args {
        [] => Reply::Status("PONG".to_owned()),
        [message] => Reply::Bulk(message.clone()),
        _ => super::wrong_arity("ping"),
    }
}

/// `INFO [section ...]`: the sections the library reads (`server`, `clients`, `persistence`,
/// `replication`, `cluster`, `keyspace`), each with the fields it reads and a few more.
pub(super) fn info(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let asked: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let everything = asked.is_empty()
        || asked
            .iter()
            .any(|a| a == "all" || a == "default" || a == "everything");
    let wants = |name: &str| everything || asked.iter().any(|a| a == name);
    let now = ctx.now_ms();
    let config = &ctx.data.config;
    let mut sections = Vec::new();
    if wants("server") {
        sections.push(format!(
            "# Server\r\nredis_version:{}\r\nredis_mode:standalone\r\narch_bits:64\r\nprocess_id:1\r\nrun_id:{}\r\nuptime_in_seconds:0\r\n",
            config.version, ctx.data.run_id
        ));
    }
    if wants("clients") {
        sections.push(format!(
            "# Clients\r\nconnected_clients:{}\r\n",
            ctx.data.pubsub.connected()
        ));
    }
    if wants("persistence") {
        sections.push(format!(
            "# Persistence\r\nloading:0\r\naof_enabled:{}\r\n",
            u8::from(config.aof)
        ));
    }
    if wants("replication") {
        sections.push("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n".to_owned());
    }
    if wants("cluster") {
        sections.push("# Cluster\r\ncluster_enabled:0\r\n".to_owned());
    }
    if wants("keyspace") {
        let (mut keys, mut expires) = (0, 0);
        for (_, entry) in ctx.data.keyspace.live(now) {
            keys += 1;
            expires += usize::from(entry.expires_at.is_some());
        }
        let db = if keys > 0 {
            format!("db0:keys={keys},expires={expires},avg_ttl=0\r\n")
        } else {
            String::new()
        };
        sections.push(format!("# Keyspace\r\n{db}"));
    }
    Reply::Verbatim(sections.join("\r\n"))
}

/// `WAIT numreplicas timeout`: no replica ever acknowledges (it answers at once, where Redis
/// would block until the timeout).
pub(super) fn wait(args: &[Vec<u8>]) -> Reply {
    match (parse_i64(&args[0]), parse_i64(&args[1])) {
        (Some(_), Some(timeout)) if timeout >= 0 => Reply::Int(0),
        (Some(_), Some(_)) => Reply::error("ERR timeout is negative"),
        _ => Reply::error(errors::NOT_INTEGER),
    }
}

/// `WAITAOF numlocal numreplicas timeout`: the local append-only file confirms at once when it
/// is on; no replica ever does.
pub(super) fn waitaof(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (Some(local), Some(_), Some(timeout)) = (
        parse_i64(&args[0]),
        parse_i64(&args[1]),
        parse_i64(&args[2]),
    ) else {
        return Reply::error(errors::NOT_INTEGER);
    };
    if timeout < 0 {
        return Reply::error("ERR timeout is negative");
    }
    let aof = ctx.data.config.aof;
    if local > 0 && !aof {
        return Reply::error(
            "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
        );
    }
    Reply::Array(vec![Reply::Int(i64::from(aof)), Reply::Int(0)])
}

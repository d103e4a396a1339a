//! Sending one command to one node, with timeouts and errors that name the node and the
//! command, and polling until a condition holds.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use super::RedisCluster;
use crate::server::RedisServer;

/// Pause between two looks at the cluster while waiting for it.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Connect timeout of one command sent by the test kit.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Read and write timeout of one command sent by the test kit.
pub(super) const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisCluster {
    /// Runs `cmd` on node `index`; errors name the node and the command.
    pub(super) fn run<T: redis::FromRedisValue>(
        &self,
        index: usize,
        cmd: &redis::Cmd,
    ) -> io::Result<T> {
        query(&self.nodes[index], cmd, COMMAND_TIMEOUT).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("{}: {}: {error}", self.name(index), command_name(cmd)),
            )
        })
    }
}

/// The first word of `cmd` (or two, for a container command like `CLUSTER NODES`), for messages.
fn command_name(cmd: &redis::Cmd) -> String {
    let words: Vec<String> = cmd
        .args_iter()
        .take(2)
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => String::new(),
        })
        .collect();
    match words.as_slice() {
        [first, second]
            if ["CLUSTER", "SENTINEL", "CONFIG"].contains(&first.to_uppercase().as_str()) =>
        {
            format!("{first} {second}")
        }
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// Runs `cmd` on `server` over a connection of its own, with `timeout` for reads and writes.
pub(crate) fn query<T: redis::FromRedisValue>(
    server: &RedisServer,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> io::Result<T> {
    let to_io = |error: redis::RedisError| {
        let kind = if error.is_timeout() {
            io::ErrorKind::TimedOut
        } else if error.is_connection_refusal() {
            io::ErrorKind::ConnectionRefused
        } else {
            io::ErrorKind::Other
        };
        io::Error::new(kind, error.to_string())
    };
    let client = redis::Client::open(server.admin_url()).map_err(to_io)?;
    let mut connection = client
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .map_err(to_io)?;
    connection.set_read_timeout(Some(timeout)).map_err(to_io)?;
    connection.set_write_timeout(Some(timeout)).map_err(to_io)?;
    cmd.query(&mut connection).map_err(to_io)
}

/// Calls `check` every [`POLL`] until it gives a value, for at most `timeout`; then fails with
/// [`io::ErrorKind::TimedOut`], naming `what` was waited for and the last reason `check` gave.
pub(crate) fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> io::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("waited {timeout:?} for {what}; last seen: {last}"),
                ))
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}

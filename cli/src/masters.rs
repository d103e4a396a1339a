//! Plain connections to each master, for what lies beside a lock rather than in it: the holder
//! description, forced unlocks, listing the held keys. The lock itself only ever goes through the
//! library.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// How long one plain request to one master may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// One master, reached without the library.
#[derive(Debug)]
pub(crate) struct Master {
    node: String,
    url: String,
}

impl Master {
    /// `node` is the master's `host:port` (as the library names it), `url` how to reach it.
    pub(crate) fn new(node: &str, url: &str) -> Self {
        Master {
            node: node.to_owned(),
            url: url.to_owned(),
        }
    }

    /// The master as `host:port`.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// Opens a connection, bounded by [`REQUEST_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// Why the master cannot be used, on one line, without credentials.
    pub(crate) async fn connect(&self) -> Result<MultiplexedConnection, String> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| one_line(&e))?;
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            client.get_multiplexed_async_connection(),
        )
        .await
        {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(one_line(&e)),
            Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
        }
    }
}

/// Runs one request bounded by [`REQUEST_TIMEOUT`].
///
/// # Errors
///
/// The server's error or the timeout, on one line.
pub(crate) async fn request<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, cmd.query_async(conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// Runs a script bounded by [`REQUEST_TIMEOUT`].
///
/// # Errors
///
/// As [`request`].
pub(crate) async fn invoke<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    call: &redis::ScriptInvocation<'_>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call.invoke_async(conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// An error's text on one line, at most 120 characters: a table row stays a row even when a
/// server that is not Redis answers with something long.
pub(crate) fn one_line(e: &dyn std::fmt::Display) -> String {
    const MAX: usize = 120;
    let text = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn one_line_joins_lines_and_cuts_long_text() {
        assert_eq!(one_line(&"a\n  b\r\nc"), "a b c");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 123);
    }
}

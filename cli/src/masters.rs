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
        match tokio::time::timeout(REQUEST_TIMEOUT, client.get_multiplexed_async_connection()).await
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

/// Keys scanned per master at most: a listing, not an export.
pub(crate) const MAX_KEYS: usize = 100_000;

/// The keys of type `kind` (`string`, `zset`) on `conn` matching the glob `pattern` (see
/// [`glob_escape`]), at most [`MAX_KEYS`], found with `SCAN` (which a least-privilege ACL must
/// grant: `+scan`).
///
/// # Errors
///
/// The first request that failed (a `NOPERM` when the ACL does not grant `SCAN`), on one line.
pub(crate) async fn scan(
    conn: &mut MultiplexedConnection,
    pattern: &str,
    kind: &str,
) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let scan = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .arg("TYPE")
            .arg(kind)
            .clone();
        let (next, batch): (u64, Vec<String>) = request(conn, &scan).await?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 || keys.len() >= MAX_KEYS {
            return Ok(keys);
        }
    }
}

/// `text` with SCAN's glob characters escaped, to match it literally.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The slots of a semaphore on `key` that some master has a key for (`<key>:permit:<i>`,
/// `exec --permits`), in order. Empty when none do, or when no master lets us look (an ACL
/// without `+scan`).
pub(crate) async fn permit_slots(masters: &[Master], key: &str) -> Vec<u32> {
    let pattern = format!("{}:permit:*", glob_escape(key));
    let prefix = format!("{key}:permit:");
    let found = futures::future::join_all(masters.iter().map(|master| {
        let pattern = &pattern;
        async move {
            let mut conn = master.connect().await?;
            scan(&mut conn, pattern, "string").await
        }
    }))
    .await;
    let mut slots: Vec<u32> = Vec::new();
    for (master, keys) in masters.iter().zip(found) {
        match keys {
            Ok(keys) => slots.extend(
                keys.iter()
                    .filter_map(|k| k.strip_prefix(&prefix)?.parse::<u32>().ok()),
            ),
            Err(e) => tracing::debug!(node = master.node(), error = %e, "no look for permits"),
        }
    }
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The values of `keys` (strings) on `conn`, in one round trip, bounded by [`REQUEST_TIMEOUT`].
///
/// # Errors
///
/// As [`request`].
pub(crate) async fn get_all(
    conn: &mut MultiplexedConnection,
    keys: &[String],
) -> Result<Vec<Option<String>>, String> {
    let mut gets = redis::pipe();
    for key in keys {
        gets.cmd("GET").arg(key);
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, gets.query_async(conn)).await {
        Ok(Ok(values)) => Ok(values),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// An error's text on one line, at most 120 characters: a table row stays a row even when a
/// server that is not Redis answers with something long.
pub(crate) fn one_line(e: &dyn std::fmt::Display) -> String {
    const MAX: usize = 120;
    let text = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::{glob_escape, one_line};

    #[test]
    fn glob_characters_match_literally() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("reports:"), "reports:");
    }

    #[test]
    fn one_line_joins_lines_and_cuts_long_text() {
        assert_eq!(one_line(&"a\n  b\r\nc"), "a b c");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 123);
    }
}

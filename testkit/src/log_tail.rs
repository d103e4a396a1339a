//! The end of a server's log, as the errors of the test kit quote it: a leaf that the server,
//! its clock and the topologies built on it all use.

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

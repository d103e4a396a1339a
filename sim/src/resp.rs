//! The wire: requests parsed from RESP (arrays of bulk strings, or inline commands), replies
//! written in RESP2 or RESP3.

use crate::master::Protocol;
use crate::reply::{format_double, Reply};

/// A request the client sent that is not RESP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub(crate) String);

/// Takes one complete request off the front of `buf`: `Ok(None)` until one has arrived whole.
///
/// # Errors
///
/// A request that is not RESP; the connection is then closed, as Redis closes it.
pub(crate) fn parse_request(buf: &mut Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, ProtocolError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first != b'*' {
        // An inline command: one line, split on spaces.
        let Some(end) = find_crlf(buf, 0) else {
            return Ok(None);
        };
        let line = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 2);
        let argv: Vec<Vec<u8>> = line
            .split_ascii_whitespace()
            .map(|a| a.as_bytes().to_vec())
            .collect();
        return Ok(Some(argv));
    }
    let Some(end) = find_crlf(buf, 0) else {
        return Ok(None);
    };
    let count = parse_len(&buf[1..end])?;
    let mut at = end + 2;
    let mut argv = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count.max(0) {
        let Some(end) = find_crlf(buf, at) else {
            return Ok(None);
        };
        if buf[at] != b'$' {
            return Err(ProtocolError(format!(
                "Protocol error: expected '$', got '{}'",
                buf[at] as char
            )));
        }
        let len = parse_len(&buf[at + 1..end])?;
        let len = usize::try_from(len)
            .map_err(|_| ProtocolError("Protocol error: invalid bulk length".to_owned()))?;
        let start = end + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        argv.push(buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    buf.drain(..at);
    Ok(Some(argv))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| p + from)
}

fn parse_len(digits: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError("Protocol error: invalid length".to_owned()))
}

/// Appends `reply` to `out` as `protocol` writes it.
pub(crate) fn encode(reply: &Reply, protocol: Protocol, out: &mut Vec<u8>) {
    let resp3 = protocol == Protocol::Resp3;
    match reply {
        Reply::Status(s) => line(out, b'+', s),
        Reply::Error(e) => line(out, b'-', e),
        Reply::Int(i) => line(out, b':', &i.to_string()),
        Reply::Bulk(b) => bulk(out, b),
        Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::Double(d) if resp3 => line(out, b',', &format_double(*d)),
        Reply::Double(d) => bulk(out, format_double(*d).as_bytes()),
        Reply::Verbatim(text) if resp3 => {
            line(out, b'=', &(text.len() + 4).to_string());
            out.extend_from_slice(b"txt:");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Reply::Verbatim(text) => bulk(out, text.as_bytes()),
        Reply::Array(items) => {
            line(out, b'*', &items.len().to_string());
            for item in items {
                encode(item, protocol, out);
            }
        }
        Reply::Push(items) => {
            line(
                out,
                if resp3 { b'>' } else { b'*' },
                &items.len().to_string(),
            );
            for item in items {
                encode(item, protocol, out);
            }
        }
        Reply::Map(pairs) => {
            if resp3 {
                line(out, b'%', &pairs.len().to_string());
            } else {
                line(out, b'*', &(pairs.len() * 2).to_string());
            }
            for (k, v) in pairs {
                encode(k, protocol, out);
                encode(v, protocol, out);
            }
        }
        Reply::Pairs(pairs) => {
            if resp3 {
                line(out, b'*', &pairs.len().to_string());
            } else {
                line(out, b'*', &(pairs.len() * 2).to_string());
            }
            for (a, b) in pairs {
                if resp3 {
                    out.extend_from_slice(b"*2\r\n");
                }
                encode(a, protocol, out);
                encode(b, protocol, out);
            }
        }
    }
}

fn line(out: &mut Vec<u8>, kind: u8, text: &str) {
    out.push(kind);
    // A status or error never spans lines.
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    line(out, b'$', &bytes.len().to_string());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_taken_only_once_it_has_arrived_whole() {
        let mut buf = b"*2\r\n$3\r\nGET\r\n$1\r".to_vec();
        assert_eq!(parse_request(&mut buf), Ok(None));
        buf.extend_from_slice(b"\nk\r\n*1\r\n$4\r\nPING\r\n");
        let first = parse_request(&mut buf).unwrap().unwrap();
        assert_eq!(first, [b"GET".to_vec(), b"k".to_vec()]);
        let second = parse_request(&mut buf).unwrap().unwrap();
        assert_eq!(second, [b"PING".to_vec()]);
        assert!(buf.is_empty());
    }

    #[test]
    fn an_inline_command_is_split_on_spaces() {
        let mut buf = b"SET k  v\r\n".to_vec();
        let argv = parse_request(&mut buf).unwrap().unwrap();
        assert_eq!(argv, [b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]);
    }

    #[test]
    fn replies_are_written_in_the_connections_protocol() {
        let reply = Reply::Map(vec![(Reply::bulk("a"), Reply::Double(1.5))]);
        let mut out = Vec::new();
        encode(&reply, Protocol::Resp2, &mut out);
        assert_eq!(out, b"*2\r\n$1\r\na\r\n$3\r\n1.5\r\n");
        out.clear();
        encode(&reply, Protocol::Resp3, &mut out);
        assert_eq!(out, b"%1\r\n$1\r\na\r\n,1.5\r\n");
        out.clear();
        encode(&Reply::Nil, Protocol::Resp3, &mut out);
        assert_eq!(out, b"_\r\n");
    }
}

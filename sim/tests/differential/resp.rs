//! A plain RESP2 client over a TCP stream: the same bytes to the real server and to the
//! simulated one, and their replies read back exactly as sent (errors' text included).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};

/// A reply, as RESP2 carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    pub fn bulk_str(&self) -> Option<String> {
        match self {
            Resp::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Resp] {
        match self {
            Resp::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

impl std::fmt::Display for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resp::Status(s) => write!(f, "+{s}"),
            Resp::Error(e) => write!(f, "-{e}"),
            Resp::Int(i) => write!(f, ":{i}"),
            Resp::Bulk(None) | Resp::Array(None) => write!(f, "nil"),
            Resp::Bulk(Some(b)) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Resp::Array(Some(items)) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// Sends every command at once, then reads their replies in order.
    pub fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Vec<Resp> {
        let mut out = Vec::new();
        for argv in commands {
            out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
            for arg in argv {
                out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                out.extend_from_slice(arg);
                out.extend_from_slice(b"\r\n");
            }
        }
        self.writer.write_all(&out).unwrap();
        commands.iter().map(|_| self.read()).collect()
    }

    pub fn call(&mut self, argv: &[Vec<u8>]) -> Resp {
        self.pipeline(&[argv.to_vec()]).remove(0)
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        assert!(line.ends_with("\r\n"), "connection closed: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    fn read(&mut self) -> Resp {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Resp::Status(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Int(rest.parse().unwrap()),
            "$" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    return Resp::Bulk(None);
                }
                let mut buf = vec![0; len as usize + 2];
                self.reader.read_exact(&mut buf).unwrap();
                buf.truncate(len as usize);
                Resp::Bulk(Some(buf))
            }
            "*" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    return Resp::Array(None);
                }
                Resp::Array(Some((0..len).map(|_| self.read()).collect()))
            }
            other => panic!("not RESP2: {other}{rest}"),
        }
    }
}

//! The requests as they leave the clients, read off the wire: each connection's byte stream
//! split into commands (RESP arrays of bulk strings), and of those the requests of attempts
//! under an owner id, which the takeover checker reads.

use std::time::Instant;

use super::quorum::owner_of;

/// A request of an attempt under an owner id, as it left its client: the first argument that
/// is an owner's token is the attempt's own (its acquire, extend, release or rollback), a
/// later one of the same owner the value it names for a takeover.
#[derive(Clone, Debug)]
pub struct OwnerRequest {
    /// When it left the client, on the simulation's clock (as the history's times).
    pub sent: Instant,
    /// The plan's worker that sent it.
    pub worker: usize,
    /// The master it went to.
    pub master: usize,
    /// The attempt's token.
    pub token: Vec<u8>,
    /// The value of the owner it names for a takeover, if any.
    pub named: Option<Vec<u8>>,
    /// What it is, by its shape.
    pub kind: RequestKind,
}

/// What an owner's request is, by its shape on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// An attempt's acquire: the only request that carries the owner id on its own.
    Acquire,
    /// A cleanup, sent with its script's source (`EVAL`): the rollback of an attempt that failed
    /// or was dropped, or a release behind a request still out.
    Cleanup,
    /// Anything else: an extend, a holder's release.
    Other,
}

/// What an owner's command is made of: its attempt's token, the value it names, its kind.
pub(super) struct OwnerCommand<'a> {
    pub(super) token: &'a [u8],
    pub(super) named: Option<&'a [u8]>,
    pub(super) kind: RequestKind,
}

impl<'a> OwnerCommand<'a> {
    /// The owner's command among `args`, one command's arguments, if it is one.
    pub(super) fn of(args: &[&'a [u8]]) -> Option<OwnerCommand<'a>> {
        let at = args.iter().position(|a| owner_of(a).is_some())?;
        let token = args[at];
        let owner = owner_of(token);
        let named = args[at + 1..]
            .iter()
            .find(|a| **a != token && owner_of(a) == owner)
            .copied();
        let kind = if args[at + 1..].iter().any(|a| Some(*a) == owner) {
            RequestKind::Acquire
        } else if args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"EVAL"))
        {
            RequestKind::Cleanup
        } else {
            RequestKind::Other
        };
        Some(OwnerCommand { token, named, kind })
    }
}

impl OwnerRequest {
    /// The owner's request among `args`, one command's arguments, if it is one.
    fn of(args: &[&[u8]], sent: Instant, worker: usize, master: usize) -> Option<OwnerRequest> {
        let command = OwnerCommand::of(args)?;
        Some(OwnerRequest {
            sent,
            worker,
            master,
            token: command.token.to_vec(),
            named: command.named.map(<[u8]>::to_vec),
            kind: command.kind,
        })
    }
}

/// One connection's requests, read as they leave its client.
#[derive(Debug)]
pub struct Requests {
    worker: usize,
    master: usize,
    /// Bytes of a command not yet whole.
    pending: Vec<u8>,
}

impl Requests {
    /// The requests worker `worker` sends master `master` on one connection.
    pub fn new(worker: usize, master: usize) -> Requests {
        Requests {
            worker,
            master,
            pending: Vec::new(),
        }
    }

    /// Reads `bytes`, sent at `sent`; the owner's requests they complete go to `log`.
    pub fn read(&mut self, bytes: &[u8], sent: Instant, log: &mut Vec<OwnerRequest>) {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while let Some((args, used)) = command(&self.pending[at..]) {
            log.extend(OwnerRequest::of(&args, sent, self.worker, self.master));
            at += used;
        }
        if self.pending.get(at).is_some_and(|b| *b != b'*') {
            // Not a command: the client speaks RESP, so this is not a stream of ours to read.
            self.pending.clear();
        } else {
            self.pending.drain(..at);
        }
    }
}

/// The command at the start of `bytes` (an array of bulk strings) and how many bytes it takes,
/// once it is whole.
fn command(bytes: &[u8]) -> Option<(Vec<&[u8]>, usize)> {
    let (count, mut at) = header(bytes, b'*')?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, skip) = header(bytes.get(at..)?, b'$')?;
        let start = at + skip;
        let end = start.checked_add(len)?;
        args.push(bytes.get(start..end)?);
        bytes.get(end..end + 2)?;
        at = end + 2;
    }
    Some((args, at))
}

/// A RESP header line of `kind` (`*3\r\n`, `$5\r\n`): its number and its length.
fn header(bytes: &[u8], kind: u8) -> Option<(usize, usize)> {
    if *bytes.first()? != kind {
        return None;
    }
    let end = bytes.windows(2).position(|w| w == b"\r\n")?;
    let n = std::str::from_utf8(&bytes[1..end]).ok()?.parse().ok()?;
    Some((n, end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "ql-00000000000010000000000000000000@o";
    const B: &str = "ql-00000000000020000000000000000000@o";

    fn resp(args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
        }
        out
    }

    #[test]
    fn an_owners_requests_are_read_whole_across_writes_with_the_value_they_name() {
        let mut bytes = resp(&["EVALSHA", "abc", "1", "r0", B, "1000", "o", A]);
        bytes.extend(resp(&["PING"]));
        bytes.extend(resp(&["EVALSHA", "abc", "1", "r0", A, "1000", "o", ""]));
        bytes.extend(resp(&["EVAL", "return 1", "1", "r0", A, "1000"]));
        bytes.extend(resp(&["EVALSHA", "def", "1", "r0", A, "1000"]));
        let now = Instant::now();
        let mut requests = Requests::new(2, 1);
        let mut log = Vec::new();
        let (first, rest) = bytes.split_at(17);
        requests.read(first, now, &mut log);
        assert!(log.is_empty());
        requests.read(rest, now, &mut log);
        assert_eq!(log.len(), 4);
        assert_eq!((log[0].worker, log[0].master), (2, 1));
        assert_eq!(log[0].token, B.as_bytes());
        assert_eq!(log[0].named.as_deref(), Some(A.as_bytes()));
        assert_eq!(log[1].token, A.as_bytes());
        assert_eq!(log[1].named, None);
        let kinds: Vec<RequestKind> = log.iter().map(|r| r.kind).collect();
        use RequestKind::*;
        assert_eq!(kinds, [Acquire, Acquire, Cleanup, Other]);
        assert!(requests.pending.is_empty());
    }
}

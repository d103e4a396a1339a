//! What a [`History`](crate::History) records: the clients' operations and the injected faults.

use std::fmt;
use std::time::Instant;

use quorumlock::{Lock, Permit};

/// Identifies a fault recorded by [`History::fault`](crate::History::fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FaultId(pub(super) usize);

impl fmt::Display for FaultId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A fault injected during the run: active from `start` until `end`, or until the end of the run
/// when it was never healed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fault {
    /// The id [`History::fault`](crate::History::fault) returned.
    pub id: FaultId,
    /// What happened, e.g. `"node 2 paused"`.
    pub description: String,
    /// When the fault started.
    pub start: Instant,
    /// When it was healed; `None` if it lasted until the end of the run.
    pub end: Option<Instant>,
}

impl Fault {
    /// Whether the fault was active at some point of the closed window `[from, until]`
    /// (`until == None`: the window runs to the end of the run).
    pub fn active_during(&self, from: Instant, until: Option<Instant>) -> bool {
        let started_in_time = until.is_none_or(|until| self.start <= until);
        let not_yet_healed = self.end.is_none_or(|end| end > from);
        started_in_time && not_yet_healed
    }
}

/// One finished acquire, extend or release attempt of one client.
#[derive(Clone, PartialEq, Eq)]
pub struct Op {
    /// Which client task made the attempt.
    pub client: usize,
    /// The locked resource name.
    pub resource: String,
    /// The lock's token (opaque and secret: never printed, see [`TokenFingerprint`]).
    pub token: String,
    /// What was attempted.
    pub kind: OpKind,
    /// When the attempt started (before the first request was sent).
    pub start: Instant,
    /// When the attempt returned to the client.
    pub end: Instant,
    /// What the client was told.
    pub outcome: Outcome,
    /// The fencing token the acquire returned, if fencing is on.
    pub fence: Option<u64>,
}

/// A release under way: what it records of its lock, taken before the release consumes the lock.
///
/// ```no_run
/// # async fn run(history: quorumlock_testkit::History, lock: quorumlock::Lock) {
/// use quorumlock_testkit::Releasing;
/// let releasing = Releasing::start(&lock);
/// let result = lock.release().await;
/// history.record(releasing.finished(0, &result));
/// # }
/// ```
#[derive(Debug)]
pub struct Releasing {
    resource: String,
    token: String,
    fence: Option<u64>,
    start: Instant,
}

impl Releasing {
    /// Notes `lock`'s resource, token and fence, and that its release starts now.
    pub fn start(lock: &Lock) -> Self {
        Releasing {
            resource: lock.resource().to_owned(),
            token: lock.token().expose().to_owned(),
            fence: lock.fencing_token(),
            start: Instant::now(),
        }
    }

    /// Notes `lock`, a reader's hold of a read-write lock, under the name its readers are
    /// recorded by ([`readers_of`](crate::history::readers_of) its resource), and that its
    /// release starts now.
    pub fn start_read(lock: &Lock) -> Self {
        Releasing {
            resource: super::readers_of(lock.resource()),
            ..Releasing::start(lock)
        }
    }

    /// Notes `permit`'s slot, token and fence, and that its release starts now.
    pub fn start_permit(permit: &Permit) -> Self {
        Releasing {
            resource: permit.resource().to_owned(),
            token: permit.token().expose().to_owned(),
            fence: permit.fencing_token(),
            start: Instant::now(),
        }
    }

    /// The release by `client`, ended now with `result`. A failed release is recorded too: it
    /// still ends the holder's lease (its keys expire at their TTL).
    pub fn finished<T, E: fmt::Display>(self, client: usize, result: &Result<T, E>) -> Op {
        Op {
            client,
            resource: self.resource,
            token: self.token,
            kind: OpKind::Release,
            start: self.start,
            end: Instant::now(),
            outcome: match result {
                Ok(_) => Outcome::Ok { valid_until: None },
                Err(e) => Outcome::Failed {
                    reason: e.to_string(),
                },
            },
            fence: self.fence,
        }
    }
}

impl Op {
    /// A successful acquire of `lock` by `client`, attempted from `start` to `end`: the lock's
    /// resource, token, deadline (as `valid_until`) and fencing token.
    pub fn acquired(client: usize, start: Instant, end: Instant, lock: &Lock) -> Op {
        Op {
            client,
            resource: lock.resource().to_owned(),
            token: lock.token().expose().to_owned(),
            kind: OpKind::Acquire,
            start,
            end,
            outcome: Outcome::Ok {
                valid_until: Some(lock.deadline()),
            },
            fence: lock.fencing_token(),
        }
    }

    /// A successful acquire of `lock`, a reader's hold of a read-write lock, by `client`,
    /// attempted from `start` to `end`: recorded as [`acquired`](Op::acquired) would, under the
    /// name the lock's readers are recorded by ([`readers_of`](crate::history::readers_of) its
    /// resource).
    pub fn read_acquired(client: usize, start: Instant, end: Instant, lock: &Lock) -> Op {
        Op {
            resource: super::readers_of(lock.resource()),
            ..Op::acquired(client, start, end, lock)
        }
    }

    /// A successful acquire of a semaphore's `permit` by `client`, attempted from `start` to
    /// `end`: recorded on the permit's slot (`<semaphore>:permit:<i>`), with its token, deadline
    /// and the slot's fencing token.
    pub fn permit_acquired(client: usize, start: Instant, end: Instant, permit: &Permit) -> Op {
        Op {
            client,
            resource: permit.resource().to_owned(),
            token: permit.token().expose().to_owned(),
            kind: OpKind::Acquire,
            start,
            end,
            outcome: Outcome::Ok {
                valid_until: Some(permit.deadline()),
            },
            fence: permit.fencing_token(),
        }
    }

    /// A failed acquire of `resource` by `client`, attempted from `start` to `end`, for `reason`.
    pub fn acquire_failed(
        client: usize,
        resource: &str,
        start: Instant,
        end: Instant,
        reason: impl fmt::Display,
    ) -> Op {
        Op {
            client,
            resource: resource.to_owned(),
            token: String::new(),
            kind: OpKind::Acquire,
            start,
            end,
            outcome: Outcome::Failed {
                reason: reason.to_string(),
            },
            fence: None,
        }
    }

    /// Whether the attempt succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(self.outcome, Outcome::Ok { .. })
    }

    /// The reported end of validity of a successful attempt (`None` if it failed or reported none).
    pub fn valid_until(&self) -> Option<Instant> {
        match self.outcome {
            Outcome::Ok { valid_until } => valid_until,
            Outcome::Failed { .. } => None,
        }
    }

    /// A short, printable fingerprint of the token.
    pub fn token_fingerprint(&self) -> TokenFingerprint {
        TokenFingerprint::of(&self.token)
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Op")
            .field("client", &self.client)
            .field("resource", &self.resource)
            .field("token", &self.token_fingerprint())
            .field("kind", &self.kind)
            .field("start", &self.start)
            .field("end", &self.end)
            .field("outcome", &self.outcome)
            .field("fence", &self.fence)
            .finish()
    }
}

/// What an [`Op`] attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OpKind {
    /// Take the lock.
    Acquire,
    /// Push the lock's deadline further.
    Extend,
    /// Give the lock up.
    Release,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Acquire => "acquire",
            OpKind::Extend => "extend",
            OpKind::Release => "release",
        })
    }
}

/// What the client was told about an [`Op`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The attempt succeeded.
    Ok {
        /// For an acquire or extend: the start of the attempt plus the validity the library
        /// reported, i.e. the deadline as the client computed it. `None` for a release. A
        /// successful acquire or extend without one is taken to hold until it is released.
        valid_until: Option<Instant>,
    },
    /// The attempt failed.
    Failed {
        /// Why, for the report.
        reason: String,
    },
}

/// A short fingerprint of a lock token, printed instead of the token itself.
///
/// 32 bits of a FNV-1a hash, shown as `#` and eight hex digits. Only for reading reports: the
/// checkers always compare full tokens.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenFingerprint(u32);

impl TokenFingerprint {
    /// The fingerprint of `token`.
    pub fn of(token: &str) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in token.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Fold the 64-bit hash so every input bit affects the 32 shown.
        Self(((hash >> 32) ^ hash) as u32)
    }
}

impl fmt::Display for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:08x}", self.0)
    }
}

impl fmt::Debug for TokenFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use crate::history::testing::Clock;

    #[test]
    fn ops_print_a_fingerprint_instead_of_the_token() {
        let c = Clock::new();
        let op = c.acquire(0, "tok-a-secret", (0, 5), 100, Some(1));
        let debug = format!("{op:?}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(debug.contains(&op.token_fingerprint().to_string()));
    }
}

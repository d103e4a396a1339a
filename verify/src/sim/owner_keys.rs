//! The fourth checker, on each master as it runs the owners' commands: a key of a lock under
//! an owner id holds that lock's value (or a later one of its owner, which took it over and
//! gives it back) for as long as the lock's grant and renewals there keep it. So a failed
//! attempt that took the key over costs the lock nothing, in whatever order its requests and
//! its rollback land, as docs/how-it-works.md promises ("a failed `acquire_as` never costs a
//! lock still held its keys").
//!
//! The overlap and quorum checkers cannot see a breach: the lock keeps its quorum on the other
//! masters, and while the attempt held the key, its value counted as the lock's. So this one
//! follows each key the way Redis would have kept it had nobody else written it: from the
//! lock's grant on a master, its lease there runs until the grant's expiry (its record's
//! lease, for a key stretched for a line), and each of its renewals that runs there while that
//! lease lasts moves it to the renewal's TTL from then (`PEXPIRE … GT`: never back). Every time
//! is the master's own clock, as the master judges expiry. While that lease lasts (the lock won,
//! its release not begun, the master's data not lost), the key holds the lock's value before and
//! after every owner's command on it.
//!
//! The commands are seen as each master runs them ([`quorumlock_sim::Monitor`]), not as they
//! leave the clients: a request lost with its connection never ran, and one held up runs when
//! it lands.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use quorumlock_sim::{Master, Monitor, Monitored, Value};
use quorumlock_testkit::{Op, OpKind, TokenFingerprint};

use super::net::locked;
use super::quorum::{belongs, shown, KeyLog};
use super::wire::{OwnerCommand, RequestKind};

/// Ms the checker leaves to the rounding of expiries: a lease that ends this close to a
/// command is not held against it.
const ROUNDING_MS: i64 = 2;

/// The SHA1 of the renewal script (`lua/extend.lua`), which the library sends as `EVALSHA`.
static EXTEND_SHA: LazyLock<String> = LazyLock::new(|| {
    sha1_smol::Sha1::from(include_str!("../../../src/lua/extend.lua"))
        .digest()
        .to_string()
});

/// The commands of owners' attempts and locks, as the masters ran them, in the order they ran.
pub type Executed = Arc<Mutex<Vec<Command>>>;

/// A command of an attempt or lock under an owner id, as a master ran it.
#[derive(Debug, Clone)]
pub struct Command {
    /// When it ran, from the simulation's start (each host's runtime has an `Instant` base of
    /// its own; the history's times are the clients' host's, from the run's start).
    pub at: Duration,
    /// When it ran, on the master's clock (ms since the epoch).
    pub master_ms: i64,
    /// The master.
    pub master: usize,
    /// The key it ran on (its first key).
    pub key: Vec<u8>,
    /// The attempt's or lock's token.
    pub token: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// The key's value before it ran.
    pub before: Option<Vec<u8>>,
    /// The key's value after it ran.
    pub after: Option<Vec<u8>>,
    /// When the key's lease ends after it ran, when the key then holds `token`: the record's
    /// lease for a key stretched for its line (`<key>:held`, see `lua/line.lua`), else its
    /// expiry (master's ms).
    pub lease: Option<i64>,
}

impl Command {
    /// The owner's value it took over, if it did: an acquire that found the value it named and
    /// left its own.
    pub fn taken_over(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Acquire { named: Some(n) }
                if self.before.as_ref() == Some(n) && self.after.as_ref() == Some(&self.token) =>
            {
                Some(n)
            }
            _ => None,
        }
    }
}

/// What an owner's command is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// An attempt's acquire, naming the value it may take over.
    Acquire {
        /// The value named, if any.
        named: Option<Vec<u8>>,
    },
    /// A lock's renewal, for this many ms.
    Extend {
        /// Its TTL.
        ttl_ms: i64,
    },
    /// A cleanup: a rollback, or a release behind a request still out.
    Cleanup,
    /// Anything else: a holder's release.
    Other,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Acquire { named: None } => write!(f, "acquire"),
            Kind::Acquire { named: Some(n) } => write!(f, "acquire naming {}", shown(n)),
            Kind::Extend { ttl_ms } => write!(f, "extend for {ttl_ms} ms"),
            Kind::Cleanup => write!(f, "cleanup"),
            Kind::Other => write!(f, "release"),
        }
    }
}

/// What master `master` runs for the owners, into `log` (see [`Command`]).
pub fn monitor(master: usize, log: Executed) -> Monitor {
    let mut before = None;
    Box::new(move |m: &Master, seen: Monitored<'_>| {
        let args: Vec<&[u8]> = seen.argv.iter().map(Vec::as_slice).collect();
        let Some(command) = OwnerCommand::of(&args) else {
            return;
        };
        let Some(key) = first_key(&args) else { return };
        if seen.replies.is_none() {
            before = Some(string(m, key));
            return;
        }
        let after = string(m, key);
        let lease =
            (after.as_deref() == Some(command.token)).then(|| lease_of(m, key, command.token));
        let kind = match command.kind {
            RequestKind::Acquire => Kind::Acquire {
                named: command.named.map(<[u8]>::to_vec),
            },
            RequestKind::Cleanup => Kind::Cleanup,
            RequestKind::Other => extend_ttl(&args, command.token)
                .map_or(Kind::Other, |ttl_ms| Kind::Extend { ttl_ms }),
        };
        let command = Command {
            at: turmoil::sim_elapsed().unwrap_or_default(),
            master_ms: m.clock().now_ms(),
            master,
            key: key.to_vec(),
            token: command.token.to_vec(),
            kind,
            before: before.take().flatten(),
            after,
            lease: lease.flatten(),
        };
        locked(&log).push(command);
    })
}

/// A script's first key (`EVAL`/`EVALSHA script numkeys key …`).
fn first_key<'a>(args: &[&'a [u8]]) -> Option<&'a [u8]> {
    let command = args.first()?;
    let script = command.eq_ignore_ascii_case(b"EVAL") || command.eq_ignore_ascii_case(b"EVALSHA");
    let keys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
    (script && keys > 0).then(|| args.get(3).copied()).flatten()
}

/// The TTL of a renewal: the argument after its token (`lua/extend.lua`'s `ARGV[2]`).
fn extend_ttl(args: &[&[u8]], token: &[u8]) -> Option<i64> {
    let by_sha = args.first()?.eq_ignore_ascii_case(b"EVALSHA")
        && args.get(1)?.eq_ignore_ascii_case(EXTEND_SHA.as_bytes());
    if !by_sha {
        return None;
    }
    let at = args.iter().position(|a| *a == token)?;
    std::str::from_utf8(args.get(at + 1)?).ok()?.parse().ok()
}

/// `key`'s string value on `master` now.
fn string(master: &Master, key: &[u8]) -> Option<Vec<u8>> {
    master.peek(key).and_then(|e| match &e.value {
        Value::String(v) => Some(v.clone()),
        _ => None,
    })
}

/// When the lease of `token`, which `key` holds, ends: its record's lease when the key is
/// stretched for its line (the record names the token and the key's expiry), else the key's
/// expiry.
fn lease_of(master: &Master, key: &[u8], token: &[u8]) -> Option<i64> {
    let expires = master.peek(key)?.expires_at?;
    let held = quorumlock::companion_key(&String::from_utf8_lossy(key), ":held");
    let record = string(master, held.as_bytes()).unwrap_or_default();
    let record = String::from_utf8_lossy(&record);
    let mut fields = record.rsplitn(3, '|');
    let (stretched, lease, of) = (fields.next(), fields.next(), fields.next());
    match (
        of,
        lease.and_then(|l| l.parse::<i64>().ok()),
        stretched.and_then(|s| s.parse::<i64>().ok()),
    ) {
        (Some(of), Some(lease), Some(stretched))
            if of.as_bytes() == token && stretched == expires =>
        {
            Some(lease)
        }
        _ => Some(expires),
    }
}

/// A key of an owner's lock that held another value while the lock's lease there lasted.
#[derive(Debug, Clone)]
pub struct LostKey {
    /// The key.
    pub key: String,
    /// The master.
    pub master: usize,
    /// The lock, by its token's fingerprint.
    pub lock: String,
    /// When it showed, from the run's start.
    pub at: Duration,
    /// The command it showed at: before it ran (a command the key no longer held the lock's
    /// value for), or after (a command that took the value away).
    pub command: String,
    /// How long the lock's lease there had still to run then.
    pub lease_left: Duration,
    /// What the key held.
    pub value: String,
    /// The owners' commands on that key and master, from the lock's grant on.
    pub commands: Vec<String>,
}

impl fmt::Display for LostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lock {} on {:?}: m{} held {} at {:.3} ms ({}), with {:?} of the lock's lease there \
             left",
            self.lock,
            self.key,
            self.master,
            self.value,
            self.at.as_secs_f64() * 1e3,
            self.command,
            self.lease_left,
        )
    }
}

/// A lock's lease on one master, as its grant and renewals made it.
#[derive(Debug, Clone, Copy)]
struct Lease {
    /// The grant, from the run's start.
    granted: Duration,
    /// Its end, on the master's clock (ms).
    until: i64,
}

/// The leases on one master and key, by lock token.
type Leases<'a> = BTreeMap<&'a [u8], Lease>;

/// Every key of an owner's lock in `executed` that held a value not the lock's while the
/// lock's lease there lasted (see the module docs), the first of each lock and master. `ops`
/// is the history with the owners' releases (`run::with_owner_releases`), `log` the masters'
/// data losses, `origin` the run's start.
pub fn lost_keys(executed: &[Command], ops: &[Op], log: &KeyLog, origin: Instant) -> Vec<LostKey> {
    let since = |t: Instant| t.saturating_duration_since(origin);
    let won: std::collections::BTreeSet<&[u8]> = ops
        .iter()
        .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
        .map(|op| op.token.as_bytes())
        .collect();
    let mut released: BTreeMap<&[u8], Duration> = BTreeMap::new();
    for op in ops.iter().filter(|op| op.kind == OpKind::Release) {
        let start = since(op.start);
        let first = released.entry(op.token.as_bytes()).or_insert(start);
        *first = (*first).min(start);
    }
    // By master and key: the leases of the locks that won, granted there and not over yet.
    let mut leases: BTreeMap<(usize, &[u8]), Leases<'_>> = BTreeMap::new();
    let mut lost = Vec::new();
    for c in executed {
        let held = leases.entry((c.master, c.key.as_slice())).or_default();
        // The lock's value must be there before the command runs, and after.
        for (phase, value) in [("before", &c.before), ("after", &c.after)] {
            held.retain(|lock, lease| {
                // Over for good: expired (a renewal then finds nothing to renew), released,
                // or lost with the master's data.
                if lease.until < c.master_ms
                    || released.get(lock).is_some_and(|r| *r <= c.at)
                    || log.lost_between(c.master, lease.granted, c.at)
                {
                    return false;
                }
                let text = String::from_utf8_lossy(lock);
                if lease.until <= c.master_ms + ROUNDING_MS
                    || value.as_deref().is_some_and(|v| belongs(v, &text))
                {
                    return true;
                }
                lost.push(LostKey {
                    key: String::from_utf8_lossy(&c.key).into_owned(),
                    master: c.master,
                    lock: TokenFingerprint::of(&text).to_string(),
                    at: c.at,
                    command: format!(
                        "{phase} {}'s {}",
                        TokenFingerprint::of(&String::from_utf8_lossy(&c.token)),
                        c.kind
                    ),
                    lease_left: Duration::from_millis((lease.until - c.master_ms).unsigned_abs()),
                    value: value.as_deref().map_or("nothing".to_owned(), shown),
                    commands: commands_on(executed, c, lease.granted),
                });
                false
            });
            if phase == "before" && won.contains(c.token.as_slice()) {
                renew(held, c);
            }
        }
    }
    lost
}

/// What `c` does to the leases `held` on its master and key: a grant starts one (or moves it
/// on), a renewal that runs while its lock's lease lasts moves it to the renewal's TTL from
/// then, never back (`PEXPIRE … GT`).
fn renew<'a>(held: &mut Leases<'a>, c: &'a Command) {
    match (&c.kind, c.lease) {
        (Kind::Acquire { .. }, Some(until)) => {
            let lease = held.entry(c.token.as_slice()).or_insert(Lease {
                granted: c.at,
                until,
            });
            lease.until = lease.until.max(until);
        }
        (Kind::Extend { ttl_ms }, _) => {
            if let Some(lease) = held.get_mut(c.token.as_slice()) {
                // Strictly: a record's lease ends at its last millisecond (`lua/extend.lua`
                // refuses a renewal then), a key's just after it; the stricter rule holds both.
                if lease.until > c.master_ms {
                    lease.until = lease.until.max(c.master_ms + ttl_ms);
                }
            }
        }
        _ => {}
    }
}

/// The owners' commands on `last`'s master and key, from `from` to `last`, one line each.
fn commands_on(executed: &[Command], last: &Command, from: Duration) -> Vec<String> {
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let shown_or_nothing = |v: &Option<Vec<u8>>| v.as_deref().map_or("nothing".to_owned(), shown);
    executed
        .iter()
        .filter(|c| c.master == last.master && c.key == last.key)
        .filter(|c| c.at >= from && c.at <= last.at)
        .map(|c| {
            format!(
                "{:>10.3} ms  m{} ({} ms on its clock)  {} {}: {} -> {}",
                ms(c.at),
                c.master,
                c.master_ms,
                TokenFingerprint::of(&String::from_utf8_lossy(&c.token)),
                c.kind,
                shown_or_nothing(&c.before),
                shown_or_nothing(&c.after)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock_testkit::Outcome;

    const L: &str = "ql-00000000000010000000000000000000@o";
    const A: &str = "ql-00000000000020000000000000000000@o";

    /// A command of `token` on master 0's key `r`, at `ms` on both clocks.
    fn ran(ms: i64, token: &str, kind: Kind, values: [Option<&str>; 2]) -> Command {
        let [before, after] = values.map(|v| v.map(|v| v.as_bytes().to_vec()));
        Command {
            at: Duration::from_millis(ms.unsigned_abs()),
            master_ms: ms,
            master: 0,
            key: b"r".to_vec(),
            token: token.as_bytes().to_vec(),
            lease: (after.as_deref() == Some(token.as_bytes())).then_some(ms + 1000),
            kind,
            before,
            after,
        }
    }

    fn op(t: Instant, token: &str, kind: OpKind, start_ms: u64) -> Op {
        Op {
            client: 1000,
            resource: "r".to_owned(),
            token: token.to_owned(),
            kind,
            start: t + Duration::from_millis(start_ms),
            end: t + Duration::from_millis(start_ms + 5),
            outcome: Outcome::Ok {
                valid_until: Some(t + Duration::from_secs(1)),
            },
            fence: None,
        }
    }

    /// The lock L granted at 0 ms (lease to 1,000 ms), taken over by the attempt A at 100 ms,
    /// renewed at 900 ms for 1 s (to 1,900 ms), and A's rollback at `rollback_ms`, leaving
    /// `left`.
    fn history(rollback_ms: i64, left: Option<&str>) -> Vec<Command> {
        let named = Kind::Acquire {
            named: Some(L.as_bytes().to_vec()),
        };
        vec![
            ran(0, L, Kind::Acquire { named: None }, [None, Some(L)]),
            ran(100, A, named, [Some(L), Some(A)]),
            ran(900, L, Kind::Extend { ttl_ms: 1000 }, [Some(A), Some(A)]),
            ran(rollback_ms, A, Kind::Cleanup, [Some(A), left]),
        ]
    }

    fn lost(commands: &[Command], ops: &[Op]) -> Vec<LostKey> {
        lost_keys(commands, ops, &KeyLog::default(), Instant::now())
    }

    #[test]
    fn a_rollback_that_leaves_a_renewed_lock_without_its_key_is_reported() {
        let t = Instant::now();
        let ops = [op(t, L, OpKind::Acquire, 0)];
        let found = lost(&history(1500, None), &ops);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].at, Duration::from_millis(1500));
        assert_eq!(found[0].lease_left, Duration::from_millis(400));
        assert!(
            found[0].command.starts_with("after"),
            "{}",
            found[0].command
        );
        // Given back, or past the lease its renewals kept: nothing to report.
        assert!(lost(&history(1500, Some(L)), &ops).is_empty());
        assert!(lost(&history(1950, None), &ops).is_empty());
    }

    #[test]
    fn a_key_gone_under_a_takeover_while_the_lock_renews_it_is_reported() {
        let t = Instant::now();
        let ops = [op(t, L, OpKind::Acquire, 0)];
        let mut commands = history(1950, None);
        // Before the rollback, the lock's next renewal finds the key gone.
        commands.insert(3, ran(1300, L, Kind::Extend { ttl_ms: 1000 }, [None, None]));
        let found = lost(&commands, &ops);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].at, Duration::from_millis(1300));
        assert!(
            found[0].command.starts_with("before"),
            "{}",
            found[0].command
        );
    }

    #[test]
    fn a_lock_released_or_never_won_owes_nothing() {
        let t = Instant::now();
        let released = [
            op(t, L, OpKind::Acquire, 0),
            op(t, L, OpKind::Release, 1400),
        ];
        assert!(lost(&history(1500, None), &released).is_empty());
        assert!(lost(&history(1500, None), &[]).is_empty());
    }

    #[test]
    fn a_renewal_after_the_lease_ended_keeps_nothing() {
        let t = Instant::now();
        let mut commands = history(1500, None);
        // The renewal runs after the grant's lease ended: the key had gone without the attempt.
        commands[2] = ran(1100, L, Kind::Extend { ttl_ms: 1000 }, [None, None]);
        let ops = [op(t, L, OpKind::Acquire, 0)];
        assert!(lost(&commands, &ops).is_empty());
    }
}

//! The third checker, on the requests as they left the clients (see [`wire`](super::wire)): an
//! attempt under an owner id, once decided, names no new value for a takeover. Lost (or won too
//! late), it names none; won, only a value it had named before it won (`Takeovers::note` in
//! `keys.rs`). A request of a decided attempt still out may land late, and this rule is what
//! keeps such a request from taking over a key the owner's next grant counts on.
//!
//! With the stamp order (an attempt takes over only values of the owner stamped before it) a
//! breach of this rule no longer takes a later grant's key by itself: it takes an earlier lock's
//! key, which that lock's extend then finds gone, or swaps values of the owner about. Neither
//! shows to the overlap and quorum checkers, which count any later value of the owner as the
//! lock's; so the rule is checked where the client applies it, on the wire.
//!
//! When a decision fell is not on the wire. A won attempt is decided by the time its acquire
//! returned (the history's end of it); a failed one by the time its rollback went out (its first
//! cleanup on the wire), or else by the time its worker's next attempt began.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use quorumlock_testkit::{Op, OpKind, TokenFingerprint};

use super::wire::{OwnerRequest, RequestKind};

/// How long after its acquire returned a won attempt's request may still have been written
/// before the return: the history's times are read a step apart from the wire's.
const SLACK: Duration = Duration::from_millis(2);

/// A takeover named by an attempt already decided.
#[derive(Debug, Clone)]
pub struct LateTakeover {
    /// The worker whose attempt it was.
    pub worker: usize,
    /// The master it went to.
    pub master: usize,
    /// The attempt's token, by its fingerprint.
    pub token: String,
    /// The value it named, by its fingerprint.
    pub named: String,
    /// When it left the client, from the run's start.
    pub sent: Duration,
    /// When the attempt was decided at the latest, from the run's start, and how.
    pub decided: Duration,
    /// Whether the attempt had won.
    pub won: bool,
    /// The attempt's requests, one line each (time in ms from the run's start, master, the
    /// value named).
    pub requests: Vec<String>,
}

impl fmt::Display for LateTakeover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (how, why, what) = if self.won {
            ("won", "", ", a value it had not named before it won")
        } else {
            (
                "failed",
                " (its rollback or its worker's next attempt had begun)",
                "",
            )
        };
        write!(
            f,
            "worker {}'s attempt {} {how} by {:.3} ms{why}, then at {:.3} ms named {} to m{} for \
             a takeover{what}",
            self.worker,
            self.token,
            ms(self.decided),
            ms(self.sent),
            self.named,
            self.master
        )
    }
}

/// Every takeover in `requests` named by an attempt already decided, by `ops` (the history)
/// and the requests themselves; `origin` is the run's start.
pub fn late_takeovers(requests: &[OwnerRequest], ops: &[Op], origin: Instant) -> Vec<LateTakeover> {
    let since = |t: Instant| t.saturating_duration_since(origin);
    let won: BTreeMap<&[u8], Instant> = ops
        .iter()
        .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
        .map(|op| (op.token.as_bytes(), op.end))
        .collect();
    // Each worker's attempts in the order they began, to find when a failed one was decided.
    let mut began: BTreeMap<usize, Vec<(&[u8], Instant)>> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.kind == RequestKind::Acquire) {
        let attempts = began.entry(r.worker).or_default();
        if !attempts.iter().any(|(t, _)| *t == r.token.as_slice()) {
            attempts.push((&r.token, r.sent));
        }
    }
    let next_began = |worker: usize, token: &[u8]| {
        let attempts = began.get(&worker)?;
        let i = attempts.iter().position(|(t, _)| *t == token)?;
        attempts.get(i + 1).map(|(_, at)| *at)
    };
    let rolled_back = |token: &[u8]| {
        requests
            .iter()
            .find(|r| r.token == token && r.kind == RequestKind::Cleanup)
            .map(|r| r.sent)
    };
    let mut late = Vec::new();
    for r in requests {
        let Some(named) = &r.named else { continue };
        let (decided, won) = match won.get(r.token.as_slice()) {
            Some(&end) => {
                let named_by_then = requests.iter().any(|e| {
                    e.token == r.token && e.sent <= end + SLACK && e.named.as_ref() == Some(named)
                });
                if r.sent <= end + SLACK || named_by_then {
                    continue;
                }
                (end, true)
            }
            None => {
                let decided = [rolled_back(&r.token), next_began(r.worker, &r.token)]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(decided) = decided else { continue };
                if r.sent <= decided {
                    continue;
                }
                (decided, false)
            }
        };
        late.push(LateTakeover {
            worker: r.worker,
            master: r.master,
            token: fingerprint(&r.token),
            named: fingerprint(named),
            sent: since(r.sent),
            decided: since(decided),
            won,
            requests: requests
                .iter()
                .filter(|e| e.token == r.token)
                .map(|e| {
                    format!(
                        "{:>10.3} ms  m{}  {}",
                        since(e.sent).as_secs_f64() * 1e3,
                        e.master,
                        e.named
                            .as_deref()
                            .map_or("(names nothing)".to_owned(), |n| {
                                format!("names {}", fingerprint(n))
                            })
                    )
                })
                .collect(),
        });
    }
    late
}

fn fingerprint(value: &[u8]) -> String {
    TokenFingerprint::of(&String::from_utf8_lossy(value)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock_testkit::Outcome;

    const A: &str = "ql-00000000000010000000000000000000@o";
    const B: &str = "ql-00000000000020000000000000000000@o";
    const C: &str = "ql-00000000000030000000000000000000@o";

    fn request(
        at: Instant,
        ms: u64,
        worker: usize,
        token: &str,
        named: Option<&str>,
    ) -> OwnerRequest {
        OwnerRequest {
            sent: at + Duration::from_millis(ms),
            worker,
            master: 0,
            token: token.as_bytes().to_vec(),
            named: named.map(|n| n.as_bytes().to_vec()),
            kind: RequestKind::Acquire,
        }
    }

    fn won(at: Instant, token: &str, end_ms: u64) -> Op {
        Op {
            client: 1000,
            resource: "r0".to_owned(),
            token: token.to_owned(),
            kind: OpKind::Acquire,
            start: at,
            end: at + Duration::from_millis(end_ms),
            outcome: Outcome::Ok {
                valid_until: Some(at + Duration::from_secs(1)),
            },
            fence: None,
        }
    }

    #[test]
    fn a_failed_attempt_names_nothing_once_its_worker_attempts_again() {
        let t = Instant::now();
        let requests = [
            request(t, 0, 1, B, None),
            request(t, 5, 1, B, Some(A)),
            request(t, 50, 1, C, None),
            request(t, 60, 1, B, Some(A)),
        ];
        let late = late_takeovers(&requests, &[], t);
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!(
            (late[0].sent, late[0].won),
            (Duration::from_millis(60), false)
        );
        assert_eq!(late[0].decided, Duration::from_millis(50));
    }

    #[test]
    fn a_failed_attempt_names_nothing_once_its_rollback_went_out() {
        let t = Instant::now();
        let rollback = OwnerRequest {
            kind: RequestKind::Cleanup,
            ..request(t, 30, 1, B, None)
        };
        let requests = [
            request(t, 0, 1, B, None),
            request(t, 5, 1, B, Some(A)),
            request(t, 29, 1, B, Some(A)),
            rollback,
            request(t, 31, 1, B, Some(A)),
        ];
        let late = late_takeovers(&requests, &[], t);
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!(late[0].sent, Duration::from_millis(31));
    }

    #[test]
    fn a_won_attempt_names_only_what_it_named_before_it_won() {
        let t = Instant::now();
        let requests = [
            request(t, 0, 1, C, None),
            request(t, 5, 1, C, Some(A)),
            request(t, 40, 1, C, Some(A)),
            request(t, 41, 1, C, Some(B)),
        ];
        let late = late_takeovers(&requests, &[won(t, C, 20)], t);
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].won);
        assert_eq!(late[0].named, fingerprint(B.as_bytes()));
    }
}

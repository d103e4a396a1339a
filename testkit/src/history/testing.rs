//! Shorthands for building [`Op`]s in the unit tests of this module.

use super::{Op, OpKind, Outcome};
use std::time::{Duration, Instant};

/// Instants at millisecond offsets from a common base.
pub(super) struct Clock(pub(super) Instant);

impl Clock {
    pub(super) fn new() -> Self {
        Clock(Instant::now())
    }

    pub(super) fn at(&self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }

    /// A successful acquire of resource `"r"` over `[start, end]` ms, valid until `valid_until` ms.
    pub(super) fn acquire(
        &self,
        client: usize,
        token: &str,
        (start, end): (u64, u64),
        valid_until: u64,
        fence: Option<u64>,
    ) -> Op {
        Op {
            client,
            resource: "r".into(),
            token: token.into(),
            kind: OpKind::Acquire,
            start: self.at(start),
            end: self.at(end),
            outcome: Outcome::Ok {
                valid_until: Some(self.at(valid_until)),
            },
            fence,
        }
    }

    /// A successful extend over `[start, end]` ms, valid until `until` ms.
    pub(super) fn extend(
        &self,
        client: usize,
        token: &str,
        (start, end): (u64, u64),
        until: u64,
    ) -> Op {
        Op {
            kind: OpKind::Extend,
            ..self.acquire(client, token, (start, end), until, None)
        }
    }

    /// A successful release over `[start, end]` ms.
    pub(super) fn release(&self, client: usize, token: &str, (start, end): (u64, u64)) -> Op {
        Op {
            kind: OpKind::Release,
            outcome: Outcome::Ok { valid_until: None },
            ..self.acquire(client, token, (start, end), end, None)
        }
    }
}

/// `op`, failed.
pub(super) fn failed(op: Op) -> Op {
    Op {
        outcome: Outcome::Failed {
            reason: "no quorum".into(),
        },
        ..op
    }
}

//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, behind the `metrics`
//! feature; without it every call here compiles to nothing.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `quorumlock_wait_seconds` | histogram | `primitive`, `outcome` | time from an acquire call to its result |
//! | `quorumlock_hold_seconds` | histogram | `primitive` | time from acquiring a lock to its release (or drop) |
//! | `quorumlock_waiting` | gauge | `primitive` | acquire calls in progress |
//! | `quorumlock_held` | gauge | `primitive` | locks held now |
//! | `quorumlock_node_errors_total` | counter | `node`, `kind` | failed requests per master |
//!
//! Labels are low-cardinality by construction: `primitive` is one of `mutex`, `multi`,
//! `permit`, `read`, `write`, `owned`, `leader`; `outcome` is `acquired`, `contended`,
//! `unavailable` or `failed`; `node` is a configured master's `host:port`; `kind` is
//! `timeout`, `unresponsive`, `redis` or `protocol`. Resource names never appear.

#[cfg(feature = "metrics")]
use std::time::Instant;

use crate::error::{Error, NodeError, NodeErrorKind};
#[cfg(feature = "metrics")]
use crate::seam;

/// One acquire call in progress: counted in `quorumlock_waiting` until it ends, then its
/// duration goes to `quorumlock_wait_seconds`.
#[derive(Debug)]
pub(crate) struct Waiting {
    // Without the feature there is nothing to record: not even the clock is read.
    #[cfg(feature = "metrics")]
    primitive: &'static str,
    #[cfg(feature = "metrics")]
    start: Instant,
}

impl Waiting {
    pub(crate) fn start(primitive: &'static str) -> Waiting {
        #[cfg(feature = "metrics")]
        metrics::gauge!("quorumlock_waiting", "primitive" => primitive).increment(1.0);
        #[cfg(not(feature = "metrics"))]
        let _ = primitive;
        Waiting {
            #[cfg(feature = "metrics")]
            primitive,
            #[cfg(feature = "metrics")]
            start: seam::now(),
        }
    }

    /// The call ended with `result`.
    pub(crate) fn end<T>(self, result: &Result<T, Error>) {
        #[cfg(feature = "metrics")]
        {
            let outcome = match result {
                Ok(_) => "acquired",
                Err(e) if e.is_contention() => "contended",
                Err(e) if e.is_unavailable() => "unavailable",
                Err(_) => "failed",
            };
            metrics::histogram!(
                "quorumlock_wait_seconds",
                "primitive" => self.primitive,
                "outcome" => outcome
            )
            .record(seam::elapsed(self.start).as_secs_f64());
        }
        let _ = result;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("quorumlock_waiting", "primitive" => self.primitive).decrement(1.0);
    }
}

/// A lock held: counted in `quorumlock_held` until it ends, then its hold time goes to
/// `quorumlock_hold_seconds`.
#[derive(Debug)]
pub(crate) struct Holding {
    // Without the feature there is nothing to record: not even the clock is read.
    #[cfg(feature = "metrics")]
    primitive: &'static str,
    #[cfg(feature = "metrics")]
    start: Instant,
}

impl Holding {
    pub(crate) fn start(primitive: &'static str) -> Holding {
        #[cfg(feature = "metrics")]
        metrics::gauge!("quorumlock_held", "primitive" => primitive).increment(1.0);
        #[cfg(not(feature = "metrics"))]
        let _ = primitive;
        Holding {
            #[cfg(feature = "metrics")]
            primitive,
            #[cfg(feature = "metrics")]
            start: seam::now(),
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!("quorumlock_held", "primitive" => self.primitive).decrement(1.0);
            metrics::histogram!("quorumlock_hold_seconds", "primitive" => self.primitive)
                .record(seam::elapsed(self.start).as_secs_f64());
        }
    }
}

/// A failed request to a master (refusals are answers, not errors: not counted).
pub(crate) fn node_error(error: &NodeError) {
    let kind = match error.kind() {
        NodeErrorKind::Held | NodeErrorKind::TokenGone => return,
        NodeErrorKind::Timeout(_) => "timeout",
        NodeErrorKind::Unresponsive => "unresponsive",
        NodeErrorKind::Redis(_) => "redis",
        _ => "protocol",
    };
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "quorumlock_node_errors_total",
        "node" => error.node().to_owned(),
        "kind" => kind
    )
    .increment(1);
    let _ = kind;
}

//! What a run is made of, whatever its workload: the masters, the clients' configuration, when
//! to stop — and the one place that says how the chaos clients' keys are named.

use std::time::Duration;

use quorumlock::{Error, Redlock};

/// Every lock key of a chaos run starts with this.
pub(super) const KEY_PREFIX: &str = "chaos:";

/// The lock key of `resource`, as the chaos clients' library builds it. Every other key name the
/// chaos code computes starts from this one: change the layout here, and only here.
pub(super) fn lock_key(resource: &str) -> String {
    quorumlock::resource_key(KEY_PREFIX, resource)
}

/// The `KEYS` pattern every key of a chaos run matches: its lock keys (`chaos:<resource>`) and
/// their companions (`{chaos:<resource>}:queue`, ..., see `quorumlock::companion_key`).
pub(super) fn keys_pattern() -> String {
    format!("*{KEY_PREFIX}*")
}

/// What a scenario runs: the masters, the clients and how they behave. What the clients do is
/// their [`Workload`](super::workload::Workload), given to the engine beside the setup.
#[derive(Clone, Debug)]
pub(super) struct Setup {
    pub(super) masters: usize,
    pub(super) aof: bool,
    pub(super) proxied: bool,
    /// Each client also has proxies of its own, one straight to each master, so that one client
    /// can be cut off alone; the network faults of a master then strike every proxy in front of
    /// it.
    pub(super) own_proxies: bool,
    pub(super) clients: usize,
    pub(super) resources: usize,
    pub(super) ttl: Duration,
    pub(super) node_timeout: Duration,
    pub(super) retry_count: u32,
    pub(super) retry_delay: Duration,
    pub(super) retry_jitter: Duration,
    /// How long `acquire` waits in line (`None`: the library's default).
    pub(super) acquire_timeout: Option<Duration>,
    pub(super) fencing: bool,
    /// Longest sleep inside a critical section.
    pub(super) critical_section: Duration,
    /// Chance that a holder extends its lock once inside the critical section.
    pub(super) extend_chance: f64,
    /// Stop once this many acquisitions succeeded (and the workload reached its own goal) ...
    pub(super) target: usize,
    /// ... or after this long, whichever comes first.
    pub(super) time_limit: Duration,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            masters: 5,
            aof: false,
            proxied: false,
            own_proxies: false,
            clients: 8,
            resources: 8,
            ttl: Duration::from_millis(200),
            node_timeout: Duration::from_millis(30),
            retry_count: 3,
            retry_delay: Duration::from_millis(4),
            retry_jitter: Duration::from_millis(3),
            acquire_timeout: None,
            fencing: true,
            critical_section: Duration::from_millis(2),
            extend_chance: 0.1,
            target: 2_000,
            time_limit: Duration::from_secs(40),
        }
    }
}

impl Setup {
    /// The client every client task uses, over `urls`.
    pub(super) fn redlock(&self, urls: &[String]) -> Result<Redlock, Error> {
        let builder = Redlock::builder(urls)
            .key_prefix(KEY_PREFIX)
            .node_timeout(self.node_timeout)
            .connect_timeout(Duration::from_millis(500))
            .retry_count(self.retry_count)
            .retry_delay(self.retry_delay)
            .retry_jitter(self.retry_jitter)
            .fencing(self.fencing);
        match self.acquire_timeout {
            Some(timeout) => builder.acquire_timeout(timeout),
            None => builder,
        }
        .build()
    }

    /// The name of resource `i` of the lock workloads: `r<i>`.
    pub(super) fn resource(i: usize) -> String {
        format!("r{i}")
    }

    /// How long a waiter's place in line lasts without renewal, as the library documents it:
    /// ten node timeouts, at least 50 ms. What a waiter that dies may cost its line.
    pub(super) fn entry_lease(&self) -> Duration {
        (self.node_timeout * 10).max(Duration::from_millis(50))
    }

    /// The drift allowance the library uses for this TTL (default factor).
    pub(super) fn drift(&self) -> Duration {
        self.ttl.mul_f64(quorumlock::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2)
    }
}

//! What a run is made of, whatever its workload: the masters, the clients' configuration, when
//! to stop — and the one place that says how the chaos clients' keys are named.

use std::path::PathBuf;
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
/// their `Workload` (in `workload`), given to the engine beside the setup.
///
/// Every client behaves as the setup's own fields say, unless the setup gives it a [`Tuning`]
/// of its own ([`tunings`](Setup::tunings), by client): see [`Setup::tuning`].
#[derive(Clone, Debug)]
pub(super) struct Setup {
    pub(super) masters: usize,
    pub(super) aof: bool,
    /// The server binary the masters run (`None`: the testkit's default, `redis-server`).
    pub(super) server: Option<PathBuf>,
    /// Whether the masters run under a clock of their own (libfaketime, real to begin with), so
    /// that a fault driver can change it (see `Ctl::set_clock` in `ctl`).
    pub(super) clocks: bool,
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
    /// Per client, how it behaves, when clients differ (empty: all as the fields above say).
    pub(super) tunings: Vec<Tuning>,
}

/// How one client is configured and behaves: its library settings, its TTLs, how it holds.
/// [`Setup::tuning`] gives every client one, from the setup's fields unless the setup has one
/// of its own for that client.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Tuning {
    pub(super) ttl: Duration,
    /// The TTLs its extends ask for, drawn uniformly in this range (`None`: its `ttl`).
    pub(super) extend_ttl: Option<(Duration, Duration)>,
    pub(super) node_timeout: Duration,
    pub(super) retry_count: u32,
    pub(super) retry_delay: Duration,
    pub(super) retry_jitter: Duration,
    pub(super) drift_factor: f64,
    pub(super) fencing: bool,
    /// Its fencing counters' grace (`None`: the library's default).
    pub(super) fence_grace: Option<Duration>,
    /// How long `acquire` waits in line (`None`: the library's default).
    pub(super) acquire_timeout: Option<Duration>,
    /// The owner id its locks are taken under (`acquire_as`), if any.
    pub(super) owner: Option<String>,
    /// When its grants count (`None`: the library's default, once answered).
    pub(super) durability: Option<quorumlock::Durability>,
    /// Longest sleep inside an ordinary critical section.
    pub(super) critical_section: Duration,
    /// Chance that a holder extends its lock once inside the critical section.
    pub(super) extend_chance: f64,
    /// Chance that a hold lasts until its lease is nearly over (a tenth of the TTL left), not
    /// a short critical section.
    pub(super) long_hold_chance: f64,
    /// The pause between two holds, drawn uniformly in this range (`None`: none).
    pub(super) think: Option<(Duration, Duration)>,
}

impl Tuning {
    /// The client this tuning describes, over `urls`; an invalid configuration is returned.
    pub(super) fn redlock(&self, urls: &[String]) -> Result<Redlock, Error> {
        let mut builder = Redlock::builder(urls)
            .key_prefix(KEY_PREFIX)
            .node_timeout(self.node_timeout)
            .connect_timeout(Duration::from_millis(500))
            .retry_count(self.retry_count)
            .retry_delay(self.retry_delay)
            .retry_jitter(self.retry_jitter)
            .drift_factor(self.drift_factor)
            .fencing(self.fencing);
        if let Some(grace) = self.fence_grace {
            builder = builder.fence_grace(grace);
        }
        if let Some(timeout) = self.acquire_timeout {
            builder = builder.acquire_timeout(timeout);
        }
        if let Some(durability) = self.durability {
            builder = builder.durability(durability);
        }
        builder.build()
    }

    /// The drift allowance the library uses for `ttl` with this tuning's factor.
    pub(super) fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
    }

    /// How much lease a holder leaves unused: it stops touching the resource this long before
    /// its deadline.
    pub(super) fn margin(&self) -> Duration {
        self.ttl / 10
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            masters: 5,
            aof: false,
            server: None,
            clocks: false,
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
            tunings: Vec::new(),
        }
    }
}

impl Setup {
    /// How client `client` behaves: its own [`Tuning`] when the setup has one, else the
    /// setup's fields.
    pub(super) fn tuning(&self, client: usize) -> Tuning {
        match self.tunings.get(client) {
            Some(tuning) => tuning.clone(),
            None => Tuning {
                ttl: self.ttl,
                extend_ttl: None,
                node_timeout: self.node_timeout,
                retry_count: self.retry_count,
                retry_delay: self.retry_delay,
                retry_jitter: self.retry_jitter,
                drift_factor: quorumlock::DEFAULT_DRIFT_FACTOR,
                fencing: self.fencing,
                fence_grace: None,
                acquire_timeout: self.acquire_timeout,
                owner: None,
                durability: None,
                critical_section: self.critical_section,
                extend_chance: self.extend_chance,
                long_hold_chance: 0.0,
                think: None,
            },
        }
    }

    /// Client `client`'s TTL.
    pub(super) fn ttl_of(&self, client: usize) -> Duration {
        self.tunings.get(client).map_or(self.ttl, |t| t.ttl)
    }

    /// The client client task `client` uses, over `urls`.
    pub(super) fn redlock(&self, client: usize, urls: &[String]) -> Result<Redlock, Error> {
        self.tuning(client).redlock(urls)
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

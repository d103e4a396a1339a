//! The seam between the library and what it does not control: the monotonic clock, the wall
//! clock and randomness. Every read of them in the library goes through here (and every
//! connection to a standalone master through `node::target`, which asks `connect`), so that a
//! deterministic simulation can supply each (see the `simulation` feature); in production each
//! function is what it replaces, or a thin inline wrapper around it.
//!
//! * Time: [`now`] is tokio's clock, which is `std::time::Instant::now()` unless tokio's
//!   `test-util` feature is on and the runtime's time is paused: then it is the runtime's
//!   virtual time, the time every `tokio::time::sleep` and `timeout` of the library already
//!   follows. A deadline the library computes and one it sleeps until are read from one clock.
//! * The wall clock: [`wall_clock`], `SystemTime::now()`.
//! * Randomness: [`with_rng`], [`random_u64`], [`random_uuid`], the thread's generator (and the
//!   operating system's, for tokens, through `uuid`).
//!
//! Hash maps: the library's `HashMap`s (`task_holds`, the waiters of `wakeup::hub`) are only
//! ever looked up by key, never iterated, so their random iteration order cannot steer what the
//! library does; the collections it iterates to decide what to send are ordered (`BTreeMap`,
//! `BTreeSet`, `Vec`).

use std::time::{Duration, Instant, SystemTime};

use rand::RngCore;

/// Now, on the monotonic clock: tokio's, which is the operating system's in production and the
/// runtime's virtual time while it is paused (tests, simulations).
#[inline]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// How long since `since`, on the clock of [`now`]; zero for an instant still to come.
#[inline]
pub(crate) fn elapsed(since: Instant) -> Duration {
    now().saturating_duration_since(since)
}

/// Now, on the wall clock.
#[inline]
pub(crate) fn wall_clock() -> SystemTime {
    #[cfg(feature = "simulation")]
    if let Some(now) = crate::simulation::wall_clock() {
        return now;
    }
    SystemTime::now()
}

/// `f` on this thread's random generator.
#[inline]
pub(crate) fn with_rng<T>(f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
    #[cfg(feature = "simulation")]
    let f = match crate::simulation::with_rng(f) {
        Ok(value) => return value,
        Err(f) => f,
    };
    f(&mut rand::rng())
}

/// 64 random bits.
#[inline]
pub(crate) fn random_u64() -> u64 {
    #[cfg(feature = "simulation")]
    if let Ok(value) = crate::simulation::with_rng(|rng| rng.next_u64()) {
        return value;
    }
    rand::random()
}

/// A random (version 4) UUID: 122 random bits from the operating system.
#[inline]
pub(crate) fn random_uuid() -> uuid::Uuid {
    #[cfg(feature = "simulation")]
    if let Ok(bytes) = crate::simulation::with_rng(|rng| {
        let mut bytes = [0u8; 16];
        rng.fill_bytes(&mut bytes);
        bytes
    }) {
        return uuid::Builder::from_random_bytes(bytes).into_uuid();
    }
    uuid::Uuid::new_v4()
}

/// The stream a simulation's connector opens to the master at `host:port`; `None` without one
/// (always, without the `simulation` feature): connect as usual.
#[cfg(feature = "simulation")]
pub(crate) fn connect(host: &str, port: u16) -> Option<crate::simulation::Connecting> {
    crate::simulation::connect(host, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_monotonic_clock_follows_paused_time() {
        let start = now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(elapsed(start), Duration::from_secs(3600));
        assert_eq!(now(), tokio::time::Instant::now().into_std());
    }

    #[test]
    fn random_uuids_are_version_4() {
        let uuid = random_uuid();
        assert_eq!(uuid.get_version_num(), 4);
        assert_ne!(uuid, random_uuid());
    }
}

//! **Not for production, and not covered by semver** (the `simulation` feature): the overrides
//! through which a deterministic simulation replaces what the library would otherwise take
//! from the operating system. Any item here may change or go in any release.
//!
//! A simulation (tokio's paused time, or [turmoil](https://docs.rs/turmoil), which runs every
//! host in one thread on virtual time) makes a run a function of its seed only if every source
//! of nondeterminism the library reads goes through it. The library reads each of them through
//! one place, and this module replaces each:
//!
//! | source | production | here |
//! |---|---|---|
//! | monotonic clock | `std::time::Instant::now()` | tokio's clock: virtual under paused time, nothing to install |
//! | wall clock (a waiter's place in line) | `SystemTime::now()` | [`set_wall_clock`] |
//! | randomness (tokens, waiter and client ids, retry jitter, a semaphore's first slot) | the operating system / thread RNG | [`seed_rng`]: ChaCha8 from a seed |
//! | connections to standalone masters (requests and wake-ups) | the `redis` crate's TCP connect | [`set_connector`] |
//!
//! Every override is **per thread**: a simulation runs in one thread, and tests run many
//! simulations in parallel threads, each with its own. A thread with no override installed
//! behaves as in production. [`reset`] removes this thread's overrides.
//!
//! What stays outside: Redis Cluster and Sentinel voters, `unix://` masters and TLS masters
//! connect as in production (the connector is for plain `redis://host:port` masters), and the
//! `redis` crate's own internals (a cluster connection's retry jitter) are not seeded. The
//! library spawns no OS threads and uses no `spawn_blocking`: every task it starts is a tokio
//! task on the caller's runtime.
//!
//! ```no_run
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use quorumlock::simulation;
//!
//! simulation::seed_rng(42);
//! // Each simulated process may add its own offset or skew here.
//! simulation::set_wall_clock(|| UNIX_EPOCH + Duration::from_secs(1_700_000_000));
//! simulation::set_connector(|host, port| {
//!     let addr = format!("{host}:{port}");
//!     Box::pin(async move {
//!         // turmoil::net::TcpStream::connect(addr) in a turmoil simulation.
//!         let stream = tokio::net::TcpStream::connect(addr).await?;
//!         Ok(Box::new(stream) as Box<dyn simulation::Stream>)
//!     })
//! });
//! // ... run the simulation ...
//! simulation::reset();
//! ```

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::time::SystemTime;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a master, as a [connector](set_connector) opens it: anything that reads and
/// writes asynchronously (`turmoil::net::TcpStream`, `tokio::net::TcpStream`, a duplex pipe).
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A connection being opened by a [connector](set_connector).
pub type Connecting = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

type WallClock = Rc<dyn Fn() -> SystemTime>;
type Connector = Rc<dyn Fn(&str, u16) -> Connecting>;

/// This thread's overrides; `None` is production's behaviour.
#[derive(Default)]
struct Overrides {
    rng: Option<ChaCha8Rng>,
    wall_clock: Option<WallClock>,
    connector: Option<Connector>,
}

thread_local! {
    static OVERRIDES: RefCell<Overrides> = RefCell::new(Overrides::default());
}

/// Reads this thread's overrides; `None` while the thread is being torn down or the overrides
/// are being changed (neither happens during a simulation's run).
fn read<T>(f: impl FnOnce(&mut Overrides) -> T) -> Option<T> {
    OVERRIDES
        .try_with(|cell| cell.try_borrow_mut().ok().map(|mut o| f(&mut o)))
        .ok()
        .flatten()
}

/// From now on, every random value the library draws on this thread (lock tokens, waiter and
/// client ids, retry jitter, a semaphore's first slot) comes from ChaCha8 seeded with `seed`,
/// a generator whose output for a seed does not change between versions.
pub fn seed_rng(seed: u64) {
    read(|o| o.rng = Some(ChaCha8Rng::seed_from_u64(seed)));
}

/// From now on, the library reads the wall clock on this thread from `clock` (it orders the
/// waiters of a line by their client's wall clock). The closure runs in the task that reads
/// the clock, so a simulation can give each simulated process a clock of its own (an offset,
/// a skew) by asking which process runs now.
pub fn set_wall_clock(clock: impl Fn() -> SystemTime + 'static) {
    read(|o| o.wall_clock = Some(Rc::new(clock)));
}

/// From now on, every connection to a standalone master (`redis://host:port`) opened on this
/// thread, for requests and for wake-ups alike, is a stream `connect(host, port)` opens, with
/// the library's usual set-up on it (`HELLO` or `AUTH` and `SELECT` as the URL says, then the
/// scripts, the checks and the key layout marker). `host` is spelled as in the URL.
pub fn set_connector(connect: impl Fn(&str, u16) -> Connecting + 'static) {
    read(|o| o.connector = Some(Rc::new(connect)));
}

/// Removes every override of this thread: production's behaviour again.
pub fn reset() {
    read(|o| *o = Overrides::default());
}

/// The overriding wall clock's reading, if one is installed.
pub(crate) fn wall_clock() -> Option<SystemTime> {
    // Called outside the borrow, so that the clock may itself install overrides.
    let clock = read(|o| o.wall_clock.clone()).flatten()?;
    Some(clock())
}

/// `f` on the seeded generator, if one is installed; `f` back otherwise.
pub(crate) fn with_rng<T, F>(f: F) -> Result<T, F>
where
    F: FnOnce(&mut dyn RngCore) -> T,
{
    // Taken out while `f` runs, so that nothing is borrowed across it.
    let Some(mut rng) = read(|o| o.rng.take()).flatten() else {
        return Err(f);
    };
    let value = f(&mut rng);
    read(|o| {
        if o.rng.is_none() {
            o.rng = Some(rng);
        }
    });
    Ok(value)
}

/// The connection the installed connector opens to `host:port`, if one is installed.
pub(crate) fn connect(host: &str, port: u16) -> Option<Connecting> {
    let connector = read(|o| o.connector.clone()).flatten()?;
    Some(connector(host, port))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::retry::RetryPolicy;
    use crate::seam;
    use crate::token::LockToken;

    /// What one run reads through the seam: tokens, jitter, ids, wall-clock readings and a
    /// semaphore's first slot, in the order the library would draw them.
    #[derive(Debug, PartialEq)]
    struct Reads {
        tokens: Vec<String>,
        delays: Vec<Duration>,
        ids: Vec<u64>,
        walls: Vec<SystemTime>,
        slots: Vec<usize>,
    }

    fn run(seed: u64) -> Reads {
        reset();
        seed_rng(seed);
        // A clock that advances one millisecond per reading, from an offset of this process.
        let ticks = Rc::new(std::cell::Cell::new(0u64));
        let clock = ticks.clone();
        set_wall_clock(move || {
            clock.set(clock.get() + 1);
            UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(clock.get())
        });
        let policy = RetryPolicy {
            retries: 3,
            delay: Duration::from_millis(200),
            jitter: Duration::from_millis(100),
        };
        let mut reads = Reads {
            tokens: Vec::new(),
            delays: Vec::new(),
            ids: Vec::new(),
            walls: Vec::new(),
            slots: Vec::new(),
        };
        for _ in 0..4 {
            reads.tokens.push(LockToken::generate().expose().to_owned());
            reads.delays.push(seam::with_rng(|rng| policy.delay(rng)));
            reads.ids.push(seam::random_u64());
            reads.walls.push(seam::wall_clock());
            reads
                .slots
                .push(seam::with_rng(|rng| rand::Rng::random_range(rng, 0..7)));
        }
        reset();
        reads
    }

    #[test]
    fn two_runs_with_one_seed_read_the_same_tokens_jitter_ids_and_clock() {
        let first = run(42);
        assert_eq!(first, run(42));
        assert_ne!(first.tokens, run(43).tokens);
        assert_ne!(first.delays, run(43).delays);
        // The readings are not constant: the generator moves on with each draw.
        assert_ne!(first.tokens[0], first.tokens[1]);
        assert_ne!(first.ids[0], first.ids[1]);
        assert!(first.walls.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_seeded_token_keeps_the_shape_of_every_token() {
        seed_rng(7);
        let token = LockToken::generate().expose().to_owned();
        reset();
        let bits = token.strip_prefix("ql-").unwrap_or_default();
        assert_eq!(bits.len(), 32, "{token}");
        assert!(bits.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        // A version 4 UUID, like the operating system's: version nibble 4, variant 10xx.
        assert_eq!(&bits[12..13], "4", "{token}");
        assert!(matches!(&bits[16..17], "8" | "9" | "a" | "b"), "{token}");
    }

    #[test]
    fn overrides_are_per_thread_and_gone_after_reset() {
        seed_rng(1);
        set_wall_clock(|| UNIX_EPOCH);
        let elsewhere = std::thread::spawn(|| {
            (
                LockToken::generate().expose().to_owned(),
                LockToken::generate().expose().to_owned(),
                seam::wall_clock(),
            )
        })
        .join()
        .unwrap();
        assert_ne!(elsewhere.0, elsewhere.1);
        assert!(elsewhere.2 > UNIX_EPOCH + Duration::from_secs(1_600_000_000));
        assert_eq!(seam::wall_clock(), UNIX_EPOCH);
        reset();
        assert!(seam::wall_clock() > UNIX_EPOCH + Duration::from_secs(1_600_000_000));
        seed_rng(1);
        let seeded = LockToken::generate().expose().to_owned();
        reset();
        assert_ne!(seeded, LockToken::generate().expose().to_owned());
    }
}

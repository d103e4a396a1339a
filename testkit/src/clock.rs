//! A clock nemesis: servers whose wall clock is not the real one.
//!
//! A [`Clock`] given to [`RedisServerBuilder::clock`](crate::RedisServerBuilder::clock) starts
//! the server under [libfaketime](https://github.com/wolfcw/libfaketime) (`LD_PRELOAD`), which
//! shifts and scales what the process reads from its wall clock: `TIME`, key expiry, `EXPIREAT`
//! and everything else the server computes from `gettimeofday` and `CLOCK_REALTIME`. The four
//! faults of a clock are built from it:
//!
//! * **skew**: a fixed offset, [`Clock::ahead`] or [`Clock::behind`];
//! * **bump**: the offset changed while the server runs, with
//!   [`RedisServer::set_clock`](crate::RedisServer::set_clock);
//! * **rate**: a clock running fast or slow, [`Clock::running_at`];
//! * **strobe**: the offset changed back and forth, by calling `set_clock` repeatedly; each call
//!   replaces a one-line file and returns 2 ms later, when the server runs on the new clock.
//!
//! The server's wall clock reads `start + offset + rate × (now − start)`, where `start` is when
//! the process started (each start and each [`restart`](crate::RedisServer::restart)). So a rate
//! other than 1 drifts from the start of the process, and changing the rate of a running server
//! moves its clock at once by `(new rate − old rate) × (now − start)`.
//!
//! The monotonic clock is left real (`FAKETIME_DONT_FAKE_MONOTONIC=1`), so the server's own
//! timers (`serverCron`, timeouts) keep real time. libfaketime also scales the timeouts of the
//! server's sleeps and event-loop waits by `1 / rate`: below 1, the server's background work
//! (active expiry, replication) runs less often.
//!
//! How it is done: the clock is a one-line file in the server's directory
//! (`FAKETIME_TIMESTAMP_FILE`), which libfaketime reads again at every clock read
//! (`FAKETIME_NO_CACHE=1`); [`set_clock`](crate::RedisServer::set_clock) replaces it atomically,
//! then waits 2 ms: Valkey 9 calls `gettimeofday` at most once a millisecond and adds its
//! monotonic clock in between, so a command that starts within a millisecond of a change can
//! still see the old clock (and a fast or slow clock moves in millisecond steps there). The
//! clock last set survives [`kill`](crate::RedisServer::kill) and
//! [`restart`](crate::RedisServer::restart). Any `FAKETIME*` variable of the test's own
//! environment is kept from the server.
//!
//! # Requirements
//!
//! libfaketime, found at [`LIBFAKETIME_ENV`] or else at the path where Debian's `libfaketime`
//! package puts it for this architecture (`/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1`
//! on amd64); `make test` installs the package. Linux only.
//!
//! **Not every server binary can run under it.** libfaketime 0.9.10 (Debian 12's) deadlocks
//! when the process's `malloc` reads the clock while libfaketime itself is being set up, which
//! is what a server linked to a shared jemalloc does: Debian's own `redis-server`
//! (`libjemalloc.so.2`) hangs at start-up (libfaketime's issue #130; 0.9.11 added a
//! `FAKETIME_IGNORE_SYMBOLS` work-around, which the testkit does not set).
//! [`spawn`](crate::RedisServerBuilder::spawn) then fails at once with
//! [`io::ErrorKind::Unsupported`]. A server with the libc allocator works, such as the
//! `valkey-server` (Valkey 9, `malloc=libc`) that `scripts/ensure-valkey-server.sh` fetches:
//! give it with [`RedisServerBuilder::binary`](crate::RedisServerBuilder::binary).
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use quorumlock_testkit::clock::Clock;
//! use quorumlock_testkit::RedisServerBuilder;
//!
//! let server = RedisServerBuilder::new()
//!     .binary("target/valkey/valkey-server")
//!     .clock(Clock::ahead(Duration::from_millis(599)))
//!     .spawn()?;
//! // Later, a bump: the server's clock jumps 3 s ahead of the real one.
//! server.set_clock(Clock::ahead(Duration::from_secs(3)))?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::mutex;

/// Environment variable naming the libfaketime shared library (`libfaketime.so.1`) to preload,
/// instead of looking for it where Debian installs it.
pub const LIBFAKETIME_ENV: &str = "QUORUMLOCK_LIBFAKETIME";

/// The library's file name, under `faketime/` in a library directory.
const LIBRARY: &str = "libfaketime.so.1";

/// Library directories tried, after the multiarch one of this architecture.
const LIBRARY_DIRS: &[&str] = &["/usr/lib", "/usr/lib64", "/usr/local/lib"];

/// Name of the clock file inside a server's directory.
const CLOCK_FILE: &str = "faketime.rc";

/// How long [`ClockFile::set`] waits after replacing the file. Valkey 9 reads the wall clock
/// at most once a millisecond and adds its monotonic clock in between (its `ustime()`), so a
/// command that starts within a millisecond of a change can still see the old clock.
const SETTLE: Duration = Duration::from_millis(2);

/// What libfaketime prints before it gives up initialising (and the process hangs).
const CLASH_MARK: &str = "libfaketime: Cannot recover from unexpected recursive calls";

/// A server's wall clock: the real one shifted by an offset, running at a rate.
///
/// [`Clock::real`] (the default) is the real clock; [`Clock::ahead`] and [`Clock::behind`]
/// shift it; [`running_at`](Clock::running_at) makes it run fast or slow. The rate is checked
/// when the clock is used ([`RedisServerBuilder::spawn`](crate::RedisServerBuilder::spawn),
/// [`RedisServer::set_clock`](crate::RedisServer::set_clock)), not here.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use quorumlock_testkit::clock::{Clock, Offset};
///
/// let clock = Clock::behind(Duration::from_secs(2)).running_at(1.5);
/// assert_eq!(clock.offset(), Offset::Behind(Duration::from_secs(2)));
/// assert_eq!(clock.rate(), 1.5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clock {
    offset: Offset,
    rate: f64,
}

/// Which way, and how far, a [`Clock`] is from the real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Offset {
    /// The clock reads later than the real one.
    Ahead(Duration),
    /// The clock reads earlier than the real one.
    Behind(Duration),
}

impl Default for Clock {
    fn default() -> Self {
        Self::real()
    }
}

impl Clock {
    /// The real clock: no offset, rate 1. A server built with it runs on the real clock and
    /// can be given another one later with
    /// [`RedisServer::set_clock`](crate::RedisServer::set_clock).
    pub fn real() -> Self {
        Self::ahead(Duration::ZERO)
    }

    /// A clock `by` ahead of the real one, at rate 1.
    pub fn ahead(by: Duration) -> Self {
        Self {
            offset: Offset::Ahead(by),
            rate: 1.0,
        }
    }

    /// A clock `by` behind the real one, at rate 1.
    pub fn behind(by: Duration) -> Self {
        Self {
            offset: Offset::Behind(by),
            rate: 1.0,
        }
    }

    /// This clock, running `rate` times as fast as the real one: 2.0 twice as fast, 0.5 half
    /// as fast. It must be finite and above 0.
    pub fn running_at(mut self, rate: f64) -> Self {
        self.rate = rate;
        self
    }

    /// How far the clock is from the real one (at the start of the process, when the rate is
    /// not 1).
    pub fn offset(&self) -> Offset {
        self.offset
    }

    /// How many seconds the clock advances per real second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn check(&self) -> io::Result<()> {
        if self.rate.is_finite() && self.rate > 0.0 {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("clock rate {} is not a finite number above 0", self.rate),
            ))
        }
    }

    /// The clock as a line of libfaketime's `FAKETIME` syntax: `+5.000000000 x1` (an offset in
    /// seconds, then the rate). The rate is always written: libfaketime keeps the last rate it
    /// read when a line has none.
    fn spec(&self) -> String {
        let (sign, by) = match self.offset {
            Offset::Ahead(by) => ('+', by),
            Offset::Behind(by) => ('-', by),
        };
        // libfaketime parses both numbers with `atof`; a server never sets LC_NUMERIC, so the
        // decimal point is a dot.
        format!(
            "{sign}{}.{:09} x{}",
            by.as_secs(),
            by.subsec_nanos(),
            self.rate
        )
    }
}

/// The libfaketime shared library a faked server preloads: the file named by
/// [`LIBFAKETIME_ENV`], or else the first that exists of Debian's multiarch path for this
/// architecture (`/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1`, ...),
/// `/usr/lib/faketime/`, `/usr/lib64/faketime/` and `/usr/local/lib/faketime/`.
///
/// # Errors
///
/// [`io::ErrorKind::NotFound`] naming the file(s) looked for, and saying how to install it.
pub fn libfaketime() -> io::Result<PathBuf> {
    resolve(None)
}

/// The library to preload: `explicit`, else [`LIBFAKETIME_ENV`], else the known paths.
pub(crate) fn resolve(explicit: Option<&Path>) -> io::Result<PathBuf> {
    let named = match explicit {
        Some(path) => Some((path.to_owned(), "given to RedisServerBuilder::libfaketime")),
        None => std::env::var_os(LIBFAKETIME_ENV)
            .filter(|path| !path.is_empty())
            .map(|path| (PathBuf::from(path), "named by QUORUMLOCK_LIBFAKETIME")),
    };
    if let Some((path, source)) = named {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "libfaketime was not found: {} ({source}) is not a file; install the \
                     Debian package `libfaketime` (`make test` does it) and point \
                     {LIBFAKETIME_ENV} at its libfaketime.so.1",
                    path.display()
                ),
            ))
        };
    }
    let candidates = candidates();
    if let Some(found) = candidates.iter().find(|path| path.is_file()) {
        return Ok(found.clone());
    }
    let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "libfaketime was not found: none of {} exists; install the Debian package \
             `libfaketime` (`make test` does it) or set {LIBFAKETIME_ENV}=/path/to/{LIBRARY}",
            tried.join(", ")
        ),
    ))
}

/// Where the library may be, this architecture's multiarch directory first. Other
/// architectures' paths are left out: a library of the wrong class is not preloaded.
fn candidates() -> Vec<PathBuf> {
    let multiarch = match std::env::consts::ARCH {
        "x86_64" => Some("x86_64-linux-gnu"),
        "aarch64" => Some("aarch64-linux-gnu"),
        "x86" => Some("i386-linux-gnu"),
        "arm" => Some("arm-linux-gnueabihf"),
        "riscv64" => Some("riscv64-linux-gnu"),
        "s390x" => Some("s390x-linux-gnu"),
        "powerpc64" if cfg!(target_endian = "little") => Some("powerpc64le-linux-gnu"),
        "loongarch64" => Some("loongarch64-linux-gnu"),
        _ => None,
    };
    multiarch
        .map(|triplet| format!("/usr/lib/{triplet}"))
        .into_iter()
        .chain(LIBRARY_DIRS.iter().map(|dir| (*dir).to_owned()))
        .map(|dir| Path::new(&dir).join("faketime").join(LIBRARY))
        .collect()
}

/// A faked server's clock file and the library that reads it.
#[derive(Debug)]
pub(crate) struct ClockFile {
    path: PathBuf,
    library: PathBuf,
    /// The clock last written; the lock also keeps two writers from racing on the file.
    current: Mutex<Clock>,
}

impl ClockFile {
    /// Checks `clock` and writes it into `dir`.
    pub(crate) fn create(dir: &Path, library: PathBuf, clock: Clock) -> io::Result<Self> {
        clock.check()?;
        let file = Self {
            path: dir.join(CLOCK_FILE),
            library,
            current: Mutex::new(clock),
        };
        file.write(clock)?;
        Ok(file)
    }

    /// The clock last set.
    pub(crate) fn current(&self) -> Clock {
        *mutex::lock(&self.current)
    }

    /// Replaces the clock, then waits [`SETTLE`], so that the server runs every command sent
    /// afterwards on the new clock.
    pub(crate) fn set(&self, clock: Clock) -> io::Result<()> {
        clock.check()?;
        let mut current = mutex::lock(&self.current);
        self.write(clock)?;
        *current = clock;
        drop(current);
        std::thread::sleep(SETTLE);
        Ok(())
    }

    /// Writes the file whole, then renames it into place, so libfaketime never reads half a
    /// line (nor a missing file, which would send it to `~/.faketimerc`).
    fn write(&self, clock: Clock) -> io::Result<()> {
        let staged = self.path.with_extension("rc.new");
        std::fs::write(&staged, format!("{}\n", clock.spec()))?;
        std::fs::rename(&staged, &self.path)
    }

    /// Sets the environment that makes `command` run on this clock.
    pub(crate) fn apply(&self, command: &mut Command) {
        // FAKETIME would take precedence over the file; the others change how it is read.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("FAKETIME") {
                command.env_remove(&name);
            }
        }
        let mut preload = self.library.clone().into_os_string();
        if let Some(others) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
            preload.push(":");
            preload.push(others);
        }
        command
            .env("LD_PRELOAD", preload)
            .env("FAKETIME_TIMESTAMP_FILE", &self.path)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }

    /// Checks that the library is mapped into the process `pid`: the loader only warns (and
    /// runs the program on the real clock) when it cannot preload a library. Skipped where
    /// there is no `/proc`.
    pub(crate) fn check_loaded(&self, pid: u32, port: u16) -> io::Result<()> {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return Ok(());
        };
        if maps.contains("libfaketime") {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "the server on port {port} runs on the real clock: {} was not preloaded into it \
             (a library of another architecture, or a setuid binary?)",
            self.library.display()
        )))
    }
}

/// Removes the shared-memory objects libfaketime 0.9.10 creates for the process `pid`, which it
/// only removes itself when the process exits normally. Call it while `pid` is killed but not
/// yet reaped, so that the PID is still this process's; errors are ignored (newer releases
/// create none).
pub(crate) fn release(pid: u32) {
    for name in [
        format!("/dev/shm/faketime_shm_{pid}"),
        format!("/dev/shm/sem.faketime_sem_{pid}"),
    ] {
        let _ = std::fs::remove_file(name);
    }
}

/// The error for a server whose start-up `output` shows that libfaketime could not initialise
/// inside it (and the process hangs), if it does.
pub(crate) fn clash(output: &str, port: u16) -> Option<io::Error> {
    if !output.contains(CLASH_MARK) {
        return None;
    }
    Some(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "the server on port {port} hung at start-up under libfaketime (\"Cannot recover \
             from unexpected recursive calls to clock_gettime()\"): its allocator reads the \
             clock while libfaketime sets itself up. A server linked to a shared jemalloc, \
             such as Debian's redis-server, does so, and libfaketime 0.9.10 deadlocks there \
             (libfaketime issue #130). Run the clock on a server with the libc \
             allocator (RedisServerBuilder::binary), such as the valkey-server that \
             scripts/ensure-valkey-server.sh fetches; its output:\n{}",
            crate::log_tail::tail(output, 10)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_writes_the_offset_in_seconds_and_always_the_rate() {
        assert_eq!(Clock::real().spec(), "+0.000000000 x1");
        assert_eq!(
            Clock::ahead(Duration::from_millis(599)).spec(),
            "+0.599000000 x1"
        );
        assert_eq!(
            Clock::behind(Duration::from_secs(2)).running_at(1.5).spec(),
            "-2.000000000 x1.5"
        );
        assert_eq!(
            Clock::ahead(Duration::new(5, 7)).running_at(0.25).spec(),
            "+5.000000007 x0.25"
        );
    }

    #[test]
    fn a_rate_must_be_finite_and_above_zero() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = Clock::real().running_at(rate).check().unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{rate}");
        }
        assert!(Clock::real().running_at(1e-3).check().is_ok());
    }

    #[test]
    fn the_candidates_are_this_architectures_first() {
        let candidates = candidates();
        assert!(candidates
            .iter()
            .all(|p| p.ends_with("faketime/libfaketime.so.1")));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                candidates[0],
                Path::new("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
            );
            assert!(!candidates
                .iter()
                .any(|p| p.to_string_lossy().contains("aarch64")));
        }
    }

    #[test]
    fn a_clash_is_recognised_in_the_output() {
        let output = "libfaketime: Unexpected recursive calls to clock_gettime() without \
                      proper initialization. Trying alternative.\n\
                      libfaketime: Cannot recover from unexpected recursive calls to \
                      clock_gettime().\n";
        let error = clash(output, 6379).unwrap();
        assert_eq!(error.kind(), io::ErrorKind::Unsupported);
        assert!(error.to_string().contains("jemalloc"));
        assert!(clash("Ready to accept connections", 6379).is_none());
    }
}

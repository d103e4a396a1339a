//! Real `redis-server` processes in throw-away sandboxes.
//!
//! Each [`RedisServer`] is a child process listening on a free loopback port, with its own temporary
//! directory holding its data files and its log. It can be killed, restarted on the same port with
//! the same data directory, paused and resumed, which is what the fault tests need. [`RedisNodes`]
//! is a set of independent masters, the shape Redlock runs over, and prints every server's log when
//! it is dropped during a panic so that a failing test shows what the servers saw.
//!
//! Everything here is synchronous (`std::process`), so it can be used from plain tests and from
//! inside multi-threaded tokio tests alike.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::ops::{Index, IndexMut};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::clock::{self, Clock, ClockFile};
use crate::log_tail::tail;
use crate::mutex;

/// Environment variable naming the `redis-server` binary to run instead of the one on `PATH`.
pub const REDIS_SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";

/// The binary looked up on `PATH` when neither [`RedisServerBuilder::binary`] nor
/// [`REDIS_SERVER_ENV`] names one.
const DEFAULT_BINARY: &str = "redis-server";

/// Name of the log file inside a server's directory.
const LOG_FILE: &str = "redis.log";

/// Name of the configuration file inside a server's directory, written when the builder was
/// given one with [`RedisServerBuilder::config`].
const CONFIG_FILE: &str = "redis.conf";

/// Name of the file inside a server's directory that takes its stdout and stderr: configuration
/// errors are printed there, before the log file is opened.
const OUTPUT_FILE: &str = "redis.out";

/// Name of the Unix socket inside the directory of a server without a plain port (TLS only),
/// through which the test kit reaches it.
const SOCKET_FILE: &str = "redis.sock";

/// How long a server may take to answer `PING` after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);

/// Connect, read and write timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(100);

/// How many fresh ports [`RedisServerBuilder::spawn`] tries when the port it picked is taken.
const SPAWN_ATTEMPTS: usize = 5;

/// How many times [`RedisServer::restart`] tries its port when it is briefly taken.
const RESTART_ATTEMPTS: usize = 10;

/// Pause between two restart attempts.
const RESTART_BACKOFF: Duration = Duration::from_millis(100);

/// How many log lines an error message or a panic report carries.
pub(crate) const LOG_TAIL_LINES: usize = 40;

/// Arguments whose following argument is a secret and is hidden from `Debug`.
const SECRET_FLAGS: &[&str] = &["--requirepass", "--masterauth"];

/// TLS settings of a server ([`RedisServerBuilder::tls`]): its certificate and key, the CA it
/// trusts for client certificates, whether it requires them, and whether it keeps its plain
/// port. `TestCa::server_tls` (in the `tls` module) makes one from a throw-away CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    ca_cert_file: PathBuf,
    auth_clients: bool,
    plain_port: bool,
}

impl ServerTls {
    /// The server presents `cert_file` (with its key `key_file`) and trusts `ca_cert_file`
    /// (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file`). Clients need no certificate
    /// of their own, and the plain port stays open, unless said otherwise.
    pub fn new(
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
        ca_cert_file: impl Into<PathBuf>,
    ) -> Self {
        ServerTls {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            ca_cert_file: ca_cert_file.into(),
            auth_clients: false,
            plain_port: true,
        }
    }

    /// Whether clients must present a certificate the CA signed (`--tls-auth-clients yes`,
    /// mutual TLS). Off by default (`no`).
    pub fn auth_clients(mut self, required: bool) -> Self {
        self.auth_clients = required;
        self
    }

    /// Whether the server also listens on a plain port. On by default; off, it listens on TLS
    /// only (`--port 0`), the way managed services with encryption in transit do, and the test
    /// kit reaches it through a Unix socket in its directory.
    pub fn plain_port(mut self, on: bool) -> Self {
        self.plain_port = on;
        self
    }

    /// The server's certificate (PEM); the server also presents it as a client (a replica to
    /// its primary, a cluster node to another, a Sentinel to a master).
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    /// The certificate's private key (PEM).
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// The CA the server trusts (PEM).
    pub fn ca_cert_file(&self) -> &Path {
        &self.ca_cert_file
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificates(&self) -> bool {
        self.auth_clients
    }

    /// Whether the server keeps its plain port.
    pub fn has_plain_port(&self) -> bool {
        self.plain_port
    }

    /// The server's arguments for these settings, on `port`.
    fn args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&self.cert_file),
            "--tls-key-file".to_owned(),
            path(&self.key_file),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca_cert_file),
            "--tls-auth-clients".to_owned(),
            if self.auth_clients { "yes" } else { "no" }.to_owned(),
        ]
    }
}

/// A server's TLS settings and its TLS port.
#[derive(Debug, Clone)]
struct Tls {
    settings: ServerTls,
    port: u16,
}

/// Configures and starts a [`RedisServer`].
///
/// The defaults are a server without persistence (`--appendonly no --save ""`), with `DEBUG`
/// enabled, on a free port of `127.0.0.1`, running the binary named by [`REDIS_SERVER_ENV`] or else
/// `redis-server` from `PATH`. Setters never fail; everything is checked in [`spawn`](Self::spawn).
///
/// # Examples
///
/// ```no_run
/// use quorumlock_testkit::RedisServerBuilder;
///
/// let server = RedisServerBuilder::new()
///     .aof(true)
///     .arg("--requirepass")
///     .arg("secret")
///     .spawn()?;
/// println!("listening on {}", server.url());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct RedisServerBuilder {
    aof: bool,
    args: Vec<String>,
    binary: Option<PathBuf>,
    config: Option<String>,
    clock: Option<Clock>,
    libfaketime: Option<PathBuf>,
    tls: Option<ServerTls>,
}

impl fmt::Debug for RedisServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServerBuilder")
            .field("aof", &self.aof)
            .field("args", &redacted(&self.args))
            .field("binary", &self.binary)
            .field("config", &self.config.as_ref().map(|_| "<redacted>"))
            .field("clock", &self.clock)
            .field("libfaketime", &self.libfaketime)
            .field("tls", &self.tls)
            .finish()
    }
}

impl RedisServerBuilder {
    /// A builder with the defaults described on [`RedisServerBuilder`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns append-only-file persistence on (`--appendonly yes --appendfsync always`), so that
    /// every acknowledged write survives [`RedisServer::kill`] and [`RedisServer::restart`].
    ///
    /// Off by default (`--appendonly no`); snapshots are always off (`--save ""`).
    pub fn aof(mut self, on: bool) -> Self {
        self.aof = on;
        self
    }

    /// Appends one extra command-line argument, after the builder's own, so it can override them.
    ///
    /// Flags and values are separate arguments: `.arg("--requirepass").arg("secret")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Runs this binary instead of looking at [`REDIS_SERVER_ENV`] and `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the server from a configuration file with this text: it is written as
    /// `redis.conf` in the server's directory when the server is spawned, and passed as the
    /// first argument, before the builder's own arguments (which take precedence over it).
    ///
    /// The server may rewrite the file (`CONFIG REWRITE`; a Sentinel records its state there),
    /// and [`RedisServer::restart`] starts it again from the rewritten file. A Sentinel needs
    /// one: `.config("sentinel monitor mymaster 127.0.0.1 6379 2\n").arg("--sentinel")`.
    pub fn config(mut self, text: impl Into<String>) -> Self {
        self.config = Some(text.into());
        self
    }

    /// Runs the server on this wall clock, through libfaketime, so that its clock can also be
    /// changed while it runs with [`RedisServer::set_clock`]: see [`clock`] for
    /// what is faked and how, and for the server binaries that cannot run under libfaketime
    /// (Debian's `redis-server` is one).
    ///
    /// Off by default: the server runs on the real clock, without libfaketime, and its clock
    /// cannot be changed later. [`Clock::real`] gives the real clock, changeable later.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use quorumlock_testkit::clock::Clock;
    /// use quorumlock_testkit::RedisServerBuilder;
    ///
    /// let server = RedisServerBuilder::new()
    ///     .binary("target/valkey/valkey-server")
    ///     .clock(Clock::behind(Duration::from_secs(2)))
    ///     .spawn()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Preloads this libfaketime shared library for [`clock`](Self::clock) instead of the one
    /// found by [`clock::libfaketime`].
    pub fn libfaketime(mut self, path: impl Into<PathBuf>) -> Self {
        self.libfaketime = Some(path.into());
        self
    }

    /// Serves TLS on a port of its own ([`RedisServer::tls_port`]), with these certificates;
    /// with [`ServerTls::plain_port`]`(false)`, TLS only (`--port 0`): the test kit then reaches
    /// the server through a Unix socket in its directory ([`RedisServer::url`]). Off by default.
    ///
    /// A [`RedisCluster`](crate::RedisCluster) or [`SentinelGroup`](crate::SentinelGroup)
    /// started from a builder with TLS runs its cluster bus, replication and Sentinel links over
    /// TLS too.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The TLS settings given to [`tls`](Self::tls), if any.
    pub fn tls_settings(&self) -> Option<&ServerTls> {
        self.tls.as_ref()
    }

    /// Starts the server on a free loopback port and waits until it answers `PING`.
    ///
    /// If another process takes the chosen port before the server binds it, a new port is tried,
    /// up to five times.
    ///
    /// # Errors
    ///
    /// * [`io::ErrorKind::NotFound`] if the `redis-server` binary cannot be found or executed; the
    ///   message says how to install it or point [`REDIS_SERVER_ENV`] at it. With a
    ///   [`clock`](Self::clock), also if libfaketime cannot be found: the message names the
    ///   files looked for.
    /// * [`io::ErrorKind::InvalidInput`] if the clock's rate is not a finite number above 0.
    /// * [`io::ErrorKind::Unsupported`] if the server hangs at start-up under libfaketime (a
    ///   binary linked to a shared jemalloc, see [`clock`]); it is killed.
    /// * [`io::ErrorKind::TimedOut`] if the server does not answer within ten seconds.
    /// * Any other error if the temporary directory cannot be created, no free port can be found,
    ///   or the server exits during start-up (the message then carries the end of its log).
    pub fn spawn(self) -> io::Result<RedisServer> {
        let binary = self.resolve_binary();
        let libfaketime = match self.clock {
            Some(_) => Some(clock::resolve(self.libfaketime.as_deref())?),
            None => None,
        };
        let mut last_error = None;
        for _ in 0..SPAWN_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("quorumlock-redis-")
                .tempdir()?;
            let port = free_port()?;
            let tls = match &self.tls {
                Some(tls) => Some(Box::new(Tls {
                    settings: tls.clone(),
                    port: free_port()?,
                })),
                None => None,
            };
            let config = match &self.config {
                Some(text) => {
                    let path = dir.path().join(CONFIG_FILE);
                    std::fs::write(&path, text)?;
                    Some(path)
                }
                None => None,
            };
            let clock = match (self.clock, &libfaketime) {
                (Some(clock), Some(library)) => {
                    Some(ClockFile::create(dir.path(), library.clone(), clock)?)
                }
                _ => None,
            };
            let mut server = RedisServer {
                child: Mutex::new(None),
                port,
                binary: binary.clone(),
                aof: self.aof,
                args: self.args.clone(),
                config,
                clock,
                tls,
                dir,
            };
            match server.start() {
                Ok(()) => return Ok(server),
                Err(StartError::PortTaken(error)) => last_error = Some(error),
                Err(StartError::Fatal(error)) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server could not be started")))
    }

    fn resolve_binary(&self) -> PathBuf {
        if let Some(binary) = &self.binary {
            return binary.clone();
        }
        match std::env::var_os(REDIS_SERVER_ENV) {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => PathBuf::from(DEFAULT_BINARY),
        }
    }
}

/// One `redis-server` child process on a loopback port, with its own temporary directory.
///
/// Dropping it kills the process (by the PID of this child only), reaps it and removes the
/// directory.
///
/// # Examples
///
/// ```no_run
/// use quorumlock_testkit::RedisServer;
///
/// let mut server = RedisServer::spawn()?;
/// let url = server.url(); // "redis://127.0.0.1:PORT"
/// server.kill()?;         // the node crashes
/// server.restart()?;      // and comes back on the same port
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct RedisServer {
    /// The running process; `None` after [`kill`](Self::kill). Behind a mutex so that `&self`
    /// methods can check whether it has exited without ever signalling a reaped (and so possibly
    /// reused) PID.
    child: Mutex<Option<Child>>,
    port: u16,
    binary: PathBuf,
    aof: bool,
    args: Vec<String>,
    /// The configuration file passed as the first argument, inside `dir`.
    config: Option<PathBuf>,
    /// The faked wall clock, when the server was built with one.
    clock: Option<ClockFile>,
    /// Its TLS settings and port, when it serves TLS (boxed: most servers have none).
    tls: Option<Box<Tls>>,
    /// Dropped after the process is killed in `Drop::drop`, which removes the directory.
    dir: TempDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .field("aof", &self.aof)
            .field("args", &redacted(&self.args))
            .field("clock", &self.clock())
            .field("tls_port", &self.tls_port())
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts a server with the defaults of [`RedisServerBuilder`].
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`].
    pub fn spawn() -> io::Result<Self> {
        RedisServerBuilder::new().spawn()
    }

    /// A builder for a server with non-default settings.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::new()
    }

    /// The loopback port the server listens on; it stays the same across restarts. For a
    /// server without a plain port (TLS only), its TLS port: the port it announces to a
    /// cluster, its replicas and Sentinels.
    pub fn port(&self) -> u16 {
        match &self.tls {
            Some(tls) if !tls.settings.plain_port => tls.port,
            _ => self.port,
        }
    }

    /// `127.0.0.1:port` (see [`port`](Self::port)).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port()))
    }

    /// How the test kit reaches the server, without credentials: `redis://127.0.0.1:PORT`, or
    /// for a server without a plain port (TLS only) `unix://DIR/redis.sock`, its Unix socket.
    /// For a client over TLS, see [`tls_url`](Self::tls_url).
    pub fn url(&self) -> String {
        match &self.tls {
            Some(tls) if !tls.settings.plain_port => {
                format!("unix://{}", self.socket_path().display())
            }
            _ => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The TLS port, for a server started with [`RedisServerBuilder::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls.as_ref().map(|tls| tls.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT`, for a server started with [`RedisServerBuilder::tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port()
            .map(|port| format!("rediss://127.0.0.1:{port}"))
    }

    /// The TLS settings the server was started with.
    pub fn tls(&self) -> Option<&ServerTls> {
        self.tls.as_ref().map(|tls| &tls.settings)
    }

    /// [`url`](Self::url) with the password the server was started with (`--requirepass`), if
    /// any: how the test kit's own queries log in, and how a test reads what a password-protected
    /// server holds. It carries the password: keep it out of what a test prints.
    pub fn admin_url(&self) -> String {
        let url = self.url();
        let Some(password) = self.requirepass() else {
            return url;
        };
        let password = percent_encode(password);
        match url.strip_prefix("redis://") {
            Some(rest) => format!("redis://:{password}@{rest}"),
            None => format!("{url}?pass={password}"),
        }
    }

    /// The last `--requirepass` argument's value.
    fn requirepass(&self) -> Option<&str> {
        self.args
            .iter()
            .rposition(|arg| arg == "--requirepass")
            .and_then(|at| self.args.get(at + 1))
            .map(String::as_str)
    }

    /// The Unix socket a server without a plain port listens on, for the test kit.
    fn socket_path(&self) -> PathBuf {
        self.dir.path().join(SOCKET_FILE)
    }

    /// The server's own temporary directory, holding its data files and its log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `redis-server` (or `valkey-server`) binary this server runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The PID of the server process, or `None` after [`kill`](Self::kill) or once it has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut child = self.lock_child();
        let child = child.as_mut()?;
        match child.try_wait() {
            Ok(Some(_)) => None,
            Ok(None) | Err(_) => Some(child.id()),
        }
    }

    /// Whether the server process is alive (a paused server is alive).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Kills the server with `SIGKILL`, which also works while it is paused, and reaps it.
    ///
    /// Does nothing if it is not running.
    ///
    /// # Errors
    ///
    /// If the signal cannot be sent or the process cannot be reaped.
    pub fn kill(&mut self) -> io::Result<()> {
        let slot = mutex::get_mut(&mut self.child);
        if let Some(child) = slot.as_mut() {
            match signal_child(child, Signal::SIGKILL) {
                // Killed, not yet reaped: the PID is still this child's.
                Ok(()) if self.clock.is_some() => clock::release(child.id()),
                Ok(()) | Err(SignalError::Exited) => {}
                Err(SignalError::Io(error)) => return Err(error),
            }
            child.wait()?;
            *slot = None;
        }
        Ok(())
    }

    /// Kills the server if it is running, then starts it again on the same port, with the same
    /// directory and arguments, and waits until it answers `PING`.
    ///
    /// With [`aof(true)`](RedisServerBuilder::aof) the data written before survives; without it
    /// the server comes back empty. If the port is briefly taken by another process, it is tried
    /// again a few times.
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`], and if the port stays taken.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        let mut last_error = None;
        for attempt in 0..RESTART_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(RESTART_BACKOFF);
            }
            match self.start() {
                Ok(()) => return Ok(()),
                Err(StartError::PortTaken(error)) => last_error = Some(error),
                Err(StartError::Fatal(error)) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server could not be restarted")))
    }

    /// Freezes the server with `SIGSTOP`: connections stay open but nothing is answered.
    ///
    /// # Errors
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Lets a paused server run again with `SIGCONT`.
    ///
    /// # Errors
    ///
    /// If the server is not running or the signal cannot be sent.
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// The wall clock the server runs on, as last set; `None` if it was built without
    /// [`RedisServerBuilder::clock`] (it then runs on the real clock).
    pub fn clock(&self) -> Option<Clock> {
        self.clock.as_ref().map(ClockFile::current)
    }

    /// Changes the server's wall clock: a bump, or a strobe when called again and again. Every
    /// command sent after it returns runs on the new clock (`TIME`, expiry checks), and the
    /// server keeps it across [`kill`](Self::kill) and [`restart`](Self::restart). Cheap: it
    /// replaces a one-line file and returns 2 ms later (see [`clock`]).
    ///
    /// The offset is from the real clock, not from the current one. A new rate counts from the
    /// start of the process (see [`clock`]).
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use quorumlock_testkit::clock::Clock;
    /// use quorumlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .binary("target/valkey/valkey-server")
    ///     .clock(Clock::real())
    ///     .spawn()?;
    /// server.set_clock(Clock::ahead(Duration::from_secs(3)))?; // keys 3 s from expiry expire
    /// server.set_clock(Clock::real())?; // and the clock is back, the keys are not
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// * [`io::ErrorKind::Unsupported`] if the server was built without a clock.
    /// * [`io::ErrorKind::InvalidInput`] if the rate is not a finite number above 0.
    /// * Any error writing the clock file; the server's clock is then unchanged.
    pub fn set_clock(&self, clock: Clock) -> io::Result<()> {
        match &self.clock {
            Some(file) => file.set(clock),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "redis-server on port {} runs on the real clock: give its builder a \
                     clock (RedisServerBuilder::clock, Clock::real() for now) to change it later",
                    self.port
                ),
            )),
        }
    }

    /// Starts a replica of this server from `builder` (`--replicaof` this server's port), and
    /// waits until its replication link is up and this server counts it among its replicas:
    /// a primary for durable votes ([`quorumlock::Durability::Replicas`]) or failover tests.
    /// Sets this server's `repl-diskless-sync-delay` to 0, so that the sync starts at once.
    /// A primary without a plain port (TLS only) is replicated from over TLS
    /// (`--tls-replication yes` is appended): give `builder` the same [`ServerTls`].
    ///
    /// ```no_run
    /// use quorumlock_testkit::{RedisServer, RedisServerBuilder};
    ///
    /// let primary = RedisServer::spawn()?;
    /// let replica = primary.spawn_replica(RedisServerBuilder::new())?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`], and [`io::ErrorKind::TimedOut`] (with the replica's
    /// log) if the replica has not synced within ten seconds.
    pub fn spawn_replica(&self, builder: RedisServerBuilder) -> io::Result<RedisServer> {
        let replicas = self.connected_replicas()?;
        // Start the full sync at once: by default a primary waits 5 s for more replicas.
        self.query::<()>(
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("repl-diskless-sync-delay")
                .arg(0),
        )?;
        // A primary without a plain port replicates over TLS only.
        let builder = match &self.tls {
            Some(tls) if !tls.settings.plain_port => builder.arg("--tls-replication").arg("yes"),
            _ => builder,
        };
        let replica = builder
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(self.port().to_string())
            .spawn()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        // Counted is not yet streamed to: after a diskless sync the primary starts sending its
        // writes only once the replica acknowledged the snapshot, up to a second later.
        while !(replica
            .info("replication")
            .is_ok_and(|i| i.contains("master_link_status:up"))
            && self.connected_replicas()? > replicas
            && self.replicated_to(replicas + 1)?)
        {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "replica of {} did not sync; its log:\n{}",
                        self.addr(),
                        tail(&replica.log(), 40)
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(replica)
    }

    /// Runs `cmd` on a connection of its own.
    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> io::Result<T> {
        let client = redis::Client::open(self.admin_url()).map_err(io::Error::other)?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .map_err(io::Error::other)?;
        cmd.query(&mut conn).map_err(io::Error::other)
    }

    /// Whether a write here reaches `replicas` replicas within 100 ms: a probe key written and
    /// deleted at once (nothing is left behind), then `WAIT` on the same connection.
    fn replicated_to(&self, replicas: usize) -> io::Result<bool> {
        const PROBE: &str = "quorumlock-testkit:replica-probe";
        let client = redis::Client::open(self.admin_url()).map_err(io::Error::other)?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .map_err(io::Error::other)?;
        let (acknowledged,): (usize,) = redis::pipe()
            .cmd("SET")
            .arg(PROBE)
            .arg(1)
            .ignore()
            .cmd("DEL")
            .arg(PROBE)
            .ignore()
            .cmd("WAIT")
            .arg(replicas)
            .arg(100)
            .query(&mut conn)
            .map_err(io::Error::other)?;
        Ok(acknowledged >= replicas)
    }

    /// `INFO section`, as text.
    fn info(&self, section: &str) -> io::Result<String> {
        self.query(redis::cmd("INFO").arg(section))
    }

    /// How many replicas this server counts (`connected_slaves`).
    fn connected_replicas(&self) -> io::Result<usize> {
        let info = self.info("replication")?;
        Ok(info
            .lines()
            .find_map(|l| l.trim().strip_prefix("connected_slaves:")?.parse().ok())
            .unwrap_or(0))
    }

    /// The contents of the server's log file, across restarts; empty if it cannot be read.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        mutex::lock(&self.child)
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let mut slot = self.lock_child();
        let result = match slot.as_mut() {
            Some(child) => signal_child(child, signal),
            None => Err(SignalError::Exited),
        };
        result.map_err(|error| match error {
            SignalError::Io(error) => error,
            SignalError::Exited => io::Error::other(format!(
                "redis-server on port {} is not running, cannot send {signal}",
                self.port
            )),
        })
    }

    fn command_args(&self) -> Vec<String> {
        let dir = self.dir.path().display().to_string();
        let log = self.log_path().display().to_string();
        let plain_port = match &self.tls {
            Some(tls) if !tls.settings.plain_port => 0,
            _ => self.port,
        };
        let mut args: Vec<String> = [
            "--port",
            &plain_port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir,
            "--logfile",
            &log,
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
            "--save",
            "",
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
        if self.aof {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        } else {
            args.extend(["--appendonly", "no"].map(String::from));
        }
        args.extend(["--enable-debug-command", "yes"].map(String::from));
        if let Some(tls) = &self.tls {
            args.extend(tls.settings.args(tls.port));
            if !tls.settings.plain_port {
                let socket = self.socket_path().display().to_string();
                args.extend(["--unixsocket".to_owned(), socket]);
                args.extend(["--unixsocketperm", "700"].map(String::from));
            }
        }
        args.extend(self.args.iter().cloned());
        // A configuration file must come first; the arguments after it take precedence.
        if let Some(config) = &self.config {
            args.insert(0, config.display().to_string());
        }
        args
    }

    /// Starts the process (the slot must be empty) and waits until it is ready. On failure the
    /// process is killed and reaped and the slot left empty.
    fn start(&mut self) -> Result<(), StartError> {
        let endpoint = match &self.tls {
            Some(tls) if !tls.settings.plain_port => Endpoint::Unix(self.socket_path()),
            _ => Endpoint::Tcp(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::LOCALHOST,
                self.port,
            ))),
        };
        let port = self.port();
        let dir = self.dir.path();
        let marks = Marks::take(dir);
        let output = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(OUTPUT_FILE))
            .map_err(StartError::Fatal)?;
        let stderr = output.try_clone().map_err(StartError::Fatal)?;
        let mut command = Command::new(&self.binary);
        command
            .args(self.command_args())
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(stderr);
        if let Some(clock) = &self.clock {
            clock.apply(&mut command);
        }
        let child = command
            .spawn()
            .map_err(|error| StartError::Fatal(not_found(&self.binary, &error)))?;
        let slot = mutex::get_mut(&mut self.child);
        let child = slot.insert(child);
        let faked = self.clock.is_some();
        let mut result = wait_ready(child, port, &endpoint, dir, marks, faked);
        if let (Ok(()), Some(clock)) = (&result, &self.clock) {
            result = clock
                .check_loaded(child.id(), port)
                .map_err(StartError::Fatal);
        }
        if result.is_err() {
            if let Ok(None) = child.try_wait() {
                if signal_child(child, Signal::SIGKILL).is_ok() && faked {
                    clock::release(child.id());
                }
            }
            let _ = child.wait();
            *slot = None;
        }
        result
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// A set of independent `redis-server` masters, the nodes a Redlock runs over.
///
/// Dropping it during a panic prints the last lines of every server's log to stderr, so that a
/// failing test shows what the servers saw; then every server is killed.
///
/// # Examples
///
/// ```no_run
/// use quorumlock_testkit::RedisNodes;
///
/// let mut nodes = RedisNodes::spawn(5)?;
/// let urls = nodes.urls();
/// nodes[0].pause()?; // a minority of nodes stops answering
/// nodes[1].kill()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisNodes {
    servers: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` servers with the defaults of [`RedisServerBuilder`].
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`]; servers already started are stopped again.
    pub fn spawn(n: usize) -> io::Result<Self> {
        Self::spawn_with(n, &RedisServerBuilder::new())
    }

    /// Starts `n` servers, each from a clone of `builder`, concurrently.
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::spawn`]; servers already started are stopped again.
    pub fn spawn_with(n: usize, builder: &RedisServerBuilder) -> io::Result<Self> {
        let results: Vec<io::Result<RedisServer>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|_| scope.spawn(|| builder.clone().spawn()))
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle.join().unwrap_or_else(|_| {
                        Err(io::Error::other("a thread starting redis-server panicked"))
                    })
                })
                .collect()
        });
        let servers = results.into_iter().collect::<io::Result<Vec<_>>>()?;
        Ok(Self { servers })
    }

    /// Every server's `redis://127.0.0.1:PORT` url, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.servers.iter()
    }

    /// Every server's whole log, each headed by its url.
    pub fn logs(&self) -> String {
        self.servers
            .iter()
            .map(|server| format!("==== {} ====\n{}", server.url(), server.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Index<usize> for RedisNodes {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.servers[index]
    }
}

impl IndexMut<usize> for RedisNodes {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.servers[index]
    }
}

impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.iter()
    }
}

impl Drop for RedisNodes {
    fn drop(&mut self) {
        if thread::panicking() {
            for server in &self.servers {
                eprintln!(
                    "==== redis-server {} (last {LOG_TAIL_LINES} log lines) ====\n{}",
                    server.url(),
                    tail(&server.log(), LOG_TAIL_LINES)
                );
            }
        }
    }
}

/// Why a start attempt failed.
enum StartError {
    /// Another process holds the port; another port (or a later try) may work.
    PortTaken(io::Error),
    /// Trying again would not help.
    Fatal(io::Error),
}

/// Why a signal was not delivered.
enum SignalError {
    /// The child has already exited and been reaped; its PID may belong to someone else now.
    Exited,
    Io(io::Error),
}

/// Sends `signal` to `child`, only if it has not been reaped: an unreaped child keeps its PID, so
/// the signal cannot reach an unrelated process.
fn signal_child(child: &mut Child, signal: Signal) -> Result<(), SignalError> {
    if child.try_wait().map_err(SignalError::Io)?.is_some() {
        return Err(SignalError::Exited);
    }
    let pid = i32::try_from(child.id())
        .map_err(|_| SignalError::Io(io::Error::other("child PID out of range")))?;
    signal::kill(Pid::from_raw(pid), signal).map_err(|errno| SignalError::Io(errno.into()))
}

/// A port of `127.0.0.1` that nothing listens on right now.
pub(crate) fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// The error for a binary that cannot be run.
fn not_found(binary: &Path, error: &io::Error) -> io::Error {
    let kind = match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => io::ErrorKind::NotFound,
        other => other,
    };
    io::Error::new(
        kind,
        format!(
            "redis-server was not found: cannot run {} ({error}); install the Debian package \
             `redis-server` (`make test` and `make demo` do it) or set \
             {REDIS_SERVER_ENV}=/path/to/redis-server",
            binary.display()
        ),
    )
}

/// Polls the server until it answers `PING` (or `-NOAUTH`, when it needs a password), checking
/// that the answer comes from `child` and not from another process on the port.
///
/// With `faked` (the server runs under libfaketime), a start-up that hangs in libfaketime is
/// reported at once rather than at the timeout.
fn wait_ready(
    child: &mut Child,
    port: u16,
    endpoint: &Endpoint,
    dir: &Path,
    marks: Marks,
    faked: bool,
) -> Result<(), StartError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if faked {
            if let Some(error) = clock::clash(&marks.output_since(dir), port) {
                return Err(StartError::Fatal(error));
            }
        }
        if let Some(status) = child.try_wait().map_err(StartError::Fatal)? {
            let new_log = marks.since(dir);
            let message = format!(
                "redis-server on port {port} exited during start-up ({status}); log:\n{}",
                tail(&new_log, LOG_TAIL_LINES)
            );
            return Err(if port_in_use(&new_log) {
                StartError::PortTaken(io::Error::new(io::ErrorKind::AddrInUse, message))
            } else {
                StartError::Fatal(io::Error::other(message))
            });
        }
        let last = match probe(endpoint) {
            Ok(Probe::Ready(pid)) => {
                // An answer from a process that is not ours means our server lost the port.
                if pid.is_some_and(|pid| pid != child.id()) {
                    return Err(StartError::PortTaken(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("port {port} is served by another redis-server"),
                    )));
                }
                if child.try_wait().map_err(StartError::Fatal)?.is_none() {
                    return Ok(());
                }
                // It exited right after answering: report that on the next turn.
                continue;
            }
            Ok(Probe::NotYet(reply)) => format!("reply {reply:?}"),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(StartError::Fatal(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "redis-server on port {port} did not answer PING within {READY_TIMEOUT:?} \
                     (last: {last}); log:\n{}",
                    tail(&marks.since(dir), LOG_TAIL_LINES)
                ),
            )));
        }
        thread::sleep(READY_POLL);
    }
}

/// The outcome of one readiness probe that got an answer.
enum Probe {
    /// The server serves commands; with the PID it reported, when it would tell.
    Ready(Option<u32>),
    /// The server is up but not ready (`-LOADING`, ...), with its reply.
    NotYet(String),
}

/// Where the readiness probe reaches a server: its plain port, or the Unix socket of a server
/// without one.
enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

fn probe(endpoint: &Endpoint) -> io::Result<Probe> {
    match endpoint {
        Endpoint::Tcp(addr) => {
            let stream = TcpStream::connect_timeout(addr, PROBE_TIMEOUT)?;
            stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
            stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
            probe_on(stream)
        }
        Endpoint::Unix(path) => {
            let stream = UnixStream::connect(path)?;
            stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
            stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
            probe_on(stream)
        }
    }
}

fn probe_on(stream: impl Read + Write) -> io::Result<Probe> {
    let mut reader = BufReader::new(stream);
    reader.get_mut().write_all(b"PING\r\n")?;
    let reply = read_line(&mut reader)?;
    if reply.starts_with("-NOAUTH") {
        return Ok(Probe::Ready(None));
    }
    if reply != "+PONG" {
        return Ok(Probe::NotYet(reply));
    }
    reader.get_mut().write_all(b"INFO server\r\n")?;
    let header = read_line(&mut reader)?;
    let Some(len) = header
        .strip_prefix('$')
        .and_then(|len| len.parse::<usize>().ok())
    else {
        // INFO renamed or refused by the extra arguments: PING is all we can check.
        return Ok(Probe::Ready(None));
    };
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body)?;
    let pid = String::from_utf8_lossy(&body)
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok());
    Ok(Probe::Ready(pid))
}

fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(line.trim_end().to_owned())
}

/// Where one start attempt's diagnostics begin in the files it appends to, which also hold those
/// of earlier runs in the same directory.
#[derive(Clone, Copy)]
struct Marks {
    output: u64,
    log: u64,
}

impl Marks {
    fn take(dir: &Path) -> Self {
        let len = |name| std::fs::metadata(dir.join(name)).map_or(0, |meta| meta.len());
        Self {
            output: len(OUTPUT_FILE),
            log: len(LOG_FILE),
        }
    }

    /// What the attempt printed (configuration errors) followed by what it logged.
    fn since(self, dir: &Path) -> String {
        let mut text = self.output_since(dir);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&read_from(dir, LOG_FILE, self.log));
        text
    }

    /// What the attempt printed to stdout and stderr.
    fn output_since(self, dir: &Path) -> String {
        read_from(dir, OUTPUT_FILE, self.output)
    }
}

/// The file `name` of `dir` from byte `start` on, as text; empty if it cannot be read.
fn read_from(dir: &Path, name: &str, start: u64) -> String {
    let text = std::fs::read(dir.join(name)).unwrap_or_default();
    let start = usize::try_from(start).unwrap_or(0).min(text.len());
    String::from_utf8_lossy(&text[start..]).into_owned()
}

fn port_in_use(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("Failed listening on port")
}

/// `args` with the values of password flags and ACL passwords hidden.
fn redacted(args: &[String]) -> Vec<String> {
    let mut hide_next = false;
    args.iter()
        .map(|arg| {
            let hide = hide_next || arg.starts_with('>') || arg.starts_with('#');
            hide_next = SECRET_FLAGS.contains(&arg.as_str());
            if hide {
                "<redacted>".to_owned()
            } else {
                arg.clone()
            }
        })
        .collect()
}

/// `text` with every byte but unreserved URL characters percent-encoded.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

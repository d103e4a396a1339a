//! A per-node TCP fault proxy.
//!
//! [`FaultProxy`] sits between a client and one upstream (normally a `redis-server`) and forwards
//! bytes in both directions, in order, until a test tells it to misbehave: add latency, swallow
//! traffic, hold replies back, reset connections, refuse new ones, or send new connections to a
//! different upstream. Each fault has its undo: [`FaultProxy::pass`] clears them all, and
//! [`FaultProxy::heal`] also resets the connections that lost bytes.
//!
//! The proxy runs on its own background thread with its own single-threaded tokio runtime, so it
//! works the same whether the test is synchronous or runs inside any tokio runtime. Every control
//! method is a plain, non-blocking `fn` that publishes the new fault state; the pumps of every
//! connection, existing or new, pick it up at once.
//!
//! # Directions
//!
//! *Up* is client → server (requests), *down* is server → client (replies). Within one direction
//! bytes are never reordered, whatever faults are applied.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// Largest chunk read from one side before it is handed to the other side's pump.
const CHUNK_SIZE: usize = 16 * 1024;

/// Pause after a failed `accept` (for example `EMFILE`), so the acceptor does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// A TCP proxy in front of one upstream whose faults tests switch at run time.
///
/// Dropping the proxy stops its thread, closes its listener and closes every connection it
/// carries; `drop` returns once all of that is done.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock_testkit::FaultProxy;
///
/// # fn main() -> std::io::Result<()> {
/// let upstream = "127.0.0.1:6379".parse().unwrap();
/// let proxy = FaultProxy::start(upstream)?;
/// let url = proxy.url(); // hand this to the client instead of the server's own address
///
/// proxy.delay(Duration::from_millis(50), Duration::from_millis(50), Duration::from_millis(5));
/// proxy.blackhole(); // the node is now partitioned away
/// proxy.heal(); // and back, its old connections reset
/// # let _ = url;
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    counters: Arc<Counters>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

/// A snapshot of a [`FaultProxy`]'s counters, taken by [`FaultProxy::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted and proxied since the start (refused connections are not counted).
    pub connections: u64,
    /// Connections currently open.
    pub active: u64,
    /// Bytes forwarded client → server.
    pub bytes_up: u64,
    /// Bytes forwarded server → client.
    pub bytes_down: u64,
}

impl FaultProxy {
    /// Starts a proxy listening on `127.0.0.1` on a free port, forwarding to `upstream`.
    ///
    /// The proxy starts in pass mode: no faults. The upstream is only contacted when a client
    /// connects, so it need not be up yet.
    ///
    /// # Errors
    ///
    /// Fails if the listening socket cannot be bound, or the proxy's thread or runtime cannot be
    /// started.
    pub fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = StdTcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;

        let (state, state_rx) = watch::channel(State::new(upstream));
        let counters = Arc::new(Counters::default());
        let (shutdown, shutdown_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std_mpsc::channel();

        let thread_counters = Arc::clone(&counters);
        let thread = thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || run(listener, state_rx, thread_counters, shutdown_rx, ready_tx))?;

        match ready_rx.recv() {
            Ok(Ok(())) => Ok(FaultProxy {
                addr,
                state,
                counters,
                shutdown: Some(shutdown),
                thread: Some(thread),
            }),
            Ok(Err(err)) => {
                let _ = thread.join();
                Err(err)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other(
                    "fault proxy thread exited before starting",
                ))
            }
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's address as a Redis URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Clears every fault: forward normally, without delay.
    ///
    /// Held replies are delivered, bytes waiting out a delay go out at once, and new connections
    /// are accepted again. The upstream chosen by [`retarget`](Self::retarget) is kept.
    pub fn pass(&self) {
        self.state.send_modify(|s| s.faults = Faults::default());
    }

    /// Adds latency to every chunk of bytes: `up` for client → server, `down` for server → client,
    /// each plus or minus a uniformly random amount up to `jitter` (never below zero).
    ///
    /// Each chunk is due at its arrival time plus its latency, but never goes out before the
    /// chunk that arrived ahead of it in the same direction, so jitter never reorders bytes. A
    /// delay of zero in both directions with zero jitter removes the latency; other faults are
    /// left as they are.
    pub fn delay(&self, up: Duration, down: Duration, jitter: Duration) {
        self.state.send_modify(|s| {
            s.faults.delay_up = up;
            s.faults.delay_down = down;
            s.faults.jitter = jitter;
        });
    }

    /// Delays every byte client → server by `up` more, on the connections open now only:
    /// connections accepted afterwards go straight through. Models a route that holds what a
    /// client already sent on its old connections (requests that will run late) while the
    /// connections the client opens next are quick. [`delay`](Self::delay) leaves it in place;
    /// [`pass`](Self::pass) ends it, and what it held goes out at once.
    pub fn slow_open_connections(&self, up: Duration) {
        let through = self.counters.connections.load(Ordering::SeqCst);
        self.state
            .send_modify(|s| s.faults.slow_open = Some((through, up)));
    }

    /// Swallows all traffic: connections are still accepted and bytes are read from both sides,
    /// but they are discarded instead of forwarded, in both directions.
    ///
    /// Bytes already waiting in the proxy (delayed or held) stay where they are until the
    /// blackhole is lifted by [`pass`](Self::pass). A connection closed by one side while
    /// blackholed is not seen by the other side until then.
    ///
    /// Discarding bytes *inside* a live TCP stream is something no real network does: on a
    /// multiplexed Redis connection, the replies after the gap would be matched to the wrong
    /// requests. To end a blackhole (or [`drop_held`](Self::drop_held)) the way a real
    /// partition ends, use [`heal`](Self::heal): it ends the connections first, so clients
    /// reconnect on a clean stream. The chaos scenarios heal this way.
    pub fn blackhole(&self) {
        self.state.send_modify(|s| s.faults.blackhole = true);
    }

    /// Holds server → client bytes in the proxy instead of delivering them; client → server bytes
    /// still flow.
    ///
    /// Models replies lost in flight: the server has acted on the request but the client has not
    /// heard. End it with [`deliver_held`](Self::deliver_held), [`drop_held`](Self::drop_held) or
    /// [`pass`](Self::pass). Held bytes are kept in memory without limit, and a server close
    /// queued behind them reaches the client only once they are released.
    pub fn hold(&self) {
        self.state.send_modify(|s| s.faults.hold = true);
    }

    /// Delivers everything held, in order, and stops holding.
    pub fn deliver_held(&self) {
        self.state.send_modify(|s| s.faults.hold = false);
    }

    /// Discards everything held and stops holding.
    ///
    /// Only bytes the proxy has already read from the server are discarded; a reply the server
    /// sends afterwards is delivered. Does nothing (beyond ensuring holding is off) if the proxy
    /// was not holding.
    pub fn drop_held(&self) {
        self.state.send_modify(|s| {
            if s.faults.hold {
                s.drop_epoch += 1;
            }
            s.faults.hold = false;
        });
    }

    /// Aborts every current connection: the client side is closed with a TCP RST (`SO_LINGER` 0,
    /// then close) and the upstream side is closed.
    ///
    /// Bytes held or delayed for those connections are lost. Connections accepted afterwards are
    /// unaffected, and the current faults stay as they are.
    pub fn reset(&self) {
        self.state.send_modify(|s| s.reset_epoch += 1);
    }

    /// Refuses new connections until [`accept`](Self::accept) or [`pass`](Self::pass): each is
    /// accepted and at once closed with a TCP RST, so the client's first read or write fails.
    /// Existing connections are untouched.
    pub fn refuse(&self) {
        self.state.send_modify(|s| s.faults.refuse = true);
    }

    /// Undoes [`refuse`](Self::refuse): new connections are proxied again. Other faults stay as
    /// they are.
    pub fn accept(&self) {
        self.state.send_modify(|s| s.faults.refuse = false);
    }

    /// Ends every fault the way a long partition ends on a real network, where bytes are never
    /// lost from inside a live TCP stream: connections that may have lost, held or delayed bytes
    /// are torn down with a TCP RST instead of carrying on, so that clients reconnect on a clean
    /// stream; then the proxy forwards normally, as after [`pass`](Self::pass).
    ///
    /// In order: new connections are refused, nothing more is forwarded on the current ones,
    /// held replies are discarded, the current connections are reset, and every fault is
    /// cleared. Use it to undo [`blackhole`](Self::blackhole) or [`hold`](Self::hold); `pass`
    /// alone would resume the old streams with a gap in them.
    pub fn heal(&self) {
        self.refuse();
        self.blackhole();
        self.drop_held();
        self.reset();
        self.pass();
    }

    /// Sends new connections to `upstream` from now on, like a virtual IP moved to a promoted
    /// replica. Existing connections keep talking to the upstream they were opened to.
    pub fn retarget(&self, upstream: SocketAddr) {
        self.state.send_modify(|s| s.upstream = upstream);
    }

    /// A snapshot of the proxy's counters.
    pub fn stats(&self) -> ProxyStats {
        self.counters.snapshot()
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = *self.state.borrow();
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &state.upstream)
            .field("faults", &state.faults)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The faults a test has switched on. All off is pass mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Faults {
    delay_up: Duration,
    delay_down: Duration,
    jitter: Duration,
    blackhole: bool,
    hold: bool,
    refuse: bool,
    /// Extra latency client → server on the connections accepted up to the given number (see
    /// [`FaultProxy::slow_open_connections`]).
    slow_open: Option<(u64, Duration)>,
}

/// Everything the proxy's tasks need to know, published through a `watch` channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    faults: Faults,
    upstream: SocketAddr,
    /// Bumped by `reset`: connections accepted under an older epoch abort.
    reset_epoch: u64,
    /// Bumped by `drop_held`: held chunks read under an older epoch are discarded.
    drop_epoch: u64,
}

impl State {
    fn new(upstream: SocketAddr) -> State {
        State {
            faults: Faults::default(),
            upstream,
            reset_epoch: 0,
            drop_epoch: 0,
        }
    }

    /// Whether a pump in `dir` must not deliver anything for now.
    fn paused(&self, dir: Direction) -> bool {
        self.faults.blackhole || (dir == Direction::Down && self.faults.hold)
    }

    /// The latency of one chunk in `dir` on the connection numbered `connection`, given its
    /// jitter draw `unit` in `[-1, 1]`.
    fn latency(&self, dir: Direction, connection: u64, unit: f64) -> Duration {
        let slowed = match self.faults.slow_open {
            Some((through, up)) if dir == Direction::Up && connection <= through => up,
            _ => Duration::ZERO,
        };
        let base = match dir {
            Direction::Up => self.faults.delay_up,
            Direction::Down => self.faults.delay_down,
        }
        .saturating_add(slowed);
        let offset = self.faults.jitter.mul_f64(unit.abs().min(1.0));
        if unit >= 0.0 {
            base.saturating_add(offset)
        } else {
            base.saturating_sub(offset)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    active: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ProxyStats {
        ProxyStats {
            connections: self.connections.load(Ordering::SeqCst),
            active: self.active.load(Ordering::SeqCst),
            bytes_up: self.bytes_up.load(Ordering::SeqCst),
            bytes_down: self.bytes_down.load(Ordering::SeqCst),
        }
    }

    fn bytes(&self, dir: Direction) -> &AtomicU64 {
        match dir {
            Direction::Up => &self.bytes_up,
            Direction::Down => &self.bytes_down,
        }
    }
}

/// Counts one connection as active for as long as it lives.
struct ActiveGuard(Arc<Counters>);

impl ActiveGuard {
    fn new(counters: &Arc<Counters>) -> ActiveGuard {
        counters.connections.fetch_add(1, Ordering::SeqCst);
        counters.active.fetch_add(1, Ordering::SeqCst);
        ActiveGuard(Arc::clone(counters))
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One read from one side, on its way to the other.
struct Chunk {
    arrival: Instant,
    bytes: Vec<u8>,
    /// The jitter draw for this chunk, in `[-1, 1]`.
    jitter_unit: f64,
    /// `State::drop_epoch` when the chunk was read.
    drop_epoch: u64,
}

/// A tiny xorshift64* generator for jitter; statistical quality is not a concern here.
struct XorShift(u64);

impl XorShift {
    fn from_clock(salt: u64) -> XorShift {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        XorShift((nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform draw in `[-1, 1)`.
    fn unit(&mut self) -> f64 {
        let fraction = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        fraction * 2.0 - 1.0
    }
}

/// The proxy thread: builds the runtime, reports readiness, then accepts until shut down.
fn run(
    listener: StdTcpListener,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
    shutdown: oneshot::Receiver<()>,
    ready: std_mpsc::Sender<io::Result<()>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let listener = {
        let _guard = runtime.enter();
        match TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(err) => {
                let _ = ready.send(Err(err));
                return;
            }
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    runtime.block_on(accept_loop(listener, state, counters, shutdown));
    // Dropping the runtime drops every connection task, closing their sockets.
}

async fn accept_loop(
    listener: TcpListener,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut connection_id: u64 = 0;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let current = *state.borrow();
        if current.faults.refuse {
            abort(client);
            continue;
        }
        let active = ActiveGuard::new(&counters);
        connection_id += 1;
        tokio::spawn(serve(
            client,
            connection_id,
            current,
            state.clone(),
            Arc::clone(&counters),
            active,
            XorShift::from_clock(connection_id),
        ));
    }
}

/// Closes `stream` with a TCP RST.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Carries one client connection until it ends, fails or is reset.
async fn serve(
    client: TcpStream,
    connection: u64,
    accepted_under: State,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
    _active: ActiveGuard,
    mut rng: XorShift,
) {
    let epoch = accepted_under.reset_epoch;
    let mut reset_rx = state.clone();
    let connected = tokio::select! {
        biased;
        () = reset_requested(&mut reset_rx, epoch) => None,
        server = TcpStream::connect(accepted_under.upstream) => server.ok(),
    };
    let Some(mut server) = connected else {
        abort(client);
        return;
    };
    let mut client = client;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let finished_cleanly = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let (up_tx, up_rx) = mpsc::unbounded_channel();
        let (down_tx, down_rx) = mpsc::unbounded_channel();
        let mut down_rng = XorShift(rng.next_u64() | 1);
        let pumps = async {
            tokio::try_join!(
                read_side(client_read, up_tx, &state, &mut rng),
                write_side(
                    up_rx,
                    server_write,
                    state.clone(),
                    (Direction::Up, connection),
                    &counters
                ),
                read_side(server_read, down_tx, &state, &mut down_rng),
                write_side(
                    down_rx,
                    client_write,
                    state.clone(),
                    (Direction::Down, connection),
                    &counters
                ),
            )
        };
        tokio::select! {
            biased;
            () = reset_requested(&mut reset_rx, epoch) => false,
            pumped = pumps => pumped.is_ok(),
        }
    };
    if !finished_cleanly {
        abort(client);
    }
}

/// Resolves once a reset newer than `epoch` has been requested.
async fn reset_requested(state: &mut watch::Receiver<State>, epoch: u64) {
    loop {
        if state.borrow_and_update().reset_epoch != epoch {
            return;
        }
        changed(state).await;
    }
}

/// Waits for the next state change; never resolves once the proxy is being dropped.
async fn changed(state: &mut watch::Receiver<State>) {
    if state.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Reads chunks from one side and queues them for the other side's writer. Ends at EOF, which the
/// writer sees as the channel closing.
async fn read_side<R: AsyncRead + Unpin>(
    mut source: R,
    queue: mpsc::UnboundedSender<Chunk>,
    state: &watch::Receiver<State>,
    rng: &mut XorShift,
) -> io::Result<()> {
    let mut buf = vec![0; CHUNK_SIZE];
    loop {
        let n = source.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let current = *state.borrow();
        if current.faults.blackhole {
            continue;
        }
        let chunk = Chunk {
            arrival: Instant::now(),
            bytes: buf[..n].to_vec(),
            jitter_unit: rng.unit(),
            drop_epoch: current.drop_epoch,
        };
        if queue.send(chunk).is_err() {
            // The writer has failed; the connection is ending.
            return Ok(());
        }
    }
}

/// Delivers queued chunks to one side in order, obeying the current faults.
async fn write_side<W: AsyncWrite + Unpin>(
    mut queue: mpsc::UnboundedReceiver<Chunk>,
    mut sink: W,
    mut state: watch::Receiver<State>,
    (dir, connection): (Direction, u64),
    counters: &Counters,
) -> io::Result<()> {
    let mut head: Option<Chunk> = None;
    let mut eof = false;
    loop {
        let current = *state.borrow_and_update();
        if dir == Direction::Down
            && head
                .as_ref()
                .is_some_and(|c| c.drop_epoch < current.drop_epoch)
        {
            head = None;
            continue;
        }
        if current.paused(dir) {
            changed(&mut state).await;
            continue;
        }
        let Some(chunk) = &head else {
            if eof {
                sink.shutdown().await?;
                return Ok(());
            }
            tokio::select! {
                biased;
                () = changed(&mut state) => {}
                next = queue.recv() => match next {
                    Some(chunk) => head = Some(chunk),
                    None => eof = true,
                },
            }
            continue;
        };
        let due = chunk.arrival + current.latency(dir, connection, chunk.jitter_unit);
        if due > Instant::now() {
            tokio::select! {
                biased;
                () = changed(&mut state) => {}
                () = tokio::time::sleep_until(due) => {}
            }
            continue;
        }
        // Counted before the write so a test that has seen the bytes also sees them counted.
        counters
            .bytes(dir)
            .fetch_add(chunk.bytes.len() as u64, Ordering::SeqCst);
        sink.write_all(&chunk.bytes).await?;
        head = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(delay: Duration, jitter: Duration) -> State {
        let mut state = State::new(SocketAddr::from(([127, 0, 0, 1], 1)));
        state.faults.delay_up = delay;
        state.faults.delay_down = delay * 2;
        state.faults.jitter = jitter;
        state
    }

    #[test]
    fn jitter_draws_stay_within_minus_one_and_one() {
        let mut rng = XorShift::from_clock(7);
        let draws: Vec<f64> = (0..10_000).map(|_| rng.unit()).collect();
        assert!(draws.iter().all(|u| (-1.0..1.0).contains(u)));
        assert!(draws.iter().any(|u| *u < -0.9));
        assert!(draws.iter().any(|u| *u > 0.9));
    }

    #[test]
    fn latency_adds_jitter_per_direction() {
        let state = state_with(Duration::from_millis(100), Duration::from_millis(10));
        assert_eq!(
            state.latency(Direction::Up, 1, 0.5),
            Duration::from_millis(105)
        );
        assert_eq!(
            state.latency(Direction::Up, 1, -1.0),
            Duration::from_millis(90)
        );
        assert_eq!(
            state.latency(Direction::Down, 1, 0.0),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn latency_never_goes_below_zero() {
        let state = state_with(Duration::from_millis(1), Duration::from_millis(50));
        assert_eq!(state.latency(Direction::Up, 1, -1.0), Duration::ZERO);
    }

    #[test]
    fn hold_pauses_only_the_down_direction_and_blackhole_both() {
        let mut state = state_with(Duration::ZERO, Duration::ZERO);
        state.faults.hold = true;
        assert!(state.paused(Direction::Down));
        assert!(!state.paused(Direction::Up));
        state.faults.hold = false;
        state.faults.blackhole = true;
        assert!(state.paused(Direction::Down));
        assert!(state.paused(Direction::Up));
    }
}

//! The clients' network: every connection a client opens to a master is a simulated TCP stream
//! (turmoil's) behind two pumps of our own, one per direction, so that a fault can strike one
//! connection and not the next: latency per direction that may change while requests are in
//! flight, and a connection's requests held and delivered later, after those of the connection
//! that replaced it.
//!
//! A master's address in a client's URL names the worker too, `m<i>-w<j>`: the connector reaches
//! master `m<i>` and files the connection under worker `j`, whose faults it then suffers.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::wire::{OwnerRequest, Requests};

/// `QUORUMLOCK_SIM_TRACE=<text>`: every request that contains the text, and every reply, is
/// printed as it leaves its pump (for reading one failing seed, never in a search).
static TRACE: std::sync::LazyLock<Option<String>> =
    std::sync::LazyLock::new(|| std::env::var("QUORUMLOCK_SIM_TRACE").ok());

/// Numbers connections for the trace.
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The port every simulated master listens on.
pub const PORT: u16 = 6379;

/// The host name worker `worker` uses for master `master`.
pub fn host(master: usize, worker: usize) -> String {
    format!("m{master}-w{worker}")
}

/// The turmoil host name of master `master`.
pub fn master_host(master: usize) -> String {
    format!("m{master}")
}

/// What one direction of a connection does to the bytes it carries.
#[derive(Clone, Copy, Debug, Default)]
struct Direction {
    latency: Duration,
}

/// One connection's faults.
#[derive(Debug, Default)]
struct Conn {
    /// Nothing leaves the client for the master before this simulated time (a stalled route).
    held_until: Option<Duration>,
    up: Direction,
    down: Direction,
    open: bool,
}

/// Every connection the clients opened, by worker and master; and each link's latencies, which
/// new connections take on.
#[derive(Debug, Default)]
pub struct Links {
    conns: BTreeMap<(usize, usize), Vec<Arc<Mutex<Conn>>>>,
    latency: BTreeMap<(usize, usize), (Duration, Duration)>,
    /// The requests of attempts under an owner id, as they left their clients.
    owner_requests: Vec<OwnerRequest>,
}

/// The links, shared by the connector and the fault driver.
pub type SharedLinks = Arc<Mutex<Links>>;

pub(super) fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Links {
    /// Holds what worker `worker` sends on every connection it has open to master `master`
    /// until the simulated time `until`; its later connections are not held.
    pub fn hold(&mut self, worker: usize, master: usize, until: Duration) {
        for conn in self.conns.get(&(worker, master)).into_iter().flatten() {
            let mut conn = locked(conn);
            if conn.open {
                conn.held_until = Some(until);
            }
        }
    }

    /// Sets the latencies of worker `worker`'s link to master `master`, for the connections it
    /// has open (from their next bytes on) and those it opens.
    pub fn set_latency(&mut self, worker: usize, master: usize, up: Duration, down: Duration) {
        self.latency.insert((worker, master), (up, down));
        for conn in self.conns.get(&(worker, master)).into_iter().flatten() {
            let mut conn = locked(conn);
            conn.up.latency = up;
            conn.down.latency = down;
        }
    }

    /// The requests of attempts under an owner id sent so far, in the order they left.
    pub fn owner_requests(&self) -> &[OwnerRequest] {
        &self.owner_requests
    }

    fn open(&mut self, worker: usize, master: usize) -> Arc<Mutex<Conn>> {
        let (up, down) = self
            .latency
            .get(&(worker, master))
            .copied()
            .unwrap_or_default();
        let conn = Arc::new(Mutex::new(Conn {
            held_until: None,
            up: Direction { latency: up },
            down: Direction { latency: down },
            open: true,
        }));
        let list = self.conns.entry((worker, master)).or_default();
        list.retain(|c| locked(c).open);
        list.push(conn.clone());
        conn
    }
}

/// Parses a host name of [`host`]'s form.
fn parse(host: &str) -> Option<(usize, usize)> {
    let rest = host.strip_prefix('m')?;
    let (master, worker) = rest.split_once("-w")?;
    Some((master.parse().ok()?, worker.parse().ok()?))
}

/// Opens a connection for worker and master of `host`: a turmoil stream to the master, behind
/// the pumps.
pub async fn connect(links: SharedLinks, host: String) -> io::Result<tokio::io::DuplexStream> {
    let (master, worker) = parse(&host).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("unknown host {host}"))
    })?;
    let net = turmoil::net::TcpStream::connect((master_host(master), PORT)).await?;
    let conn = locked(&links).open(worker, master);
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (net_read, net_write) = net.into_split();
    let (lib_read, lib_write) = tokio::io::split(theirs);
    // Spawned on the runtime, not a local set: the library opens connections from tasks of its
    // own.
    let label = format!(
        "w{worker}/m{master}#{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let requests = (links, Requests::new(worker, master));
    tokio::spawn(pump(
        lib_read,
        net_write,
        conn.clone(),
        Some(requests),
        label.clone(),
    ));
    tokio::spawn(pump(net_read, lib_write, conn, None, label));
    Ok(ours)
}

/// Bytes read and not yet delivered, each with when it is due.
type Chunks = VecDeque<(Instant, Vec<u8>)>;

/// Carries bytes from `from` to `to`, each chunk due its direction's latency after it was read,
/// in order; upwards (with `requests`, where the requests read go), nothing leaves while the
/// connection is held. Ends when `from` ends, once everything read has been delivered (a request
/// sent on a connection its client has dropped still lands), or when `to` fails.
async fn pump<R, W>(
    mut from: R,
    mut to: W,
    conn: Arc<Mutex<Conn>>,
    mut requests: Option<(SharedLinks, Requests)>,
    label: String,
) where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let upwards = requests.is_some();
    let queue: Arc<Mutex<Chunks>> = Arc::default();
    let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel::<()>();
    let reader = {
        let (queue, conn) = (queue.clone(), conn.clone());
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            let mut last_due = Instant::now();
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some((links, requests)) = &mut requests {
                    let sent = Instant::now().into_std();
                    requests.read(&buf[..n], sent, &mut locked(links).owner_requests);
                }
                let latency = {
                    let conn = locked(&conn);
                    if upwards {
                        conn.up.latency
                    } else {
                        conn.down.latency
                    }
                };
                // Bytes of one stream stay in order: none is due before the one ahead of it.
                let due = (Instant::now() + latency).max(last_due);
                last_due = due;
                locked(&queue).push_back((due, buf[..n].to_vec()));
                if wake.send(()).is_err() {
                    break;
                }
            }
        }
    };
    let writer = async move {
        loop {
            let next = locked(&queue).pop_front();
            let Some((due, bytes)) = next else {
                if woken.recv().await.is_none() {
                    break;
                }
                continue;
            };
            tokio::time::sleep_until(due).await;
            if upwards {
                loop {
                    let held = locked(&conn).held_until;
                    let now = turmoil::sim_elapsed().unwrap_or_default();
                    match held {
                        Some(until) if until > now => tokio::time::sleep(until - now).await,
                        _ => break,
                    }
                }
            }
            if let Some(trace) = TRACE.as_deref() {
                let text = String::from_utf8_lossy(&bytes).replace("\r\n", " ");
                if text.contains(trace) || !upwards {
                    println!(
                        "trace {:>9.3} ms {label} {} {}",
                        turmoil::sim_elapsed().unwrap_or_default().as_secs_f64() * 1e3,
                        if upwards { "->" } else { "<-" },
                        text.chars().take(400).collect::<String>()
                    );
                }
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
        locked(&conn).open = false;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_names_its_master_and_worker() {
        assert_eq!(parse(&host(3, 12)), Some((3, 12)));
        assert_eq!(parse("m1"), None);
        assert_eq!(parse("x1-w2"), None);
    }
}

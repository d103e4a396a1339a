//! A master behind a socket: [`serve`] speaks RESP over any async stream, replies in the order
//! the requests came (a pipelining client such as the `redis` crate's multiplexed connection
//! relies on it), with messages pushed in between; [`listen`] serves a loopback TCP port.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::master::Master;
use crate::reply::Reply;
use crate::resp::{encode, parse_request};

/// A master shared by the connections that serve it and the test that drives it.
pub type SharedMaster = Arc<Mutex<Master>>;

/// Wraps `master` for [`serve`] and [`listen`].
pub fn shared(master: Master) -> SharedMaster {
    Arc::new(Mutex::new(master))
}

/// Locks `master`; a test that panicked while holding it leaves the data as it was.
pub fn lock(master: &SharedMaster) -> MutexGuard<'_, Master> {
    master
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves one connection to `master` over `stream` until the client closes it, sends `QUIT`
/// or a request that is not RESP, or the master forgets the connection (a crash, a restore).
///
/// # Errors
///
/// The stream's.
///
/// # Cancel safety
///
/// Dropping the future closes the connection; a request read but not answered has run or
/// not as a whole.
pub async fn serve<S>(master: SharedMaster, stream: S) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (sender, mut messages) = mpsc::unbounded_channel::<Reply>();
    let id = lock(&master).connect_with(sender);
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let outcome = loop {
        tokio::select! {
            biased;
            message = messages.recv() => {
                let Some(message) = message else {
                    // The master forgot the connection.
                    break Ok(());
                };
                let mut out = Vec::new();
                encode(&message, lock(&master).protocol(id), &mut out);
                if let Err(e) = writer.write_all(&out).await {
                    break Err(e);
                }
            }
            read = reader.read(&mut chunk) => {
                let n = match read {
                    Ok(0) => break Ok(()),
                    Ok(n) => n,
                    Err(e) => break Err(e),
                };
                buf.extend_from_slice(&chunk[..n]);
                let (out, close) = answer(&master, id, &mut buf, &mut messages);
                if let Err(e) = writer.write_all(&out).await {
                    break Err(e);
                }
                if close {
                    break Ok(());
                }
            }
        }
    };
    let _ = writer.shutdown().await;
    lock(&master).disconnect(id);
    outcome
}

/// Runs every whole request in `buf`; what to write back, and whether to close.
fn answer(
    master: &SharedMaster,
    id: crate::ClientId,
    buf: &mut Vec<u8>,
    messages: &mut mpsc::UnboundedReceiver<Reply>,
) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut master = lock(master);
    loop {
        let argv = match parse_request(buf) {
            Ok(Some(argv)) if argv.is_empty() => continue,
            Ok(Some(argv)) => argv,
            Ok(None) => return (out, false),
            Err(e) => {
                encode(
                    &Reply::Error(format!("ERR {}", e.0)),
                    master.protocol(id),
                    &mut out,
                );
                return (out, true);
            }
        };
        if !master.is_connected(id) {
            return (out, true);
        }
        let frames = master.execute_frames(id, &argv);
        let protocol = master.protocol(id);
        // A message the command itself published to this connection goes first, as Redis
        // writes it to the connection's buffer while the command runs.
        while let Ok(message) = messages.try_recv() {
            encode(&message, protocol, &mut out);
        }
        for frame in &frames {
            encode(frame, protocol, &mut out);
        }
        if argv[0].eq_ignore_ascii_case(b"quit") {
            return (out, true);
        }
    }
}

/// A master served on a loopback TCP port; dropping it closes the port and every connection.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    master: SharedMaster,
    task: JoinHandle<()>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The master it serves.
    pub fn master(&self) -> &SharedMaster {
        &self.master
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `master` on a free loopback TCP port, each connection on a task of the current
/// tokio runtime.
///
/// # Errors
///
/// The listener's.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use quorumlock_sim::{listen, shared, Clock, Master, VirtualTime};
///
/// let time = VirtualTime::new(std::time::Duration::from_secs(1_700_000_000));
/// let server = listen(shared(Master::new(Clock::following(&time))?)).await?;
/// let client = redis::Client::open(server.url())?;
/// # Ok(())
/// # }
/// ```
pub async fn listen(master: SharedMaster) -> io::Result<Server> {
    listen_on(master, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// Serves `master` on `addr`: the port of a [`Server`] dropped earlier, to bring a master back
/// where its clients look for it after some time down.
///
/// # Errors
///
/// The listener's (the port is taken).
pub async fn listen_on(master: SharedMaster, addr: SocketAddr) -> io::Result<Server> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let served = master.clone();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        connections.spawn(serve(served.clone(), stream));
                    }
                    Err(_) => break,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok(Server { addr, master, task })
}

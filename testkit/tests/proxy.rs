//! The fault proxy against real `redis-server` processes.
//!
//! Self-contained on purpose: a minimal server sandbox and a raw RESP client live below, so these
//! tests depend on nothing in the testkit but the proxy itself.

use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use quorumlock_testkit::{FaultProxy, ProxyStats};

/// How long a test waits for something that must happen.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long a test waits for a reply that must not come.
const SILENCE: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------------
// A minimal redis-server sandbox.
// ---------------------------------------------------------------------------------------------

struct Server {
    child: Child,
    addr: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Server {
    fn start() -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("/usr/bin/redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let pong = Client::connect(server.addr).and_then(|mut c| c.cmd(&["PING"]));
            if matches!(&pong, Ok(Resp::Simple(s)) if s == "PONG") {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} did not answer PING: {pong:?}\n--- server log ---\n{}",
                server.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The port this server reports for itself, asked directly.
    fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- redis-server {} log ---\n{}", self.addr, self.log());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A raw RESP client.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Resp {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    fn bulk(s: &str) -> Resp {
        Resp::Bulk(Some(s.as_bytes().to_vec()))
    }
}

struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, PATIENCE)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(PATIENCE))?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn send(&mut self, args: &[&str]) -> io::Result<()> {
        let mut frame = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            frame.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        self.writer.write_all(&frame)
    }

    fn read(&mut self) -> io::Result<Resp> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        let number = || {
            rest.parse::<i64>()
                .map_err(|e| io::Error::new(ErrorKind::InvalidData, e))
        };
        Ok(match kind {
            "+" => Resp::Simple(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Integer(number()?),
            "$" => match usize::try_from(number()?) {
                Err(_) => Resp::Bulk(None),
                Ok(len) => {
                    let mut data = vec![0; len + 2];
                    self.reader.read_exact(&mut data)?;
                    data.truncate(len);
                    Resp::Bulk(Some(data))
                }
            },
            "*" => match usize::try_from(number()?) {
                Err(_) => Resp::Array(None),
                Ok(len) => Resp::Array(Some(
                    (0..len).map(|_| self.read()).collect::<io::Result<_>>()?,
                )),
            },
            _ => return Err(io::Error::new(ErrorKind::InvalidData, line.to_owned())),
        })
    }

    fn cmd(&mut self, args: &[&str]) -> io::Result<Resp> {
        self.send(args)?;
        self.read()
    }

    fn ping(&mut self) -> io::Result<Resp> {
        self.cmd(&["PING"])
    }

    /// Reads with a short timeout, for replies that must not arrive.
    fn read_briefly(&mut self) -> io::Result<Resp> {
        self.writer.set_read_timeout(Some(SILENCE))?;
        let reply = self.read();
        self.writer.set_read_timeout(Some(PATIENCE))?;
        reply
    }

    /// The port of the server at the other end, as that server reports it.
    fn server_port(&mut self) -> u16 {
        match self.cmd(&["CONFIG", "GET", "port"]).unwrap() {
            Resp::Array(Some(items)) if items.len() == 2 => match &items[1] {
                Resp::Bulk(Some(port)) => std::str::from_utf8(port).unwrap().parse().unwrap(),
                other => panic!("unexpected port value {other:?}"),
            },
            other => panic!("unexpected CONFIG GET reply {other:?}"),
        }
    }
}

fn pong() -> Resp {
    Resp::Simple("PONG".to_owned())
}

fn is_timeout(err: &io::Error) -> bool {
    matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Polls `probe` until it returns true, failing the test after [`PATIENCE`].
fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !probe() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts that a connection through the proxy is dead: the next exchange fails or sees EOF.
fn assert_connection_fails(client: &mut Client, what: &str) {
    let reply = client.ping();
    match &reply {
        Err(err) if !is_timeout(err) => {}
        _ => panic!("{what}: expected a reset or EOF, got {reply:?}"),
    }
}

/// A fresh server, a proxy in front of it and a client connected through the proxy.
fn proxied() -> (Server, FaultProxy, Client) {
    let server = Server::start();
    let proxy = FaultProxy::start(server.addr).unwrap();
    let client = Client::connect(proxy.addr()).unwrap();
    (server, proxy, client)
}

/// Asserts that no reply reaches `client` within [`SILENCE`].
#[track_caller]
fn assert_silent(client: &mut Client) {
    let reply = client.read_briefly();
    assert!(matches!(&reply, Err(e) if is_timeout(e)), "got {reply:?}");
}

/// Holds the proxy's replies, sends `INCR counter` through it and waits until the server (seen
/// through `direct`) has executed it: the reply is then on its way to, or in, the proxy.
fn hold_an_incr(proxy: &FaultProxy, client: &mut Client, direct: &mut Client) {
    proxy.hold();
    client.send(&["INCR", "counter"]).unwrap();
    eventually("the server has executed the INCR", || {
        direct.cmd(&["GET", "counter"]).unwrap() == Resp::bulk("1")
    });
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn pass_forwards_ping_and_counts_bytes_both_ways() {
    let server = Server::start();
    let proxy = FaultProxy::start(server.addr).unwrap();
    assert_eq!(
        proxy.url(),
        format!("redis://127.0.0.1:{}", proxy.addr().port())
    );

    let mut client = Client::connect(proxy.addr()).unwrap();
    assert_eq!(client.ping().unwrap(), pong());
    assert_eq!(
        client.cmd(&["SET", "k", "v"]).unwrap(),
        Resp::Simple("OK".into())
    );
    assert_eq!(client.cmd(&["GET", "k"]).unwrap(), Resp::bulk("v"));

    let request_bytes = (b"*1\r\n$4\r\nPING\r\n".len()
        + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".len()
        + b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".len()) as u64;
    let reply_bytes = (b"+PONG\r\n".len() + b"+OK\r\n".len() + b"$1\r\nv\r\n".len()) as u64;
    assert_eq!(
        proxy.stats(),
        ProxyStats {
            connections: 1,
            active: 1,
            bytes_up: request_bytes,
            bytes_down: reply_bytes,
        }
    );
}

#[test]
fn delay_of_100ms_each_way_makes_a_round_trip_take_at_least_200ms() {
    let (_server, proxy, mut client) = proxied();
    assert_eq!(client.ping().unwrap(), pong());

    proxy.delay(
        Duration::from_millis(100),
        Duration::from_millis(100),
        Duration::ZERO,
    );
    let started = Instant::now();
    assert_eq!(client.ping().unwrap(), pong());
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200),
        "round trip took {elapsed:?}"
    );
}

#[test]
fn delay_with_jitter_keeps_pipelined_replies_in_order() {
    let (_server, proxy, mut client) = proxied();
    proxy.delay(
        Duration::from_millis(30),
        Duration::from_millis(30),
        Duration::from_millis(25),
    );

    // Separate writes a little apart, so each request (and each reply) is its own chunk with its
    // own jitter draw: without ordering, later chunks would regularly overtake earlier ones.
    const N: usize = 40;
    for i in 0..N {
        client.send(&["ECHO", &format!("message-{i}")]).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    for i in 0..N {
        assert_eq!(client.read().unwrap(), Resp::bulk(&format!("message-{i}")));
    }
}

#[test]
fn delayed_bytes_go_out_at_once_when_the_proxy_is_set_to_pass() {
    let (_server, proxy, mut client) = proxied();
    proxy.delay(Duration::from_secs(60), Duration::ZERO, Duration::ZERO);
    client.send(&["PING"]).unwrap();
    assert!(is_timeout(&client.read_briefly().unwrap_err()));

    proxy.pass();
    assert_eq!(client.read().unwrap(), pong());
}

#[test]
fn blackhole_makes_ping_time_out_and_forwards_no_bytes() {
    let (server, proxy, mut client) = proxied();
    assert_eq!(client.ping().unwrap(), pong());
    let before = proxy.stats();

    proxy.blackhole();
    client.send(&["INCR", "swallowed"]).unwrap();
    assert_silent(&mut client);

    // A new connection is accepted but hears nothing either.
    let mut late = Client::connect(proxy.addr()).unwrap();
    late.send(&["PING"]).unwrap();
    assert_silent(&mut late);

    let after = proxy.stats();
    assert_eq!(
        (after.bytes_up, after.bytes_down),
        (before.bytes_up, before.bytes_down)
    );
    assert_eq!(after.connections, 2);

    // The request never reached the server, and is not sent late once the blackhole is lifted.
    proxy.pass();
    assert_eq!(client.ping().unwrap(), pong());
    let mut direct = Client::connect(server.addr).unwrap();
    assert_eq!(direct.cmd(&["GET", "swallowed"]).unwrap(), Resp::Bulk(None));
}

#[test]
fn blackhole_discards_server_pushes_instead_of_delivering_them_later() {
    let server = Server::start();
    let proxy = FaultProxy::start(server.addr).unwrap();
    let mut subscriber = Client::connect(proxy.addr()).unwrap();
    let subscribed = subscriber.cmd(&["SUBSCRIBE", "news"]).unwrap();
    assert_eq!(
        subscribed,
        Resp::Array(Some(vec![
            Resp::bulk("subscribe"),
            Resp::bulk("news"),
            Resp::Integer(1)
        ]))
    );
    let before = proxy.stats();

    proxy.blackhole();
    let mut direct = Client::connect(server.addr).unwrap();
    let receivers = direct.cmd(&["PUBLISH", "news", "lost"]).unwrap();
    assert_eq!(receivers, Resp::Integer(1), "the server did not push");
    assert_silent(&mut subscriber);
    assert_eq!(proxy.stats().bytes_down, before.bytes_down);

    proxy.pass();
    // In subscribed mode PING answers ["pong", ""]; it must be the first thing the client hears.
    assert_eq!(
        subscriber.ping().unwrap(),
        Resp::Array(Some(vec![Resp::bulk("pong"), Resp::bulk("")]))
    );
}

#[test]
fn hold_delays_the_reply_until_deliver_held() {
    let (server, proxy, mut client) = proxied();
    let mut direct = Client::connect(server.addr).unwrap();

    hold_an_incr(&proxy, &mut client, &mut direct);
    // The request reached the server, but its reply stays in the proxy.
    assert_silent(&mut client);
    assert_eq!(proxy.stats().bytes_down, 0);

    proxy.deliver_held();
    assert_eq!(client.read().unwrap(), Resp::Integer(1));
    assert_eq!(client.ping().unwrap(), pong(), "holding did not stop");
}

#[test]
fn drop_held_loses_the_held_reply_and_pass_lets_new_requests_through() {
    let (server, proxy, mut client) = proxied();
    let mut direct = Client::connect(server.addr).unwrap();

    hold_an_incr(&proxy, &mut client, &mut direct);
    // Give the proxy a moment to read the reply the server has just written.
    thread::sleep(Duration::from_millis(50));

    proxy.drop_held();
    assert_silent(&mut client);

    proxy.pass();
    // The first reply seen is the PING's: the INCR's reply is gone for good.
    assert_eq!(client.ping().unwrap(), pong());
    assert_eq!(proxy.stats().bytes_down, b"+PONG\r\n".len() as u64);
}

#[test]
fn reset_makes_the_client_see_a_connection_reset() {
    let (server, proxy, mut client) = proxied();
    assert_eq!(client.ping().unwrap(), pong());
    let mut direct = Client::connect(server.addr).unwrap();
    eventually("the server sees two clients", || {
        client_count(&mut direct) == 2
    });

    proxy.reset();
    let reply = client.read();
    assert!(
        matches!(&reply, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "expected a connection reset, got {reply:?}"
    );
    eventually("the proxy has closed its upstream side", || {
        client_count(&mut direct) == 1
    });
    eventually("the proxy counts no active connection", || {
        proxy.stats().active == 0
    });

    // The proxy still carries new connections.
    let mut fresh = Client::connect(proxy.addr()).unwrap();
    assert_eq!(fresh.ping().unwrap(), pong());
}

#[test]
fn heal_resets_the_connections_that_lost_bytes_and_carries_new_ones() {
    let (server, proxy, mut swallowed) = proxied();
    assert_eq!(swallowed.ping().unwrap(), pong());

    proxy.blackhole();
    swallowed.send(&["INCR", "swallowed"]).unwrap();
    assert_silent(&mut swallowed);

    proxy.heal();
    // The stream with a gap in it is not resumed: its client sees the connection end.
    assert_connection_fails(&mut swallowed, "a connection blackholed before the heal");
    eventually("the proxy counts no active connection", || {
        proxy.stats().active == 0
    });
    // New connections are neither refused nor blackholed, and the swallowed request never ran.
    let mut fresh = Client::connect(proxy.addr()).unwrap();
    assert_eq!(fresh.ping().unwrap(), pong());
    let mut direct = Client::connect(server.addr).unwrap();
    assert_eq!(direct.cmd(&["GET", "swallowed"]).unwrap(), Resp::Bulk(None));
}

/// The number of clients connected to the server `direct` talks to, `direct` included.
fn client_count(direct: &mut Client) -> usize {
    match direct.cmd(&["CLIENT", "LIST"]).unwrap() {
        Resp::Bulk(Some(list)) => String::from_utf8(list).unwrap().lines().count(),
        other => panic!("unexpected CLIENT LIST reply {other:?}"),
    }
}

#[test]
fn refuse_makes_new_connections_fail_while_existing_ones_keep_working() {
    let (_server, proxy, mut existing) = proxied();
    assert_eq!(existing.ping().unwrap(), pong());

    proxy.refuse();
    for _ in 0..3 {
        if let Ok(mut refused) = Client::connect(proxy.addr()) {
            assert_connection_fails(&mut refused, "a connection made while refusing");
        }
    }
    assert_eq!(existing.ping().unwrap(), pong());
    assert_eq!(proxy.stats().connections, 1);

    proxy.accept();
    let mut accepted = Client::connect(proxy.addr()).unwrap();
    assert_eq!(accepted.ping().unwrap(), pong());
}

#[test]
fn retarget_sends_new_connections_to_another_server_and_leaves_old_ones_alone() {
    let first = Server::start();
    let second = Server::start();
    let proxy = FaultProxy::start(first.addr).unwrap();
    let mut old = Client::connect(proxy.addr()).unwrap();
    assert_eq!(old.server_port(), first.port());

    proxy.retarget(second.addr);
    let mut new = Client::connect(proxy.addr()).unwrap();
    assert_eq!(new.server_port(), second.port());
    assert_eq!(old.server_port(), first.port());

    assert_eq!(
        old.cmd(&["SET", "via-old", "1"]).unwrap(),
        Resp::Simple("OK".into())
    );
    assert_eq!(
        new.cmd(&["SET", "via-new", "2"]).unwrap(),
        Resp::Simple("OK".into())
    );
    let mut first_direct = Client::connect(first.addr).unwrap();
    let mut second_direct = Client::connect(second.addr).unwrap();
    assert_eq!(
        first_direct.cmd(&["GET", "via-old"]).unwrap(),
        Resp::bulk("1")
    );
    assert_eq!(
        first_direct.cmd(&["GET", "via-new"]).unwrap(),
        Resp::Bulk(None)
    );
    assert_eq!(
        second_direct.cmd(&["GET", "via-new"]).unwrap(),
        Resp::bulk("2")
    );
    assert_eq!(
        second_direct.cmd(&["GET", "via-old"]).unwrap(),
        Resp::Bulk(None)
    );
}

#[test]
fn stats_count_accepted_connections_and_show_no_io_when_clients_never_send() {
    let server = Server::start();
    let proxy = FaultProxy::start(server.addr).unwrap();
    assert_eq!(proxy.stats(), ProxyStats::default());

    let clients: Vec<Client> = (0..3)
        .map(|_| Client::connect(proxy.addr()).unwrap())
        .collect();
    eventually("three connections are accepted", || {
        proxy.stats().connections == 3
    });
    assert_eq!(
        proxy.stats(),
        ProxyStats {
            connections: 3,
            active: 3,
            bytes_up: 0,
            bytes_down: 0,
        }
    );

    drop(clients);
    eventually("no connection is active", || proxy.stats().active == 0);
    assert_eq!(proxy.stats().connections, 3);
}

#[test]
fn dropping_the_proxy_closes_its_connections_and_its_listener() {
    let server = Server::start();
    let proxy = FaultProxy::start(server.addr).unwrap();
    let addr = proxy.addr();
    let mut client = Client::connect(addr).unwrap();
    assert_eq!(client.ping().unwrap(), pong());

    drop(proxy);
    assert_connection_fails(&mut client, "a connection of a dropped proxy");
    assert!(
        TcpStream::connect(addr).is_err(),
        "the listener is still open"
    );
}

#[test]
fn a_proxy_can_be_started_controlled_and_dropped_inside_a_tokio_runtime() {
    let server = Server::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let proxy = FaultProxy::start(server.addr).unwrap();
        let mut stream = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.hold();
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        let mut reply = [0; 7];
        let early = tokio::time::timeout(SILENCE, stream.read_exact(&mut reply)).await;
        assert!(early.is_err(), "a held reply arrived: {early:?}");

        proxy.deliver_held();
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut reply))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
        drop(proxy);
    });
}

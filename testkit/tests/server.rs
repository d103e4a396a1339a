//! The redis-server sandbox against a real `redis-server`.

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use quorumlock_testkit::{RedisNodes, RedisServer, RedisServerBuilder, REDIS_SERVER_ENV};

/// Sends one command as a RESP array and returns the reply as text: `+OK`, `-ERR ..`, `:1`, the
/// contents of a bulk string, or `(nil)`.
fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<String> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    let mut reader = BufReader::new(stream);
    reader.get_mut().write_all(request.as_bytes())?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_owned();
    match line.strip_prefix('$') {
        Some("-1") => Ok("(nil)".to_owned()),
        Some(len) => {
            let len: usize = len.parse().unwrap();
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Ok(String::from_utf8(body).unwrap())
        }
        None => Ok(line),
    }
}

fn ping(server: &RedisServer) -> io::Result<String> {
    command(server.addr(), &["PING"], Duration::from_millis(200))
}

#[test]
fn spawn_answers_ping() {
    let server = RedisServer::spawn().unwrap();
    assert_eq!(ping(&server).unwrap(), "+PONG", "{}", server.log());
    assert!(server.is_running());
    assert!(server.pid().is_some());
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(server.addr().ip().is_loopback());
    assert!(server.dir().is_dir());
    assert!(
        server.log().contains("Ready to accept connections"),
        "{}",
        server.log()
    );
}

#[test]
fn two_servers_get_different_ports_and_dirs() {
    let a = RedisServer::spawn().unwrap();
    let b = RedisServer::spawn().unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    assert_eq!(ping(&a).unwrap(), "+PONG");
    assert_eq!(ping(&b).unwrap(), "+PONG");
}

#[test]
fn dropping_a_server_stops_it_and_removes_its_dir() {
    let server = RedisServer::spawn().unwrap();
    let addr = server.addr();
    let dir = server.dir().to_owned();
    drop(server);
    assert!(TcpStream::connect(addr).is_err());
    assert!(!dir.exists());
}

#[test]
fn kill_refuses_connections_and_restart_comes_back_on_the_same_port() {
    let mut server = RedisServer::spawn().unwrap();
    let port = server.port();
    let dir = server.dir().to_owned();

    server.kill().unwrap();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(TcpStream::connect(server.addr()).is_err());
    server.kill().unwrap(); // idempotent

    server.restart().unwrap();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_eq!(server.dir(), dir);
    assert_eq!(ping(&server).unwrap(), "+PONG", "{}", server.log());
}

#[test]
fn restart_of_a_running_server_gives_it_a_new_process() {
    let mut server = RedisServer::spawn().unwrap();
    let before = server.pid().unwrap();
    server.restart().unwrap();
    let after = server.pid().unwrap();
    assert_ne!(before, after);
    assert_eq!(ping(&server).unwrap(), "+PONG");
}

#[test]
fn restart_keeps_data_with_aof() {
    let mut server = RedisServer::builder().aof(true).spawn().unwrap();
    let timeout = Duration::from_secs(2);
    assert_eq!(
        command(server.addr(), &["SET", "k", "v"], timeout).unwrap(),
        "+OK"
    );
    server.kill().unwrap();
    server.restart().unwrap();
    assert_eq!(
        command(server.addr(), &["GET", "k"], timeout).unwrap(),
        "v",
        "{}",
        server.log()
    );
}

#[test]
fn restart_loses_data_without_aof() {
    let mut server = RedisServer::spawn().unwrap();
    let timeout = Duration::from_secs(2);
    assert_eq!(
        command(server.addr(), &["SET", "k", "v"], timeout).unwrap(),
        "+OK"
    );
    assert_eq!(command(server.addr(), &["GET", "k"], timeout).unwrap(), "v");
    server.kill().unwrap();
    server.restart().unwrap();
    assert_eq!(
        command(server.addr(), &["GET", "k"], timeout).unwrap(),
        "(nil)"
    );
}

#[test]
fn pause_makes_ping_time_out_and_resume_answers_again() {
    let server = RedisServer::spawn().unwrap();
    server.pause().unwrap();
    assert!(server.is_running(), "a paused server is still running");
    let error = ping(&server).unwrap_err();
    assert!(
        matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "expected a timeout, got {error:?}"
    );
    server.resume().unwrap();
    assert_eq!(ping(&server).unwrap(), "+PONG");
}

#[test]
fn kill_works_on_a_paused_server() {
    let mut server = RedisServer::spawn().unwrap();
    server.pause().unwrap();
    server.kill().unwrap();
    assert!(!server.is_running());
    assert!(TcpStream::connect(server.addr()).is_err());
    assert!(server.pause().is_err(), "no signal after kill");
    assert!(server.resume().is_err(), "no signal after kill");
}

#[test]
fn extra_args_reach_the_server() {
    let server = RedisServer::builder()
        .arg("--requirepass")
        .arg("secret")
        .spawn()
        .unwrap();
    let timeout = Duration::from_secs(2);
    assert!(ping(&server).unwrap().starts_with("-NOAUTH"));
    assert_eq!(
        command(server.addr(), &["AUTH", "secret"], timeout).unwrap(),
        "+OK"
    );
    let debug = format!("{server:?}");
    assert!(!debug.contains("secret"), "{debug}");
}

#[test]
fn debug_command_is_enabled() {
    let server = RedisServer::spawn().unwrap();
    let reply = command(
        server.addr(),
        &["DEBUG", "SLEEP", "0"],
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(reply, "+OK");
}

#[test]
fn a_bad_argument_fails_with_the_log() {
    let error = RedisServer::builder()
        .arg("--no-such-option")
        .arg("1")
        .spawn()
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("exited during start-up"), "{message}");
    assert!(
        message.contains("no-such-option"),
        "the log tail: {message}"
    );
}

#[test]
fn nodes_spawn_three_distinct_urls() {
    let nodes = RedisNodes::spawn(3).unwrap();
    assert_eq!(nodes.len(), 3);
    assert!(!nodes.is_empty());
    let urls = nodes.urls();
    assert_eq!(urls.len(), 3);
    assert_eq!(urls.iter().collect::<HashSet<_>>().len(), 3, "{urls:?}");
    for server in nodes.iter() {
        assert_eq!(ping(server).unwrap(), "+PONG");
    }
    let logs = nodes.logs();
    for url in &urls {
        assert!(logs.contains(url.as_str()), "{logs}");
    }
}

#[test]
fn nodes_index_mut_faults_one_node_only() {
    let mut nodes = RedisNodes::spawn_with(2, &RedisServerBuilder::new().aof(true)).unwrap();
    nodes[0].kill().unwrap();
    assert!(!nodes[0].is_running());
    assert!(nodes[1].is_running());
    assert_eq!(ping(&nodes[1]).unwrap(), "+PONG");
    nodes[0].restart().unwrap();
    assert_eq!(ping(&nodes[0]).unwrap(), "+PONG");
}

#[test]
fn a_missing_binary_says_how_to_install_redis_server() {
    let error = RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .spawn()
        .unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    let message = error.to_string();
    assert!(message.contains("`redis-server`"), "{message}");
    assert!(message.contains(REDIS_SERVER_ENV), "{message}");
    assert!(message.contains("/nonexistent/redis-server"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_work_inside_a_multi_thread_runtime() {
    let mut server = RedisServer::spawn().unwrap();
    let addr = server.addr();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"PING\r\n")
        .await
        .unwrap();
    let mut reply = [0; 7];
    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut reply)
        .await
        .unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
    server.restart().unwrap();
    assert_eq!(ping(&server).unwrap(), "+PONG");
}

#[test]
fn restart_fails_while_another_process_holds_the_port_and_succeeds_once_it_is_free() {
    let mut server = RedisServer::spawn().unwrap();
    server.kill().unwrap();
    let squatter = std::net::TcpListener::bind(server.addr()).unwrap();
    let error = server.restart().unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
    assert!(!server.is_running());

    // Released while restart is retrying: the retry picks the port up.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(250));
        drop(squatter);
    });
    server.restart().unwrap();
    releaser.join().unwrap();
    assert_eq!(ping(&server).unwrap(), "+PONG", "{}", server.log());
}

#[test]
fn a_binary_that_exits_at_once_fails_fast_with_its_output() {
    let started = std::time::Instant::now();
    let error = RedisServer::builder()
        .binary("/bin/sleep") // rejects the redis arguments and exits
        .spawn()
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("exited during start-up"), "{message}");
    assert!(message.contains("sleep"), "its stderr: {message}");
    assert!(started.elapsed() < Duration::from_secs(5), "{message}");
}

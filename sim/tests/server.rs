//! The RESP server as the `redis` crate's clients see it: pipelined replies in order, RESP3
//! pushes for sharded subscriptions, a password, and a crash that drops every connection and
//! the script cache.

use std::time::Duration;

use quorumlock_sim::{listen, lock, shared, Clock, Config, Master, Server, VirtualTime};
use redis::{AsyncConnectionConfig, PushKind, Value};
use tokio::sync::mpsc;

const START: Duration = Duration::from_secs(1_795_000_000);

async fn server(config: Config) -> (VirtualTime, Server) {
    let time = VirtualTime::new(START);
    let master = Master::with_config(Clock::following(&time), config).unwrap();
    (time, listen(shared(master)).await.unwrap())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (_, server) = server(Config::default()).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    for i in 0..200 {
        pipe.cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .arg("NX")
            .arg("PX")
            .arg(1000);
        pipe.cmd("GET").arg(format!("k{i}"));
    }
    let replies: Vec<Value> = pipe.query_async(&mut conn).await.unwrap();
    for (i, pair) in replies.chunks(2).enumerate() {
        assert_eq!(pair[0], Value::Okay);
        assert_eq!(pair[1], Value::BulkString(i.to_string().into_bytes()));
    }
    // Concurrent requests on one multiplexed connection each get their own reply.
    let requests = (0..50).map(|i| {
        let mut conn = conn.clone();
        async move {
            let n: i64 = redis::cmd("EVAL")
                .arg("return tonumber(ARGV[1]) * 2")
                .arg(0)
                .arg(i)
                .query_async(&mut conn)
                .await
                .unwrap();
            (i, n)
        }
    });
    for (i, n) in futures::future::join_all(requests).await {
        assert_eq!(n, i * 2);
    }
}

#[tokio::test]
async fn a_resp3_connection_hears_spublish_as_a_push() {
    let (_, server) = server(Config::default()).await;
    let url = format!("{}?protocol=resp3", server.url());
    let client = redis::Client::open(url).unwrap();
    let (sender, mut pushes) = mpsc::unbounded_channel();
    let config = AsyncConnectionConfig::new().set_push_sender(sender);
    let mut subscriber = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let _: Value = redis::cmd("SSUBSCRIBE")
        .arg("{r}:released:c")
        .query_async(&mut subscriber)
        .await
        .unwrap();
    let confirmed = pushes.recv().await.unwrap();
    assert_eq!(confirmed.kind, PushKind::SSubscribe);

    let publisher = redis::Client::open(server.url()).unwrap();
    let mut publisher = publisher.get_multiplexed_async_connection().await.unwrap();
    let reached: i64 = redis::cmd("EVAL")
        .arg("return redis.call('SPUBLISH', ARGV[1], ARGV[2])")
        .arg(0)
        .arg("{r}:released:c")
        .arg("w:1:2")
        .query_async(&mut publisher)
        .await
        .unwrap();
    assert_eq!(reached, 1);
    let message = tokio::time::timeout(Duration::from_secs(2), pushes.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.kind, PushKind::SMessage);
    assert_eq!(
        message.data,
        [
            Value::BulkString(b"{r}:released:c".to_vec()),
            Value::BulkString(b"w:1:2".to_vec())
        ]
    );
    // The RESP3 connection still answers requests, with RESP3's types.
    let hello: Value = redis::cmd("HELLO")
        .arg(3)
        .query_async(&mut subscriber)
        .await
        .unwrap();
    assert!(matches!(hello, Value::Map(_)), "{hello:?}");
}

#[tokio::test]
async fn a_password_protected_master_lets_in_only_the_right_password() {
    let (_, server) = server(Config::default().password("s3cret")).await;
    let port = server.addr().port();
    let right = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}")).unwrap();
    let mut conn = right.get_multiplexed_async_connection().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    let wrong = redis::Client::open(format!("redis://:nope@127.0.0.1:{port}")).unwrap();
    assert!(wrong.get_multiplexed_async_connection().await.is_err());
    let none = redis::Client::open(server.url()).unwrap();
    let mut conn = none.get_multiplexed_async_connection().await.unwrap();
    let refused: Result<Value, _> = redis::cmd("GET").arg("k").query_async(&mut conn).await;
    assert_eq!(refused.unwrap_err().code(), Some("NOAUTH"));
}

#[tokio::test]
async fn a_crash_drops_every_connection_and_the_scripts_and_keeps_the_data_it_was_told_to() {
    let (time, server) = server(Config::default().aof(true)).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new("return redis.call('SET', KEYS[1], ARGV[1], 'PX', 10000)");
    let sha = script.get_hash().to_owned();
    let _: Value = script
        .key("k")
        .arg("v")
        .invoke_async(&mut conn)
        .await
        .unwrap();

    lock(server.master()).crash(true);
    let dropped: Result<Value, _> = redis::cmd("GET").arg("k").query_async(&mut conn).await;
    assert!(dropped.is_err(), "the old connection is gone: {dropped:?}");

    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let value: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "v");
    let noscript: Result<Value, _> = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(1)
        .arg("k")
        .arg("w")
        .query_async(&mut conn)
        .await;
    assert_eq!(noscript.unwrap_err().code(), Some("NOSCRIPT"));

    // The key expires on the master's clock, which only the simulation moves.
    time.advance(Duration::from_millis(10_001));
    let gone: Option<String> = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(gone, None);

    lock(server.master()).crash(false);
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(size, 0);
}

#[tokio::test]
async fn a_master_down_for_a_while_comes_back_on_its_port() {
    let (_, server) = server(Config::default().aof(true)).await;
    let (addr, master) = (server.addr(), server.master().clone());
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    drop(server);
    assert!(client.get_multiplexed_async_connection().await.is_err());
    lock(&master).crash(true);
    let _back = quorumlock_sim::listen_on(master, addr).await.unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let value: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "v");
}

#[tokio::test]
async fn a_master_is_served_over_any_async_stream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let time = VirtualTime::new(START);
    let master = shared(Master::new(Clock::following(&time)).unwrap());
    let (mut client, server_end) = tokio::io::duplex(4096);
    let serving = tokio::spawn(quorumlock_sim::serve(master, server_end));
    client
        .write_all(
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
        )
        .await
        .unwrap();
    let expected = b"+OK\r\n+PONG\r\n$1\r\nv\r\n";
    let mut got = vec![0; expected.len()];
    client.read_exact(&mut got).await.unwrap();
    assert_eq!(got, expected);
    client.write_all(b"QUIT\r\n").await.unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"+OK\r\n");
    serving.await.unwrap().unwrap();
}

//! Bad input gets a clear error and touches no server.

use std::net::TcpListener;
use std::time::Duration;

use quorumlock::{ConfigError, Error, Redlock};

/// A listener that stands in for a node and counts the connections it is offered.
struct Sentinel {
    listener: TcpListener,
}

impl Sentinel {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Sentinel { listener }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.listener.local_addr().unwrap())
    }

    fn connections(&self) -> usize {
        std::iter::from_fn(|| self.listener.accept().ok()).count()
    }
}

fn sentinels(n: usize) -> Vec<Sentinel> {
    (0..n).map(|_| Sentinel::new()).collect()
}

fn urls(s: &[Sentinel]) -> Vec<String> {
    s.iter().map(Sentinel::url).collect()
}

fn no_connection_was_made(s: &[Sentinel]) {
    // Give a stray connect a moment to arrive before concluding none did.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(s.iter().map(Sentinel::connections).sum::<usize>(), 0);
}

fn config_error(result: Result<Redlock, Error>) -> ConfigError {
    match result {
        Err(Error::Config(e)) => e,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn no_nodes_is_a_configuration_error() {
    let e = config_error(Redlock::builder(Vec::<String>::new()).build());
    assert!(matches!(e, ConfigError::NoNodes));
}

#[test]
fn an_unparsable_url_is_named_with_its_password_hidden() {
    let s = sentinels(2);
    let mut list = urls(&s);
    list.push("http://:hunter2@example/".into());
    let e = config_error(Redlock::builder(&list).build());
    let text = e.to_string();
    assert!(matches!(e, ConfigError::InvalidUrl { .. }), "{text}");
    assert!(text.contains("http://***@example/"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    no_connection_was_made(&s);
}

#[test]
fn the_same_master_listed_twice_is_refused() {
    let s = sentinels(2);
    let mut list = urls(&s);
    list.push(s[0].url());
    let e = config_error(Redlock::builder(&list).build());
    assert!(matches!(e, ConfigError::DuplicateNode { .. }), "{e}");
    no_connection_was_made(&s);
}

#[test]
fn the_same_address_in_another_database_is_a_different_node() {
    let s = sentinels(1);
    let list = [format!("{}/0", s[0].url()), format!("{}/1", s[0].url())];
    assert!(Redlock::builder(list).build().is_ok());
}

#[test]
fn a_drift_factor_outside_zero_to_one_is_refused() {
    let s = sentinels(3);
    for factor in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        let e = config_error(Redlock::builder(urls(&s)).drift_factor(factor).build());
        assert!(matches!(e, ConfigError::DriftFactor(_)), "{factor}: {e}");
    }
    assert!(Redlock::builder(urls(&s)).drift_factor(0.0).build().is_ok());
}

#[test]
fn a_zero_node_timeout_is_refused() {
    let s = sentinels(3);
    let e = config_error(
        Redlock::builder(urls(&s))
            .node_timeout(Duration::ZERO)
            .build(),
    );
    assert!(matches!(e, ConfigError::ZeroNodeTimeout));
}

#[test]
fn build_does_no_io_even_when_every_node_is_down() {
    let s = sentinels(3);
    let rl = Redlock::builder(urls(&s)).build().unwrap();
    assert_eq!((rl.node_count(), rl.quorum()), (3, 2));
    no_connection_was_made(&s);
}

#[tokio::test]
async fn an_empty_resource_is_refused_without_contacting_a_node() {
    let s = sentinels(3);
    let rl = Redlock::builder(urls(&s)).build().unwrap();
    let err = rl.acquire("", Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    assert!(!err.is_retriable());
    no_connection_was_made(&s);
}

#[tokio::test]
async fn a_name_that_leaves_its_keys_without_a_hash_tag_is_refused_without_contacting_a_node() {
    let s = sentinels(3);
    let rl = Redlock::builder(urls(&s)).build().unwrap();
    // Under no prefix, `}x` is the key `{}x}`: Redis Cluster would hash it whole, and the
    // resource's keys would be spread over slots.
    let err = rl.acquire("}x", Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, Error::InvalidResource { .. }), "{err}");
    assert!(!err.is_retriable());
    no_connection_was_made(&s);
}

#[tokio::test]
async fn unusable_ttls_are_refused_without_contacting_a_node() {
    let s = sentinels(3);
    let rl = Redlock::builder(urls(&s))
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let cases = [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::MAX,
        Duration::from_millis(u64::MAX),
        // drift (0.5 ms + 2 ms) + node timeout (50 ms) leaves nothing of 52 ms
        Duration::from_millis(52),
    ];
    for ttl in cases {
        let err = rl.try_acquire("r", ttl).await.unwrap_err();
        assert!(matches!(err, Error::InvalidTtl { .. }), "{ttl:?}: {err}");
        assert!(!err.is_retriable());
    }
    no_connection_was_made(&s);
}

#[tokio::test]
async fn the_default_node_timeout_follows_the_ttl() {
    let s = sentinels(3);
    let rl = Redlock::builder(urls(&s)).build().unwrap();
    // 5 ms: drift 2.05 ms + default timeout max(5/20, 1) = 1 ms leaves room; 3 ms does not.
    let err = rl
        .try_acquire("r", Duration::from_millis(3))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTtl { .. }), "{err}");
    no_connection_was_made(&s);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_server_under_two_names_is_found_by_connect() {
    let server = quorumlock_testkit::RedisServer::spawn().unwrap();
    let other = quorumlock_testkit::RedisServer::spawn().unwrap();
    let list = [
        format!("redis://127.0.0.1:{}", server.port()),
        format!("redis://localhost:{}", server.port()),
        other.url(),
    ];
    let rl = Redlock::builder(list).build().unwrap();
    let err = rl.connect().await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::DuplicateNode { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("run_id"), "{err}");
}

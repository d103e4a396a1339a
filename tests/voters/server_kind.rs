//! Which server the suite runs against. `QUORUMLOCK_REDIS_SERVER` picks the binary the test kit
//! starts; `make test` runs most of the suite on Debian's Redis 7.0 and the core, line, primitive
//! and chaos tests again on Valkey 9 (`make test-valkey`), with `QUORUMLOCK_EXPECT_SERVER` set so
//! that a run meant for one server cannot quietly test the other.

use crate::common;

use common::query;
use quorumlock_testkit::RedisServer;

#[test]
fn the_servers_started_are_the_ones_asked_for() {
    let server = RedisServer::spawn().unwrap();
    let info: String = query(&server, redis::cmd("INFO").arg("server"));
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    let (kind, version) = match field("valkey_version") {
        Some(version) => ("valkey", version),
        None => ("redis", field("redis_version").unwrap_or_default()),
    };
    println!("servers under test: {kind} {version}");
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 6,
        "{kind} {version}: the library needs 6.2 or later"
    );
    if let Ok(expected) = std::env::var("QUORUMLOCK_EXPECT_SERVER") {
        assert_eq!(kind, expected, "{kind} {version} started");
    }
}

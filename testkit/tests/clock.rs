//! The clock nemesis against real servers: wall clocks skewed, bumped, strobed and running fast,
//! through libfaketime.
//!
//! The faked servers run `valkey-server` (Valkey 9, the libc allocator): the binary named by
//! `QUORUMLOCK_VALKEY_SERVER`, or else the one `scripts/ensure-valkey-server.sh` puts in
//! `target/valkey/` (`make test` runs it first). Debian's `redis-server` hangs at start-up under
//! Debian's libfaketime 0.9.10 (its shared jemalloc; see the `clock` module), which
//! `the_default_server_follows_the_clock_or_refuses_it_at_once` pins down.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorumlock_testkit::clock::{Clock, Offset};
use quorumlock_testkit::{RedisServer, RedisServerBuilder};

/// How far a measured skew may be from the one set.
const TOLERANCE: Duration = Duration::from_millis(300);

/// Slack for a TTL read against the real time measured around the commands (the server keeps
/// milliseconds).
const TTL_SLACK_MS: i64 = 20;

/// A server binary that runs under libfaketime.
fn clock_server() -> PathBuf {
    if let Some(path) = std::env::var_os("QUORUMLOCK_VALKEY_SERVER").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let fetched = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/valkey/valkey-server");
    assert!(
        fetched.is_file(),
        "no valkey-server at {}: run scripts/ensure-valkey-server.sh (make test does), or set \
         QUORUMLOCK_VALKEY_SERVER",
        fetched.display()
    );
    fetched
}

/// A server on `clock`, running the clock server binary.
fn faked(clock: Clock) -> RedisServer {
    RedisServerBuilder::new()
        .binary(clock_server())
        .clock(clock)
        .spawn()
        .unwrap()
}

fn connect(server: &RedisServer) -> redis::Connection {
    let client = redis::Client::open(server.url()).unwrap();
    let connection = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    connection
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    connection
}

/// The server's `TIME`, in microseconds since the epoch.
fn server_time(conn: &mut redis::Connection) -> i128 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    i128::from(secs) * 1_000_000 + i128::from(micros)
}

fn real_time() -> i128 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i128::try_from(since.as_micros()).unwrap()
}

/// Asserts that the server's `TIME` is `expected` microseconds from the real time (negative:
/// behind), within [`TOLERANCE`] and the time the command took.
fn assert_skew(server: &RedisServer, expected: i128) {
    let mut conn = connect(server);
    let before = real_time();
    let time = server_time(&mut conn);
    let after = real_time();
    let skew = time - (before + after) / 2;
    let allowed = i128::try_from(TOLERANCE.as_micros()).unwrap() + (after - before) / 2;
    assert!(
        (skew - expected).abs() <= allowed,
        "server TIME is {skew} µs from the real time, expected {expected} µs ± {allowed}; \
         log:\n{}",
        server.log()
    );
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

fn set_px(conn: &mut redis::Connection, key: &str, ms: u64) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .arg("PX")
        .arg(ms)
        .query(conn)
        .unwrap();
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

#[test]
fn a_server_ahead_reports_time_ahead_and_expires_keys_normally_on_its_clock() {
    let server = faked(Clock::ahead(Duration::from_secs(5)));
    assert_skew(&server, 5_000_000);

    let mut conn = connect(&server);
    let before_set = Instant::now();
    set_px(&mut conn, "k", 1000);
    let after_set = Instant::now();

    std::thread::sleep(Duration::from_millis(500));
    let before = Instant::now();
    let ttl = pttl(&mut conn, "k");
    let after = Instant::now();
    let longest = 1000 - millis(before - after_set) + TTL_SLACK_MS;
    let shortest = 1000 - millis(after - before_set) - TTL_SLACK_MS;
    assert!(
        (shortest..=longest).contains(&ttl),
        "PTTL {ttl} ms at +0.5 s, expected {shortest}..={longest}"
    );

    std::thread::sleep(
        (after_set + Duration::from_millis(1500)).saturating_duration_since(Instant::now()),
    );
    assert_eq!(pttl(&mut conn, "k"), -2, "the key outlived 1.5 s");
}

#[test]
fn bumping_the_clock_forward_expires_keys_at_once() {
    let server = faked(Clock::ahead(Duration::from_secs(5)));
    let mut conn = connect(&server);
    let before_set = Instant::now();
    set_px(&mut conn, "doomed", 2000);
    set_px(&mut conn, "control", 10_000);

    server
        .set_clock(Clock::ahead(Duration::from_secs(8)))
        .unwrap();
    assert_eq!(pttl(&mut conn, "doomed"), -2, "2 s left, 3 s bump: gone");
    let doomed: Option<String> = redis::cmd("GET").arg("doomed").query(&mut conn).unwrap();
    assert_eq!(doomed, None);
    // The control key lost the 3 s of the bump and the real time that passed, no more.
    let ttl = pttl(&mut conn, "control");
    let elapsed = millis(before_set.elapsed());
    assert!(
        (7000 - elapsed - TTL_SLACK_MS..=7000 + TTL_SLACK_MS).contains(&ttl),
        "control PTTL {ttl} ms after a 3 s bump and {elapsed} ms"
    );
    assert_skew(&server, 8_000_000);
    assert_eq!(server.clock(), Some(Clock::ahead(Duration::from_secs(8))));
}

#[test]
fn a_server_at_rate_two_advances_two_seconds_per_real_second() {
    let server = faked(Clock::real().running_at(2.0));
    let mut conn = connect(&server);
    let before0 = Instant::now();
    let t0 = server_time(&mut conn);
    let after0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let before1 = Instant::now();
    let t1 = server_time(&mut conn);
    let after1 = Instant::now();

    let server_elapsed = (t1 - t0) as f64 / 1e6;
    let shortest = (before1 - after0).as_secs_f64();
    let longest = (after1 - before0).as_secs_f64();
    assert!(
        (2.0 * shortest - 0.1..=2.0 * longest + 0.1).contains(&server_elapsed),
        "TIME advanced {server_elapsed:.3} s in {shortest:.3}..{longest:.3} real seconds"
    );
}

#[test]
fn a_server_behind_reports_time_behind_and_expires_absolute_deadlines_late() {
    let server = faked(Clock::behind(Duration::from_secs(2)));
    assert_skew(&server, -2_000_000);

    // A deadline 1 s ahead of the real clock is 3 s ahead of this server's.
    let mut conn = connect(&server);
    let deadline_ms = real_time() / 1000 + 1000;
    let before = Instant::now();
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PXAT")
        .arg(u64::try_from(deadline_ms).unwrap())
        .query(&mut conn)
        .unwrap();
    let ttl = pttl(&mut conn, "k");
    let elapsed = millis(before.elapsed());
    let slack = millis(TOLERANCE);
    assert!(
        (3000 - elapsed - slack..=3000 + slack).contains(&ttl),
        "PTTL {ttl} ms for a deadline 1 s ahead of the real clock"
    );
}

#[test]
fn the_clock_last_set_survives_a_restart() {
    let mut server = faked(Clock::ahead(Duration::from_secs(5)));
    server
        .set_clock(Clock::behind(Duration::from_secs(3)))
        .unwrap();
    let old = server.pid().unwrap();
    let shm = PathBuf::from(format!("/dev/shm/faketime_shm_{old}"));
    let had_shm = shm.exists();

    server.restart().unwrap();
    assert_ne!(server.pid().unwrap(), old);
    assert_eq!(server.clock(), Some(Clock::behind(Duration::from_secs(3))));
    assert_skew(&server, -3_000_000);
    if had_shm {
        assert!(!shm.exists(), "libfaketime's {} left behind", shm.display());
    }

    server.kill().unwrap();
    server.restart().unwrap();
    assert_skew(&server, -3_000_000);
}

#[test]
fn strobing_the_clock_moves_time_back_and_forth() {
    let server = faked(Clock::real());
    assert_skew(&server, 0);
    for i in 0..6 {
        let (clock, expected) = if i % 2 == 0 {
            (Clock::ahead(Duration::from_secs(2)), 2_000_000)
        } else {
            (Clock::behind(Duration::from_secs(2)), -2_000_000)
        };
        server.set_clock(clock).unwrap();
        assert_skew(&server, expected);
    }

    // A bad rate is refused, and the clock stays as it was.
    let error = server.set_clock(Clock::real().running_at(0.0)).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        server.clock().map(|c| c.offset()),
        Some(Offset::Behind(Duration::from_secs(2)))
    );
    assert_skew(&server, -2_000_000);
}

#[test]
fn set_clock_refuses_a_server_built_without_one() {
    let server = RedisServer::spawn().unwrap();
    assert_eq!(server.clock(), None);
    let error = server.set_clock(Clock::real()).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::Unsupported);
    assert!(
        error.to_string().contains("RedisServerBuilder::clock"),
        "{error}"
    );
}

#[test]
fn spawn_names_a_missing_libfaketime_and_how_to_install_it() {
    let missing = "/nonexistent/faketime/libfaketime.so.1";
    let error = RedisServerBuilder::new()
        .libfaketime(missing)
        .clock(Clock::ahead(Duration::from_secs(1)))
        .spawn()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
    let message = error.to_string();
    assert!(message.contains(missing), "{message}");
    assert!(message.contains("make test"), "{message}");
}

#[test]
fn spawn_refuses_a_rate_that_is_not_above_zero() {
    let error = RedisServerBuilder::new()
        .binary(clock_server())
        .clock(Clock::real().running_at(-1.0))
        .spawn()
        .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

/// The default binary (Debian's `redis-server` here) either runs on the clock, or, when it
/// cannot start under libfaketime, fails at once (not at the 10 s start-up timeout) with an
/// error that says why.
#[test]
fn the_default_server_follows_the_clock_or_refuses_it_at_once() {
    let started = Instant::now();
    match RedisServerBuilder::new()
        .clock(Clock::ahead(Duration::from_secs(5)))
        .spawn()
    {
        Ok(server) => assert_skew(&server, 5_000_000),
        Err(error) => {
            let took = started.elapsed();
            eprintln!("refused after {took:?}: {error}");
            assert_eq!(error.kind(), std::io::ErrorKind::Unsupported, "{error}");
            assert!(error.to_string().contains("jemalloc"), "{error}");
            assert!(took < Duration::from_secs(5), "refused after {took:?}");
        }
    }
}

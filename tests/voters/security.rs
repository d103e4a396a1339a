//! Security: TLS to the nodes, a least-privilege ACL user, secrets kept out of every output, and
//! resource names that are only ever data.
//!
//! # The least-privilege ACL
//!
//! Everything quorumlock sends, with the key prefix `locks:` (`RedlockBuilder::key_prefix`):
//!
//! ```text
//! ACL SETUSER quorumlock reset on >PASSWORD ~locks:* ~{locks:* &locks:* &{locks:* -@all +eval +evalsha +script|load +set +get +del +exists +pexpire +pttl +zadd +zrem +zrange +zscore +pexpiretime +zcount +zcard +zremrangebyscore +time +spublish +ssubscribe +sunsubscribe +info
//! ```
//!
//! * keys `~locks:*` (key layout 3): the lock keys `locks:<resource>` and the key layout marker
//!   `locks:quorumlock:layout`; `~{locks:*`: their companions, in the lock key's slot — fencing
//!   counters (`{locks:<resource>}:fence`) and wait lines (`{locks:<resource>}:queue`,
//!   `{locks:<resource>}:leases`); a name with a hash tag of its own has its companions under
//!   `locks:` (`locks:user:{42}:fence`). Channels `&locks:*` and `&{locks:*`: the hand-offs
//!   (`{locks:<resource>}:released:<client>`). A `{` is no pattern character in an ACL rule.
//! * `EVAL`, `EVALSHA`, `SCRIPT LOAD` run the scripts; `SET`, `GET`, `DEL`, `EXISTS`, `PEXPIRE`,
//!   `PTTL`, `INCR`, the sorted-set commands, `TIME` and `SPUBLISH` are what the scripts call (a
//!   script runs with its caller's permissions); `SSUBSCRIBE` / `SUNSUBSCRIBE` wait for
//!   hand-offs (sharded pub/sub); `INFO` is the check at connect that a master is standalone,
//!   and `Redlock::connect`'s duplicate-server check.
//!
//! `acl_rule_lets_the_core_behaviours_through_and_nothing_else` runs the core behaviours as that
//! user, and `every_permission_in_the_acl_rule_is_needed` takes each command away in turn and shows
//! a behaviour that then fails.

use crate::common;

use crate::captured::{logged, logs};
use std::time::Duration;

use common::*;
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisNodes, RedisServer};

const TTL: Duration = Duration::from_secs(10);
const PREFIX: &str = "locks:";
const PASSWORD: &str = "s3cr3t-acl-passw0rd";
const WRONG_PASSWORD: &str = "wr0ng-passw0rd-xyz";

/// The commands the core behaviours need (see the module docs); each is shown to be needed.
const CORE_COMMANDS: &[&str] = &[
    "eval",
    "evalsha",
    "script|load",
    "set",
    "get",
    "del",
    "exists",
    "pexpire",
    "pttl",
    "zadd",
    "zrem",
    "zrange",
    "zscore",
    "pexpiretime",
    "zcount",
    "zcard",
    "zremrangebyscore",
    "time",
    "spublish",
    "ssubscribe",
    "sunsubscribe",
    "info",
];

/// The whole least-privilege rule's commands.
fn all_commands() -> Vec<&'static str> {
    CORE_COMMANDS.to_vec()
}

// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// ACL.

fn acl_rule(commands: &[&str]) -> Vec<String> {
    let mut rule: Vec<String> = ["reset", "on"].map(String::from).to_vec();
    rule.push(format!(">{PASSWORD}"));
    rule.push(format!("~{PREFIX}*"));
    rule.push(format!("~{{{PREFIX}*"));
    rule.push(format!("&{PREFIX}*"));
    rule.push(format!("&{{{PREFIX}*"));
    rule.push("-@all".to_owned());
    rule.extend(commands.iter().map(|c| format!("+{c}")));
    rule
}

fn set_acl_user(server: &RedisServer, commands: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("quorumlock");
    for part in acl_rule(commands) {
        cmd.arg(part);
    }
    let _: () = cmd.query(&mut direct(server)).unwrap();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut direct(server))
        .unwrap();
}

fn acl_url(server: &RedisServer, password: &str) -> String {
    format!("redis://quorumlock:{password}@127.0.0.1:{}", server.port())
}

fn acl_client(nodes: &RedisNodes, password: &str, fencing: bool) -> Redlock {
    Redlock::builder(nodes.iter().map(|s| acl_url(s, password)))
        .key_prefix(PREFIX)
        .node_timeout(Duration::from_millis(200))
        .retry_count(2)
        .retry_delay(Duration::from_millis(20))
        .fencing(fencing)
        .build()
        .unwrap()
}

/// Denials the servers logged (`ACL LOG`), as "object reason".
fn acl_denials(nodes: &RedisNodes) -> Vec<String> {
    let mut denials = Vec::new();
    for server in nodes {
        let entries: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut direct(server))
            .unwrap();
        for entry in entries {
            let fields: Vec<String> = match entry {
                redis::Value::Array(items) => items
                    .into_iter()
                    .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                    .collect(),
                redis::Value::Map(pairs) => pairs
                    .into_iter()
                    .flat_map(|(k, v)| [k, v])
                    .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
                    .collect(),
                _ => continue,
            };
            let field = |name: &str| {
                fields
                    .iter()
                    .position(|f| f == name)
                    .and_then(|i| fields.get(i + 1))
                    .cloned()
                    .unwrap_or_default()
            };
            denials.push(format!("{} ({})", field("object"), field("reason")));
        }
    }
    denials
}

/// `rl` acquiring `resource` in a task, once its place in line is taken on the first master.
async fn wait_in_line(
    nodes: &RedisNodes,
    rl: &Redlock,
    resource: &'static str,
) -> tokio::task::JoinHandle<Result<quorumlock::Lock, Error>> {
    let waiting = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.acquire(resource, TTL).await })
    };
    let line = quorumlock::companion_key(&quorumlock::resource_key(PREFIX, resource), ":queue");
    for _ in 0..100 {
        let queued: usize = redis::cmd("ZCARD")
            .arg(&line)
            .query(&mut direct(&nodes[0]))
            .unwrap();
        if queued > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    waiting
}

/// The core behaviours, as one client sees them; `Err` names the first that failed.
/// With `linger`, it also waits for the waiter's client to drop the hand-off channel it kept
/// subscribed after the wait (2 s, checked every 2 s): the only use of `SUNSUBSCRIBE`.
async fn core_behaviours(nodes: &RedisNodes, password: &str, linger: bool) -> Result<(), String> {
    let rl = acl_client(nodes, password, false);
    let other = acl_client(nodes, password, false);
    rl.connect().await.map_err(|e| format!("connect: {e}"))?;
    let mut lock = rl
        .acquire("orders:1", TTL)
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    match other.try_acquire("orders:1", TTL).await {
        Err(e) if e.is_contention() => {}
        other => return Err(format!("refuse: {other:?}")),
    }
    lock.extend(TTL).await.map_err(|e| format!("extend: {e}"))?;
    // Waiting in line: `other` takes its place, the release hands the lock to it.
    let waiting = wait_in_line(nodes, &other, "orders:1").await;
    let status = rl
        .inspect("orders:1")
        .await
        .map_err(|e| format!("inspect: {e}"))?;
    if status.nodes.iter().all(|n| n.queue.is_empty()) {
        return Err(format!("inspect shows no waiter: {status:?}"));
    }
    let released = lock.release().await.map_err(|e| format!("release: {e}"))?;
    // A quorum of answers, and the key deleted on at least one: a master the grant never
    // reached (a loaded machine) answers "absent", and may answer first.
    if released.deleted == 0 || released.deleted + released.absent < rl.quorum() {
        return Err(format!("release deleted {released:?}"));
    }
    let handed = match waiting.await {
        Ok(result) => result.map_err(|e| format!("wait in line: {e}"))?,
        Err(e) => return Err(format!("wait in line: {e}")),
    };
    if other.stats().wakeups == 0 {
        return Err("the waiter was not handed the lock".to_owned());
    }
    handed
        .release()
        .await
        .map_err(|e| format!("release after the wait: {e}"))?;
    // A waiter's attempt that only a minority granted is rolled back there with the script's
    // source (`EVAL`), which puts it back in its place in line.
    let foreign = quorumlock::resource_key(PREFIX, "orders:3");
    for server in nodes.iter().skip(1) {
        set(server, &foreign, "someone-else", TTL);
    }
    let waiting = wait_in_line(nodes, &other, "orders:3").await;
    // The rollback follows the refusals at once; then the foreign holder goes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for server in nodes.iter().skip(1) {
        let _: () = redis::cmd("DEL")
            .arg(&foreign)
            .query(&mut direct(server))
            .unwrap();
    }
    match waiting.await {
        Ok(Ok(lock)) => drop(lock.release().await),
        Ok(Err(e)) => return Err(format!("wait behind a foreign holder: {e}")),
        Err(e) => return Err(format!("wait behind a foreign holder: {e}")),
    }
    // A read-write lock: a reader keeps a writer out, then the writer gets in.
    let rw = rl.rw_lock("catalog").map_err(|e| format!("rw_lock: {e}"))?;
    let reading = rw.read(TTL).await.map_err(|e| format!("read: {e}"))?;
    let writer = other
        .rw_lock("catalog")
        .map_err(|e| format!("rw_lock: {e}"))?;
    match writer.try_write(TTL).await {
        Err(e) if e.is_contention() => {}
        refused => return Err(format!("write beside a reader: {refused:?}")),
    }
    reading
        .release()
        .await
        .map_err(|e| format!("read release: {e}"))?;
    let writing = writer.write(TTL).await.map_err(|e| format!("write: {e}"))?;
    writing
        .release()
        .await
        .map_err(|e| format!("write release: {e}"))?;
    if linger {
        let subscribed = |server: &RedisServer| {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query(&mut direct(server))
                .unwrap();
            !channels.is_empty()
        };
        let started = std::time::Instant::now();
        while nodes.iter().any(subscribed) {
            if started.elapsed() > Duration::from_secs(6) {
                return Err("the lingering hand-off channel was never unsubscribed".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Fencing, including the second round: the counters disagree, and the last master refuses
    // (another token holds it), so the grants come from masters 0 and 1 with counters AHEAD + 21
    // and AHEAD + 11 (above the masters' clock floor, so that the counters decide).
    const AHEAD: u64 = 4_000_000_000_000_000;
    let fenced = acl_client(nodes, password, true);
    let key = quorumlock::resource_key(PREFIX, "orders:2");
    let fence = quorumlock::companion_key(&key, ":fence");
    for (i, server) in nodes.iter().enumerate() {
        let _: () = redis::cmd("SET")
            .arg(&fence)
            .arg(AHEAD + if i == 0 { 20 } else { 10 })
            .query(&mut direct(server))
            .unwrap();
    }
    set(&nodes[nodes.len() - 1], &key, "someone-else", TTL);
    let lock = fenced
        .acquire("orders:2", TTL)
        .await
        .map_err(|e| format!("fenced acquire: {e}"))?;
    if lock.fencing_token() != Some(AHEAD + 21) {
        return Err(format!("fence {:?}", lock.fencing_token()));
    }
    let raised = nodes
        .iter()
        .filter(|s| get(s, &fence) == Some((AHEAD + 21).to_string()))
        .count();
    if raised < rl.quorum() {
        return Err(format!("second fencing round reached {raised} masters"));
    }
    lock.release()
        .await
        .map_err(|e| format!("fenced release: {e}"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn acl_rule_lets_the_core_behaviours_through_and_nothing_else() {
    logs();
    let nodes = RedisNodes::spawn(3).unwrap();
    for server in &nodes {
        set_acl_user(server, &all_commands());
    }
    core_behaviours(&nodes, PASSWORD, true).await.unwrap();
    let denied = acl_denials(&nodes);
    assert!(denied.is_empty(), "the servers denied: {denied:?}");

    // Outside the prefix, the same client is refused, and says which node refused.
    let unprefixed = Redlock::builder(nodes.iter().map(|s| acl_url(s, PASSWORD)))
        .build()
        .unwrap();
    let err = unprefixed.try_acquire("orders:1", TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().to_lowercase().contains("noperm"), "{err}");
    let Error::NotAcquired { nodes: refused, .. } = &err else {
        panic!("unexpected {err:?}");
    };
    let ours: Vec<String> = nodes
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    assert!(refused.len() >= 2, "{err}");
    assert!(
        refused.iter().all(|n| ours.iter().any(|o| o == n.node())),
        "{err}"
    );

    // Least privilege: nothing else is allowed.
    set(&nodes[0], "sentinel", "kept", TTL);
    let mut conn = redis::Client::open(acl_url(&nodes[0], PASSWORD))
        .unwrap()
        .get_connection()
        .unwrap();
    for forbidden in [
        redis::cmd("FLUSHALL"),
        redis::cmd("KEYS").arg("*").to_owned(),
        redis::cmd("GET").arg("other:key").to_owned(),
        redis::cmd("CONFIG").arg("GET").arg("*").to_owned(),
        redis::cmd("DEBUG").arg("SLEEP").arg("0").to_owned(),
        redis::cmd("EVAL")
            .arg("return redis.call('FLUSHALL')")
            .arg(0)
            .to_owned(),
    ] {
        let result: redis::RedisResult<redis::Value> = forbidden.query(&mut conn);
        let denied = result.as_ref().is_err_and(|e| {
            let e = e.to_string().to_lowercase();
            e.contains("noperm") || e.contains("can't run this command")
        });
        assert!(denied, "{result:?}");
    }
    assert_eq!(
        get(&nodes[0], "sentinel").as_deref(),
        Some("kept"),
        "nothing was flushed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_permission_in_the_acl_rule_is_needed() {
    logs();
    let nodes = RedisNodes::spawn(3).unwrap();
    let mut unneeded = Vec::new();
    for left_out in CORE_COMMANDS {
        let fewer: Vec<&str> = all_commands()
            .into_iter()
            .filter(|c| c != left_out)
            .collect();
        for server in &nodes {
            set_acl_user(server, &fewer);
            let _: () = redis::cmd("FLUSHALL").query(&mut direct(server)).unwrap();
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query(&mut direct(server))
                .unwrap();
        }
        let linger = *left_out == "sunsubscribe";
        let outcome = core_behaviours(&nodes, PASSWORD, linger).await;
        let denied = acl_denials(&nodes);
        println!("without +{left_out}: {outcome:?}; denied {denied:?}");
        if outcome.is_ok() && denied.is_empty() {
            unneeded.push(*left_out);
        }
    }
    assert!(
        unneeded.is_empty(),
        "not needed by any core behaviour: {unneeded:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_is_a_node_error_naming_the_node_and_never_the_password() {
    logs();
    let nodes = RedisNodes::spawn(3).unwrap();
    for server in &nodes {
        set_acl_user(server, &all_commands());
    }
    let rl = acl_client(&nodes, WRONG_PASSWORD, false);
    let err = rl.acquire("orders:1", TTL).await.unwrap_err();
    assert!(err.is_unavailable() && !err.is_contention(), "{err}");
    let (shown, debug) = (err.to_string(), format!("{err:?}"));
    let Error::NotAcquired { nodes: failed, .. } = &err else {
        panic!("unexpected {err:?}");
    };
    // The attempt is decided at the second failure of three: those two are named.
    assert!(failed.len() >= 2, "{err}");
    let ours: Vec<String> = nodes
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    for node in failed {
        assert!(ours.iter().any(|o| o == node.node()), "{err}");
        assert!(shown.contains(&format!("{}: ", node.node())), "{shown}");
        assert!(node.redis_error().is_some(), "{err:?}");
        assert!(node.to_string().contains("uthentication"), "{node}");
    }
    for text in [&shown, &debug, &format!("{rl:?}"), &logged()] {
        assert!(
            !text.contains(WRONG_PASSWORD),
            "the password leaked: {text}"
        );
    }
    let health = rl.connect().await.unwrap_err();
    assert!(!format!("{health} {health:?}").contains(WRONG_PASSWORD));
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_and_passwords_never_appear_in_debug_display_or_logs() {
    logs();
    let nodes = RedisNodes::spawn(3).unwrap();
    for server in &nodes {
        set_acl_user(server, &all_commands());
    }
    let builder = Redlock::builder(nodes.iter().map(|s| acl_url(s, PASSWORD)))
        .key_prefix(PREFIX)
        .fencing(true)
        .node_timeout(Duration::from_millis(200))
        .retry_count(1);
    let mut shown = vec![format!("{builder:?}")];
    let rl = builder.build().unwrap();
    let other = acl_client(&nodes, PASSWORD, true);
    shown.push(format!("{rl:?}"));

    let mut tokens = Vec::new();
    let mut lock = rl.acquire("payroll", TTL).await.unwrap();
    tokens.push(lock.token().expose().to_owned());
    shown.push(format!("{lock:?} {} {:?}", lock.token(), lock.token()));
    let refused = other.try_acquire("payroll", TTL).await.unwrap_err();
    shown.push(format!("{refused} {refused:?}"));
    lock.extend(TTL).await.unwrap();
    // A failed extend and a failed release, with nodes down: errors carry every node's outcome.
    let mut nodes = nodes;
    nodes[0].kill().unwrap();
    nodes[1].kill().unwrap();
    let not_extended = lock.extend(TTL).await.unwrap_err();
    shown.push(format!("{not_extended} {not_extended:?}"));
    let not_released = lock.release().await.unwrap_err();
    shown.push(format!("{not_released} {not_released:?}"));
    let second = other.try_acquire("payroll", TTL).await.unwrap_err();
    shown.push(format!("{second} {second:?}"));
    let dropped = rl.try_acquire("dropped", TTL).await;
    shown.push(format!("{dropped:?}"));

    let logs = logged();
    assert!(!logs.is_empty(), "the library logged nothing to check");
    shown.push(logs);
    for text in &shown {
        assert!(!text.contains(PASSWORD), "the password leaked: {text}");
        for token in &tokens {
            assert!(!text.contains(token.as_str()), "a token leaked: {text}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resource names are data.

#[tokio::test(flavor = "multi_thread")]
async fn resource_names_with_quotes_brackets_comments_newlines_and_nul_round_trip_as_data() {
    logs();
    let nodes = five();
    for server in &nodes {
        set(server, "sentinel", "still here", TTL);
    }
    let names = [
        "it's \"quoted\"",
        "]] return redis.call('FLUSHALL') --[[",
        "x]]..redis.call('DEL','sentinel')..[[y",
        "-- not a comment",
        "line\r\nbreak\nSET injected 1\r\n",
        "nul\0byte\0",
        "\\x00 %s {x} 'single' `back`",
        "ünïcödé ☃",
    ];
    let slow_machine = Duration::from_millis(250);
    let plain = builder(&nodes).node_timeout(slow_machine).connected().await;
    let fenced = builder(&nodes)
        .node_timeout(slow_machine)
        .fencing(true)
        .build()
        .unwrap();
    for name in names {
        for rl in [&plain, &fenced] {
            let mut lock = rl.acquire(name, TTL).await.unwrap();
            assert_eq!(lock.resource(), name);
            let token = lock.token().expose().to_owned();
            let key = lock_key(name);
            assert!(
                holders(&nodes, &key, &token) >= 3,
                "the key is the name, byte for byte: {name:?}: {:?} vs {token}",
                nodes.iter().map(|s| get(s, &key)).collect::<Vec<_>>()
            );
            assert!(rl.try_acquire(name, TTL).await.unwrap_err().is_contention());
            lock.extend(TTL).await.unwrap();
            lock.release().await.unwrap();
            // (The release returns at a quorum; the last masters' may still be on their way.)
            let gone = eventually(Duration::from_secs(2), || present(&nodes, &key) == 0);
            assert!(gone.await, "{name:?}");
        }
        let fence = fence_key(name);
        assert!(nodes.iter().all(|s| get(s, &fence).is_some()), "{name:?}");
    }
    for server in &nodes {
        assert_eq!(get(server, "sentinel").as_deref(), Some("still here"));
        assert_eq!(get(server, "injected"), None);
    }
}

// ---------------------------------------------------------------------------------------------
// TLS (needs the `tls` feature: `cargo test --all-features`).

#[cfg(feature = "tls")]
mod tls {
    use std::net::{Ipv4Addr, TcpListener};
    use std::path::PathBuf;
    use std::process::Command;

    use super::*;

    /// A throw-away directory with a CA, a server certificate for 127.0.0.1 signed by it, a client
    /// certificate signed by it, and an unrelated CA.
    struct Pki {
        dir: PathBuf,
    }

    impl Pki {
        fn generate() -> Pki {
            let status = Command::new("openssl").arg("version").status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "the TLS tests need the openssl command (Debian package `openssl`)"
            );
            let dir = std::env::temp_dir().join(format!(
                "quorumlock-pki-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let pki = Pki { dir };
            for ca in ["ca", "other-ca"] {
                pki.openssl(&[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    &format!("/CN=quorumlock test {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ]);
            }
            std::fs::write(
                pki.path("server.ext"),
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
            )
            .unwrap();
            std::fs::write(pki.path("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
            for leaf in ["server", "client"] {
                pki.openssl(&[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                    "-subj",
                    &format!("/CN=quorumlock test {leaf}"),
                    "-keyout",
                    &format!("{leaf}.key"),
                    "-out",
                    &format!("{leaf}.csr"),
                ]);
                pki.openssl(&[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{leaf}.csr"),
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "1",
                    "-extfile",
                    &format!("{leaf}.ext"),
                    "-out",
                    &format!("{leaf}.crt"),
                ]);
            }
            pki
        }

        fn openssl(&self, args: &[&str]) {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&self.dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.join(name)
        }

        fn read(&self, name: &str) -> Vec<u8> {
            std::fs::read(self.path(name)).unwrap()
        }
    }

    impl Drop for Pki {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A redis-server with a TLS port beside its plain one (the plain one is for the testkit's
    /// readiness probe and for inspecting keys).
    struct TlsServer {
        server: RedisServer,
        tls_port: u16,
    }

    impl TlsServer {
        fn spawn(pki: &Pki, clients_need_certificates: bool) -> TlsServer {
            let path = |name: &str| pki.path(name).display().to_string();
            let mut last = None;
            for _ in 0..5 {
                let tls_port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let spawned = RedisServer::builder()
                    .arg("--tls-port")
                    .arg(tls_port.to_string())
                    .arg("--tls-cert-file")
                    .arg(path("server.crt"))
                    .arg("--tls-key-file")
                    .arg(path("server.key"))
                    .arg("--tls-ca-cert-file")
                    .arg(path("ca.crt"))
                    .arg("--tls-auth-clients")
                    .arg(if clients_need_certificates {
                        "yes"
                    } else {
                        "no"
                    })
                    .spawn();
                match spawned {
                    Ok(server) => return TlsServer { server, tls_port },
                    Err(e) => last = Some(e),
                }
            }
            panic!("redis-server with TLS did not start (is it built with TLS?): {last:?}");
        }

        fn url(&self) -> String {
            format!("rediss://127.0.0.1:{}", self.tls_port)
        }

        fn commands_processed(&self) -> u64 {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query(&mut direct(&self.server))
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        }
    }

    /// A node timeout of 2 s: a request's first TLS handshake, on a machine that runs test
    /// binaries side by side, can take longer than half a second, and a handshake that fails
    /// must be seen failing (its reason named), not outrun.
    fn tls_builder(servers: &[TlsServer]) -> quorumlock::RedlockBuilder {
        Redlock::builder(servers.iter().map(TlsServer::url))
            .node_timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(2))
            .retry_count(1)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn locks_work_over_tls_with_a_test_ca() {
        logs();
        let pki = Pki::generate();
        let servers: Vec<TlsServer> = (0..3).map(|_| TlsServer::spawn(&pki, false)).collect();
        let rl = tls_builder(&servers)
            .tls_root_certificate(pki.read("ca.crt"))
            .fencing(true)
            .build()
            .unwrap();
        assert!(!format!("{rl:?}").contains("BEGIN"), "no PEM in Debug");
        let mut lock = rl.acquire("tls:job", TTL).await.unwrap();
        assert!(lock.fencing_token().is_some_and(|fence| fence > 0));
        let token = lock.token().expose().to_owned();
        let on_servers = servers
            .iter()
            .filter(|s| get(&s.server, &lock_key("tls:job")).as_deref() == Some(token.as_str()))
            .count();
        assert!(on_servers >= 2);
        lock.extend(TTL).await.unwrap();
        assert!(rl
            .try_acquire("tls:job", TTL)
            .await
            .unwrap_err()
            .is_contention());
        // The release returns at a quorum of answers, a master the grant never reached
        // answering "absent": the keys themselves are checked once the rest has landed.
        let released = lock.release().await.unwrap();
        assert!(
            released.deleted >= 1 && released.deleted + released.absent >= 2,
            "{released:?}"
        );
        let gone = || {
            servers
                .iter()
                .all(|s| get(&s.server, &lock_key("tls:job")).is_none())
        };
        assert!(
            eventually(Duration::from_secs(2), gone).await,
            "the release over TLS left the key behind"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_wrong_ca_is_a_node_failure_and_nothing_is_sent_in_plain_text() {
        logs();
        let pki = Pki::generate();
        let servers: Vec<TlsServer> = (0..3).map(|_| TlsServer::spawn(&pki, false)).collect();
        let before: Vec<u64> = servers.iter().map(TlsServer::commands_processed).collect();
        let rl = tls_builder(&servers)
            .tls_root_certificate(pki.read("other-ca.crt"))
            .build()
            .unwrap();
        let err = rl.try_acquire("tls:job", TTL).await.unwrap_err();
        assert!(err.is_unavailable() && !err.is_contention(), "{err}");
        let Error::NotAcquired {
            nodes: failed,
            granted: 0,
            ..
        } = &err
        else {
            panic!("unexpected {err:?}");
        };
        // Decided at the second failure of three; each failure names its node and the reason.
        assert!(failed.len() >= 2, "{err}");
        let ours: Vec<String> = servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port))
            .collect();
        for node in failed {
            assert!(ours.iter().any(|o| o == node.node()), "{err}");
            assert!(node.to_string().contains("certificate"), "{node}");
        }
        // The handshake failed before any command: the servers ran none for this client (the
        // only commands counted are this test's own INFO reads), and hold no key.
        let after: Vec<u64> = servers.iter().map(TlsServer::commands_processed).collect();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(*a, b + 1, "only the INFO before this one ran");
        }
        assert!(servers
            .iter()
            .all(|s| get(&s.server, &lock_key("tls:job")).is_none()));

        // No plain-text fallback either way: rediss:// to a plain port fails, and the system roots
        // do not trust the test CA.
        let plain_port = Redlock::builder(
            servers
                .iter()
                .map(|s| format!("rediss://127.0.0.1:{}", s.server.port())),
        )
        .node_timeout(Duration::from_millis(500))
        .tls_root_certificate(pki.read("ca.crt"))
        .build()
        .unwrap();
        assert!(plain_port
            .try_acquire("tls:job", TTL)
            .await
            .unwrap_err()
            .is_unavailable());
        let system_roots = tls_builder(&servers).build().unwrap();
        assert!(system_roots
            .try_acquire("tls:job", TTL)
            .await
            .unwrap_err()
            .is_unavailable());
        assert!(servers
            .iter()
            .all(|s| get(&s.server, &lock_key("tls:job")).is_none()));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn mutual_tls_needs_the_client_certificate() {
        logs();
        let pki = Pki::generate();
        let servers: Vec<TlsServer> = (0..3).map(|_| TlsServer::spawn(&pki, true)).collect();
        let without = tls_builder(&servers)
            .tls_root_certificate(pki.read("ca.crt"))
            .build()
            .unwrap();
        assert!(without
            .try_acquire("mtls", TTL)
            .await
            .unwrap_err()
            .is_unavailable());
        let with = tls_builder(&servers)
            .tls_root_certificate(pki.read("ca.crt"))
            .tls_client_certificate(pki.read("client.crt"), pki.read("client.key"))
            .build()
            .unwrap();
        let shown = format!("{with:?}");
        assert!(
            !shown.contains("PRIVATE KEY") && !shown.contains("BEGIN"),
            "{shown}"
        );
        let lock = with.acquire("mtls", TTL).await.unwrap();
        lock.release().await.unwrap();
    }
}

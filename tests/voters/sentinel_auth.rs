//! Sentinels with a login of their own, apart from the master's: a `requirepass` on every
//! Sentinel, or an ACL user of theirs. The client takes it from the voter's URL
//! (`?sentinel_username=…&sentinel_password=…`) or from the builder
//! (`RedlockBuilder::sentinel_password`, `sentinel_username`), and never prints it.

use crate::captured::{logged, logs};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisServer, SentinelGroup};

const TTL: Duration = Duration::from_secs(10);
const MASTER_PASSWORD: &str = "m4ster-only-pw";
const SENTINEL_PASSWORD: &str = "sentinel-only-pw";
const WATCHER_PASSWORD: &str = "w4tcher-acl-pw";

/// A primary and a replica with `MASTER_PASSWORD`, watched by three Sentinels with
/// `SENTINEL_PASSWORD`.
fn group() -> SentinelGroup {
    SentinelGroup::builder()
        .master_password(MASTER_PASSWORD)
        .sentinel_password(SENTINEL_PASSWORD)
        .spawn()
        .unwrap()
}

/// The group's URL with the master's password and `query`.
fn url(group: &SentinelGroup, query: &str) -> String {
    let plain = group.url();
    let rest = plain.strip_prefix("redis+sentinel://").unwrap();
    format!("redis+sentinel://:{MASTER_PASSWORD}@{rest}{query}")
}

fn quick(builder: quorumlock::RedlockBuilder) -> Redlock {
    builder
        .node_timeout(Duration::from_millis(500))
        .retry_count(0)
        .build()
        .unwrap()
}

/// Runs `cmd` on a Sentinel, logged in with its password.
fn on_sentinel(sentinel: &RedisServer, cmd: &redis::Cmd) {
    let mut conn = redis::Client::open(sentinel.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = cmd.query(&mut conn).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinels_with_a_password_of_their_own_take_it_from_the_url_or_the_builder() {
    logs();
    let group = group();
    let from_url = quick(Redlock::builder([url(
        &group,
        &format!("?sentinel_password={SENTINEL_PASSWORD}"),
    )]));
    let lock = from_url.acquire("orders:1", TTL).await.unwrap();
    lock.release().await.unwrap();

    let from_builder =
        quick(Redlock::builder([url(&group, "")]).sentinel_password(SENTINEL_PASSWORD));
    let lock = from_builder.acquire("orders:1", TTL).await.unwrap();
    // The URL's login wins over the builder's for its voter.
    let url_wins = quick(
        Redlock::builder([url(
            &group,
            &format!("?sentinel_password={SENTINEL_PASSWORD}"),
        )])
        .sentinel_password("not-this-one"),
    );
    let held = url_wins.try_acquire("orders:1", TTL).await.unwrap_err();
    assert!(held.is_contention(), "{held}");
    lock.release().await.unwrap();

    // An ACL user of the Sentinels' own, allowed only what the client asks of them.
    for sentinel in group.sentinels() {
        on_sentinel(
            sentinel,
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("watcher")
                .arg("reset")
                .arg("on")
                .arg(format!(">{WATCHER_PASSWORD}"))
                .arg("-@all")
                .arg("+sentinel|masters")
                .arg("+role"),
        );
    }
    let as_user = quick(Redlock::builder([url(
        &group,
        &format!("?sentinel_username=watcher&sentinel_password={WATCHER_PASSWORD}"),
    )]));
    let lock = as_user.acquire("orders:2", TTL).await.unwrap();
    lock.release().await.unwrap();
    let builder_user = quick(
        Redlock::builder([url(&group, "")])
            .sentinel_username("watcher")
            .sentinel_password(WATCHER_PASSWORD),
    );
    let lock = builder_user.acquire("orders:2", TTL).await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_wrong_sentinel_password_names_the_voter_and_never_the_password() {
    logs();
    let group = group();
    let wrong = "wr0ng-sentinel-pw";
    let clients = [
        (
            "no Sentinel password",
            quick(Redlock::builder([url(&group, "")])),
        ),
        (
            "a wrong one in the URL",
            quick(Redlock::builder([url(
                &group,
                &format!("?sentinel_password={wrong}"),
            )])),
        ),
        (
            "a wrong one on the builder",
            quick(Redlock::builder([url(&group, "")]).sentinel_password(wrong)),
        ),
        (
            // The Sentinels' password is not the master's: given as the master's login only,
            // the Sentinels refuse it.
            "the master's password for the Sentinels",
            quick(Redlock::builder([url(
                &group,
                &format!("?sentinel_password={MASTER_PASSWORD}"),
            )])),
        ),
    ];
    for (case, rl) in clients {
        let err = rl.try_acquire("orders:1", TTL).await.unwrap_err();
        assert!(
            err.is_unavailable() && !err.is_contention(),
            "{case}: {err}"
        );
        let Error::NotAcquired { nodes, .. } = &err else {
            panic!("{case}: unexpected {err:?}");
        };
        assert_eq!(nodes.len(), 1, "{case}: {err}");
        assert_eq!(nodes[0].node(), group.url(), "{case}: {err}");
        let shown = format!("{err} {err:?} {rl:?}");
        assert!(
            shown.to_lowercase().contains("auth") || shown.contains("NOPERM"),
            "{case}: {shown}"
        );
        println!("{case}: {err}");
        let connect = rl.connect().await.unwrap_err();
        let shown = format!("{shown} {connect} {connect:?}");
        for secret in [MASTER_PASSWORD, SENTINEL_PASSWORD, wrong] {
            assert!(!shown.contains(secret), "{case}: {secret} leaked: {shown}");
        }
    }
    let builder = Redlock::builder([url(
        &group,
        &format!("?sentinel_username=u&sentinel_password={SENTINEL_PASSWORD}"),
    )])
    .sentinel_password(SENTINEL_PASSWORD);
    let shown = format!("{builder:?}");
    assert!(!shown.contains(SENTINEL_PASSWORD), "{shown}");
    assert!(!shown.contains(MASTER_PASSWORD), "{shown}");
    // A URL that does not parse is named with both passwords hidden.
    let bad = Redlock::builder([format!(
        "redis+sentinel://:{MASTER_PASSWORD}@h/m/x?sentinel_password={SENTINEL_PASSWORD}"
    )])
    .build()
    .unwrap_err()
    .to_string();
    assert!(bad.contains("sentinel_password=***"), "{bad}");
    assert!(
        !bad.contains(SENTINEL_PASSWORD) && !bad.contains(MASTER_PASSWORD),
        "{bad}"
    );
    let log = logged();
    for secret in [MASTER_PASSWORD, SENTINEL_PASSWORD, wrong] {
        assert!(!log.contains(secret), "{secret} leaked into the logs");
    }
}

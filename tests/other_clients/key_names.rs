//! Attacks on key layout 3 and what came with it (the lock key is `<prefix><resource>`, its
//! companions in its slot; extends that never shorten; an owner's takeover by compare-and-swap),
//! against real masters: names that could collide or leave their slot, another prefix's layout
//! marker, an owner's late attempt from a process whose clock ran ahead, short extends on every
//! primitive, a handed lock extended shorter at once, and rslock beside quorumlock's line.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use quorumlock::{companion_key, is_companion_key, lock_key_of_companion, resource_key};
use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisNodes, RedisServer};

const TTL: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// Key names
// ---------------------------------------------------------------------------------------------

/// What Redis Cluster hashes `key` by (`keyHashSlot` in cluster.c, ported as written): what the
/// first `{` and the first `}` after it enclose, unless that is empty or missing; else the key.
fn redis_hash_part(key: &str) -> &str {
    let b = key.as_bytes();
    let Some(s) = b.iter().position(|&c| c == b'{') else {
        return key;
    };
    match b[s + 1..].iter().position(|&c| c == b'}') {
        Some(e) if e > 0 => &key[s + 1..s + 1 + e],
        _ => key,
    }
}

const KEY_SUFFIXES: [&str; 7] = [
    ":fence", ":queue", ":leases", ":readers", ":writers", ":holder", ":took",
];
const CHANNEL_SUFFIXES: [&str; 4] = [
    ":released:0123456789abcdef",
    ":elected",
    ":rw",
    ":rw:drained",
];

/// Probe: over every name of up to three pieces (braces, companion-like endings) under prefixes
/// with and without braces, each lock key the library accepts keeps every companion key and
/// channel in its own slot (by Redis's own rule), no lock key is another's companion, no two
/// lock keys share a companion key or channel, and `lock_key_of_companion` (what `list` uses)
/// inverts `companion_key`. Semaphore slot keys (`<name>:permit:<i>`) join the lock keys.
#[test]
fn accepted_names_keep_their_companions_in_their_slot_and_off_every_other_key() {
    const PIECES: [&str; 9] = [
        "a", "{", "}", ":fence", ":queue", ":rw", ":drained", ":elected", "{a}",
    ];
    const PREFIXES: [&str; 6] = ["", "{", "a{", "{a}", "{a}:", "x}"];
    let mut names: Vec<String> = PIECES.iter().map(|p| p.to_string()).collect();
    for _ in 0..2 {
        let longer: Vec<String> = names
            .iter()
            .flat_map(|n| PIECES.iter().map(move |p| format!("{n}{p}")))
            .collect();
        names.extend(longer);
    }
    names.sort();
    names.dedup();

    let mut lock_keys: HashSet<String> = HashSet::new();
    for prefix in PREFIXES {
        let rl = Redlock::builder(vec!["redis://127.0.0.1:1".to_owned()])
            .key_prefix(prefix)
            .build()
            .unwrap();
        for name in &names {
            if rl.rw_lock(name).is_ok() {
                lock_keys.insert(resource_key(prefix, name));
                if let Ok(sem) = rl.semaphore(name, 2) {
                    assert_eq!(sem.permits(), 2);
                    for i in 0..2 {
                        lock_keys.insert(resource_key(prefix, &format!("{name}:permit:{i}")));
                    }
                }
            }
        }
    }
    assert!(lock_keys.len() > 1000, "{} lock keys", lock_keys.len());

    let mut keys: HashMap<String, (String, &str)> = HashMap::new();
    let mut channels: HashMap<String, String> = HashMap::new();
    for key in &lock_keys {
        keys.insert(key.clone(), (key.clone(), "lock key"));
    }
    for key in &lock_keys {
        assert!(
            !is_companion_key(key),
            "{key:?} is accepted and looks like a companion"
        );
        for suffix in KEY_SUFFIXES {
            let companion = companion_key(key, suffix);
            assert_eq!(
                redis_hash_part(&companion),
                redis_hash_part(key),
                "{companion:?} leaves the slot of {key:?}"
            );
            assert_eq!(
                lock_key_of_companion(&companion, suffix),
                Some(key.as_str()),
                "{companion:?}"
            );
            if let Some((other, role)) = keys.insert(companion.clone(), (key.clone(), suffix)) {
                panic!("{companion:?}: the {suffix} of {key:?} and the {role} of {other:?}");
            }
        }
        for suffix in CHANNEL_SUFFIXES {
            let channel = companion_key(key, suffix);
            assert_eq!(
                redis_hash_part(&channel),
                redis_hash_part(key),
                "channel {channel:?} leaves the slot of {key:?}"
            );
            if let Some(other) = channels.insert(channel.clone(), key.clone()) {
                panic!("channel {channel:?} of both {key:?} and {other:?}");
            }
        }
    }
}

/// Defect: the layout marker of *another* key prefix is an ordinary resource name. A client
/// without a prefix that locks `locks:quorumlock:layout` (a name `check_lock_key` accepts) writes
/// its token where every client with the prefix `locks:` keeps its layout marker: those clients
/// then read the token as a foreign layout and refuse every master ("key layout mismatch"), so
/// one lock of one legal name takes every lock of another prefix down; and its release deletes
/// the marker another prefix's clients wrote (the layout check of the next connection then
/// passes for any layout).
#[tokio::test(flavor = "multi_thread")]
async fn another_prefixes_layout_marker_is_no_resource_name() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let plain = connected(&nodes).await;
    let prefixed = builder(&nodes).key_prefix("locks:").connected().await;

    let held = plain.try_acquire("locks:quorumlock:layout", TTL).await;
    let marker: Vec<Option<String>> = nodes
        .iter()
        .map(|s| get(s, "locks:quorumlock:layout"))
        .collect();
    let other = prefixed.try_acquire("jobs", TTL).await;
    let other_ok = other.is_ok();
    let other_err = other.as_ref().err().map(ToString::to_string);
    if let Ok(lock) = other {
        lock.release().await.unwrap();
    }
    let refused = matches!(held, Err(Error::InvalidResource { .. }));
    let held_ok = held.is_ok();
    if let Ok(lock) = held {
        lock.release().await.unwrap();
    }
    assert!(
        other_ok,
        "while a client without a key prefix holds \"locks:quorumlock:layout\" (acquired: \
         {held_ok}; the masters' marker of prefix locks: reads {marker:?}), a client with the \
         prefix locks: cannot lock \"jobs\": {other_err:?}"
    );
    assert!(
        refused,
        "\"locks:quorumlock:layout\" is the layout marker of the prefix locks:, yet a lock name"
    );
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// An owner attempt's value as another process of `owner` writes it: its stamp (its wall
/// clock in µs, 13 hex digits), 19 random hex digits, `@`, the owner.
fn owner_value(order_us: u64, owner: &str) -> String {
    format!("ql-{order_us:013x}{:019x}@{owner}", 0x5eed_u64)
}

/// The README's promise: "a restarted owner takes its lock back at once". A previous process
/// of `worker-7` whose wall clock ran 60 s ahead of this one's (or this host's clock stepped
/// back, or the worker moved hosts) wrote the key; the restarted process's first attempt is
/// stamped before it and refused, and its next one, stamped after the value it saw, takes the
/// key over, well within the previous lease. The control (the previous process's clock 60 s
/// behind) is taken at the first attempt.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_owner_takes_back_a_lock_whose_writer_ran_ahead_of_its_clock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = builder(&nodes)
        .acquire_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let behind = owner_value(now_us() - 60_000_000, "worker-7");
    let ahead = owner_value(now_us() + 60_000_000, "worker-7");
    for server in nodes.iter() {
        set(server, "shard:behind", &behind, Duration::from_secs(20));
        set(server, "shard:ahead", &ahead, Duration::from_secs(20));
    }
    let start = Instant::now();
    let control = rl
        .acquire_as("shard:behind", "worker-7", Duration::from_secs(5))
        .await;
    let control_took = start.elapsed();
    assert!(control.is_ok(), "control: {:?}", control.err());
    control.unwrap().release().await.unwrap();

    let start = Instant::now();
    let taken = rl
        .acquire_as("shard:ahead", "worker-7", Duration::from_secs(5))
        .await;
    let took = start.elapsed();
    let err = taken.as_ref().err().map(ToString::to_string);
    if let Ok(lock) = taken {
        lock.release().await.unwrap();
    }
    assert!(
        err.is_none(),
        "the restarted owner did not take its lock back (the control took {control_took:?}): \
         after {took:?}: {err:?}"
    );
}

/// The order of an owner's attempts is a Lamport clock: a single try, stamped before a
/// previous process's value whose clock ran 60 s ahead, is refused (the earlier attempt of
/// the owner never takes a later one's key), and the same client's next call, stamped after
/// what the first one saw, takes the key over.
#[tokio::test(flavor = "multi_thread")]
async fn an_owners_try_refused_for_a_value_stamped_ahead_takes_it_over_at_the_next_call() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = builder(&nodes)
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(rl.connect().await.unwrap().reachable, 3);
    let ahead = owner_value(now_us() + 60_000_000, "worker-7");
    for server in nodes.iter() {
        set(server, "shard:ahead", &ahead, Duration::from_secs(20));
    }
    let first = rl
        .acquire_as("shard:ahead", "worker-7", Duration::from_secs(5))
        .await;
    assert!(
        first.is_err(),
        "an attempt stamped 60 s before the value took it over"
    );
    let lock = rl
        .acquire_as("shard:ahead", "worker-7", Duration::from_secs(5))
        .await
        .unwrap();
    let token = lock.token().expose().to_owned();
    assert!(
        token.as_bytes()[3..35] > ahead.as_bytes()[3..35],
        "{token} after {ahead}"
    );
    lock.release().await.unwrap();
}

/// Runs on `server` what an owner attempt with `token` and its rollback send (the library's
/// `acquire_owned.lua` and `release.lua`, unchanged), as they land when they arrive late: the
/// attempt's reply (1 took the key, 0 refused) and how many keys the rollback deleted.
fn late_owner_attempt_and_rollback(
    server: &RedisServer,
    key: &str,
    owner: &str,
    token: &str,
) -> (i64, i64) {
    let (line, leases) = (companion_key(key, ":queue"), companion_key(key, ":leases"));
    let attempt = in_line(include_str!("../../src/lua/acquire_owned.lua"));
    // A first attempt names no value to take over: it only sets a free key (and is told the
    // value of another attempt of its owner, which it could take over by naming it).
    let reply: redis::Value = query(
        server,
        redis::cmd("EVAL")
            .arg(attempt)
            .arg(3)
            .arg(key)
            .arg(&line)
            .arg(&leases)
            .arg(token)
            .arg(10_000)
            .arg(owner)
            .arg(""),
    );
    let took = i64::from(reply == redis::Value::Int(1));
    let rollback = in_line(include_str!("../../src/lua/release.lua"));
    let deleted: i64 = query(
        server,
        redis::cmd("EVAL")
            .arg(rollback)
            .arg(3)
            .arg(key)
            .arg(&line)
            .arg(&leases)
            .arg(token)
            .arg(1_000)
            .arg(1),
    );
    (took, deleted)
}

/// Defect: issue 30's 4b, across a restart. The order that keeps an owner's late attempt from
/// taking over a later grant is the wall clock of the process that sent it. A process of
/// `worker-7` whose clock ran 60 s ahead (another host, or this host before an NTP step back)
/// sent an attempt and, on its timeout, the rollback; then it died. Its restarted successor
/// acquires `shard:7` (a real `acquire_as`). The dead process's two requests then land (a proxy
/// or a congested route delivers what was sent): the attempt orders *after* the successor's, so
/// it takes the key over on every master, and its rollback deletes it. A third client acquires
/// while the successor reports ~10 s left. Neither process was alive twice — the README's
/// exception is "two live processes" — and the README says client clock skew "never affects
/// safety". The control (the dead process's clock 60 s *behind*) is refused and deletes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_owner_process_with_a_clock_ahead_never_deletes_its_successors_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = connected(&nodes).await;
    let other = connected(&nodes).await;

    // Control: the dead process's clock ran behind.
    let lock = rl
        .acquire_as("shard:6", "worker-7", Duration::from_secs(10))
        .await
        .unwrap();
    // (acquire returns at a quorum: the last master's grant may still be on its way, and a late
    // attempt would then find the key free there, as any late SET NX would.)
    let token = lock.token().expose().to_owned();
    let everywhere = || holders(&nodes, "shard:6", &token) == 3;
    assert!(eventually(Duration::from_secs(2), everywhere).await);
    let late = owner_value(now_us() - 60_000_000, "worker-7");
    for server in nodes.iter() {
        assert_eq!(
            late_owner_attempt_and_rollback(server, "shard:6", "worker-7", &late),
            (0, 0)
        );
    }
    assert!(other.try_acquire("shard:6", TTL).await.is_err());
    lock.release().await.unwrap();

    let lock = rl
        .acquire_as("shard:7", "worker-7", Duration::from_secs(10))
        .await
        .unwrap();
    let token = lock.token().expose().to_owned();
    let everywhere = || holders(&nodes, "shard:7", &token) == 3;
    assert!(eventually(Duration::from_secs(2), everywhere).await);
    let late = owner_value(now_us() + 60_000_000, "worker-7");
    let landed: Vec<(i64, i64)> = nodes
        .iter()
        .map(|server| late_owner_attempt_and_rollback(server, "shard:7", "worker-7", &late))
        .collect();
    let second = other.try_acquire("shard:7", TTL).await;
    let says = lock.remaining();
    let second_ok = second.is_ok();
    if let Ok(second) = second {
        second.release().await.unwrap();
    }
    drop(lock);
    assert!(
        !second_ok,
        "a second client acquired shard:7 while worker-7's successor said {says:?} left: the \
         dead process's late attempt and rollback (took, deleted) per master: {landed:?}"
    );
}

fn master_ms(server: &RedisServer) -> i64 {
    let (s, us): (i64, i64) = query(server, &mut redis::cmd("TIME"));
    s * 1000 + us / 1000
}

/// How long `server` keeps reader `token`'s hold in `readers`, in ms (`-2` when it has none).
fn reader_ms(server: &RedisServer, readers: &str, token: &str) -> i64 {
    let score: Option<f64> = query(server, redis::cmd("ZSCORE").arg(readers).arg(token));
    let ttl = pttl(server, readers);
    score.map_or(-2, |e| (e as i64 - master_ms(server)).min(ttl))
}

/// Probe: on every primitive (mutex, owner id, reentrant, semaphore permit, writer, reader,
/// election term with its `SET … KEEPTTL` mark), an extend to a TTL far shorter than what is
/// left wins, keeps the deadline, and leaves a quorum of masters keeping the hold at least as
/// long as the deadline says.
#[tokio::test(flavor = "multi_thread")]
async fn a_short_extend_shortens_no_primitive() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let rl = connected(&nodes).await;
    let long = Duration::from_secs(4);
    let short = Duration::from_millis(300);
    let check =
        |what: &str, remaining: &dyn Fn() -> Duration, keeps: &dyn Fn(&RedisServer) -> i64| {
            let says = remaining();
            assert!(says > Duration::from_secs(3), "{what}: {says:?} left");
            assert_quorum_keeps(&nodes, what, remaining, keeps);
        };

    let mut lock = rl.acquire("p:mutex", long).await.unwrap();
    lock.extend(short).await.unwrap();
    check("mutex", &|| lock.remaining(), &|s| pttl(s, "p:mutex"));
    lock.release().await.unwrap();

    let mut lock = rl.acquire_as("p:owned", "w", long).await.unwrap();
    lock.extend(short).await.unwrap();
    check("owner id", &|| lock.remaining(), &|s| pttl(s, "p:owned"));
    lock.release().await.unwrap();

    let outer = rl.acquire("p:re", long).await.unwrap().into_reentrant();
    let inner = outer.nested();
    inner.extend(short).await.unwrap();
    check("reentrant (inner)", &|| inner.remaining(), &|s| {
        pttl(s, "p:re")
    });
    check("reentrant (outer)", &|| outer.remaining(), &|s| {
        pttl(s, "p:re")
    });
    inner.release().await.unwrap();
    outer.release().await.unwrap();

    let sem = rl.semaphore("p:sem", 2).unwrap();
    let mut permit = sem.acquire(long).await.unwrap();
    permit.extend(short).await.unwrap();
    let key = format!("p:sem:permit:{}", permit.slot());
    check("permit", &|| permit.remaining(), &|s| pttl(s, &key));
    permit.release().await.unwrap();

    let rw = rl.rw_lock("p:rw").unwrap();
    let mut writer = rw.write(long).await.unwrap();
    writer.extend(short).await.unwrap();
    check("writer", &|| writer.remaining(), &|s| pttl(s, "p:rw"));
    writer.release().await.unwrap();

    let mut reader = rw.read(long).await.unwrap();
    reader.extend(short).await.unwrap();
    let readers = companion_key("p:rw", ":readers");
    let token = reader.token().expose().to_owned();
    check("reader", &|| reader.remaining(), &|s| {
        reader_ms(s, &readers, &token)
    });
    reader.release().await.unwrap();

    let mut term = rl.elect("p:elect", long, "host-a").await.unwrap();
    // The mark lands in the background: let it, then renew with the mark path too.
    tokio::time::sleep(Duration::from_millis(100)).await;
    term.extend(short).await.unwrap();
    let marked = nodes
        .iter()
        .filter(|s| get(s, "p:elect").is_some_and(|v| v.starts_with("~elected:")))
        .count();
    assert!(marked >= 2, "{marked} masters hold the term marked");
    check("term", &|| term.remaining(), &|s| pttl(s, "p:elect"));
    term.release().await.unwrap();
}

/// Probe: a lock the release handed over in one trip (token `~queued:<id>`, keys living an
/// entry lease at most) is extended at once to a TTL shorter than the hand-off proved, which
/// also calls the background renewal off. Until the lock says it ran out, a quorum keeps its key
/// at least as long as it says, and another client is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_handed_lock_extended_shorter_at_once_holds_as_long_as_it_says() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let settings = |node_timeout: Duration| {
        Redlock::builder(nodes.urls())
            .node_timeout(node_timeout)
            .retry_delay(Duration::from_secs(1))
            .retry_jitter(Duration::ZERO)
            .build()
            .unwrap()
    };
    // The holder's grant must reach every master so that the waiter waits in line on each: a
    // 100 ms node timeout on a loaded machine, connecting on first use, can leave one behind.
    // The waiter's node timeout leaves room for the hand-off on a loaded machine: a quorum of
    // announcements within a tenth of it of the first, and attempts a third of an entry lease
    // (1.67 s) apart, so that the release below meets none under way.
    let holder = settings(Duration::from_secs(2));
    let waiter = settings(Duration::from_millis(500));
    holder.connect().await.unwrap();
    waiter.connect().await.unwrap();
    let lock = holder.acquire("h", Duration::from_secs(10)).await.unwrap();
    granted_everywhere(&nodes, &lock_key("h"), lock.token().expose()).await;
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("h", Duration::from_secs(5)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || nodes.iter().all(|s| line(
            s,
            &lock_key("h")
        )
        .len()
            == 1))
        .await
    );
    // Release just after one of the waiter's attempts in line was refused (every failed
    // attempt of it is contended): one under way would rightly make it attempt instead.
    let attempted = waiter.stats().attempts;
    let refused = eventually(Duration::from_secs(5), || {
        let stats = waiter.stats();
        stats.attempts > attempted && stats.contended == stats.attempts
    });
    assert!(refused.await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    lock.release().await.unwrap();
    let mut handed = waiting.await.unwrap().unwrap();
    assert!(
        handed.token().expose().starts_with("~queued:"),
        "not handed over in one trip"
    );
    let before = handed.deadline();
    handed.extend(Duration::from_millis(600)).await.unwrap();
    assert!(
        handed.deadline() >= before,
        "the extend moved the deadline back"
    );
    let other = Redlock::builder(nodes.urls()).build().unwrap();
    let mut checks = 0;
    loop {
        let says = handed.remaining();
        if says < Duration::from_millis(30) {
            break;
        }
        assert_quorum_keeps(
            &nodes,
            "the handed lock",
            || handed.remaining(),
            |s| pttl(s, "h"),
        );
        if let Ok(taken) = other.try_acquire("h", Duration::from_secs(5)).await {
            // Granted before the deadline for sure only if the deadline is still ahead once
            // the grant is back; a grant that a stall let run past it proves nothing.
            let left = handed.remaining();
            assert!(
                left.is_zero(),
                "a second client acquired {:?} while the handed lock said {left:?} left",
                taken.resource(),
            );
            break;
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("{checks} checks");
    assert!(checks >= 5, "{checks} checks");
    drop(handed);
}

// ---------------------------------------------------------------------------------------------
// Other Redlock clients beside the line
// ---------------------------------------------------------------------------------------------

/// Probe: rslock workers (plain `SET NX PX`) and quorumlock workers that *wait in line* — so
/// that quorumlock's releases hand the lock over in one trip (`~queued:<id>`) while rslock keeps
/// trying `SET NX` — take two names on five masters for 4 s. A shared witness never sees two
/// holders of one name, and the one-trip hand-off did happen.
#[tokio::test(flavor = "multi_thread")]
async fn rslock_beside_quorumlock_waiters_and_hand_offs_never_overlaps() {
    const RESOURCES: [&str; 2] = ["line:a", "line:b"];
    const RUN: Duration = Duration::from_secs(4);
    let nodes = five();
    let witness: Arc<[AtomicU32; 2]> = Arc::new(Default::default());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let holds = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let handed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + RUN;
    let section = {
        let (witness, overlaps, holds) = (witness.clone(), overlaps.clone(), holds.clone());
        move |side: usize, r: usize| {
            let (witness, overlaps, holds) = (witness.clone(), overlaps.clone(), holds.clone());
            async move {
                if witness[r].fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(4)).await;
                witness[r].fetch_sub(1, Ordering::SeqCst);
                holds[side].fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    let mut workers = Vec::new();
    for w in 0..4 {
        let rl = builder(&nodes)
            .acquire_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let (section, stop, handed) = (section.clone(), stop.clone(), handed.clone());
        workers.push(tokio::spawn(async move {
            let mut n = w;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                n += 1;
                let r = (n / 3) % RESOURCES.len();
                if let Ok(lock) = rl.acquire(RESOURCES[r], TTL).await {
                    if lock.token().expose().starts_with("~queued:") {
                        handed.fetch_add(1, Ordering::SeqCst);
                    }
                    section(0, r).await;
                    let _ = lock.release().await;
                }
            }
        }));
    }
    for w in 0..2 {
        let mut foreign = rslock::LockManager::new(nodes.urls());
        foreign.set_retry(1, Duration::from_millis(1));
        let (section, stop) = (section.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut n = w;
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                n += 1;
                let r = n % RESOURCES.len();
                if let Ok(lock) = foreign.lock(RESOURCES[r], TTL).await {
                    section(1, r).await;
                    foreign.unlock(&lock).await;
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let (ours, theirs) = (
        holds[0].load(Ordering::SeqCst),
        holds[1].load(Ordering::SeqCst),
    );
    let (overlaps, handed) = (
        overlaps.load(Ordering::SeqCst),
        handed.load(Ordering::SeqCst),
    );
    println!("quorumlock {ours} holds ({handed} handed in one trip), rslock {theirs}, overlaps {overlaps}");
    assert_eq!(
        overlaps, 0,
        "{ours} quorumlock ({handed} handed) and {theirs} rslock holds"
    );
    assert!(ours >= 20, "{ours} quorumlock holds");
    assert!(
        handed >= 3,
        "only {handed} one-trip hand-offs: the line was not exercised"
    );
}

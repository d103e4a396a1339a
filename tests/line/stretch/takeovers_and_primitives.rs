//! A lock key kept alive over its wait line (its holder's own lease in the record
//! `<base>:held`), against owner takeovers and their rollbacks, multi-key locks, semaphores,
//! elections, handed locks, paused or emptied masters and extends racing the head of the line.
//! Each scenario asserts a guarantee: never two holders at once (a grant never lands inside
//! another holder's validity), a dead holder or waiter blocking the line no longer than its TTL
//! and an entry lease, and nothing left behind once everybody is done.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{nothing_left, records};
use crate::common::*;
use quorumlock::Redlock;

const OWNER: &str = "worker-7";

/// A waiter: short retry delays, node timeout 100 ms (an entry lease of about 1 s), waiting up
/// to `wait`.
fn waiter(urls: Vec<String>, wait: Duration) -> Redlock {
    Redlock::builder(urls)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(100))
        .acquire_timeout(wait)
        .retry_count(1_000_000)
        .build()
        .unwrap()
}

/// A waiter as above whose place in line lasts about 5 s (node timeout 500 ms).
fn long_waiter(urls: Vec<String>, wait: Duration) -> Redlock {
    Redlock::builder(urls)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(wait)
        .retry_count(1_000_000)
        .build()
        .unwrap()
}

/// One holder's validity: from its grant (seen by the client) to its deadline or release.
#[derive(Clone, Debug)]
struct Hold {
    who: String,
    from: Instant,
    until: Instant,
}

type Holds = Arc<Mutex<Vec<Hold>>>;

/// Every pair of holds of different holders (by `exclusive`) that overlap.
fn overlaps(holds: &[Hold], exclusive: impl Fn(&Hold, &Hold) -> bool) -> Vec<(Hold, Hold)> {
    let mut bad = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if exclusive(a, b) && a.from < b.until && b.from < a.until {
                bad.push((a.clone(), b.clone()));
            }
        }
    }
    bad
}

fn rel(t0: Instant, holds: &[Hold]) -> Vec<(String, u128, u128)> {
    holds
        .iter()
        .map(|h| {
            (
                h.who.clone(),
                h.from.saturating_duration_since(t0).as_millis(),
                h.until.saturating_duration_since(t0).as_millis(),
            )
        })
        .collect()
}

/// Two tasks of one owner take the key over from each other again and again (`acquire_as`,
/// short TTLs, never released) while another client waits in line, so the key is stretched
/// and each takeover carries the record. The waiter must not be granted before the deadline of
/// any of the owner's locks granted before it.
#[tokio::test(flavor = "multi_thread")]
async fn racing_owner_takeovers_under_a_stretch_never_let_the_waiter_in_early() {
    let nodes = five();
    let res = "s2-owner-race";
    let key = lock_key(res);
    let ttl = Duration::from_millis(700);
    let owner = connected(&nodes).await;
    let t0 = Instant::now();
    let first = owner.acquire_as(res, OWNER, ttl).await.unwrap();
    granted_everywhere(&nodes, &key, first.token().expose()).await;
    let owner_holds: Holds = Arc::new(Mutex::new(vec![Hold {
        who: "owner".into(),
        from: t0,
        until: first.deadline(),
    }]));
    let w = waiter(nodes.urls(), Duration::from_secs(20));
    let w_task = tokio::spawn(async move {
        let lock = w.acquire(res, Duration::from_secs(2)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    let mut tasks = Vec::new();
    for t in 0..2u64 {
        let owner = owner.clone();
        let holds = owner_holds.clone();
        tasks.push(tokio::spawn(async move {
            let mut kept = Vec::new();
            for round in 0..4u64 {
                tokio::time::sleep(Duration::from_millis(150 + 37 * t + 11 * round)).await;
                if let Ok(lock) = owner.acquire_as(res, OWNER, ttl).await {
                    holds.lock().unwrap().push(Hold {
                        who: "owner".into(),
                        from: Instant::now(),
                        until: lock.deadline(),
                    });
                    kept.push(lock);
                }
            }
            for lock in kept {
                std::mem::forget(lock);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    std::mem::forget(first);
    let (w_at, w_lock) = tokio::time::timeout(Duration::from_secs(15), w_task)
        .await
        .expect("the waiter never finished")
        .unwrap();
    let w_lock = w_lock.expect("the waiter never acquired");
    let holds = owner_holds.lock().unwrap().clone();
    let latest = holds.iter().map(|h| h.until).max().unwrap();
    eprintln!(
        "owner holds {:?}; waiter granted at {} ms",
        rel(t0, &holds),
        w_at.duration_since(t0).as_millis()
    );
    let inside: Vec<_> = holds
        .iter()
        .filter(|h| h.from < w_at && w_at < h.until)
        .collect();
    assert!(
        inside.is_empty(),
        "TWO HOLDERS: the waiter was granted at {} ms inside the owner's locks {:?}",
        w_at.duration_since(t0).as_millis(),
        rel(t0, &inside.into_iter().cloned().collect::<Vec<_>>())
    );
    // A dead owner blocks the line no longer than its last TTL and an entry lease (about 1 s).
    let bound = latest + Duration::from_millis(1500);
    assert!(
        w_at < bound,
        "the dead owner blocked the line {:?} past its last deadline",
        w_at - latest
    );
    w_lock.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// A lock of the owner holds the key while a waiter waits (the key stretched). A second attempt
/// of the owner reaches two masters at once and the other three only late, and is dropped: its
/// rollback lands on the two masters after a second waiter joined and moved the stretch, and its
/// takeovers land late on the other three. Once the rollback has landed, the first lock must
/// hold every master it held before, and stay exclusive (a plain client and another owner
/// refused) while it says it holds; no waiter may be granted inside it.
#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_owner_attempt_rolled_back_after_the_stretch_moved_keeps_the_holder() {
    let nodes = five();
    let res = "s2-owner-rollback";
    let key = lock_key(res);
    let owner = connected(&nodes).await;
    let a = owner
        .acquire_as(res, OWNER, Duration::from_millis(2500))
        .await
        .unwrap();
    let a_token = a.token().expose().to_owned();
    granted_everywhere(&nodes, &key, &a_token).await;
    let w1 = long_waiter(nodes.urls(), Duration::from_secs(20));
    let w1_task = tokio::spawn(async move {
        let lock = w1.acquire(res, Duration::from_secs(1)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    // Under load a master may answer the owner's attempt too late to count, and then go to the
    // waiter: the lock holds the masters it won, a quorum, not necessarily all five.
    let quorum = 3;
    let held: Vec<usize> = values(&nodes, &key)
        .iter()
        .enumerate()
        .filter(|(_, v)| v.as_deref() == Some(a_token.as_str()))
        .map(|(i, _)| i)
        .collect();
    assert!(held.len() >= quorum, "the owner's lock holds only {held:?}");
    let px = proxies(&nodes);
    let second = Redlock::builder(urls(&px))
        .retry_delay(Duration::from_millis(20))
        .node_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    second.connect().await.unwrap();
    for (i, p) in px.iter().enumerate() {
        if i < 2 {
            p.delay(Duration::from_millis(100), Duration::ZERO, Duration::ZERO);
        } else {
            p.delay(Duration::from_millis(1200), Duration::ZERO, Duration::ZERO);
        }
    }
    let attempt = tokio::spawn(async move {
        tokio::time::timeout(
            Duration::from_millis(600),
            second.acquire_as(res, OWNER, Duration::from_millis(2500)),
        )
        .await
    });
    let mut took_over = false;
    let t_start = Instant::now();
    while t_start.elapsed() < Duration::from_millis(500) {
        let vals = values(&nodes, &key);
        if vals
            .iter()
            .any(|v| v.as_deref().is_some_and(|v| v != a_token))
        {
            eprintln!(
                "taken over at {:?}: {vals:?} ttls {:?}",
                t_start.elapsed(),
                ttls(&nodes, &key)
            );
            took_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "took over: {took_over}; records {:?}",
        records(&nodes, &key)
    );
    let w2 = long_waiter(nodes.urls(), Duration::from_secs(20));
    let w2_task = tokio::spawn(async move {
        let lock = w2.acquire(res, Duration::from_secs(1)).await;
        (Instant::now(), lock)
    });
    let r = attempt.await.unwrap();
    eprintln!(
        "second attempt: {:?}",
        r.as_ref()
            .map(|l| l.as_ref().map(|_| ()).map_err(ToString::to_string))
    );
    // The dropped attempt's rollback is on its way to the two quick masters (their 100 ms
    // delay): until it lands, the owner's attempt holds them in the lock's stead (the window
    // of a dropped `acquire_as`). Once it has, the lock holds every master it held before.
    let back = eventually(Duration::from_secs(2), || {
        let vals = values(&nodes, &key);
        held.iter()
            .all(|&i| vals[i].as_deref() == Some(a_token.as_str()))
    })
    .await;
    assert!(
        back,
        "the dropped attempt's rollback never gave the owner's lock back its masters {held:?}: {:?}",
        values(&nodes, &key)
    );
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let mut checks = 0;
    while a.remaining() > Duration::from_millis(300) {
        let vals = values(&nodes, &key);
        // What the masters held counts against the lock only if it still held once they
        // were read (a stall of this task may carry the reads past its deadline), and so does
        // another client's grant once it is back.
        let read_in_time = !a.remaining().is_zero();
        let plain = other.try_acquire(res, Duration::from_secs(5)).await;
        let intruder = other
            .acquire_as(res, "intruder", Duration::from_secs(5))
            .await;
        let left = a.remaining();
        assert!(
            (plain.is_err() && intruder.is_err()) || left.is_zero(),
            "TWO HOLDERS: the owner's lock says {left:?} left, yet plain {} / other owner {}; masters {vals:?}",
            plain.is_ok(),
            intruder.is_ok()
        );
        let own: Vec<usize> = (0..vals.len())
            .filter(|&i| vals[i].as_deref() == Some(a_token.as_str()))
            .collect();
        assert!(
            own == held || !read_in_time,
            "the owner's lock says {:?} left but holds masters {own:?}, not {held:?}: {vals:?} (ttls {:?})",
            a.remaining(),
            ttls(&nodes, &key)
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    eprintln!(
        "{checks} checks; masters {:?}; records {:?}",
        values(&nodes, &key),
        records(&nodes, &key)
    );
    assert!(
        checks > 0,
        "the owner's lock ran out before the first check"
    );
    // Held until the release, or its deadline if a stall of this task let that pass first.
    let a_until = Instant::now().min(a.deadline());
    a.release().await.unwrap();
    for (name, task) in [("first waiter", w1_task), ("second waiter", w2_task)] {
        let (at, lock) = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("a waiter never finished")
            .unwrap();
        let lock = lock.unwrap_or_else(|e| panic!("the {name} never acquired: {e}"));
        assert!(
            at >= a_until,
            "TWO HOLDERS: the {name} was granted inside the owner's lock"
        );
        lock.release().await.unwrap();
    }
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// A multi-key lock waits for two keys, one held by a holder that dies (short TTL), the other
/// by a live holder; a single-key waiter waits on the first key behind it, and plain clients
/// keep trying both. Holds of a key never overlap; a plain client is never granted while
/// anybody live waits; the single-key waiter gets the first key once the dead holder's lease
/// and an entry lease are over, not held back by the multi-key waiter's reservation.
#[tokio::test(flavor = "multi_thread")]
async fn a_multi_key_waiter_with_waiters_on_one_key_never_overlaps_anyone() {
    let nodes = five();
    let res1 = "s2-many-a";
    let res2 = "s2-many-b";
    let rl = connected(&nodes).await;
    let t0 = Instant::now();
    let dead = rl.acquire(res1, Duration::from_millis(600)).await.unwrap();
    let dead_until = dead.deadline();
    granted_everywhere(&nodes, &lock_key(res1), dead.token().expose()).await;
    std::mem::forget(dead);
    let live = rl.acquire(res2, Duration::from_secs(5)).await.unwrap();
    granted_everywhere(&nodes, &lock_key(res2), live.token().expose()).await;
    let holds: Holds = Arc::new(Mutex::new(vec![
        Hold {
            who: res1.into(),
            from: t0,
            until: dead_until,
        },
        Hold {
            who: res2.into(),
            from: t0,
            until: live.deadline(),
        },
    ]));
    let m = waiter(nodes.urls(), Duration::from_secs(20));
    let m_holds = holds.clone();
    let m_task = tokio::spawn(async move {
        let lock = m
            .acquire_many(&[res1, res2], Duration::from_secs(1))
            .await
            .unwrap();
        let from = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let until = Instant::now().min(lock.deadline());
        lock.release().await.unwrap();
        m_holds.lock().unwrap().push(Hold {
            who: format!("{res1}+{res2}"),
            from,
            until,
        });
    });
    waiters_in_line(&nodes, &lock_key(res1), 1).await;
    let w = waiter(nodes.urls(), Duration::from_secs(20));
    let w_holds = holds.clone();
    let w_task = tokio::spawn(async move {
        let lock = w.acquire(res1, Duration::from_secs(1)).await.unwrap();
        let from = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let until = Instant::now().min(lock.deadline());
        lock.release().await.unwrap();
        w_holds.lock().unwrap().push(Hold {
            who: res1.into(),
            from,
            until,
        });
        from
    });
    // Plain clients keep asking for either key while the waiters wait.
    let plain = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    let mut plain_grants = Vec::new();
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        for r in [res1, res2] {
            if let Ok(lock) = plain.try_acquire(r, Duration::from_millis(200)).await {
                plain_grants.push((
                    r,
                    Instant::now().duration_since(t0).as_millis(),
                    lock.deadline(),
                ));
                holds.lock().unwrap().push(Hold {
                    who: r.into(),
                    from: Instant::now(),
                    until: lock.deadline(),
                });
                std::mem::forget(lock);
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    // The hold ends when its release starts: the lock may be handed on before the release's
    // own replies are all in.
    let live_until = Instant::now();
    live.release().await.unwrap();
    holds.lock().unwrap()[1].until = live_until;
    let w_from = tokio::time::timeout(Duration::from_secs(15), w_task)
        .await
        .expect("single-key waiter stuck")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(15), m_task)
        .await
        .expect("multi-key waiter stuck")
        .unwrap();
    let all = holds.lock().unwrap().clone();
    eprintln!(
        "holds {:?}; plain grants {:?}",
        rel(t0, &all),
        plain_grants
            .iter()
            .map(|(r, t, _)| (r, t))
            .collect::<Vec<_>>()
    );
    let bad = overlaps(&all, |a, b| {
        a.who.split('+').any(|x| b.who.split('+').any(|y| x == y))
    });
    assert!(bad.is_empty(), "TWO HOLDERS of one key: {bad:?}");
    assert!(
        plain_grants.is_empty(),
        "a plain client was granted while waiters waited: {:?}",
        plain_grants
            .iter()
            .map(|(r, t, _)| (r, t))
            .collect::<Vec<_>>()
    );
    let bound = dead_until + Duration::from_millis(1500);
    assert!(
        w_from < bound,
        "the single-key waiter got the dead holder's key {:?} after its deadline",
        w_from - dead_until
    );
    nothing_left(&nodes, res1, Duration::from_secs(3)).await;
    nothing_left(&nodes, res2, Duration::from_secs(3)).await;
}

/// A semaphore of 2 permits with 5 clients contending; short TTLs, some holders die holding
/// their permit. No slot is ever held by two at once, and nothing is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_semaphore_with_dead_holders_never_grants_a_slot_twice() {
    let nodes = five();
    let res = "s2-sem";
    let t0 = Instant::now();
    let holds: Holds = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..5u64 {
        let rl = waiter(nodes.urls(), Duration::from_secs(20));
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            let sem = rl.semaphore(res, 2).unwrap();
            for round in 0..3u64 {
                let permit = sem.acquire(Duration::from_millis(500)).await.unwrap();
                let from = Instant::now();
                let slot = permit.slot();
                if (c + round) % 4 == 1 {
                    holds.lock().unwrap().push(Hold {
                        who: format!("slot{slot}"),
                        from,
                        until: permit.deadline(),
                    });
                    std::mem::forget(permit);
                } else {
                    tokio::time::sleep(Duration::from_millis(60 + 20 * c)).await;
                    let until = Instant::now().min(permit.deadline());
                    permit.release().await.unwrap();
                    holds.lock().unwrap().push(Hold {
                        who: format!("slot{slot}"),
                        from,
                        until,
                    });
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(40), t)
            .await
            .expect("a semaphore client stuck")
            .unwrap();
    }
    let all = holds.lock().unwrap().clone();
    eprintln!("holds {:?}", rel(t0, &all));
    let bad = overlaps(&all, |a, b| a.who == b.who);
    assert!(
        bad.is_empty(),
        "TWO HOLDERS of a slot: {:?}",
        bad.iter()
            .map(|(a, b)| rel(t0, &[a.clone(), b.clone()]))
            .collect::<Vec<_>>()
    );
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// A leader renews its term several times while two candidates wait in line, then dies. No
/// candidate is elected inside the leader's last renewed term, the two candidates' terms never
/// overlap, and the first is elected within the term and an entry lease of the leader's death.
#[tokio::test(flavor = "multi_thread")]
async fn candidates_waiting_through_renewals_are_never_elected_inside_the_term() {
    let nodes = five();
    let name = "s2-election";
    let key = lock_key(name);
    // Renewed with a third of it left: over 600 ms for a renewal, however loaded the machine.
    let term = Duration::from_millis(2000);
    let rl = connected(&nodes).await;
    let t0 = Instant::now();
    let mut leader = rl.elect(name, term, "a").await.unwrap();
    let marked = format!("~elected:{}", leader.token().expose());
    granted_everywhere(&nodes, &key, &marked).await;
    let holds: Holds = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for v in ["b", "c"] {
        let c = waiter(nodes.urls(), Duration::from_secs(20));
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            let lock = c.elect(name, Duration::from_millis(800), v).await.unwrap();
            let from = Instant::now();
            tokio::time::sleep(Duration::from_millis(300)).await;
            let until = Instant::now().min(lock.deadline());
            lock.release().await.unwrap();
            holds.lock().unwrap().push(Hold {
                who: v.into(),
                from,
                until,
            });
        }));
    }
    waiters_in_line(&nodes, &key, 2).await;
    let reader = connected(&nodes).await;
    for _ in 0..4 {
        // Each renewal with a third of the term left, however long the candidates took to
        // take their places.
        let renew_at = leader.deadline() - term / 3;
        tokio::time::sleep_until(renew_at.into()).await;
        leader
            .extend(term)
            .await
            .expect("the leader's renewal was refused");
        let seen = reader.leader(name).await.unwrap().map(|l| l.value);
        assert_eq!(
            seen.as_deref(),
            Some("a"),
            "the renewed leader was not reported"
        );
    }
    let leader_until = leader.deadline();
    std::mem::forget(leader);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(15), t)
            .await
            .expect("a candidate stuck")
            .unwrap();
    }
    let mut all = holds.lock().unwrap().clone();
    all.push(Hold {
        who: "a".into(),
        from: t0,
        until: leader_until,
    });
    eprintln!("terms {:?}", rel(t0, &all));
    let bad = overlaps(&all, |_, _| true);
    assert!(
        bad.is_empty(),
        "TWO LEADERS: {:?}",
        bad.iter()
            .map(|(a, b)| rel(t0, &[a.clone(), b.clone()]))
            .collect::<Vec<_>>()
    );
    let first = all
        .iter()
        .filter(|h| h.who != "a")
        .map(|h| h.from)
        .min()
        .unwrap();
    assert!(
        first < leader_until + Duration::from_millis(1500),
        "the dead leader blocked the election {:?} past its term",
        first - leader_until
    );
    nothing_left(&nodes, name, Duration::from_secs(3)).await;
}

/// A release hands the key to the head of the line (value `~queued:<id>`); the head holds the
/// lock so handed, renews it twice, and dies. A second waiter and plain clients must not be
/// granted inside the renewed lock, and the second waiter gets it within its TTL and an entry
/// lease of its last deadline.
#[tokio::test(flavor = "multi_thread")]
async fn a_handed_lock_renewed_then_dead_is_never_overlapped() {
    let nodes = five();
    let res = "s2-handed";
    let key = lock_key(res);
    let rl = connected(&nodes).await;
    let holder = rl.acquire(res, Duration::from_secs(3)).await.unwrap();
    granted_everywhere(&nodes, &key, holder.token().expose()).await;
    // The head attempts seldom (every 10 s, its place renewed about every 1.7 s), so that the
    // release's hand-off is what gives it the lock.
    let w = Redlock::builder(nodes.urls())
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap();
    let w_task = tokio::spawn(async move { w.acquire(res, Duration::from_millis(1500)).await });
    waiters_in_line(&nodes, &key, 1).await;
    let w2 = waiter(nodes.urls(), Duration::from_secs(20));
    let w2_task = tokio::spawn(async move {
        let lock = w2.acquire(res, Duration::from_millis(700)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 2).await;
    holder.release().await.unwrap();
    let mut handed = tokio::time::timeout(Duration::from_secs(5), w_task)
        .await
        .expect("head stuck")
        .unwrap()
        .unwrap();
    eprintln!(
        "handed: token {} values {:?} ttls {:?}",
        handed.token().expose(),
        values(&nodes, &key),
        ttls(&nodes, &key)
    );
    let plain = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        handed
            .extend(Duration::from_millis(1500))
            .await
            .expect("the handed lock's renewal was refused");
        let p = plain.try_acquire(res, Duration::from_secs(1)).await;
        assert!(
            p.is_err(),
            "TWO HOLDERS: a plain client was granted inside the handed lock"
        );
    }
    let until = handed.deadline();
    std::mem::forget(handed);
    let (at, lock) = tokio::time::timeout(Duration::from_secs(10), w2_task)
        .await
        .expect("second waiter stuck")
        .unwrap();
    let lock = lock.expect("the second waiter never acquired");
    eprintln!(
        "second waiter granted {:?} after the handed lock's deadline",
        at.checked_duration_since(until)
    );
    assert!(
        at >= until,
        "TWO HOLDERS: the second waiter was granted {:?} before the handed lock's deadline",
        until - at
    );
    assert!(
        at < until + Duration::from_millis(1700),
        "the dead handed holder blocked the line {:?}",
        at - until
    );
    lock.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// Two masters are paused (SIGSTOP) while a holder with a short lease holds and a waiter waits;
/// the holder renews just before its lease ends (reaching only the running masters), then dies.
/// The masters resume later with the stretched key and its record. The waiter must not be
/// granted inside the renewed lock; after the resume, the waiter's lock keeps a plain client and
/// another owner out while it says it holds.
#[tokio::test(flavor = "multi_thread")]
async fn paused_masters_resuming_with_a_stretched_key_never_make_two_holders() {
    let nodes = five();
    let res = "s2-paused";
    let key = lock_key(res);
    let rl = connected(&nodes).await;
    let mut holder = rl.acquire(res, Duration::from_millis(800)).await.unwrap();
    granted_everywhere(&nodes, &key, holder.token().expose()).await;
    let w = waiter(nodes.urls(), Duration::from_secs(20));
    let w_task = tokio::spawn(async move {
        let lock = w.acquire(res, Duration::from_secs(3)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    nodes[0].pause().unwrap();
    nodes[1].pause().unwrap();
    tokio::time::sleep(
        holder
            .remaining()
            .saturating_sub(Duration::from_millis(150)),
    )
    .await;
    let renewed = holder.extend(Duration::from_millis(800)).await;
    eprintln!(
        "renewal with two masters paused: {:?}",
        renewed.as_ref().map_err(ToString::to_string)
    );
    let until = holder.deadline();
    std::mem::forget(holder);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nodes[0].resume().unwrap();
    nodes[1].resume().unwrap();
    let (at, lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
        .await
        .expect("waiter stuck")
        .unwrap();
    let lock = lock.expect("the waiter never acquired");
    eprintln!(
        "waiter granted {:?} after the holder's deadline; values {:?}",
        at.checked_duration_since(until),
        values(&nodes, &key)
    );
    assert!(
        at >= until,
        "TWO HOLDERS: the waiter was granted {:?} before the holder's deadline",
        until - at
    );
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    while lock.remaining() > Duration::from_millis(300) {
        let p = other.try_acquire(res, Duration::from_secs(1)).await;
        let o = other
            .acquire_as(res, "intruder", Duration::from_secs(1))
            .await;
        assert!(
            p.is_err() && o.is_err(),
            "TWO HOLDERS after the resume: plain {} owner {}; values {:?}",
            p.is_ok(),
            o.is_ok(),
            values(&nodes, &key)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lock.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// A master restarts empty while a holder holds and a waiter waits (the key stretched on the
/// others); a plain client then asks. The plain client must not be granted while the holder
/// holds, and the waiter not inside the holder's lock.
#[tokio::test(flavor = "multi_thread")]
async fn a_master_restarted_empty_under_a_stretch_never_makes_two_holders() {
    let mut nodes = five();
    let res = "s2-restart";
    let key = lock_key(res);
    let rl = connected(&nodes).await;
    let holder = rl.acquire(res, Duration::from_millis(1500)).await.unwrap();
    granted_everywhere(&nodes, &key, holder.token().expose()).await;
    let w = waiter(nodes.urls(), Duration::from_secs(20));
    let w_task = tokio::spawn(async move {
        let lock = w.acquire(res, Duration::from_secs(1)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    nodes[0].restart().unwrap();
    let other = Redlock::builder(nodes.urls())
        .acquire_timeout(Duration::ZERO)
        .build()
        .unwrap();
    while holder.remaining() > Duration::from_millis(200) {
        let p = other.try_acquire(res, Duration::from_secs(1)).await;
        assert!(
            p.is_err(),
            "TWO HOLDERS: a plain client was granted inside the holder's lock; values {:?}",
            values(&nodes, &key)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let until = holder.deadline();
    std::mem::forget(holder);
    let (at, lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
        .await
        .expect("waiter stuck")
        .unwrap();
    let lock = lock.expect("the waiter never acquired");
    assert!(
        at >= until,
        "TWO HOLDERS: the waiter was granted {:?} before the holder's deadline",
        until - at
    );
    lock.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// The holder renews a few milliseconds before (or at) its lease's end while the head of the
/// line retries every few tens of ms, so each renewal races the head's takeover of the lapsed
/// key. A renewal that succeeds must keep the head out until its new deadline; one refused
/// leaves the key to the head. Several rounds with different margins.
#[tokio::test(flavor = "multi_thread")]
async fn extends_racing_the_heads_takeover_of_a_lapsed_key_never_make_two_holders() {
    let nodes = five();
    let px = proxies(&nodes);
    let mut renewed_rounds = 0;
    for (round, late) in [0u64, 5, 10, 15, 20, 30, 40, 60].into_iter().enumerate() {
        let res: &'static str = Box::leak(format!("s2-extend-race-{round}").into_boxed_str());
        let key = lock_key(res);
        for p in &px {
            p.pass();
        }
        let rl = Redlock::builder(urls(&px))
            .retry_delay(Duration::from_millis(20))
            .node_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let mut holder = rl.acquire(res, Duration::from_millis(400)).await.unwrap();
        granted_everywhere(&nodes, &key, holder.token().expose()).await;
        let w = waiter(nodes.urls(), Duration::from_secs(20));
        let w_task = tokio::spawn(async move {
            let lock = w.acquire(res, Duration::from_millis(500)).await;
            (Instant::now(), lock)
        });
        waiters_in_line(&nodes, &key, 1).await;
        // The renewal lands `late` ms after it is sent, a few ms before the client's deadline,
        // about when the masters' leases end and the head's next attempt takes the key.
        for p in &px {
            p.delay(
                Duration::from_millis(late),
                Duration::ZERO,
                Duration::from_millis(3),
            );
        }
        tokio::time::sleep(
            holder
                .remaining()
                .saturating_sub(Duration::from_millis(late + 6)),
        )
        .await;
        let renewed = holder.extend(Duration::from_millis(500)).await;
        let until = holder.deadline();
        let renewed_ok = renewed.is_ok();
        renewed_rounds += usize::from(renewed_ok);
        std::mem::forget(holder);
        let (at, lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
            .await
            .expect("waiter stuck")
            .unwrap();
        let lock = lock.expect("the waiter never acquired");
        eprintln!(
            "round {round} late {late} ms: renewed {:?}; waiter granted {:?} after the holder's deadline (or {:?} before)",
            renewed.as_ref().map_err(ToString::to_string),
            at.checked_duration_since(until),
            until.checked_duration_since(at)
        );
        if renewed_ok {
            assert!(at >= until, "TWO HOLDERS (round {round}): the renewed holder's deadline was {:?} after the waiter's grant", until - at);
        }
        lock.release().await.unwrap();
        nothing_left(&nodes, res, Duration::from_secs(3)).await;
    }
    eprintln!("{renewed_rounds} renewals won");
}

/// Requests of a waiting owner land late (new connections opened slowly, and a delay on each
/// route) while the owner's earlier lock holds a stretched key and a plain waiter waits; the
/// owner's attempts are cut off by a short acquire timeout and rolled back. Any lock the owner
/// is granted and the plain waiter's lock never overlap, and the owner's first lock keeps a
/// quorum while it says it holds.
#[tokio::test(flavor = "multi_thread")]
async fn late_owner_attempts_under_a_stretch_never_make_two_holders() {
    let nodes = five();
    let res = "s2-owner-late";
    let key = lock_key(res);
    let owner = connected(&nodes).await;
    let t0 = Instant::now();
    let first = owner
        .acquire_as(res, OWNER, Duration::from_millis(2000))
        .await
        .unwrap();
    let first_token = first.token().expose().to_owned();
    granted_everywhere(&nodes, &key, &first_token).await;
    let holds: Holds = Arc::new(Mutex::new(vec![Hold {
        who: "owner".into(),
        from: t0,
        until: first.deadline(),
    }]));
    let w = long_waiter(nodes.urls(), Duration::from_secs(20));
    let w_task = tokio::spawn(async move {
        let lock = w.acquire(res, Duration::from_millis(800)).await;
        (Instant::now(), lock)
    });
    waiters_in_line(&nodes, &key, 1).await;
    let px = proxies(&nodes);
    for (i, p) in px.iter().enumerate() {
        p.slow_open_connections(Duration::from_millis(100 * i as u64));
        p.delay(
            Duration::from_millis(30 * i as u64),
            Duration::from_millis(20),
            Duration::from_millis(40),
        );
    }
    let late = Redlock::builder(urls(&px))
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
        .node_timeout(Duration::from_millis(800))
        .acquire_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let mut granted = Vec::new();
    for _ in 0..5 {
        match tokio::time::timeout(
            Duration::from_millis(250),
            late.acquire_as(res, OWNER, Duration::from_millis(1200)),
        )
        .await
        {
            Ok(Ok(lock)) => {
                holds.lock().unwrap().push(Hold {
                    who: "owner".into(),
                    from: Instant::now(),
                    until: lock.deadline(),
                });
                granted.push(lock);
            }
            other => eprintln!(
                "late attempt: {:?}",
                other.map(|r| r.map(|_| ()).map_err(|e| e.to_string()))
            ),
        }
        if granted.is_empty() && first.remaining() > Duration::from_millis(300) {
            let vals = values(&nodes, &key);
            let own = vals
                .iter()
                .filter(|v| v.as_deref() == Some(first_token.as_str()))
                .count();
            // Rollbacks may still be on their way: give them the delays' time.
            if own < 3 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let vals = values(&nodes, &key);
                let own = vals
                    .iter()
                    .filter(|v| v.as_deref() == Some(first_token.as_str()))
                    .count();
                assert!(
                    own >= 3 || first.remaining() < Duration::from_millis(100),
                    "the owner's first lock says {:?} left but holds {own} masters after failed attempts: {vals:?}",
                    first.remaining()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("records {:?}", records(&nodes, &key));
    for p in &px {
        p.pass();
    }
    for l in granted {
        std::mem::forget(l);
    }
    std::mem::forget(first);
    let (at, lock) = tokio::time::timeout(Duration::from_secs(10), w_task)
        .await
        .expect("waiter stuck")
        .unwrap();
    let lock = lock.expect("the waiter never acquired");
    let all = holds.lock().unwrap().clone();
    eprintln!(
        "owner holds {:?}; waiter at {} ms",
        rel(t0, &all),
        at.duration_since(t0).as_millis()
    );
    let inside: Vec<_> = all
        .iter()
        .filter(|h| h.from < at && at < h.until)
        .cloned()
        .collect();
    assert!(
        inside.is_empty(),
        "TWO HOLDERS: the waiter was granted at {} ms inside {:?}",
        at.duration_since(t0).as_millis(),
        rel(t0, &inside)
    );
    lock.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_secs(3)).await;
}

/// A waiter that attempts seldom (every 10 s; its place renewed about every 1.7 s, an entry
/// lease of 5 s): a release's hand-off is what gives it the lock.
fn seldom_waiter(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .retry_count(100_000)
        .build()
        .unwrap()
}

/// A holder releases to the first of two waiters (a hand-off, the key stretched over the
/// second's place), which holds the handed lock and releases it to the second, which holds and
/// releases in turn. The holds never overlap, and once the last is released nothing of the
/// resource is left on any master: no key, no line, no record.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_handed_locks_leaves_nothing_behind() {
    let nodes = five();
    let res = "s2-handed-chain";
    let key = lock_key(res);
    let rl = connected(&nodes).await;
    let holder = rl.acquire(res, Duration::from_secs(3)).await.unwrap();
    granted_everywhere(&nodes, &key, holder.token().expose()).await;
    let w1 = seldom_waiter(nodes.urls());
    let w1_task = tokio::spawn(async move { w1.acquire(res, Duration::from_secs(2)).await });
    waiters_in_line(&nodes, &key, 1).await;
    let w2 = seldom_waiter(nodes.urls());
    let w2_task = tokio::spawn(async move { w2.acquire(res, Duration::from_secs(2)).await });
    waiters_in_line(&nodes, &key, 2).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), w1_task)
        .await
        .expect("first waiter stuck")
        .unwrap()
        .unwrap();
    let first_from = Instant::now();
    eprintln!(
        "first: token {} after {:?}; values {:?}; records {:?}",
        first.token().expose(),
        released_at.elapsed(),
        values(&nodes, &key),
        records(&nodes, &key)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first_until = Instant::now();
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), w2_task)
        .await
        .expect("second waiter stuck")
        .unwrap()
        .unwrap();
    let second_from = Instant::now();
    eprintln!(
        "second: token {}; values {:?}; records {:?}",
        second.token().expose(),
        values(&nodes, &key),
        records(&nodes, &key)
    );
    assert!(
        second_from >= first_until && first_from >= released_at,
        "TWO HOLDERS in the chain"
    );
    second.release().await.unwrap();
    nothing_left(&nodes, res, Duration::from_millis(500)).await;
}

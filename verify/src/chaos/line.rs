//! The wait-line scenarios (15–17): separate clients waiting in line on few resources while
//! waiters die at the head of the line, masters holding lines restart empty, or a minority of
//! masters is paused with waiters queued.
//!
//! Here are the fault drivers and the checks of those scenarios; the drivers read and write the
//! masters' lines through the [`Probe`], and the checks read what the
//! [`Locks`](super::locks::Locks) clients observed beside the history ([`Observed`]).
//!
//! The figures the checks hold the library to are the documented ones: a waiter that dies blocks
//! its line for at most one entry lease ([`Setup::entry_lease`]), and `acquire` waits no longer
//! than its acquire timeout, plus the attempt under way when it runs out.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::ctl::Ctl;
use super::locks::{ClientCounts, Observed};
use super::probe::{HeadKill, Probe, RECOVERY_SLACK};
use super::ran::Ran;
use super::setup::Setup;
use super::Check;
use crate::mutex;
use quorumlock_testkit::{Op, OpKind};

/// What the line fault drivers did, for the checks.
#[derive(Debug, Default)]
pub(super) struct LineFaults {
    /// Dead heads written: the resource, when, and on how many masters the key was later seen
    /// reserved for the dead waiter (at most, over its lease).
    pub(super) dead_heads: Vec<DeadHead>,
    /// Masters killed (or paused), and how many of those held live waiters in a line just
    /// before.
    pub(super) faults: usize,
    pub(super) faults_with_waiters: usize,
    /// The last resume of a paused master.
    pub(super) last_resume: Option<Instant>,
    /// When a resource's key was free on a quorum while waiters stood in its line ...
    pub(super) free_spells: Vec<FreeSpell>,
    /// ... over this many samples of every master.
    pub(super) free_samples: usize,
}

/// A time during which a resource's key was seen free (no holder, no reservation) on a quorum
/// of masters while waiters stood in its line there: from the first sample that saw it to the
/// first that did not.
#[derive(Debug, Clone)]
pub(super) struct FreeSpell {
    pub(super) resource: String,
    pub(super) from: Instant,
    pub(super) to: Instant,
}

/// How often the free-key watch samples the masters.
const FREE_WATCH_EVERY: Duration = Duration::from_millis(10);

/// Samples every resource's key and line on every master until `stop`, and returns the spells
/// during which a key was free on a quorum while waiters stood in its line.
async fn watch_free_keys(
    probe: Probe,
    resources: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<FreeSpell>, usize) {
    let mut samples = 0;
    let mut since: Vec<Option<Instant>> = vec![None; resources];
    let mut spells = Vec::new();
    let mut close = |r: usize, from: Instant, to: Instant| {
        spells.push(FreeSpell {
            resource: Setup::resource(r),
            from,
            to,
        });
    };
    while !stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let masters = probe.free_and_waited(resources).await;
        samples += 1;
        for (r, &free) in masters.iter().enumerate() {
            match (since[r], free >= probe.quorum()) {
                (None, true) => since[r] = Some(asked),
                (Some(from), false) => {
                    close(r, from, asked);
                    since[r] = None;
                }
                _ => {}
            }
        }
        tokio::time::sleep(FREE_WATCH_EVERY).await;
    }
    let end = Instant::now();
    for (r, from) in since.into_iter().enumerate() {
        if let Some(from) = from {
            close(r, from, end);
        }
    }
    (spells, samples)
}

/// Runs the line fault driver `driver` while watching the masters for keys left free while
/// waiters stand in line (see [`no_waiter_refused_while_the_key_is_free`]); the spells go to
/// `log`.
pub(super) async fn watching_free_keys<F, Fut>(
    ctl: Ctl,
    log: Arc<Mutex<LineFaults>>,
    driver: F,
) -> io::Result<()>
where
    F: FnOnce(Ctl, Arc<Mutex<LineFaults>>) -> Fut,
    Fut: std::future::Future<Output = io::Result<()>>,
{
    let probe = Probe::new(ctl.cluster.addrs());
    let watch = tokio::spawn(watch_free_keys(probe, ctl.setup.resources, ctl.stop_flag()));
    let driven = driver(ctl, Arc::clone(&log)).await;
    let (spells, samples) = watch.await.map_err(io::Error::other)?;
    let mut log = mutex::lock(&log);
    (log.free_spells, log.free_samples) = (spells, samples);
    drop(log);
    driven
}

/// One dead waiter written at the head of a line on every master.
#[derive(Debug, Clone)]
pub(super) struct DeadHead {
    pub(super) resource: String,
    pub(super) id: String,
    /// When its writes were sent.
    pub(super) written: Instant,
    /// When every master had answered them: a release that starts later finds it in line
    /// wherever it was written. One that starts between the two may run ahead of it.
    pub(super) placed: Instant,
    /// When its entry lapses on the last master that took it.
    pub(super) lapses: Instant,
    /// On how many masters it was written.
    pub(super) masters: usize,
    /// The most masters that had the key reserved for it at once.
    pub(super) reserved: usize,
}

// ---------------------------------------------------------------------------------------------
// Fault drivers.

/// Every 200–600 ms, a dead waiter at the head of a random resource's line on every master,
/// watched for one entry lease (and a little more) to see the line reserve the key for it.
pub(super) async fn dead_heads(mut ctl: Ctl, log: Arc<Mutex<LineFaults>>) -> io::Result<()> {
    let (resources, lease) = (ctl.setup.resources, ctl.setup.entry_lease());
    let probe = Probe::new(ctl.cluster.addrs());
    ctl.go();
    for n in 0.. {
        if !ctl.sleep_ms(200, 600).await {
            return Ok(());
        }
        let resource = Setup::resource(rand::Rng::random_range(&mut ctl.rng, 0..resources));
        let id = format!("dead-{n}");
        let (written, wall) = (Instant::now(), SystemTime::now());
        let (masters, lapses_ms) = probe.kill_at_head(&resource, &id, lease).await;
        let placed = Instant::now();
        // The masters' clocks are this machine's clock.
        let wall_ms = wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let lapses = written
            + lapses_ms.map_or(lease, |at| {
                Duration::from_millis(at.saturating_sub(wall_ms))
            });
        let fault = ctl.fault(format!(
            "a dead waiter ({id}) at the head of {resource}'s line on {masters} masters"
        ));
        // Until the key is seen reserved for the dead waiter on a quorum, or its entry lapsed.
        let mut reserved = 0;
        let until = lapses + RECOVERY_SLACK;
        while Instant::now() < until && reserved < probe.quorum() {
            reserved = reserved.max(probe.reserved_for(&resource, &id).await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep_until(until.into()).await;
        ctl.heal(fault);
        mutex::lock(&log).dead_heads.push(DeadHead {
            resource,
            id,
            written,
            placed,
            lapses,
            masters,
            reserved,
        });
    }
    Ok(())
}

/// Waits (up to 300 ms) until one of `masters` holds live waiters; whether one did.
async fn until_waiters_on(ctl: &Ctl, probe: &Probe, masters: &[usize]) -> bool {
    let until = Instant::now() + Duration::from_millis(300);
    loop {
        for &i in masters {
            if probe.waiters_on(i).await.unwrap_or(0) > 0 {
                return true;
            }
        }
        if Instant::now() >= until || ctl.stopped() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One or two masters killed once they hold waiters in a line, left down for more than a TTL,
/// restarted empty (no AOF): their lines are gone.
pub(super) async fn line_masters_restarted(
    mut ctl: Ctl,
    log: Arc<Mutex<LineFaults>>,
) -> io::Result<()> {
    let ttl = ctl.setup.ttl;
    let probe = Probe::new(ctl.cluster.addrs());
    ctl.go();
    loop {
        if !ctl.sleep_ms(100, 300).await {
            return Ok(());
        }
        let victims = ctl.pick_up_to(2);
        let queued = until_waiters_on(&ctl, &probe, &victims).await;
        for &i in &victims {
            ctl.kill(i).await?;
        }
        let id = ctl.fault(format!(
            "masters {victims:?} killed {} waiters in line, restarted empty after a TTL",
            if queued { "with" } else { "without" }
        ));
        {
            let mut log = mutex::lock(&log);
            log.faults += 1;
            log.faults_with_waiters += usize::from(queued);
        }
        let down = ttl + ctl.ms(20, 100);
        tokio::time::sleep(down).await;
        for &i in &victims {
            ctl.restart(i).await?;
        }
        ctl.heal(id);
    }
}

/// Two masters at a time paused (`SIGSTOP`) once they hold waiters in a line, for 50–400 ms
/// (the longer pauses outlast the entry lease), then resumed.
pub(super) async fn minority_paused_in_line(
    mut ctl: Ctl,
    log: Arc<Mutex<LineFaults>>,
) -> io::Result<()> {
    let probe = Probe::new(ctl.cluster.addrs());
    ctl.go();
    loop {
        let victims = ctl.pick(2);
        let queued = until_waiters_on(&ctl, &probe, &victims).await;
        for &i in &victims {
            ctl.pause(i)?;
        }
        let id = ctl.fault(format!(
            "masters {victims:?} paused {} waiters in line",
            if queued { "with" } else { "without" }
        ));
        {
            let mut log = mutex::lock(&log);
            log.faults += 1;
            log.faults_with_waiters += usize::from(queued);
        }
        let go_on = ctl.sleep_ms(50, 400).await;
        ctl.heal(id);
        for &i in &victims {
            ctl.resume(i)?;
        }
        mutex::lock(&log).last_resume = Some(Instant::now());
        if !go_on || !ctl.sleep_ms(50, 200).await {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checks.

fn acquires(ran: &Ran) -> Vec<Op> {
    ran.history
        .ops()
        .into_iter()
        .filter(|op| op.kind == OpKind::Acquire)
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How often a waiter in line attempts when nothing wakes it: its retry delay, at most a third
/// of its entry lease (each attempt renews its entry).
fn poll_interval(s: &Setup) -> Duration {
    (s.entry_lease() / 3).min(s.retry_delay.saturating_sub(s.retry_jitter))
}

/// Waiters do not spin: a waiter attempts at arrival, once more as it takes its place in line,
/// then only when a hand-off wakes it or its poll interval ends. Wake-ups come from releases
/// (one head per resource each), from killed waiters passing their reservation on, and from
/// the rollback of a polled attempt that reached a key reserved for another waiter; never from
/// a waiter's own rollback, which once woke the waiter itself and made it attempt again at
/// once against the same holder (hundreds of attempts in a second, with nobody releasing).
pub(super) fn waiters_attempt_once_per_hand_off(ran: &Ran, observed: &Observed) -> Check {
    let s = &ran.setup;
    let poll = poll_interval(s);
    let ops = ran.history.ops();
    let calls: Vec<&Op> = ops.iter().filter(|op| op.kind == OpKind::Acquire).collect();
    let releases = ops
        .iter()
        .filter(|op| op.kind == OpKind::Release && op.succeeded())
        .count() as u64;
    let killed = observed.head_kills.len() as u64;
    let timeout = s
        .acquire_timeout
        .unwrap_or(quorumlock::DEFAULT_ACQUIRE_TIMEOUT);
    // The polls each call could make: its wait over the interval; a killed call waited at most
    // its acquire timeout.
    let polls_of = |waited: Duration| (waited.as_micros() / poll.as_micros().max(1)) as u64;
    let polls: u64 = calls
        .iter()
        .map(|op| polls_of(op.end - op.start))
        .sum::<u64>()
        + killed * polls_of(timeout);
    let calls = calls.len() as u64 + killed;
    let ClientCounts { attempts, wakeups } = observed.counted;
    let woken_bound = releases + killed + polls;
    let attempts_bound = 2 * calls + wakeups + polls;
    let per_release = |n: u64| n as f64 / releases.max(1) as f64;
    Check::new(
        "waiters attempt once per hand-off or poll: no waiter spins",
        releases > 0 && wakeups <= woken_bound && attempts <= attempts_bound,
        format!(
            "{attempts} attempts ({:.2} per release; bound {attempts_bound} = 2 × {calls} calls + wake-ups + {polls} polls of {:.0}ms), {wakeups} wake-ups ({:.2} per release; bound {woken_bound} = {releases} releases + {killed} killed waiters + polls)",
            per_release(attempts),
            ms(poll),
            per_release(wakeups),
        ),
    )
}

/// No waiter is refused while the key is free: a key free on a quorum of masters while waiters
/// stand in its line there (a holder's lease ran out, or a waiter handed a key it could not use
/// passed it on) is taken by the head within an entry lease, since the head attempts at least
/// every third of one; a waiter that died in that line may hold it one entry lease more
/// (`deaths`, as for [`contended_resources_come_back`]).
pub(super) fn no_waiter_refused_while_the_key_is_free(
    ran: &Ran,
    log: &LineFaults,
    deaths: &[(String, Instant)],
) -> Check {
    let s = &ran.setup;
    let lease = s.entry_lease();
    let origin = ran.history.origin();
    let (mut judged, mut late) = (0, 0);
    let mut worst = (Duration::ZERO, String::new());
    for spell in &log.free_spells {
        let dead = deaths
            .iter()
            .filter(|(r, at)| *r == spell.resource && *at + lease > spell.from && *at < spell.to)
            .count() as u32;
        let bound = lease * (1 + dead) + s.node_timeout + RECOVERY_SLACK;
        if spell.from + bound >= ran.stopped_at {
            continue;
        }
        judged += 1;
        let lasted = ran.stalls.net(spell.from, spell.to);
        late += usize::from(lasted > bound);
        if lasted > worst.0 {
            worst = (
                lasted,
                format!(
                    " ({} from {:.0}ms, {dead} dead waiters, bound {:.0}ms)",
                    spell.resource,
                    ms(spell.from - origin),
                    ms(bound)
                ),
            );
        }
    }
    Check::new(
        "no waiter is refused while the key is free: a free key with waiters goes to the head within an entry lease",
        log.free_samples > 0 && late == 0,
        format!(
            "{} samples every {:.0}ms; {judged} spells of a key free on a quorum with waiters in line, longest {:.0}ms less stalls{}; late {late}; {}",
            log.free_samples,
            ms(FREE_WATCH_EVERY),
            ms(worst.0),
            worst.1,
            ran.stalls.summary()
        ),
    )
}

/// Every acquire call, successful or not, returned within its acquire timeout plus one
/// attempt's bound (the TTL).
pub(super) fn no_waiter_past_its_timeout(ran: &Ran) -> Check {
    let s = &ran.setup;
    let timeout = s
        .acquire_timeout
        .unwrap_or(quorumlock::DEFAULT_ACQUIRE_TIMEOUT);
    let bound = timeout + s.ttl;
    let ops = acquires(ran);
    let waited = |op: &Op| ran.stalls.net(op.start, op.end);
    let longest = ops.iter().max_by_key(|op| waited(op));
    let late = ops.iter().filter(|op| waited(op) > bound).count();
    let gave_up = ops
        .iter()
        .filter(|op| !op.succeeded() && op.end - op.start >= timeout)
        .count();
    let waited_half = ops
        .iter()
        .filter(|op| op.end - op.start >= timeout / 2)
        .count();
    Check::new(
        "no acquire waits past its acquire timeout + one attempt (TTL)",
        longest.is_some() && late == 0,
        format!(
            "{} acquire calls, longest {} (bound {:.0}ms = timeout {:.0}ms + TTL); {waited_half} waited ≥ half the timeout, {gave_up} gave up at the timeout; late {late}; {}",
            ops.len(),
            longest.map_or("none".to_owned(), |op| format!(
                "{:.0}ms less {:.0}ms stalled ({} of {}, {:.0}–{:.0}ms, {})",
                ms(op.end - op.start),
                ms(ran.stalls.within(op.start, op.end)),
                if op.succeeded() { "acquired" } else { "failed" },
                op.resource,
                ms(op.start - ran.history.origin()),
                ms(op.end - ran.history.origin()),
                match &op.outcome {
                    quorumlock_testkit::Outcome::Failed { reason } => reason.as_str(),
                    _ => "ok",
                }
            )),
            ms(bound),
            ms(timeout),
            ran.stalls.summary(),
        ),
    )
}

/// Per resource, each holder's acquisition end and the end of its hold: its release's end, or
/// its lease's end (extends included) when it released nothing.
fn holds(ops: &[Op]) -> HashMap<&str, Vec<(Instant, Instant)>> {
    let mut released: HashMap<&str, Instant> = HashMap::new();
    let mut lease_end: HashMap<&str, Instant> = HashMap::new();
    for op in ops.iter().filter(|op| op.succeeded()) {
        if op.kind == OpKind::Release {
            let end = released.entry(&op.token).or_insert(op.end);
            *end = (*end).min(op.end);
        }
        if let Some(until) = op.valid_until() {
            let end = lease_end.entry(&op.token).or_insert(until);
            *end = (*end).max(until);
        }
    }
    let mut holds: HashMap<&str, Vec<(Instant, Instant)>> = HashMap::new();
    for op in ops {
        if op.kind == OpKind::Acquire && op.succeeded() {
            let token = op.token.as_str();
            let lease = lease_end.get(token).copied().unwrap_or(op.end);
            let free = released.get(token).copied().unwrap_or(lease);
            holds.entry(&op.resource).or_default().push((op.end, free));
        }
    }
    holds
}

/// Whenever a contended resource became free (a waiter's acquire call was under way), somebody
/// acquired it within one entry lease + TTL: no dead waiter, lost line or stray key blocks a
/// line for longer. `deaths` are the waiters that died in line (resource, when): each may block
/// its line for one entry lease, so a gap with d of them on its resource may last d entry leases
/// + TTL.
pub(super) fn contended_resources_come_back(ran: &Ran, deaths: &[(String, Instant)]) -> Check {
    let s = &ran.setup;
    let (lease, origin) = (s.entry_lease(), ran.history.origin());
    let bound_for = |dead: usize| lease * dead.max(1) as u32 + s.ttl + RECOVERY_SLACK;
    let ops = ran.history.ops();
    let holds = holds(&ops);
    let (mut frees, mut late, mut never, mut with_deaths) = (0, 0, 0, 0);
    let mut worst = (Duration::ZERO, String::new());
    for r in 0..s.resources {
        let resource = Setup::resource(r);
        let here: Vec<&Op> = ops
            .iter()
            .filter(|op| op.kind == OpKind::Acquire && op.resource == resource)
            .collect();
        let mut acquired: Vec<Instant> = here
            .iter()
            .filter(|op| op.succeeded())
            .map(|op| op.end)
            .collect();
        acquired.sort_unstable();
        for &(_, free) in holds.get(resource.as_str()).into_iter().flatten() {
            let waited_on = here.iter().any(|op| op.start < free && op.end > free);
            if !waited_on {
                continue;
            }
            let next = acquired.iter().find(|end| **end > free).copied();
            let dead = deaths
                .iter()
                .filter(|(r, at)| {
                    *r == resource && *at + lease > free && next.is_none_or(|n| *at < n)
                })
                .count();
            let bound = bound_for(dead);
            if free + bound >= ran.stopped_at {
                continue;
            }
            frees += 1;
            with_deaths += usize::from(dead > 0);
            let Some(next) = next else {
                never += 1;
                continue;
            };
            let gap = ran.stalls.net(free, next);
            if gap > worst.0 {
                worst = (
                    gap,
                    format!(
                        " ({resource} free at {:.0}ms, {:.0}ms stalled, {dead} dead waiters, bound {:.0}ms)",
                        ms(free - origin),
                        ms(ran.stalls.within(free, next)),
                        ms(bound)
                    ),
                );
            }
            late += usize::from(gap > bound);
        }
    }
    Check::new(
        "a contended resource is acquired again within entry lease + TTL of becoming free",
        frees > 0 && late == 0 && never == 0,
        format!(
            "{frees} hand-overs with waiters ({with_deaths} with waiters dying in line); longest gap less stalls {:.0}ms{} (bound entry lease {:.0}ms per dead waiter, at least one, + TTL + {:.0}ms); late {late}; never {never}; {}",
            ms(worst.0),
            worst.1,
            ms(lease),
            ms(RECOVERY_SLACK),
            ran.stalls.summary()
        ),
    )
}

/// The waiters that died in line in scenario 15 and could block it: the dead heads written, and
/// the waiters killed while heading the line that were still seen in it (or the key reserved
/// for them) after they should have left. A killed waiter that left at once blocks nothing.
pub(super) fn deaths(ran: &Ran, observed: &Observed, log: &LineFaults) -> Vec<(String, Instant)> {
    let lease = ran.setup.entry_lease();
    let written = log.dead_heads.iter().map(|h| {
        (
            h.resource.clone(),
            h.lapses.checked_sub(lease).unwrap_or(h.written),
        )
    });
    let lingering = observed
        .head_kills
        .iter()
        .filter(|k| k.lingered > 0 || k.reserved > 0)
        .map(|k| (k.resource.clone(), k.at));
    written.chain(lingering).collect()
}

/// The first release of the dead head's resource that a quorum confirmed and that started once
/// the head was in line on every master and early enough (by [`SAMPLED_WITHIN`]) before its
/// entry lapsed for the probe, sampling every 5 ms or so, to see the reservation it made.
fn released_while_at_head<'a>(ops: &'a [Op], head: &DeadHead) -> Option<&'a Op> {
    ops.iter()
        .filter(|op| {
            op.kind == OpKind::Release
                && op.succeeded()
                && op.resource == head.resource
                && op.start >= head.placed
                && op.start + SAMPLED_WITHIN <= head.lapses
        })
        .min_by_key(|op| op.start)
}

/// How long before a dead head's entry lapses a release must start for its reservation to be
/// sampled: ten probe intervals, as the probe's own requests can take a few milliseconds.
const SAMPLED_WITHIN: Duration = Duration::from_millis(50);

/// The first acquisition of `resource` that ended after `after`.
fn next_acquisition(ops: &[Op], resource: &str, after: Instant) -> Option<Instant> {
    ops.iter()
        .filter(|op| op.kind == OpKind::Acquire && op.succeeded())
        .filter(|op| op.resource == resource && op.end > after)
        .map(|op| op.end)
        .min()
}

/// Each dead head was honoured — the key was reserved for it on a quorum, or nobody released
/// the resource while it was at the head, so there was nothing to reserve (waiters that took
/// their place in line at once are kept out by it) — and once its entry lapsed (one entry lease
/// after it was written), the line went on within a TTL.
pub(super) fn dead_heads_block_for_at_most_an_entry_lease(
    ran: &Ran,
    log: &LineFaults,
    quorum: usize,
) -> Check {
    let s = &ran.setup;
    let lease = s.entry_lease();
    let bound = s.ttl + RECOVERY_SLACK;
    let heads = &log.dead_heads;
    let ops = ran.history.ops();
    let written_everywhere = heads.iter().filter(|h| h.masters == s.masters).count();
    let reserved = heads.iter().filter(|h| h.reserved >= quorum).count();
    // The heads not seen reserved on a quorum, each with the release that passed it over, if any.
    let unreserved: Vec<(&DeadHead, Option<&Op>)> = heads
        .iter()
        .filter(|h| h.reserved < quorum)
        .map(|h| (h, released_while_at_head(&ops, h)))
        .collect();
    let unreleased = unreserved.iter().filter(|(_, r)| r.is_none()).count();
    let honoured = reserved + unreleased;
    let origin = ran.history.origin();
    let passed_over: Vec<String> = unreserved
        .iter()
        .filter_map(|(h, release)| release.map(|r| (h, r)))
        .map(|(h, release)| {
            format!(
                "; {} {} written {:.1}–{:.1}ms, lapsed {:.1}ms, reserved on {} at most, released {:.1}–{:.1}ms",
                h.resource,
                h.id,
                ms(h.written - origin),
                ms(h.placed - origin),
                ms(h.lapses - origin),
                h.reserved,
                ms(release.start - origin),
                ms(release.end - origin)
            )
        })
        .collect();
    let (mut late, mut never) = (0, 0);
    let mut worst = Duration::ZERO;
    for head in heads {
        let lapsed = head.lapses;
        match next_acquisition(&ops, &head.resource, lapsed) {
            Some(at) => {
                let took = ran.stalls.net(lapsed, at);
                worst = worst.max(took);
                late += usize::from(took > bound);
            }
            None => never += usize::from(lapsed + bound < ran.stopped_at),
        }
    }
    Check::new(
        "a dead head of the line is honoured, and the line goes on within a TTL of its entry lease",
        !heads.is_empty()
            && written_everywhere == heads.len()
            && honoured == heads.len()
            && late == 0
            && never == 0,
        format!(
            "{} dead heads, written on every master {written_everywhere}, key reserved for them on a quorum {reserved}, not released while they headed the line {unreleased}; next acquisition at most {:.0}ms (less stalls) after the entry lease ({:.0}ms) ended (bound {:.0}ms = TTL + {:.0}ms); late {late}; never {never}{}",
            heads.len(),
            ms(worst),
            ms(lease),
            ms(bound),
            ms(RECOVERY_SLACK),
            passed_over.concat()
        ),
    )
}

/// After each waiter killed at the head of the line (its task aborted), the resource was
/// acquired again within one entry lease + TTL.
pub(super) fn killed_heads_leave_the_line(ran: &Ran, observed: &Observed) -> Check {
    let s = &ran.setup;
    let head_kills = &observed.head_kills;
    let bound = s.entry_lease() + s.ttl + RECOVERY_SLACK;
    let ops = ran.history.ops();
    let (mut late, mut never) = (0, 0);
    let mut worst = Duration::ZERO;
    let lingered: Vec<&HeadKill> = head_kills
        .iter()
        .filter(|k| k.lingered > 0 || k.reserved > 0)
        .collect();
    let reserved = head_kills.iter().filter(|k| k.reserved > 0).count();
    let outlived = head_kills.iter().filter(|k| k.outlived > 0).count();
    let lingered_at: Vec<String> = lingered
        .iter()
        .take(5)
        .map(|k| {
            format!(
                "{} {} killed at {:.0}ms, in line on {} masters, reserved for on {}",
                k.resource,
                k.id,
                ms(k.at - ran.history.origin()),
                k.lingered,
                k.reserved
            )
        })
        .collect();
    for HeadKill {
        resource,
        at: killed,
        ..
    } in head_kills
    {
        match next_acquisition(&ops, resource, *killed) {
            Some(at) => {
                let took = ran.stalls.net(*killed, at);
                worst = worst.max(took);
                late += usize::from(took > bound);
            }
            None => never += usize::from(*killed + bound < ran.stopped_at),
        }
    }
    Check::new(
        "a waiter killed at the head of the line is gone from it within an entry lease, and the resource is acquired again within entry lease + TTL",
        !head_kills.is_empty() && outlived == 0 && late == 0 && never == 0,
        format!(
            "{} waiters watched, {} killed while heading the line; still in line {:.0}ms after the kill: {} (key reserved for it on some master: {reserved}) {}; still there {:.0}ms after: {outlived}; next acquisition at most {:.0}ms (less stalls) after the kill (bound {:.0}ms); late {late}; never {never}",
            observed.watched_waiters,
            head_kills.len(),
            ms(s.node_timeout + RECOVERY_SLACK),
            lingered.len(),
            lingered_at.join(", "),
            ms(s.entry_lease() + RECOVERY_SLACK),
            ms(worst),
            ms(bound)
        ),
    )
}

/// The fault found waiters queued on the masters it hit (not just empty lines), at least once.
pub(super) fn faults_hit_queued_waiters(log: &LineFaults, what: &str) -> Check {
    Check::new(
        format!("{what} while waiters were queued on them"),
        log.faults_with_waiters > 0,
        format!(
            "{} faults, {} with live waiters on the masters hit",
            log.faults, log.faults_with_waiters
        ),
    )
}

/// Once the clients are gone, no line outlives one entry lease (plus expiry slack); and none was
/// renewed after they had ended (a waiter put back in line by a late rollback, after it left).
pub(super) async fn lines_lapse_within_an_entry_lease(ran: &Ran) -> Check {
    let probe = Probe::new(ran.cluster.addrs());
    let lease = ran.setup.entry_lease();
    let bound = lease + RECOVERY_SLACK;
    let until = ran.finished_at + bound;
    // The latest renewal seen, as an offset from the end of the clients: a line key's PTTL is
    // one entry lease at each renewal.
    let mut renewed: Option<(Duration, String)> = None;
    let mut left;
    loop {
        let asked = Instant::now();
        left = probe.line_keys().await;
        for (key, pttl) in &left {
            let at = (asked + *pttl).saturating_duration_since(ran.finished_at + lease);
            if renewed.as_ref().is_none_or(|(latest, _)| at > *latest) {
                renewed = Some((at, key.clone()));
            }
        }
        if left.is_empty() || Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = Instant::now().saturating_duration_since(ran.finished_at);
    let renewal = match &renewed {
        Some((at, key)) if *at > Duration::ZERO => {
            format!(
                "; latest renewal {:.0}ms after the clients ended ({key})",
                ms(*at)
            )
        }
        _ => "; none renewed after the clients ended".to_owned(),
    };
    Check::new(
        "every line lapses within an entry lease of its last waiter",
        left.is_empty(),
        if left.is_empty() {
            format!(
                "no line key {:.0}ms after the clients ended (bound {:.0}ms){renewal}",
                ms(after),
                ms(bound)
            )
        } else {
            let keys: Vec<&str> = left.iter().map(|(k, _)| k.as_str()).collect();
            format!(
                "{:.0}ms after the clients ended: {}{renewal}",
                ms(after),
                keys.join(", ")
            )
        },
    )
}

//! Scenario 20: separate candidates, each its own `Redlock`, campaign for one election
//! ([`Redlock::elect`](quorumlock::Redlock::elect), held by [`Redlock::hold`]) with a short TTL,
//! while an observer reads who leads ([`Redlock::leader`]), under the mixed faults plus one of
//! the election's own: the leader cut off from every master by its own proxies.
//!
//! Every client reaches the masters through proxies of its own: a partition or a slowdown of a
//! master strikes every client's proxy in front of it, a cut-off every proxy of one candidate. Each leadership is recorded as one acquire on the election's
//! name, from the start of the campaign to the election, valid until the leader stepped down —
//! it resigned, or its body saw the loss signal — its fence the term. The history then checks
//! that two leaderships never overlap, that terms grow in election order, and that every read of
//! the leader named one that led during the read (see `history::election`); the leaders' short
//! actions go through a witness and registers, the fenced one by term.
//!
//! Terms are fences, and fences need masters that keep their counters: the masters here run
//! with AOF, and killed ones come back from it, after a TTL.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use quorumlock::{Error, HoldOptions, Lock, Redlock};
use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::watch;

use super::ctl::Ctl;
use super::ran::Ran;
use super::shared::Shared;
use super::workload::Workload;
use super::Check;
use crate::mutex;
use quorumlock_testkit::history::LeaderRead;
use quorumlock_testkit::{Op, OpKind, Outcome};

/// The election the candidates campaign in.
pub(super) const ELECTION: &str = "leader";

/// What the description of a cut-off fault contains.
pub(super) const CUT_OFF: &str = "cut off from every master";

/// Longest ordinary term: most leaders resign after a few actions.
const SHORT_TERM: Duration = Duration::from_millis(2);

/// Chance that a leader holds on for a while, through renewals.
const MEDIUM_CHANCE: f64 = 0.005;

/// How long such a leader holds on, in milliseconds.
const MEDIUM_TERM_MS: (u64, u64) = (300, 800);

/// How long a leader asked to hold on (to be cut off) does, at most: longer than a TTL, so that
/// the cut-off ends it, not the leader.
const LONG_TERM_TTLS: u32 = 3;

/// After the loss signal, how long the leader's body may run to note that it stepped down.
const GRACE: Duration = Duration::from_millis(50);

/// Longest pause between two leader actions.
const PAUSE_MS: u64 = 1;

/// The least and most time between two reads of the observer, in milliseconds.
const OBSERVE_EVERY_MS: (u64, u64) = (2, 5);

/// The election workload: what the candidates, the observer and the fault driver share beside
/// the engine's state. Candidates campaign in one election while the last client observes who
/// leads (`resources` 1: the leaders' witness and registers).
#[derive(Debug)]
pub(super) struct Board {
    /// The leader now, if any: who, and whether it was asked to hold on.
    leader: Mutex<Option<(usize, bool)>>,
    /// The fault driver wants the next leader to hold on, to cut it off.
    want_long: AtomicBool,
    /// Set once the observer has stopped reading: only then do campaigns still under way stop,
    /// so that no read can see a term won in the instant its campaign was dropped.
    observer_done: watch::Sender<bool>,
    /// Every leadership, in the order they ended.
    terms: Mutex<Vec<Term>>,
    /// Every cut-off: the leader cut off, and when.
    cut_offs: Mutex<Vec<(usize, Instant)>>,
    /// Reads of the leader that got no answer from a quorum.
    unanswered: AtomicUsize,
}

impl Default for Board {
    fn default() -> Self {
        Board {
            leader: Mutex::default(),
            want_long: AtomicBool::new(false),
            observer_done: watch::Sender::new(false),
            terms: Mutex::default(),
            cut_offs: Mutex::default(),
            unanswered: AtomicUsize::new(0),
        }
    }
}

/// One leadership, as its leader saw it.
#[derive(Clone, Debug)]
struct Term {
    client: usize,
    term: Option<u64>,
    elected: Instant,
    stepped_down: Instant,
    /// Why it was lost, when the loss signal ended it.
    lost: Option<String>,
}

/// Marks the observer done when dropped, however its task ends.
struct ObserverDone<'a>(&'a Board);

impl Drop for ObserverDone<'_> {
    fn drop(&mut self) {
        self.0.observer_done.send_replace(true);
    }
}

impl Workload for Board {
    fn lock_name(&self, _r: usize) -> String {
        ELECTION.to_owned()
    }

    fn prepare(&self, shared: &Shared) {
        shared.history.watch_election(ELECTION);
    }

    fn client(
        self: Arc<Self>,
        shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        Box::pin(run_client(shared, client, rng, self))
    }
}

/// A client of the election: the last one observes, every other campaigns.
async fn run_client(shared: Arc<Shared>, client: usize, rng: StdRng, board: Arc<Board>) {
    if client + 1 == shared.setup.clients {
        observe(&shared, client, rng, &board).await;
    } else {
        campaign(&shared, client, rng, &board).await;
    }
}

/// Reads who leads every few milliseconds, through the shared proxies, until the run stops.
async fn observe(shared: &Shared, client: usize, mut rng: StdRng, board: &Board) {
    let _done = ObserverDone(board);
    let Ok(rl) = shared.redlock_of(client) else {
        return;
    };
    while !shared.stopped() {
        let start = Instant::now();
        match rl.leader(ELECTION).await {
            Ok(leader) => shared.history.record_leader_read(LeaderRead::new(
                client,
                ELECTION,
                start,
                Instant::now(),
                leader.as_ref(),
            )),
            Err(_) => {
                board.unanswered.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (lo, hi) = OBSERVE_EVERY_MS;
        tokio::time::sleep(Duration::from_millis(rng.random_range(lo..=hi))).await;
    }
}

/// Campaigns, leads for a while, resigns (or loses the lead), and campaigns again, until the run
/// stops.
async fn campaign(shared: &Arc<Shared>, client: usize, mut rng: StdRng, board: &Arc<Board>) {
    // Without a client the candidate cannot run: the "every candidate led" check fails.
    let Ok(rl) = shared.redlock_of(client) else {
        return;
    };
    let mut observer_done = board.observer_done.subscribe();
    let mut campaigns = 0u64;
    while !shared.stopped() {
        campaigns += 1;
        // A value of its own for every campaign: a read names exactly one leadership.
        let value = format!("c{client}-{campaigns}");
        let start = Instant::now();
        let elected = tokio::select! {
            elected = rl.elect(ELECTION, shared.setup.ttl_of(client), &value) => elected,
            _ = observer_done.wait_for(|done| *done) => break,
        };
        match elected {
            Ok(lock) => lead(shared, board, &rl, client, start, lock, &mut rng).await,
            Err(e) => {
                shared.history.record(Op::acquire_failed(
                    client,
                    ELECTION,
                    start,
                    Instant::now(),
                    e,
                ));
                tokio::time::sleep(shared.setup.retry_delay).await;
            }
        }
    }
}

/// How the body of a term ended, as the body saw it.
#[derive(Clone, Copy, Debug)]
struct SteppedDown {
    at: Instant,
    lost: bool,
    /// The lease's deadline then.
    deadline: Instant,
}

/// Leads with `lock` (elected from `start` until now): holds it with renewals while doing short
/// leader actions, then resigns, unless the loss signal comes first; records the leadership.
async fn lead(
    shared: &Arc<Shared>,
    board: &Board,
    rl: &Redlock,
    client: usize,
    start: Instant,
    lock: Lock,
    rng: &mut StdRng,
) {
    let elected = Instant::now();
    let term = lock.fencing_token();
    let token = lock.token().expose().to_owned();
    shared.successes.fetch_add(1, Ordering::SeqCst);
    mutex::lock(&shared.latencies).push(elected - start);

    let long = board.want_long.swap(false, Ordering::SeqCst);
    let ttl = shared.setup.ttl_of(client);
    let hold_for = if long {
        ttl * LONG_TERM_TTLS
    } else if rng.random_bool(MEDIUM_CHANCE) {
        Duration::from_millis(rng.random_range(MEDIUM_TERM_MS.0..=MEDIUM_TERM_MS.1))
    } else {
        rng.random_range(Duration::ZERO..=SHORT_TERM)
    };
    *mutex::lock(&board.leader) = Some((client, long));
    let pauses: Vec<u64> = (0..64).map(|_| rng.random_range(0..=PAUSE_MS)).collect();

    let stepped: Arc<Mutex<Option<SteppedDown>>> = Arc::default();
    let held = rl
        .hold(lock, HoldOptions::new().grace(GRACE), {
            let (shared, stepped) = (Arc::clone(shared), Arc::clone(&stepped));
            move |held| async move {
                let resign_at = elected + hold_for;
                let mut actions = 0usize;
                let lost = loop {
                    if Instant::now() >= resign_at || shared.stopped() {
                        break false;
                    }
                    let pause = Duration::from_millis(pauses[actions % pauses.len()]);
                    actions += 1;
                    tokio::select! {
                        biased;
                        _ = held.lost() => break true,
                        _ = act(&shared, client, &held, term, pause) => {}
                    }
                };
                *mutex::lock(&stepped) = Some(SteppedDown {
                    at: Instant::now(),
                    lost,
                    deadline: held.deadline(),
                });
                // No longer the leader to cut off, from this instant (not once released).
                let mut leader = mutex::lock(&board.leader);
                if matches!(*leader, Some((c, _)) if c == client) {
                    *leader = None;
                }
            }
        })
        .await;
    let ended = Instant::now();
    {
        // Should the body not have run, it is no longer the leader either.
        let mut leader = mutex::lock(&board.leader);
        if matches!(*leader, Some((c, _)) if c == client) {
            *leader = None;
        }
    }

    // The body always notes how it ended: the loss signal wakes it at once, within the grace.
    // One that did not never ran (the hold refused its options), and claimed no leadership.
    let down = mutex::lock(&stepped).take().unwrap_or(SteppedDown {
        at: elected,
        lost: false,
        deadline: elected,
    });
    let valid_until = down.at.min(down.deadline);
    shared.history.record(Op {
        client,
        resource: ELECTION.to_owned(),
        token: token.clone(),
        kind: OpKind::Acquire,
        start,
        end: elected,
        outcome: Outcome::Ok {
            valid_until: Some(valid_until),
        },
        fence: term,
    });
    shared.history.record(Op {
        client,
        resource: ELECTION.to_owned(),
        token,
        kind: OpKind::Release,
        start: valid_until,
        end: ended,
        outcome: match &held {
            Ok(()) => Outcome::Ok { valid_until: None },
            Err(e) => Outcome::Failed {
                reason: e.to_string(),
            },
        },
        fence: term,
    });
    let lost = match held {
        Err(Error::Lost { reason, .. }) => Some(reason.to_string()),
        Err(e) if down.lost => Some(e.to_string()),
        _ if down.lost => Some("loss signal".to_owned()),
        _ => None,
    };
    mutex::lock(&board.terms).push(Term {
        client,
        term,
        elected,
        stepped_down: valid_until,
        lost,
    });
}

/// One leader action: a pause, then, while the lease has a safety margin left, the witness and
/// a read–sleep–write of the registers, the fenced one under the term.
async fn act(
    shared: &Shared,
    client: usize,
    held: &quorumlock::Held,
    term: Option<u64>,
    pause: Duration,
) {
    tokio::time::sleep(pause).await;
    let margin = shared.setup.tuning(client).margin();
    if held.remaining() <= margin {
        return;
    }
    let _alone = shared.witnesses[0].enter(client);
    let value = shared.registers[0].read();
    tokio::task::yield_now().await;
    if held.remaining() > margin {
        shared.registers[0].write(value + 1);
        if let (Some(fenced), Some(term)) = (shared.fenced.first(), term) {
            let _ = fenced.write(term, client);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fault of the election's own.

/// Asks the next leader to hold on, waits for one that does, and cuts it off from every master
/// through its own proxies until it has lost the lead and another candidate has been elected
/// (or three TTLs have passed); then heals. `true` if the run goes on.
pub(super) async fn cut_off_the_leader(ctl: &mut Ctl, board: &Board) -> bool {
    let ttl = ctl.setup.ttl;
    board.want_long.store(true, Ordering::SeqCst);
    let wait_until = Instant::now() + ttl * 2;
    let victim = loop {
        if let Some((leader, true)) = *mutex::lock(&board.leader) {
            break Some(leader);
        }
        if Instant::now() >= wait_until || !ctl.sleep(Duration::from_millis(5)).await {
            break None;
        }
    };
    let Some(victim) = victim else {
        board.want_long.store(false, Ordering::SeqCst);
        return !ctl.stopped();
    };
    let cluster = Arc::clone(&ctl.cluster);
    let proxies = cluster.own_proxies(victim);
    for proxy in proxies {
        proxy.blackhole();
    }
    let at = Instant::now();
    let id = ctl.fault(format!("leader (client {victim}) {CUT_OFF}"));
    mutex::lock(&board.cut_offs).push((victim, at));
    let heal_by = at + ttl * 3;
    loop {
        let replaced = matches!(*mutex::lock(&board.leader), Some((leader, _)) if leader != victim);
        if replaced || Instant::now() >= heal_by || !ctl.sleep(Duration::from_millis(5)).await {
            break;
        }
    }
    ctl.heal(id);
    for proxy in proxies {
        proxy.heal();
    }
    !ctl.stopped()
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// Every leadership, in the order they were elected.
fn terms(board: &Board) -> Vec<Term> {
    let mut terms = mutex::lock(&board.terms).clone();
    terms.sort_by_key(|t| t.elected);
    terms
}

/// Every candidate, each with its own `Redlock`, led at least once.
pub(super) fn every_candidate_led(ran: &Ran, board: &Board) -> Check {
    let candidates = ran.setup.clients.saturating_sub(1);
    let mut led = vec![0usize; candidates];
    let terms = terms(board);
    for term in &terms {
        if let Some(n) = led.get_mut(term.client) {
            *n += 1;
        }
    }
    let lost = terms.iter().filter(|t| t.lost.is_some()).count();
    let never = led.iter().filter(|n| **n == 0).count();
    let (first, last) = (
        terms.first().and_then(|t| t.term),
        terms.last().and_then(|t| t.term),
    );
    Check::new(
        "every separate candidate led",
        candidates > 0 && never == 0,
        format!(
            "{candidates} candidates, each its own Redlock; terms per candidate {}; \
             {} resigned, {lost} lost the lead; terms {} to {}",
            led.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            terms.len() - lost,
            first.map_or("-".to_owned(), |t| t.to_string()),
            last.map_or("-".to_owned(), |t| t.to_string()),
        ),
    )
}

/// Every leader cut off from the masters lost the lead (its body saw the loss signal), and the
/// next leader was elected only after it stepped down.
pub(super) fn cut_off_leaders_stepped_down_first(ran: &Ran, board: &Board) -> Check {
    let terms = terms(board);
    let cut_offs = mutex::lock(&board.cut_offs).clone();
    let mut lost = 0;
    let mut shortest_gap: Option<Duration> = None;
    let mut bad = Vec::new();
    let (mut cut_short, mut already_down) = (0, 0);
    for (victim, at) in &cut_offs {
        let Some(i) = terms
            .iter()
            .position(|t| t.client == *victim && t.elected <= *at && t.stepped_down >= *at)
        else {
            // It stepped down (on its own) between being picked and being cut off.
            already_down += 1;
            continue;
        };
        let term = &terms[i];
        if term.lost.is_none() && term.stepped_down >= ran.stopped_at {
            // The run stopped while it was cut off: leaders resign then.
            cut_short += 1;
            continue;
        }
        if term.lost.is_none() {
            bad.push(format!(
                "client {victim}: resigned instead of losing the lead"
            ));
            continue;
        }
        lost += 1;
        if let Some(next) = terms.get(i + 1) {
            if next.elected < term.stepped_down {
                bad.push(format!(
                    "client {} elected before client {victim} stepped down",
                    next.client
                ));
            } else {
                let gap = next.elected - term.stepped_down;
                shortest_gap = Some(shortest_gap.map_or(gap, |w| w.min(gap)));
            }
        }
    }
    Check::new(
        "leaders cut off from every master lost the lead before the next was elected",
        lost > 0 && bad.is_empty(),
        format!(
            "{} cut off, {lost} lost the lead, {cut_short} resigned as the run stopped, \
             {already_down} had stepped down already; shortest step-down to next election {}{}",
            cut_offs.len(),
            shortest_gap.map_or("-".to_owned(), |g| format!(
                "{:.0}ms",
                g.as_secs_f64() * 1e3
            )),
            if bad.is_empty() {
                String::new()
            } else {
                format!("; {}", bad.join("; "))
            }
        ),
    )
}

/// The observer's reads named leaders (several of them), so that the read check had something
/// to check.
pub(super) fn reads_named_leaders(ran: &Ran, board: &Board) -> Check {
    let reads = ran.history.leader_reads();
    let named: Vec<&str> = reads.iter().filter_map(|r| r.value.as_deref()).collect();
    let mut distinct = named.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let unanswered = board.unanswered.load(Ordering::SeqCst);
    Check::new(
        "the observer's quorum reads named leaders",
        distinct.len() >= 2,
        format!(
            "{} reads: {} named a leader ({} distinct), {} none; {unanswered} unanswered by a quorum",
            reads.len(),
            named.len(),
            distinct.len(),
            reads.len() - named.len()
        ),
    )
}

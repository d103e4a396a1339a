//! Leader election over the quorum: a campaign is a lock that waits for as long as it takes,
//! held with auto-renewal; its fencing token is the leader's term.
//!
//! The leader's key holds its token followed by the value it announces (`<token>:<value>`), so
//! a quorum read of that one key tells who leads, with no second key that could disagree.
//! A campaign's attempt can hold a quorum for a moment and still lose (its replies lost in a
//! partition, its validity used up), and a read cannot tell such a key from a winner's. So the
//! winner, once elected, marks its key (`~elected:<token>:<value>`, see
//! `lua/confirm_leader.lua`), and [`Redlock::leader`] reports marked keys only: it names a
//! candidate only after that candidate knew it had won.
//! Candidates wait in the key's line: a leader that resigns (returns from the body of
//! [`Redlock::campaign`], or releases the term's lock from [`Redlock::elect`]) hands leadership
//! to the candidate that waited longest; one that dies leaves it when its lease runs out.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};

use crate::error::{Error, NodeError};
use crate::hold::{Held, HoldOptions, Plan};
use crate::keys::{Keys, ELECTED_PREFIX};
use crate::lock::Lock;
use crate::node::{Node, Subscriber};
use crate::redlock::Redlock;
use crate::scripts;
use crate::seam;
use crate::token::fingerprint;

/// The longest value a leader can announce, in bytes.
pub const MAX_LEADER_VALUE: usize = 4096;

/// Who leads an election, as a quorum of masters says ([`Redlock::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader announced when it campaigned (an address, a host name).
    pub value: String,
    /// The fingerprint of the leader's token: it changes with every term, even when the same
    /// value is elected again.
    pub fingerprint: String,
    /// The shortest time its key has left on the masters that agree, when they tell.
    pub ttl: Option<Duration>,
}

impl Redlock {
    /// Campaigns for leadership of `name`, announcing `value`, and runs `body` while leader:
    /// as [`with_lock`](Redlock::with_lock), the lease renewed every `ttl / 3`, the body's
    /// [`Held::lost`] signal fired before the lease's deadline if renewals fail, and the body
    /// dropped then.
    ///
    /// It waits in line for as long as it takes to be elected (wrap it in
    /// `tokio::time::timeout` to bound that), as one acquire that keeps its place: the client's
    /// acquire timeout and retry count do not apply. **The term** is [`Held::fencing_token`]: strictly greater than every earlier
    /// leader's, whatever the client's fencing setting; pass it to what the leader writes to.
    ///
    /// To resign, return from the body: the lock is released and the candidate that waited
    /// longest becomes leader at once.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn run(rl: quorumlock::Redlock) -> Result<(), quorumlock::Error> {
    /// rl.campaign("scheduler", Duration::from_secs(10), "host-a:8080", |held| async move {
    ///     let term = held.fencing_token();
    ///     println!("leading in term {term:?}");
    ///     held.lost().await; // lead until leadership is lost (or return to resign)
    /// })
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidLeaderValue`] for a value longer than [`MAX_LEADER_VALUE`];
    /// [`Error::InvalidResource`] / [`Error::InvalidTtl`] for bad input; [`Error::Lost`] when
    /// leadership was lost before the body finished. Contention and unavailable masters are
    /// not errors: the campaign goes on.
    ///
    /// # Panics
    ///
    /// A panic in the body propagates after the release, as with `with_lock`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops campaigning, leaves the line, and releases leadership if it
    /// was won.
    pub async fn campaign<F, Fut, T>(
        &self,
        name: &str,
        ttl: Duration,
        value: &str,
        body: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let plan = Plan::new(self, ttl, &HoldOptions::default())?;
        let lock = self.elect(name, ttl, value).await?;
        self.hold_by_plan(lock, plan, body).await
    }

    /// The campaign of [`campaign`](Redlock::campaign) alone: waits until elected, and returns
    /// the term's lock, which the caller renews (with [`Redlock::hold`], say) and releases to
    /// resign. Its [`fencing_token`](crate::Lock::fencing_token) is the term.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Redlock::campaign), before the body.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops campaigning and leaves the line; a term won in that instant
    /// is released in the background.
    pub async fn elect(&self, name: &str, ttl: Duration, value: &str) -> Result<Lock, Error> {
        if value.len() > MAX_LEADER_VALUE {
            return Err(Error::InvalidLeaderValue {
                len: value.len(),
                max: MAX_LEADER_VALUE,
            });
        }
        let lease = self.inner().lease(ttl)?;
        let key = self.inner().key(name)?;
        // Every attempt writes a fresh token carrying the announced value (see `Keys::Term`).
        let keys = Keys::Term {
            key: key.clone(),
            value: value.into(),
        };
        // One acquire for the whole campaign, so that the candidate keeps its place in line:
        // the one that waited longest leads next.
        let lock = self.acquire_keys_until_won(name, &keys, &lease).await?;
        tracing::info!(election = name, term = ?lock.fencing_token(), "elected");
        self.mark_elected(&key, &lock).await;
        Ok(lock)
    }

    /// Marks the key of a campaign that won (`lock`) as the elected leader's, on every master
    /// where it still holds the lock's token: only a marked key is reported by
    /// [`leader`](Redlock::leader).
    /// Returns once a quorum has marked it or every master has answered; the marks still in
    /// flight then go on in the background, and a master whose grant had not landed yet (or
    /// that did not answer) is marked again, less and less often, while the term lasts. A mark
    /// that reaches no quorum (masters unreachable at that moment) costs nothing but
    /// visibility: the leader leads, unseen by `leader()`, and the holder's scripts accept its
    /// token in either form.
    async fn mark_elected(&self, key: &str, lock: &Lock) {
        let (token, timeout) = (lock.token().clone(), lock.lease.node_timeout);
        let nodes = self.inner().nodes().clone();
        let count = nodes.len();
        let key = key.to_owned();
        let mark = move |i: usize, wait: Duration| {
            let (nodes, key, token) = (nodes.clone(), key.clone(), token.clone());
            async move {
                tokio::time::sleep(wait).await;
                let mut call = scripts::CONFIRM_LEADER.prepare_invoke();
                call.key(&key)
                    .arg(token.expose())
                    .arg(scripts::elected_channel(&key));
                (i, nodes[i].invoke::<i64>(call, timeout).await)
            }
        };
        let mut marks: FuturesUnordered<_> = (0..count).map(|i| mark(i, Duration::ZERO)).collect();
        let (mut marked, quorum) = (0, self.quorum());
        while let Some((_, reply)) = marks.next().await {
            marked += usize::from(matches!(reply, Ok(1)));
            if marked >= quorum {
                break;
            }
        }
        // The rest go on in the background. A master whose grant lands after its mark (the grant
        // sent again once the master had to load the script, or a straggler on a loaded
        // machine) answers 0 at first, and one that did not answer may have run neither: each
        // is marked again later, with the pause doubling up to a cap, while the term lasts.
        // Marking only ever marks this token, so a mark that comes late marks nothing else.
        let deadline = lock.deadline();
        crate::sync::spawn(async move {
            let mut pauses = vec![MARK_AGAIN_AFTER; count];
            while let Some((i, reply)) = marks.next().await {
                let Some(pause) = pauses.get_mut(i) else {
                    continue;
                };
                if !matches!(reply, Ok(1)) && seam::now() + *pause < deadline {
                    marks.push(mark(i, *pause));
                    *pause = (*pause * 2).min(MARK_AGAIN_AT_MOST);
                }
            }
        });
        if marked < quorum {
            tracing::debug!(marked, "elected, but the key is marked on no quorum yet");
        }
    }

    /// Who leads `name` now: the elected leader's value on a quorum of masters, or `None` when
    /// no elected leader's value is on a quorum (no leader, a campaign in progress that may
    /// still lose, or leadership being handed to the next candidate in line). One master alone
    /// can show a stale or minority holder; this never reports one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a bad name; [`Error::Unavailable`] when fewer than a
    /// quorum of masters answered, so that no answer can be trusted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        let key = self.inner().key(name)?;
        let timeout = self
            .inner()
            .settings()
            .node_timeout
            .unwrap_or(crate::DEFAULT_MAX_NODE_TIMEOUT);
        let replies = futures::future::join_all(self.inner().all_nodes().iter().map(|node| {
            let mut call = scripts::READ_LEADER.prepare_invoke();
            call.key(&*key).key(crate::keys::held_key(&key));
            node.invoke::<(Option<String>, i64)>(call, timeout)
        }))
        .await;
        let mut values: Vec<(String, i64)> = Vec::new();
        let mut unreachable: Vec<NodeError> = Vec::new();
        let mut answered = 0;
        for reply in replies {
            match reply {
                Ok((value, pttl)) => {
                    answered += 1;
                    // Only a key its leader marked elected: not a campaign's attempt that may
                    // still lose, nor a key the line reserved for the next candidate.
                    let elected =
                        value.and_then(|v| Some(v.strip_prefix(ELECTED_PREFIX)?.to_owned()));
                    if let Some(token) = elected {
                        values.push((token, pttl));
                    }
                }
                Err(e) => unreachable.push(e),
            }
        }
        let quorum = self.quorum();
        if answered < quorum {
            return Err(Error::Unavailable {
                reachable: answered,
                quorum,
                nodes: unreachable,
            });
        }
        let agreed = values
            .iter()
            .find(|(v, _)| values.iter().filter(|(w, _)| w == v).count() >= quorum);
        Ok(agreed.and_then(|(token, _)| {
            let (_, value) = token.split_once(':')?;
            let ttl = values
                .iter()
                .filter(|(v, _)| v == token)
                .filter_map(|(_, pttl)| u64::try_from(*pttl).ok())
                .min()
                .map(Duration::from_millis);
            Some(Leader {
                value: value.to_owned(),
                fingerprint: fingerprint(token),
                ttl,
            })
        }))
    }

    /// The leaders of `name` as they change: the current one first (`None` for no leader),
    /// then each change. The masters announce each leader marked elected and each one that
    /// steps down; an announcement, or `every` without one, starts a quorum read, and a read
    /// that names someone else than the last is reported. A leader that dies is seen by the
    /// periodic read once its lease has run out (no master announces an expiry), and a change
    /// that comes and goes between two reads can be missed. A read that fails (no quorum
    /// answering) is skipped, not reported. The stream keeps one subscriber connection per
    /// master, reconnected when it breaks.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use futures::StreamExt;
    ///
    /// # async fn run(rl: quorumlock::Redlock) {
    /// let mut leaders = std::pin::pin!(rl.observe("scheduler", Duration::from_secs(1)));
    /// while let Some(leader) = leaders.next().await {
    ///     println!("leader now: {:?}", leader.map(|l| l.value));
    /// }
    /// # }
    /// ```
    pub fn observe(
        &self,
        name: &str,
        every: Duration,
    ) -> impl Stream<Item = Option<Leader>> + Send + 'static {
        let rl = self.clone();
        let name = name.to_owned();
        let every = every.max(Duration::from_millis(1));
        let heard = match self.inner().key(&name) {
            Ok(key) => announcements(self.inner().nodes(), &scripts::elected_channel(&key)),
            // The read reports nothing for a bad name either: no stream to listen to.
            Err(_) => futures::stream::select_all(Vec::new()),
        };
        // `None` before the first reading; then the fingerprint last reported.
        futures::stream::unfold((None::<Option<String>>, heard), move |(last, mut heard)| {
            let (rl, name) = (rl.clone(), name.clone());
            async move {
                let mut heard_of_change = match last {
                    None => {
                        subscribed(&mut heard).await;
                        true
                    }
                    Some(_) => next_change(&mut heard, every).await,
                };
                let mut follow_ups = 0;
                loop {
                    let read = rl.leader(&name).await;
                    let failed = read.is_err();
                    if let Ok(leader) = read {
                        let now = leader.as_ref().map(|l| l.fingerprint.clone());
                        if last.as_ref() != Some(&now) {
                            return Some((leader, (Some(now), heard)));
                        }
                    }
                    // Each master announces its own part of a change, so the first
                    // announcement can come before a quorum has it; and a read can fail. Then
                    // read again shortly, a few times, rather than wait for the next period.
                    if (heard_of_change || failed) && follow_ups < SETTLE_READS {
                        follow_ups += 1;
                        tokio::time::sleep(SETTLE.min(every)).await;
                        continue;
                    }
                    follow_ups = 0;
                    heard_of_change = next_change(&mut heard, every).await;
                }
            }
        })
    }
}

/// After how long a mark that found the key not yet granted, or got no answer (see
/// `mark_elected`), is sent again at first: doubling each time, up to the second constant,
/// while the term lasts.
const MARK_AGAIN_AFTER: Duration = Duration::from_millis(50);
const MARK_AGAIN_AT_MOST: Duration = Duration::from_secs(1);

/// The longest an observer's first reading waits for its subscriptions, so that no change
/// after that reading goes unannounced.
const FIRST_SUBSCRIBE_WAIT: Duration = Duration::from_secs(1);
/// Bound on one `SUBSCRIBE` round trip of an observer.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The first pause before an observer's failed subscription is tried again; doubled on each
/// failure, up to the maximum. A subscription that breaks is made again at once.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);
/// After an announcement (or a failed read), how long an observer waits before reading again
/// when its read saw no change yet, and how many times.
const SETTLE: Duration = Duration::from_millis(50);
const SETTLE_READS: u32 = 3;

/// What an observer hears from one master.
enum Heard {
    /// Its subscription is (again) live: a change may have gone unheard before.
    Subscribed,
    /// It announced a change of leader.
    Announced,
}

type Announcements = futures::stream::SelectAll<futures::stream::BoxStream<'static, Heard>>;

/// The announcements on `channel` of every master, each subscription retried `retry` after
/// it fails or breaks. The streams never end.
fn announcements(nodes: &Arc<[Node]>, channel: &str) -> Announcements {
    futures::stream::select_all((0..nodes.len()).map(|i| {
        let (nodes, channel) = (Arc::clone(nodes), channel.to_owned());
        let start = (None::<Subscriber>, RESUBSCRIBE_MIN);
        futures::stream::unfold(start, move |(mut live, mut backoff)| {
            let (nodes, channel) = (Arc::clone(&nodes), channel.clone());
            async move {
                loop {
                    match live.as_mut() {
                        Some(subscriber) => match subscriber.next().await {
                            Some(_) => return Some((Heard::Announced, (live, backoff))),
                            // The connection broke: make it again at once, then back off.
                            None => live = None,
                        },
                        None => {
                            if let Some(subscription) = subscribe(&nodes[i], &channel).await {
                                let live = Some(subscription);
                                return Some((Heard::Subscribed, (live, RESUBSCRIBE_MIN)));
                            }
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(RESUBSCRIBE_MAX);
                        }
                    }
                }
            }
        })
        .boxed()
    }))
}

/// A subscriber connection to `node`, subscribed to `channel`; `None` when it cannot be had.
async fn subscribe(node: &Node, channel: &str) -> Option<Subscriber> {
    let mut subscriber = node.subscriber().await.ok()?;
    let channels = [channel.to_owned()];
    let subscribed = tokio::time::timeout(SUBSCRIBE_TIMEOUT, subscriber.subscribe(&channels));
    subscribed.await.ok()?.ok()?;
    Some(subscriber)
}

/// Waits until every master's subscription is live, or [`FIRST_SUBSCRIBE_WAIT`].
async fn subscribed(heard: &mut Announcements) {
    let every_master = heard.len();
    let _ = tokio::time::timeout(FIRST_SUBSCRIBE_WAIT, async {
        let mut live = 0;
        while live < every_master {
            match heard.next().await {
                Some(Heard::Subscribed) => live += 1,
                Some(Heard::Announced) => {}
                None => break,
            }
        }
    })
    .await;
}

/// Waits for the next announcement or resubscription, or `every`, whichever comes first;
/// `true` for the former.
async fn next_change(heard: &mut Announcements, every: Duration) -> bool {
    let heard = tokio::time::timeout(every, async {
        if heard.next().await.is_none() {
            std::future::pending::<()>().await;
        }
    });
    heard.await.is_ok()
}

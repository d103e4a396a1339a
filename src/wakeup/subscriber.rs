//! The subscriber connections: one per master for the whole client, subscribed to the release
//! channels the client's waiters wait on, forwarding each hand-off to the [`Hub`].

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use super::hub::{Hub, LINGER};
use crate::node::{Node, Subscriber};
use crate::seam;

/// Bound on one `SSUBSCRIBE` / `SUNSUBSCRIBE` round trip; past it the connection is replaced.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);
/// First pause before reconnecting a subscriber; doubled on each failure, up to the maximum.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// How a subscriber connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Served {
    /// The client is gone: stop.
    Closed,
    /// The connection broke or stopped answering: reconnect.
    Broken,
}

/// The subscriber task of one node: holds its connection while channels are wanted, and
/// reconnects after failures. Ends when the client is dropped.
pub(crate) async fn subscriber(
    nodes: Weak<[Node]>,
    hub: Weak<Hub>,
    index: usize,
    mut changes: watch::Receiver<()>,
) {
    let Some(node) = nodes
        .upgrade()
        .and_then(|all| all.get(index).map(|n| n.id().to_owned()))
    else {
        return;
    };
    let mut backoff = RECONNECT_MIN;
    loop {
        // Connect only while something is wanted.
        loop {
            match hub.upgrade() {
                None => return,
                Some(hub) if hub.is_watched() => break,
                Some(_) => {}
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
        // The client is kept alive only while connecting.
        let Some(all) = nodes.upgrade() else {
            return;
        };
        let connected = match all.get(index) {
            Some(n) => n.subscriber().await,
            None => return,
        };
        drop(all);
        match connected {
            Ok(pubsub) => {
                tracing::debug!(node, "subscriber connected");
                backoff = RECONNECT_MIN;
                if serve(&node, index, pubsub, &hub, &mut changes).await == Served::Closed {
                    return;
                }
                tracing::debug!(node, "subscriber connection lost; reconnecting");
            }
            Err(e) => tracing::debug!(node, error = %e.kind(), ?backoff, "cannot subscribe"),
        }
        if !pause(&mut changes, backoff).await {
            return;
        }
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// Sleeps for `pause`; `false` if the client went away meanwhile.
async fn pause(changes: &mut watch::Receiver<()>, pause: Duration) -> bool {
    let sleep = tokio::time::sleep(pause);
    tokio::pin!(sleep);
    loop {
        // Biased, like every `select!` of the library: a fixed order is one less thing a
        // simulation's run depends on besides its seed.
        tokio::select! {
            biased;
            () = &mut sleep => return true,
            changed = changes.changed() => if changed.is_err() { return false },
        }
    }
}

/// Keeps one connection's subscriptions equal to the wanted channels and forwards its messages
/// to the waiters. Channels that lingered past [`LINGER`] are unsubscribed at the next tick.
async fn serve(
    node: &str,
    index: usize,
    mut pubsub: Subscriber,
    hub: &Weak<Hub>,
    changes: &mut watch::Receiver<()>,
) -> Served {
    // Ordered sets: the channels are subscribed and unsubscribed in one order, run after run.
    let mut subscribed: BTreeSet<String> = BTreeSet::new();
    let mut tick = tokio::time::interval(LINGER);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(wanted) = hub.upgrade().map(|hub| hub.wanted(seam::now())) else {
            return Served::Closed;
        };
        let wanted: BTreeSet<String> = wanted.into_iter().collect();
        let add: Vec<String> = wanted.difference(&subscribed).cloned().collect();
        let remove: Vec<String> = subscribed.difference(&wanted).cloned().collect();
        if !add.is_empty() {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, pubsub.subscribe(&add)).await {
                Ok(Ok(())) => {
                    if let Some(hub) = hub.upgrade() {
                        for channel in &add {
                            hub.confirmed(channel);
                        }
                    }
                    subscribed.extend(add);
                }
                Ok(Err(e)) => {
                    // Most often an ACL without `+ssubscribe` or the channel pattern: waiting
                    // still works, by polling at the retry delay, but the operator should know.
                    tracing::warn!(node, error = %e, "SSUBSCRIBE refused; waiters fall back to the retry delay");
                    return Served::Broken;
                }
                Err(_timeout) => return Served::Broken,
            }
        }
        if !remove.is_empty() {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, pubsub.unsubscribe(&remove)).await {
                Ok(Ok(())) => {
                    for channel in &remove {
                        subscribed.remove(channel);
                    }
                }
                _ => return Served::Broken,
            }
        }
        // Biased (a fixed order, for a deterministic simulation): a change of the wanted
        // channels, which is rare, then a message; the tick last, which nothing starves of
        // anything, as every turn of the loop drops lingering channels as a tick would.
        tokio::select! {
            biased;
            changed = changes.changed() => if changed.is_err() {
                return Served::Closed;
            },
            message = pubsub.next() => match message {
                Some(message) => {
                    if let Some(hub) = hub.upgrade() {
                        hub.handed_over(index, &message.channel, &message.payload);
                    }
                }
                None => return Served::Broken,
            },
            _ = tick.tick() => {}
        }
    }
}

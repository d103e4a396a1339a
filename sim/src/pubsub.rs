//! Publish and subscribe: who listens on which channel (sharded channels apart from plain
//! ones), and each connection's outbox of messages not yet written.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tokio::sync::mpsc::UnboundedSender;

use crate::reply::Reply;

/// A connection to a master, as the master knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub(crate) u64);

/// Where a connection's messages go: a channel its server task reads, or a queue the caller
/// drains (see [`Master::take_messages`](crate::Master::take_messages)).
#[derive(Debug)]
pub(crate) enum Outbox {
    Channel(UnboundedSender<Reply>),
    Queue(VecDeque<Reply>),
}

impl Outbox {
    /// Hands `message` over; whether it was taken.
    fn deliver(&mut self, message: Reply) -> bool {
        match self {
            Outbox::Channel(sender) => sender.send(message).is_ok(),
            Outbox::Queue(queue) => {
                queue.push_back(message);
                true
            }
        }
    }
}

/// The subscriptions of one master.
#[derive(Debug, Default)]
pub(crate) struct PubSub {
    /// Sharded channels (`SSUBSCRIBE`) and their subscribers.
    sharded: BTreeMap<Vec<u8>, BTreeSet<ClientId>>,
    /// Plain channels (`SUBSCRIBE`) and their subscribers.
    plain: BTreeMap<Vec<u8>, BTreeSet<ClientId>>,
    outboxes: BTreeMap<ClientId, Outbox>,
}

impl PubSub {
    fn channels(&mut self, sharded: bool) -> &mut BTreeMap<Vec<u8>, BTreeSet<ClientId>> {
        if sharded {
            &mut self.sharded
        } else {
            &mut self.plain
        }
    }

    /// Registers a connection and where its messages go.
    pub(crate) fn connect(&mut self, client: ClientId, outbox: Outbox) {
        self.outboxes.insert(client, outbox);
    }

    /// Forgets a connection and its subscriptions.
    pub(crate) fn disconnect(&mut self, client: ClientId) {
        self.outboxes.remove(&client);
        for channels in [&mut self.sharded, &mut self.plain] {
            channels.retain(|_, subscribers| {
                subscribers.remove(&client);
                !subscribers.is_empty()
            });
        }
    }

    /// Forgets every connection (a restart).
    pub(crate) fn disconnect_all(&mut self) {
        *self = PubSub::default();
    }

    /// How many connections there are.
    pub(crate) fn connected(&self) -> usize {
        self.outboxes.len()
    }

    /// Subscribes `client` to `channel`; how many channels of that kind it has now.
    pub(crate) fn subscribe(&mut self, client: ClientId, sharded: bool, channel: &[u8]) -> i64 {
        self.channels(sharded)
            .entry(channel.to_vec())
            .or_default()
            .insert(client);
        self.count(client, sharded)
    }

    /// Unsubscribes `client` from `channel`; how many channels of that kind it has left.
    pub(crate) fn unsubscribe(&mut self, client: ClientId, sharded: bool, channel: &[u8]) -> i64 {
        let channels = self.channels(sharded);
        if let Some(subscribers) = channels.get_mut(channel) {
            subscribers.remove(&client);
            if subscribers.is_empty() {
                channels.remove(channel);
            }
        }
        self.count(client, sharded)
    }

    /// The channels of that kind `client` listens on, in byte order.
    pub(crate) fn subscriptions(&self, client: ClientId, sharded: bool) -> Vec<Vec<u8>> {
        let channels = if sharded { &self.sharded } else { &self.plain };
        channels
            .iter()
            .filter(|(_, s)| s.contains(&client))
            .map(|(c, _)| c.clone())
            .collect()
    }

    fn count(&self, client: ClientId, sharded: bool) -> i64 {
        self.subscriptions(client, sharded).len() as i64
    }

    /// Delivers `payload` to `channel`'s subscribers (`smessage` or `message`); how many took it.
    pub(crate) fn publish(&mut self, sharded: bool, channel: &[u8], payload: &[u8]) -> i64 {
        let kind = if sharded { "smessage" } else { "message" };
        let subscribers: Vec<ClientId> = if sharded { &self.sharded } else { &self.plain }
            .get(channel)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        let mut reached = 0;
        for client in subscribers {
            let message = Reply::Push(vec![
                Reply::bulk(kind),
                Reply::bulk(channel),
                Reply::bulk(payload),
            ]);
            if self
                .outboxes
                .get_mut(&client)
                .is_some_and(|outbox| outbox.deliver(message))
            {
                reached += 1;
            }
        }
        reached
    }

    /// The messages queued for `client` (a connection without a channel), oldest first.
    pub(crate) fn take_queued(&mut self, client: ClientId) -> Vec<Reply> {
        match self.outboxes.get_mut(&client) {
            Some(Outbox::Queue(queue)) => queue.drain(..).collect(),
            _ => Vec::new(),
        }
    }
}

//! A voter's connection for wake-ups: sharded pub/sub (`SSUBSCRIBE`, Redis 7.0 or later). The
//! scripts announce with `SPUBLISH` on channels named inside the resource's hash tag, so on a
//! cluster an announcement goes to the shard that owns the resource's slot, not to every node,
//! and the cluster connection subscribes to each channel on that shard (and again after a
//! failover or a slot's move).

use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use super::conn::Conn;

/// One announcement heard.
#[derive(Debug)]
pub(crate) struct Message {
    pub(crate) channel: String,
    pub(crate) payload: Vec<u8>,
}

/// A RESP3 connection subscribed to sharded channels, and the messages it hears.
pub(crate) struct Subscriber {
    conn: Conn,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

impl Subscriber {
    pub(super) fn new(conn: Conn, pushes: mpsc::UnboundedReceiver<PushInfo>) -> Self {
        Subscriber { conn, pushes }
    }

    /// Subscribes to `channels`; returns once the server confirmed each.
    ///
    /// # Errors
    ///
    /// The connection's, or the server's (an ACL without the channels).
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        self.each("SSUBSCRIBE", channels).await
    }

    /// Unsubscribes from `channels`.
    ///
    /// # Errors
    ///
    /// The connection's.
    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        self.each("SUNSUBSCRIBE", channels).await
    }

    async fn each(&mut self, command: &str, channels: &[String]) -> RedisResult<()> {
        match &mut self.conn {
            // One command per channel: each is answered by exactly one confirmation, which the
            // connection takes as its reply; all of them in one pipeline.
            Conn::Master(conn) => {
                let mut pipe = redis::pipe();
                for channel in channels {
                    pipe.cmd(command).arg(channel);
                }
                pipe.query_async::<Vec<Value>>(conn).await.map(|_| ())
            }
            // Each channel to the shard of its own slot.
            Conn::Cluster(conn) => {
                let sent = channels.iter().map(|channel| {
                    let mut conn = conn.clone();
                    let subscribe = command == "SSUBSCRIBE";
                    async move {
                        match subscribe {
                            true => conn.ssubscribe(channel).await,
                            false => conn.sunsubscribe(channel).await,
                        }
                    }
                });
                futures::future::try_join_all(sent).await.map(|_| ())
            }
        }
    }

    /// The next announcement; `None` once the connection is gone (a cluster connection
    /// reconnects and subscribes again by itself, and is gone only when the client drops it).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message not yet returned stays queued.
    pub(crate) async fn next(&mut self) -> Option<Message> {
        loop {
            let push = self.pushes.recv().await?;
            match push.kind {
                PushKind::SMessage | PushKind::Message => {
                    let mut data = push.data.into_iter();
                    let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                        continue;
                    };
                    let channel = redis::from_redis_value::<String>(channel);
                    let payload = redis::from_redis_value::<Vec<u8>>(payload);
                    if let (Ok(channel), Ok(payload)) = (channel, payload) {
                        return Some(Message { channel, payload });
                    }
                }
                PushKind::Disconnection if matches!(self.conn, Conn::Master(_)) => return None,
                // A shard of a cluster that moved a slot away unsubscribes its channels; the
                // cluster connection subscribes them again on the new owner.
                _ => {}
            }
        }
    }
}

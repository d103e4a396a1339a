//! One connection to a voter, whatever its kind: a master's own multiplexed connection (a
//! standalone master, or the master a Sentinel group names), or a Redis Cluster's connection,
//! which routes each request to the primary of its key's slot and follows `MOVED` and `ASK`.

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A connection to one voter. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One master's multiplexed connection: requests run in the order they were written.
    Master(MultiplexedConnection),
    /// A cluster's connection: one multiplexed connection per shard primary, each request
    /// routed by the slot of its first key (every key of one resource shares one slot).
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Master(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Master(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Master(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

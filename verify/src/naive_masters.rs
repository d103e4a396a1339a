//! What the naive negative controls (`naive_semaphore`, `naive_rwlock`, `naive_reentrant`,
//! `naive_election`) share: connections to the masters, and the validity a grant is given.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// The share of the TTL set aside for clock drift, as the library's default.
const DRIFT_FACTOR: f64 = 0.01;

/// One connection per master at `urls`, each opened within `node_timeout`; `None` where it
/// could not be. A master that cannot be reached still counts towards a quorum.
pub(crate) async fn connect(
    urls: &[String],
    node_timeout: Duration,
) -> Vec<Option<MultiplexedConnection>> {
    futures::future::join_all(urls.iter().map(|url| async move {
        let client = redis::Client::open(url.as_str()).ok()?;
        tokio::time::timeout(node_timeout, client.get_multiplexed_async_connection())
            .await
            .ok()?
            .ok()
    }))
    .await
}

/// The indexes of the masters that could be reached, for `Debug`.
pub(crate) fn reachable(masters: &[Option<MultiplexedConnection>]) -> Vec<usize> {
    (0..masters.len())
        .filter(|i| masters[*i].is_some())
        .collect()
}

/// The end of the validity of a grant for `ttl` whose attempt started at `start`: the TTL less
/// the drift allowance, as the library computes it.
pub(crate) fn deadline(start: Instant, ttl: Duration) -> Instant {
    let drift = ttl.mul_f64(DRIFT_FACTOR) + Duration::from_millis(2);
    start + ttl.saturating_sub(drift)
}

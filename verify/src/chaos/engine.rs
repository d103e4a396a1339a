//! The scenario engine: starts the masters (behind fault proxies when asked), runs a
//! [`Workload`]'s contending clients, which record every operation into a [`History`], runs a
//! scenario's fault driver beside them, and stops everything once enough locks were taken or the
//! time is up.
//!
//! It knows the clients only through the [`Workload`] trait: it imports no workload, fault
//! driver or scenario (see the layering in [`workload`](super::workload)).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::oneshot;

use super::ctl::Ctl;
use super::masters::{direct_query, Cluster};
use super::ran::{measure_stalls, Ran};
use super::setup::{keys_pattern, Setup};
use super::shared::Shared;
use super::workload::Workload;
use crate::mutex;
use quorumlock_testkit::History;

/// How often the key monitor looks at every master.
const MONITOR_EVERY: Duration = Duration::from_millis(100);

/// Runs `setup` with `workload`'s clients and `driver` injecting faults, until the target (and
/// the workload's own goal) or the time limit.
pub(super) async fn run<F, Fut>(
    setup: Setup,
    workload: Arc<dyn Workload>,
    seed: u64,
    driver: F,
) -> io::Result<Ran>
where
    F: FnOnce(Ctl) -> Fut,
    Fut: std::future::Future<Output = io::Result<()>> + Send + 'static,
{
    let began = Instant::now();
    let cluster = {
        let setup = setup.clone();
        Arc::new(
            tokio::task::spawn_blocking(move || Cluster::start(&setup))
                .await
                .map_err(io::Error::other)??,
        )
    };
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared::new(setup.clone(), &cluster, &history, |r| {
        workload.lock_name(r)
    }));
    workload.prepare(&shared);

    let stall_meter = tokio::spawn(measure_stalls(Arc::clone(&stop)));
    let monitor = {
        let cluster = Arc::clone(&cluster);
        let stop = Arc::clone(&stop);
        let ttl = setup.ttl;
        tokio::task::spawn_blocking(move || monitor_keys(&cluster, &stop, ttl))
    };

    let (go, ready) = oneshot::channel();
    let driver = tokio::spawn(driver(Ctl::new(
        setup.clone(),
        Arc::clone(&cluster),
        history.clone(),
        StdRng::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03),
        Arc::clone(&stop),
        go,
    )));
    // A driver that ends (or fails) without saying go lets the clients start all the same.
    let _ = ready.await;
    let started = Instant::now();

    let clients: Vec<_> = (0..setup.clients)
        .map(|client| {
            let task =
                Arc::clone(&workload).client(Arc::clone(&shared), client, client_rng(seed, client));
            tokio::spawn(task)
        })
        .collect();

    let deadline = started + setup.time_limit;
    let short =
        || shared.successes.load(Ordering::SeqCst) < setup.target || !workload.reached_goal();
    while short() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The clients stop first and finish what they are doing under the faults still active;
    // only then does the driver heal.
    let stopped_at = Instant::now();
    shared.stop();
    let mut client_error = None;
    for c in clients {
        if let Err(e) = c.await {
            client_error.get_or_insert(io::Error::other(format!("a client task failed: {e}")));
        }
    }
    let clients_ended = Instant::now();
    stop.store(true, Ordering::SeqCst);
    let driven = driver.await.map_err(io::Error::other)?;
    let immortal_keys = monitor.await.map_err(io::Error::other)?;
    let stalls = stall_meter.await.map_err(io::Error::other)?;
    let finished_at = Instant::now();
    driven?;
    if let Some(e) = client_error {
        return Err(e);
    }

    let latencies = std::mem::take(&mut *mutex::lock(&shared.latencies));
    workload.finish().await?;
    Ok(Ran {
        setup,
        history,
        cluster,
        latencies,
        immortal_keys,
        elapsed: began.elapsed(),
        stopped_at,
        clients_ended,
        finished_at,
        stalls,
    })
}

/// Client `client`'s own random source, derived from the run's seed.
fn client_rng(seed: u64, client: usize) -> StdRng {
    StdRng::seed_from_u64(
        seed.wrapping_add((client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    )
}

/// Every `MONITOR_EVERY`, reads every lock key's remaining TTL on every master that answers and
/// collects those that could outlive the lock TTL (no expiry at all, or a longer one), and the
/// wait lines, records and fencing counters with no expiry at all. A lock key stretched over its
/// line is judged by its holder's own lease, from its record (see `stretch` in the library's
/// `lua/line.lua`): that is what a lock holds, the stretch only keeps the key for the line.
fn monitor_keys(cluster: &Cluster, stop: &AtomicBool, ttl: Duration) -> Vec<String> {
    const SCRIPT: &str = r"
local bad = {}
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local t = redis.call('PTTL', k)
  local suffix = string.sub(k, -6)
  if suffix == ':queue' or suffix == ':fence' or string.sub(k, -7) == ':leases'
      or string.sub(k, -5) == ':held' then
    if t == -1 then table.insert(bad, k .. ' pttl ' .. t) end
  elseif string.sub(k, -17) ~= 'quorumlock:layout' then
    local record = redis.call('GET', '{' .. k .. '}:held')
    if record then
      local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
      local value = redis.call('GET', k)
      if token and (value == token or value == '~elected:' .. token)
          and redis.call('PEXPIRETIME', k) == tonumber(stretched) then
        t = math.max(0, tonumber(lease) - now)
      end
    end
    if t == -1 or t > tonumber(ARGV[2]) then table.insert(bad, k .. ' pttl ' .. t) end
  end
end
return bad";
    let mut found = Vec::new();
    let ttl_ms = ttl.as_millis() as u64;
    while !stop.load(Ordering::SeqCst) {
        for (i, addr) in cluster.addrs().iter().enumerate() {
            let bad: Option<Vec<String>> = direct_query(*addr, Duration::from_millis(50), |c| {
                redis::cmd("EVAL")
                    .arg(SCRIPT)
                    .arg(0)
                    .arg(keys_pattern())
                    .arg(ttl_ms)
                    .query(c)
            });
            for key in bad.unwrap_or_default() {
                found.push(format!("master {i}: {key}"));
            }
        }
        std::thread::sleep(MONITOR_EVERY);
    }
    found
}

//! Criterion benchmark of uncontended acquire + release cycles on five local masters:
//! quorumlock against the raw floor (and rslock), one cycle at a time and 32 at once.
//!
//! ```text
//! cargo bench --bench cycle
//! cargo bench --bench cycle -- --quick     # criterion's own quick mode
//! ```
//!
//! The side-by-side table of every case (faults, contention, scaling, CPU) is the `compare`
//! bench; this one tracks the basic cycle over time with criterion's statistics.

mod support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::future::join_all;
use quorumlock_testkit::RedisNodes;

use support::{Client, Kind};

/// Cycles in flight at once in the concurrent group, each on its own resource.
const CONCURRENT: usize = 32;

fn cycles(c: &mut Criterion) {
    let nodes = RedisNodes::spawn(5).unwrap();
    let urls = nodes.urls();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let clients: Vec<(Kind, Client)> = Kind::ALL
        .into_iter()
        .map(|kind| (kind, runtime.block_on(Client::connect(kind, &urls))))
        .collect();

    let mut group = c.benchmark_group("acquire_release_5_masters");
    group.throughput(Throughput::Elements(1));
    for (kind, client) in &clients {
        let resource = format!("criterion:{kind:?}");
        group.bench_function(id(*kind), |b| {
            b.to_async(&runtime).iter(|| async {
                let held = client.acquire(&resource).await.unwrap();
                client.release(held).await.unwrap();
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("acquire_release_5_masters_x32");
    group.throughput(Throughput::Elements(CONCURRENT as u64));
    for (kind, client) in &clients {
        let resources: Vec<String> = (0..CONCURRENT)
            .map(|i| format!("criterion:{kind:?}:{i}"))
            .collect();
        group.bench_function(id(*kind), |b| {
            b.to_async(&runtime).iter(|| {
                join_all(resources.iter().map(|resource| async move {
                    let held = client.acquire(resource).await.unwrap();
                    client.release(held).await.unwrap();
                }))
            })
        });
    }
    group.finish();
    drop(clients);
    runtime.shutdown_timeout(Duration::from_secs(1));
}

fn id(kind: Kind) -> &'static str {
    match kind {
        Kind::Quorumlock => "quorumlock",
        Kind::Rslock => "rslock",
        Kind::Raw => "raw_floor",
        Kind::Bare => "bare_early_quorum",
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = cycles
}
criterion_main!(benches);

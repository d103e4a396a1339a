//! The `simulation` feature's seam against real masters: a connector installed on the thread
//! carries every connection to a standalone master, for requests and wake-ups alike, with the
//! usual set-up on it; and a seeded run draws the same tokens as another run with the seed.

#![cfg(feature = "simulation")]

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use quorumlock::{simulation, Redlock};

const TTL: Duration = Duration::from_secs(10);

/// Installs a connector that opens a plain TCP stream to the master and notes its port.
fn connect_through_tcp() -> Rc<RefCell<Vec<u16>>> {
    let opened = Rc::new(RefCell::new(Vec::new()));
    let noted = opened.clone();
    simulation::set_connector(move |host, port| {
        noted.borrow_mut().push(port);
        let addr = format!("{host}:{port}");
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            Ok(Box::new(stream) as Box<dyn simulation::Stream>)
        })
    });
    opened
}

/// The tokens of three uncontended acquires by `rl`, after seeding with `seed`.
async fn tokens(rl: &Redlock, seed: u64) -> Vec<String> {
    simulation::seed_rng(seed);
    let mut tokens = Vec::new();
    for i in 0..3 {
        let lock = rl.acquire(&format!("seeded:{i}"), TTL).await.unwrap();
        tokens.push(lock.token().expose().to_owned());
        lock.release().await.unwrap();
    }
    tokens
}

// One thread: the connector, the generator and every task of the client share it, as in a
// simulation.
#[tokio::test(flavor = "current_thread")]
async fn a_connector_carries_requests_and_wake_ups_to_every_master() {
    let nodes = five();
    let opened = connect_through_tcp();
    let rl = connected(&nodes).await;
    let first = rl.acquire("sim:r", TTL).await.unwrap();
    // A second acquire waits in line, hearing the hand-off on wake-up connections.
    let waiting = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.acquire("sim:r", TTL).await })
    };
    waiters_in_line(&nodes, &lock_key("sim:r"), 1).await;
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    simulation::reset();

    let opened = opened.borrow().clone();
    let mut ports: Vec<u16> = nodes.urls().iter().map(|u| port_of(u)).collect();
    ports.sort_unstable();
    let mut reached = opened.clone();
    reached.sort_unstable();
    reached.dedup();
    assert_eq!(
        reached, ports,
        "every master through the connector: {opened:?}"
    );
    // A request connection to each master, and wake-up connections to at least a quorum.
    assert!(opened.len() >= 5 + 3, "{opened:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn two_seeded_runs_draw_the_same_tokens() {
    let nodes = five();
    let _opened = connect_through_tcp();
    // Real servers answer in real time: a node timeout far above any loopback round trip, and
    // connections opened beforehand, so that no attempt fails and draws a retry's jitter and a
    // new token (under a simulation's virtual time that is the seed's business too).
    let rl = builder(&nodes)
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    rl.acquire("warm", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let first = tokens(&rl, 42).await;
    let again = tokens(&rl, 42).await;
    let other = tokens(&rl, 43).await;
    simulation::reset();
    assert_eq!(first, again);
    assert_ne!(first, other);
    assert!(first.iter().all(|t| t.starts_with("ql-") && t.len() == 35));
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

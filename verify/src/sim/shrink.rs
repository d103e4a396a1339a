//! A failing plan made smaller while it still fails: each fault taken away in turn, then the
//! last clients, then half the time; every step a full deterministic run.

use std::time::Duration;

use super::plan::{Fault, Plan};
use super::run::run;

/// The smallest plan found that still fails, and how many runs the search took.
pub fn shrink(plan: &Plan, max_runs: usize) -> (Plan, usize) {
    let mut best = plan.clone();
    let mut runs = 0;
    let fails = |p: &Plan, runs: &mut usize| {
        *runs += 1;
        run(p).violated()
    };
    let mut i = 0;
    while i < best.faults.len() && runs < max_runs {
        let mut smaller = best.clone();
        smaller.faults.remove(i);
        if fails(&smaller, &mut runs) {
            best = smaller;
        } else {
            i += 1;
        }
    }
    while best.workers.len() > 2 && runs < max_runs {
        let mut smaller = best.clone();
        let gone = smaller.workers.len() - 1;
        smaller.workers.pop();
        smaller.faults.retain(|(_, f)| !names_worker(f, gone));
        if !fails(&smaller, &mut runs) {
            break;
        }
        best = smaller;
    }
    while best.duration > Duration::from_secs(1) && runs < max_runs {
        let mut smaller = best.clone();
        smaller.duration /= 2;
        let end = smaller.duration;
        smaller.faults.retain(|(at, _)| *at < end);
        if !fails(&smaller, &mut runs) {
            break;
        }
        best = smaller;
    }
    (best, runs)
}

fn names_worker(fault: &Fault, worker: usize) -> bool {
    match fault {
        Fault::HoldConnections { worker: w, .. }
        | Fault::HoldAfterTakeover { worker: w, .. }
        | Fault::Latency { worker: w, .. }
        | Fault::CrashWorker { worker: w, .. } => *w == worker,
        _ => false,
    }
}

//! The machine's share each test of this binary takes. A scenario with contending clients and
//! the explorer load both cores: two turns each, so that two of them never run at once (they
//! would measure the machine rather than the library). A scenario that mostly waits (the
//! election's terms come one at a time; the topology scenarios, 22–29, wait for failovers and
//! TTLs, about a quarter of two cores each) takes one: one of them runs beside a loaded
//! scenario, or three of them side by side. The negative controls are short, and take two: their
//! clients' first requests must not meet a loaded machine.

use tokio::sync::{Semaphore, SemaphorePermit};

static TURNS: Semaphore = Semaphore::const_new(3);

/// `n` of the three turns (1 or 2), held until the permit is dropped.
pub async fn take(n: u32) -> SemaphorePermit<'static> {
    TURNS
        .acquire_many(n)
        .await
        .expect("the turns are never closed")
}

/// The turns of a test that loads both cores.
pub async fn both_cores() -> SemaphorePermit<'static> {
    take(2).await
}

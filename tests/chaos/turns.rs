//! The machine's two cores, shared by this binary's tests. A chaos scenario with contending
//! clients, the explorer, chaos over TLS and the negative controls each load both cores, and two
//! at once would measure the machine rather than the library: each takes both turns. The
//! topology scenarios (22–29) spend most of their time waiting for failovers (about a quarter
//! of two cores each), so two of them may run side by side: each takes one.

use tokio::sync::{Semaphore, SemaphorePermit};

static TURNS: Semaphore = Semaphore::const_new(2);

/// `n` of the two turns (1 or 2), held until the permit is dropped.
pub async fn take(n: u32) -> SemaphorePermit<'static> {
    TURNS
        .acquire_many(n)
        .await
        .expect("the turns are never closed")
}

/// Both turns: the whole machine, until the permit is dropped.
pub async fn whole_machine() -> SemaphorePermit<'static> {
    take(2).await
}

//! Two helpers every module that works in the background shares: a poison-tolerant mutex
//! lock, and spawning on the caller's tokio runtime when there is one.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, carrying on past a poisoned lock: every user here keeps its data consistent
/// at each step, so a panic elsewhere while the lock was held leaves nothing half-done.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawns `task` on the current tokio runtime; `false`, and `task` dropped unrun, when this
/// thread has none (a lock dropped outside any runtime, say).
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(task);
            true
        }
        Err(_) => false,
    }
}

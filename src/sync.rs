//! The one poison-tolerant mutex lock of the crate: a panic while a lock was held leaves data
//! that every user here keeps consistent at each step, so the lock is taken anyway.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, carrying on past a poisoned lock.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

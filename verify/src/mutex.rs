//! Mutex access that survives a panic elsewhere.
//!
//! The chaos engine's recorders and fault drivers share state with client tasks. When one of
//! those tasks panics while holding a lock, the data is still what it was, and the evidence in
//! it is what the run needs to report; so this carries on with it instead of propagating the
//! poison.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, carrying on with its data if another thread panicked while holding it.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

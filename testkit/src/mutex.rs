//! Mutex access that survives a panic elsewhere.
//!
//! The testkit's recorders and fault drivers share state with client tasks. When one of those
//! tasks panics while holding a lock, the data is still what it was, and the evidence in it is
//! what the test needs to report; so these helpers carry on with it instead of propagating the
//! poison.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, carrying on with its data if another thread panicked while holding it.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The data of a mutex this code owns outright, even if a thread panicked while holding it.
pub fn get_mut<T: ?Sized>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_gives_its_data() {
        let mut shared = Mutex::new(vec![1]);
        let poisoned = std::thread::scope(|s| {
            s.spawn(|| {
                let mut data = shared.lock().unwrap();
                data.push(2);
                panic!("a client task fails while holding the lock");
            })
            .join()
            .is_err()
        });
        assert!(poisoned && shared.is_poisoned());
        assert_eq!(*lock(&shared), [1, 2]);
        get_mut(&mut shared).push(3);
        assert_eq!(*lock(&shared), [1, 2, 3]);
    }
}

//! Which of a client's locks each tokio task acquired, so that an acquire of a key the same
//! task already holds fails at once instead of waiting, in vain, for the task's own release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Instant;

use crate::seam;
use crate::sync;

/// The code that calls an acquire: a tokio task, or a future driven by `block_on` (a
/// `#[tokio::main]` body, say), which is no task and runs on one thread until it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TaskId {
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl TaskId {
    /// The caller of the code running now.
    pub(crate) fn current() -> TaskId {
        tokio::task::try_id()
            .map_or_else(|| TaskId::Thread(std::thread::current().id()), TaskId::Task)
    }
}

/// One lock's place in [`TaskHolds`]: which task took it, under which number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldMark {
    task: TaskId,
    id: u64,
}

/// One key of one lock a task holds, valid until `deadline`.
#[derive(Debug)]
struct Entry {
    id: u64,
    key: Arc<str>,
    deadline: Instant,
}

/// The keys each task holds through one client, with each lock's deadline: an expired lock is
/// no longer held (its keys are about to expire), so acquiring its key again can only wait a
/// little, not forever.
#[derive(Debug, Default)]
pub(crate) struct TaskHolds {
    /// Only ever looked up by task, never iterated: its order cannot matter.
    held: Mutex<HashMap<TaskId, Vec<Entry>>>,
    next: AtomicU64,
}

impl TaskHolds {
    /// `true` when `task` holds a lock on `key` that has not expired.
    pub(crate) fn holds(&self, key: &str, task: TaskId) -> bool {
        let now = seam::now();
        sync::lock(&self.held)
            .get(&task)
            .is_some_and(|held| held.iter().any(|e| &*e.key == key && e.deadline > now))
    }

    /// Notes that the current task took a lock on `keys`, valid until `deadline`.
    pub(crate) fn enter<'a>(
        &self,
        keys: impl Iterator<Item = &'a str>,
        deadline: Instant,
    ) -> HoldMark {
        let mark = HoldMark {
            task: TaskId::current(),
            id: self.next.fetch_add(1, Ordering::Relaxed),
        };
        let entries = keys.map(|key| Entry {
            id: mark.id,
            key: key.into(),
            deadline,
        });
        sync::lock(&self.held)
            .entry(mark.task)
            .or_default()
            .extend(entries);
        mark
    }

    /// The lock marked `mark` is now valid until `deadline` (it was extended, or an extend
    /// failed and moved its deadline earlier).
    pub(crate) fn renew(&self, mark: HoldMark, deadline: Instant) {
        if let Some(held) = sync::lock(&self.held).get_mut(&mark.task) {
            for entry in held.iter_mut().filter(|e| e.id == mark.id) {
                entry.deadline = deadline;
            }
        }
    }

    /// The lock marked `mark` is gone.
    pub(crate) fn leave(&self, mark: HoldMark) {
        let mut held = sync::lock(&self.held);
        if let Some(mine) = held.get_mut(&mark.task) {
            mine.retain(|e| e.id != mark.id);
            if mine.is_empty() {
                held.remove(&mark.task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_task_holds_a_key_until_the_lock_expires_or_leaves() {
        let holds = TaskHolds::default();
        let me = TaskId::current();
        let later = Instant::now() + Duration::from_secs(60);
        let a = holds.enter(["a", "b"].into_iter(), later);
        assert!(holds.holds("a", me) && holds.holds("b", me));
        assert!(!holds.holds("c", me));
        let other = std::thread::spawn(TaskId::current).join().unwrap_or(me);
        assert_ne!(other, me);
        assert!(!holds.holds("a", other), "another caller holds nothing");

        // Expired: its keys are no longer held; extended again: held.
        holds.renew(a, Instant::now() - Duration::from_millis(1));
        assert!(!holds.holds("a", me));
        holds.renew(a, later);
        assert!(holds.holds("a", me));

        // A second lock on the same key keeps it held when the first leaves.
        let b = holds.enter(["a"].into_iter(), later);
        holds.leave(a);
        assert!(holds.holds("a", me) && !holds.holds("b", me));
        holds.leave(b);
        assert!(!holds.holds("a", me));
        assert!(sync::lock(&holds.held).is_empty(), "nothing left behind");
    }
}

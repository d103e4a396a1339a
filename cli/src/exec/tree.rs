//! The processes descended from a process, read from `/proc`.
//!
//! A process group is not enough to find everything a command started: `setsid`, a shell with
//! job control (`set -m`) or a daemon puts processes in groups of their own. Their parent links
//! still lead back to `exec`, which is the subreaper of all of them (an orphan is reparented to
//! it, not to init), so walking the parent links from `exec` finds every one.
//!
//! Outside Linux there is no `/proc` to read: the walk finds nothing, and the process group is
//! all that `exec` can reach.

use std::collections::{HashMap, HashSet};

use nix::unistd::Pid;

/// One process, as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Process {
    pub(crate) pid: Pid,
    pub(crate) ppid: Pid,
    pub(crate) pgid: Pid,
    /// When it started, in clock ticks since boot: with the pid, names the process even after
    /// the pid is reused.
    pub(crate) start: u64,
    /// It has exited and waits to be reaped: nothing can be done to it any more.
    pub(crate) zombie: bool,
}

/// Every process of the system that can be read now.
pub(crate) fn processes() -> Vec<Process> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let name = entry.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        // A process that exits while we read is simply not there.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&stat)
    })
    .collect()
}

/// One process, if it still exists.
pub(crate) fn process(pid: Pid) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
/// majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime ...`.
/// The command name may contain spaces and parentheses, so the fields are counted from the last
/// `)`.
fn parse_stat(stat: &str) -> Option<Process> {
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_whitespace().next()?.parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Process {
        pid: Pid::from_raw(pid),
        zombie: *fields.first()? == "Z",
        ppid: Pid::from_raw(fields.get(1)?.parse().ok()?),
        pgid: Pid::from_raw(fields.get(2)?.parse().ok()?),
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The descendants of `roots` in `table` (children, their children, and so on), roots excluded.
pub(crate) fn descendants(table: &[Process], roots: &[Pid]) -> Vec<Process> {
    let mut children: HashMap<Pid, Vec<&Process>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut seen: HashSet<Pid> = roots.iter().copied().collect();
    let mut queue: Vec<Pid> = roots.to_vec();
    let mut found = Vec::new();
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if seen.insert(child.pid) {
                found.push(**child);
                queue.push(child.pid);
            }
        }
    }
    found
}

/// The descendants of `root` that are alive now, found by following the kernel's lists of
/// each thread's children (`/proc/<pid>/task/<tid>/children`): reads only the tree itself, not
/// every process of the system. `None` when the kernel keeps no such lists
/// (`CONFIG_PROC_CHILDREN`); then use [`processes`] and [`descendants`].
pub(crate) fn descendants_of(root: Pid) -> Option<Vec<Process>> {
    let mut found = Vec::new();
    let mut queue = vec![children(root)?];
    while let Some(pids) = queue.pop() {
        for pid in pids {
            // One that exits meanwhile is no longer there to find.
            let Some(p) = process(pid) else { continue };
            if !p.zombie {
                found.push(p);
            }
            queue.push(children(pid).unwrap_or_default());
        }
    }
    Some(found)
}

/// The children of every thread of `pid`: an orphan is reparented to one thread of its
/// subreaper, not necessarily the main one.
fn children(pid: Pid) -> Option<Vec<Pid>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut found = Vec::new();
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        any = true;
        found.extend(
            list.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .map(Pid::from_raw),
        );
    }
    any.then_some(found)
}

/// The live descendants of this process, leaving out `except` (the watchdog, say).
pub(crate) fn my_descendants(except: Option<Pid>) -> Vec<Process> {
    let me = nix::unistd::getpid();
    descendants(&processes(), &[me])
        .into_iter()
        .filter(|p| !p.zombie && Some(p.pid) != except)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32) -> Process {
        Process {
            pid: Pid::from_raw(pid),
            ppid: Pid::from_raw(ppid),
            pgid: Pid::from_raw(pid),
            start: 0,
            zombie: false,
        }
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let stat = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 1 2 3";
        let parsed = parse_stat(stat).unwrap();
        assert_eq!(parsed.pid, Pid::from_raw(4242));
        assert_eq!(parsed.ppid, Pid::from_raw(17));
        assert_eq!(parsed.pgid, Pid::from_raw(4242));
        assert_eq!(parsed.start, 987_654);
        assert!(!parsed.zombie);
        assert!(
            parse_stat("4242 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5")
                .is_some_and(|p| p.zombie)
        );
    }

    #[test]
    fn descendants_follow_parent_links_to_any_depth_and_leave_others_out() {
        let table = [
            p(1, 0),
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(13, 12),
            p(20, 1),
            p(21, 20),
        ];
        let mut found: Vec<i32> = descendants(&table, &[Pid::from_raw(10)])
            .iter()
            .map(|p| p.pid.as_raw())
            .collect();
        found.sort_unstable();
        assert_eq!(found, [11, 12, 13]);
    }

    #[test]
    fn this_process_finds_a_child_that_left_its_group_both_ways() {
        let mut child = std::process::Command::new("setsid")
            .args(["sleep", "5"])
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let in_table = my_descendants(None).iter().any(|p| p.pid == pid);
        let in_lists =
            descendants_of(nix::unistd::getpid()).map(|found| found.iter().any(|p| p.pid == pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(in_table);
        // Where the kernel keeps the lists, they find it too.
        assert_ne!(in_lists, Some(false));
    }
}

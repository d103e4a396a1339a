//! Who holds a lock: a description `exec` writes beside the lock key, its companion `:holder`
//! (for the key `<prefix><resource>`, `{<prefix><resource>}:holder`: in the lock's slot, see
//! `quorumlock::companion_key`), on every
//! master — host, pid, command, start time and the token's fingerprint, **never the token** — so
//! that `status` can say who to ask before a stuck lock is broken.
//!
//! It is informational and best effort: written after the lock is acquired, with the lock's TTL,
//! refreshed with each renewal, deleted before the release. A master that misses a write simply
//! has no description; nothing about the lock depends on it.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use serde::{Deserialize, Serialize};

use crate::masters::{self, Conn, Master};

/// What a holder says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    /// The machine `exec` runs on.
    pub(crate) host: String,
    /// The `quorumlock exec` process.
    pub(crate) pid: u32,
    /// The command it runs, or `None` when it holds the lock without one.
    pub(crate) command: Option<String>,
    /// When it acquired the lock, RFC 3339 in UTC.
    pub(crate) since: String,
    /// The fingerprint of its token (as `status` shows it), to match the description to a lock.
    pub(crate) lock: String,
    /// For a semaphore's permit (`exec --permits K`): K, so that a process passing another K
    /// can be refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
}

/// Longest command text kept in a description.
const MAX_COMMAND: usize = 200;

impl Holder {
    /// This process, running `command`, holding the lock whose token has `fingerprint` (a
    /// permit of a semaphore of `permits`, if given).
    pub(crate) fn me(
        command: Option<&[String]>,
        fingerprint: String,
        permits: Option<u32>,
    ) -> Self {
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".to_owned());
        Holder {
            host,
            pid: std::process::id(),
            command: command.map(describe_command),
            since: rfc3339(SystemTime::now()),
            lock: fingerprint,
            permits,
        }
    }
}

/// Whether a holder's process still runs, as far as this machine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Process {
    /// On this host, a `quorumlock` process with its pid runs.
    Running,
    /// On this host, no `quorumlock` process has its pid: the holder died without releasing
    /// (SIGKILL, a crash, a reboot), and the lock lapses only with its TTL.
    Gone,
    /// It ran on another host: nothing here can tell.
    Elsewhere,
}

impl Holder {
    /// Whether this holder's process still runs, looked up when it ran on this host. A pid
    /// taken over by another program counts as gone: the process's name must still be
    /// `quorumlock`.
    pub(crate) fn process(&self) -> Process {
        let here = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned());
        if here.ok().as_deref() != Some(self.host.as_str()) {
            return Process::Elsewhere;
        }
        let name = std::fs::read_to_string(format!("/proc/{}/comm", self.pid));
        match name {
            Ok(name) if name.trim_end() == "quorumlock" => Process::Running,
            _ => Process::Gone,
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on {} since {}", self.pid, self.host, self.since)?;
        match &self.command {
            Some(command) => write!(f, ", running {command}"),
            None => f.write_str(", holding it without a command"),
        }
    }
}

/// The key of a lock key's holder description.
pub(crate) fn key(lock_key: &str) -> String {
    quorumlock::companion_key(lock_key, ":holder")
}

/// A published description: where it was written, so it can be refreshed and removed.
struct Published {
    key: String,
    value: String,
    ttl: Duration,
    conns: Vec<Conn>,
}

impl Published {
    /// Writes `holder` beside `lock_key` on every master that answers, expiring after `ttl`.
    async fn write(
        masters: &[Master],
        lock_key: &str,
        holder: &Holder,
        ttl: Duration,
    ) -> Published {
        let conns: Vec<_> = join_all(masters.iter().map(Master::connect))
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        let published = Published {
            key: key(lock_key),
            // Serialising plain strings and numbers cannot fail.
            value: serde_json::to_string(holder).unwrap_or_default(),
            ttl,
            conns,
        };
        published.set(None).await;
        published
    }

    /// Writes the description again with a fresh TTL (after a renewal of the lock) where it
    /// still exists: one deleted by `quorumlock unlock` stays deleted.
    async fn refresh(&self) {
        self.set(Some("XX")).await;
    }

    async fn set(&self, condition: Option<&str>) {
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut set = redis::cmd("SET");
        set.arg(&self.key).arg(&self.value).arg("PX").arg(ttl_ms);
        if let Some(condition) = condition {
            set.arg(condition);
        }
        let writes = self.conns.iter().map(|conn| {
            let (mut conn, set) = (conn.clone(), &set);
            async move {
                if let Err(e) = masters::request::<()>(&mut conn, set).await {
                    tracing::debug!(error = %e, "holder description not written");
                }
            }
        });
        join_all(writes).await;
    }

    /// Deletes the description where it is still ours (the lock is about to be released).
    async fn remove(self) {
        let script = redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
        );
        let deletes = self.conns.into_iter().map(|mut conn| {
            let (script, key, value) = (&script, &self.key, &self.value);
            async move {
                let mut call = script.key(key);
                call.arg(value);
                if let Err(e) = masters::invoke::<i64>(&mut conn, &call).await {
                    tracing::debug!(error = %e, "holder description not deleted");
                }
            }
        });
        join_all(deletes).await;
    }
}

/// A holder description kept up to date in the background while the lock is held.
#[derive(Debug)]
pub(crate) struct Announcement {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Announcement {
    /// Writes `holder` beside `lock_key` on `masters` and refreshes it every third of `ttl`,
    /// on a task of its own: a slow master never delays the command.
    pub(crate) fn start(
        masters: Vec<Master>,
        lock_key: String,
        holder: Holder,
        ttl: Duration,
    ) -> Announcement {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let published = Published::write(&masters, &lock_key, &holder, ttl).await;
            let every = (ttl / 3).max(Duration::from_millis(1));
            let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = refresh.tick() => published.refresh().await,
                }
            }
            published.remove().await;
        });
        Announcement { stop, task }
    }

    /// Deletes the description (before the lock is released), waiting at most one request
    /// timeout for it: a slow master must not hold up the release for long. Where the deletion does not land, the
    /// description expires with the lock's TTL (and `status` shows a description only beside
    /// a lock).
    pub(crate) async fn withdraw(self) {
        let _ = self.stop.send(());
        // The deletion is compare-and-delete: it may finish in the background, or not at all.
        let _ = tokio::time::timeout(masters::REQUEST_TIMEOUT, self.task).await;
    }
}

/// The description most masters hold for `lock_key`, if any. Unreadable or malformed ones are
/// ignored: the description is informational.
pub(crate) async fn read(masters: &[Master], lock_key: &str) -> Option<Holder> {
    let key = key(lock_key);
    let reads = masters.iter().map(|master| {
        let key = &key;
        async move {
            let mut conn = master.connect().await.ok()?;
            let value: Option<String> = masters::request(&mut conn, redis::cmd("GET").arg(key))
                .await
                .ok()?;
            serde_json::from_str::<Holder>(&value?).ok()
        }
    });
    let mut found: Vec<(Holder, usize)> = Vec::new();
    for holder in join_all(reads).await.into_iter().flatten() {
        match found.iter_mut().find(|(h, _)| *h == holder) {
            Some((_, count)) => *count += 1,
            None => found.push((holder, 1)),
        }
    }
    found
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(h, _)| h)
}

/// What one master holds at a lock key: the key's value, and the live readers' holds of the
/// read-write lock, by the master's own clock.
const LOOK: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('GET', KEYS[1]), redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}";

/// Who holds the lock at `lock_key`, in words, for a busy message: `held by pid 7 on host-a
/// since ..., running ./report.sh` (the holder's description), `read by 2 reader(s)`, `handed
/// over to the first waiter in line`, or a holder that wrote no description (not `exec`). Best
/// effort, from the masters given (those that answered the check).
pub(crate) async fn who_holds(masters: &[Master], lock_key: &str) -> String {
    let readers_key = quorumlock::companion_key(lock_key, ":readers");
    let looks = masters.iter().map(|master| {
        let readers_key = &readers_key;
        async move {
            let mut conn = master.connect().await.ok()?;
            let script = redis::Script::new(LOOK);
            let mut call = script.key(lock_key);
            call.key(readers_key);
            masters::invoke::<(Option<String>, u64)>(&mut conn, &call)
                .await
                .ok()
        }
    });
    let (described, looks) = futures::join!(read(masters, lock_key), join_all(looks));
    let looks: Vec<(Option<String>, u64)> = looks.into_iter().flatten().collect();
    let fingerprints: Vec<String> = looks
        .iter()
        .filter_map(|(value, _)| value.as_deref())
        .filter(|value| !value.starts_with("~queued:"))
        .map(|value| {
            quorumlock::LockToken::fingerprint_of(value.strip_prefix("~elected:").unwrap_or(value))
        })
        .collect();
    if let Some(holder) = described {
        if fingerprints.is_empty() || fingerprints.contains(&holder.lock) {
            return format!("held by {holder}");
        }
    }
    if let Some(readers) = looks
        .iter()
        .map(|(_, readers)| *readers)
        .max()
        .filter(|r| *r > 0)
    {
        return format!("read by {readers} reader(s)");
    }
    if looks
        .iter()
        .any(|(value, _)| value.as_deref().is_some_and(|v| v.starts_with("~queued:")))
    {
        return "handed over to the first waiter in line".to_owned();
    }
    match fingerprints.first() {
        Some(print) => {
            format!("held by token {print} (no holder description: not taken by quorumlock exec)")
        }
        None => "held by another token (released since)".to_owned(),
    }
}

/// `arg` as a shell would read it back: as it is when plain, single-quoted otherwise.
pub(crate) fn shell_word(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The command as a shell would show it, cut to [`MAX_COMMAND`] characters.
fn describe_command(argv: &[String]) -> String {
    let quoted: Vec<String> = argv.iter().map(|arg| shell_word(arg)).collect();
    let text = quoted.join(" ");
    match text.char_indices().nth(MAX_COMMAND) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// `time` as `2024-05-01T12:34:56Z`.
fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap_day = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723);
        assert_eq!(rfc3339(leap_day), "2000-02-29T01:02:03Z");
        let later = UNIX_EPOCH + Duration::from_secs(1_767_225_599);
        assert_eq!(rfc3339(later), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn commands_are_quoted_as_a_shell_would_read_them() {
        let argv = ["sh", "-c", "echo 'hi' $X"].map(String::from);
        assert_eq!(describe_command(&argv), r"sh -c 'echo '\''hi'\'' $X'");
        let long = vec!["x".repeat(500)];
        assert!(describe_command(&long).ends_with("..."));
    }
}

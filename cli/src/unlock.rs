//! `quorumlock unlock RESOURCE --force`: deletes a lock whoever holds it, for an operator
//! clearing a lock left by a holder that is gone.
//!
//! Unsafe while the holder runs: the next acquirer and the old holder then both believe they
//! hold the resource (a holder under `exec` notices at its next renewal and stops its command,
//! but not before). Without `--force` it only shows what it would delete, and exits 0.
//!
//! A read-write lock held by readers has no key of its own: its readers' holds
//! (`<key>:readers`) and waiting writers' notes (`<key>:writers`) are what `--force` deletes. A
//! semaphore's permits are locks of their own, `<resource>:permit:<i>`: each is unlocked by that
//! name.

use std::process::ExitCode;

use futures::future::join_all;
use quorumlock::{LockToken, NodeState, Verdict};

use crate::exit;
use crate::holder;
use crate::masters::{self, Master};
use crate::nodes::NodesArg;
use crate::output::out;
use crate::setup;

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock unlock nightly-report           # shows what would be deleted, deletes nothing
  quorumlock unlock nightly-report --force   # deletes it on every master
  quorumlock unlock exports:permit:1 --force # a semaphore's permit 1 (exec --permits K)

Only for a lock whose holder is gone (check `quorumlock status` first: it names the host and pid).
Deleting the lock of a live holder lets a second holder in while the first still runs.
A read-write lock's readers are deleted with it. The fencing counter is kept, so fencing tokens
keep increasing.

Exit codes: 0 shown (without --force), deleted, or nothing to delete; 1 not deleted everywhere;
2 the name of a semaphore (unlock its permits by their names); 69 fewer than a quorum of
masters answered.";

/// Options of `quorumlock unlock`.
#[derive(Debug, clap::Args)]
pub(crate) struct UnlockArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// Delete it. Without this, only show what would be deleted.
    #[arg(long)]
    force: bool,
    /// The resource whose lock to delete.
    resource: String,
}

/// Deletes the key only if it still holds the token seen a moment ago (a new holder that came in
/// since keeps its lock), with its holder description. Waiters in line find the key free at
/// their next attempt (within a third of their entry lease).
const DELETE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1";

/// Deletes a read-write lock's readers' holds and waiting writers' notes; returns how many
/// entries there were.
const DELETE_READERS: &str = r"
local n = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[2])
return n";

/// Shows, then (with `--force`) deletes, the lock on every master.
///
/// # Errors
///
/// A configuration error, or fewer than a quorum of masters answering (exit 69).
pub(crate) async fn run(args: UnlockArgs) -> anyhow::Result<ExitCode> {
    let rl = args
        .nodes
        .builder()
        .node_timeout(setup::LOOK_NODE_TIMEOUT)
        .build()?;
    let voters = args.nodes.check(&rl, None).await?;
    let status = rl.inspect(&args.resource).await?;
    let key = args.nodes.key(&args.resource);
    let masters = voters.all();
    let holding: Vec<(&Master, String)> = masters
        .iter()
        .zip(&status.nodes)
        .filter_map(|(master, node)| match &node.state {
            NodeState::Held { fingerprint, .. } => Some((master, fingerprint.clone())),
            _ => None,
        })
        .collect();
    let reading: Vec<(&Master, usize)> = masters
        .iter()
        .zip(&status.nodes)
        .filter(|(_, node)| node.readers + node.writers_waiting > 0)
        .map(|(master, node)| (master, node.readers + node.writers_waiting))
        .collect();
    if holding.is_empty() && !reading.is_empty() {
        return unlock_readers(&args, &key, &reading).await;
    }
    if holding.is_empty() {
        let answering = voters.answering();
        let slots =
            masters::permit_slots(&answering, args.nodes.key_prefix(), &args.resource).await;
        if !slots.is_empty() {
            let names: Vec<String> = slots
                .iter()
                .map(|i| format!("{:?}", format!("{}:permit:{i}", args.resource)))
                .collect();
            out!(
                "{:?} is a semaphore: its permits are locks of their own; unlock one by its \
                 name: {}",
                args.resource,
                names.join(", ")
            )?;
            return Ok(ExitCode::from(exit::USAGE));
        }
        out!("{:?} is not locked on any master", args.resource)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(holder) = holder::read(&voters.answering(), &key).await {
        out!("holder {}: {holder}", holder.lock)?;
    }
    if matches!(status.verdict, Verdict::Held { .. }) {
        out!("the lock is valid on a quorum: its holder may still be running")?;
    }
    if !args.force {
        for (master, token) in &holding {
            out!("would delete {key} (token {token}) on {}", master.node())?;
        }
        eprintln!(
            "quorumlock: nothing deleted; run again with --force to delete it \
             (unsafe if the holder is still running)"
        );
        return Ok(ExitCode::SUCCESS);
    }

    let deletes = holding.iter().map(|(master, token)| {
        let (key, token) = (&key, token.as_str());
        async move { (master.node(), token, delete(master, key, token).await) }
    });
    let mut deleted = 0;
    for (node, token, result) in join_all(deletes).await {
        match result {
            Ok(true) => {
                deleted += 1;
                out!("deleted {key} (token {token}) on {node}")?;
            }
            Ok(false) => out!("kept {key} on {node}: it changed hands meanwhile")?,
            Err(e) => out!("not deleted on {node}: {e}")?,
        }
    }
    out!(
        "{:?}: deleted on {deleted}/{} masters",
        args.resource,
        holding.len()
    )?;
    Ok(ExitCode::from(if deleted == holding.len() {
        0
    } else {
        exit::FAILURE
    }))
}

/// `unlock` of a read-write lock that readers hold (or writers wait for): shows, then with
/// `--force` deletes, the readers' holds and writers' notes on every master that has some.
async fn unlock_readers(
    args: &UnlockArgs,
    key: &str,
    reading: &[(&Master, usize)],
) -> anyhow::Result<ExitCode> {
    let (readers, writers) = (
        quorumlock::companion_key(key, ":readers"),
        quorumlock::companion_key(key, ":writers"),
    );
    out!(
        "{:?} is a read-write lock held by readers: they may still be running",
        args.resource
    )?;
    if !args.force {
        for (master, entries) in reading {
            out!(
                "would delete {readers} and {writers} ({entries} entr{}) on {}",
                if *entries == 1 { "y" } else { "ies" },
                master.node()
            )?;
        }
        eprintln!(
            "quorumlock: nothing deleted; run again with --force to delete them \
             (unsafe if the readers are still running)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let deletes = reading.iter().map(|(master, _)| {
        let (readers, writers) = (&readers, &writers);
        async move {
            let mut conn = master.connect().await?;
            let script = redis::Script::new(DELETE_READERS);
            let mut call = script.key(readers);
            call.key(writers);
            masters::invoke::<i64>(&mut conn, &call).await
        }
    });
    let mut deleted = 0;
    for ((master, _), result) in reading.iter().zip(join_all(deletes).await) {
        match result {
            Ok(n) => {
                deleted += 1;
                out!(
                    "deleted {readers} and {writers} ({n} entries) on {}",
                    master.node()
                )?;
            }
            Err(e) => out!("not deleted on {}: {e}", master.node())?,
        }
    }
    out!(
        "{:?}: readers deleted on {deleted}/{} masters",
        args.resource,
        reading.len()
    )?;
    Ok(ExitCode::from(if deleted == reading.len() {
        0
    } else {
        exit::FAILURE
    }))
}

/// Deletes `key` on `master` if it still holds the token whose fingerprint is `token`.
async fn delete(master: &Master, key: &str, token: &str) -> Result<bool, String> {
    let mut conn = master.connect().await?;
    // The token itself is read here and compared on the server; it is never shown.
    let value: Option<String> = masters::request(&mut conn, redis::cmd("GET").arg(key)).await?;
    // The token seen by `inspect` may have been replaced since: keep the new holder's lock.
    let Some(value) = value.filter(|v| LockToken::fingerprint_of(v) == token) else {
        return Ok(false);
    };
    let script = redis::Script::new(DELETE);
    let mut call = script.key(key);
    call.key(holder::key(key)).arg(value);
    let deleted: i64 = masters::invoke(&mut conn, &call).await?;
    Ok(deleted == 1)
}

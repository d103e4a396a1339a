//! `quorumlock list [--prefix P]`: the locks present on the masters, found with SCAN, each with
//! the quorum's verdict and its holder. A read-write lock held by readers has no key of its own:
//! it is found by its readers' sorted set.
//!
//! Key layout 4: a resource's lock key is `<key prefix><resource>`, and its other keys are its
//! companions (`{<key prefix><resource>}:readers`, `:fence`, ..., see
//! `quorumlock::companion_key`), which no lock key can be. On a Redis Cluster voter, every
//! primary is scanned.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use futures::future::join_all;
use futures::StreamExt;
use quorumlock::{Inspection, Redlock, Verdict};
use serde_json::json;

use crate::holder::{self, Holder};
use crate::masters::{self, glob_escape, Master};
use crate::nodes::NodesArg;
use crate::output::out;
use crate::setup;

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock list
  quorumlock list --prefix reports:
  QUORUMLOCK_KEY_PREFIX=locks: quorumlock list --json

A lock shows up when at least one master has its key or a live reader: `held` on a quorum;
`reading` when readers hold a read-write lock on a quorum; `handed-over` when a release reserved
it on a quorum for the first waiter in line, which is about to take it; `split` when no token is
on a quorum and fewer than a quorum are free; `leftover` when a minority still has a key (of a
failed attempt or an expiring lease), which expires at its TTL. A semaphore's permits are the
locks <resource>:permit:<i>. Resource names are quoted, as `status` shows them. A key that looks
like a lock's but is no lock of this key layout (a leftover of an older one, such as `{orders:42}`)
is skipped with a warning naming it.

Listing needs SCAN on the masters (`+scan` in a least-privilege ACL); on a Redis Cluster voter
(redis+cluster://) every primary is scanned. It fails, rather than show too little, unless
enough masters answered it to see every lock held on a quorum.";

/// How many locks are looked at at once.
const LOOKS_AT_ONCE: usize = 16;

/// The longest resource name the table shows whole (quoted); longer ones are cut, marked with
/// `...` and their length. `--json` shows every name whole.
const MAX_NAME: usize = 200;

/// Options of `quorumlock list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// Only resources whose name starts with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Lists the locks.
///
/// # Errors
///
/// A configuration error, or fewer than a quorum of masters answering (exit 69).
pub(crate) async fn run(args: ListArgs) -> anyhow::Result<ExitCode> {
    let rl = args
        .nodes
        .builder()
        .node_timeout(setup::LOOK_NODE_TIMEOUT)
        .build()?;
    let voters = args.nodes.check(&rl, None).await?;
    let masters = voters.answering();
    // Every lock key of a resource whose name starts with `--prefix`: `<key prefix><prefix>*`.
    let start = format!("{}{}", args.nodes.key_prefix(), args.prefix);
    let mut resources = BTreeSet::new();
    let mut failed = Vec::new();
    for (master, found) in masters
        .iter()
        .zip(join_all(masters.iter().map(|m| lock_keys(m, &start))).await)
    {
        match found {
            Ok(keys) => resources.extend(
                keys.iter()
                    .filter_map(|key| key.strip_prefix(args.nodes.key_prefix()))
                    .map(str::to_owned),
            ),
            Err(e) => failed.push(format!("{}: {e}", master.node())),
        }
    }
    // A lock held on a quorum has its key on at least one of any N - quorum + 1 masters: fewer
    // listed could miss it, and "no locks" would be a lie.
    let needed = rl.node_count() - rl.quorum() + 1;
    let listed = masters.len() - failed.len();
    if listed < needed {
        let answering: Vec<&str> = masters.iter().map(Master::node).collect();
        for skipped in voters.all() {
            if !answering.contains(&skipped.node()) {
                failed.push(format!("{}: did not answer in time", skipped.node()));
            }
        }
        let hint = match failed.iter().any(|e| e.to_lowercase().contains("noperm")) {
            true => "; listing needs SCAN: grant it with +scan (see the README's ACL)",
            false => "",
        };
        anyhow::bail!(
            "listed on {listed} of {} masters, and at least {needed} must answer to show every \
             lock held on a quorum ({}){hint}",
            rl.node_count(),
            failed.join("; ")
        );
    }
    for e in &failed {
        tracing::warn!("not listed on {e}");
    }

    // A few resources at a time: a master that does not answer costs its timeout once per
    // batch, not once per lock.
    let looks = futures::stream::iter(resources)
        .map(|resource| {
            let (rl, masters, nodes) = (&rl, &masters, &args.nodes);
            async move {
                let status = match rl.inspect(&resource).await {
                    Ok(status) => status,
                    // A key this layout refuses as a lock's (a leftover of an older layout,
                    // another client's): skipped, not a reason to show nothing.
                    Err(e @ quorumlock::Error::InvalidResource { .. }) => {
                        return Ok(Look::Refused(nodes.key(&resource), e));
                    }
                    Err(e) => return Err(e),
                };
                let holder = if matches!(status.verdict, Verdict::Held { .. } | Verdict::Split) {
                    holder::read(masters, &nodes.key(&resource)).await
                } else {
                    None
                };
                Ok::<_, quorumlock::Error>(Look::Lock(status, holder))
            }
        })
        .buffered(LOOKS_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let mut rows = Vec::new();
    let mut refused = Vec::new();
    for look in looks {
        match look? {
            // Readers' sets whose holds all ended, kept until their key expires.
            Look::Lock(status, holder)
                if status.nodes.iter().any(|n| n.exists() || n.readers > 0) =>
            {
                rows.push((status, holder));
            }
            Look::Lock(..) => {}
            Look::Refused(key, why) => {
                tracing::warn!(
                    "skipped the key {key:?}: it looks like a lock's, but is no lock of this \
                     key layout ({why}); a leftover of an older layout or another client's key"
                );
                refused.push(key);
            }
        }
    }
    if args.json {
        print_json(&rl, &rows)?;
    } else {
        print_table(&rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What a look at one resource found.
enum Look {
    /// Its lock, and its holder's description if it is held.
    Lock(Inspection, Option<Holder>),
    /// Its key, which the library refuses as a lock's key, and why.
    Refused(String, quorumlock::Error),
}

/// The lock keys on `master` that start with `start`: keys that are no lock's companion (see
/// `quorumlock::companion_key`) holding a token (`ql-` and 32 hex digits) or reserved for a waiter; and the
/// lock keys of read-write locks that readers hold (their readers' sets, `{<key>}:readers`, or
/// `<key>:readers` for a key with a hash tag of its own). Only SCAN and GET: what the
/// least-privilege ACL grants, plus `+scan`.
async fn lock_keys(master: &Master, start: &str) -> Result<Vec<String>, String> {
    let mut conn = master.connect().await?;
    let escaped = glob_escape(start);
    let mut locks = Vec::new();
    for pattern in [
        format!("{{{escaped}*:readers"),
        format!("{escaped}*:readers"),
    ] {
        let sets = masters::scan(&mut conn, &pattern, "zset").await?;
        locks.extend(
            sets.iter()
                .filter_map(|key| quorumlock::lock_key_of_companion(key, ":readers"))
                .filter(|key| key.starts_with(start))
                .map(str::to_owned),
        );
    }
    let keys: Vec<String> = masters::scan(&mut conn, &format!("{escaped}*"), "string")
        .await?
        .into_iter()
        .filter(|k| !quorumlock::is_companion_key(k))
        .collect();
    for chunk in keys.chunks(500) {
        let values = masters::get_all(&mut conn, chunk).await?;
        locks.extend(
            chunk
                .iter()
                .zip(values)
                .filter(|(_, v)| {
                    v.as_deref()
                        .is_some_and(|v| looks_like_token(v) || looks_like_reservation(v))
                })
                .map(|(k, _)| k.clone()),
        );
    }
    Ok(locks)
}

/// A token (`ql-` and 32 hex digits), an owner's (a token, `@` and the owner id), or a leader's:
/// a token, `:` and the value it announced, marked `~elected:` once the leader knew it had won.
/// (The shapes `ours` in the library's `lua/line.lua` recognises.)
fn looks_like_token(value: &str) -> bool {
    let value = value.strip_prefix("~elected:").unwrap_or(value);
    let Some(value) = value.strip_prefix("ql-") else {
        return false;
    };
    let (token, rest) = value.split_at_checked(32).unwrap_or((value, ""));
    token.len() == 32
        && token.bytes().all(|b| b.is_ascii_hexdigit())
        && (rest.is_empty() || rest.starts_with(':') || rest.starts_with('@'))
}

/// A key a release handed over to the first waiter in line: `~queued:` and the waiter's id
/// (32 hex digits: its client's id, then its own), as `status` shows it.
fn looks_like_reservation(value: &str) -> bool {
    value
        .strip_prefix("~queued:")
        .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The verdict as one word, how many masters have a key, and the shortest TTL among them.
fn summary(status: &Inspection) -> (&'static str, usize, Option<Duration>) {
    let present = status
        .nodes
        .iter()
        .filter(|n| n.exists() || n.readers > 0)
        .count();
    let ttl = status.nodes.iter().filter_map(|n| n.ttl()).min();
    let state = match status.verdict {
        Verdict::Held { .. } => "held",
        Verdict::HandedOver { .. } => "handed-over",
        Verdict::Split => "split",
        Verdict::Free => "leftover",
        Verdict::Reading { .. } => "reading",
        _ => "unknown",
    };
    (state, present, ttl)
}

fn print_table(rows: &[(Inspection, Option<Holder>)]) -> std::io::Result<()> {
    if rows.is_empty() {
        return out!("no locks");
    }
    // Quoted as `status` quotes them: a name with a newline or a tab stays on its row.
    let names: Vec<String> = rows.iter().map(|(s, _)| shown_name(&s.resource)).collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    out!(
        "{:<width$}  {:<11}  {:<7}  {:<10}  holder",
        "resource",
        "state",
        "masters",
        "ttl"
    )?;
    for ((status, holder), name) in rows.iter().zip(&names) {
        let (state, present, ttl) = summary(status);
        let masters = format!("{present}/{}", status.nodes.len());
        let ttl = ttl.map_or("-".to_owned(), |t| format!("{:.1}s", t.as_secs_f64()));
        let holder = holder.as_ref().map_or("-".to_owned(), Holder::to_string);
        out!("{name:<width$}  {state:<11}  {masters:<7}  {ttl:<10}  {holder}")?;
    }
    Ok(())
}

/// A resource's name as the table shows it: quoted as `status` quotes it, and cut after
/// [`MAX_NAME`] characters, with its full length.
fn shown_name(resource: &str) -> String {
    let quoted = format!("{resource:?}");
    match quoted.char_indices().nth(MAX_NAME) {
        Some((cut, _)) => format!(
            "{}... ({} characters)",
            &quoted[..cut],
            resource.chars().count()
        ),
        None => quoted,
    }
}

fn print_json(rl: &Redlock, rows: &[(Inspection, Option<Holder>)]) -> std::io::Result<()> {
    let locks: Vec<_> = rows
        .iter()
        .map(|(status, holder)| {
            let (state, present, ttl) = summary(status);
            let token = match &status.verdict {
                Verdict::Held { fingerprint, .. } => Some(fingerprint.as_str()),
                _ => None,
            };
            let waiter = match &status.verdict {
                Verdict::HandedOver { waiter, .. } => Some(waiter.as_str()),
                _ => None,
            };
            json!({
                "resource": status.resource,
                "state": state,
                "token": token,
                "waiter": waiter,
                "masters": present,
                "of": rl.node_count(),
                "ttl_ms": ttl.map(|t| t.as_millis()),
                "holder": holder,
            })
        })
        .collect();
    out!("{}", serde_json::Value::Array(locks))
}

#[cfg(test)]
mod tests {
    use super::{looks_like_reservation, looks_like_token, shown_name, MAX_NAME};

    #[test]
    fn a_long_name_is_cut_for_the_table() {
        assert_eq!(shown_name("job"), "\"job\"");
        let long = "x".repeat(70_000);
        let shown = shown_name(&long);
        assert!(shown.ends_with("... (70000 characters)"), "{shown}");
        assert!(shown.chars().count() < MAX_NAME + 30, "{shown}");
    }

    #[test]
    fn only_token_shaped_values_count_as_locks() {
        assert!(looks_like_token("ql-0123456789abcdef0123456789abcdef"));
        assert!(!looks_like_token("hello"));
        // Another client's token of the same 128 bits in hex (node-redlock's shape) is not ours.
        assert!(!looks_like_token("0123456789abcdef0123456789abcdef"));
        assert!(looks_like_token(
            "ql-0123456789abcdef0123456789abcdef:host-a:80"
        ));
        assert!(looks_like_token("ql-0123456789abcdef0123456789abcdef@w-7"));
        assert!(looks_like_token(
            "~elected:ql-0123456789abcdef0123456789abcdef:host-a:80"
        ));
        assert!(!looks_like_token("~elected:hello"));
        assert!(!looks_like_token("ql-0123456789abcdef0123456789abcdefx"));
        assert!(!looks_like_token("ql-0123456789abcdef0123456789abcdeg"));
        assert!(looks_like_reservation(
            "~queued:0123456789abcdef0123456789abcdef"
        ));
        assert!(!looks_like_reservation("~queued:0123456789abcdef"));
        assert!(!looks_like_reservation(
            "~queued:0123456789abcdef0123456789abcdeg"
        ));
        assert!(!looks_like_reservation("0123456789abcdef"));
    }
}

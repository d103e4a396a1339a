//! `quorumlock status`: what every master holds for a resource, who holds it, who waits for it
//! in line, and the quorum's verdict — as a table or as JSON, with an exit code scripts can
//! branch on.

use std::process::ExitCode;
use std::time::Duration;

use quorumlock::{Inspection, Leader, NodeState, NodeStatus, QueuedWaiter, Redlock, Verdict};
use serde_json::{json, Value};

use crate::exit;
use crate::holder::{self, Holder};
use crate::masters::Master;
use crate::masters::{self, one_line};
use crate::nodes::NodesArg;
use crate::output::{self, out};
use crate::setup::{self, Voters};

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 nightly-report
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock status nightly-report
  quorumlock status --json nightly-report | jq .holder
  quorumlock status --json nightly-report | jq '.nodes[0].queue'
  quorumlock status --permits 4 exports
  quorumlock status scheduler          # an election: shows the leader

Each master's line lists the waiters (`exec --wait`, `acquire`) first to last: how long each has
waited and when its entry lapses unless renewed. A release hands the lock to the first of them:
until that waiter takes it, the masters show the key reserved for it (`handed over`).

When every master has the same waiters in the same order, the line is shown once.

A read-write lock's readers and waiting writers are listed per master, and an election's key
shows its leader. `--permits K` shows each slot of a semaphore (`exec --permits K`); without
it, the permits held on a free resource's name are found (`<resource>:permit:<i>`, which needs
SCAN on the masters) and shown with a reminder to give K.

Exit codes: 0 free (with --permits: a permit is free), 75 held, read, handed over to a waiter,
or split between holders (not acquirable now), or a semaphore with permits held (without
--permits), 69 fewer than a quorum of masters answered. The code is the verdict's even when
the report cannot be written (a reader that closed early).";

/// Options of `quorumlock status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The resource is a semaphore with K permits (`exec --permits K`): show each slot.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    permits: Option<u32>,
    /// The resource to inspect.
    resource: String,
}

/// Prints the resource's state.
///
/// # Errors
///
/// A configuration error, a master listed twice, or an invalid resource name.
pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let rl = args
        .nodes
        .builder()
        .node_timeout(setup::LOOK_NODE_TIMEOUT)
        .build()?;
    let voters = match args.nodes.check(&rl, None).await {
        Ok(voters) => voters,
        // Too few masters answer: the table shows which, and the exit code says so.
        Err(e) if setup::is_unavailable(&e) => Voters::unchecked(args.nodes.masters(&rl)),
        Err(e) => return Err(e),
    };
    let masters = voters.answering();
    if let Some(permits) = args.permits {
        return slots(&rl, &args, &masters, permits).await;
    }
    let (status, holder, leader) = look(&rl, &args.nodes, &masters, &args.resource).await?;
    let free = status.verdict == Verdict::Free && status.nodes.iter().all(|n| n.readers == 0);
    if free {
        if let Some(code) = permits_held(&rl, &args, &masters).await? {
            return Ok(code);
        }
    }
    let printed = if args.json {
        out!("{}", report(&status, holder.as_ref(), leader.as_ref()))
    } else {
        table(&status, holder.as_ref(), leader.as_ref())
            .iter()
            .try_for_each(|line| out!("{line}"))
    };
    Ok(output::verdict(printed, code(&status.verdict))?)
}

/// A free resource that names a semaphore (`exec --permits K`): its permits are the locks
/// `<resource>:permit:<i>`, and its own key is never taken. Shows the permits held and exits
/// 75; `None` when no permit is held (or the masters do not let us look).
async fn permits_held(
    rl: &Redlock,
    args: &StatusArgs,
    masters: &[Master],
) -> anyhow::Result<Option<ExitCode>> {
    let slots = masters::permit_slots(masters, args.nodes.key_prefix(), &args.resource).await;
    let mut held = Vec::new();
    for slot in slots {
        let name = format!("{}:permit:{slot}", args.resource);
        let found = look(rl, &args.nodes, masters, &name).await?;
        if found.0.verdict != Verdict::Free {
            held.push((slot, found));
        }
    }
    if held.is_empty() {
        return Ok(None);
    }
    let hint = "a semaphore: give --permits K to see whether a permit is free";
    let printed = if args.json {
        let slots: Vec<Value> = held
            .iter()
            .map(|(_, (s, h, l))| report(s, h.as_ref(), l.as_ref()))
            .collect();
        out!(
            "{}",
            json!({
                "resource": args.resource,
                "verdict": "semaphore",
                "held": held.len(),
                "slots": slots,
                "hint": hint,
            })
        )
    } else {
        let mut lines: Vec<String> = held
            .iter()
            .map(|(_, (status, holder, _))| {
                let holder = holder.as_ref().map_or(String::new(), |h| format!("  {h}"));
                format!("{:?}: {}{holder}", status.resource, verdict_text(status))
            })
            .collect();
        lines.push(format!(
            "{:?}: {} permit(s) held ({hint})",
            args.resource,
            held.len()
        ));
        lines.iter().try_for_each(|line| out!("{line}"))
    };
    Ok(Some(output::verdict(printed, exit::BUSY)?))
}

/// The exit code of a verdict: 0 free, 69 unknown, 75 anything that keeps an acquire out.
fn code(verdict: &Verdict) -> u8 {
    match verdict {
        Verdict::Free => 0,
        Verdict::Unknown => exit::NO_QUORUM,
        _ => exit::BUSY,
    }
}

/// What the masters hold for `resource`, its holder's description, and the election's leader
/// when the key is a leader's.
async fn look(
    rl: &Redlock,
    nodes: &NodesArg,
    masters: &[Master],
    resource: &str,
) -> anyhow::Result<(Inspection, Option<Holder>, Option<Leader>)> {
    // The leader is read beside the look, not after it: each waits for the slowest master
    // (up to the node timeout), once.
    let (status, leader) = futures::join!(rl.inspect(resource), rl.leader(resource));
    let status = status?;
    // A key handed over to a waiter has no holder yet: the last one deleted its description
    // before its release.
    let holder = match matches!(status.verdict, Verdict::Held { .. } | Verdict::Split) {
        true => holder::read(masters, &nodes.key(resource)).await,
        false => None,
    };
    let leader = match &status.verdict {
        Verdict::Held { fingerprint, .. } => leader
            .ok()
            .flatten()
            .filter(|l| l.fingerprint == *fingerprint),
        _ => None,
    };
    Ok((status, holder, leader))
}

/// `status --permits K`: each slot's verdict and holder; exit 0 while a permit is free.
async fn slots(
    rl: &Redlock,
    args: &StatusArgs,
    masters: &[Master],
    permits: u32,
) -> anyhow::Result<ExitCode> {
    let semaphore = rl.semaphore(&args.resource, permits)?;
    let mut looks = Vec::new();
    for slot in 0..semaphore.permits() {
        let name = format!("{}:permit:{slot}", args.resource);
        looks.push(look(rl, &args.nodes, masters, &name).await?);
    }
    let free = looks
        .iter()
        .filter(|(s, _, _)| s.verdict == Verdict::Free)
        .count();
    let unknown = looks.iter().any(|(s, _, _)| s.verdict == Verdict::Unknown);
    let printed = if args.json {
        let slots: Vec<Value> = looks
            .iter()
            .map(|(s, h, l)| report(s, h.as_ref(), l.as_ref()))
            .collect();
        out!(
            "{}",
            json!({
                "resource": args.resource,
                "permits": permits,
                "free": free,
                "slots": slots,
            })
        )
    } else {
        let mut lines: Vec<String> = looks
            .iter()
            .map(|(status, holder, _)| {
                let holder = holder.as_ref().map_or(String::new(), |h| format!("  {h}"));
                format!("{:?}: {}{holder}", status.resource, verdict_text(status))
            })
            .collect();
        lines.push(format!(
            "{:?}: {free}/{permits} permits free",
            args.resource
        ));
        lines.iter().try_for_each(|line| out!("{line}"))
    };
    let code = match (free, unknown) {
        (_, true) => exit::NO_QUORUM,
        (0, false) => exit::BUSY,
        _ => 0,
    };
    Ok(output::verdict(printed, code)?)
}

/// One node's row: its state, the token (or the waiter the key is reserved for), and the TTL
/// (or why it did not answer).
fn row(node: &NodeStatus) -> (&'static str, String, String) {
    let ttl = |ttl: &Option<Duration>| ttl.map_or("none".to_owned(), |t| format!("{t:?}"));
    match &node.state {
        NodeState::Held {
            fingerprint,
            ttl: t,
        } => ("held", fingerprint.clone(), ttl(t)),
        NodeState::Reserved { waiter, ttl: t } => ("reserved", format!("for {waiter}"), ttl(t)),
        NodeState::Free => ("free", "-".to_owned(), "-".to_owned()),
        NodeState::Unreachable(e) => ("down", "-".to_owned(), one_line(e.kind())),
        _ => ("?", "-".to_owned(), "-".to_owned()),
    }
}

/// How many wait on a node, as the table shows it: `-` when the node did not answer.
fn waiting(node: &NodeStatus) -> String {
    match node.state {
        NodeState::Unreachable(_) => "-".to_owned(),
        _ => node.queue.len().to_string(),
    }
}

/// The verdict in words.
fn verdict_text(status: &Inspection) -> String {
    let of = status.nodes.len();
    match &status.verdict {
        Verdict::Held { fingerprint, nodes } => {
            format!("held by {fingerprint} on {nodes}/{of} nodes")
        }
        Verdict::HandedOver { waiter, nodes } => {
            format!("handed over to waiter {waiter} on {nodes}/{of} nodes")
        }
        Verdict::Free => "free".to_owned(),
        Verdict::Reading { readers, nodes } => {
            format!("read by {readers}+ reader(s), on {nodes}/{of} nodes")
        }
        Verdict::Split => "split: no token on a quorum, fewer than a quorum free".to_owned(),
        Verdict::Unknown => format!("unknown: fewer than {} nodes answered", status.quorum),
        other => format!("{other:?}"),
    }
}

/// The table: a row per node, the verdict, the holder, then each node's line, first to last.
fn table(status: &Inspection, holder: Option<&Holder>, leader: Option<&Leader>) -> Vec<String> {
    let rows: Vec<_> = status.nodes.iter().map(|n| (n, row(n))).collect();
    let width = rows
        .iter()
        .map(|(n, _)| n.node.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let token_width = rows
        .iter()
        .map(|(_, r)| r.1.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut lines = vec![format!(
        "{:<width$}  {:<8}  {:<7}  {:<token_width$}  ttl",
        "node", "state", "waiting", "token"
    )];
    for (node, (state, token, ttl)) in &rows {
        lines.push(format!(
            "{:<width$}  {state:<8}  {:<7}  {token:<token_width$}  {ttl}",
            node.node,
            waiting(node)
        ));
    }
    lines.push(format!(
        "{:?}: {} (quorum {})",
        status.resource,
        verdict_text(status),
        status.quorum
    ));
    if let Some(holder) = holder {
        lines.push(format!("holder {}: {holder}", holder.lock));
        if holder.process() == holder::Process::Gone {
            lines.push(format!(
                "its process is gone: no quorumlock process {} on this host; the lock lapses with its TTL, or `quorumlock unlock {} --force` frees it now",
                holder.pid,
                holder::shell_word(&status.resource)
            ));
        }
    }
    if let Some(leader) = leader {
        lines.push(format!("leader: {}", leader.value));
    }
    let readers: Vec<String> = status
        .nodes
        .iter()
        .filter(|n| n.readers + n.writers_waiting > 0)
        .map(|n| {
            format!(
                "{}: {} reader(s), {} writer(s) waiting",
                n.node, n.readers, n.writers_waiting
            )
        })
        .collect();
    if !readers.is_empty() {
        lines.push("read-write lock:".to_owned());
        lines.extend(readers.into_iter().map(|r| format!("  {r}")));
    }
    // Every master that answered shows the same waiters in the same order: one line for all.
    let answered: Vec<&NodeStatus> = status
        .nodes
        .iter()
        .filter(|n| !matches!(n.state, NodeState::Unreachable(_)))
        .collect();
    let same = |a: &NodeStatus, b: &NodeStatus| {
        a.queue.len() == b.queue.len() && a.queue.iter().zip(&b.queue).all(|(x, y)| x.id == y.id)
    };
    match answered.split_first() {
        Some((first, rest)) if answered.len() > 1 && rest.iter().all(|n| same(first, n)) => {
            if !first.queue.is_empty() {
                lines.push(format!(
                    "line on every master that answered ({}), first to last:",
                    answered.len()
                ));
                push_line(&mut lines, first);
            }
        }
        _ => {
            for node in status.nodes.iter().filter(|n| !n.queue.is_empty()) {
                lines.push(format!("line on {}, first to last:", node.node));
                push_line(&mut lines, node);
            }
        }
    }
    lines
}

/// The waiters of one master's line, first to last.
fn push_line(lines: &mut Vec<String>, node: &NodeStatus) {
    let place_width = node.queue.len().to_string().len();
    for (place, waiter) in node.queue.iter().enumerate() {
        lines.push(format!(
            "  {:>place_width$}. waiter {}  waited {:<10}  lapses in {:?}",
            place + 1,
            waiter.id,
            format!("{:?}", waiter.waited),
            waiter.lapses_in
        ));
    }
}

/// One waiter in a node's line, as JSON.
fn waiter_json(waiter: &QueuedWaiter) -> Value {
    json!({
        "id": waiter.id,
        "waited_ms": waiter.waited.as_millis(),
        "lapses_in_ms": waiter.lapses_in.as_millis(),
    })
}

/// One node, as JSON: `queue` is its line first to last, `null` when it did not answer.
fn node_json(node: &NodeStatus) -> Value {
    let mut json = node_state_json(node);
    if let Some(fields) = json.as_object_mut() {
        fields.insert("readers".into(), node.readers.into());
        fields.insert("writers_waiting".into(), node.writers_waiting.into());
    }
    json
}

fn node_state_json(node: &NodeStatus) -> Value {
    let queue: Vec<Value> = node.queue.iter().map(waiter_json).collect();
    match &node.state {
        NodeState::Held { fingerprint, ttl } => json!({
            "node": node.node,
            "state": "held",
            "token": fingerprint,
            "ttl_ms": ttl.map(|t| t.as_millis()),
            "queue": queue,
        }),
        NodeState::Reserved { waiter, ttl } => json!({
            "node": node.node,
            "state": "reserved",
            "waiter": waiter,
            "ttl_ms": ttl.map(|t| t.as_millis()),
            "queue": queue,
        }),
        NodeState::Free => json!({ "node": node.node, "state": "free", "queue": queue }),
        NodeState::Unreachable(e) => json!({
            "node": node.node,
            "state": "down",
            "error": one_line(e.kind()),
            "queue": null,
        }),
        _ => json!({ "node": node.node, "state": "unknown", "queue": null }),
    }
}

/// The JSON report: the verdict (`held`, `handed_over`, `free`, `split`, `unknown`), the
/// holder's token or the waiter the key was handed to, and how many nodes agree on it.
fn report(status: &Inspection, holder: Option<&Holder>, leader: Option<&Leader>) -> Value {
    let (verdict, token, waiter, holding) = match &status.verdict {
        Verdict::Held { fingerprint, nodes } => ("held", Some(fingerprint.as_str()), None, *nodes),
        Verdict::HandedOver { waiter, nodes } => {
            ("handed_over", None, Some(waiter.as_str()), *nodes)
        }
        Verdict::Free => ("free", None, None, 0),
        Verdict::Reading { nodes, .. } => ("reading", None, None, *nodes),
        Verdict::Split => ("split", None, None, 0),
        _ => ("unknown", None, None, 0),
    };
    json!({
        "resource": status.resource,
        "verdict": verdict,
        "token": token,
        "waiter": waiter,
        "holding": holding,
        "quorum": status.quorum,
        "holder": holder,
        "holder_process": holder.map(|h| match h.process() {
            holder::Process::Running => "running",
            holder::Process::Gone => "gone",
            holder::Process::Elsewhere => "elsewhere",
        }),
        "leader": leader.map(|l| l.value.as_str()),
        "nodes": status.nodes.iter().map(node_json).collect::<Vec<_>>(),
    })
}

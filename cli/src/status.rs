//! `quorumlock status`: what every master holds for a resource, who holds it, and the quorum's
//! verdict — as a table or as JSON, with an exit code scripts can branch on.

use std::process::ExitCode;

use quorumlock::{Inspection, NodeState, Verdict};
use serde_json::json;

use crate::exit;
use crate::holder::{self, Holder};
use crate::masters::one_line;
use crate::nodes::{self, NodesArg};
use crate::output::out;

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 nightly-report
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock status nightly-report
  quorumlock status --json nightly-report | jq .holder

Exit codes: 0 free, 75 held (or split between holders: not acquirable now), 69 fewer than a
quorum of masters answered.";

/// Options of `quorumlock status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The resource to inspect.
    resource: String,
}

/// Prints the resource's state.
///
/// # Errors
///
/// A configuration error, a master listed twice, or an invalid resource name.
pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let rl = args.nodes.builder().build()?;
    match nodes::check(&rl).await {
        // Too few masters answer: the table shows which, and the exit code says so.
        Ok(()) | Err(quorumlock::Error::Unavailable { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let status = rl.inspect(&args.resource).await?;
    let holder = if matches!(status.verdict, Verdict::Free | Verdict::Unknown) {
        None
    } else {
        holder::read(&args.nodes.masters(&rl), &args.nodes.key(&args.resource)).await
    };
    if args.json {
        print_json(&status, holder.as_ref())?;
    } else {
        print_table(&status, holder.as_ref())?;
    }
    Ok(ExitCode::from(match status.verdict {
        Verdict::Free => 0,
        Verdict::Unknown => exit::NO_QUORUM,
        _ => exit::BUSY,
    }))
}

fn print_table(status: &Inspection, holder: Option<&Holder>) -> std::io::Result<()> {
    let width = status
        .nodes
        .iter()
        .map(|n| n.node.len())
        .max()
        .unwrap_or(0)
        .max(4);
    out!("{:<width$}  {:<5}  {:<8}  ttl", "node", "state", "token")?;
    for node in &status.nodes {
        let (state, token, ttl) = match &node.state {
            NodeState::Held { fingerprint, ttl } => (
                "held",
                fingerprint.clone(),
                ttl.map_or("none".to_owned(), |t| format!("{t:?}")),
            ),
            NodeState::Free => ("free", "-".to_owned(), "-".to_owned()),
            NodeState::Unreachable(e) => ("down", "-".to_owned(), one_line(e.kind())),
            _ => ("?", "-".to_owned(), "-".to_owned()),
        };
        out!("{:<width$}  {state:<5}  {token:<8}  {ttl}", node.node)?;
    }
    let verdict = match &status.verdict {
        Verdict::Held { fingerprint, nodes } => {
            format!(
                "held by {fingerprint} on {nodes}/{} nodes",
                status.nodes.len()
            )
        }
        Verdict::Free => "free".to_owned(),
        Verdict::Split => "split: no token on a quorum, fewer than a quorum free".to_owned(),
        Verdict::Unknown => format!("unknown: fewer than {} nodes answered", status.quorum),
        other => format!("{other:?}"),
    };
    out!("{:?}: {verdict} (quorum {})", status.resource, status.quorum)?;
    if let Some(holder) = holder {
        out!("holder {}: {holder}", holder.lock)?;
    }
    Ok(())
}

fn print_json(status: &Inspection, holder: Option<&Holder>) -> std::io::Result<()> {
    let nodes: Vec<_> = status
        .nodes
        .iter()
        .map(|node| match &node.state {
            NodeState::Held { fingerprint, ttl } => json!({
                "node": node.node,
                "state": "held",
                "token": fingerprint,
                "ttl_ms": ttl.map(|t| t.as_millis()),
            }),
            NodeState::Free => json!({ "node": node.node, "state": "free" }),
            NodeState::Unreachable(e) => json!({
                "node": node.node,
                "state": "down",
                "error": one_line(e.kind()),
            }),
            _ => json!({ "node": node.node, "state": "unknown" }),
        })
        .collect();
    let (verdict, token, holding) = match &status.verdict {
        Verdict::Held { fingerprint, nodes } => ("held", Some(fingerprint.as_str()), *nodes),
        Verdict::Free => ("free", None, 0),
        Verdict::Split => ("split", None, 0),
        _ => ("unknown", None, 0),
    };
    let report = json!({
        "resource": status.resource,
        "verdict": verdict,
        "token": token,
        "holding": holding,
        "quorum": status.quorum,
        "holder": holder,
        "nodes": nodes,
    });
    out!("{report}")
}

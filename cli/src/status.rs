//! `quorumlock status`: what every master holds for a resource, and the quorum's verdict.

use quorumlock::{NodeState, Verdict};

use crate::nodes::NodesArg;

pub(crate) const EXAMPLES: &str = "\
Examples:
  quorumlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 nightly-report
  QUORUMLOCK_NODES=redis://a:6379,redis://b:6379,redis://c:6379 quorumlock status nightly-report";

/// Options of `quorumlock status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,
    /// The resource to inspect.
    resource: String,
}

pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<std::process::ExitCode> {
    let rl = args.nodes.builder().build()?;
    let status = rl.inspect(&args.resource).await?;
    println!("{:<24} {:<10} {:<10} ttl", "node", "state", "holder");
    for node in &status.nodes {
        let (state, holder, ttl) = match &node.state {
            NodeState::Held { fingerprint, ttl } => (
                "held",
                fingerprint.clone(),
                ttl.map_or("none".to_owned(), |t| format!("{t:?}")),
            ),
            NodeState::Free => ("free", "-".to_owned(), "-".to_owned()),
            NodeState::Unreachable(e) => ("down", "-".to_owned(), e.kind().to_string()),
            _ => ("?", "-".to_owned(), "-".to_owned()),
        };
        println!("{:<24} {state:<10} {holder:<10} {ttl}", node.node);
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
        _ => format!("{:?}", status.verdict),
    };
    println!("{:?}: {verdict} (quorum {})", args.resource, status.quorum);
    Ok(std::process::ExitCode::SUCCESS)
}

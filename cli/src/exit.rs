//! The command's exit codes. They are part of its interface: scripts branch on them.

/// A usage, configuration or connection error of `quorumlock` itself.
pub(crate) const FAILURE: u8 = 1;

/// Printed under `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0    success
  1    quorumlock itself failed (bad arguments, unreachable nodes, ...)
  2    command-line usage error";

//! The command's exit codes. They are part of its interface: scripts branch on them.

/// `quorumlock` itself failed: bad configuration, an invalid TTL, an unexpected error.
pub(crate) const FAILURE: u8 = 1;

/// `exec`: the lock was not acquired within `--wait` (busy, or too few masters reachable).
/// Configurable with `-E`, like `flock -E`. 75 is `EX_TEMPFAIL`: try again later.
pub(crate) const NOT_ACQUIRED: u8 = 75;

/// `exec`: the lock was lost while the command ran; the command was sent SIGTERM (then SIGKILL).
pub(crate) const LOST: u8 = 76;

/// `exec`: the command could not be started (not found, not executable).
pub(crate) const COMMAND_NOT_RUN: u8 = 127;

/// `exec`: interrupted by Ctrl-C; the command was sent SIGINT and the lock released.
pub(crate) const INTERRUPTED: u8 = 130;

/// Printed under `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0      success (exec: the command's own exit code is returned)
  1      quorumlock itself failed (configuration, invalid TTL, ...)
  2      command-line usage error
  75     exec: lock not acquired within --wait (busy or too few masters); see -E
  76     exec: lock lost while the command ran; the command got SIGTERM, then SIGKILL
  127    exec: the command could not be started
  130    exec: interrupted (Ctrl-C); the command got SIGINT, the lock was released
  128+N  exec: the command was killed by signal N";

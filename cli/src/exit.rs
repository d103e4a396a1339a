//! The command's exit codes. They are part of its interface: scripts branch on them.

/// `quorumlock` itself failed: bad configuration (a URL, a master listed twice under two names),
/// an invalid TTL, an unexpected error.
pub(crate) const FAILURE: u8 = 1;

/// Fewer than a quorum of masters answered: masters down or unreachable, a wrong password or
/// port, something else than Redis listening. Nothing can be known or locked. 69 is
/// `EX_UNAVAILABLE`.
pub(crate) const NO_QUORUM: u8 = 69;

/// `exec`: the lock is held by someone else and was not acquired within `--wait`. Configurable
/// with `-E`, like `flock -E`. `status`: the resource is held, or handed over to a waiter. 75 is
/// `EX_TEMPFAIL`: try again later.
pub(crate) const BUSY: u8 = 75;

/// `exec`: the lock was lost while the command ran; the command's process group was sent
/// SIGTERM (then SIGKILL, before the lease ended).
pub(crate) const LOST: u8 = 76;

/// `exec`: the command could not be started (not found, not executable).
pub(crate) const COMMAND_NOT_RUN: u8 = 127;

/// `exec`: the exit code after signal `signal` ended the command or was received by quorumlock
/// (SIGINT 130, SIGTERM 143), as shells report it.
pub(crate) fn signalled(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(FAILURE)
}

/// The exit code for an error that ended a subcommand: [`NO_QUORUM`] when too few masters
/// answered, [`FAILURE`] for everything else.
pub(crate) fn code_of(e: &anyhow::Error) -> u8 {
    let unavailable = e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<quorumlock::Error>(),
            Some(quorumlock::Error::Unavailable { .. })
        )
    });
    if unavailable {
        NO_QUORUM
    } else {
        FAILURE
    }
}

/// Printed under `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0      success; status: the resource is free; unlock without --force: shown
         (exec returns the command's own exit code)
  1      quorumlock itself failed (configuration, invalid TTL, a master listed twice, ...)
  2      command-line usage error
  69     fewer than a quorum of masters answered (down, wrong address or password)
  75     exec: the lock is busy and was not acquired within --wait (change it with -E)
         status: the resource is held, read, or handed over to a waiter, or (without
         --permits) a semaphore with permits held
  76     exec: the lock was lost while the command ran; the command was stopped
  127    exec: the command could not be started
  128+N  exec: the command was killed by signal N, or quorumlock got signal N
         (INT 130, TERM 143, HUP 129, QUIT 131): the command got it, then SIGKILL after
         --grace, and the lock was released once the command's processes were gone";

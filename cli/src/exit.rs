//! The command's exit codes. They are part of its interface: scripts branch on them.

/// `quorumlock` could not do what was asked, and it is not one of the cases below: a listing
/// the masters' ACL does not allow (`+scan`), a forced unlock that did not reach every master, a
/// local error (a full disk), an unexpected one.
pub(crate) const FAILURE: u8 = 1;

/// A usage or configuration error, found before any lock is touched; the same command will fail
/// the same way until the command line or the setup it names changes: an unknown option or a
/// bad value (a TTL or a duration, a URL, `--permits 0`), a master listed twice, a voter listed
/// the wrong way (a replica, or a Redis Cluster node, as `redis://`), masters that cannot give
/// the `--durable` asked for, `--permits` unlike the holders'. Clap's own errors exit 2 too.
pub(crate) const USAGE: u8 = 2;

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

/// A usage or configuration error found by quorumlock itself (rather than by clap): exits
/// [`USAGE`]. Its text is the whole message.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Returns early with a [`Usage`] error, formatted as `format!` does.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::exit::Usage(format!($($arg)*)).into())
    };
}
pub(crate) use usage;

/// Whether a library error is one of configuration or input: retrying cannot mend it.
pub(crate) fn is_usage(e: &quorumlock::Error) -> bool {
    matches!(
        e,
        quorumlock::Error::Config(_)
            | quorumlock::Error::InvalidResource { .. }
            | quorumlock::Error::InvalidTtl { .. }
            | quorumlock::Error::InvalidPermits { .. }
            | quorumlock::Error::InvalidOwner { .. }
            | quorumlock::Error::InvalidLeaderValue { .. }
    )
}

/// The exit code for an error that ended a subcommand: [`USAGE`] for a usage or configuration
/// error, [`NO_QUORUM`] when too few masters answered, [`FAILURE`] for everything else.
pub(crate) fn code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.downcast_ref::<Usage>().is_some() {
            return USAGE;
        }
        match cause.downcast_ref::<quorumlock::Error>() {
            Some(e) if is_usage(e) => return USAGE,
            Some(quorumlock::Error::Unavailable { .. }) => return NO_QUORUM,
            _ => {}
        }
    }
    FAILURE
}

/// Printed under `--help`.
pub(crate) const HELP: &str = "\
Exit codes:
  0      success; status: the resource is free; unlock without --force: shown
         (exec returns the command's own exit code)
  1      quorumlock could not do it: list without SCAN, unlock --force not on every
         master, a local error (a full disk), an unexpected error
  2      usage or configuration error, found before any lock is touched: an unknown
         option, a bad value (TTL, duration, URL, --permits 0), a master listed twice,
         a voter listed the wrong way (a replica or a Redis Cluster node as redis://),
         masters that cannot give the --durable asked for
  69     fewer than a quorum of masters answered (down, wrong address or password)
  75     exec: the lock is busy and was not acquired within --wait (change it with -E)
         status: the resource is held, read, or handed over to a waiter, or (without
         --permits) a semaphore with permits held
  76     exec: the lock was lost while the command ran; the command was stopped
  127    exec: the command could not be started
  128+N  exec: the command was killed by signal N, or quorumlock got signal N
         (INT 130, TERM 143, HUP 129, QUIT 131): the command got it, then SIGKILL after
         --grace, and the lock was released once the command's processes were gone";

//! Writing to stdout without panicking when the reader goes away (`quorumlock demo | head -2`).
//!
//! `println!` panics on a closed pipe. These return the error instead, and `main` treats a broken
//! pipe as a normal end.

use std::io::{self, Write};

/// Prints one line to stdout, like `println!`, returning the write error instead of panicking.
macro_rules! out {
    () => {
        $crate::output::write_all(b"\n")
    };
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// Writes one formatted line to stdout and flushes it.
///
/// # Errors
///
/// The write error, for example [`io::ErrorKind::BrokenPipe`] once the reader has exited.
pub(crate) fn write_line(line: std::fmt::Arguments<'_>) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_fmt(line)?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

/// Writes bytes to stdout and flushes them.
///
/// # Errors
///
/// The write error, as [`write_line`].
pub(crate) fn write_all(bytes: &[u8]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()
}

/// The exit code of a verdict already reached, whether or not its report could be written: a
/// reader that closed early (`quorumlock status R | true`) does not turn "held" into "free".
///
/// # Errors
///
/// Any other write error (a full disk): the report asked for was not written.
pub(crate) fn verdict(printed: io::Result<()>, code: u8) -> io::Result<std::process::ExitCode> {
    match printed {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(std::process::ExitCode::from(code)),
    }
}

/// `true` when the error (or any error in its chain) is a write to a pipe nobody reads.
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

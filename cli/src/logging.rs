//! The library's log (`tracing`) on stderr: warnings by default, more with `-v`, or exactly what
//! `RUST_LOG` asks for.

use std::io::{self, IsTerminal, Write};

use tracing_subscriber::EnvFilter;

/// Installs the logger. `verbosity` counts `-v` flags; `RUST_LOG`, when set, wins.
pub(crate) fn init(verbosity: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(match verbosity {
            0 => "warn",
            1 => "warn,quorumlock=info,quorumlock_cli=info",
            2 => "warn,quorumlock=debug,quorumlock_cli=debug",
            _ => "debug,quorumlock=trace,quorumlock_cli=trace",
        }),
    };
    // A second logger (there is none) would be the only reason this fails: keep the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| OneLine(io::stderr()))
        .with_ansi(std::io::stderr().is_terminal() && !no_color())
        .with_target(verbosity > 1)
        .without_time()
        .try_init();
}

/// `NO_COLOR` set to anything but the empty string turns colours off (<https://no-color.org>).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Writes each log event on one line: a server's multi-line error (a web server answering where
/// a master should be) would otherwise split a warning across lines. The formatter hands over
/// one whole event per write.
struct OneLine<W>(W);

impl<W: Write> Write for OneLine<W> {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(event);
        let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
        self.0.write_all(line.as_bytes())?;
        self.0.write_all(b"\n")?;
        Ok(event.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

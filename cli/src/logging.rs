//! The library's log (`tracing`) on stderr: warnings by default, more with `-v`, or exactly what
//! `RUST_LOG` asks for.

use std::io::IsTerminal;

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
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbosity > 1)
        .without_time()
        .try_init();
}

//! The library's log (`tracing`) on stderr: warnings by default, more with `-v`, or exactly what
//! `RUST_LOG` asks for.

use std::io::{self, IsTerminal, Write};

use std::fmt;

use tracing::field::Field;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{self, Writer};
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
        .fmt_fields(format::debug_fn(field).delimited(" "))
        .with_writer(|| OneLine(io::stderr()))
        .with_ansi(std::io::stderr().is_terminal() && !no_color())
        .with_target(verbosity > 1)
        .without_time()
        .try_init();
}

/// Longest value a log line shows of one field.
const MAX_VALUE: usize = 200;

/// Writes one field of a log line as a person reads it: `name=value`, the message as it is.
/// Optional values show what they hold (`Some(3)` is `3`) or nothing; Rust's dump of a structure
/// (`Masters { masters: Mutex { .. } }`) is left out, as noise; long values are cut; the
/// library's spelling of `--durable` is the command line's.
fn field(writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let text = format!("{value:?}");
    let text = crate::durable::respelled(&text);
    if field.name() == "message" {
        return writer.write_str(&text);
    }
    let Some(shown) = readable(&text) else {
        return Ok(());
    };
    write!(writer, "{}={shown}", field.name())
}

/// A field's value as a log line shows it, or `None` to leave it out (see [`field`]).
fn readable(text: &str) -> Option<String> {
    let mut text = text;
    while let Some(inner) = text.strip_prefix("Some(").and_then(|t| t.strip_suffix(')')) {
        text = inner;
    }
    if text == "None" || text.contains(" { ") {
        return None;
    }
    Some(match text.char_indices().nth(MAX_VALUE) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    })
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

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn values_read_as_a_person_reads_them() {
        assert_eq!(readable("1.5ms").as_deref(), Some("1.5ms"));
        assert_eq!(readable("Some(3)").as_deref(), Some("3"));
        assert_eq!(readable("Some(Some(29.7s))").as_deref(), Some("29.7s"));
        assert_eq!(readable("None"), None);
        assert_eq!(
            readable("Masters { masters: Mutex { data: [Master { reading: None }] } }"),
            None
        );
        assert_eq!(readable("\"orders:42\"").as_deref(), Some("\"orders:42\""));
        assert!(readable(&"x".repeat(500)).unwrap().ends_with("..."));
    }
}

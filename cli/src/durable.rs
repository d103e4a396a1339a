//! The `--durable` option shared by `exec`, `elect` and `bench`: a master's grant counts toward
//! the quorum only once its replicas (`WAIT`) or append-only files (`WAITAOF`) confirmed it.

use std::borrow::Cow;
use std::sync::OnceLock;

use quorumlock::{Durability, RedlockBuilder};

/// The accepted spellings, named in every refusal.
const FORMS: &str = "replicas=N, aof, or aof,replicas=N (N at least 1)";

/// How durable a grant must be before it counts.
#[derive(Debug, clap::Args)]
pub(crate) struct DurableArg {
    /// A grant counts only once N replicas (WAIT) or the AOF (WAITAOF, Redis 7.2+ or Valkey;
    /// `aof,replicas=N`: also N replicas' AOF) confirmed it within the node timeout (TTL/20, at
    /// most 1s); masters that cannot confirm are refused at connect.
    #[arg(
        long,
        env = "QUORUMLOCK_DURABLE",
        value_name = "replicas=N|aof[,replicas=N]",
        value_parser = parse
    )]
    durable: Option<Durability>,
}

impl DurableArg {
    /// `builder`, asking for the durability given (unchanged without `--durable`).
    pub(crate) fn apply(&self, builder: RedlockBuilder) -> RedlockBuilder {
        match self.durable {
            Some(durability) => {
                // The library's errors and log lines spell it the Rust way: see `respelled`.
                let _ = ASKED.set(durability);
                builder.durability(durability)
            }
            None => builder,
        }
    }

    /// The durability asked for, spelled as on the command line (`None` without `--durable`).
    pub(crate) fn spelled(&self) -> Option<String> {
        self.durable.map(spell)
    }

    /// The durability asked for (`None` without `--durable`).
    pub(crate) fn get(&self) -> Option<Durability> {
        self.durable
    }
}

/// `durability` as the command line spells it: `replicas=1`, `aof`, `aof,replicas=1`.
pub(crate) fn spell(durability: Durability) -> String {
    match durability {
        Durability::Replicas(n) => format!("replicas={n}"),
        Durability::Aof {
            local: true,
            replicas: 0,
        } => "aof".to_owned(),
        Durability::Aof { local, replicas } => {
            let aof = if local { "aof," } else { "" };
            format!("{aof}replicas={replicas}")
        }
        Durability::Answered => "none".to_owned(),
        other => format!("{other:?}"),
    }
}

/// The durability this process asked the library for, once it has.
static ASKED: OnceLock<Durability> = OnceLock::new();

/// `text` (an error or a log line) with the library's Rust spelling of the durability asked
/// for (`Replicas(1)`, `Aof { local: true, replicas: 1 }`) replaced by the command line's.
pub(crate) fn respelled(text: &str) -> Cow<'_, str> {
    match ASKED.get() {
        Some(durability) => {
            let rust = format!("{durability:?}");
            match text.contains(&rust) {
                true => Cow::Owned(text.replace(&rust, &spell(*durability))),
                false => Cow::Borrowed(text),
            }
        }
        None => Cow::Borrowed(text),
    }
}

/// Parses `replicas=N`, `aof`, `aof,replicas=N` or `replicas=N,aof`.
///
/// # Errors
///
/// A message naming the text and the accepted forms: for an empty value, an unknown word, a
/// count that is not a number or is 0, a word given twice.
pub(crate) fn parse(text: &str) -> Result<Durability, String> {
    let refuse = |why: String| Err(format!("{why}: write {FORMS}"));
    let text = text.trim();
    if text.is_empty() {
        return refuse("an empty durability".to_owned());
    }
    let (mut aof, mut replicas) = (false, None);
    for word in text.split(',').map(str::trim) {
        match word.split_once('=') {
            None if word == "aof" => {
                if std::mem::replace(&mut aof, true) {
                    return refuse(format!("\"aof\" given twice in {text:?}"));
                }
            }
            Some((key, count)) if key.trim() == "replicas" => {
                let count = count.trim();
                let n = match count.parse::<u32>() {
                    Ok(0) => {
                        return refuse(
                            "\"replicas=0\" confirms nothing (for no confirmation, leave \
                             --durable out)"
                                .to_owned(),
                        )
                    }
                    Ok(n) => n,
                    Err(_) => {
                        return refuse(format!("{count:?} in {word:?} is not a replica count"))
                    }
                };
                if replicas.replace(n).is_some() {
                    return refuse(format!("\"replicas\" given twice in {text:?}"));
                }
            }
            _ => return refuse(format!("unknown {word:?} in {text:?}")),
        }
    }
    Ok(match (aof, replicas) {
        (true, replicas) => Durability::Aof {
            local: true,
            replicas: replicas.unwrap_or(0),
        },
        (false, Some(n)) => Durability::Replicas(n),
        // Not reached: every word is `aof` or `replicas=N`, and there is at least one.
        (false, None) => return refuse(format!("nothing asked in {text:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_spelling_asks_for_what_it_says() {
        assert_eq!(parse("replicas=1"), Ok(Durability::Replicas(1)));
        assert_eq!(parse(" replicas = 3 "), Ok(Durability::Replicas(3)));
        assert_eq!(
            parse("aof"),
            Ok(Durability::Aof {
                local: true,
                replicas: 0
            })
        );
        for text in ["aof,replicas=2", "replicas=2,aof", "aof, replicas=2"] {
            assert_eq!(
                parse(text),
                Ok(Durability::Aof {
                    local: true,
                    replicas: 2
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn a_parsed_durability_is_spelled_back_as_written() {
        for text in ["replicas=2", "aof", "aof,replicas=1"] {
            let arg = DurableArg {
                durable: Some(parse(text).unwrap()),
            };
            assert_eq!(arg.spelled().as_deref(), Some(text));
        }
        assert_eq!(
            parse("replicas=1,aof").map(|d| DurableArg { durable: Some(d) }.spelled()),
            Ok(Some("aof,replicas=1".to_owned()))
        );
        assert_eq!(DurableArg { durable: None }.spelled(), None);
    }

    #[test]
    fn bad_spellings_are_refused_naming_the_accepted_forms() {
        for (text, why) in [
            ("", "empty"),
            ("  ", "empty"),
            ("replicas=0", "confirms nothing"),
            ("aof,replicas=0", "confirms nothing"),
            (
                "replicas=x",
                "\"x\" in \"replicas=x\" is not a replica count",
            ),
            ("replicas=-1", "not a replica count"),
            ("replicas=", "not a replica count"),
            ("replicas", "unknown \"replicas\""),
            ("fsync", "unknown \"fsync\""),
            ("aof=1", "unknown \"aof=1\""),
            ("AOF", "unknown"),
            ("aof,", "unknown \"\""),
            ("aof,aof", "given twice"),
            ("replicas=1,replicas=2", "given twice"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(err.ends_with(FORMS), "{text:?}: {err}");
        }
    }
}

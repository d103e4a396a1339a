//! Durable votes: a master's grant counts toward the quorum only once the master confirmed that
//! its replicas (`WAIT`) or the append-only files (`WAITAOF`) have it.
//!
//! Redlock's known weakness is a master that forgets a grant: it fails over to a replica that
//! never received the key, or restarts from a disk that never got it. A grant confirmed by `n`
//! replicas survives the loss of the master together with up to `n − 1` of those replicas; a
//! grant confirmed fsynced to the master's AOF survives a crash and restart of the master.
//!
//! Neither command may run inside a script, so each one goes in the same pipeline right behind
//! the script that granted (one round trip): `WAIT` and `WAITAOF` count the connection's earlier
//! writes, and on the shared multiplexed connection those are the grant and whatever was sent
//! before it — never less than the grant. A grant not confirmed within the node's bound counts
//! as a failure of that master, and the attempt's rollback releases it like any other.

use std::time::Duration;

use redis::{Cmd, Value};

/// How a master's grant must be confirmed before it counts toward the quorum (see
/// [`RedlockBuilder::durability`](crate::RedlockBuilder::durability)). Grants, extends and
/// fence increments are confirmed; releases and the reservations a release makes for the next
/// waiter are not (a lost reservation costs the line its order for one hand-off, never mutual
/// exclusion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// A grant counts once its master answered (the default).
    #[default]
    Answered,
    /// A grant counts once this many replicas of its master acknowledged it (`WAIT`). Each
    /// master must have at least this many replicas connected.
    Replicas(u32),
    /// A grant counts once it was fsynced to its master's own append-only file (`local`), and
    /// to that of this many replicas (`WAITAOF`, Redis 7.2 or later, or Valkey). With `local`,
    /// each master must run with `appendonly yes`.
    Aof {
        /// Fsynced to the master's own AOF.
        local: bool,
        /// Fsynced to the AOF of this many replicas.
        replicas: u32,
    },
}

impl Durability {
    /// Whether a grant waits for any confirmation at all.
    pub(crate) fn waits(self) -> bool {
        self != Durability::Answered
    }

    /// Whether it asks for something: `Replicas(0)` or an `Aof` of nothing would confirm nothing
    /// while promising durability.
    pub(crate) fn is_valid(self) -> bool {
        match self {
            Durability::Answered => true,
            Durability::Replicas(n) => n > 0,
            Durability::Aof { local, replicas } => local || replicas > 0,
        }
    }

    /// The command that confirms a grant, waiting at most `within` on the server; `None` when
    /// grants are not confirmed.
    pub(crate) fn confirm_cmd(self, within: Duration) -> Option<Cmd> {
        // 0 would block forever.
        let ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX).max(1);
        match self {
            Durability::Answered => None,
            Durability::Replicas(n) => {
                let mut cmd = redis::cmd("WAIT");
                cmd.arg(n).arg(ms);
                Some(cmd)
            }
            Durability::Aof { local, replicas } => {
                let mut cmd = redis::cmd("WAITAOF");
                cmd.arg(u8::from(local)).arg(replicas).arg(ms);
                Some(cmd)
            }
        }
    }

    /// Whether the reply of [`confirm_cmd`](Self::confirm_cmd) confirms the grant; if not, what
    /// was missing.
    pub(crate) fn judge(self, reply: &Value) -> Result<(), String> {
        let int = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok(),
            _ => None,
        };
        match (self, reply) {
            (Durability::Answered, _) => Ok(()),
            (Durability::Replicas(n), reply) => match int(reply) {
                Some(acked) if acked >= n => Ok(()),
                Some(acked) => Err(format!("{acked} of {n} replicas acknowledged it in time")),
                None => Err(format!("unexpected WAIT reply {reply:?}")),
            },
            (Durability::Aof { local, replicas }, Value::Array(counts)) => {
                match (counts.first().and_then(int), counts.get(1).and_then(int)) {
                    (Some(on_master), Some(on_replicas)) => {
                        let master_ok = !local || on_master >= 1;
                        if master_ok && on_replicas >= replicas {
                            Ok(())
                        } else {
                            Err(format!(
                                "fsynced to {on_master} of {} local AOF and {on_replicas} of {replicas} replicas' AOF in time",
                                u8::from(local)
                            ))
                        }
                    }
                    _ => Err(format!("unexpected WAITAOF reply {counts:?}")),
                }
            }
            (Durability::Aof { .. }, reply) => Err(format!("unexpected WAITAOF reply {reply:?}")),
        }
    }
}

/// What a master whose `INFO` says `info` lacks to confirm grants as `durability` asks.
pub(crate) fn lacks(durability: Durability, info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
    };
    let replicas: u32 = field("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let wanted = match durability {
        Durability::Answered => return None,
        Durability::Replicas(n) => n,
        Durability::Aof { local, replicas } => {
            let version = field("redis_version").unwrap_or("0");
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            if (major, minor) < (7, 2) {
                return Some(format!(
                    "it has no WAITAOF (Redis {version}; 7.2 or later, or Valkey, has it)"
                ));
            }
            if local && field("aof_enabled") != Some("1") {
                return Some("it runs without an append-only file (appendonly no)".to_owned());
            }
            replicas
        }
    };
    (replicas < wanted).then(|| format!("it has {replicas} replicas connected, {wanted} needed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durability_of_nothing_is_invalid() {
        assert!(Durability::Answered.is_valid());
        assert!(Durability::Replicas(1).is_valid());
        assert!(!Durability::Replicas(0).is_valid());
        assert!(!Durability::Aof {
            local: false,
            replicas: 0
        }
        .is_valid());
        assert!(Durability::Aof {
            local: true,
            replicas: 0
        }
        .is_valid());
    }

    #[test]
    fn replies_confirm_only_what_was_asked() {
        let replicas = Durability::Replicas(2);
        assert!(replicas.judge(&Value::Int(2)).is_ok());
        let short = replicas.judge(&Value::Int(1)).unwrap_err();
        assert!(short.contains("1 of 2 replicas"), "{short}");
        let aof = Durability::Aof {
            local: true,
            replicas: 1,
        };
        assert!(aof
            .judge(&Value::Array(vec![Value::Int(1), Value::Int(1)]))
            .is_ok());
        assert!(aof
            .judge(&Value::Array(vec![Value::Int(0), Value::Int(1)]))
            .is_err());
        assert!(aof
            .judge(&Value::Array(vec![Value::Int(1), Value::Int(0)]))
            .is_err());
    }

    #[test]
    fn the_wait_never_blocks_forever() {
        let cmd = Durability::Replicas(1).confirm_cmd(Duration::ZERO).unwrap();
        let args: Vec<String> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(args, ["WAIT", "1", "1"]);
    }

    #[test]
    fn what_a_master_lacks_is_named() {
        let info = "redis_version:7.0.15\r\nconnected_slaves:0\r\naof_enabled:0\r\n";
        let lack = lacks(Durability::Replicas(1), info).unwrap();
        assert!(lack.contains("0 replicas connected, 1 needed"), "{lack}");
        let aof = Durability::Aof {
            local: true,
            replicas: 0,
        };
        assert!(lacks(aof, info).unwrap().contains("no WAITAOF"));
        let newer = "redis_version:7.2.4\r\nconnected_slaves:1\r\naof_enabled:0\r\n";
        assert!(lacks(aof, newer).unwrap().contains("appendonly no"));
        let ready = "redis_version:7.2.4\r\nconnected_slaves:1\r\naof_enabled:1\r\n";
        assert_eq!(lacks(aof, ready), None);
        assert_eq!(lacks(Durability::Replicas(1), ready), None);
    }
}

//! Sorted sets: `ZADD` (with `NX`/`XX`/`GT`/`LT`/`CH`/`INCR`), `ZREM`, `ZSCORE`, `ZCARD`,
//! `ZCOUNT`, `ZREMRANGEBYSCORE`, `ZRANGE` (by index or `BYSCORE`, `REV`, `LIMIT`,
//! `WITHSCORES`).

use super::{parse_f64, parse_i64, typed, Ctx};
use crate::keyspace::{Entry, SortedSet, Value};
use crate::reply::{errors, Reply};

fn zset(value: &mut Value) -> Option<&mut SortedSet> {
    match value {
        Value::SortedSet(z) => Some(z),
        _ => None,
    }
}

/// The live sorted set at `key`; `Err` is `WRONGTYPE`.
fn lookup<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Result<Option<&'c mut SortedSet>, Reply> {
    let now = ctx.now_ms();
    typed(ctx.keyspace().get_mut(key, now), zset)
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
pub(super) fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[0];
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 1;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i])
            .to_ascii_uppercase()
            .as_str()
        {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            "CH" => ch = true,
            "INCR" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Reply::error(errors::SYNTAX);
    }
    if nx && xx {
        return Reply::error("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Reply::error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() > 2 {
        return Reply::error("ERR INCR option supports a single increment-element pair");
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        match parse_f64(&pair[0]) {
            Some(score) => scores.push((score, &pair[1])),
            None => return Reply::error(errors::NOT_FLOAT),
        }
    }
    let exists = match lookup(ctx, key) {
        Err(e) => return e,
        Ok(z) => z.is_some(),
    };
    if !exists {
        if xx {
            return if incr { Reply::Nil } else { Reply::Int(0) };
        }
        let entry = Entry {
            value: Value::SortedSet(SortedSet::default()),
            expires_at: None,
        };
        ctx.keyspace().insert(key, entry);
    }
    let Ok(Some(z)) = lookup(ctx, key) else {
        return Reply::error(errors::WRONGTYPE);
    };
    let (mut added, mut changed) = (0, 0);
    let mut incr_reply = Reply::Nil;
    for (score, member) in scores {
        let current = z.score(member);
        let mut score = score;
        if incr {
            score += current.unwrap_or(0.0);
            if score.is_nan() {
                ctx.keyspace().drop_if_empty(key);
                return Reply::error("ERR resulting score is not a number (NaN)");
            }
        }
        match current {
            Some(_) if nx => continue,
            Some(cur) if (gt && score <= cur) || (lt && score >= cur) => continue,
            Some(cur) => {
                if cur != score {
                    z.insert(member, score);
                    changed += 1;
                }
            }
            None if xx => continue,
            None => {
                z.insert(member, score);
                added += 1;
            }
        }
        incr_reply = Reply::Double(score);
    }
    ctx.keyspace().drop_if_empty(key);
    if incr {
        return incr_reply;
    }
    Reply::Int(if ch { added + changed } else { added })
}

/// `ZREM key member...`: how many were there; an emptied set is deleted.
pub(super) fn zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let removed = match lookup(ctx, &args[0]) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(z)) => args[1..].iter().filter(|m| z.remove(m)).count(),
    };
    ctx.keyspace().drop_if_empty(&args[0]);
    Reply::Int(removed as i64)
}

/// `ZSCORE key member`.
pub(super) fn zscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match lookup(ctx, &args[0]) {
        Err(e) => e,
        Ok(z) => match z.and_then(|z| z.score(&args[1])) {
            Some(score) => Reply::Double(score),
            None => Reply::Nil,
        },
    }
}

/// `ZCARD key`.
pub(super) fn zcard(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    match lookup(ctx, key) {
        Err(e) => e,
        Ok(z) => Reply::Int(z.map_or(0, |z| z.len() as i64)),
    }
}

/// A score range: `min` and `max`, each exclusive or not (`(5`), `-inf` and `+inf` allowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScoreRange {
    min: f64,
    min_exclusive: bool,
    max: f64,
    max_exclusive: bool,
}

impl ScoreRange {
    /// Parses `min` and `max` as Redis does (`zslParseRange`).
    pub(crate) fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let bound = |arg: &[u8]| match arg.strip_prefix(b"(") {
            Some(rest) => parse_f64(rest).map(|v| (v, true)),
            None => parse_f64(arg).map(|v| (v, false)),
        };
        let (min, min_exclusive) = bound(min)?;
        let (max, max_exclusive) = bound(max)?;
        Some(ScoreRange {
            min,
            min_exclusive,
            max,
            max_exclusive,
        })
    }

    /// Whether `score` is in the range.
    pub(crate) fn contains(&self, score: f64) -> bool {
        let above = if self.min_exclusive {
            score > self.min
        } else {
            score >= self.min
        };
        let below = if self.max_exclusive {
            score < self.max
        } else {
            score <= self.max
        };
        above && below
    }
}

/// `ZCOUNT key min max`.
pub(super) fn zcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(range) = ScoreRange::parse(&args[1], &args[2]) else {
        return Reply::error(errors::RANGE_NOT_FLOAT);
    };
    match lookup(ctx, &args[0]) {
        Err(e) => e,
        Ok(z) => Reply::Int(z.map_or(0, |z| {
            z.iter().filter(|(_, s)| range.contains(*s)).count() as i64
        })),
    }
}

/// `ZREMRANGEBYSCORE key min max`: how many went; an emptied set is deleted.
pub(super) fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(range) = ScoreRange::parse(&args[1], &args[2]) else {
        return Reply::error(errors::RANGE_NOT_FLOAT);
    };
    let removed = match lookup(ctx, &args[0]) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(z)) => {
            let doomed: Vec<Vec<u8>> = z
                .iter()
                .filter(|(_, s)| range.contains(*s))
                .map(|(m, _)| m.to_vec())
                .collect();
            for member in &doomed {
                z.remove(member);
            }
            doomed.len()
        }
    };
    ctx.keyspace().drop_if_empty(&args[0]);
    Reply::Int(removed as i64)
}

/// `ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]` (not `BYLEX`).
pub(super) fn zrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (mut by_score, mut by_lex, mut rev, mut with_scores) = (false, false, false, false);
    let mut limit: Option<(i64, i64)> = None;
    let mut i = 3;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i])
            .to_ascii_uppercase()
            .as_str()
        {
            "WITHSCORES" => with_scores = true,
            "BYSCORE" => by_score = true,
            "BYLEX" => by_lex = true,
            "REV" => rev = true,
            "LIMIT" if i + 2 < args.len() => {
                match (parse_i64(&args[i + 1]), parse_i64(&args[i + 2])) {
                    (Some(offset), Some(count)) => limit = Some((offset, count)),
                    _ => return Reply::error(errors::NOT_INTEGER),
                }
                i += 2;
            }
            _ => return Reply::error(errors::SYNTAX),
        }
        i += 1;
    }
    if by_lex {
        return Reply::error("ERR BYLEX is not supported by the simulated master");
    }
    if limit.is_some() && !by_score {
        return Reply::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    let members: Vec<(Vec<u8>, f64)> = if by_score {
        let (min, max) = if rev {
            (&args[2], &args[1])
        } else {
            (&args[1], &args[2])
        };
        let Some(range) = ScoreRange::parse(min, max) else {
            return Reply::error(errors::RANGE_NOT_FLOAT);
        };
        let z = match lookup(ctx, &args[0]) {
            Err(e) => return e,
            Ok(None) => return Reply::Array(Vec::new()),
            Ok(Some(z)) => z,
        };
        let (offset, count) = limit.unwrap_or((0, -1));
        if offset < 0 {
            return Reply::Array(Vec::new());
        }
        let in_range = |(m, s): (&[u8], f64)| range.contains(s).then(|| (m.to_vec(), s));
        let matching: Box<dyn Iterator<Item = (Vec<u8>, f64)>> = if rev {
            Box::new(z.iter().rev().filter_map(in_range))
        } else {
            Box::new(z.iter().filter_map(in_range))
        };
        let skipped = matching.skip(usize::try_from(offset).unwrap_or(usize::MAX));
        match usize::try_from(count) {
            Ok(count) => skipped.take(count).collect(),
            Err(_) => skipped.collect(),
        }
    } else {
        let (Some(start), Some(stop)) = (parse_i64(&args[1]), parse_i64(&args[2])) else {
            return Reply::error(errors::NOT_INTEGER);
        };
        let z = match lookup(ctx, &args[0]) {
            Err(e) => return e,
            Ok(None) => return Reply::Array(Vec::new()),
            Ok(Some(z)) => z,
        };
        let len = z.len() as i64;
        let start = if start < 0 {
            (start + len).max(0)
        } else {
            start
        };
        let stop = if stop < 0 {
            stop + len
        } else {
            stop.min(len - 1)
        };
        if start > stop || start >= len {
            return Reply::Array(Vec::new());
        }
        let (skip, take) = (start as usize, (stop - start + 1) as usize);
        let all: Box<dyn Iterator<Item = (&[u8], f64)>> = if rev {
            Box::new(z.iter().rev())
        } else {
            Box::new(z.iter())
        };
        all.skip(skip)
            .take(take)
            .map(|(m, s)| (m.to_vec(), s))
            .collect()
    };
    if with_scores {
        Reply::Pairs(
            members
                .into_iter()
                .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s)))
                .collect(),
        )
    } else {
        Reply::Array(members.into_iter().map(|(m, _)| Reply::Bulk(m)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::ScoreRange;

    #[test]
    fn score_ranges_read_infinities_and_exclusive_bounds() {
        let range = ScoreRange::parse(b"-inf", b"(5").unwrap();
        assert!(range.contains(f64::NEG_INFINITY));
        assert!(range.contains(4.999));
        assert!(!range.contains(5.0));
        let range = ScoreRange::parse(b"(1", b"+inf").unwrap();
        assert!(!range.contains(1.0));
        assert!(range.contains(1.5));
        assert!(range.contains(f64::INFINITY));
        assert!(ScoreRange::parse(b"x", b"1").is_none());
        assert!(ScoreRange::parse(b"((1", b"1").is_none());
    }
}

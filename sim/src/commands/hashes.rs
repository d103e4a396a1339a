//! Hashes: `HSET`, `HGET`, `HDEL`, `HGETALL`, `HLEN`, `HEXISTS`.

use super::{typed, wrong_arity, Ctx};
use crate::keyspace::{Entry, Hash, Value};
use crate::reply::{errors, Reply};

fn hash(value: &mut Value) -> Option<&mut Hash> {
    match value {
        Value::Hash(h) => Some(h),
        _ => None,
    }
}

/// The live hash at `key`; `Err` is `WRONGTYPE`.
fn lookup<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Result<Option<&'c mut Hash>, Reply> {
    let now = ctx.now_ms();
    typed(ctx.keyspace().get_mut(key, now), hash)
}

/// `HSET key field value [field value ...]`: how many fields are new.
pub(super) fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len().is_multiple_of(2) {
        return wrong_arity("hset");
    }
    let key = &args[0];
    match lookup(ctx, key) {
        Err(e) => return e,
        Ok(Some(_)) => {}
        Ok(None) => ctx.keyspace().insert(
            key,
            Entry {
                value: Value::Hash(Hash::default()),
                expires_at: None,
            },
        ),
    }
    let Ok(Some(h)) = lookup(ctx, key) else {
        return Reply::error(errors::WRONGTYPE);
    };
    let added = args[1..]
        .chunks(2)
        .filter(|fv| h.set(&fv[0], &fv[1]))
        .count();
    Reply::Int(added as i64)
}

/// `HGET key field`.
pub(super) fn hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match lookup(ctx, &args[0]) {
        Err(e) => e,
        Ok(h) => match h.and_then(|h| h.get(&args[1])) {
            Some(v) => Reply::Bulk(v.to_vec()),
            None => Reply::Nil,
        },
    }
}

/// `HDEL key field...`: how many were there; an emptied hash is deleted.
pub(super) fn hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let removed = match lookup(ctx, &args[0]) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(h)) => args[1..].iter().filter(|f| h.remove(f)).count(),
    };
    ctx.keyspace().drop_if_empty(&args[0]);
    Reply::Int(removed as i64)
}

/// `HGETALL key`: fields and values, in the order the fields were first set.
pub(super) fn hgetall(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    match lookup(ctx, key) {
        Err(e) => e,
        Ok(None) => Reply::Map(Vec::new()),
        Ok(Some(h)) => Reply::Map(
            h.iter()
                .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                .collect(),
        ),
    }
}

/// `HLEN key`.
pub(super) fn hlen(ctx: &mut Ctx<'_>, key: &[u8]) -> Reply {
    match lookup(ctx, key) {
        Err(e) => e,
        Ok(h) => Reply::Int(h.map_or(0, |h| h.len() as i64)),
    }
}

/// `HEXISTS key field`.
pub(super) fn hexists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match lookup(ctx, &args[0]) {
        Err(e) => e,
        Ok(h) => Reply::Int(i64::from(h.is_some_and(|h| h.get(&args[1]).is_some()))),
    }
}

//! The data: keys, their values (strings, sorted sets, hashes) and their expiries, judged by
//! the time the caller gives (the master's clock, read once per command or script).
//!
//! A key whose expiry has passed (`now > expires_at`, as Redis judges it: a key expiring at
//! `t` still exists at `t`) does not exist for any read: it is dropped when touched, and never
//! listed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A value of a key.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// A string.
    String(Vec<u8>),
    /// A sorted set.
    SortedSet(SortedSet),
    /// A hash, its fields in the order they were first set (as Redis keeps a small hash).
    Hash(Hash),
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) => write!(f, "{:?}", String::from_utf8_lossy(s)),
            Value::SortedSet(z) => f
                .debug_list()
                .entries(z.iter().map(|(m, s)| (String::from_utf8_lossy(m), s)))
                .finish(),
            Value::Hash(h) => f
                .debug_map()
                .entries(
                    h.iter()
                        .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v))),
                )
                .finish(),
        }
    }
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::SortedSet(_) => "zset",
            Value::Hash(_) => "hash",
        }
    }
}

/// A score with a total order (scores are never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set: members ordered by score, then by their bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortedSet {
    scores: BTreeMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl SortedSet {
    /// How many members it has.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Adds `member` or moves it to `score`.
    pub fn insert(&mut self, member: &[u8], score: f64) {
        // -0 and 0 are one score to Redis.
        let score = if score == 0.0 { 0.0 } else { score };
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    /// Removes `member`; whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    /// The members in order, lowest score first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        self.order.iter().map(|(s, m)| (m.as_slice(), s.0))
    }
}

/// A hash whose fields keep the order they were first set in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hash {
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Hash {
    /// How many fields it has.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether it has no field.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets `field`; whether it is new.
    pub fn set(&mut self, field: &[u8], value: &[u8]) -> bool {
        match self.fields.iter_mut().find(|(f, _)| f == field) {
            Some((_, v)) => {
                *v = value.to_vec();
                false
            }
            None => {
                self.fields.push((field.to_vec(), value.to_vec()));
                true
            }
        }
    }

    /// Removes `field`; whether it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let before = self.fields.len();
        self.fields.retain(|(f, _)| f != field);
        self.fields.len() != before
    }

    /// The fields and values in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields
            .iter()
            .map(|(f, v)| (f.as_slice(), v.as_slice()))
    }
}

/// A key's value and expiry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The value.
    pub value: Value,
    /// When it expires, in ms since the epoch on the master's clock; `None`: never.
    pub expires_at: Option<i64>,
}

impl Entry {
    /// Whether it has expired at `now` (ms): strictly after its expiry, as Redis judges.
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| now > at)
    }
}

/// Every key of the (one) database.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
}

impl Keyspace {
    /// Drops `key` if it has expired at `now`.
    fn expire_if_needed(&mut self, key: &[u8], now: i64) {
        if self.entries.get(key).is_some_and(|e| e.expired(now)) {
            self.entries.remove(key);
        }
    }

    /// The live entry of `key` at `now`.
    pub(crate) fn get(&mut self, key: &[u8], now: i64) -> Option<&Entry> {
        self.expire_if_needed(key, now);
        self.entries.get(key)
    }

    /// The live entry of `key` at `now`, to change.
    pub(crate) fn get_mut(&mut self, key: &[u8], now: i64) -> Option<&mut Entry> {
        self.expire_if_needed(key, now);
        self.entries.get_mut(key)
    }

    /// Sets `key` to `entry`, replacing whatever it held.
    pub(crate) fn insert(&mut self, key: &[u8], entry: Entry) {
        self.entries.insert(key.to_vec(), entry);
    }

    /// Removes `key`; whether it was live at `now`.
    pub(crate) fn remove(&mut self, key: &[u8], now: i64) -> bool {
        self.expire_if_needed(key, now);
        self.entries.remove(key).is_some()
    }

    /// Removes every key.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entry of `key` if it is live at `now`, leaving the keyspace as it is (an observer's
    /// read, not a command's).
    pub(crate) fn peek(&self, key: &[u8], now: i64) -> Option<&Entry> {
        self.entries.get(key).filter(|e| !e.expired(now))
    }

    /// The keys live at `now`, in byte order, with their entries.
    pub(crate) fn live(&self, now: i64) -> impl Iterator<Item = (&[u8], &Entry)> + '_ {
        self.entries
            .iter()
            .filter(move |(_, e)| !e.expired(now))
            .map(|(k, e)| (k.as_slice(), e))
    }

    /// Removes a sorted set or hash left empty (Redis deletes a key whose collection empties).
    pub(crate) fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.entries.get(key).map(|e| &e.value) {
            Some(Value::SortedSet(z)) => z.is_empty(),
            Some(Value::Hash(h)) => h.is_empty(),
            _ => false,
        };
        if empty {
            self.entries.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str, expires_at: Option<i64>) -> Entry {
        Entry {
            value: Value::String(text.as_bytes().to_vec()),
            expires_at,
        }
    }

    #[test]
    fn a_key_exists_at_its_expiry_and_is_gone_a_millisecond_later() {
        let mut keys = Keyspace::default();
        keys.insert(b"k", string("v", Some(1000)));
        assert!(keys.get(b"k", 1000).is_some());
        assert_eq!(keys.live(1001).count(), 0);
        assert!(keys.get(b"k", 1001).is_none());
        // Dropped when touched: an earlier time does not bring it back.
        assert!(keys.get(b"k", 999).is_none());
    }

    #[test]
    fn sorted_set_members_are_ordered_by_score_then_bytes() {
        let mut z = SortedSet::default();
        z.insert(b"b", 1.0);
        z.insert(b"a", 1.0);
        z.insert(b"c", 0.5);
        z.insert(b"b", -1.0);
        let members: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
        assert_eq!(members, [&b"b"[..], b"c", b"a"]);
        assert!(z.remove(b"c"));
        assert!(!z.remove(b"c"));
        assert_eq!(z.len(), 2);
    }

    #[test]
    fn a_hash_keeps_the_order_its_fields_were_first_set_in() {
        let mut h = Hash::default();
        assert!(h.set(b"x", b"1"));
        assert!(h.set(b"a", b"2"));
        assert!(!h.set(b"x", b"3"));
        let fields: Vec<(&[u8], &[u8])> = h.iter().collect();
        assert_eq!(fields, [(&b"x"[..], &b"3"[..]), (b"a", b"2")]);
    }
}

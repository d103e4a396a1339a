//! What a command answers, before it is put on the wire (see `resp`), and how a score is
//! written as text.

/// A command's reply, in the shape Redis gives it; the protocol of the connection (RESP2 or
/// RESP3) decides how it is written (see `resp`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// A simple string: `+OK`.
    Status(String),
    /// An error, its code first: `ERR syntax error`, `WRONGTYPE ...`.
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null reply (`$-1` in RESP2, `_` in RESP3).
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// A double: a bulk string in RESP2 (and to Lua), `,` in RESP3.
    Double(f64),
    /// A map: a flat array in RESP2 (and to Lua), `%` in RESP3.
    Map(Vec<(Reply, Reply)>),
    /// Pairs (`ZRANGE … WITHSCORES`): a flat array in RESP2 (and to Lua), an array of
    /// two-element arrays in RESP3.
    Pairs(Vec<(Reply, Reply)>),
    /// Text (`INFO`): a bulk string in RESP2, a verbatim string in RESP3.
    Verbatim(String),
    /// An out-of-band message (`smessage`): an array in RESP2, `>` in RESP3.
    Push(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }

    /// An error reply with `message` (which starts with its code).
    pub fn error(message: impl Into<String>) -> Reply {
        Reply::Error(message.into())
    }

    /// A bulk string of `text`.
    pub fn bulk(text: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(text.as_ref().to_vec())
    }

    /// Whether it is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// The errors several commands share, worded as Redis words them.
pub(crate) mod errors {
    pub(crate) const WRONGTYPE: &str =
        "WRONGTYPE Operation against a key holding the wrong kind of value";
    pub(crate) const SYNTAX: &str = "ERR syntax error";
    pub(crate) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    pub(crate) const NOT_FLOAT: &str = "ERR value is not a valid float";
    pub(crate) const RANGE_NOT_FLOAT: &str = "ERR min or max is not a float";
}

/// A score as Redis 7.0 writes it (`d2string`): an integral value within ±2⁵² as an integer
/// (`3`), anything else as C's `%.17g` (`1.5`, `0.10000000000000001`, `1e+20`), and `inf`,
/// `-inf`, `nan`.
pub fn format_double(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    const LIMIT: f64 = 4_503_599_627_370_496.0;
    if value > -LIMIT && value < LIMIT && value == value.trunc() {
        return format!("{}", value as i64);
    }
    format_g17(value)
}

/// C's `printf("%.17g", value)` for a finite, non-zero value.
pub(crate) fn format_g17(value: f64) -> String {
    const PRECISION: i32 = 17;
    // Seventeen significant digits in exponent form: d.dddddddddddddddde±x.
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, value);
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exponent) {
        let mantissa = trim_fraction(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = (PRECISION - 1 - exponent).max(0) as usize;
    trim_fraction(&format!("{value:.decimals$}")).to_owned()
}

/// `1.500` → `1.5`, `2.000` → `2`, `10` → `10`.
fn trim_fraction(text: &str) -> &str {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_written_as_redis_7_0_writes_them() {
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(-3.0), "-3");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.0e-5), "1.0000000000000001e-05");
        assert_eq!(format_double(1_764_383_000_123.0), "1764383000123");
        assert_eq!(format_double(2.5e15 + 0.5), "2500000000000000.5");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_double(0.0), "0");
    }
}

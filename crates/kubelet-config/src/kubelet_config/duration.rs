//! Go duration strings (`metav1.Duration`).
//!
//! Mirrors Go's `time.ParseDuration` and `time.Duration.String` (`src/time/format.go`,
//! `src/time/time.go`), which is what `k8s.io/apimachinery/pkg/apis/meta/v1.Duration`
//! uses for its JSON form. The only deliberate difference: [`Duration`] wraps
//! [`std::time::Duration`], which cannot be negative, so a negative duration other than
//! zero (`"-1s"`) is rejected when parsed.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SEC: u64 = 1_000_000_000;
/// Largest magnitude Go accepts before the sign is applied (`1 << 63`).
const GO_LIMIT: u64 = 1 << 63;

/// A non-negative span of time written as a Go duration string (`"1m30s"`, `"300ms"`).
///
/// Parsing accepts every form `time.ParseDuration` accepts: the units `ns`, `us`, `µs`
/// (U+00B5), `μs` (U+03BC), `ms`, `s`, `m` and `h`, several units in a row (`"1h30m"`),
/// fractions (`"1.5h"`, `".5s"`), a leading `+`, and the bare `"0"`. Formatting follows
/// `time.Duration.String`: `"1m0s"`, `"1h30m0s"`, `"300ms"`, `"1.5µs"`, `"0s"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(pub std::time::Duration);

/// Why a string is not a valid Go duration. Messages follow Go's, without the `time:` prefix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationParseError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or out of range.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit, such as `"10"`.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit that is not one of `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// A negative duration; Go accepts it but this type cannot represent it.
    #[error("invalid duration {0:?}: negative durations are not supported")]
    Negative(String),
}

impl Duration {
    /// The zero duration, which upstream's defaulting treats as "unset".
    pub const ZERO: Duration = Duration(std::time::Duration::ZERO);

    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Duration(std::time::Duration::from_secs(secs))
    }

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Duration(std::time::Duration::from_millis(millis))
    }

    /// A duration of `mins` minutes.
    pub const fn from_mins(mins: u64) -> Self {
        Duration(std::time::Duration::from_secs(mins * 60))
    }

    /// A duration of `hours` hours.
    pub const fn from_hours(hours: u64) -> Self {
        Duration(std::time::Duration::from_secs(hours * 3600))
    }

    /// The wrapped standard-library duration.
    pub const fn as_std(&self) -> std::time::Duration {
        self.0
    }

    /// Whether this is the zero duration.
    pub const fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// Parses a Go duration string, as `time.ParseDuration` does.
    pub fn parse(s: &str) -> Result<Self, DurationParseError> {
        parse_go_duration(s).map(|nanos| Duration(std::time::Duration::from_nanos(nanos)))
    }
}

impl From<std::time::Duration> for Duration {
    fn from(d: std::time::Duration) -> Self {
        Duration(d)
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

impl FromStr for Duration {
    type Err = DurationParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Duration::parse(s)
    }
}

/// Parses `s` into nanoseconds following Go's `time.ParseDuration` step by step.
fn parse_go_duration(orig: &str) -> Result<u64, DurationParseError> {
    let invalid = || DurationParseError::Invalid(orig.to_string());
    let mut s = orig;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        neg = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        // Consume [0-9]*.
        let (int_part, rest) = leading_int(s).ok_or_else(invalid)?;
        let pre = rest.len() != s.len();
        s = rest;
        // Consume (\.[0-9]*)?.
        let mut post = false;
        let (mut frac, mut scale) = (0u64, 1f64);
        if let Some(rest) = s.strip_prefix('.') {
            let (f, sc, rest2) = leading_fraction(rest);
            post = rest2.len() != rest.len();
            (frac, scale, s) = (f, sc, rest2);
        }
        if !pre && !post {
            return Err(invalid());
        }
        // Consume the unit: everything up to the next '.' or digit. Those are ASCII, so the
        // split always falls on a character boundary.
        let unit_len = s.bytes().position(|c| c == b'.' || c.is_ascii_digit()).unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationParseError::MissingUnit(orig.to_string()));
        }
        let (unit_str, rest) = s.split_at(unit_len);
        s = rest;
        let unit = unit_nanos(unit_str)
            .ok_or_else(|| DurationParseError::UnknownUnit { unit: unit_str.to_string(), input: orig.to_string() })?;
        if int_part > GO_LIMIT / unit {
            return Err(invalid());
        }
        let mut v = int_part * unit;
        if frac > 0 {
            // Go uses float64 here to stay nanosecond-accurate for fractions of hours.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > GO_LIMIT {
                return Err(invalid());
            }
        }
        total = total.checked_add(v).filter(|t| *t <= GO_LIMIT).ok_or_else(invalid)?;
    }
    if neg {
        return if total == 0 { Ok(0) } else { Err(DurationParseError::Negative(orig.to_string())) };
    }
    if total > GO_LIMIT - 1 {
        return Err(invalid());
    }
    Ok(total)
}

/// Go's `leadingInt`: the leading `[0-9]*` of `s`, or `None` on overflow.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for c in s.bytes().take(digits) {
        if x > GO_LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > GO_LIMIT {
            return None;
        }
    }
    Some((x, &s[digits..]))
}

/// Go's `leadingFraction`: the digits after a decimal point and their scale; digits that
/// would overflow are consumed but ignored.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    for c in s.bytes().take(digits) {
        if overflow {
            continue;
        }
        if x > (GO_LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > GO_LIMIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[digits..])
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// Go's `fmtFrac`: splits `v` into `v / 10^prec` and the fraction `.ddd` without trailing
/// zeros (empty when the fraction is zero).
fn split_frac(v: u128, prec: u32) -> (u128, String) {
    let pow = 10u128.pow(prec);
    let (int, rem) = (v / pow, v % pow);
    if rem == 0 {
        return (int, String::new());
    }
    let digits = format!("{rem:0width$}", width = prec as usize);
    (int, format!(".{}", digits.trim_end_matches('0')))
}

impl fmt::Display for Duration {
    /// Formats like Go's `time.Duration.String`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos < u128::from(NANOS_PER_SEC) {
            let (prec, unit) = match nanos {
                0 => return f.write_str("0s"),
                n if n < u128::from(NANOS_PER_MICRO) => (0, "ns"),
                n if n < u128::from(NANOS_PER_MILLI) => (3, "\u{00b5}s"),
                _ => (6, "ms"),
            };
            let (int, frac) = split_frac(nanos, prec);
            return write!(f, "{int}{frac}{unit}");
        }
        let (secs_total, frac) = split_frac(nanos, 9);
        let secs = secs_total % 60;
        let mins_total = secs_total / 60;
        if mins_total > 0 {
            let (hours, mins) = (mins_total / 60, mins_total % 60);
            if hours > 0 {
                write!(f, "{hours}h")?;
            }
            write!(f, "{mins}m")?;
        }
        write!(f, "{secs}{frac}s")
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string like \"1m30s\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        Duration::parse(v).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> std::time::Duration {
        Duration::parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).0
    }

    #[test]
    fn parses_all_units_and_forms() {
        use std::time::Duration as D;
        assert_eq!(p("0"), D::ZERO);
        assert_eq!(p("0s"), D::ZERO);
        assert_eq!(p("-0"), D::ZERO);
        assert_eq!(p("+5s"), D::from_secs(5));
        assert_eq!(p("10ns"), D::from_nanos(10));
        assert_eq!(p("10us"), D::from_micros(10));
        assert_eq!(p("10\u{00b5}s"), D::from_micros(10));
        assert_eq!(p("10\u{03bc}s"), D::from_micros(10));
        assert_eq!(p("300ms"), D::from_millis(300));
        assert_eq!(p("1m"), D::from_secs(60));
        assert_eq!(p("1h30m"), D::from_secs(5400));
        assert_eq!(p("1.5h"), D::from_secs(5400));
        assert_eq!(p(".5s"), D::from_millis(500));
        assert_eq!(p("1.s"), D::from_secs(1));
        assert_eq!(p("1h1m1s1ms1us1ns"), D::new(3661, 1_001_001));
        assert_eq!(p("2562047h47m16.854775807s"), D::from_nanos(i64::MAX as u64));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "abc", ".", "-.s", "s", "+-1s", "3000000h", "9223372036854775808ns"] {
            assert!(matches!(Duration::parse(bad), Err(DurationParseError::Invalid(_))), "{bad:?} should be invalid");
        }
        assert_eq!(Duration::parse("10").unwrap_err().to_string(), "missing unit in duration \"10\"");
        assert_eq!(Duration::parse("1d").unwrap_err().to_string(), "unknown unit \"d\" in duration \"1d\"");
        assert!(matches!(Duration::parse("-1s"), Err(DurationParseError::Negative(_))));
    }

    #[test]
    fn formats_like_go() {
        use std::time::Duration as D;
        let cases = [
            (D::ZERO, "0s"),
            (D::from_nanos(1), "1ns"),
            (D::from_nanos(1_100), "1.1\u{00b5}s"),
            (D::from_micros(2_200), "2.2ms"),
            (D::from_millis(300), "300ms"),
            (D::from_millis(1_500), "1.5s"),
            (D::from_secs(60), "1m0s"),
            (D::from_secs(5400), "1h30m0s"),
            (D::from_secs(4 * 3600), "4h0m0s"),
            (D::new(3661, 1), "1h1m1.000000001s"),
        ];
        for (d, want) in cases {
            assert_eq!(Duration(d).to_string(), want);
        }
    }

    #[test]
    fn round_trips() {
        for s in ["1m0s", "1h30m0s", "300ms", "0s", "1.5s", "2h0m0.5s", "1.1\u{00b5}s"] {
            let d: Duration = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(d.to_string(), s);
            let json = serde_json::to_string(&d).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(json, format!("\"{s}\""));
            let back: Duration = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, d);
        }
        // Non-canonical spellings normalise.
        assert_eq!(p("90s"), p("1m30s"));
        assert_eq!(Duration::from_secs(90).to_string(), "1m30s");
    }
}

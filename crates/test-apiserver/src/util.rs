//! Small helpers mirroring apimachinery: `metav1.Time` RFC 3339 timestamps (second precision),
//! `duration.HumanDuration` (the AGE column), UID generation (`uuid.NewUUID`) and URL query decoding.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The wall clock since the epoch: the one place that reads it (the apiserver stamps real times, as the
/// real one does; nothing here runs on tokio's paused clock).
#[allow(clippy::disallowed_methods)]
pub(crate) fn wall_clock() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

/// Seconds since the epoch, now.
pub fn now_secs() -> i64 {
    wall_clock().as_secs() as i64
}

/// `metav1.Time` as JSON: `2024-01-02T03:04:05Z`.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// Parses an RFC 3339 timestamp (`Z` or `±hh:mm`, optional fraction) to epoch seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    if let Some(r) = rest.strip_prefix('.') {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (rest.get(1..3)?.parse::<i64>().ok()? * 3600 + rest.get(4..6)?.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = if mo > 2 { mo - 3 } else { mo + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// `duration.HumanDuration` of apimachinery, as the AGE column shows it.
pub fn human_duration(d: i64) -> String {
    if d < -1 {
        return "<invalid>".into();
    }
    let s = d.max(0);
    let (min, hour, day, year) = (60, 3600, 86_400, 365 * 86_400);
    if s < 2 * min {
        format!("{s}s")
    } else if s < 10 * min {
        let (m, sec) = (s / min, s % min);
        if sec == 0 { format!("{m}m") } else { format!("{m}m{sec}s") }
    } else if s < 3 * hour {
        format!("{}m", s / min)
    } else if s < 8 * hour {
        let (h, m) = (s / hour, (s % hour) / min);
        if m == 0 { format!("{h}h") } else { format!("{h}h{m}m") }
    } else if s < 48 * hour {
        format!("{}h", s / hour)
    } else if s < 8 * day {
        let (dd, h) = (s / day, (s % day) / hour);
        if h == 0 { format!("{dd}d") } else { format!("{dd}d{h}h") }
    } else if s < 2 * year {
        format!("{}d", s / day)
    } else if s < 8 * year {
        let (y, dd) = (s / year, (s % year) / day);
        if dd == 0 { format!("{y}y") } else { format!("{y}y{dd}d") }
    } else {
        format!("{}y", s / year)
    }
}

/// The age of a timestamp as the AGE column shows it (`<unknown>` without one).
pub fn age(ts: Option<&Value>) -> String {
    match ts.and_then(Value::as_str).and_then(parse_rfc3339) {
        Some(t) => human_duration(now_secs() - t),
        None => "<unknown>".into(),
    }
}

static UID_COUNTER: AtomicU64 = AtomicU64::new(1);

/// A random version-4 UUID (`8-4-4-4-12` hex), unique in the process.
pub fn new_uid() -> String {
    let n = UID_COUNTER.fetch_add(1, Ordering::Relaxed);
    let rand = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n ^ salt);
        h.write_u128(wall_clock().as_nanos());
        h.finish()
    };
    let hi = rand(0x5bd1_e995);
    let lo = rand(0x9e37_79b9) ^ n.rotate_left(17);
    let hi = (hi & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    let lo = (lo & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// A random lowercase alphanumeric suffix of `n` characters, as `generateName` uses
/// (`utilrand.String`, which avoids vowels and confusable characters).
pub fn random_suffix(n: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let uid = new_uid().replace('-', "");
    let mut v = u128::from_str_radix(&uid, 16).unwrap_or(7);
    (0..n)
        .map(|_| {
            let c = ALPHABET[(v % ALPHABET.len() as u128) as usize] as char;
            v /= ALPHABET.len() as u128;
            c
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Decodes a URL query (`a=b&c=d`) into a map (the last value of a repeated key wins).
pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    parse_query_pairs(q).into_iter().collect()
}

/// Percent-encodes a query value (everything but unreserved characters), as `url.QueryEscape` without `+`.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The query's pairs in order, repeated keys kept (`command=sh&command=-c`).
pub fn parse_query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// A dotted field path of a JSON object as a string (`""` when absent), as field selectors see it.
pub fn field_string(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (how `[]byte` fields appear in JSON).
pub fn base64_encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional, whitespace ignored).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = B64.iter().position(|x| *x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20.123+01:00"), Some(1_700_000_000));
    }

    #[test]
    fn b64() {
        for s in ["", "a", "ab", "abc", "abcd", "hello world!"] {
            let e = base64_encode(s.as_bytes());
            assert_eq!(base64_decode(&e).unwrap(), s.as_bytes());
        }
        assert_eq!(base64_encode(b"ab"), "YWI=");
    }

    #[test]
    fn human() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(3 * 86_400), "3d");
    }

    #[test]
    fn query_and_uid() {
        let q = parse_query(Some("labelSelector=a%3Db%2Cc!%3Dd&watch=1&x"));
        assert_eq!(q["labelSelector"], "a=b,c!=d");
        assert_eq!(q["x"], "");
        let (a, b) = (new_uid(), new_uid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }
}

//! Kubernetes resource quantities (`apimachinery/pkg/api/resource`), as far as the kubelet reads them.

/// Parses a Kubernetes quantity (`100m`, `1`, `64Mi`, `1G`, `1e3`) into a number of base units: upstream's grammar
/// ([`ParsedQuantity::parse`]), as a float; `None` for what the apiserver would refuse.
pub fn parse_quantity(s: &str) -> Option<f64> {
    ParsedQuantity::parse(s.trim()).ok().map(|q| q.as_f64())
}

/// Upstream's regular expression for a quantity (`splitREString`), as its error message quotes it.
pub const QUANTITY_REGEX: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Why a quantity does not parse: upstream's `ErrFormatWrong`, `ErrNumeric` and `ErrSuffix`, with their texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not have the shape of a quantity.
    #[error("quantities must match the regular expression '{}'", QUANTITY_REGEX)]
    FormatWrong,
    /// The number cannot be read.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not one of the known ones.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// How a quantity was written, which decides how it prints (`resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityFormat {
    /// `12e6`.
    DecimalExponent,
    /// `12Mi`.
    BinarySI,
    /// `12M`.
    DecimalSI,
}

/// An exactly parsed quantity (`resource.ParseQuantity`): sign, decimal digits and a power of ten, so values
/// compare and print as upstream's arbitrary-precision ones do (no float rounding). Values are rounded up (away
/// from zero) to a nano unit, and binary-suffixed ones are capped at 2^63-1, as upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedQuantity {
    negative: bool,
    /// Most significant first, no leading or trailing zeros; empty for zero.
    digits: Vec<u8>,
    /// The value is `digits × 10^exp`.
    exp: i64,
    format: QuantityFormat,
}

/// Splits a quantity into sign, number and suffix as upstream's `parseQuantityString` does.
struct Parts<'a> {
    positive: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

fn split_quantity(s: &str) -> Result<Parts<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if pos < end {
        match b[0] {
            b'-' => {
                positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    let zero = Parts { positive, num: "0", denom: "", suffix: "" };
    if pos >= end {
        return Ok(zero);
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = if pos == num_start { "0" } else { &s[num_start..pos] };
    if pos >= end {
        return Ok(Parts { num, ..zero });
    }
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
        if pos >= end {
            return Ok(Parts { num, denom, ..zero });
        }
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Parts { positive, num, denom, suffix: &s[suffix_start..] })
}

/// Base and exponent of a suffix (`suffixHandler.interpret`).
fn interpret_suffix(suffix: &str) -> Option<(u32, i64, QuantityFormat)> {
    let dec = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = dec {
        return Some((10, e, QuantityFormat::DecimalSI));
    }
    let bin = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = bin {
        return Some((2, e, QuantityFormat::BinarySI));
    }
    if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) {
        // Go's ParseInt(…, 10, 64) then a conversion to int32, which wraps.
        let parsed: i64 = suffix[1..].parse().ok()?;
        return Some((10, i64::from(parsed as i32), QuantityFormat::DecimalExponent));
    }
    None
}

/// Multiplies a big decimal (most significant digit first) by a small factor.
fn mul_small(digits: &mut Vec<u8>, factor: u32) {
    let mut carry: u64 = 0;
    for d in digits.iter_mut().rev() {
        let v = u64::from(*d) * u64::from(factor) + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

/// Compares two magnitudes `a × 10^ea` and `b × 10^eb` (normalised digits).
fn cmp_magnitude(a: &[u8], ea: i64, b: &[u8], eb: i64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let (ta, tb) = (a.len() as i64 + ea, b.len() as i64 + eb);
    if ta != tb {
        return ta.cmp(&tb);
    }
    let n = a.len().max(b.len());
    for i in 0..n {
        let (x, y) = (a.get(i).copied().unwrap_or(0), b.get(i).copied().unwrap_or(0));
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

impl ParsedQuantity {
    /// Parses `s` exactly as upstream's `ParseQuantity` (no surrounding whitespace is accepted; upstream's JSON
    /// decoding trims it first).
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::FormatWrong);
        }
        if s == "0" {
            return Ok(Self::zero(QuantityFormat::DecimalSI));
        }
        let parts = split_quantity(s)?;
        let (base, exponent, mut format) = interpret_suffix(parts.suffix).ok_or(QuantityError::Suffix)?;
        let mut digits: Vec<u8> = parts.num.bytes().chain(parts.denom.bytes()).map(|c| c - b'0').collect();
        let mut exp = -(parts.denom.len() as i64);
        if base == 10 {
            exp += exponent;
        } else {
            for _ in 0..exponent {
                mul_small(&mut digits, 2);
            }
        }
        let mut q = Self { negative: !parts.positive, digits, exp, format };
        q.normalize();
        q.round_up(-9);
        if format == QuantityFormat::BinarySI {
            let max = Self::from_i128(i128::from(i64::MAX), format);
            if cmp_magnitude(&q.digits, q.exp, &max.digits, max.exp).is_gt() {
                q.digits = max.digits;
                q.exp = max.exp;
            }
            let one = [1u8];
            if !q.digits.is_empty() && cmp_magnitude(&q.digits, q.exp, &one, 0).is_lt() {
                format = QuantityFormat::DecimalSI;
            }
        }
        q.format = format;
        Ok(q)
    }

    fn zero(format: QuantityFormat) -> Self {
        Self { negative: false, digits: vec![], exp: 0, format }
    }

    fn from_i128(v: i128, format: QuantityFormat) -> Self {
        let negative = v < 0;
        let digits = v.unsigned_abs().to_string().bytes().map(|c| c - b'0').collect();
        let mut q = Self { negative, digits, exp: 0, format };
        q.normalize();
        q
    }

    fn normalize(&mut self) {
        let lead = self.digits.iter().take_while(|d| **d == 0).count();
        self.digits.drain(..lead);
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
        if self.digits.is_empty() {
            self.exp = 0;
            self.negative = false;
        }
    }

    /// Rounds away from zero to a multiple of `10^scale` (`Quantity.RoundUp` and the nano rounding of parsing).
    pub fn round_up(&mut self, scale: i64) {
        if self.digits.is_empty() || self.exp >= scale {
            return;
        }
        let drop = (scale - self.exp) as u128;
        if drop >= self.digits.len() as u128 {
            self.digits = vec![1];
        } else {
            // Normalised: the last digit is not zero, so something non-zero is dropped.
            let keep = self.digits.len() - drop as usize;
            self.digits.truncate(keep);
            let mut i = keep;
            loop {
                if i == 0 {
                    self.digits.insert(0, 1);
                    break;
                }
                i -= 1;
                if self.digits[i] == 9 {
                    self.digits[i] = 0;
                } else {
                    self.digits[i] += 1;
                    break;
                }
            }
        }
        self.exp = scale;
        self.normalize();
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether the value is a whole number (upstream: `MilliValue() % 1000 == 0`).
    pub fn is_integer(&self) -> bool {
        self.exp >= 0
    }

    /// The value rounded up to a whole number (`Quantity.Value`), if it fits.
    pub fn value(&self) -> Option<i128> {
        let mut q = self.clone();
        q.round_up(0);
        let mut v: i128 = 0;
        for d in &q.digits {
            v = v.checked_mul(10)?.checked_add(i128::from(*d))?;
        }
        for _ in 0..q.exp {
            v = v.checked_mul(10)?;
        }
        Some(if q.negative { -v } else { v })
    }

    /// The value as a float (for comparisons where exactness does not matter).
    pub fn as_f64(&self) -> f64 {
        let s: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let v: f64 = format!("{}e{}", if s.is_empty() { "0" } else { &s }, self.exp).parse().unwrap_or(0.0);
        if self.negative { -v } else { v }
    }

    fn canonical_decimal(&self, format: QuantityFormat) -> String {
        let mut digits = self.digits.clone();
        let mut exp = self.exp;
        while exp % 3 != 0 {
            digits.push(0);
            exp -= 1;
        }
        let number: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
        let si = match exp {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        let suffix = match (format, si) {
            (QuantityFormat::DecimalSI, Some(s)) => s.to_string(),
            (_, _) if exp == 0 => String::new(),
            _ => format!("e{exp}"),
        };
        format!("{}{number}{suffix}", if self.negative { "-" } else { "" })
    }
}

impl ParsedQuantity {
    /// Compares values (`Quantity.Cmp`), whatever their formats.
    pub fn cmp_value(&self, other: &Self) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => cmp_magnitude(&self.digits, self.exp, &other.digits, other.exp),
            (true, true) => cmp_magnitude(&other.digits, other.exp, &self.digits, self.exp),
        }
    }
}

/// The canonical form (`Quantity.String`): `1.5` prints `1500m`, `1.5Gi` prints `1536Mi`, `1000` prints `1k`.
impl std::fmt::Display for ParsedQuantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.digits.is_empty() {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == QuantityFormat::BinarySI {
            let small = cmp_magnitude(&self.digits, self.exp, &[1, 0, 2, 4], 0).is_lt();
            if small || !self.is_integer() {
                format = QuantityFormat::DecimalSI;
            }
        }
        if format != QuantityFormat::BinarySI {
            return f.write_str(&self.canonical_decimal(format));
        }
        // Binary values are capped at 2^63-1, so they fit.
        let mut v = self.value().unwrap_or(0).unsigned_abs();
        let mut e = 0;
        while v.is_multiple_of(1024) && e < 6 {
            v /= 1024;
            e += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][e];
        write!(f, "{}{v}{suffix}", if self.negative { "-" } else { "" })
    }
}

/// A byte count as a binary-SI quantity prints (`resource.NewQuantity(n, BinarySI).String()`): the largest
/// power-of-1024 suffix that divides it exactly (`1536Ki`, `100Mi`); amounts that no suffix divides as plain numbers.
pub fn binary_si(bytes: i64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut v, mut i) = (bytes, 0);
    while i + 1 < suffixes.len() && v % 1024 == 0 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", suffixes[i])
}

/// Millicores as a decimal-SI quantity prints (`resource.NewMilliQuantity(m, DecimalSI).String()`: `250m`, `1`).
pub fn milli_string(milli: i64) -> String {
    ParsedQuantity::parse(&format!("{milli}m")).map(|q| q.to_string()).unwrap_or_else(|_| format!("{milli}m"))
}

#[cfg(test)]
mod exact_tests {
    use super::*;

    fn p(s: &str) -> ParsedQuantity {
        ParsedQuantity::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_as_upstream() {
        for (input, canonical) in [
            ("0", "0"),
            ("100m", "100m"),
            ("1.5", "1500m"),
            ("1.5Gi", "1536Mi"),
            ("1000", "1k"),
            ("128Mi", "128Mi"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("0.1m", "100u"),
            ("0.0000000001", "1n"),
            ("-1k", "-1k"),
            ("+2", "2"),
            ("1.", "1"),
            ("0.5Ki", "512"),
            ("1025Ki", "1025Ki"),
            ("3Ei", "3Ei"),
            ("9Ei", "9223372036854775807"),
            ("12E", "12E"),
            ("007", "7"),
        ] {
            assert_eq!(p(input).to_string(), canonical, "{input}");
        }
        assert!(p("1Ki").cmp_value(&p("1024")).is_eq(), "values compare whatever the format");
        assert!(p("1Gi").cmp_value(&p("1G")).is_gt());
        assert!(p("500m").cmp_value(&p("0.5")).is_eq());
        assert!(p("-1").cmp_value(&p("0")).is_lt());
        assert!(!p("1.5").is_integer() && p("2k").is_integer());
        assert_eq!(p("2Mi").value(), Some(2 * 1024 * 1024));
        assert_eq!(p("1.2").value(), Some(2));
    }

    #[test]
    fn errors_have_upstreams_texts() {
        let regex = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
        for bad in ["", "lots", "1 Gi", "1e", "1Mi2", "--1"] {
            let e = ParsedQuantity::parse(bad).unwrap_err();
            assert!(matches!(e, QuantityError::FormatWrong | QuantityError::Suffix), "{bad}: {e:?}");
        }
        assert_eq!(ParsedQuantity::parse("lots").unwrap_err().to_string(), regex);
        assert_eq!(ParsedQuantity::parse("1iM").unwrap_err().to_string(), "unable to parse quantity's suffix");
        assert_eq!(ParsedQuantity::parse("1e").unwrap_err(), QuantityError::Suffix);
    }
}

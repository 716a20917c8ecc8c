//! The text exposition format 0.0.4, as client_golang's `expfmt` writes it.

use std::fmt::Write as _;

/// A float as client_golang writes it (`writeFloat`: `1`, `0`, `-1`, `NaN`, `+Inf`, `-Inf` spelled out, else
/// `strconv.FormatFloat(v, 'g', -1, 64)`: the shortest digits, with an exponent when it is below -4 or at least
/// 6, e.g. `1.048576e+06`, `1e-05`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == 0.0 {
        return "0".into();
    }
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').expect("LowerExp writes an exponent");
    let exp: i32 = exp.parse().expect("LowerExp writes an integer exponent");
    if (-4..6).contains(&exp) {
        return format!("{v}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Escapes HELP text: backslash and newline.
pub(crate) fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Writes one sample line: `name{labels,le="x"} value`.
pub(crate) fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    names: &[&str],
    values: &[String],
    le: Option<&str>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !names.is_empty() || le.is_some() {
        out.push('{');
        let mut first = true;
        for (n, val) in names.iter().zip(values) {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "{n}=\"{}\"", escape_label(val));
        }
        if let Some(le) = le {
            if !first {
                out.push(',');
            }
            let _ = write!(out, "le=\"{le}\"");
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", format_float(v));
}

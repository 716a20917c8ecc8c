//! The text exposition format 0.0.4, as client_golang's `expfmt` writes it.

use std::fmt::Write as _;

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` would render a sample value closely enough for
/// every parser: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v != 0.0 && (v.abs() >= 1e21 || v.abs() < 1e-6) {
        // Go switches to an exponent for large or tiny values; keep the digits short.
        let s = format!("{v:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{:0>2}", e),
            Some((m, e)) => format!("{m}e-{:0>2}", e.trim_start_matches('-')),
            None => s,
        }
    } else {
        format!("{v}")
    }
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

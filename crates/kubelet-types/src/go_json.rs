//! JSON as Go's `encoding/json` writes it, for files and hashes another kubelet reads (checkpoints, credential
//! cache keys): Go escapes `<`, `>`, `&`, U+2028 and U+2029 inside strings, where serde_json writes them as they
//! are. In JSON text those characters only occur inside strings, so replacing them is exact.

/// `json` (serde_json's output) with Go's escapes.
pub fn escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn gos_escapes() {
        assert_eq!(super::escape("{\"p\":\"a<b>&c\u{2028}\"}"), r#"{"p":"a\u003cb\u003e\u0026c\u2028"}"#);
    }
}

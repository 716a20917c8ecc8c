//! The container spec hash written as `io.kubernetes.container.hash` (`pkg/kubelet/container/helpers.go`,
//! `HashContainer`).
//!
//! Upstream hashes only the fields a running container may change in place (name and image), as FNV-32a over
//! the JSON of that map; a changed hash means the container must be replaced.

use k8s_openapi::api::core::v1::Container;

/// FNV-32a of `data`.
fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Escapes a string as Go's `encoding/json` does (HTML-safe).
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", ch as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The hash of a container spec.
pub fn hash_container(c: &Container) -> u64 {
    let image = c.image.as_deref().unwrap_or("");
    let json = format!("{{\"image\":{},\"name\":{}}}", go_json_string(image), go_json_string(&c.name));
    // Upstream feeds the JSON bytes through its object dumper (`([]uint8)[...]`) before hashing.
    let dumped = format!("([]uint8)[{}]", json.as_bytes().iter().map(|b| b.to_string()).collect::<Vec<_>>().join(" "));
    u64::from(fnv32a(dumped.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_name_and_image_only() {
        let mut c = Container { name: "app".into(), image: Some("busybox:1".into()), ..Default::default() };
        let h = hash_container(&c);
        c.args = Some(vec!["x".into()]);
        assert_eq!(hash_container(&c), h);
        c.image = Some("busybox:2".into());
        assert_ne!(hash_container(&c), h);
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
    }
}

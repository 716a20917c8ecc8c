//! Small syntax checks that validation borrows from other upstream packages: names, label values and ports of
//! `k8s.io/apimachinery/pkg/util/validation` (through [`crate::validation::names`], which the pod validation
//! shares), `pkg/util/taints` (`CheckTaintValidation`), `k8s.io/utils/cpuset`
//! (`Parse`), Go's `path/filepath.Clean`, the allowlist patterns of
//! `pkg/kubelet/images/pullmanager` and the endpoint check of component-base tracing.

use k8s_openapi::api::core::v1::Taint;

use crate::validation::names::{is_label_value, is_qualified_name, is_valid_port_num};

/// `IsValidPortNum`: 1 to 65535.
pub(crate) fn is_valid_port(port: i32) -> bool {
    is_valid_port_num(i64::from(port)).is_empty()
}

/// `IsQualifiedName`'s errors joined as upstream joins them, or None.
pub(crate) fn qualified_name_error(value: &str) -> Option<String> {
    let errs = is_qualified_name(value);
    (!errs.is_empty()).then(|| errs.join("; "))
}

/// `CheckTaintValidation` of `pkg/util/taints`.
pub(crate) fn check_taint(taint: &Taint) -> Result<(), String> {
    if let Some(err) = qualified_name_error(&taint.key) {
        return Err(format!("invalid taint key: {err}"));
    }
    if let Some(err) = taint.value.as_deref().map(is_label_value).filter(|e| !e.is_empty()).map(|e| e.join("; ")) {
        return Err(format!("invalid taint value: {err}"));
    }
    if !taint.effect.is_empty() && !matches!(taint.effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!("invalid taint effect: {}, unsupported taint effect", taint.effect));
    }
    Ok(())
}

/// `cpuset.Parse`: a comma-separated list of CPU numbers and inclusive ranges (`0-3,8`).
pub fn parse_cpu_set(s: &str) -> Result<Vec<(u64, u64)>, String> {
    kubelet_types::cpuset::parse_ranges(s)
}

/// Go's `filepath.Clean` for Unix paths: the shortest lexically equivalent path.
pub(crate) fn clean_path(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// `getAllowlistImagePattern` of the image pull manager: either an image name without tag
/// or digest, or a prefix ending in `/*`.
///
/// Upstream parses non-wildcard patterns with `reference.ParseNormalizedNamed` and demands
/// the fully qualified form; this check approximates that parser.
pub(crate) fn allowlist_pattern_error(pattern: &str) -> Option<String> {
    if pattern != pattern.trim() {
        return Some(format!("leading/trailing spaces are not allowed: {pattern}"));
    }
    let (trimmed, wildcard) = match pattern.strip_suffix('*') {
        Some(prefix) if pattern.ends_with("/*") => (prefix, true),
        _ => (pattern, false),
    };
    if trimmed.is_empty() {
        return Some(format!("the supplied pattern is too short: {pattern}"));
    }
    if trimmed.contains('*') {
        return Some(format!("not a valid wildcard pattern, only patterns ending with '/*' are allowed: {pattern}"));
    }
    if wildcard {
        return (trimmed.len() == 1).then(|| "at least registry hostname is required".to_string());
    }
    let last_component = trimmed.rsplit('/').next().unwrap_or(trimmed);
    if trimmed.contains('@') || last_component.contains(':') {
        return Some(format!("neither tag nor digest is accepted in an image reference: {pattern}"));
    }
    let (domain, path) = trimmed.split_once('/').unwrap_or(("", trimmed));
    let qualified_domain =
        !domain.is_empty() && (domain.contains('.') || domain.contains(':') || domain == "localhost");
    let path_ok = !path.is_empty()
        && path.split('/').all(|component| {
            !component.is_empty()
                && component
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
        });
    if !qualified_domain || !path_ok {
        return Some(format!("failed to parse as a fully qualified image name: {pattern}"));
    }
    None
}

/// The scheme check of component-base tracing's `validateEndpoint`: the endpoint (with
/// `dns://` prepended when it has no `//`) must use `dns`, `unix` or `unix-abstract`.
pub(crate) fn tracing_endpoint_error(endpoint: &str) -> Option<String> {
    let endpoint = if endpoint.contains("//") { endpoint.to_string() } else { format!("dns://{endpoint}") };
    // Go's url.getScheme: letters, then letters, digits, '+', '-' or '.', up to ':'.
    let mut scheme = "";
    for (i, c) in endpoint.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Some("missing protocol scheme".to_string()),
            ':' => {
                scheme = &endpoint[..i];
                break;
            }
            _ => break,
        }
    }
    let scheme = scheme.to_ascii_lowercase();
    if matches!(scheme.as_str(), "dns" | "unix" | "unix-abstract") {
        None
    } else {
        Some(format!(
            "unsupported scheme: {scheme}. options are none, dns, unix, or unix-abstract. see https://github.com/grpc/grpc/blob/master/doc/naming.md"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        assert_eq!(qualified_name_error("node-role.kubernetes.io/control-plane"), None);
        assert_eq!(qualified_name_error("dedicated"), None);
        assert!(qualified_name_error("").is_some());
        assert!(qualified_name_error("/x").is_some());
        assert!(qualified_name_error("Bad_Prefix/x").is_some());
        assert!(qualified_name_error("a/b/c").is_some());
        assert!(qualified_name_error("-x").is_some());
    }

    #[test]
    fn cpu_sets() {
        assert_eq!(parse_cpu_set(""), Ok(vec![]));
        assert_eq!(parse_cpu_set("0-3,8"), Ok(vec![(0, 3), (8, 8)]));
        assert!(parse_cpu_set("3-1").is_err());
        assert!(parse_cpu_set("a").is_err());
        assert!(parse_cpu_set("1,").is_err());
    }

    #[test]
    fn clean_paths() {
        for (input, want) in [
            ("/var/log/pods", "/var/log/pods"),
            ("/var/log/pods/", "/var/log/pods"),
            ("/var//log/./pods", "/var/log/pods"),
            ("/var/log/../pods", "/var/pods"),
            ("/..", "/"),
            ("a/../..", ".."),
            ("", "."),
        ] {
            assert_eq!(clean_path(input), want, "{input}");
        }
    }

    #[test]
    fn allowlist_patterns() {
        assert_eq!(allowlist_pattern_error("registry.k8s.io/pause"), None);
        assert_eq!(allowlist_pattern_error("registry.k8s.io/*"), None);
        assert_eq!(allowlist_pattern_error("localhost:5000/a/b"), None);
        assert!(allowlist_pattern_error("registry.k8s.io/pause:3.10").is_some());
        assert!(allowlist_pattern_error("registry.k8s.io/pa*").is_some());
        assert!(allowlist_pattern_error("/*").is_some());
        assert!(allowlist_pattern_error("nginx").is_some());
    }

    #[test]
    fn tracing_endpoints() {
        assert_eq!(tracing_endpoint_error("localhost:4317"), None);
        assert_eq!(tracing_endpoint_error("unix:///run/otel.sock"), None);
        assert!(tracing_endpoint_error("http://collector:4317").is_some());
    }
}

//! Small syntax checks that validation borrows from other upstream packages:
//! `k8s.io/apimachinery/pkg/util/validation` (qualified names, label values, DNS
//! subdomains, ports), `pkg/util/taints` (`CheckTaintValidation`), `k8s.io/utils/cpuset`
//! (`Parse`), Go's `path/filepath.Clean`, the allowlist patterns of
//! `pkg/kubelet/images/pullmanager` and the endpoint check of component-base tracing.

use k8s_openapi::api::core::v1::Taint;

const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
const LABEL_VALUE_MAX_LENGTH: usize = 63;
const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
const QUALIFIED_NAME_FORMAT: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// `IsValidPortNum`: 1 to 65535.
pub(crate) fn is_valid_port(port: i32) -> bool {
    (1..=65535).contains(&port)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the shape of qualified names and label
/// values.
fn is_qualified_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `IsDNS1123Subdomain`: lower-case labels of `[a-z0-9-]` separated by dots.
fn dns1123_subdomain_error(s: &str) -> Option<String> {
    if s.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        return Some(format!("must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters"));
    }
    let label_ok = |label: &str| {
        let b = label.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(l)) => {
                (f.is_ascii_lowercase() || f.is_ascii_digit())
                    && (l.is_ascii_lowercase() || l.is_ascii_digit())
                    && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    };
    if s.split('.').all(label_ok) {
        None
    } else {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".to_string())
    }
}

/// `IsQualifiedName`: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters.
pub(crate) fn qualified_name_error(value: &str) -> Option<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return Some("prefix part must be non-empty".to_string());
            }
            if let Some(err) = dns1123_subdomain_error(prefix) {
                return Some(format!("prefix part {err}"));
            }
            *name
        }
        _ => {
            return Some(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                    .to_string(),
            );
        }
    };
    if name.is_empty() {
        Some("name part must be non-empty".to_string())
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        Some(format!("name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters"))
    } else if !is_qualified_token(name) {
        Some(QUALIFIED_NAME_FORMAT.to_string())
    } else {
        None
    }
}

/// `IsValidLabelValue`: empty, or at most 63 characters of the qualified-name shape.
fn label_value_error(value: &str) -> Option<String> {
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        Some(format!("must be no more than {LABEL_VALUE_MAX_LENGTH} characters"))
    } else if !value.is_empty() && !is_qualified_token(value) {
        Some("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_string())
    } else {
        None
    }
}

/// `CheckTaintValidation` of `pkg/util/taints`.
pub(crate) fn check_taint(taint: &Taint) -> Result<(), String> {
    if let Some(err) = qualified_name_error(&taint.key) {
        return Err(format!("invalid taint key: {err}"));
    }
    if let Some(err) = taint.value.as_deref().and_then(label_value_error) {
        return Err(format!("invalid taint value: {err}"));
    }
    if !taint.effect.is_empty() && !matches!(taint.effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!("invalid taint effect: {}, unsupported taint effect", taint.effect));
    }
    Ok(())
}

/// `cpuset.Parse`: a comma-separated list of CPU numbers and inclusive ranges (`0-3,8`).
pub(crate) fn parse_cpu_set(s: &str) -> Result<Vec<(u64, u64)>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    let atoi = |v: &str| v.parse::<u64>().map_err(|_| format!("strconv.Atoi: parsing {v:?}: invalid syntax"));
    s.split(',')
        .map(|range| match range.split_once('-') {
            None => atoi(range).map(|cpu| (cpu, cpu)),
            Some((start, end)) => {
                let (start, end) = (atoi(start)?, atoi(end)?);
                if start > end { Err(format!("invalid range {range:?} ({start} > {end})")) } else { Ok((start, end)) }
            }
        })
        .collect()
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

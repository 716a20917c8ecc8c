//! Syntax checks of names and values and their messages
//! (`staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`, `…/api/validate/content/`,
//! `…/util/validation/ip.go`), and the label and annotation checks of object metadata
//! (`…/apis/meta/v1/validation`, `…/api/validation/objectmeta.go`). Each `is_*` returns upstream's messages,
//! empty when the value is valid.

use std::collections::BTreeMap;

use super::field::{ErrorList, Path, invalid, too_long};

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const ENV_VAR_NAME_FMT: &str = "[-._a-zA-Z][-._a-zA-Z0-9]*";
const ENV_VAR_NAME_ERR: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const HTTP_HEADER_NAME_FMT: &str = "[-A-Za-z0-9]+";
const HTTP_HEADER_NAME_ERR: &str = "a valid HTTP header must consist of alphanumeric characters or '-'";

/// Upstream's `TotalAnnotationSizeLimitB`.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// `MaxLenError`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `RegexError`.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!("{msg} (e.g. {}regex used for validation is '{fmt}')", ex.join(" or "))
}

/// `InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|c| edge(*c) || *c == b'-')
}

fn subdomain_ok(s: &str) -> bool {
    s.split('.').all(label_ok)
}

/// `IsDNS1123Label`.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = vec![];
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !label_ok(s) {
        if subdomain_ok(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = vec![];
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !subdomain_ok(s) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `maskTrailingDash` of the generic name checks, for names used as prefixes (upstream drops two bytes). A cut
/// inside a character leaves Go invalid UTF-8 that the subdomain check refuses; here the replacement character
/// is refused the same way.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", String::from_utf8_lossy(&name.as_bytes()[..name.len() - 2]))
    } else {
        name.to_string()
    }
}

/// `NameIsDNSSubdomain`.
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix { is_dns1123_subdomain(&mask_trailing_dash(name)) } else { is_dns1123_subdomain(name) }
}

fn label_key_name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` (a label key): an optional DNS subdomain prefix and `/`, then a name of at most 63.
pub fn is_qualified_name(s: &str) -> Vec<String> {
    let mut errs = vec![];
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(is_dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !label_key_name_ok(name) {
        errs.push(format!(
            "name part {}",
            regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn is_label_value(s: &str) -> Vec<String> {
    let mut errs = vec![];
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !s.is_empty() && !label_key_name_ok(s) {
        errs.push(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

fn ch_dir_prefix(s: &str) -> Option<String> {
    match s {
        "." => Some("must not be '.'".into()),
        ".." => Some("must not be '..'".into()),
        s if s.starts_with("..") => Some("must not start with '..'".into()),
        _ => None,
    }
}

/// `IsEnvVarName` (the strict form: static pods are validated without the relaxed option).
pub fn is_env_var_name(s: &str) -> Vec<String> {
    let mut errs = vec![];
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || matches!(b[0], b'-' | b'.' | b'_'))
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(ENV_VAR_NAME_ERR, ENV_VAR_NAME_FMT, &["my.env-name", "MY_ENV.NAME", "MyEnvName1"]));
    }
    errs.extend(ch_dir_prefix(s));
    errs
}

/// `IsConfigMapKey`.
pub fn is_config_map_key(s: &str) -> Vec<String> {
    let mut errs = vec![];
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')) {
        errs.push(regex_error(CONFIG_MAP_KEY_ERR, CONFIG_MAP_KEY_FMT, &["key.name", "KEY_NAME", "key-name"]));
    }
    errs.extend(ch_dir_prefix(s));
    errs
}

/// `IsValidPortNum`.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) { vec![] } else { vec![inclusive_range_error(1, 65535)] }
}

/// `IsValidPortName`.
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = vec![];
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty() || !port.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// `IsValidUserID` and `IsValidGroupID`: 0 to 2^31-1.
pub fn is_valid_id(id: i64) -> Vec<String> {
    if (0..=i64::from(i32::MAX)).contains(&id) { vec![] } else { vec![inclusive_range_error(0, i32::MAX.into())] }
}

/// `IsHTTPHeaderName`.
pub fn is_http_header_name(s: &str) -> Vec<String> {
    if !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        vec![]
    } else {
        vec![regex_error(HTTP_HEADER_NAME_ERR, HTTP_HEADER_NAME_FMT, &["X-Header-Name"])]
    }
}

/// Go's `net.ParseIP` as `netutils.ParseIPSloppy` uses it: IPv4 octets may have leading zeros.
fn parse_ip_sloppy(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|c| c.is_ascii_digit()))
        && parts.iter().all(|p| p.parse::<u16>().is_ok_and(|v| v <= 255))
}

/// `IsValidIPForLegacyField` (without the `StrictIPCIDRValidation` gate, off by default).
pub fn validate_ip_legacy(path: &Path, value: &str) -> ErrorList {
    let mut errs = ErrorList::default();
    if !parse_ip_sloppy(value) {
        errs.push(invalid(path, value, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"));
    }
    errs
}

/// Each message of `msgs` as an `Invalid` error of `value` at `path`.
pub fn invalid_each(path: &Path, value: &str, msgs: Vec<String>) -> ErrorList {
    ErrorList(msgs.into_iter().map(|m| invalid(path, value, m)).collect())
}

/// `ValidateDNS1123Label`.
pub fn validate_dns1123_label(value: &str, path: &Path) -> ErrorList {
    invalid_each(path, value, is_dns1123_label(value))
}

/// `ValidateDNS1123Subdomain`.
pub fn validate_dns1123_subdomain(value: &str, path: &Path) -> ErrorList {
    invalid_each(path, value, is_dns1123_subdomain(value))
}

/// `ValidateQualifiedName` (and `ValidateLabelName`).
pub fn validate_qualified_name(value: &str, path: &Path) -> ErrorList {
    invalid_each(path, value, is_qualified_name(value))
}

/// `ValidateLabels`: keys are qualified names, values label values; errors are at the map's path.
pub fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (k, v) in labels.into_iter().flatten() {
        errs.extend(validate_qualified_name(k, path));
        errs.extend(invalid_each(path, v, is_label_value(v)));
    }
    errs
}

/// `ValidateAnnotations`: keys (lower-cased) are qualified names; keys and values total at most 256 KiB.
pub fn validate_annotations(annotations: Option<&BTreeMap<String, String>>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut total = 0usize;
    for (k, v) in annotations.into_iter().flatten() {
        errs.extend(invalid_each(path, k, is_qualified_name(&k.to_lowercase())));
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_upstreams_messages() {
        assert!(is_dns1123_label("my-name").is_empty());
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            is_dns1123_label("Web"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(is_dns1123_label(&"a".repeat(64)), vec!["must be no more than 63 characters"]);
        assert!(is_dns1123_subdomain("example.com").is_empty());
        assert_eq!(
            is_dns1123_subdomain("-x"),
            vec![
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert!(is_qualified_name("example.com/MyName").is_empty());
        assert_eq!(is_qualified_name("/a"), vec!["prefix part must be non-empty"]);
        assert_eq!(is_qualified_name("a/b/c").len(), 1);
        assert!(is_label_value("").is_empty());
        assert_eq!(is_env_var_name("1A").len(), 1);
        assert_eq!(is_env_var_name(".."), vec!["must not be '..'"]);
        assert!(is_env_var_name("MY_ENV.NAME").is_empty());
        assert_eq!(
            is_valid_port_name("Http"),
            vec!["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]
        );
        assert_eq!(is_valid_port_num(0), vec!["must be between 1 and 65535, inclusive"]);
        assert!(parse_ip_sloppy("010.1.2.3") && parse_ip_sloppy("::1") && !parse_ip_sloppy("1.2.3"));
    }

    #[test]
    fn a_prefix_ending_in_a_dash_after_a_multibyte_character_is_refused() {
        // Found by the fuzz target label-syntax (crates/kubelet-fuzz): a byte slice inside `é` panicked, so a
        // static pod with `generateName: é-` crashed the manifest source.
        assert_eq!(name_is_dns_subdomain("é-", true).len(), 1);
        assert_eq!(name_is_dns_subdomain("ab-", true), Vec::<String>::new());
    }

    #[test]
    fn annotations_size_is_limited() {
        let big: BTreeMap<String, String> = [("a".to_string(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT))].into();
        let e = validate_annotations(Some(&big), &Path::new("metadata").child("annotations"));
        assert_eq!(e.to_string(), "[metadata.annotations: Too long: may not be more than 262144 bytes]");
    }
}

//! Matching registry patterns against images: upstream's `ParseSchemelessURL`, `SplitURL`, `URLsMatch` and
//! `URLsMatchStr` (`pkg/credentialprovider/keyring.go`).
//!
//! A pattern (`*.registry.io:5000/team`) and an image (`a.registry.io:5000/team/app`) are both parsed as
//! `https://` URLs the way Go's `net/url.Parse` does (this module ports the parts of `src/net/url/url.go` that
//! decide the host, the path and the errors). They match when the ports are equal, the hosts have the same
//! number of `.`-separated labels and each image label matches the pattern's label as a glob
//! ([`glob_match`](crate::glob::glob_match)), and the pattern's path is a prefix of the image's path
//! (a plain string prefix: `/foo` matches `/foobar`, as upstream).

use kubelet_config::validation::field::go_quote;

use crate::glob::{BadPattern, glob_match};

/// The host and path of a URL parsed without its scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemelessUrl {
    /// `host[:port]`, unescaped (Go's `URL.Host`).
    pub host: String,
    /// The path, unescaped (Go's `URL.Path`); empty when there is none.
    pub path: String,
}

/// Why a string does not parse as a URL: Go's `*url.Error` for the `parse` operation, printed as upstream prints
/// it (`parse "https://%invalid%": invalid URL escape "%in"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse {}: {reason}", go_quote(.url))]
pub struct UrlParseError {
    /// The URL as parsed, with the `https://` prefix.
    pub url: String,
    /// Go's message for the failure.
    pub reason: String,
}

/// Parses `schemeless` as `https://` + `schemeless` (upstream's `ParseSchemelessURL`).
pub fn parse_schemeless_url(schemeless: &str) -> Result<SchemelessUrl, UrlParseError> {
    parse_url(format!("https://{schemeless}"))
}

/// Go's `url.Parse` of a string that starts with `http://` or `https://` (the keyring adds `https://` to a
/// key without either); only the host and the path are kept.
pub(crate) fn parse_url(url: String) -> Result<SchemelessUrl, UrlParseError> {
    debug_assert!(url.starts_with("https://") || url.starts_with("http://"));
    parse_with_scheme(&url).map_err(|reason| UrlParseError { url, reason })
}

fn parse_with_scheme(raw: &str) -> Result<SchemelessUrl, String> {
    let (without_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    if without_fragment.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    let scheme_end = without_fragment.find(':').map_or(0, |i| i + 1);
    let mut rest = &without_fragment[scheme_end..];
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, _query)) = rest.split_once('?') {
        rest = before;
    }
    // `rest` starts with "//": the authority runs to the next '/'.
    let after_slashes = &rest[2..];
    let (authority, path) = match after_slashes.find('/') {
        Some(i) => (&after_slashes[..i], &after_slashes[i..]),
        None => (after_slashes, ""),
    };
    let host = parse_authority(authority)?;
    let path = unescape(path, Mode::Path)?;
    unescape(fragment, Mode::Fragment)?;
    Ok(SchemelessUrl { host, path })
}

/// Go's `parseAuthority`: `[userinfo@]host`; the host is returned.
fn parse_authority(authority: &str) -> Result<String, String> {
    let Some(at) = authority.rfind('@') else {
        return parse_host(authority);
    };
    let host = parse_host(&authority[at + 1..])?;
    let userinfo = &authority[..at];
    let valid = userinfo.chars().all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c));
    if !valid {
        return Err("net/url: invalid userinfo".to_string());
    }
    unescape(userinfo, Mode::UserPassword)?;
    Ok(host)
}

/// Go's `parseHost`: checks the port after the last `:` (or after `]` of an IP literal) and unescapes.
fn parse_host(host: &str) -> Result<String, String> {
    let colon_port = if host.starts_with('[') {
        let end = host.rfind(']').ok_or_else(|| "missing ']' in host".to_string())?;
        &host[end + 1..]
    } else {
        host.rfind(':').map_or("", |i| &host[i..])
    };
    let port_ok = colon_port.is_empty()
        || colon_port.strip_prefix(':').is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()));
    if !port_ok {
        return Err(format!("invalid port {} after host", go_quote(colon_port)));
    }
    unescape(host, Mode::Host)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Host,
    Path,
    UserPassword,
    Fragment,
}

/// Whether Go's `shouldEscape(c, encodeHost)` refuses the ASCII byte `c` in a host.
fn invalid_in_host(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c))
}

/// Go's `unescape` for the modes a URL parse uses: `%XX` decoded, a bad escape or a host character that must
/// be escaped is an error.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |b: u8| (b as char).to_digit(16);
                let escape = match (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
                    (Some(hi), Some(lo)) => (hi * 16 + lo) as u8,
                    _ => {
                        let end = (i + 3).min(bytes.len());
                        return Err(format!("invalid URL escape {}", go_quote(&lossy(&bytes[i..end]))));
                    }
                };
                // In a host, %-encoding is only for non-ASCII bytes, and %25 (IPv6 zones).
                if mode == Mode::Host && escape < 0x80 && &s[i..i + 3] != "%25" {
                    return Err(format!("invalid URL escape {}", go_quote(&s[i..i + 3])));
                }
                out.push(escape);
                i += 3;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && invalid_in_host(c) {
                    return Err(format!("invalid character {} in host name", go_quote(&(c as char).to_string())));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8(out).unwrap_or_else(|e| lossy(e.as_bytes())))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Go's `net.SplitHostPort`, returning `None` where Go returns an error.
fn split_host_port(hostport: &str) -> Option<(&str, &str)> {
    let i = hostport.rfind(':')?;
    let (host, j, k) = if hostport.starts_with('[') {
        let end = hostport.find(']')?;
        if end + 1 != i {
            // "missing port" or "too many colons": an error either way.
            return None;
        }
        (&hostport[1..end], 1, end + 1)
    } else {
        let host = &hostport[..i];
        if host.contains(':') {
            return None;
        }
        (host, 0, 0)
    };
    if hostport[j..].contains('[') || hostport[k..].contains(']') {
        return None;
    }
    Some((host, &hostport[i + 1..]))
}

/// Upstream's `SplitURL`: the host's `.`-separated labels and the port (empty when none or unparsable).
pub fn split_url(url: &SchemelessUrl) -> (Vec<&str>, &str) {
    let (host, port) = split_host_port(&url.host).unwrap_or((&url.host, ""));
    (host.split('.').collect(), port)
}

/// Upstream's `URLsMatch`: whether `target` matches `glob` (globs in the host labels only).
pub fn urls_match(glob: &SchemelessUrl, target: &SchemelessUrl) -> Result<bool, BadPattern> {
    let (glob_parts, glob_port) = split_url(glob);
    let (target_parts, target_port) = split_url(target);
    if glob_port != target_port || glob_parts.len() != target_parts.len() || !target.path.starts_with(&glob.path) {
        return Ok(false);
    }
    for (pattern, label) in glob_parts.iter().zip(&target_parts) {
        if !glob_match(pattern, label)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Why two strings could not be compared by [`urls_match_str`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlMatchError {
    /// One side is not a URL.
    #[error(transparent)]
    Parse(#[from] UrlParseError),
    /// A host label of the pattern is not a valid glob.
    #[error(transparent)]
    Pattern(#[from] BadPattern),
}

/// Upstream's `URLsMatchStr`: [`urls_match`] on two schemeless strings.
pub fn urls_match_str(glob: &str, target: &str) -> Result<bool, UrlMatchError> {
    let glob = parse_schemeless_url(glob)?;
    let target = parse_schemeless_url(target)?;
    Ok(urls_match(&glob, &target)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// upstream's TestURLsMatch (keyring_test.go).
    #[test]
    fn urls_match_as_upstream() {
        let cases = [
            // match when there is no path component
            ("*.kubernetes.io", "prefix.kubernetes.io", true),
            ("prefix.*.io", "prefix.kubernetes.io", true),
            ("prefix.kubernetes.*", "prefix.kubernetes.io", true),
            ("*-good.kubernetes.io", "prefix-good.kubernetes.io", true),
            // match with path components
            ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true),
            ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true),
            // match with path components and ports
            ("*.kubernetes.io:1111/blah", "prefix.kubernetes.io:1111/blah", true),
            ("prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar", true),
            // no match when number of parts mismatch
            ("*.kubernetes.io", "kubernetes.io", false),
            ("*.*.kubernetes.io", "prefix.kubernetes.io", false),
            ("*.*.kubernetes.io", "kubernetes.io", false),
            ("*kubernetes.io", "a.kubernetes.io", false),
            // match when number of parts match
            ("*kubernetes.io", "kubernetes.io", true),
            ("*.*.*.kubernetes.io", "a.b.c.kubernetes.io", true),
            // no match when some parts mismatch
            ("kubernetes.io", "kubernetes.com", false),
            ("k*.io", "quay.io", false),
            // no match when ports mismatch
            ("*.kubernetes.io:1234/blah", "prefix.kubernetes.io:1111/blah", false),
            ("prefix.*.io/foo", "prefix.kubernetes.io:1111/foo/bar", false),
        ];
        for (glob, target, want) in cases {
            assert_eq!(urls_match_str(glob, target).unwrap_or(false), want, "{glob} ~ {target}");
        }
    }

    #[test]
    fn path_prefix_is_a_plain_string_prefix() {
        assert_eq!(urls_match_str("registry.io/foo", "registry.io/foobar"), Ok(true));
        assert_eq!(urls_match_str("registry.io/foo/", "registry.io/foo"), Ok(false));
        assert_eq!(urls_match_str("registry.io", "registry.io/any/depth"), Ok(true));
    }

    #[test]
    fn parse_keeps_host_and_unescaped_path() {
        let u = parse_schemeless_url("user:pw@registry.io:5000/a%20b?q=1#frag").unwrap();
        assert_eq!(u, SchemelessUrl { host: "registry.io:5000".into(), path: "/a b".into() });
        let u = parse_schemeless_url("[::1]:5000/x").unwrap();
        assert_eq!(split_url(&u), (vec!["::1"], "5000"));
        let u = parse_schemeless_url("registry.io:/x").unwrap();
        assert_eq!(split_url(&u), (vec!["registry", "io"], ""));
    }

    #[test]
    fn parse_errors_read_as_go() {
        let err = |s: &str| parse_schemeless_url(s).unwrap_err().to_string();
        assert_eq!(err("%invalid%"), r#"parse "https://%invalid%": invalid URL escape "%in""#);
        assert_eq!(err("registry.io:abc"), r#"parse "https://registry.io:abc": invalid port ":abc" after host"#);
        assert_eq!(err("reg istry.io"), r#"parse "https://reg istry.io": invalid character " " in host name"#);
        assert_eq!(err("[::1"), r#"parse "https://[::1": missing ']' in host"#);
        assert_eq!(err("a\u{1}b"), r#"parse "https://a\x01b": net/url: invalid control character in URL"#);
        assert_eq!(err("registry.io/a%2"), r#"parse "https://registry.io/a%2": invalid URL escape "%2""#);
    }

    #[test]
    fn bad_glob_is_an_error() {
        assert_eq!(urls_match_str("a[x-].io", "a.io"), Err(UrlMatchError::Pattern(BadPattern)));
    }
}

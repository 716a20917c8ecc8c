//! The repository an image is pulled from, which is what credentials are looked up for: the `repoToPull` of
//! upstream's `parsers.ParseImageName` (`pkg/util/parsers/parsers.go`), that is `reference.ParseNormalizedNamed(
//! image).Name()` (`github.com/distribution/reference`, `normalize.go`, `reference.go`, `regexp.go`).
//!
//! Contract: a name without a registry host is Docker Hub's (`nginx` → `docker.io/library/nginx`,
//! `team/app` → `docker.io/team/app`); `index.docker.io` is spelled `docker.io`; the tag and digest are dropped.
//! The first component is a registry host when it contains `.` or `:`, is `localhost`, or has upper-case
//! letters. The reference grammar is checked (lower-case path components separated by `.`, `_`, `__` or dashes;
//! a host of letters, digits, dashes and dots with an optional port, or a bracketed IPv6 address; a tag of at most
//! 128 word characters, dots and dashes; a digest `algorithm:hex`), with upstream's messages.

/// An image reference that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image name {image:?}: {reason}")]
pub struct ImageNameError {
    /// The image as given.
    pub image: String,
    /// upstream's reason (`invalid reference format`, …).
    pub reason: String,
}

const DEFAULT_DOMAIN: &str = "docker.io";
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
const OFFICIAL_REPO_PREFIX: &str = "library/";
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// `splitDockerDomain`.
fn split_docker_domain(name: &str) -> (String, String) {
    let Some((maybe_domain, remote)) = name.split_once('/') else {
        return (DEFAULT_DOMAIN.to_string(), format!("{OFFICIAL_REPO_PREFIX}{name}"));
    };
    let (domain, remote) = if maybe_domain == LEGACY_DEFAULT_DOMAIN {
        (DEFAULT_DOMAIN.to_string(), remote.to_string())
    } else if maybe_domain == "localhost"
        || maybe_domain.contains(['.', ':'])
        || maybe_domain.to_lowercase() != maybe_domain
    {
        (maybe_domain.to_string(), remote.to_string())
    } else {
        (DEFAULT_DOMAIN.to_string(), name.to_string())
    };
    if domain == DEFAULT_DOMAIN && !remote.contains('/') {
        return (domain, format!("{OFFICIAL_REPO_PREFIX}{remote}"));
    }
    (domain, remote)
}

/// `domainComponent` (`[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`).
fn valid_domain_component(c: &str) -> bool {
    let b = c.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
}

/// `domainAndPort`: a host name or bracketed IPv6 address, then an optional `:port`.
fn valid_domain(domain: &str) -> bool {
    let (host_ok, port) = if let Some(rest) = domain.strip_prefix('[') {
        let Some((ipv6, after)) = rest.split_once(']') else { return false };
        let ok = !ipv6.is_empty() && ipv6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        match (after.is_empty(), after.strip_prefix(':')) {
            (true, _) => (ok, None),
            (false, Some(port)) => (ok, Some(port)),
            (false, None) => return false,
        }
    } else {
        let (host, port) = domain.split_once(':').map_or((domain, None), |(h, p)| (h, Some(p)));
        (host.split('.').all(valid_domain_component), port)
    };
    host_ok && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `pathComponent`: `[a-z0-9]+` runs joined by `.`, `_`, `__` or one or more `-`.
fn valid_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

fn valid_tag(tag: &str) -> bool {
    let b = tag.as_bytes();
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    !b.is_empty() && b.len() <= 128 && word(b[0]) && b.iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else { return false };
    let algorithm_ok = !algorithm.is_empty()
        && algorithm.bytes().all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || b"+._-".contains(&x));
    algorithm_ok && hex.len() >= 32 && hex.bytes().all(|x| x.is_ascii_hexdigit())
}

/// The repository `image` is pulled from (`repoToPull`): normalised, without tag or digest.
pub fn repository_to_pull(image: &str) -> Result<String, ImageNameError> {
    let error = |reason: String| ImageNameError { image: image.to_string(), reason };
    if image.len() == 64 && image.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(error(format!("invalid repository name ({image}), cannot specify 64-byte hexadecimal strings")));
    }
    let (domain, remainder) = split_docker_domain(image);
    let remote = remainder.split(':').next().unwrap_or_default();
    if remote.to_lowercase() != remote {
        return Err(error(format!("invalid reference format: repository name ({remote}) must be lowercase")));
    }
    let full = format!("{domain}/{remainder}");
    let (without_digest, digest) = full.split_once('@').map_or((full.as_str(), None), |(n, d)| (n, Some(d)));
    let last_slash = without_digest.rfind('/').unwrap_or(0);
    let (name, tag) = match without_digest.rfind(':') {
        Some(i) if i > last_slash => (&without_digest[..i], Some(&without_digest[i + 1..])),
        _ => (without_digest, None),
    };
    let (name_domain, path) = name.split_once('/').unwrap_or((name, ""));
    let valid = valid_domain(name_domain)
        && path.split('/').all(valid_path_component)
        && tag.is_none_or(valid_tag)
        && digest.is_none_or(valid_digest);
    if !valid {
        return Err(error("invalid reference format".to_string()));
    }
    if name.len() > NAME_TOTAL_LENGTH_MAX {
        return Err(error(format!("repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters")));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_as_the_image_manager() {
        let digest = "sha256:e7d92cdc71feacf90708cb59182d0df1b911f8ae022d29e8e95d75ca6a99776a";
        for (image, want) in [
            ("nginx", "docker.io/library/nginx"),
            ("nginx:1.27", "docker.io/library/nginx"),
            ("team/app:v1", "docker.io/team/app"),
            ("docker.io/nginx", "docker.io/library/nginx"),
            ("index.docker.io/team/app", "docker.io/team/app"),
            ("registry.io:5000/team/app:tag", "registry.io:5000/team/app"),
            ("localhost/app", "localhost/app"),
            ("localhost:5000/app", "localhost:5000/app"),
            ("Registry/app", "Registry/app"),
            ("[::1]:5000/app", "[::1]:5000/app"),
            ("quay.io/a/b/c__d-e.f", "quay.io/a/b/c__d-e.f"),
            (&format!("gcr.io/app@{digest}"), "gcr.io/app"),
            (&format!("gcr.io/app:v1@{digest}"), "gcr.io/app"),
        ] {
            assert_eq!(repository_to_pull(image).as_deref(), Ok(want), "{image}");
        }
    }

    #[test]
    fn rejects_what_upstream_rejects() {
        let reason = |image: &str| repository_to_pull(image).unwrap_err().reason;
        assert_eq!(reason("Nginx"), "invalid reference format: repository name (library/Nginx) must be lowercase");
        assert_eq!(reason("registry.io/App"), "invalid reference format: repository name (App) must be lowercase");
        for bad in
            ["", "registry.io/", "app:", "app:-tag", "a//b", "registry.io/a@sha256:xyz", "-a.io/b", "a.io:port/b"]
        {
            assert_eq!(reason(bad), "invalid reference format", "{bad:?}");
        }
        let hex = "e7d92cdc71feacf90708cb59182d0df1b911f8ae022d29e8e95d75ca6a99776a";
        assert!(reason(hex).contains("cannot specify 64-byte hexadecimal strings"));
        assert!(reason(&format!("r.io/{}", "a".repeat(300))).starts_with("repository name must not be more than"));
        assert_eq!(
            repository_to_pull("Nginx").unwrap_err().to_string(),
            r#"couldn't parse image name "Nginx": invalid reference format: repository name (library/Nginx) must be lowercase"#
        );
    }
}

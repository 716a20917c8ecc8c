//! The CSI versions a driver offers at registration (`k8s.io/apimachinery/pkg/util/version`
//! `HighestSupportedVersion`, as `pkg/volume/csi/csi_plugin.go` validateVersions uses it): the highest `1.x` of the
//! list, parsed as upstream's generic versions (`v` optional, at least two numeric components, no leading zero,
//! anything after the numbers ignored). Pure.

use std::cmp::Ordering;
use std::fmt;

/// A parsed version: its numeric components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(pub Vec<u64>);

impl Version {
    /// Parses as `ParseGeneric`: `[v]N.N[.N...]` followed by anything that does not start with a digit or dot.
    pub fn parse(s: &str) -> Result<Version, String> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let numeric = t[..end].trim_end_matches('.');
        let parts: Vec<&str> = numeric.split('.').collect();
        if numeric.is_empty() || parts.iter().any(|p| p.is_empty()) {
            return Err(format!("could not parse {s:?} as version"));
        }
        if parts.len() < 2 {
            return Err(format!("illegal version string {s:?}"));
        }
        let mut comps = vec![];
        for (i, p) in parts.iter().enumerate() {
            if i == 0 && p.len() > 1 && p.starts_with('0') {
                return Err(format!("illegal zero-prefixed version component {p:?} in {s:?}"));
            }
            comps.push(p.parse::<u64>().map_err(|e| format!("illegal version string {s:?}: {e}"))?);
        }
        Ok(Version(comps))
    }

    /// The major version.
    pub fn major(&self) -> u64 {
        self.0[0]
    }

    fn cmp_numeric(&self, other: &Version) -> Ordering {
        let n = self.0.len().max(other.0.len());
        (0..n)
            .map(|i| self.0.get(i).unwrap_or(&0).cmp(other.0.get(i).unwrap_or(&0)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// Whether `self` is older than `other`.
    pub fn less_than(&self, other: &Version) -> bool {
        self.cmp_numeric(other) == Ordering::Less
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Go's `%v` of a list of strings: `[a b]`.
fn go_list(list: &[String]) -> String {
    format!("[{}]", list.join(" "))
}

/// The highest `1.x` version of the list (`HighestSupportedVersion`), with upstream's errors.
pub fn highest_supported(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("empty array for supported versions".into());
    }
    let mut best: Option<Version> = None;
    let mut last_err: Option<String> = None;
    for v in versions.iter().rev() {
        match Version::parse(v) {
            Ok(p) if p.major() > 1 => {}
            Ok(p) => {
                if best.as_ref().is_none_or(|b| b.less_than(&p)) {
                    best = Some(p);
                }
            }
            Err(e) => last_err = Some(e),
        }
    }
    let Some(best) = best else {
        return Err(format!(
            "could not find a highest supported version from versions ({}) reported: {}",
            go_list(versions),
            last_err.unwrap_or_else(|| "<nil>".into())
        ));
    };
    if best.major() != 1 {
        return Err(format!("highest supported version reported is {best}, must be v1.x"));
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_highest_1x_is_taken_as_upstream_parses_versions() {
        assert_eq!(highest_supported(&v(&["1.0.0"])).unwrap().to_string(), "1.0.0");
        assert_eq!(highest_supported(&v(&["v1.0.0", "1.2", "2.0.0"])).unwrap().to_string(), "1.2");
        assert_eq!(highest_supported(&v(&["1.0.0-rc1"])).unwrap().to_string(), "1.0.0");
        assert!(Version::parse("1.0.0").unwrap().less_than(&Version::parse("1.0.1").unwrap()));
        assert!(!Version::parse("1.2").unwrap().less_than(&Version::parse("1.2.0").unwrap()));
    }

    #[test]
    fn lists_without_a_1x_are_refused_with_upstreams_texts() {
        assert_eq!(highest_supported(&[]).unwrap_err(), "empty array for supported versions");
        assert_eq!(
            highest_supported(&v(&["2.0.0"])).unwrap_err(),
            "could not find a highest supported version from versions ([2.0.0]) reported: <nil>"
        );
        assert_eq!(
            highest_supported(&v(&["0.3.0"])).unwrap_err(),
            "highest supported version reported is 0.3.0, must be v1.x"
        );
        assert!(highest_supported(&v(&["1"])).unwrap_err().starts_with("could not find a highest supported version"));
        assert!(highest_supported(&v(&["01.0"])).is_err());
    }
}

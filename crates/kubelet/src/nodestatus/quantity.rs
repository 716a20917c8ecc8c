//! Resource quantities as the apiserver formats them (`k8s.io/apimachinery/pkg/api/resource`): binary-SI
//! canonical form for byte counts (`16393232Ki`), decimal for counts, and parsing of the forms the kubelet reads
//! from its configuration (`100Mi`, `500m`, `10%` of a capacity).

pub use kubelet_types::quantity::binary_si;

/// Canonical text of CPU in millicores: whole cores as a plain number, else `<n>m`.
pub fn cpu(milli: i64) -> String {
    if milli % 1000 == 0 { (milli / 1000).to_string() } else { format!("{milli}m") }
}

/// Parses a quantity into base units (bytes, cores); `None` when malformed.
pub fn parse(s: &str) -> Option<f64> {
    kubelet_runtime::qos::parse_quantity(s)
}

/// Parses an eviction threshold value: an absolute quantity, or a percentage of `capacity`.
pub fn threshold(value: &str, capacity: f64) -> Option<f64> {
    match value.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok().map(|p| capacity * p / 100.0),
        None => parse(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        assert_eq!(binary_si(16_786_669_568), "16393232Ki");
        assert_eq!(binary_si(104_857_600), "100Mi");
        assert_eq!(binary_si(1_073_741_824), "1Gi");
        assert_eq!(binary_si(1_000), "1000");
        assert_eq!(cpu(2000), "2");
        assert_eq!(cpu(1500), "1500m");
        assert_eq!(threshold("10%", 1000.0), Some(100.0));
        assert_eq!(threshold("100Mi", 0.0), Some(104_857_600.0));
    }
}

//! Kubernetes resource quantities (`apimachinery/pkg/api/resource`), as far as the kubelet reads them.

/// Parses a Kubernetes quantity (`100m`, `1`, `64Mi`, `1G`, `1e3`) into a number of base units.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 16] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    for (suf, mult) in suffixes {
        if let Some(num) = s.strip_suffix(suf)
            && (suf.is_empty() || !num.is_empty())
        {
            if let Ok(v) = num.parse::<f64>() {
                return Some(v * mult);
            }
            if !suf.is_empty() {
                continue;
            }
        }
    }
    None
}

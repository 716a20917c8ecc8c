//! A strict parser of the Prometheus text format, for the tests of `/metrics`.

use std::collections::BTreeMap;

/// Parses the Prometheus text format strictly: every sample belongs to a family declared before it with
/// `# TYPE`, names and label pairs are well formed, values are floats, histogram buckets grow and end at
/// `+Inf` equal to `_count`. Returns family → (type, [(labels, value)]) with samples under their own names.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, (String, Vec<(String, f64)>)> {
    let mut fams: BTreeMap<String, (String, Vec<(String, f64)>)> = BTreeMap::new();
    let mut current = String::new();
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "HELP name {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(fams.insert(name.to_string(), (kind.to_string(), vec![])).is_none(), "family twice: {line}");
            current = name.to_string();
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        // `series value [timestamp]`; the series ends at its closing brace when it has labels.
        let split_at = line.rfind('}').map(|i| i + 1).unwrap_or_else(|| line.find(' ').unwrap());
        let (series, rest) = line.split_at(split_at);
        let mut fields = rest.split_whitespace();
        let value = fields.next().unwrap_or_else(|| panic!("no value in {line}"));
        if let Some(ts) = fields.next() {
            assert!(ts.parse::<i64>().is_ok(), "timestamp of {line}");
        }
        assert!(fields.next().is_none(), "trailing fields in {line}");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or_else(|| panic!("labels of {line}")).to_string()),
            None => (series, String::new()),
        };
        assert!(valid_name(name), "sample name {line}");
        if !labels.is_empty() {
            for pair in labels.split("\",") {
                let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("label pair of {line}"));
                assert!(valid_name(k), "label name of {line}");
                assert!(!v.trim_end_matches('"').contains('\n'));
            }
        }
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).filter(|b| *b == current);
        assert!(name == current || base.is_some(), "sample {name} outside its family {current}");
        fams.get_mut(&current).unwrap().1.push((labels.clone(), value));
        // Also under the sample's own name, for lookups of _count and _sum.
        if name != current {
            fams.entry(name.to_string()).or_insert_with(|| ("sample".into(), vec![])).1.push((labels, value));
        }
    }
    for (name, (kind, _)) in &fams {
        if kind != "histogram" {
            continue;
        }
        let mut series: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for (l, v) in &fams[&format!("{name}_bucket")].1 {
            let (others, le) = l.rsplit_once("le=\"").unwrap_or_else(|| panic!("{name}: bucket without le"));
            series
                .entry(others.trim_end_matches(',').to_string())
                .or_default()
                .push((le.trim_end_matches('"').into(), *v));
        }
        for (others, buckets) in series {
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{name}{{{others}}}: buckets grow: {buckets:?}");
            let (le, inf) = buckets.last().unwrap();
            assert_eq!(le, "+Inf", "{name}{{{others}}}: the last bucket is +Inf");
            let count = fams[&format!("{name}_count")].1.iter().find(|(l, _)| *l == others).map(|(_, v)| *v);
            assert_eq!(count, Some(*inf), "{name}{{{others}}}: +Inf equals _count");
        }
    }
    fams
}

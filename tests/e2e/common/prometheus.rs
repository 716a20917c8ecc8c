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

/// A real Prometheus server (Debian's `prometheus`) for a test: its own configuration and data folder, on a
/// loopback port of the lane; killed when dropped.
pub struct PrometheusServer {
    child: std::process::Child,
    /// The port of its HTTP API.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl PrometheusServer {
    /// Starts `prometheus` with `scrape_configs` (YAML list items, indented as under `scrape_configs:`) and waits
    /// until it is ready. `files` are written into its folder first (a bearer token, ...); `{dir}` in the
    /// configuration stands for that folder.
    pub async fn start(scrape_configs: &str, files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let config = format!("global:\n  scrape_interval: 1s\nscrape_configs:\n{scrape_configs}")
            .replace("{dir}", &dir.path().display().to_string());
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = 29090 + 100 * super::lane();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus (Debian's package, installed by scripts/node-setup.sh)");
        let p = PrometheusServer { child, port, _dir: dir };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while p.get("/-/ready").await.0 != 200 {
            assert!(tokio::time::Instant::now() < deadline, "prometheus not ready: {}", p.log());
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        p
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return (0, String::new());
        };
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            return (0, String::new());
        }
        let mut buf = vec![];
        let _ = s.read_to_end(&mut buf).await;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (code, body)
    }

    /// The API's answer to a query, as text (for failure messages).
    pub async fn query_text(&self, promql: &str) -> String {
        self.get(&format!("/api/v1/query?query={}", Self::encode(promql))).await.1
    }

    fn encode(promql: &str) -> String {
        promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// An instant query: each result's labels and value.
    pub async fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let (code, body) = self.get(&format!("/api/v1/query?query={}", Self::encode(promql))).await;
        assert_eq!(code, 200, "query {promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["metric"].clone(), r["value"][1].as_str().unwrap().parse::<f64>().unwrap()))
            .collect()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! Small values: Go durations, quantities, CPU sets, label syntax, eviction thresholds, the log query, CRI log
//! lines and request paths. Cheap, so they run many cases, with round trips where a printer exists.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use kubelet_config::kubelet_config::{Duration, parse_cpu_set};
use kubelet_server::logs::cri::{self, LineWriter, ReadOptions, Streams};
use kubelet_types::quantity::ParsedQuantity;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

use crate::engine::run;
use crate::strategies::{any_text, digits, text_from};
use crate::{Options, Report};

const DURATION_TOKENS: &[&str] = &[
    "0",
    "1",
    "10",
    ".",
    "5",
    ".5",
    "ns",
    "us",
    "µs",
    "μs",
    "ms",
    "s",
    "m",
    "h",
    "-",
    "+",
    "d",
    "e",
    "1e3",
    " ",
    "9223372036854775807",
    "9223372036854775808",
    "2562047",
    "h47m16.854775807s",
];
const UNITS: &[&str] = &["ns", "us", "µs", "μs", "ms", "s", "m", "h", "", "d", "S", "hh", "µ", "\u{3bc}"];

fn duration_text() -> BoxedStrategy<String> {
    let part = (digits(), option::of(prop_oneof!["[0-9]{0,30}", digits()]), select(UNITS))
        .prop_map(|(i, f, u)| format!("{i}{}{u}", f.map(|f| format!(".{f}")).unwrap_or_default()));
    prop_oneof![
        4 => (select(&["", "-", "+"][..]), proptest::collection::vec(part, 1..6))
            .prop_map(|(sign, parts)| format!("{sign}{}", parts.concat())),
        2 => text_from(DURATION_TOKENS),
        2 => (0u64..(1 << 63)).prop_map(|n| Duration(std::time::Duration::from_nanos(n)).to_string()),
        1 => (0u64..1_000_000_000).prop_map(|n| Duration(std::time::Duration::from_nanos(n)).to_string()),
    ]
    .boxed()
}

/// `Duration::parse`; a parsed duration prints as Go does and that parses back to the same duration.
pub(crate) fn duration(o: &Options) -> Report {
    run(
        "duration",
        o,
        duration_text(),
        Arc::new(|s: &String| {
            let Ok(d) = Duration::parse(s) else { return Ok(()) };
            let printed = d.to_string();
            match Duration::parse(&printed) {
                Ok(back) if back == d => Ok(()),
                other => Err(format!("{s:?} is {d:?}, printed {printed:?}, which parses to {other:?}")),
            }
        }),
    )
}

const QUANTITY_SUFFIXES: &[&str] = &[
    "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "i", "KiB", "e", "E", "e+",
    "mi", "K", "kk", "µ",
];

fn quantity_text() -> BoxedStrategy<String> {
    let suffix = prop_oneof![
        3 => select(QUANTITY_SUFFIXES).prop_map(str::to_string),
        2 => (select(&["e", "E"][..]), select(&["", "+", "-"][..]), digits()).prop_map(|(e, s, d)| format!("{e}{s}{d}")),
    ];
    let number = (prop_oneof![3 => digits(), 1 => Just(String::new())], option::of(digits()))
        .prop_map(|(i, f)| format!("{i}{}", f.map(|f| format!(".{f}")).unwrap_or_default()));
    prop_oneof![
        5 => (select(&["", "+", "-"][..]), number, suffix).prop_map(|(s, n, x)| format!("{s}{n}{x}")),
        2 => text_from(&["1", "0", ".", "5", "e", "E", "-", "+", "Ki", "m", "i", " ", "00", "9999999999"]),
        1 => any_text(),
    ]
    .boxed()
}

/// `ParsedQuantity::parse`: a parsed quantity prints canonically, and that parses to the same value and prints
/// the same; the float form and the whole value never panic.
pub(crate) fn quantity(o: &Options) -> Report {
    run(
        "quantity",
        o,
        quantity_text(),
        Arc::new(|s: &String| {
            let _ = kubelet_types::quantity::parse_quantity(s);
            let _ = kubelet::nodestatus::quantity::threshold(s, 1e12);
            let Ok(q) = ParsedQuantity::parse(s) else { return Ok(()) };
            let _ = (q.as_f64(), q.value(), q.is_integer());
            let printed = q.to_string();
            let back = ParsedQuantity::parse(&printed)
                .map_err(|e| format!("{s:?} prints {printed:?}, which does not parse: {e}"))?;
            if back.cmp_value(&q) != std::cmp::Ordering::Equal {
                return Err(format!("{s:?} prints {printed:?}, which parses to another value ({back:?} != {q:?})"));
            }
            if back.to_string() != printed {
                return Err(format!("{s:?} prints {printed:?}, which prints {:?}", back.to_string()));
            }
            Ok(())
        }),
    )
}

/// `cpuset.Parse`: ranges come out ordered.
pub(crate) fn cpu_set(o: &Options) -> Report {
    let tokens = &["0", "1", "-", ",", "3", "8", "18446744073709551615", "18446744073709551616", " ", "a", "00", "+1"];
    run(
        "cpu-set",
        o,
        text_from(tokens),
        Arc::new(|s: &String| match parse_cpu_set(s) {
            Ok(ranges) if ranges.iter().any(|(a, b)| a > b) => Err(format!("{s:?} gives a reversed range {ranges:?}")),
            _ => Ok(()),
        }),
    )
}

const LABEL_TOKENS: &[&str] = &[
    "a",
    "Z",
    "0",
    "-",
    "_",
    ".",
    "/",
    "kubernetes.io",
    "k8s.io",
    "example.com/",
    "node-role.kubernetes.io/",
    "é",
    "..",
    "x-",
    "-x",
    "port",
    "http",
    "X-Header",
    ":",
    "1.2.3.4",
    "::1",
    "%",
    " ",
];

/// Label keys and values, DNS names, port names, env names, header names and IPs: a valid key or value is
/// never over its length limit.
pub(crate) fn label_syntax(o: &Options) -> Report {
    use kubelet_config::validation::field::Path;
    use kubelet_config::validation::names::*;
    run(
        "label-syntax",
        o,
        text_from(LABEL_TOKENS),
        Arc::new(|s: &String| {
            if is_qualified_name(s).is_empty() && s.len() > 253 + 1 + 63 {
                return Err(format!("{s:?} is a valid key of {} bytes", s.len()));
            }
            if is_label_value(s).is_empty() && s.len() > 63 {
                return Err(format!("{s:?} is a valid label value of {} bytes", s.len()));
            }
            let _ = (is_dns1123_label(s), is_dns1123_subdomain(s), name_is_dns_subdomain(s, true));
            let _ = (is_env_var_name(s), is_config_map_key(s), is_valid_port_name(s), is_http_header_name(s));
            let _ = validate_ip_legacy(&Path::new("ip"), s);
            Ok(())
        }),
    )
}

const SIGNAL_NAMES: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];
const THRESHOLD_TOKENS: &[&str] = &[
    "1", "10", "%", "Mi", "Gi", "100", "0", "-", ".", " ", "e3", "NaN", "inf", "1e400", "5%", "0%", "100%", "Ki", "%%",
];

/// The four eviction maps of a configuration, and `enforceNodeAllocatable`.
#[derive(Clone, Debug)]
pub(crate) struct EvictionMaps {
    enforce: Vec<String>,
    hard: BTreeMap<String, String>,
    soft: BTreeMap<String, String>,
    grace: BTreeMap<String, std::time::Duration>,
    reclaim: BTreeMap<String, String>,
    capacity: i64,
}

fn eviction_maps() -> BoxedStrategy<EvictionMaps> {
    let key = prop_oneof![5 => select(SIGNAL_NAMES).prop_map(str::to_string), 1 => any_text()];
    let value = || text_from(THRESHOLD_TOKENS);
    let map = move || proptest::collection::btree_map(key.clone(), value(), 0..5);
    let grace = proptest::collection::btree_map(
        select(SIGNAL_NAMES).prop_map(str::to_string),
        any::<u64>().prop_map(std::time::Duration::from_millis),
        0..4,
    );
    let enforce = proptest::collection::vec(select(&["pods", "system-reserved", "none", ""][..]), 0..3);
    (enforce, map(), map(), grace, map(), any::<i64>())
        .prop_map(|(enforce, hard, soft, grace, reclaim, capacity)| EvictionMaps {
            enforce: enforce.into_iter().map(str::to_string).collect(),
            hard,
            soft,
            grace,
            reclaim,
            capacity,
        })
        .boxed()
}

/// `ParseThresholdConfig` and what is done with a threshold: percentages stay within 0-100 %, values resolve
/// against any capacity and print.
pub(crate) fn eviction_thresholds(o: &Options) -> Report {
    use kubelet_eviction::threshold::{ThresholdValue, parse_thresholds};
    run(
        "eviction-thresholds",
        o,
        eviction_maps(),
        Arc::new(|m: &EvictionMaps| {
            let Ok(ts) = parse_thresholds(&m.enforce, &m.hard, &m.soft, &m.grace, &m.reclaim) else { return Ok(()) };
            for t in &ts {
                if let ThresholdValue::Percentage(p) = t.value
                    && p > 1.0
                {
                    return Err(format!("threshold {t} is over 100%"));
                }
                let _ = (t.value.quantity(m.capacity), t.value.display(m.capacity), t.to_string());
                if let Some(r) = &t.min_reclaim {
                    let _ = (r.quantity(m.capacity), r.display(m.capacity));
                }
            }
            Ok(())
        }),
    )
}

const LOG_QUERY_KEYS: &[&str] = &[
    "follow",
    "previous",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "tailLines",
    "limitBytes",
    "stream",
    "tail",
    "x",
];
const LOG_QUERY_TOKENS: &[&str] = &[
    "1",
    "0",
    "-1",
    "true",
    "false",
    "TRUE",
    "all",
    "Stdout",
    "Stderr",
    "All",
    "2024-01-02T03:04:05Z",
    "2024-01-02T03:04:05.123456789+02:00",
    "9223372036854775807",
    "-9223372036854775808",
    "1e3",
    " ",
    "T",
    "Z",
    "+99:99",
    "60",
    ":",
    ".",
];

/// `(key, value)` pairs of a query: known keys, repeated, with hostile values.
pub(crate) fn query_pairs() -> BoxedStrategy<Vec<(String, String)>> {
    let key = prop_oneof![5 => select(LOG_QUERY_KEYS).prop_map(str::to_string), 1 => any_text()];
    proptest::collection::vec((key, text_from(LOG_QUERY_TOKENS)), 0..8).boxed()
}

/// The log query: decoding and validation never panic; a valid query has sane numbers.
pub(crate) fn log_query(o: &Options) -> Report {
    run(
        "log-query",
        o,
        query_pairs(),
        Arc::new(|q: &Vec<(String, String)>| {
            let Some(d) = kubelet_server::logs::decode(q) else { return Ok(()) };
            if kubelet_server::logs::validate(&d).is_ok()
                && (d.tail_lines.is_some_and(|t| t < 0) || d.limit_bytes.is_some_and(|l| l < 1))
            {
                return Err(format!("{d:?} is valid"));
            }
            Ok(())
        }),
    )
}

/// Bytes that print as a Rust byte-string literal.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Bytes(pub Vec<u8>);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("b\"")?;
        for b in &self.0 {
            write!(f, "{}", std::ascii::escape_default(*b))?;
        }
        f.write_str("\"")
    }
}

/// A CRI log line from its parts (`valid` when each part is well formed).
#[derive(Clone, Debug)]
pub(crate) struct LogLineParts {
    time: String,
    stream: &'static str,
    tag: String,
    content: Bytes,
    newline: bool,
    valid: bool,
}

impl LogLineParts {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut v = format!("{} {} {} ", self.time, self.stream, self.tag).into_bytes();
        v.extend_from_slice(&self.content.0);
        if self.newline {
            v.push(b'\n');
        }
        v
    }
}

fn rfc3339() -> BoxedStrategy<(String, bool)> {
    let valid = (1970i32..2100, 1u32..13, 1u32..29, 0u32..24, 0u32..60, 0u32..60, 0u32..1_000_000_000, -14i32..15)
        .prop_map(|(y, mo, d, h, mi, s, ns, off)| {
            let zone = if off == 0 { "Z".to_string() } else { format!("{:+03}:00", off) };
            (format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ns:09}{zone}"), true)
        });
    let odd = text_from(&[
        "2016-10-06T00:17:09.669794202Z",
        "2016",
        "-",
        "T",
        ":",
        "Z",
        "+",
        "60",
        "99",
        ".",
        "0000000000000000000",
        "+24:00",
        "-00:00",
        "9999-12-31T23:59:59Z",
        "0000-01-01T00:00:00Z",
        "t",
        "z",
        " ",
    ])
    .prop_map(|s| (s, false));
    prop_oneof![3 => valid, 1 => odd].boxed()
}

pub(crate) fn log_line() -> BoxedStrategy<LogLineParts> {
    let stream = prop_oneof![4 => select(&["stdout", "stderr"][..]), 1 => select(&["stdin", "", "STDOUT", "x"][..])];
    let tag = prop_oneof![4 => select(&["F", "P", "F:x", "P:"][..]).prop_map(str::to_string), 1 => any_text()];
    let content = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => (any::<u8>(), 0usize..70_000).prop_map(|(b, n)| vec![b; n]),
    ];
    (rfc3339(), stream, tag, content, any::<bool>())
        .prop_map(|((time, ok_time), stream, tag, content, newline)| {
            let valid = ok_time
                && (stream == "stdout" || stream == "stderr")
                && !tag.contains(' ')
                && !tag.contains('\n')
                && !content.contains(&b'\n');
            LogLineParts { time, stream, tag, content: Bytes(content), newline, valid }
        })
        .boxed()
}

/// A log file and what is read of it.
#[derive(Clone, Debug)]
pub(crate) struct LogRead {
    lines: Vec<LogLineParts>,
    timestamps: bool,
    limit: Option<u64>,
    streams: u8,
    tail: usize,
}

/// Runs a future that never waits (reads from memory).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// CRI log lines: a well-formed line parses to its parts and its time prints back; a writer stays within
/// `limitBytes`; the tail offset stays within the file; the termination message's log tail within its bytes.
pub(crate) fn cri_log_line(o: &Options) -> Report {
    let read = (proptest::collection::vec(log_line(), 1..6), any::<bool>(), option::of(0u64..200), 0u8..3, 0usize..8)
        .prop_map(|(lines, timestamps, limit, streams, tail)| LogRead { lines, timestamps, limit, streams, tail });
    run(
        "cri-log-line",
        o,
        read,
        Arc::new(|r: &LogRead| {
            let streams = [Streams::All, Streams::Stdout, Streams::Stderr][usize::from(r.streams)];
            let mut w =
                LineWriter::new(ReadOptions { timestamps: r.timestamps, since: None, limit_bytes: r.limit, streams });
            let (mut out, mut file) = (vec![], vec![]);
            for l in &r.lines {
                let raw = l.bytes();
                file.extend_from_slice(&raw);
                let parsed = cri::parse(&raw);
                if l.valid {
                    let p = parsed.ok_or_else(|| format!("{:?} does not parse", Bytes(raw.clone())))?;
                    let partial = l.tag.split(':').next() == Some("P");
                    if p.stdout != (l.stream == "stdout") || p.partial != partial {
                        return Err(format!("{:?} parses to {p:?}", Bytes(raw.clone())));
                    }
                    let printed = cri::format_timestamp(&p.time);
                    if chrono::DateTime::parse_from_rfc3339(&printed).ok() != Some(p.time) {
                        return Err(format!("{:?}: the time prints {printed:?}, which is another time", Bytes(raw)));
                    }
                }
                w.push(&raw, &mut out);
            }
            if let Some(limit) = r.limit
                && out.len() as u64 > limit
            {
                return Err(format!("{} bytes written with limitBytes {limit}", out.len()));
            }
            let bytes = r.limit.unwrap_or(2048) as usize;
            let tail = kubelet_runtime::logs::tail_of_cri_log(&String::from_utf8_lossy(&file), r.tail, bytes);
            if tail.len() > bytes {
                return Err(format!("the termination message tail has {} bytes, over {bytes}", tail.len()));
            }
            let len = file.len() as u64;
            let at =
                ready(cri::tail_offset(&mut std::io::Cursor::new(file), len, r.tail)).map_err(|e| e.to_string())?;
            if at > len {
                return Err(format!("tail offset {at} past the end ({len})"));
            }
            Ok(())
        }),
    )
}

const PATH_TOKENS: &[&str] = &[
    "/",
    "/",
    "..",
    ".",
    "%2f",
    "%2e%2e",
    "//",
    "pods",
    "stats",
    "summary",
    "logs",
    "healthz",
    "metrics",
    "configz",
    "checkpoint",
    "runningpods",
    "exec",
    "a",
    "\u{0}",
    "?",
    "#",
    "~",
    "\\",
    "é",
];

/// A request's method, path and credentials headers.
#[derive(Clone, Debug)]
pub(crate) struct PathInput {
    method: String,
    path: String,
    authorization: Option<String>,
    protocols: Option<String>,
}

/// `clean_path`, `attributes` and `bearer_token`: a cleaned path is rooted, has no `.`, `..` or empty
/// segments, and cleaning it again changes nothing.
pub(crate) fn request_path(o: &Options) -> Report {
    let header = text_from(&[
        "Bearer ",
        "bearer",
        " ",
        "token",
        "base64url.bearer.authorization.k8s.io.",
        "dG9rZW4",
        ",",
        "=",
        "\u{0}",
        "é",
    ]);
    let input = (
        prop_oneof![
            select(&["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "get"][..]).prop_map(str::to_string),
            any_text()
        ],
        text_from(PATH_TOKENS),
        option::of(header.clone()),
        option::of(header),
    )
        .prop_map(|(method, path, authorization, protocols)| PathInput { method, path, authorization, protocols });
    run(
        "request-path",
        o,
        input,
        Arc::new(|i: &PathInput| {
            use kubelet_server::auth::{attributes, bearer_token, clean_path};
            let c = clean_path(&i.path);
            let segs: Vec<&str> = c.split('/').skip(1).collect();
            let bad = !c.starts_with('/') || (c != "/" && segs.iter().any(|s| s.is_empty() || *s == "." || *s == ".."));
            if bad || clean_path(&c) != c {
                return Err(format!("{:?} cleans to {c:?}", i.path));
            }
            let _ = attributes(&i.method, &i.path, "node-a");
            let _ = bearer_token(i.authorization.as_deref(), i.protocols.as_deref());
            Ok(())
        }),
    )
}

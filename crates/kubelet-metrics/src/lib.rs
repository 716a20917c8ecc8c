//! Prometheus metrics as the Kubernetes components expose them (`staging/src/k8s.io/component-base/metrics`,
//! rendered by client_golang's text encoder, format 0.0.4).
//!
//! - [`CounterVec`], [`GaugeVec`], [`HistogramVec`]: labelled metrics; a metric without labels is a vector
//!   with no label names, used with `&[]`.
//! - [`Registry`]: what one endpoint serves. [`global`] is the registry of `/metrics` (upstream's
//!   `legacyregistry`); `/metrics/resource` and `/metrics/probes` build their own.
//! - [`Collector`]: anything that writes samples at scrape time (gauges computed from state, the process
//!   metrics in [`process`]).
//!
//! HELP lines carry the stability level as component-base writes them: `# HELP name [ALPHA] text`. Families are
//! written sorted by name, samples sorted by label values, so a scrape is deterministic. Recording never fails
//! and never blocks for long (one short mutex per family); a label count that does not match the family's is a
//! programming error and panics in debug builds, and is dropped in release builds.

pub mod certs;
pub mod kubelet;
pub mod prober;
pub mod process;
pub mod slis;
mod text;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

pub use text::{escape_label, format_float};

/// Stability level of a metric (component-base `StabilityLevel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// `[ALPHA]`.
    Alpha,
    /// `[BETA]`.
    Beta,
    /// `[STABLE]`.
    Stable,
    /// No tag: collectors registered raw, such as client_golang's process collector.
    Raw,
}

impl Stability {
    fn tag(self) -> &'static str {
        match self {
            Stability::Alpha => "ALPHA",
            Stability::Beta => "BETA",
            Stability::Stable => "STABLE",
            Stability::Raw => "",
        }
    }
}

/// Name, help, stability and label names of a family.
#[derive(Clone, Debug)]
pub struct Opts {
    /// The full name, such as `kubelet_running_pods`.
    pub name: &'static str,
    /// Help text without the stability tag.
    pub help: &'static str,
    /// Stability level.
    pub stability: Stability,
    /// Label names, sorted.
    pub labels: &'static [&'static str],
    /// Whether the family is written before anything is recorded. component-base writes a plain metric
    /// always and a vector (even one without labels) only once a series exists.
    pub show_empty: bool,
}

impl Opts {
    /// An ALPHA family.
    pub const fn alpha(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Opts { name, help, stability: Stability::Alpha, labels, show_empty: labels.is_empty() }
    }

    /// A BETA family.
    pub const fn beta(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Opts { name, help, stability: Stability::Beta, labels, show_empty: labels.is_empty() }
    }

    /// A STABLE family.
    pub const fn stable(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Opts { name, help, stability: Stability::Stable, labels, show_empty: labels.is_empty() }
    }

    /// The same family written only once a series exists (a vector without labels).
    pub const fn vec(mut self) -> Self {
        self.show_empty = false;
        self
    }

    /// Writes the `# HELP` and `# TYPE` lines.
    pub fn header(&self, out: &mut String, kind: &str) {
        match self.stability {
            Stability::Raw => {
                let _ = writeln!(out, "# HELP {} {}", self.name, text::escape_help(self.help));
            }
            s => {
                let _ = writeln!(out, "# HELP {} [{}] {}", self.name, s.tag(), text::escape_help(self.help));
            }
        }
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }
}

/// Something that writes metric families at scrape time.
pub trait Collector: Send + Sync {
    /// The family names it writes (for sorting and duplicate checks).
    fn names(&self) -> Vec<&'static str>;
    /// Appends the families in text format.
    fn collect(&self, out: &mut String);
}

type Key = Box<[String]>;

fn key(labels: &[&str]) -> Key {
    labels.iter().map(|s| s.to_string()).collect()
}

fn sorted<V>(m: &HashMap<Key, V>) -> Vec<(&Key, &V)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// client_golang writes label pairs sorted by name and orders series by their values in that order; families
/// here declare their labels sorted, so the declared order is the written one.
fn check_sorted(opts: &Opts) {
    debug_assert!(opts.labels.windows(2).all(|w| w[0] < w[1]), "metric {}: declare labels sorted by name", opts.name);
}

fn label_ok(opts: &Opts, labels: &[&str]) -> bool {
    debug_assert_eq!(opts.labels.len(), labels.len(), "metric {}: label count", opts.name);
    opts.labels.len() == labels.len()
}

/// Writes a family of one value per label set (counters and gauges).
fn collect_values(opts: &Opts, kind: &str, m: &HashMap<Key, f64>, out: &mut String) {
    if m.is_empty() && !opts.show_empty {
        return;
    }
    opts.header(out, kind);
    if m.is_empty() {
        text::sample(out, opts.name, "", opts.labels, &[], None, 0.0);
    }
    for (k, v) in sorted(m) {
        text::sample(out, opts.name, "", opts.labels, k, None, *v);
    }
}

/// A monotonically increasing value per label set.
pub struct CounterVec {
    opts: Opts,
    values: Mutex<HashMap<Key, f64>>,
}

impl CounterVec {
    /// A new family.
    pub fn new(opts: Opts) -> Self {
        check_sorted(&opts);
        CounterVec { opts, values: Mutex::new(HashMap::new()) }
    }

    /// Adds one.
    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1.0);
    }

    /// Adds `v` (not negative).
    pub fn add(&self, labels: &[&str], v: f64) {
        if !label_ok(&self.opts, labels) || v < 0.0 {
            return;
        }
        *self.values.lock().unwrap().entry(key(labels)).or_insert(0.0) += v;
    }

    /// The current value (0 when never set).
    pub fn get(&self, labels: &[&str]) -> f64 {
        self.values.lock().unwrap().get(&key(labels)).copied().unwrap_or(0.0)
    }

    /// Forgets a label set.
    pub fn remove(&self, labels: &[&str]) {
        self.values.lock().unwrap().remove(&key(labels));
    }

    /// Forgets every label set.
    pub fn reset(&self) {
        self.values.lock().unwrap().clear();
    }
}

impl Collector for CounterVec {
    fn names(&self) -> Vec<&'static str> {
        vec![self.opts.name]
    }

    fn collect(&self, out: &mut String) {
        collect_values(&self.opts, "counter", &self.values.lock().unwrap(), out);
    }
}

/// A value that goes up and down, per label set.
pub struct GaugeVec {
    opts: Opts,
    values: Mutex<HashMap<Key, f64>>,
}

impl GaugeVec {
    /// A new family.
    pub fn new(opts: Opts) -> Self {
        check_sorted(&opts);
        GaugeVec { opts, values: Mutex::new(HashMap::new()) }
    }

    /// Sets the value.
    pub fn set(&self, labels: &[&str], v: f64) {
        if label_ok(&self.opts, labels) {
            self.values.lock().unwrap().insert(key(labels), v);
        }
    }

    /// Adds `v` (may be negative).
    pub fn add(&self, labels: &[&str], v: f64) {
        if label_ok(&self.opts, labels) {
            *self.values.lock().unwrap().entry(key(labels)).or_insert(0.0) += v;
        }
    }

    /// The current value (0 when never set).
    pub fn get(&self, labels: &[&str]) -> f64 {
        self.values.lock().unwrap().get(&key(labels)).copied().unwrap_or(0.0)
    }

    /// Forgets a label set.
    pub fn remove(&self, labels: &[&str]) {
        self.values.lock().unwrap().remove(&key(labels));
    }

    /// Forgets every label set.
    pub fn reset(&self) {
        self.values.lock().unwrap().clear();
    }
}

impl Collector for GaugeVec {
    fn names(&self) -> Vec<&'static str> {
        vec![self.opts.name]
    }

    fn collect(&self, out: &mut String) {
        collect_values(&self.opts, "gauge", &self.values.lock().unwrap(), out);
    }
}

#[derive(Clone, Debug, Default)]
struct HistState {
    /// Non-cumulative counts per bucket, plus the overflow bucket at the end.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Observations counted into buckets, per label set.
pub struct HistogramVec {
    opts: Opts,
    buckets: Vec<f64>,
    values: Mutex<HashMap<Key, HistState>>,
}

impl HistogramVec {
    /// A new family with these upper bounds (ascending; `+Inf` is implied).
    pub fn new(opts: Opts, buckets: Vec<f64>) -> Self {
        debug_assert!(buckets.windows(2).all(|w| w[0] < w[1]), "metric {}: buckets must ascend", opts.name);
        check_sorted(&opts);
        HistogramVec { opts, buckets, values: Mutex::new(HashMap::new()) }
    }

    /// Records one observation.
    pub fn observe(&self, labels: &[&str], v: f64) {
        if !label_ok(&self.opts, labels) {
            return;
        }
        let i = self.buckets.iter().position(|b| v <= *b).unwrap_or(self.buckets.len());
        let mut m = self.values.lock().unwrap();
        let st = m
            .entry(key(labels))
            .or_insert_with(|| HistState { counts: vec![0; self.buckets.len() + 1], ..Default::default() });
        st.counts[i] += 1;
        st.sum += v;
        st.count += 1;
    }

    /// The number of observations of a label set.
    pub fn count(&self, labels: &[&str]) -> u64 {
        self.values.lock().unwrap().get(&key(labels)).map(|s| s.count).unwrap_or(0)
    }

    /// Forgets a label set.
    pub fn remove(&self, labels: &[&str]) {
        self.values.lock().unwrap().remove(&key(labels));
    }

    /// The upper bounds.
    pub fn buckets(&self) -> &[f64] {
        &self.buckets
    }
}

impl Collector for HistogramVec {
    fn names(&self) -> Vec<&'static str> {
        vec![self.opts.name]
    }

    fn collect(&self, out: &mut String) {
        let m = self.values.lock().unwrap();
        if m.is_empty() && !self.opts.show_empty {
            return;
        }
        self.opts.header(out, "histogram");
        let empty = HistState { counts: vec![0; self.buckets.len() + 1], ..Default::default() };
        let rows: Vec<(&[String], &HistState)> =
            if m.is_empty() { vec![(&[], &empty)] } else { sorted(&m).into_iter().map(|(k, v)| (&k[..], v)).collect() };
        for (k, st) in rows {
            let mut cum = 0;
            for (b, c) in self.buckets.iter().zip(&st.counts) {
                cum += c;
                text::sample(out, self.opts.name, "_bucket", self.opts.labels, k, Some(&format_float(*b)), cum as f64);
            }
            text::sample(out, self.opts.name, "_bucket", self.opts.labels, k, Some("+Inf"), st.count as f64);
            text::sample(out, self.opts.name, "_sum", self.opts.labels, k, None, st.sum);
            text::sample(out, self.opts.name, "_count", self.opts.labels, k, None, st.count as f64);
        }
    }
}

/// `n` buckets starting at `start`, each `factor` times the previous (`prometheus.ExponentialBuckets`).
pub fn exponential_buckets(start: f64, factor: f64, n: usize) -> Vec<f64> {
    let mut v = Vec::with_capacity(n);
    let mut b = start;
    for _ in 0..n {
        v.push(b);
        b *= factor;
    }
    v
}

/// `n` buckets from `min` to `max`, each the same factor times the previous (`metrics.ExponentialBucketsRange`).
pub fn exponential_buckets_range(min: f64, max: f64, n: usize) -> Vec<f64> {
    let factor = (max / min).powf(1.0 / (n as f64 - 1.0));
    exponential_buckets(min, factor, n)
}

/// `n` buckets starting at `start`, `width` apart (`prometheus.LinearBuckets`).
pub fn linear_buckets(start: f64, width: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| start + width * i as f64).collect()
}

/// client_golang's `DefBuckets`.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What one endpoint serves.
#[derive(Default)]
pub struct Registry {
    collectors: Mutex<Vec<Arc<dyn Collector>>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a collector. Registering the same family name twice is a programming error (debug panic).
    pub fn register(&self, c: Arc<dyn Collector>) {
        let mut cs = self.collectors.lock().unwrap();
        if cfg!(debug_assertions) {
            for n in c.names() {
                assert!(!cs.iter().any(|o| o.names().contains(&n)), "metric {n} registered twice");
            }
        }
        cs.push(c);
    }

    /// The text exposition of every family, sorted by name.
    pub fn gather(&self) -> String {
        let cs: Vec<Arc<dyn Collector>> = self.collectors.lock().unwrap().clone();
        let mut parts: Vec<(&'static str, String)> = cs
            .iter()
            .map(|c| {
                let mut s = String::new();
                c.collect(&mut s);
                (c.names().first().copied().unwrap_or(""), s)
            })
            .collect();
        parts.sort_by(|a, b| a.0.cmp(b.0));
        parts.into_iter().map(|(_, s)| s).collect()
    }
}

/// The content type of the text exposition format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registry of `/metrics` (upstream's `legacyregistry`).
pub fn global() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::new)
}

/// Registers a collector in [`global`] once and returns it; used by the `static` metric definitions.
pub fn register_global<C: Collector + 'static>(c: C) -> Arc<C> {
    let c = Arc::new(c);
    global().register(c.clone());
    c
}

#[cfg(test)]
mod tests;

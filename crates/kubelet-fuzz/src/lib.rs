#![recursion_limit = "256"]
//! Property-based fuzzing (proptest) of every parser of outside input in rkubelet: the configuration file,
//! static pod manifests (file and URL, YAML and JSON), quantities, durations, CPU sets, label syntax, eviction
//! thresholds, node affinity and selectors, the kubelet API (paths, query strings, headers, the log query), CRI
//! log files, the kernel log's OOM records, resolv.conf and the `/proc` and cgroup files the stats read.
//!
//! Each [`Target`] runs a strategy (arbitrary text and bytes, and structure-aware generators: valid documents
//! with mutated fields, numbers with odd suffixes and huge digit counts, hostile paths) against one parser and
//! checks that it does not panic, returns within [`Options::timeout`], allocates at most
//! [`Options::alloc_limit`] at its peak (with [`CountingAlloc`] installed as the global allocator) and, where it
//! is cheap, that what it parses round-trips. A failure is shrunk to a minimal input ([`Failure`]).
//!
//! `tests/fuzz.rs` runs every target for a bounded number of cases; `rkubelet-bench --scenarios fuzz` runs them
//! round-robin for a given time (10 minutes in the full benchmark).

pub mod alloc;
mod engine;
pub mod strategies;
mod targets;

use std::fmt;
use std::time::Duration;

pub use alloc::CountingAlloc;

/// How long a target runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// This many passing cases (fewer when one fails).
    Cases(u32),
    /// Until this much time has passed (whole batches of about a second; at least one batch).
    Time(Duration),
}

/// How a target runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long it runs.
    pub budget: Budget,
    /// A case running longer than this fails (it is reported, not shrunk: it cannot be stopped).
    pub timeout: Duration,
    /// A case whose allocation peaks above this many bytes fails.
    pub alloc_limit: usize,
    /// A case reaching this many bytes is stopped there (its worker sleeps for good) and fails.
    pub alloc_cap: usize,
    /// The seed of the first batch (each batch of cases takes the next one).
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            budget: Budget::Cases(256),
            timeout: Duration::from_secs(5),
            alloc_limit: 256 << 20,
            alloc_cap: 1 << 30,
            seed: seed_from_env_or_clock(),
        }
    }
}

/// `RKUBELET_FUZZ_SEED` when set (to replay a run), else one from the clock.
#[allow(clippy::disallowed_methods)] // any changing number will do
pub fn seed_from_env_or_clock() -> u64 {
    if let Some(s) = std::env::var("RKUBELET_FUZZ_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_secs() ^ u64::from(now.subsec_nanos()).rotate_left(32)
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The parser panicked.
    Panic,
    /// A property does not hold (e.g. a round trip).
    Property,
    /// The case outran [`Options::timeout`].
    Hang,
    /// The case allocated more than allowed.
    Alloc,
    /// The target could not start.
    Setup,
}

/// A failing input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The message (panic text, broken property, time, bytes).
    pub message: String,
    /// The minimal failing input, as Rust's `Debug` prints it (a string is a Rust literal).
    pub minimal_input: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}\nminimal input: {}", self.kind, self.message, self.minimal_input)
    }
}

/// What a target did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The target.
    pub target: &'static str,
    /// Cases run (shrinking steps included).
    pub cases: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// The slowest case.
    pub slowest: Duration,
    /// Its input (cut short).
    pub slowest_input: String,
    /// The highest allocation peak of a case, in bytes (0 without [`CountingAlloc`]).
    pub peak_alloc: usize,
    /// The first failure, shrunk.
    pub failure: Option<Failure>,
}

impl Report {
    /// Adds the figures of a later run of the same target (cases and time add up, the worst case stays).
    pub fn merge(&mut self, other: Report) {
        self.cases += other.cases;
        self.elapsed += other.elapsed;
        if other.slowest > self.slowest {
            self.slowest = other.slowest;
            self.slowest_input = other.slowest_input;
        }
        self.peak_alloc = self.peak_alloc.max(other.peak_alloc);
        if self.failure.is_none() {
            self.failure = other.failure;
        }
    }
}

/// One fuzz target: a parser and its strategy.
#[derive(Clone, Copy)]
pub struct Target {
    /// Short name (`quantity`, `kubelet-config`, ...).
    pub name: &'static str,
    /// The parser(s) it drives.
    pub parser: &'static str,
    /// Cases the test suite runs (sized so the whole suite takes seconds in a debug build).
    pub test_cases: u32,
    run: fn(&Options) -> Report,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target").field("name", &self.name).field("parser", &self.parser).finish()
    }
}

impl Target {
    /// Runs the target.
    pub fn run(&self, opts: &Options) -> Report {
        (self.run)(opts)
    }
}

/// Every target.
pub fn targets() -> &'static [Target] {
    targets::ALL
}

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    targets::ALL.iter().find(|t| t.name == name)
}

/// Runs `check` over inputs of `strategy` as a target does (for parsers outside the libraries this crate can
/// reach, such as a binary's flag parsers).
pub fn fuzz<S>(
    name: &'static str,
    opts: &Options,
    strategy: S,
    check: impl Fn(&S::Value) -> Result<(), String> + Send + Sync + 'static,
) -> Report
where
    S: proptest::strategy::Strategy,
    S::Value: Clone + Send + fmt::Debug + 'static,
{
    engine::run(name, opts, strategy, std::sync::Arc::new(check))
}

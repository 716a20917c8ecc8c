//! Eviction signals and thresholds (`pkg/kubelet/eviction/api/types.go`, `helpers.go` ParseThresholdConfig,
//! thresholdsMet, GetThresholdQuantity): what `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod` and
//! `evictionMinimumReclaim` mean, parsed once at start-up; a bad entry stops start-up with an error naming it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

pub use kubelet_types::quantity::binary_si;
use kubelet_types::quantity::parse_quantity;

/// An eviction signal (`evictionapi.Signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// `memory.available`: machine memory minus the root cgroup's working set.
    MemoryAvailable,
    /// `allocatableMemory.available`: the pods cgroup's limit minus its working set.
    AllocatableMemoryAvailable,
    /// `nodefs.available`: free bytes of the kubelet's root dir filesystem.
    NodeFsAvailable,
    /// `nodefs.inodesFree`.
    NodeFsInodesFree,
    /// `imagefs.available`: free bytes of the runtime's image filesystem.
    ImageFsAvailable,
    /// `imagefs.inodesFree`.
    ImageFsInodesFree,
    /// `containerfs.available`: free bytes of the writable layers' filesystem.
    ContainerFsAvailable,
    /// `containerfs.inodesFree`.
    ContainerFsInodesFree,
    /// `pid.available`: the pid limit minus the running processes.
    PidAvailable,
}

/// Every signal, in upstream's declaration order.
pub const SIGNALS: [Signal; 9] = [
    Signal::MemoryAvailable,
    Signal::AllocatableMemoryAvailable,
    Signal::NodeFsAvailable,
    Signal::NodeFsInodesFree,
    Signal::ImageFsAvailable,
    Signal::ImageFsInodesFree,
    Signal::ContainerFsAvailable,
    Signal::ContainerFsInodesFree,
    Signal::PidAvailable,
];

/// The node conditions eviction sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    /// `MemoryPressure`.
    MemoryPressure,
    /// `DiskPressure`.
    DiskPressure,
    /// `PIDPressure`.
    PidPressure,
}

impl NodeCondition {
    /// The condition type.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

/// The resource a signal starves (`signalToResource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `inodes`.
    Inodes,
    /// `pids`.
    Pids,
}

impl Resource {
    /// The resource name as upstream writes it into messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Signal {
    /// The signal's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The signal named `s`.
    pub fn parse(s: &str) -> Option<Signal> {
        SIGNALS.into_iter().find(|g| g.as_str() == s)
    }

    /// The node condition the signal drives (`signalToNodeCondition`).
    pub fn condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => NodeCondition::MemoryPressure,
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// The resource the signal starves (`signalToResource`).
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                Resource::EphemeralStorage
            }
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree | Signal::ContainerFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// Whether the signal concerns memory (evaluated first, `byEvictionPriority`).
    pub fn is_memory(self) -> bool {
        matches!(self, Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A threshold's value: an absolute quantity (in base units) or a fraction of the capacity.
#[derive(Debug, Clone, PartialEq)]
pub enum ThresholdValue {
    /// A quantity, with its text as configured (`100Mi`).
    Quantity {
        /// Base units (bytes, inodes, pids).
        value: i64,
        /// As configured.
        text: String,
    },
    /// A fraction of the capacity (`0.1` for `10%`).
    Percentage(f32),
}

impl ThresholdValue {
    /// The value against `capacity` (`GetThresholdQuantity`).
    pub fn quantity(&self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity { value, .. } => *value,
            ThresholdValue::Percentage(p) => (capacity as f64 * *p as f64) as i64,
        }
    }

    /// The value as upstream prints it in messages: the configured quantity, or a percentage resolved against
    /// `capacity` (binary SI).
    pub fn display(&self, capacity: i64) -> String {
        match self {
            ThresholdValue::Quantity { text, .. } => text.clone(),
            ThresholdValue::Percentage(_) => binary_si(self.quantity(capacity)),
        }
    }
}

/// One threshold (`evictionapi.Threshold`, operator `LessThan`).
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The signal.
    pub signal: Signal,
    /// Crossed when the signal's available amount is below this.
    pub value: ThresholdValue,
    /// Zero for hard thresholds; the soft threshold's grace period otherwise.
    pub grace_period: Duration,
    /// Reclaim this much more than the threshold before the pressure counts as resolved.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// A hard threshold (no grace period, `isHardEvictionThreshold`).
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }

    /// Identity for bookkeeping: a hard and a soft threshold of one signal are different thresholds.
    pub fn key(&self) -> (Signal, bool) {
        (self.signal, self.is_hard())
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match &self.value {
            ThresholdValue::Quantity { text, .. } => text.clone(),
            ThresholdValue::Percentage(p) => format!("{}%", p * 100.0),
        };
        write!(f, "{}<{}", self.signal, v)?;
        if !self.is_hard() {
            write!(f, " (grace period {:?})", self.grace_period)?;
        }
        Ok(())
    }
}

/// A configuration error, naming the field and the signal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}[{signal}]: {message}")]
pub struct ThresholdError {
    /// `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod` or `evictionMinimumReclaim`.
    pub field: &'static str,
    /// The map key.
    pub signal: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: &'static str, signal: &str, message: impl Into<String>) -> ThresholdError {
    ThresholdError { field, signal: signal.to_string(), message: message.into() }
}

fn signal(field: &'static str, s: &str) -> Result<Signal, ThresholdError> {
    Signal::parse(s).ok_or_else(|| err(field, s, format!("unsupported eviction signal {s}")))
}

fn percentage(field: &'static str, s: &str, v: &str) -> Result<f32, ThresholdError> {
    v.trim_end_matches('%')
        .parse::<f64>()
        .map(|p| (p as f32) / 100.0)
        .map_err(|_| err(field, s, format!("invalid percentage {v:?}")))
}

fn quantity(field: &'static str, s: &str, v: &str) -> Result<i64, ThresholdError> {
    parse_quantity(v).map(|q| q.ceil() as i64).ok_or_else(|| {
        err(
            field,
            s,
            format!(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {v:?}"
            ),
        )
    })
}

/// One `signal: value` statement (`parseThresholdStatement`); `0%` and `100%` mean no threshold.
fn statement(field: &'static str, s: &str, v: &str) -> Result<Option<Threshold>, ThresholdError> {
    let sig = signal(field, s)?;
    let value = if v.ends_with('%') {
        if v == "0%" || v == "100%" {
            return Ok(None);
        }
        let p = percentage(field, s, v)?;
        if p < 0.0 {
            return Err(err(field, s, format!("eviction percentage threshold {s} must be >= 0%: {v}")));
        }
        if p > 1.0 {
            return Err(err(field, s, format!("eviction percentage threshold {s} must be <= 100%: {v}")));
        }
        ThresholdValue::Percentage(p)
    } else {
        let q = quantity(field, s, v)?;
        if q <= 0 {
            return Err(err(field, s, format!("eviction threshold {s} must be positive: {v}")));
        }
        ThresholdValue::Quantity { value: q, text: v.to_string() }
    };
    Ok(Some(Threshold { signal: sig, value, grace_period: Duration::ZERO, min_reclaim: None }))
}

/// The thresholds of the configuration (`ParseThresholdConfig`): hard ones, soft ones with their grace periods
/// (each soft threshold needs one), minimum reclaims, and — when `enforceNodeAllocatable` has `pods` — an
/// `allocatableMemory.available` twin of every hard `memory.available` threshold. Sorted by signal.
pub fn parse_thresholds(
    enforce_node_allocatable: &[String],
    hard: &BTreeMap<String, String>,
    soft: &BTreeMap<String, String>,
    soft_grace: &BTreeMap<String, Duration>,
    min_reclaim: &BTreeMap<String, String>,
) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = vec![];
    for (s, v) in hard {
        out.extend(statement("evictionHard", s, v)?);
    }
    for s in soft_grace.keys() {
        signal("evictionSoftGracePeriod", s)?;
    }
    for (s, v) in soft {
        let Some(mut t) = statement("evictionSoft", s, v)? else { continue };
        let grace = soft_grace.get(s).ok_or_else(|| {
            err(
                "evictionSoftGracePeriod",
                s,
                format!("grace period must be specified for the soft eviction threshold {s}"),
            )
        })?;
        // A soft threshold with a zero grace period acts as a hard one, as upstream.
        t.grace_period = *grace;
        out.push(t);
    }
    let mut reclaims: HashMap<Signal, ThresholdValue> = HashMap::new();
    for (s, v) in min_reclaim {
        let sig = signal("evictionMinimumReclaim", s)?;
        let value = if v.ends_with('%') {
            let p = percentage("evictionMinimumReclaim", s, v)?;
            if p <= 0.0 {
                return Err(err(
                    "evictionMinimumReclaim",
                    s,
                    format!("eviction percentage minimum reclaim {s} must be positive: {v}"),
                ));
            }
            ThresholdValue::Percentage(p)
        } else {
            let q = quantity("evictionMinimumReclaim", s, v)?;
            if q < 0 {
                return Err(err(
                    "evictionMinimumReclaim",
                    s,
                    format!("negative eviction minimum reclaim specified for {s}"),
                ));
            }
            ThresholdValue::Quantity { value: q, text: v.to_string() }
        };
        reclaims.insert(sig, value);
    }
    for t in &mut out {
        t.min_reclaim = reclaims.get(&t.signal).cloned();
    }
    if enforce_node_allocatable.iter().any(|k| k == "pods") {
        let twins: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold { signal: Signal::AllocatableMemoryAvailable, ..t.clone() })
            .collect();
        out.extend(twins);
    }
    out.sort_by_key(|t| (t.signal, !t.is_hard()));
    Ok(out)
}

/// One signal's observation (`signalObservation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// What is available.
    pub available: i64,
    /// The total it is part of.
    pub capacity: i64,
    /// When the figures were taken (None: unknown, always counts as new).
    pub time: Option<std::time::SystemTime>,
}

/// The observations of one pass, by signal.
pub type Observations = HashMap<Signal, Observation>;

/// The thresholds crossed by `observations` (`thresholdsMet`); with `enforce_min_reclaim`, a threshold counts as
/// crossed until the available amount is above it by its minimum reclaim.
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(o) = observations.get(&t.signal) else { return false };
            let mut q = t.value.quantity(o.capacity);
            if enforce_min_reclaim && let Some(m) = &t.min_reclaim {
                q += m.quantity(o.capacity);
            }
            q > o.available
        })
        .cloned()
        .collect()
}

/// A count as a decimal-SI quantity prints (`resource.NewQuantity(n, DecimalSI).String()`).
pub fn decimal_si(n: i64) -> String {
    let suffixes = ["", "k", "M", "G", "T", "P", "E"];
    let (mut v, mut i) = (n, 0);
    while v != 0 && i + 1 < suffixes.len() && v % 1000 == 0 {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", suffixes[i])
}

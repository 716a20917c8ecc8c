//! The eviction manager (`pkg/kubelet/eviction`): keeps the node alive under memory, disk and PID pressure.
//!
//! - [`threshold`]: signals, thresholds and their configuration (`api/types.go`, `helpers.go`).
//! - [`stats`]: the figures eviction decides on and the traits it owns towards the core (stats, pods, kills,
//!   node-level reclaim).
//! - [`rank`]: which pod goes first, and the eviction message.
//! - [`manager`]: the monitoring loop, node conditions, and pressure admission (`eviction_manager.go`).
//! - [`notifier`]: memory pressure within a second (memcg thresholds, PSI, polling).
//!
//! The crate knows nothing of the runtime or the apiserver: the core implements the traits.

mod local;
pub mod manager;
pub mod notifier;
pub mod rank;
pub mod stats;
pub mod threshold;

pub use local::exceeded_limit;
pub use manager::{EvictionConfig, EvictionDeps, EvictionManager, PressureState};
pub use stats::{
    ActivePods, ContainerUsage, EvictionStatus, FsUsage, NodeReclaimer, NodeStats, PodKiller, PodUsage, StatsSource,
};
pub use threshold::{NodeCondition, Observation, Observations, Signal, Threshold, ThresholdValue, parse_thresholds};

#[cfg(test)]
mod tests;

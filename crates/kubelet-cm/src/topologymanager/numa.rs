//! The machine's NUMA nodes and their distances (`numa_info.go`, from cadvisor's topology: sysfs
//! `devices/system/node/node<N>/distance`). Read once at start; a machine without NUMA nodes in sysfs is one node 0.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Mask, bits, is_narrower, mask_of};

/// The NUMA nodes and the distance from each to every other (indexed by node id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaInfo {
    /// Node ids, ascending.
    pub nodes: Vec<u32>,
    /// `distance` of each node.
    pub distances: BTreeMap<u32, Vec<u64>>,
}

impl NumaInfo {
    /// The nodes under `sysfs` (`/sys`).
    pub fn read(sysfs: &Path) -> Result<Self, String> {
        let dir = sysfs.join("devices/system/node");
        let mut nodes: Vec<u32> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
            .collect();
        nodes.sort_unstable();
        if nodes.is_empty() {
            return Ok(Self { nodes: vec![0], distances: BTreeMap::from([(0, vec![10])]) });
        }
        let mut distances = BTreeMap::new();
        for n in &nodes {
            let path = dir.join(format!("node{n}/distance"));
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let d: Vec<u64> = text.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            distances.insert(*n, d);
        }
        Ok(Self { nodes, distances })
    }

    /// Every node (`DefaultAffinityMask`).
    pub fn default_mask(&self) -> Mask {
        mask_of(self.nodes.iter().copied())
    }

    /// The mean distance between the nodes of `m` (`CalculateAverageFor`).
    pub fn average_distance(&self, m: Mask) -> f64 {
        let b = bits(m);
        if b.is_empty() {
            return 0.0;
        }
        let mut sum = 0.0;
        for x in &b {
            for y in &b {
                sum += self.distances.get(x).and_then(|d| d.get(*y as usize)).copied().unwrap_or(0) as f64;
            }
        }
        sum / (b.len() * b.len()) as f64
    }

    /// The closer of two masks (`Closest`): the narrower, or at equal width the lower mean distance, or the lower one.
    pub fn closest(&self, m1: Mask, m2: Mask) -> Mask {
        if m1.count_ones() != m2.count_ones() {
            return if is_narrower(m1, m2) { m1 } else { m2 };
        }
        let (d1, d2) = (self.average_distance(m1), self.average_distance(m2));
        if d1 == d2 {
            return if m1 < m2 { m1 } else { m2 };
        }
        if d1 < d2 { m1 } else { m2 }
    }
}

//! The topology manager's decisions (`pkg/kubelet/cm/topologymanager`: topology_manager.go TopologyHint, bitmask,
//! numa_info.go, policy.go's hint merge, policy_best_effort.go, policy_restricted.go, policy_single_numa_node.go,
//! policy_options.go). Pure: the hint providers' hints in, the best hint and whether to admit out; the kubelet's
//! admission step ([`kubelet::topology`]) asks the providers and allocates.
//!
//! A NUMA affinity is a bit mask of NUMA node ids (upstream's 64-bit `BitMask`). A provider gives, per resource,
//! `None` (no preference), an empty list (no possible placement) or its possible affinities, each preferred or not.

pub mod numa;

use std::collections::BTreeMap;

pub use numa::NumaInfo;

/// A NUMA affinity: bit `n` is NUMA node `n`.
pub type Mask = u64;

/// `TopologyAffinityError.Type()`.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";
/// `TopologyAffinityError.Error()`.
pub const TOPOLOGY_AFFINITY_MESSAGE: &str = "Resources cannot be allocated with Topology locality";
/// `defaultMaxAllowableNUMANodes`.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// The mask of `nodes`.
pub fn mask_of(nodes: impl IntoIterator<Item = u32>) -> Mask {
    nodes.into_iter().fold(0, |m, n| m | (1u64 << n))
}

/// The nodes of a mask, ascending.
pub fn bits(m: Mask) -> Vec<u32> {
    (0..64).filter(|b| m & (1u64 << b) != 0).collect()
}

/// `IsNarrowerThan`: fewer nodes, or as many and lower-numbered ones.
pub fn is_narrower(a: Mask, b: Mask) -> bool {
    if a.count_ones() == b.count_ones() { a < b } else { a.count_ones() < b.count_ones() }
}

/// Every non-empty combination of `nodes`, smallest first, each size in lexicographic order (`IterateBitMasks`).
pub fn iterate_masks(nodes: &[u32], mut f: impl FnMut(Mask)) {
    fn go(nodes: &[u32], acc: &mut Vec<u32>, size: usize, f: &mut dyn FnMut(Mask)) {
        if acc.len() == size {
            f(mask_of(acc.iter().copied()));
            return;
        }
        for i in 0..nodes.len() {
            acc.push(nodes[i]);
            go(&nodes[i + 1..], acc, size, f);
            acc.pop();
        }
    }
    for size in 1..=nodes.len() {
        go(nodes, &mut vec![], size, &mut f);
    }
}

/// A placement a provider can give (`TopologyHint`): None affinity is "anywhere".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopologyHint {
    /// The NUMA nodes.
    pub affinity: Option<Mask>,
    /// Whether this is among the provider's best placements.
    pub preferred: bool,
}

impl std::fmt::Display for TopologyHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.affinity {
            Some(m) => write!(f, "{{{:02b} {}}}", m, self.preferred),
            None => write!(f, "{{<nil> {}}}", self.preferred),
        }
    }
}

/// One provider's hints by resource name; empty: no preference for any resource.
pub type ProviderHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// The policy (`topologyManagerPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// `none`.
    None,
    /// `best-effort`.
    BestEffort,
    /// `restricted`.
    Restricted,
    /// `single-numa-node`.
    SingleNumaNode,
}

impl PolicyKind {
    /// Parses `topologyManagerPolicy`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(PolicyKind::None),
            "best-effort" => Ok(PolicyKind::BestEffort),
            "restricted" => Ok(PolicyKind::Restricted),
            "single-numa-node" => Ok(PolicyKind::SingleNumaNode),
            other => Err(format!("unknown policy: \"{other}\"")),
        }
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::BestEffort => "best-effort",
            PolicyKind::Restricted => "restricted",
            PolicyKind::SingleNumaNode => "single-numa-node",
        }
    }
}

/// `topologyManagerPolicyOptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOptions {
    /// `prefer-closest-numa-nodes`.
    pub prefer_closest_numa: bool,
    /// `max-allowable-numa-nodes`.
    pub max_allowable_numa_nodes: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        Self { prefer_closest_numa: false, max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES }
    }
}

impl PolicyOptions {
    /// Parses the options as upstream (`NewPolicyOptions`): `prefer-closest-numa-nodes` is GA,
    /// `max-allowable-numa-nodes` beta and refused with `TopologyManagerPolicyBetaOptions` (`beta`) off.
    pub fn parse(options: &BTreeMap<String, String>, beta: bool) -> Result<Self, String> {
        let mut o = Self::default();
        for (name, value) in options {
            if name == "max-allowable-numa-nodes" && !beta {
                return Err(format!(
                    "topology manager policy beta-level options not enabled, but option {name:?} provided"
                ));
            }
            match name.as_str() {
                "prefer-closest-numa-nodes" => {
                    o.prefer_closest_numa = go_parse_bool(value).ok_or_else(|| {
                        format!("bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax")
                    })?;
                }
                "max-allowable-numa-nodes" => {
                    let v: i64 = value.parse().map_err(|_| {
                        format!("unable to convert policy option to integer {name:?}: strconv.Atoi: parsing {value:?}: invalid syntax")
                    })?;
                    if v < DEFAULT_MAX_ALLOWABLE_NUMA_NODES as i64 {
                        return Err(format!(
                            "the minimum value of {name:?} should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                        ));
                    }
                    o.max_allowable_numa_nodes = v as usize;
                }
                other => return Err(format!("unknown Topology Manager Policy option: {other:?}")),
            }
        }
        Ok(o)
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A policy over a machine's NUMA nodes.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Which.
    pub kind: PolicyKind,
    /// The machine.
    pub numa: NumaInfo,
    /// Its options.
    pub options: PolicyOptions,
}

/// `filterProvidersHints`: one list per resource of every provider ({nil, true} for no preference, {nil, false}
/// for no possible placement).
fn filter_providers_hints(providers: &[ProviderHints]) -> Vec<Vec<TopologyHint>> {
    let mut all = vec![];
    for hints in providers {
        if hints.is_empty() {
            all.push(vec![TopologyHint { affinity: None, preferred: true }]);
            continue;
        }
        for h in hints.values() {
            match h {
                None => all.push(vec![TopologyHint { affinity: None, preferred: true }]),
                Some(l) if l.is_empty() => all.push(vec![TopologyHint { affinity: None, preferred: false }]),
                Some(l) => all.push(l.clone()),
            }
        }
    }
    all
}

fn narrowest(hints: &[TopologyHint]) -> Option<Mask> {
    hints.iter().filter_map(|h| h.affinity).fold(None, |best, m| match best {
        Some(b) if !is_narrower(m, b) => Some(b),
        _ => Some(m),
    })
}

/// `mergePermutation`.
fn merge_permutation(default: Mask, permutation: &[TopologyHint]) -> TopologyHint {
    let mut preferred = true;
    let mut first = None;
    let mut merged = default;
    for h in permutation {
        if let Some(m) = h.affinity {
            if *first.get_or_insert(m) != m {
                preferred = false;
            }
            merged &= m;
        }
        if !h.preferred {
            preferred = false;
        }
    }
    TopologyHint { affinity: Some(merged), preferred }
}

impl Policy {
    /// Whether alignment is guaranteed (`IsAlignmentGuaranteed`).
    pub fn alignment_guaranteed(&self) -> bool {
        self.kind == PolicyKind::SingleNumaNode
    }

    fn better_mask(&self, current: Mask, candidate: Mask) -> bool {
        if candidate == current {
            return false;
        }
        let best = if self.kind != PolicyKind::SingleNumaNode && self.options.prefer_closest_numa {
            self.numa.closest(current, candidate)
        } else if is_narrower(current, candidate) {
            current
        } else {
            candidate
        };
        best != current
    }

    /// `HintMerger.compare`: whether `candidate` replaces `current`.
    fn replaces(&self, current: Option<&TopologyHint>, candidate: &TopologyHint, best_non_preferred: u32) -> bool {
        let c_count = candidate.affinity.map(|m| m.count_ones()).unwrap_or(0);
        if c_count == 0 {
            return false;
        }
        let Some(current) = current else { return true };
        let (cur_mask, cand_mask) = (current.affinity.unwrap_or(0), candidate.affinity.unwrap_or(0));
        let cur_count = cur_mask.count_ones();
        match (current.preferred, candidate.preferred) {
            (false, true) => return true,
            (true, false) => return false,
            (true, true) => return self.better_mask(cur_mask, cand_mask),
            (false, false) => {}
        }
        if cur_count > best_non_preferred {
            return self.better_mask(cur_mask, cand_mask);
        }
        if cur_count == best_non_preferred {
            return c_count == best_non_preferred && self.better_mask(cur_mask, cand_mask);
        }
        if c_count > best_non_preferred {
            return false;
        }
        if c_count == best_non_preferred {
            return true;
        }
        if c_count != cur_count {
            return c_count > cur_count;
        }
        self.better_mask(cur_mask, cand_mask)
    }

    fn merge_filtered(&self, hints: &[Vec<TopologyHint>]) -> TopologyHint {
        let default = self.numa.default_mask();
        let best_non_preferred = hints.iter().filter_map(|h| narrowest(h)).map(|m| m.count_ones()).max().unwrap_or(0);
        let mut best: Option<TopologyHint> = None;
        let mut acc = vec![];
        iterate_permutations(hints, 0, &mut acc, &mut |perm| {
            let merged = merge_permutation(default, perm);
            if self.replaces(best.as_ref(), &merged, best_non_preferred) {
                best = Some(merged);
            }
        });
        best.unwrap_or(TopologyHint { affinity: Some(default), preferred: false })
    }

    /// The best hint and whether the pod is admitted (`Merge`).
    pub fn merge(&self, providers: &[ProviderHints]) -> (TopologyHint, bool) {
        let filtered = filter_providers_hints(providers);
        match self.kind {
            PolicyKind::None => (TopologyHint::default(), true),
            PolicyKind::BestEffort => (self.merge_filtered(&filtered), true),
            PolicyKind::Restricted => {
                let best = self.merge_filtered(&filtered);
                (best, best.preferred)
            }
            PolicyKind::SingleNumaNode => {
                let single: Vec<Vec<TopologyHint>> = filtered
                    .iter()
                    .map(|l| {
                        l.iter()
                            .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count_ones() == 1))
                            .copied()
                            .collect()
                    })
                    .collect();
                let mut best = self.merge_filtered(&single);
                if best.affinity == Some(self.numa.default_mask()) {
                    best.affinity = None;
                }
                (best, best.preferred)
            }
        }
    }
}

/// `iterateAllProviderTopologyHints`: every choice of one hint per list.
fn iterate_permutations(
    lists: &[Vec<TopologyHint>],
    i: usize,
    acc: &mut Vec<TopologyHint>,
    f: &mut dyn FnMut(&[TopologyHint]),
) {
    if i == lists.len() {
        f(acc);
        return;
    }
    for h in &lists[i] {
        acc.push(*h);
        iterate_permutations(lists, i + 1, acc, f);
        acc.pop();
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

//! The memory manager's static policy (`pkg/kubelet/cm/memorymanager/policy_static.go`): each container of a
//! Guaranteed pod gets its memory and huge pages as blocks on NUMA nodes (the topology manager's hint, else the
//! narrowest NUMA nodes with room), recorded in the machine state; NUMA nodes that hold a multi-node assignment are
//! only shared with assignments over the same nodes (`cells`). The memory of a pod's finished init containers serves
//! its later containers. Pure over the [`State`] it is given; the manager stores it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::qos::{QosClass, pod_qos};

use super::state::{Block, MachineState, MemoryTable, NodeState, State};
use crate::topologymanager::{Mask, TopologyHint, bits, is_narrower, iterate_masks, mask_of};

/// One NUMA node of the machine: its memory and huge pages (page size in bytes, pages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaMemory {
    /// The node's id.
    pub id: i64,
    /// Its memory in bytes.
    pub memory: u64,
    /// Its huge pages: (page size in bytes, number of pages).
    pub hugepages: Vec<(u64, u64)>,
}

/// Reserved memory per NUMA node and memory type (`systemReservedMemory`).
pub type SystemReserved = BTreeMap<i64, BTreeMap<String, u64>>;

/// The memory types a container asks for (`getRequestedResources`): memory and huge pages, in bytes.
pub fn requested(c: &Container) -> BTreeMap<String, u64> {
    let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    r.into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() == "memory" || kubelet_types::resources::is_hugepage_resource(k))
        .filter_map(|(k, q)| Some((k.clone(), kubelet_types::quantity::parse_quantity(&q.0)?.max(0.0) as u64)))
        .collect()
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's memory at once (`getPodRequestedResources`): the most of any init container (sidecars before it
/// counted) or the app containers and sidecars together.
pub fn pod_requested(pod: &Pod) -> BTreeMap<String, u64> {
    let Some(spec) = pod.spec.as_ref() else { return BTreeMap::new() };
    let (mut inits, mut sidecars): (BTreeMap<String, u64>, BTreeMap<String, u64>) = Default::default();
    for c in spec.init_containers.iter().flatten() {
        for (r, q) in requested(c) {
            let init = inits.entry(r.clone()).or_default();
            let side = sidecars.entry(r).or_default();
            if is_sidecar(c) {
                *side += q;
            } else if *side + q > *init {
                *init = *side + q;
            }
        }
    }
    let mut apps: BTreeMap<String, u64> = BTreeMap::new();
    for c in &spec.containers {
        for (r, q) in requested(c) {
            *apps.entry(r).or_default() += q;
        }
    }
    apps.into_iter()
        .map(|(r, q)| {
            let long = q + sidecars.get(&r).copied().unwrap_or(0);
            let init = inits.get(&r).copied().unwrap_or(0);
            (r, long.max(init))
        })
        .collect()
}

/// Huge page resource name of a page size (`HugePageResourceName`): `hugepages-2Mi`.
fn hugepage_name(size: u64) -> String {
    format!("hugepages-{}", kubelet_types::quantity::binary_si(size as i64))
}

/// The static policy of one machine.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    nodes: Vec<NumaMemory>,
    reserved: SystemReserved,
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

impl StaticPolicy {
    /// The policy (`NewPolicyStatic`): some memory must be reserved.
    pub fn new(nodes: Vec<NumaMemory>, reserved: SystemReserved) -> Result<Self, String> {
        let total: u64 = reserved.values().filter_map(|r| r.get("memory")).sum();
        if total == 0 {
            return Err("[memorymanager] you should specify the system reserved memory".into());
        }
        Ok(Self { nodes, reserved })
    }

    fn reserved_of(&self, node: i64, r: &str) -> u64 {
        self.reserved.get(&node).and_then(|m| m.get(r)).copied().unwrap_or(0)
    }

    /// The machine with nothing assigned (`getDefaultMachineState`).
    pub fn default_machine_state(&self) -> MachineState {
        let mut m = MachineState::new();
        for n in &self.nodes {
            let mut memory = BTreeMap::new();
            let mut hugepages = 0;
            for &(size, pages) in &n.hugepages {
                let name = hugepage_name(size);
                let reserved = self.reserved_of(n.id, &name);
                let total = size * pages;
                let allocatable = total.saturating_sub(reserved);
                memory.insert(
                    name,
                    MemoryTable { total, system_reserved: reserved, allocatable, reserved: 0, free: allocatable },
                );
                hugepages += total;
            }
            let reserved = self.reserved_of(n.id, "memory");
            let allocatable = n.memory.saturating_sub(reserved).saturating_sub(hugepages);
            memory.insert(
                "memory".into(),
                MemoryTable { total: n.memory, system_reserved: reserved, allocatable, reserved: 0, free: allocatable },
            );
            m.insert(n.id, NodeState { assignments: 0, memory, cells: Some(vec![n.id]) });
        }
        m
    }

    /// Checks a restored state against what its assignments imply, and fills a fresh one (`validateState`).
    pub fn validate(&self, s: &mut State) -> Result<(), String> {
        if s.machine.is_empty() {
            if !s.assignments.is_empty() {
                return Err("[memorymanager] machine state can not be empty when it has memory assignments".into());
            }
            s.machine = self.default_machine_state();
            return Ok(());
        }
        let mut expected = self.default_machine_state();
        for (pod, cs) in &s.assignments {
            for (c, blocks) in cs {
                for b in blocks {
                    for node in &b.numa_affinity {
                        let Some(n) = expected.get(node) else {
                            return Err(format!(
                                "[memorymanager] (pod: {pod}, container: {c}) the memory assignment uses the NUMA that does not exist"
                            ));
                        };
                        if !n.memory.contains_key(&b.kind) {
                            return Err(format!(
                                "[memorymanager] (pod: {pod}, container: {c}) the memory assignment uses memory resource that does not exist"
                            ));
                        }
                    }
                    reserve(&mut expected, &b.numa_affinity, &b.kind, b.size);
                }
            }
        }
        if !machine_states_equal(&s.machine, &expected) {
            return Err("[memorymanager] the expected machine state is different from the real one".into());
        }
        Ok(())
    }

    /// The NUMA placements of `request` (`calculateHints`), by memory type.
    pub fn calculate_hints(
        &self,
        machine: &MachineState,
        request: &BTreeMap<String, u64>,
        reusable: &dyn Fn(Mask, &str) -> u64,
    ) -> BTreeMap<String, Vec<TopologyHint>> {
        let nodes: Vec<u32> = machine.keys().map(|n| *n as u32).collect();
        let mut min_size = nodes.len() as u32;
        let mut hints: BTreeMap<String, Vec<TopologyHint>> = BTreeMap::new();
        iterate_masks(&nodes, |mask| {
            let ids: Vec<i64> = bits(mask).into_iter().map(i64::from).collect();
            let single = ids.len() == 1;
            let sum = |r: &str, f: fn(&MemoryTable) -> u64| -> u64 {
                ids.iter().map(|n| machine[n].memory.get(r).map(f).unwrap_or(0)).sum()
            };
            if request.keys().any(|r| sum(r, |t| t.allocatable) < request[r]) {
                return;
            }
            if mask.count_ones() < min_size {
                min_size = mask.count_ones();
            }
            if single && machine[&ids[0]].cells.as_ref().is_some_and(|c| c.len() > 1) {
                return;
            }
            for n in &ids {
                let st = &machine[n];
                if !single && st.assignments > 0 {
                    let cells = st.cells.clone().unwrap_or_default();
                    if cells.len() == 1 || sorted(cells) != ids {
                        return;
                    }
                }
            }
            if request.iter().any(|(r, q)| sum(r, |t| t.free) + reusable(mask, r) < *q) {
                return;
            }
            for r in request.keys() {
                hints.entry(r.clone()).or_default().push(TopologyHint { affinity: Some(mask), preferred: false });
            }
        });
        for list in hints.values_mut() {
            for h in list.iter_mut() {
                h.preferred = h.affinity.map(|m| m.count_ones()) == Some(min_size);
            }
        }
        hints
    }

    /// Allocates container `c`'s memory along `hint` (`Allocate`); None when it gets none (not Guaranteed, nothing
    /// asked). `reusable` is the pod's init containers' memory left for it.
    pub fn allocate(
        &self,
        s: &mut State,
        pod: &Pod,
        c: &Container,
        hint: Option<TopologyHint>,
        reusable: &dyn Fn(Mask, &str) -> u64,
    ) -> Result<Option<Vec<Block>>, String> {
        if pod_qos(pod) != QosClass::Guaranteed || kubelet_types::resources::is_pod_level_resources_set(pod) {
            return Ok(None);
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(blocks) = s.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
            return Ok(Some(blocks.clone()));
        }
        let request = requested(c);
        if request.is_empty() {
            return Ok(None);
        }
        let hint = hint.unwrap_or_default();
        let mut best = hint;
        if hint.affinity.is_none() {
            let default = self.calculate_hints(&s.machine, &request, reusable);
            let Some(d) = find_best(default.get("memory").map(Vec::as_slice).unwrap_or(&[])) else {
                return Err("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available".into());
            };
            if !d.preferred && best.preferred {
                return Err("[memorymanager] failed to find the default preferred hint".into());
            }
            best = d;
        }
        let mask = best.affinity.unwrap_or(0);
        if !satisfies(&s.machine, mask, &request) {
            let hints = self.calculate_hints(&s.machine, &request, reusable);
            let within: Vec<TopologyHint> = hints
                .get("memory")
                .into_iter()
                .flatten()
                .filter(|h| h.affinity.is_some_and(|a| a & mask == mask))
                .copied()
                .collect();
            let Some(e) = find_best(&within) else {
                return Err("[memorymanager] failed to find NUMA nodes to extend the current topology hint".into());
            };
            if !e.preferred && best.preferred {
                return Err("[memorymanager] failed to find the extended preferred hint".into());
            }
            best = e;
        }
        let mask = best.affinity.unwrap_or(0);
        if violates(&s.machine, mask) {
            return Err("[memorymanager] preferred hint violates NUMA node allocation".into());
        }
        let ids: Vec<i64> = bits(mask).into_iter().map(i64::from).collect();
        let mut blocks = vec![];
        for (r, size) in &request {
            blocks.push(Block { numa_affinity: ids.clone(), kind: r.clone(), size: *size });
            let reuse = reusable(mask, r);
            reserve(&mut s.machine, &ids, r, size.saturating_sub(reuse));
        }
        s.assignments.entry(uid).or_default().insert(c.name.clone(), blocks.clone());
        Ok(Some(blocks))
    }

    /// Returns a container's memory (`RemoveContainer`).
    pub fn remove(&self, s: &mut State, pod_uid: &str, container: &str) {
        let Some(blocks) = s.assignments.get_mut(pod_uid).and_then(|cs| cs.remove(container)) else { return };
        if s.assignments.get(pod_uid).is_some_and(|cs| cs.is_empty()) {
            s.assignments.remove(pod_uid);
        }
        for b in blocks {
            let mut released = b.size;
            for node in &b.numa_affinity {
                let Some(st) = s.machine.get_mut(node) else { continue };
                st.assignments -= 1;
                if st.assignments == 0 {
                    st.cells = Some(vec![*node]);
                }
                if released == 0 {
                    continue;
                }
                let Some(t) = st.memory.get_mut(&b.kind) else { continue };
                if t.reserved == 0 {
                    continue;
                }
                if t.reserved < released {
                    released -= t.reserved;
                    t.free += t.reserved;
                    t.reserved = 0;
                    continue;
                }
                t.free += released;
                t.reserved -= released;
                released = 0;
            }
        }
    }

    /// The hints of blocks a container or pod has already (`regenerateHints`): None when they do not match the
    /// request.
    pub fn regenerate(
        blocks: &[Block],
        request: &BTreeMap<String, u64>,
    ) -> Option<BTreeMap<String, Vec<TopologyHint>>> {
        if blocks.len() != request.len() {
            return None;
        }
        let mut hints: BTreeMap<String, Vec<TopologyHint>> = request.keys().map(|r| (r.clone(), vec![])).collect();
        for b in blocks {
            if request.get(&b.kind) != Some(&b.size) {
                return None;
            }
            let mask = mask_of(b.numa_affinity.iter().map(|n| *n as u32));
            hints.entry(b.kind.clone()).or_default().push(TopologyHint { affinity: Some(mask), preferred: true });
        }
        Some(hints)
    }
}

/// Reserves `size` of `kind` over `nodes`, filling them in order (`updateMachineState`).
fn reserve(machine: &mut MachineState, nodes: &[i64], kind: &str, mut size: u64) {
    for n in nodes {
        let Some(st) = machine.get_mut(n) else { continue };
        st.assignments += 1;
        st.cells = Some(nodes.to_vec());
        if size == 0 {
            continue;
        }
        let Some(t) = st.memory.get_mut(kind) else { continue };
        if t.free == 0 {
            continue;
        }
        if t.free >= size {
            t.reserved += size;
            t.free -= size;
            size = 0;
            continue;
        }
        size -= t.free;
        t.reserved += t.free;
        t.free = 0;
    }
}

/// `isAffinitySatisfyRequest`.
fn satisfies(machine: &MachineState, mask: Mask, request: &BTreeMap<String, u64>) -> bool {
    request.iter().all(|(r, q)| {
        let free: u64 = bits(mask)
            .iter()
            .filter_map(|n| machine.get(&i64::from(*n)))
            .filter_map(|st| st.memory.get(r))
            .map(|t| t.free)
            .sum();
        free >= *q
    })
}

/// `isAffinityViolatingNUMAAllocations`.
fn violates(machine: &MachineState, mask: Mask) -> bool {
    let ids: Vec<i64> = bits(mask).into_iter().map(i64::from).collect();
    if ids.len() == 1 {
        return false;
    }
    ids.iter().filter_map(|n| machine.get(n)).filter(|st| st.assignments > 0).any(|st| {
        let cells = st.cells.clone().unwrap_or_default();
        cells.len() == 1 || sorted(cells) != ids
    })
}

/// `findBestHint`: preferred over not, then the narrowest.
fn find_best(hints: &[TopologyHint]) -> Option<TopologyHint> {
    let mut best: Option<TopologyHint> = None;
    for h in hints {
        best = match best {
            None => Some(*h),
            Some(b) if h.preferred && !b.preferred => Some(*h),
            Some(b) if h.preferred == b.preferred && is_narrower(h.affinity.unwrap_or(0), b.affinity.unwrap_or(0)) => {
                Some(*h)
            }
            keep => keep,
        };
    }
    best
}

/// `areMachineStatesEqual`: assignments, cells and each table's total, reserved-by-system and allocatable, and the
/// free and reserved sums over each node's cells.
fn machine_states_equal(a: &MachineState, b: &MachineState) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().all(|(id, x)| {
        let Some(y) = b.get(id) else { return false };
        if x.assignments != y.assignments
            || sorted(x.cells.clone().unwrap_or_default()) != sorted(y.cells.clone().unwrap_or_default())
            || x.memory.len() != y.memory.len()
        {
            return false;
        }
        x.memory.iter().all(|(r, t)| {
            let Some(u) = y.memory.get(r) else { return false };
            if t.total != u.total || t.system_reserved != u.system_reserved || t.allocatable != u.allocatable {
                return false;
            }
            let sum = |m: &MachineState, f: fn(&MemoryTable) -> u64| -> u64 {
                x.cells.iter().flatten().filter_map(|n| m.get(n)?.memory.get(r)).map(f).sum()
            };
            sum(a, |t| t.free) == sum(b, |t| t.free) && sum(a, |t| t.reserved) == sum(b, |t| t.reserved)
        })
    })
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;

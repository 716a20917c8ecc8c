//! The memory manager (`pkg/kubelet/cm/memorymanager/memory_manager.go`): the policy (`None`, or `Static` with
//! [`policy::StaticPolicy`]), its state ([`state`]), the reserved memory per NUMA node (`reservedMemory`, checked
//! against the node allocatable reservation as upstream), and each container's NUMA nodes for its `cpuset.mems`.
//!
//! Contract: built once at start ([`MemoryManager::new`]; a bad reservation or a state file of another policy stops
//! the start with upstream's text). The topology manager asks it for hints and to allocate (a hint provider); the
//! runtime manager asks [`MemoryManager::container_created`] when it creates a container. Every change of the state
//! is written before the call returns.

pub mod policy;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::info;

use crate::topologymanager::{Mask, TopologyHint, mask_of};
use policy::{NumaMemory, StaticPolicy, SystemReserved};
use state::{Checkpoint, State};

/// `None`.
pub const NONE: &str = "None";
/// `Static`.
pub const STATIC: &str = "Static";

/// The machine's NUMA nodes with their memory and huge pages, from sysfs (`devices/system/node/node<N>/meminfo`,
/// `hugepages/hugepages-<size>kB/nr_hugepages`); without NUMA nodes in sysfs, one node 0 with `total_memory`.
pub fn numa_memory(sysfs: &Path, total_memory: u64) -> Vec<NumaMemory> {
    let dir = sysfs.join("devices/system/node");
    let mut ids: Vec<i64> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        return vec![NumaMemory { id: 0, memory: total_memory, hugepages: vec![] }];
    }
    ids.into_iter()
        .map(|id| {
            let node = dir.join(format!("node{id}"));
            let meminfo = std::fs::read_to_string(node.join("meminfo")).unwrap_or_default();
            let memory = meminfo
                .lines()
                .find(|l| l.contains("MemTotal:"))
                .and_then(|l| l.split_whitespace().rev().nth(1)?.parse::<u64>().ok())
                .map(|kb| kb * 1024)
                .unwrap_or(0);
            let mut hugepages: Vec<(u64, u64)> = std::fs::read_dir(node.join("hugepages"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let kb: u64 =
                        e.file_name().to_str()?.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
                    let n = std::fs::read_to_string(e.path().join("nr_hugepages")).ok()?.trim().parse().ok()?;
                    Some((kb * 1024, n))
                })
                .collect();
            hugepages.sort_unstable();
            NumaMemory { id, memory, hugepages }
        })
        .collect()
}

/// One `reservedMemory` entry: a NUMA node and its limits by memory type, in bytes.
pub type Reservation = (i64, BTreeMap<String, u64>);

/// Checks `reservedMemory` against the node allocatable reservation (`validateReservedMemory`, `convertReserved`):
/// every memory type reserved in either must sum to the same amount. `allocatable_reservation` is kube-reserved plus
/// system-reserved plus the hard eviction threshold, by memory type, in bytes.
pub fn system_reserved(
    nodes: &[NumaMemory],
    allocatable_reservation: &BTreeMap<String, u64>,
    reservations: &[Reservation],
) -> Result<SystemReserved, String> {
    let known: BTreeSet<i64> = nodes.iter().map(|n| n.id).collect();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (node, limits) in reservations {
        if !known.contains(node) {
            return Err(format!(
                "the reserved memory configuration references a NUMA node {node} that does not exist on this machine"
            ));
        }
        for (r, q) in limits {
            *totals.entry(r.clone()).or_default() += q;
        }
    }
    let types: BTreeSet<String> = totals
        .keys()
        .cloned()
        .chain(
            allocatable_reservation
                .keys()
                .filter(|r| r.as_str() == "memory" || kubelet_types::resources::is_hugepage_resource(r))
                .cloned(),
        )
        .collect();
    for r in types {
        let (reserved, allocatable) =
            (totals.get(&r).copied().unwrap_or(0), allocatable_reservation.get(&r).copied().unwrap_or(0));
        if reserved != allocatable {
            let q = |b: u64| kubelet_types::quantity::binary_si(b as i64);
            return Err(format!(
                "the total amount {:?} of type {r:?} is not equal to the value {:?} determined by Node Allocatable feature",
                q(reserved),
                q(allocatable)
            ));
        }
    }
    let mut out: SystemReserved = nodes.iter().map(|n| (n.id, BTreeMap::new())).collect();
    for (node, limits) in reservations {
        out.entry(*node).or_default().extend(limits.iter().map(|(k, v)| (k.clone(), *v)));
    }
    Ok(out)
}

/// Reusable bytes by NUMA mask and memory type.
type Reusable = BTreeMap<(Mask, String), u64>;

/// The memory manager.
pub struct MemoryManager {
    policy: Option<StaticPolicy>,
    checkpoint: Checkpoint,
    state: Mutex<State>,
    /// The memory of the pod's finished init containers its later containers may take, by pod UID, NUMA mask and
    /// memory type (`initContainersReusableMemory`).
    reuse: Mutex<HashMap<String, Reusable>>,
}

impl std::fmt::Debug for MemoryManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryManager").field("static", &self.policy.is_some()).finish()
    }
}

impl MemoryManager {
    /// The manager of `root` with `policy` (None: the None policy), its state restored and checked (`Start`).
    pub fn new(root: &Path, policy: Option<StaticPolicy>) -> Result<Self, String> {
        let name = if policy.is_some() { STATIC } else { NONE };
        let checkpoint = Checkpoint::new(root, name);
        let mut state = checkpoint.restore()?;
        if let Some(p) = &policy {
            p.validate(&mut state).map_err(|e| format!("start memory manager error: {e}"))?;
            checkpoint.store(&state)?;
            info!(policy = name, "Starting memorymanager");
        }
        Ok(Self { policy, checkpoint, state: Mutex::new(state), reuse: Mutex::default() })
    }

    /// Whether the static policy runs.
    pub fn is_static(&self) -> bool {
        self.policy.is_some()
    }

    /// A copy of the state (for tests and the pod resources API).
    pub fn state(&self) -> State {
        self.state.lock().unwrap().clone()
    }

    fn store(&self, s: &State) {
        if let Err(e) = self.checkpoint.store(s) {
            tracing::error!(error = %e, "failed to store the memory manager state");
        }
    }

    /// Forgets the memory of containers neither in `active` nor in `pod` (`removeStaleState`).
    pub fn prepare(&self, pod: &Pod, active: &BTreeSet<(String, String)>) {
        let Some(p) = &self.policy else { return };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut st = self.state.lock().unwrap();
        let stale: Vec<(String, String)> = st
            .assignments
            .iter()
            .flat_map(|(u, cs)| cs.keys().map(move |c| (u.clone(), c.clone())))
            .filter(|(u, c)| *u != uid && !active.contains(&(u.clone(), c.clone())))
            .collect();
        if stale.is_empty() {
            return;
        }
        for (u, c) in &stale {
            info!(podUID = %u, containerName = %c, "RemoveStaleState: removing container");
            p.remove(&mut st, u, c);
        }
        self.store(&st);
    }

    fn reusable(&self, uid: &str) -> impl Fn(Mask, &str) -> u64 + use<> {
        let map = self.reuse.lock().unwrap().get(uid).cloned().unwrap_or_default();
        move |mask, r| map.get(&(mask, r.to_string())).copied().unwrap_or(0)
    }

    /// The NUMA placements of container `c`'s memory (`GetTopologyHints`); None: no preference.
    pub fn topology_hints(&self, pod: &Pod, c: &Container) -> Option<BTreeMap<String, Vec<TopologyHint>>> {
        let p = self.policy.as_ref()?;
        if kubelet_types::qos::pod_qos(pod) != kubelet_types::qos::QosClass::Guaranteed
            || kubelet_types::resources::is_pod_level_resources_set(pod)
        {
            return None;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let request = policy::requested(c);
        let st = self.state.lock().unwrap();
        if let Some(blocks) = st.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
            return StaticPolicy::regenerate(blocks, &request);
        }
        Some(p.calculate_hints(&st.machine, &request, &self.reusable(&uid)))
    }

    /// The NUMA placements of the pod's memory (`GetPodTopologyHints`); None: no preference.
    pub fn pod_topology_hints(&self, pod: &Pod) -> Option<BTreeMap<String, Vec<TopologyHint>>> {
        let p = self.policy.as_ref()?;
        if kubelet_types::qos::pod_qos(pod) != kubelet_types::qos::QosClass::Guaranteed
            || kubelet_types::resources::is_pod_level_resources_set(pod)
        {
            return None;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let request = policy::pod_requested(pod);
        let st = self.state.lock().unwrap();
        let spec = pod.spec.as_ref()?;
        for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
            if let Some(blocks) = st.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
                return StaticPolicy::regenerate(blocks, &request);
            }
        }
        Some(p.calculate_hints(&st.machine, &request, &self.reusable(&uid)))
    }

    /// Gives container `c` of `pod` its memory along `hint` (`Allocate`).
    pub fn allocate_container(&self, pod: &Pod, c: &Container, hint: TopologyHint) -> Result<(), String> {
        let Some(p) = &self.policy else { return Ok(()) };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.reuse.lock().unwrap().retain(|u, _| *u == uid);
        let mut st = self.state.lock().unwrap();
        let had = st.assignments.get(&uid).is_some_and(|cs| cs.contains_key(&c.name));
        let hint = (hint.affinity.is_some() || hint.preferred).then_some(hint);
        let Some(blocks) = p.allocate(&mut st, pod, c, hint, &self.reusable(&uid))? else { return Ok(()) };
        self.update_reuse(pod, c, &blocks);
        if !had {
            self.shrink_init_blocks(&mut st, pod, c, &blocks);
            info!(podUID = %uid, containerName = %c.name, blocks = ?blocks, "memory allocated");
            self.store(&st);
        }
        Ok(())
    }

    /// `updatePodReusableMemory`: a regular init container's blocks become reusable; a later container takes from
    /// them.
    fn update_reuse(&self, pod: &Pod, c: &Container, blocks: &[state::Block]) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let inits = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref());
        let regular_init =
            inits.is_some_and(|i| i.iter().any(|i| i.name == c.name && i.restart_policy.as_deref() != Some("Always")));
        let mut reuse = self.reuse.lock().unwrap();
        let mine = reuse.entry(uid).or_default();
        for b in blocks {
            let key = (mask_of(b.numa_affinity.iter().map(|n| *n as u32)), b.kind.clone());
            if regular_init {
                let v = mine.entry(key).or_default();
                *v = (*v).max(b.size);
            } else if let Some(v) = mine.get_mut(&key) {
                *v = v.saturating_sub(b.size);
            }
        }
    }

    /// `updateInitContainersMemoryBlocks`: the blocks of the init containers before `c` shrink by what `c` reuses.
    fn shrink_init_blocks(&self, st: &mut State, pod: &Pod, c: &Container, blocks: &[state::Block]) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let inits = pod.spec.as_ref().and_then(|s| s.init_containers.clone()).unwrap_or_default();
        for b in blocks {
            let mut size = b.size;
            for i in &inits {
                if i.name == c.name || size == 0 {
                    break;
                }
                if i.restart_policy.as_deref() == Some("Always") {
                    continue;
                }
                let Some(ib) = st.assignments.get_mut(&uid).and_then(|cs| cs.get_mut(&i.name)) else { continue };
                for x in ib.iter_mut().filter(|x| x.size > 0 && x.kind == b.kind && x.numa_affinity == b.numa_affinity)
                {
                    if x.size > size {
                        x.size -= size;
                        size = 0;
                    } else {
                        size -= x.size;
                        x.size = 0;
                    }
                }
            }
        }
    }

    /// At container `c`'s creation (`AddContainer`, `GetMemoryNUMANodes`): the memory of the regular init containers
    /// before it is released, and its NUMA nodes are returned for its `cpuset.mems` (`0,1`); None without blocks.
    pub fn container_created(&self, pod: &Pod, c: &Container) -> Option<String> {
        let p = self.policy.as_ref()?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut st = self.state.lock().unwrap();
        let mut changed = false;
        for i in pod.spec.as_ref().and_then(|s| s.init_containers.as_ref()).into_iter().flatten() {
            if i.name == c.name {
                break;
            }
            if i.restart_policy.as_deref() == Some("Always") {
                continue;
            }
            if st.assignments.get(&uid).is_some_and(|cs| cs.contains_key(&i.name)) {
                p.remove(&mut st, &uid, &i.name);
                changed = true;
            }
        }
        if changed {
            self.store(&st);
        }
        let blocks = st.assignments.get(&uid)?.get(&c.name)?;
        let nodes: BTreeSet<i64> = blocks.iter().flat_map(|b| b.numa_affinity.iter().copied()).collect();
        (!nodes.is_empty()).then(|| nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_memory_must_match_the_node_allocatable_reservation() {
        let nodes = vec![NumaMemory { id: 0, memory: 8 << 30, hugepages: vec![] }];
        let alloc: BTreeMap<String, u64> = [("memory".to_string(), 1100u64 << 20), ("cpu".to_string(), 1)].into();
        let ok = [(0, [("memory".to_string(), 1100u64 << 20)].into())];
        assert_eq!(system_reserved(&nodes, &alloc, &ok).unwrap()[&0]["memory"], 1100 << 20);
        let short = [(0, [("memory".to_string(), 1u64 << 30)].into())];
        assert_eq!(
            system_reserved(&nodes, &alloc, &short).unwrap_err(),
            "the total amount \"1Gi\" of type \"memory\" is not equal to the value \"1100Mi\" determined by Node Allocatable feature"
        );
        let elsewhere = [(3, BTreeMap::new())];
        assert_eq!(
            system_reserved(&nodes, &alloc, &elsewhere).unwrap_err(),
            "the reserved memory configuration references a NUMA node 3 that does not exist on this machine"
        );
    }

    #[test]
    fn numa_nodes_memory_comes_from_sysfs() {
        let d = tempfile::tempdir().unwrap();
        let n0 = d.path().join("devices/system/node/node0");
        std::fs::create_dir_all(n0.join("hugepages/hugepages-2048kB")).unwrap();
        std::fs::write(n0.join("meminfo"), "Node 0 MemTotal:       8000000 kB\nNode 0 MemFree: 1 kB\n").unwrap();
        std::fs::write(n0.join("hugepages/hugepages-2048kB/nr_hugepages"), "4\n").unwrap();
        assert_eq!(
            numa_memory(d.path(), 1),
            [NumaMemory { id: 0, memory: 8_000_000 * 1024, hugepages: vec![(2 << 20, 4)] }]
        );
        assert_eq!(numa_memory(&d.path().join("x"), 7), [NumaMemory { id: 0, memory: 7, hugepages: vec![] }]);
    }
}

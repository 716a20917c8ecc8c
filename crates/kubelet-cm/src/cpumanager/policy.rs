//! The static policy's allocator (`pkg/kubelet/cm/cpumanager/policy_static.go`, `cpu_assignment.go`
//! takeByTopologyNUMAPacked): the reserved CPUs (given, or as many as kube- and system-reserved CPU rounded up,
//! taken by the same allocator over the whole machine), the shared pool (every CPU at first, the reserved ones
//! included, as without `strict-cpu-reservation`), exclusive CPUs for each container of a Guaranteed pod with an
//! integer CPU request, returned to the pool when the container goes. The allocation is upstream's topology-aware
//! best fit: whole NUMA nodes and sockets the request covers, then whole free cores, then single CPUs, each level
//! in the order of fewest free CPUs first (ties by id), so partly used cores fill up before fresh ones.
//!
//! With the topology manager it is a hint provider: the NUMA placements of a container's (or, at pod scope, the pod's)
//! exclusive CPUs (`GetTopologyHints`), and its allocation takes the CPUs of the chosen NUMA nodes first.
//!
//! Contract: pure over the [`State`] it is given; the caller stores the state after each change. No policy
//! options (`cpuManagerPolicyOptions`) yet: the caller refuses them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::cpuset::CpuSet;

use super::state::State;
use super::topology::{CpuInfo, Topology};
use crate::topologymanager::{Mask, TopologyHint, iterate_masks};

/// How many CPUs a container gets exclusively (`guaranteedCPUs`): its integer CPU request in a Guaranteed pod
/// without pod-level resources; 0 (the shared pool) otherwise.
pub fn guaranteed_cpus(pod: &Pod, c: &Container) -> usize {
    if kubelet_types::qos::pod_qos(pod) != kubelet_types::qos::QosClass::Guaranteed {
        return 0;
    }
    if pod.spec.as_ref().is_some_and(|s| s.resources.is_some()) {
        return 0;
    }
    let cpu = kubelet_types::qos::container_request(c, "cpu");
    let milli = kubelet_types::qos::milli_value(cpu);
    if milli <= 0 || milli % 1000 != 0 { 0 } else { (milli / 1000) as usize }
}

/// The CPUs a pod needs exclusively at once (`podGuaranteedCPUs`): the most of any init container (sidecars before it
/// counted) or the sum of the app containers and sidecars.
pub fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    let Some(spec) = pod.spec.as_ref() else { return 0 };
    let has_cpu =
        |c: &&Container| c.resources.as_ref().and_then(|r| r.requests.as_ref()).is_some_and(|r| r.contains_key("cpu"));
    let (mut inits, mut sidecars) = (0, 0);
    for c in spec.init_containers.iter().flatten().filter(has_cpu) {
        let n = guaranteed_cpus(pod, c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += n;
        } else if sidecars + n > inits {
            inits = sidecars + n;
        }
    }
    let apps: usize = spec.containers.iter().filter(has_cpu).map(|c| guaranteed_cpus(pod, c)).sum();
    inits.max(apps + sidecars)
}

/// The packed best fit (`takeByTopologyNUMAPacked`) of `n` CPUs out of `available`.
pub fn take_by_topology(topo: &Topology, available: &CpuSet, n: usize) -> Result<CpuSet, String> {
    take_packed(topo, available, n, false)
}

/// `takeByTopologyNUMAPacked`, with `prefer-align-cpus-by-uncorecache` when `uncore`: after whole NUMA nodes and
/// sockets, whole free uncore caches, then the free cores of one uncore cache when they hold the rest.
pub fn take_packed(topo: &Topology, available: &CpuSet, n: usize, uncore: bool) -> Result<CpuSet, String> {
    let mut acc = Accumulator {
        topo,
        details: topo.cpus.iter().filter(|(c, _)| available.contains(**c)).map(|(c, i)| (*c, *i)).collect(),
        result: CpuSet::default(),
        needed: n,
    };
    if acc.needed < 1 {
        return Ok(acc.result);
    }
    if acc.needed > acc.details.len() {
        return Err(format!(
            "not enough cpus available to satisfy request: requested={n}, available={}",
            available.len()
        ));
    }
    let numa_first = topo.num_sockets() >= topo.num_numa_nodes();
    let levels: [fn(&CpuInfo) -> u32; 2] =
        if numa_first { [|c| c.numa, |c| c.socket] } else { [|c| c.socket, |c| c.numa] };
    for level in levels {
        acc.take_full(level, numa_first);
        if acc.needed < 1 {
            return Ok(acc.result);
        }
    }
    if uncore {
        acc.take_uncore_caches(numa_first);
        if acc.needed < 1 {
            return Ok(acc.result);
        }
    }
    // Whole free cores.
    let per_core = topo.cpus_per_core();
    for core in acc.sorted_cores(numa_first) {
        let free = acc.details.values().filter(|c| c.core == core).count();
        if free == per_core && acc.needed >= per_core {
            acc.take(topo.cpus.iter().filter(|(_, c)| c.core == core).map(|(id, _)| *id).collect());
        }
    }
    if acc.needed < 1 {
        return Ok(acc.result);
    }
    // Single CPUs, core by core.
    let order: Vec<u32> = acc
        .sorted_cores(numa_first)
        .into_iter()
        .flat_map(|core| acc.details.iter().filter(move |(_, c)| c.core == core).map(|(id, _)| *id).collect::<Vec<_>>())
        .collect();
    for cpu in order {
        acc.take(vec![cpu]);
        if acc.needed < 1 {
            return Ok(acc.result);
        }
    }
    Err("failed to allocate cpus".into())
}

/// `cpuAccumulator`: what is still free and what was taken.
struct Accumulator<'a> {
    topo: &'a Topology,
    details: BTreeMap<u32, CpuInfo>,
    result: CpuSet,
    needed: usize,
}

impl Accumulator<'_> {
    fn take(&mut self, cpus: Vec<u32>) {
        for c in cpus {
            if self.details.remove(&c).is_some() {
                self.result.0.insert(c);
                self.needed = self.needed.saturating_sub(1);
            }
        }
    }

    /// Free CPUs of the units (by `unit`) among `ids`, sorted: fewest free first, then by id.
    fn sort(&self, mut ids: Vec<u32>, unit: impl Fn(&CpuInfo) -> u32) -> Vec<u32> {
        let free = |id: u32| self.details.values().filter(|c| unit(c) == id).count();
        ids.sort_by_key(|id| (free(*id), *id));
        ids
    }

    fn units(&self, unit: impl Fn(&CpuInfo) -> u32, within: impl Fn(&CpuInfo) -> bool) -> Vec<u32> {
        let set: std::collections::BTreeSet<u32> = self.details.values().filter(|c| within(c)).map(unit).collect();
        set.into_iter().collect()
    }

    fn sorted_numas(&self, numa_first: bool) -> Vec<u32> {
        if numa_first {
            return self.sort(self.units(|c| c.numa, |_| true), |c| c.numa);
        }
        let sockets = self.sort(self.units(|c| c.socket, |_| true), |c| c.socket);
        sockets.into_iter().flat_map(|s| self.sort(self.units(|c| c.numa, |c| c.socket == s), |c| c.numa)).collect()
    }

    fn sorted_sockets(&self, numa_first: bool) -> Vec<u32> {
        if !numa_first {
            return self.sort(self.units(|c| c.socket, |_| true), |c| c.socket);
        }
        let numas = self.sorted_numas(true);
        numas.into_iter().flat_map(|n| self.sort(self.units(|c| c.socket, |c| c.numa == n), |c| c.socket)).collect()
    }

    fn sorted_cores(&self, numa_first: bool) -> Vec<u32> {
        if numa_first {
            let sockets = self.sorted_sockets(true);
            return sockets
                .into_iter()
                .flat_map(|s| self.sort(self.units(|c| c.core, |c| c.socket == s), |c| c.core))
                .collect();
        }
        let numas = self.sorted_numas(false);
        numas.into_iter().flat_map(|n| self.sort(self.units(|c| c.core, |c| c.numa == n), |c| c.core)).collect()
    }

    /// The uncore caches with free CPUs, NUMA node by NUMA node, fewest free first (`sortAvailableUncoreCaches`).
    fn sorted_uncores(&self, numa_first: bool) -> Vec<u32> {
        self.sorted_numas(numa_first)
            .into_iter()
            .flat_map(|n| self.sort(self.units(|c| c.uncore, |c| c.numa == n), |c| c.uncore))
            .collect()
    }

    /// `takeUncoreCache`: whole free uncore caches the request covers, then the first uncore cache whose free cores
    /// hold the rest (`takePartialUncore`).
    fn take_uncore_caches(&mut self, numa_first: bool) {
        let caches = self.topo.num_uncore_caches().max(1);
        let per_uncore = self.topo.cpus.len() / caches;
        let per_core = self.topo.cpus_per_core().max(1);
        for u in self.sorted_uncores(numa_first) {
            if self.needed >= per_uncore {
                for free in self.sorted_uncores(numa_first) {
                    let all: Vec<u32> =
                        self.topo.cpus.iter().filter(|(_, c)| c.uncore == free).map(|(id, _)| *id).collect();
                    let have = self.details.values().filter(|c| c.uncore == free).count();
                    if have == all.len() && self.needed >= all.len() {
                        self.take(all);
                    }
                }
            }
            if self.needed < 1 {
                return;
            }
            // The free cores of this cache, lowest ids first, as many as the rest needs.
            let cores_needed = self.needed.div_ceil(per_core);
            let cores: std::collections::BTreeSet<u32> =
                self.details.values().filter(|c| c.uncore == u).map(|c| c.core).collect();
            let cores: Vec<u32> = cores.into_iter().take(cores_needed).collect();
            let mut cpus: Vec<u32> =
                self.details.iter().filter(|(_, c)| cores.contains(&c.core)).map(|(id, _)| *id).collect();
            if !self.needed.is_multiple_of(2) && per_core > 1 && cpus.len() > self.needed {
                cpus.pop();
            }
            if cpus.len() == self.needed {
                self.take(cpus);
            }
            if self.needed < 1 {
                return;
            }
        }
    }

    /// Takes whole free NUMA nodes or sockets (`unit`) that the request covers.
    fn take_full(&mut self, unit: fn(&CpuInfo) -> u32, numa_first: bool) {
        let is_numa = unit(&CpuInfo { core: 0, socket: 0, numa: 1, uncore: 0 }) == 1;
        let ids = if is_numa { self.sorted_numas(numa_first) } else { self.sorted_sockets(numa_first) };
        let size = |id: u32| self.topo.cpus.values().filter(|c| unit(c) == id).count();
        let free: Vec<u32> = ids
            .into_iter()
            .filter(|id| {
                let have = self.details.values().filter(|c| unit(c) == *id).count();
                if is_numa { have == size(*id) } else { have == self.topo.cpus_per_socket() }
            })
            .collect();
        for id in free {
            let all: Vec<u32> = self.topo.cpus.iter().filter(|(_, c)| unit(c) == id).map(|(cpu, _)| *cpu).collect();
            if self.needed >= all.len() {
                self.take(all);
            }
        }
    }
}

/// `cpuManagerPolicyOptions` rkubelet carries out (`StaticPolicyOptions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StaticPolicyOptions {
    /// `full-pcpus-only`: exclusive CPUs in whole physical cores only.
    pub full_pcpus_only: bool,
    /// `strict-cpu-reservation`: the reserved CPUs out of the shared pool too.
    pub strict_cpu_reservation: bool,
    /// `distribute-cpus-across-numa`: a request over several NUMA nodes split evenly between them.
    pub distribute_cpus_across_numa: bool,
    /// `prefer-align-cpus-by-uncorecache`: a request packed into last-level cache groups.
    pub prefer_align_by_uncore_cache: bool,
}

/// Option names by maturity (`policy_options.go`).
const ALPHA_OPTIONS: [&str; 2] = ["align-by-socket", "distribute-cpus-across-cores"];
const BETA_OPTIONS: [&str; 3] =
    ["strict-cpu-reservation", "distribute-cpus-across-numa", "prefer-align-cpus-by-uncorecache"];
const STABLE_OPTIONS: [&str; 1] = ["full-pcpus-only"];

impl StaticPolicyOptions {
    /// Parses the options as upstream (`CheckPolicyOptionAvailable`, `NewStaticPolicyOptions`); `alpha` and `beta` are
    /// the `CPUManagerPolicyAlphaOptions` and `CPUManagerPolicyBetaOptions` gates. Options rkubelet does not carry out
    /// are refused by the caller before.
    pub fn parse(options: &BTreeMap<String, String>, alpha: bool, beta: bool) -> Result<Self, String> {
        let mut o = Self::default();
        for (name, value) in options {
            let n = name.as_str();
            if !ALPHA_OPTIONS.contains(&n) && !BETA_OPTIONS.contains(&n) && !STABLE_OPTIONS.contains(&n) {
                return Err(format!("unknown CPU Manager Policy option: {name:?}"));
            }
            if ALPHA_OPTIONS.contains(&n) && !alpha {
                return Err(format!(
                    "CPU Manager Policy Alpha-level Options not enabled, but option {name:?} provided"
                ));
            }
            if BETA_OPTIONS.contains(&n) && !beta {
                return Err(format!("CPU Manager Policy Beta-level Options not enabled, but option {name:?} provided"));
            }
            let v = crate::topologymanager::go_parse_bool(value).ok_or_else(|| {
                format!("bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax")
            })?;
            match n {
                "full-pcpus-only" => o.full_pcpus_only = v,
                "strict-cpu-reservation" => o.strict_cpu_reservation = v,
                "distribute-cpus-across-numa" => o.distribute_cpus_across_numa = v,
                "prefer-align-cpus-by-uncorecache" => o.prefer_align_by_uncore_cache = v,
                _ if !v => {}
                _ => return Err(format!("unsupported cpumanager option: {name:?} ({value})")),
            }
        }
        if o.prefer_align_by_uncore_cache && o.distribute_cpus_across_numa {
            return Err(
                "static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used \
                 at the same time"
                    .into(),
            );
        }
        Ok(o)
    }
}

/// Why exclusive CPUs could not be given (`SMTAlignmentError`, or another error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// `SMTAlignmentError`: the request does not fill whole physical cores.
    #[error("{0}")]
    SmtAlignment(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl From<String> for AllocateError {
    fn from(s: String) -> Self {
        AllocateError::Other(s)
    }
}

/// The static policy of one machine.
#[derive(Clone, Debug)]
pub struct StaticPolicy {
    topo: Topology,
    reserved: CpuSet,
    /// The reserved CPUs and their core siblings (`reservedPhysicalCPUs`).
    reserved_physical: CpuSet,
    options: StaticPolicyOptions,
}

impl StaticPolicy {
    /// The policy reserving `reserved_cpus` (`reservedSystemCPUs`) if given, else `num_reserved` CPUs taken by
    /// topology (`NewStaticPolicy`).
    pub fn new(topo: Topology, num_reserved: usize, reserved_cpus: Option<CpuSet>) -> Result<Self, String> {
        let reserved = match reserved_cpus.filter(|r| !r.is_empty()) {
            Some(r) => r,
            None => take_by_topology(&topo, &topo.all(), num_reserved).unwrap_or_default(),
        };
        if reserved.len() != num_reserved {
            return Err(format!(
                "[cpumanager] unable to reserve the required amount of CPUs (size of {reserved} did not equal \
                 {num_reserved})"
            ));
        }
        let cores: std::collections::BTreeSet<(u32, u32)> =
            reserved.iter().filter_map(|c| topo.cpus.get(&c)).map(|i| (i.socket, i.core)).collect();
        let reserved_physical =
            CpuSet::of(topo.cpus.iter().filter(|(_, i)| cores.contains(&(i.socket, i.core))).map(|(id, _)| *id));
        Ok(Self { topo, reserved, reserved_physical, options: StaticPolicyOptions::default() })
    }

    /// With `cpuManagerPolicyOptions`.
    pub fn with_options(mut self, options: StaticPolicyOptions) -> Self {
        self.options = options;
        self
    }

    /// The reserved CPUs.
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// The CPUs pods may get exclusively (`GetAllocatableCPUs`).
    pub fn allocatable(&self) -> CpuSet {
        self.topo.all().difference(&self.reserved)
    }

    /// Checks a restored state and fills a fresh one (`validateState`): every CPU in the shared pool at first.
    pub fn validate(&self, state: &mut State) -> Result<(), String> {
        let mut all = self.topo.all();
        if self.options.strict_cpu_reservation {
            all = all.difference(&self.reserved);
        }
        if state.default_cpu_set.is_empty() {
            if state.assignments.is_empty() {
                state.default_cpu_set = all;
                return Ok(());
            }
            return Err("default cpuset cannot be empty".into());
        }
        if self.options.strict_cpu_reservation {
            let both = self.reserved.intersection(&state.default_cpu_set);
            if !both.is_empty() {
                return Err(format!(
                    "some of strictly reserved cpus: {:?} are present in defaultCpuSet: {:?}",
                    both.to_string(),
                    state.default_cpu_set.to_string()
                ));
            }
        } else if !self.reserved.is_subset_of(&state.default_cpu_set) {
            return Err(format!(
                "not all reserved cpus: {:?} are present in defaultCpuSet: {:?}",
                self.reserved.to_string(),
                state.default_cpu_set.to_string()
            ));
        }
        let mut union = state.default_cpu_set.clone();
        for (pod, cs) in &state.assignments {
            for (c, set) in cs {
                if !set.intersection(&state.default_cpu_set).is_empty() {
                    return Err(format!(
                        "pod: {pod}, container: {c} cpuset: {:?} overlaps with default cpuset {:?}",
                        set.to_string(),
                        state.default_cpu_set.to_string()
                    ));
                }
                union = union.union(set);
            }
        }
        if union != all {
            return Err(format!(
                "current set of available CPUs {:?} doesn't match with CPUs in state {:?}",
                all.to_string(),
                union.to_string()
            ));
        }
        Ok(())
    }

    /// Gives container `c` of `pod` its exclusive CPUs, if it gets any (`Allocate`; idempotent), from the shared pool
    /// and `reusable` (the CPUs of the pod's init containers that ran before it, upstream's `cpusToReuse`), those of
    /// the NUMA nodes of `affinity` (the topology manager's hint) first (`allocateCPUs`).
    pub fn allocate(
        &self,
        state: &mut State,
        pod: &Pod,
        c: &Container,
        reusable: &CpuSet,
        affinity: Option<Mask>,
    ) -> Result<Option<CpuSet>, AllocateError> {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return Ok(None);
        }
        if self.options.full_pcpus_only {
            let per_core = self.topo.cpus_per_core().max(1);
            if !n.is_multiple_of(per_core) {
                return Err(AllocateError::SmtAlignment(format!(
                    "SMT Alignment Error: requested {n} cpus not multiple cpus per core = {per_core}"
                )));
            }
            let physical = state.default_cpu_set.difference(&self.reserved_physical).len();
            if n > physical {
                return Err(AllocateError::SmtAlignment(format!(
                    "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {physical}, requested \
                     CPUs = {n}, CPUs per core = {per_core}"
                )));
            }
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(set) = state.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
            return Ok(Some(set.clone()));
        }
        let available = state.default_cpu_set.difference(&self.reserved).union(reusable);
        let mut cpus = CpuSet::default();
        if let Some(mask) = affinity {
            let aligned = available.intersection(&self.topo.cpus_in_numa_mask(mask));
            cpus = self.take(&aligned, n.min(aligned.len()))?;
        }
        let rest = self.take(&available.difference(&cpus), n - cpus.len())?;
        let cpus = cpus.union(&rest);
        state.default_cpu_set = state.default_cpu_set.difference(&cpus);
        state.assignments.entry(uid).or_default().insert(c.name.clone(), cpus.clone());
        Ok(Some(cpus))
    }

    /// `takeByTopology` with the policy's options.
    fn take(&self, available: &CpuSet, n: usize) -> Result<CpuSet, String> {
        if self.options.distribute_cpus_across_numa {
            let group = if self.options.full_pcpus_only { self.topo.cpus_per_core() } else { 1 };
            return super::distribute::take_distributed(&self.topo, available, n, group);
        }
        take_packed(&self.topo, available, n, self.options.prefer_align_by_uncore_cache)
    }

    /// The NUMA placements of `request` CPUs out of `available` and `reusable` (`generateCPUTopologyHints`): every
    /// combination of NUMA nodes holding enough of them (and all of `reusable`), preferred when as narrow as the
    /// narrowest combination that has enough CPUs at all.
    pub fn cpu_hints(&self, available: &CpuSet, reusable: &CpuSet, request: usize) -> Vec<TopologyHint> {
        let nodes = self.topo.numa_nodes();
        let mut min_size = nodes.len() as u32;
        let mut hints = vec![];
        iterate_masks(&nodes, |mask| {
            if self.topo.cpus_in_numa_mask(mask).len() >= request && mask.count_ones() < min_size {
                min_size = mask.count_ones();
            }
            let in_mask = |cpu: &u32| self.topo.cpus.get(cpu).is_some_and(|i| mask & (1u64 << i.numa) != 0);
            if !reusable.iter().all(|c| in_mask(&c)) {
                return;
            }
            let matching = reusable.len() + available.iter().filter(|c| in_mask(c)).count();
            if matching >= request {
                hints.push(TopologyHint { affinity: Some(mask), preferred: false });
            }
        });
        for h in &mut hints {
            h.preferred = h.affinity.map(|m| m.count_ones()) == Some(min_size);
        }
        hints
    }

    /// The CPU manager's hints for container `c` (`GetTopologyHints`): None for no preference (not Guaranteed with
    /// whole CPUs); the hints of its CPUs when it has them already (none at all when they are not as many as asked).
    pub fn topology_hints(
        &self,
        state: &State,
        pod: &Pod,
        c: &Container,
        reusable: &CpuSet,
    ) -> Option<Vec<TopologyHint>> {
        let n = guaranteed_cpus(pod, c);
        if n == 0 {
            return None;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(set) = state.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
            if set.len() != n {
                return Some(vec![]);
            }
            return Some(self.cpu_hints(set, &CpuSet::default(), n));
        }
        let available = state.default_cpu_set.difference(&self.reserved);
        Some(self.cpu_hints(&available, reusable, n))
    }

    /// The pod's hints (`GetPodTopologyHints`), for the pod scope: its whole request (`podGuaranteedCPUs`).
    pub fn pod_topology_hints(&self, state: &State, pod: &Pod, reusable: &CpuSet) -> Option<Vec<TopologyHint>> {
        let n = pod_guaranteed_cpus(pod);
        if n == 0 {
            return None;
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.as_ref()?;
        let mut assigned = CpuSet::default();
        for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
            if let Some(set) = state.assignments.get(&uid).and_then(|cs| cs.get(&c.name)) {
                if set.len() != guaranteed_cpus(pod, c) {
                    return Some(vec![]);
                }
                assigned = assigned.union(set);
            }
        }
        if assigned.len() == n {
            return Some(self.cpu_hints(&assigned, &CpuSet::default(), n));
        }
        let available = state.default_cpu_set.difference(&self.reserved);
        Some(self.cpu_hints(&available, &reusable.union(&assigned), n))
    }

    /// Returns a container's exclusive CPUs to the shared pool, but those its pod's other containers hold
    /// (`RemoveContainer`).
    pub fn remove(&self, state: &mut State, pod_uid: &str, container: &str) {
        let Some(cs) = state.assignments.get_mut(pod_uid) else { return };
        let Some(released) = cs.remove(container) else { return };
        let in_use = cs.values().fold(CpuSet::default(), |acc, s| acc.union(s));
        if cs.is_empty() {
            state.assignments.remove(pod_uid);
        }
        state.default_cpu_set = state.default_cpu_set.union(&released.difference(&in_use));
    }

    /// The CPUs container `c` of pod `pod_uid` runs on (`GetCPUSetOrDefault`): its own, or the shared pool.
    pub fn cpuset_of(&self, state: &State, pod_uid: &str, container: &str) -> CpuSet {
        state
            .assignments
            .get(pod_uid)
            .and_then(|cs| cs.get(container))
            .cloned()
            .unwrap_or_else(|| state.default_cpu_set.clone())
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;

//! The CPU manager (`pkg/kubelet/cm/cpumanager/cpu_manager.go`): owns the state ([`super::state`]) and the policy
//! (`none`, or `static` with [`super::policy::StaticPolicy`]).
//!
//! Contract: built once at start ([`CpuManager::new`]; a state file of another policy or a corrupted one stops the
//! start with upstream's text). The admission step calls [`CpuManager::allocate`] for each pod it admits (after
//! forgetting the containers of pods no longer active), the runtime manager asks [`CpuManager::cpuset`] when it
//! creates a container, and the reconcile loop (every `cpuManagerReconcilePeriod`) asks
//! [`CpuManager::reconcile`] which running containers need their cpuset updated and reports each done update with
//! [`CpuManager::updated`]. Every change of the state is written to the file before the call returns.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::cpuset::CpuSet;
use tracing::info;

use super::policy::{AllocateError, StaticPolicy};
use super::state::{Checkpoint, State};
use crate::topologymanager::{Mask, TopologyHint};

/// The policy name of the none policy.
pub const NONE: &str = "none";
/// The policy name of the static policy.
pub const STATIC: &str = "static";

/// A running container, as the reconcile loop sees it: pod UID, container name, container ID.
pub type RunningContainer = (String, String, String);

/// The CPU manager.
pub struct CpuManager {
    policy: Option<StaticPolicy>,
    checkpoint: Checkpoint,
    state: Mutex<State>,
    /// The cpuset last sent to each container (`lastUpdateState`), by container ID.
    last: Mutex<HashMap<String, CpuSet>>,
    /// The CPUs the pod being admitted may reuse (`cpusToReuse`), by pod UID.
    reuse: Mutex<HashMap<String, CpuSet>>,
}

impl std::fmt::Debug for CpuManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuManager").field("static", &self.policy.is_some()).finish()
    }
}

impl CpuManager {
    /// The manager of `root` (`<root>/cpu_manager_state`) with `policy` (None: the none policy), its state
    /// restored and checked (`Start`).
    pub fn new(root: &Path, policy: Option<StaticPolicy>) -> Result<Self, String> {
        let name = if policy.is_some() { STATIC } else { NONE };
        let checkpoint = Checkpoint::new(root, name);
        let mut state = checkpoint.restore().map_err(|e| e.to_string())?;
        if let Some(p) = &policy {
            p.validate(&mut state).map_err(|e| format!("start cpu manager error: {e}"))?;
            checkpoint.store(&state).map_err(|e| e.to_string())?;
            info!(reserved = %p.reserved(), defaultCpuSet = %state.default_cpu_set, "CPU manager started with the static policy");
        }
        Ok(Self { policy, checkpoint, state: Mutex::new(state), last: Mutex::default(), reuse: Mutex::default() })
    }

    /// Whether the static policy runs.
    pub fn is_static(&self) -> bool {
        self.policy.is_some()
    }

    /// The reserved CPUs (none under the none policy).
    pub fn reserved(&self) -> CpuSet {
        self.policy.as_ref().map(|p| p.reserved().clone()).unwrap_or_default()
    }

    /// The shared pool.
    pub fn default_cpu_set(&self) -> CpuSet {
        self.state.lock().unwrap().default_cpu_set.clone()
    }

    /// Forgets the exclusive CPUs of containers not in `active` (pod UID, container name) (`removeStaleState`).
    pub fn remove_stale(&self, active: &BTreeSet<(String, String)>) {
        let Some(p) = &self.policy else { return };
        let mut st = self.state.lock().unwrap();
        let stale: Vec<(String, String)> = st
            .assignments
            .iter()
            .flat_map(|(pod, cs)| cs.keys().map(move |c| (pod.clone(), c.clone())))
            .filter(|k| !active.contains(k))
            .collect();
        if stale.is_empty() {
            return;
        }
        for (pod, c) in &stale {
            info!(podUID = %pod, containerName = %c, "RemoveStaleState: removing container");
            p.remove(&mut st, pod, c);
        }
        if let Err(e) = self.checkpoint.store(&st) {
            tracing::error!(error = %e, "failed to store the CPU manager state");
        }
    }

    /// Gives the init and app containers of `pod` their exclusive CPUs, if any (`Allocate` of each container);
    /// `active` are the containers of the pods already admitted, whose CPUs stay. The error is upstream's.
    pub fn allocate(&self, pod: &Pod, active: &BTreeSet<(String, String)>) -> Result<(), AllocateError> {
        self.prepare(pod, active);
        let spec = pod.spec.as_ref();
        for c in spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers)) {
            self.allocate_container(pod, c, None)?;
        }
        Ok(())
    }

    /// Before a pod's containers are allocated: forgets the CPUs of containers neither in `active` nor in `pod`
    /// (`removeStaleState`).
    pub fn prepare(&self, pod: &Pod, active: &BTreeSet<(String, String)>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut keep = active.clone();
        let spec = pod.spec.as_ref();
        keep.extend(
            spec.into_iter()
                .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                .map(|c| (uid.clone(), c.name.clone())),
        );
        self.remove_stale(&keep);
    }

    /// Gives container `c` of `pod` its exclusive CPUs, if any, those of the NUMA nodes of `affinity` first
    /// (`Allocate`). The CPUs of the init containers that ran to completion serve the containers after them
    /// (`updateCPUsToReuse`); a sidecar (restartable init container) keeps its own.
    pub fn allocate_container(&self, pod: &Pod, c: &Container, affinity: Option<Mask>) -> Result<(), AllocateError> {
        let Some(p) = &self.policy else { return Ok(()) };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut st = self.state.lock().unwrap();
        let mut reuse = self.reuse.lock().unwrap();
        reuse.retain(|u, _| *u == uid);
        let reusable = reuse.entry(uid.clone()).or_default();
        let had = st.assignments.get(&uid).is_some_and(|cs| cs.contains_key(&c.name));
        let Some(cpus) = p.allocate(&mut st, pod, c, reusable, affinity)? else { return Ok(()) };
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|i| i.iter().any(|i| i.name == c.name));
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        *reusable = if init && !sidecar { reusable.union(&cpus) } else { reusable.difference(&cpus) };
        if !had {
            info!(podUID = %uid, containerName = %c.name, cpuset = %cpus, "exclusive CPUs allocated");
            self.checkpoint.store(&st).map_err(|e| AllocateError::Other(e.to_string()))?;
        }
        Ok(())
    }

    /// The NUMA placements of container `c`'s exclusive CPUs (`GetTopologyHints`); None: no preference.
    pub fn topology_hints(&self, pod: &Pod, c: &Container) -> Option<Vec<TopologyHint>> {
        let p = self.policy.as_ref()?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let reusable = self.reuse.lock().unwrap().get(&uid).cloned().unwrap_or_default();
        p.topology_hints(&self.state.lock().unwrap(), pod, c, &reusable)
    }

    /// The NUMA placements of the pod's exclusive CPUs (`GetPodTopologyHints`); None: no preference.
    pub fn pod_topology_hints(&self, pod: &Pod) -> Option<Vec<TopologyHint>> {
        let p = self.policy.as_ref()?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let reusable = self.reuse.lock().unwrap().get(&uid).cloned().unwrap_or_default();
        p.pod_topology_hints(&self.state.lock().unwrap(), pod, &reusable)
    }

    /// The cpuset of a container at its creation (`GetCPUAffinity`): its exclusive CPUs, or the shared pool; None
    /// under the none policy (the runtime's default).
    pub fn cpuset(&self, pod_uid: &str, container: &str) -> Option<String> {
        let p = self.policy.as_ref()?;
        let set = p.cpuset_of(&self.state.lock().unwrap(), pod_uid, container);
        (!set.is_empty()).then(|| set.to_string())
    }

    /// Whether the container holds exclusive CPUs (`ContainerHasExclusiveCPUs`: an assignment in the state).
    pub fn has_exclusive(&self, pod_uid: &str, container: &str) -> bool {
        let st = self.state.lock().unwrap();
        st.assignments.get(pod_uid).and_then(|c| c.get(container)).is_some_and(|set| !set.is_empty())
    }

    /// The running containers whose cpuset differs from the last one sent to them (`reconcileState`), with the
    /// cpuset to send; forgets containers no longer running.
    pub fn reconcile(&self, running: &[RunningContainer]) -> Vec<(String, CpuSet)> {
        let Some(p) = &self.policy else { return vec![] };
        let st = self.state.lock().unwrap();
        let mut last = self.last.lock().unwrap();
        let ids: BTreeSet<&str> = running.iter().map(|(_, _, id)| id.as_str()).collect();
        last.retain(|id, _| ids.contains(id.as_str()));
        running
            .iter()
            .filter_map(|(pod, c, id)| {
                let set = p.cpuset_of(&st, pod, c);
                (!set.is_empty() && last.get(id) != Some(&set)).then(|| (id.clone(), set))
            })
            .collect()
    }

    /// A container's cpuset was sent to the runtime.
    pub fn updated(&self, container_id: &str, set: CpuSet) {
        self.last.lock().unwrap().insert(container_id.to_string(), set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpumanager::topology::Topology;

    fn pod(uid: &str, cpu: &str) -> Pod {
        use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let r = std::collections::BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ]);
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    resources: Some(ResourceRequirements {
                        limits: Some(r.clone()),
                        requests: Some(r),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_static_manager_allocates_reconciles_persists_and_frees() {
        let dir = tempfile::tempdir().unwrap();
        let two = || Topology::from_rows(&[(0, 0, 0, 0), (1, 1, 0, 0)]);
        let m = CpuManager::new(dir.path(), Some(StaticPolicy::new(two(), 1, None).unwrap())).unwrap();
        assert_eq!((m.reserved().to_string(), m.default_cpu_set().to_string()), ("0".into(), "0-1".into()));
        let burstable = ("b".to_string(), "app".to_string(), "id-b".to_string());
        assert_eq!(m.reconcile(std::slice::from_ref(&burstable)), vec![("id-b".into(), CpuSet::parse("0-1").unwrap())]);
        m.updated("id-b", CpuSet::parse("0-1").unwrap());
        assert!(m.reconcile(std::slice::from_ref(&burstable)).is_empty(), "nothing changed");
        m.allocate(&pod("g", "1"), &BTreeSet::from([("b".into(), "app".into())])).unwrap();
        assert_eq!(m.cpuset("g", "app").as_deref(), Some("1"));
        assert_eq!(m.cpuset("b", "app").as_deref(), Some("0"), "the shared pool shrank");
        let g = ("g".to_string(), "app".to_string(), "id-g".to_string());
        let updates = m.reconcile(&[burstable.clone(), g.clone()]);
        assert_eq!(
            updates,
            vec![("id-b".into(), CpuSet::parse("0").unwrap()), ("id-g".into(), CpuSet::parse("1").unwrap())]
        );
        let e = m.allocate(&pod("h", "1"), &BTreeSet::from([("g".into(), "app".into())])).unwrap_err();
        assert_eq!(e.to_string(), "not enough cpus available to satisfy request: requested=1, available=0");
        // A restart keeps the assignment (the file), and upstream's text refuses another policy.
        let again = CpuManager::new(dir.path(), Some(StaticPolicy::new(two(), 1, None).unwrap())).unwrap();
        assert_eq!(again.cpuset("g", "app").as_deref(), Some("1"));
        let e = CpuManager::new(dir.path(), None).unwrap_err();
        assert!(e.contains("configured policy \"none\" differs from state checkpoint policy \"static\""), "{e}");
        // The pod goes: its CPU returns to the pool.
        again.remove_stale(&BTreeSet::from([("b".into(), "app".into())]));
        assert_eq!(again.default_cpu_set().to_string(), "0-1");
        let text = std::fs::read_to_string(dir.path().join("cpu_manager_state")).unwrap();
        assert!(text.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":"#), "{text}");
        // The none policy writes its file as upstream and gives no cpuset.
        let none_dir = tempfile::tempdir().unwrap();
        let none = CpuManager::new(none_dir.path(), None).unwrap();
        assert_eq!(none.cpuset("g", "app"), None);
        assert_eq!(
            std::fs::read_to_string(none_dir.path().join("cpu_manager_state")).unwrap(),
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
        );
    }

    #[test]
    fn an_init_containers_cpus_serve_the_app_containers_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let three = Topology::from_rows(&[(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 0, 0)]);
        let m = CpuManager::new(dir.path(), Some(StaticPolicy::new(three, 1, None).unwrap())).unwrap();
        let mut p = pod("g", "2");
        let spec = p.spec.as_mut().unwrap();
        let mut init = spec.containers[0].clone();
        init.name = "init".into();
        spec.init_containers = Some(vec![init]);
        m.allocate(&p, &BTreeSet::new()).expect("the app reuses the init container's 2 CPUs (only 2 are free)");
        assert_eq!(m.cpuset("g", "init").as_deref(), Some("1-2"));
        assert_eq!(m.cpuset("g", "app").as_deref(), Some("1-2"));
        assert_eq!(m.default_cpu_set().to_string(), "0");
        m.remove_stale(&BTreeSet::new());
        assert_eq!(m.default_cpu_set().to_string(), "0-2", "both gone: every CPU back");
    }
}

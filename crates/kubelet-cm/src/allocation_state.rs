//! The resources of each pod's containers as checkpointed by upstream's `pkg/kubelet/allocation/state`
//! (`state_checkpoint.go`, `checkpoint.go`): `allocated_pods_state` (what the kubelet admitted or resized a pod to,
//! owned by the allocation manager) and `actuated_pods_state` (what the runtime was last told, owned by the runtime
//! manager) under the root directory, both as `{"data":"<json>","checksum":N}` where the data is
//! `{"entries":{podUID:{"ContainerResources":{container:ResourceRequirements}}}}` and the checksum FNV-32a of
//! go-spew's `%#v` of the data string (`(string)<data>`), so the Go kubelet reads what rkubelet wrote and the other
//! way round.
//!
//! Contract: one owner per file; every change but a removal rewrites the file whole (temporary file, fsync, rename)
//! unless the checksum is unchanged; removals stay in memory until the next write, as upstream. A file that cannot be
//! read back stops the start with upstream's advice (drain the node, delete the file).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_types::quantity::ParsedQuantity;
use serde::{Deserialize, Serialize};

use crate::checksum::fnv32a;

/// The allocation manager's file (`allocatedPodsStateFile`).
pub const ALLOCATED_FILE: &str = "allocated_pods_state";
/// The runtime manager's file (`actuatedPodsStateFile`).
pub const ACTUATED_FILE: &str = "actuated_pods_state";

/// Resources by container name.
pub type Containers = BTreeMap<String, ResourceRequirements>;

/// Why the state could not be restored or written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Upstream's restore error, with its advice.
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete pod resource \
         information checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore {
        /// What is wrong.
        reason: String,
        /// The file.
        path: String,
    },
    /// The file could not be written.
    #[error("failed to save pod resource information checkpoint {path}: {reason}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

#[derive(Serialize, Deserialize, Default)]
struct PodInfo {
    #[serde(rename = "ContainerResources", default)]
    container_resources: Containers,
}

#[derive(Serialize, Deserialize, Default)]
struct Data {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: BTreeMap<String, PodInfo>,
}

#[derive(Serialize, Deserialize)]
struct File {
    data: String,
    checksum: u64,
}

/// The checksum of a checkpoint's data (`checksum.New(cp.Data)`).
pub fn checksum(data: &str) -> u64 {
    u64::from(fnv32a(format!("(string){data}").as_bytes()))
}

/// A quantity as upstream marshals it (canonical form); one that does not parse is kept as written.
fn canonical(q: &Quantity) -> Quantity {
    ParsedQuantity::parse(&q.0).map(|p| Quantity(p.to_string())).unwrap_or_else(|_| q.clone())
}

/// `r` with canonical quantities and empty lists dropped (upstream's omitempty).
pub fn normalized(r: &ResourceRequirements) -> ResourceRequirements {
    let list = |m: &Option<BTreeMap<String, Quantity>>| {
        m.as_ref().filter(|m| !m.is_empty()).map(|m| m.iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
    };
    ResourceRequirements {
        claims: r.claims.clone().filter(|c| !c.is_empty()),
        limits: list(&r.limits),
        requests: list(&r.requests),
    }
}

/// One checkpoint file and its contents.
#[derive(Debug)]
pub struct PodResourceState {
    /// None: kept in memory only.
    path: Option<PathBuf>,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: BTreeMap<String, Containers>,
    last_checksum: u64,
}

impl PodResourceState {
    /// A state that is never written (tests, and a kubelet without a root directory).
    pub fn in_memory() -> Self {
        Self { path: None, inner: Mutex::default() }
    }

    /// Restores `<root>/<name>` (`NewStateCheckpoint`); a missing file is an empty state.
    pub fn open(root: &Path, name: &str) -> Result<Self, StateError> {
        let path = root.join(name);
        let fail = |reason: String| StateError::Restore { reason, path: path.display().to_string() };
        let mut inner = Inner::default();
        match std::fs::read(&path) {
            Ok(bytes) => {
                let f: File = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
                if f.checksum != checksum(&f.data) {
                    return Err(fail("checkpoint is corrupted".into()));
                }
                let d: Data = serde_json::from_str(&f.data)
                    .map_err(|e| fail(format!("failed to get pod resource information: {e}")))?;
                inner.pods = d.entries.into_iter().map(|(k, v)| (k, v.container_resources)).collect();
                inner.last_checksum = f.checksum;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e.to_string())),
        }
        Ok(Self { path: Some(path), inner: Mutex::new(inner) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resources recorded for a container.
    pub fn container(&self, pod_uid: &str, container: &str) -> Option<ResourceRequirements> {
        self.lock().pods.get(pod_uid)?.get(container).cloned()
    }

    /// The resources recorded for a pod's containers.
    pub fn pod(&self, pod_uid: &str) -> Option<Containers> {
        self.lock().pods.get(pod_uid).cloned()
    }

    /// The pods recorded.
    pub fn pod_uids(&self) -> Vec<String> {
        self.lock().pods.keys().cloned().collect()
    }

    /// Records a container's resources (`SetContainerResources`).
    pub fn set_container(&self, pod_uid: &str, container: &str, r: &ResourceRequirements) -> Result<(), StateError> {
        let mut inner = self.lock();
        inner.pods.entry(pod_uid.to_string()).or_default().insert(container.to_string(), normalized(r));
        self.store(&mut inner)
    }

    /// Records a pod's containers' resources, replacing what was recorded (`SetPodResourceInfo`).
    pub fn set_pod(&self, pod_uid: &str, containers: Containers) -> Result<(), StateError> {
        let mut inner = self.lock();
        let containers = containers.iter().map(|(k, v)| (k.clone(), normalized(v))).collect();
        inner.pods.insert(pod_uid.to_string(), containers);
        self.store(&mut inner)
    }

    /// Forgets a pod; written with the next change (`RemovePod`).
    pub fn remove_pod(&self, pod_uid: &str) {
        self.lock().pods.remove(pod_uid);
    }

    /// Forgets every pod not in `keep`; written with the next change (`RemoveOrphanedPods`).
    pub fn remove_orphans(&self, keep: &HashSet<String>) {
        self.lock().pods.retain(|uid, _| keep.contains(uid));
    }

    fn store(&self, inner: &mut Inner) -> Result<(), StateError> {
        let Some(path) = &self.path else { return Ok(()) };
        let entries = inner.pods.iter().map(|(k, v)| (k.clone(), PodInfo { container_resources: v.clone() })).collect();
        let data = serde_json::to_string(&Data { entries }).unwrap_or_default();
        let sum = checksum(&data);
        if sum == inner.last_checksum {
            return Ok(());
        }
        let fail = |e: std::io::Error| StateError::Write { path: path.display().to_string(), reason: e.to_string() };
        let bytes = serde_json::to_vec(&File { data, checksum: sum }).unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(fail)?;
            f.write_all(&bytes).map_err(fail)?;
            f.sync_all().map_err(fail)?;
        }
        std::fs::rename(&tmp, path).map_err(fail)?;
        inner.last_checksum = sum;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cpu: &str, mem: &str) -> ResourceRequirements {
        let m = [("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(mem.into()))];
        ResourceRequirements { requests: Some(m.into_iter().collect()), ..Default::default() }
    }

    #[test]
    fn upstreams_golden_checkpoint_is_read_and_written_byte_for_byte() {
        // state_checkpoint_test.go Test_stateCheckpoint_formatUpgraded.
        let golden = r#"{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}"#;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ALLOCATED_FILE), golden).unwrap();
        let s = PodResourceState::open(dir.path(), ALLOCATED_FILE).unwrap();
        assert_eq!(s.container("pod1", "container1"), Some(req("1Ki", "1Ki")));
        s.set_container("pod1", "container1", &req("2Ki", "1Ki")).unwrap();
        assert_eq!(s.container("pod1", "container1"), Some(req("2Ki", "1Ki")));
        s.set_container("pod1", "container1", &req("1Ki", "1024Mi")).unwrap();
        assert!(std::fs::read_to_string(dir.path().join(ALLOCATED_FILE)).unwrap().contains(r#"\"memory\":\"1Gi\""#));
        s.set_container("pod1", "container1", &req("1Ki", "1Ki")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(ALLOCATED_FILE)).unwrap(), golden);
    }

    #[test]
    fn a_corrupted_file_stops_the_start_with_upstreams_advice_and_removals_wait_for_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let s = PodResourceState::open(dir.path(), ACTUATED_FILE).unwrap();
        s.set_container("a", "c", &req("500m", "64Mi")).unwrap();
        s.set_container("b", "c", &req("1", "1Gi")).unwrap();
        s.remove_pod("a");
        let again = PodResourceState::open(dir.path(), ACTUATED_FILE).unwrap();
        assert_eq!(again.pod_uids(), vec!["a", "b"], "a removal alone is not written");
        s.remove_orphans(&HashSet::new());
        s.set_pod("c", Containers::new()).unwrap();
        let again = PodResourceState::open(dir.path(), ACTUATED_FILE).unwrap();
        assert_eq!(again.pod_uids(), vec!["c"]);
        let path = dir.path().join(ACTUATED_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("ContainerResources\\\":{}", "ContainerResources\\\":null")).unwrap();
        let e = PodResourceState::open(dir.path(), ACTUATED_FILE).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "could not restore state from checkpoint: checkpoint is corrupted, please drain this node and delete \
                 pod resource information checkpoint file {:?} before restarting Kubelet",
                path.display().to_string()
            )
        );
    }
}

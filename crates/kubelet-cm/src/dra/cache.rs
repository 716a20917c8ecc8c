//! The claim info cache (`pkg/kubelet/cm/dra/claiminfo.go`): what the node knows of each ResourceClaim its pods
//! use — the pods referencing it, the devices each driver prepared and their CDI ids — keyed `namespace/name`, and
//! written to `dra_manager_state` after every change so a restarted kubelet (rkubelet or the Go kubelet) knows which
//! claims it must still unprepare.
//!
//! Contract: owned by the DRA manager behind one mutex; every change is followed by [`ClaimCache::sync`] while the
//! lock is held. Claims read from the checkpoint are not "prepared" (as upstream): the first pod sync after a
//! restart calls `NodePrepareResources` again, which drivers answer idempotently.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::checkpoint::{self, CheckpointError, ClaimInfoState, Device};

/// The `driver_name` of the all-drivers count (`DRAResourceClaimsInUseAnyDriver`).
pub const ANY_DRIVER: &str = "<any>";

/// A claim on this node (`ClaimInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimInfo {
    /// What the checkpoint keeps.
    pub state: ClaimInfoState,
    /// Whether `NodePrepareResources` succeeded for it since this kubelet started.
    pub prepared: bool,
}

impl ClaimInfo {
    /// A new entry for an allocated claim: its drivers, no pods, no devices yet.
    pub fn new(uid: &str, name: &str, namespace: &str, drivers: &[String]) -> Self {
        let driver_state = drivers.iter().map(|d| (d.clone(), Default::default())).collect();
        let state = ClaimInfoState {
            claim_uid: uid.into(),
            claim_name: name.into(),
            namespace: namespace.into(),
            pod_uids: Default::default(),
            driver_state,
        };
        Self { state, prepared: false }
    }

    /// Adds a device a driver prepared (`addDevice`).
    pub fn add_device(&mut self, driver: &str, device: Device) {
        let ds = self.state.driver_state.entry(driver.into()).or_default();
        ds.devices.get_or_insert_with(Vec::new).push(device);
    }

    /// The CDI ids of the devices serving `request` (all when empty; a device naming no request serves all), as
    /// `cdiDevicesAsList`.
    pub fn cdi_devices(&self, request: &str) -> Vec<String> {
        let mut out = vec![];
        for ds in self.state.driver_state.values() {
            for d in ds.devices.iter().flatten() {
                let names = d.request_names.as_deref().unwrap_or_default();
                if request.is_empty() || names.is_empty() || names.iter().any(|n| n == request) {
                    out.extend(d.cdi_device_ids.iter().flatten().cloned());
                }
            }
        }
        out
    }
}

/// The cache and its checkpoint folder.
#[derive(Debug)]
pub struct ClaimCache {
    dir: PathBuf,
    claims: BTreeMap<String, ClaimInfo>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl ClaimCache {
    /// The cache as the checkpoint in `dir` holds it (created empty when absent); a corrupted file is an error
    /// (upstream refuses to start: drain the node and remove the file).
    pub fn load(dir: impl Into<PathBuf>) -> Result<Self, CheckpointError> {
        let dir = dir.into();
        let claims = checkpoint::read_or_create(&dir)?
            .into_iter()
            .map(|s| (key(&s.namespace, &s.claim_name), ClaimInfo { state: s, prepared: false }))
            .collect();
        Ok(Self { dir, claims })
    }

    /// The entry of a claim.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&ClaimInfo> {
        self.claims.get(&key(namespace, name))
    }

    /// The entry of a claim, to change.
    pub fn get_mut(&mut self, namespace: &str, name: &str) -> Option<&mut ClaimInfo> {
        self.claims.get_mut(&key(namespace, name))
    }

    /// Adds (or replaces) an entry.
    pub fn add(&mut self, info: ClaimInfo) {
        self.claims.insert(key(&info.state.namespace, &info.state.claim_name), info);
    }

    /// Removes an entry.
    pub fn delete(&mut self, namespace: &str, name: &str) {
        self.claims.remove(&key(namespace, name));
    }

    /// Whether any claim names the pod (`hasPodReference`).
    pub fn has_pod_reference(&self, pod_uid: &str) -> bool {
        self.claims.values().any(|c| c.state.pod_uids.contains(pod_uid))
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = &ClaimInfo> {
        self.claims.values()
    }

    /// Writes the checkpoint (`syncToCheckpoint`).
    pub fn sync(&self) -> Result<(), CheckpointError> {
        let list: Vec<ClaimInfoState> = self.claims.values().map(|c| c.state.clone()).collect();
        checkpoint::write(&self.dir, Some(&list))
    }

    /// Prepared claims by driver, and across drivers under [`ANY_DRIVER`] (`claimsInUse`).
    pub fn claims_in_use(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        let mut total = 0;
        for c in self.claims.values().filter(|c| c.prepared) {
            total += 1;
            for d in c.state.driver_state.keys() {
                *counts.entry(d.clone()).or_default() += 1;
            }
        }
        counts.insert(ANY_DRIVER.into(), total);
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(name: &str, requests: Option<&[&str]>, cdi: &[&str]) -> Device {
        Device {
            pool_name: "node-a".into(),
            device_name: name.into(),
            request_names: requests.map(|r| r.iter().map(|s| s.to_string()).collect()),
            cdi_device_ids: Some(cdi.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn cdi_ids_follow_the_request_a_container_names() {
        let mut c = ClaimInfo::new("u", "c", "ns", &["d.example.com".into()]);
        c.add_device("d.example.com", dev("d0", Some(&["gpu"]), &["d.example.com/gpu=d0"]));
        c.add_device("d.example.com", dev("d1", Some(&["nic"]), &["d.example.com/nic=d1"]));
        c.add_device("d.example.com", dev("d2", None, &["d.example.com/x=d2"]));
        assert_eq!(c.cdi_devices(""), vec!["d.example.com/gpu=d0", "d.example.com/nic=d1", "d.example.com/x=d2"]);
        assert_eq!(c.cdi_devices("gpu"), vec!["d.example.com/gpu=d0", "d.example.com/x=d2"]);
    }

    #[test]
    fn the_cache_survives_a_restart_through_its_checkpoint_unprepared() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = ClaimCache::load(dir.path()).unwrap();
        let mut c = ClaimInfo::new("u1", "claim", "ns", &["d.example.com".into()]);
        c.state.pod_uids.insert("pod-1".into());
        c.add_device("d.example.com", dev("d0", Some(&["r"]), &["d.example.com/x=d0"]));
        c.prepared = true;
        cache.add(c);
        cache.add(ClaimInfo::new("u2", "other", "ns", &["e.example.com".into()]));
        cache.sync().unwrap();
        assert_eq!(
            cache.claims_in_use(),
            BTreeMap::from([("<any>".into(), 1), ("d.example.com".into(), 1)]),
            "only prepared claims count"
        );
        let again = ClaimCache::load(dir.path()).unwrap();
        let c = again.get("ns", "claim").unwrap();
        assert!(!c.prepared, "prepared again by the first sync after a restart");
        assert_eq!(c.cdi_devices("r"), vec!["d.example.com/x=d0"]);
        assert!(again.has_pod_reference("pod-1") && !again.has_pod_reference("pod-2"));
        assert_eq!(again.iter().count(), 2);
    }
}

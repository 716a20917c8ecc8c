//! The DRA manager (`pkg/kubelet/cm/dra/manager.go`): prepares the ResourceClaims of a pod through their drivers
//! before its sandbox is made, hands each container the CDI devices of the claims it names, and unprepares the
//! claims when the last pod using them stopped.
//!
//! Contract:
//! - The runtime manager calls [`DraManager::prepare`] before it creates a pod's sandbox (every sandbox, as
//!   upstream); an error is recorded as `FailedPrepareDynamicResources` on the pod and the sync is tried again.
//!   Claims are read from the apiserver (the Node authorizer lets a node read the claims of its pods), must be
//!   allocated and reserved for the pod, and their drivers registered; one `NodePrepareResources` call per driver.
//! - [`DraManager::cdi_devices`] answers, for each container it creates, the CDI ids of the claims (and requests)
//!   the container names.
//! - The pod worker calls [`DraManager::unprepare`] once a terminating pod's containers stopped, before its final
//!   status; an error fails that sync, which is retried, so the pod is not reported terminated (nor removed from the
//!   apiserver) before its claims are unprepared. A claim still used by another pod only loses the reference.
//! - [`DraManager::reconcile`] (every 60 s once the pod sources are ready) unprepares the claims of pods that are
//!   no longer active, e.g. pods deleted while rkubelet was down.
//! - Every change of the claims is written to `dra_manager_state` before the call returns.
//!
//! Upstream stops at the first claim already prepared and skips the pod's later claims; here each claim is looked at.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_apiclient::DraApi;
use kubelet_pluginmanager::client::status_text;
use kubelet_proto::dra::v1 as pb;
use tracing::{debug, info};

use super::cache::{ClaimCache, ClaimInfo};
use super::checkpoint::{CheckpointError, Device};
use super::claims;
use super::registry::{DraPlugin, DraPlugins};

/// The manager.
pub struct DraManager {
    plugins: Arc<DraPlugins>,
    api: OnceLock<Arc<dyn DraApi>>,
    cache: Mutex<ClaimCache>,
}

fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn pod_ns(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

fn has_claims(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).is_some_and(|c| !c.is_empty())
}

fn observe(op: &str, start: tokio::time::Instant, ok: bool) {
    let is_error = if ok { "false" } else { "true" };
    kubelet_metrics::kubelet::DRA_OPERATIONS_DURATION.observe(&[is_error, op], start.elapsed().as_secs_f64());
}

/// A driver's answer for the claims asked of it, checked as upstream checks it: each answered claim is one asked for
/// and carries no error, and none is left out. The answered claims with their results.
fn check_answers<'a, R>(
    op: &str,
    batch: &'a [pb::Claim],
    answers: &'a HashMap<String, R>,
    error: impl Fn(&R) -> &String,
) -> Result<Vec<(&'a pb::Claim, &'a R)>, String> {
    let mut out = vec![];
    for (uid, result) in answers {
        let c =
            batch.iter().find(|c| &c.uid == uid).ok_or(format!("{op} returned result for unknown claim UID {uid}"))?;
        let e = error(result);
        if !e.is_empty() {
            return Err(format!("{op} failed for ResourceClaim {}: {e}", c.name));
        }
        out.push((c, result));
    }
    let unfinished = batch.len().saturating_sub(answers.len());
    if unfinished != 0 {
        return Err(format!("{op} skipped {unfinished} ResourceClaims"));
    }
    Ok(out)
}

impl DraManager {
    /// The manager of the checkpoint in `state_dir` (the root directory); a corrupted checkpoint stops the start.
    pub fn new(state_dir: &Path, plugins: Arc<DraPlugins>) -> Result<Arc<Self>, CheckpointError> {
        let cache = ClaimCache::load(state_dir)?;
        let m = Arc::new(Self { plugins, api: OnceLock::new(), cache: Mutex::new(cache) });
        m.publish_in_use();
        Ok(m)
    }

    /// Gives the manager and its registry the apiserver once it is known (a standalone node has none: a pod with
    /// claims cannot be prepared there).
    pub fn bind(&self, api: Arc<dyn DraApi>) {
        self.plugins.bind(api.clone());
        let _ = self.api.set(api);
    }

    /// The registered drivers.
    pub fn plugins(&self) -> &Arc<DraPlugins> {
        &self.plugins
    }

    fn publish_in_use(&self) {
        let counts = self.cache.lock().unwrap().claims_in_use();
        let g = &kubelet_metrics::kubelet::DRA_RESOURCE_CLAIMS_IN_USE;
        g.reset();
        for (driver, n) in counts {
            g.set(&[&driver], n as f64);
        }
    }

    /// Prepares the pod's claims (`PrepareResources`).
    pub async fn prepare(&self, pod: &Pod) -> Result<(), String> {
        let start = tokio::time::Instant::now();
        let r = self.prepare_inner(pod).await;
        observe("PrepareResources", start, r.is_ok());
        if has_claims(pod) {
            self.publish_in_use();
        }
        r.map_err(|e| format!("prepare dynamic resources: {e}"))
    }

    async fn prepare_inner(&self, pod: &Pod) -> Result<(), String> {
        if !has_claims(pod) {
            return Ok(());
        }
        let uid = pod_uid(pod);
        let ns = pod_ns(pod);
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.clone()).unwrap_or_default();
        // What the apiserver says of each claim, and the drivers' endpoints.
        let mut found: Vec<(ClaimInfo, BTreeMap<String, DraPlugin>)> = vec![];
        for e in &entries {
            debug!(pod = %format!("{ns}/{}", pod.metadata.name.as_deref().unwrap_or_default()), podClaim = %e.name, "Processing resource");
            let (Some(name), must_check_owner) = claims::claim_name(pod, e)? else { continue };
            let api = self.api.get().ok_or("no apiserver to read ResourceClaims from (a standalone node)")?;
            let claim = match api.get_resource_claim(ns, &name).await {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Err(format!(
                        "fetch ResourceClaim {name}: resourceclaims.resource.k8s.io \"{name}\" not found"
                    ));
                }
                Err(err) => return Err(format!("fetch ResourceClaim {name}: {err}")),
            };
            if must_check_owner {
                claims::is_for_pod(pod, &claim)?;
            }
            let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
            if !claims::is_reserved_for_pod(pod, &claim) {
                return Err(format!(
                    "pod {} ({uid}) is not allowed to use ResourceClaim {name} ({claim_uid})",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
            }
            let drivers = claims::allocated_drivers(&claim).map_err(|err| format!("ResourceClaim {name}: {err}"))?;
            let mut plugins = BTreeMap::new();
            for d in &drivers {
                plugins.insert(d.clone(), self.plugins.get(d)?);
            }
            found.push((ClaimInfo::new(&claim_uid, &name, ns, &drivers), plugins));
        }
        // The pod's references, checkpointed before any driver is called, and what must still be prepared.
        let mut batches: BTreeMap<String, (DraPlugin, Vec<pb::Claim>)> = BTreeMap::new();
        {
            let mut cache = self.cache.lock().unwrap();
            for (info, plugins) in &found {
                let name = &info.state.claim_name;
                let entry = match cache.get_mut(ns, name) {
                    Some(existing) => existing,
                    None => {
                        cache.add(info.clone());
                        cache.get_mut(ns, name).expect("just added")
                    }
                };
                if entry.state.claim_uid != info.state.claim_uid {
                    return Err(format!(
                        "old ResourceClaim with same name {name} and different UID {} still exists (previous pod force-deleted?!)",
                        entry.state.claim_uid
                    ));
                }
                entry.state.pod_uids.insert(uid.clone());
                if entry.prepared {
                    debug!(claim = %format!("{ns}/{name}"), "Resources already prepared");
                    continue;
                }
                let c = pb::Claim { namespace: ns.into(), uid: info.state.claim_uid.clone(), name: name.clone() };
                for (driver, plugin) in plugins {
                    batches.entry(driver.clone()).or_insert_with(|| (plugin.clone(), vec![])).1.push(c.clone());
                }
            }
            cache.sync().map_err(|e| format!("checkpoint ResourceClaim cache: {e}"))?;
        }
        let mut prepared: BTreeSet<String> = BTreeSet::new();
        for (driver, (plugin, batch)) in batches {
            let resp = plugin
                .prepare(pb::NodePrepareResourcesRequest { claims: batch.clone() })
                .await
                .map_err(|s| format!("NodePrepareResources: {}", status_text(&s)))?;
            let answered = check_answers("NodePrepareResources", &batch, &resp.claims, |r| &r.error)?;
            let mut cache = self.cache.lock().unwrap();
            for (c, result) in answered {
                let info = cache
                    .get_mut(ns, &c.name)
                    .ok_or(format!("internal error: unable to get claim info for ResourceClaim {}", c.name))?;
                // A retry after a partial failure must not list the devices twice.
                if let Some(ds) = info.state.driver_state.get_mut(&driver) {
                    ds.devices = None;
                }
                for d in &result.devices {
                    info.add_device(
                        &driver,
                        Device {
                            pool_name: d.pool_name.clone(),
                            device_name: d.device_name.clone(),
                            request_names: Some(d.request_names.clone()),
                            cdi_device_ids: Some(d.cdi_device_ids.clone()),
                        },
                    );
                }
                prepared.insert(c.name.clone());
            }
        }
        let mut cache = self.cache.lock().unwrap();
        for name in &prepared {
            if let Some(info) = cache.get_mut(ns, name) {
                info.prepared = true;
            }
        }
        cache.sync().map_err(|e| format!("checkpoint ResourceClaim state: {e}"))?;
        if !prepared.is_empty() {
            info!(pod = %format!("{ns}/{}", pod.metadata.name.as_deref().unwrap_or_default()), podUID = %uid, claims = ?prepared, "prepared dynamic resources");
        }
        Ok(())
    }

    /// The claims container `c` names, each with the request it names (empty: the whole claim), by claim name.
    fn named_claims(pod: &Pod, c: &Container) -> Result<Vec<(String, String)>, String> {
        let wanted = c.resources.as_ref().and_then(|r| r.claims.as_ref());
        let mut out = vec![];
        if wanted.is_none_or(|w| w.is_empty()) {
            return Ok(out);
        }
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
        for e in entries.into_iter().flatten() {
            let (Some(name), _) = claims::claim_name(pod, e)? else { continue };
            for w in wanted.into_iter().flatten().filter(|w| w.name == e.name) {
                out.push((name.clone(), w.request.clone().unwrap_or_default()));
            }
        }
        Ok(out)
    }

    /// The CDI devices of container `c` (`GetResources`): those of each claim it names, of the request it names.
    pub fn cdi_devices(&self, pod: &Pod, c: &Container) -> Result<Vec<String>, String> {
        let named = Self::named_claims(pod, c)?;
        let cache = self.cache.lock().unwrap();
        let mut out = vec![];
        for (name, request) in named {
            let info = cache
                .get(pod_ns(pod), &name)
                .ok_or(format!("internal error: unable to get claim info for ResourceClaim {name}"))?;
            out.extend(info.cdi_devices(&request));
        }
        Ok(out)
    }

    /// The claims of container `c` as the pod resources API lists them (`GetContainerClaimInfos`), once each.
    pub fn container_claims(&self, pod: &Pod, c: &Container) -> Vec<ClaimInfo> {
        let mut names: Vec<String> =
            Self::named_claims(pod, c).unwrap_or_default().into_iter().map(|(n, _)| n).collect();
        names.dedup();
        let cache = self.cache.lock().unwrap();
        names.iter().filter_map(|n| cache.get(pod_ns(pod), n).cloned()).collect()
    }

    /// Unprepares the claims of a pod whose containers all stopped (`UnprepareResources`).
    pub async fn unprepare(&self, pod: &Pod) -> Result<(), String> {
        let start = tokio::time::Instant::now();
        let r = match claims::claim_names(pod) {
            Ok(names) => self.unprepare_claims(&pod_uid(pod), pod_ns(pod), &names).await,
            Err(e) => Err(e),
        };
        observe("UnprepareResources", start, r.is_ok());
        if has_claims(pod) {
            self.publish_in_use();
        }
        r.map_err(|e| format!("unprepare dynamic resources: {e}"))
    }

    async fn unprepare_claims(&self, pod_uid: &str, ns: &str, names: &[String]) -> Result<(), String> {
        let mut batches: BTreeMap<String, Vec<pb::Claim>> = BTreeMap::new();
        let mut last_users: Vec<String> = vec![];
        {
            let mut cache = self.cache.lock().unwrap();
            // Nothing is written for a pod whose claims the node does not know (a pod without claims, or unprepared
            // already): its stop must not depend on the disk.
            let mut dropped = false;
            for name in names {
                let Some(info) = cache.get_mut(ns, name) else { continue };
                if info.state.pod_uids.len() > 1 {
                    dropped |= info.state.pod_uids.remove(pod_uid);
                    continue;
                }
                last_users.push(name.clone());
                let c = pb::Claim { namespace: ns.into(), uid: info.state.claim_uid.clone(), name: name.clone() };
                for driver in info.state.driver_state.keys() {
                    batches.entry(driver.clone()).or_default().push(c.clone());
                }
            }
            if dropped {
                cache.sync().map_err(|e| format!("checkpoint ResourceClaim state: {e}"))?;
            }
        }
        if last_users.is_empty() {
            return Ok(());
        }
        for (driver, batch) in batches {
            let plugin = self.plugins.get(&driver)?;
            let resp = plugin
                .unprepare(pb::NodeUnprepareResourcesRequest { claims: batch.clone() })
                .await
                .map_err(|s| format!("NodeUnprepareResources: {}", status_text(&s)))?;
            check_answers("NodeUnprepareResources", &batch, &resp.claims, |r| &r.error)?;
        }
        let mut cache = self.cache.lock().unwrap();
        for name in &last_users {
            cache.delete(ns, name);
        }
        cache.sync().map_err(|e| format!("checkpoint ResourceClaim state: {e}"))?;
        info!(podUID = %pod_uid, claims = ?last_users, "unprepared dynamic resources");
        Ok(())
    }

    /// Whether a pod may still hold claims (`PodMightNeedToUnprepareResources`; the terminating sync's
    /// unpreparation is what holds a pod's final status here).
    #[cfg(test)]
    pub(super) fn might_need_unprepare(&self, pod_uid: &str) -> bool {
        self.cache.lock().unwrap().has_pod_reference(pod_uid)
    }

    /// Unprepares the claims of pods not in `active` (`reconcileLoop`); failures are logged and tried again at
    /// the next pass.
    pub async fn reconcile(&self, active: &BTreeSet<String>) {
        let mut inactive: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for info in self.cache.lock().unwrap().iter() {
            for uid in info.state.pod_uids.iter().filter(|u| !active.contains(*u)) {
                let e = inactive.entry(uid.clone()).or_insert_with(|| (info.state.namespace.clone(), vec![]));
                e.1.push(info.state.claim_name.clone());
            }
        }
        if inactive.is_empty() {
            return;
        }
        for (uid, (ns, names)) in inactive {
            if let Err(e) = self.unprepare_claims(&uid, &ns, &names).await {
                info!(podUID = %uid, err = %e, "Unpreparing pod resources in reconcile loop failed, will retry");
            }
        }
        self.publish_in_use();
    }
}

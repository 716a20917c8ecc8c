//! The runtime manager's side of an in-place resize (`kuberuntime_manager.go` doPodResizeAction,
//! validateMemoryResizeAction, updatePodContainerResources; `kuberuntime_container.go` updateContainerResources):
//! called by `sync_pod` (SyncPod step 7) when [`crate::resize::compute_resize_actions`] found containers to update or
//! restart. Errors end the step with a `ResizePodInPlace` sync error; the kubelet shows it in the pod's
//! `PodResizeInProgress` condition and the next sync retries.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_cri::api;
use kubelet_types::PodStatus;
use kubelet_types::pod_update::pod_ref;
use tracing::{debug, error, info};

use crate::actions::PodActions;
use crate::manager::{RuntimeManager, SyncError};
use crate::resize::{Amounts, ContainerToUpdate, PodCgroupConfig, Resource, aggregate, container_for_update};

/// The action name of a resize's sync error (`kubecontainer.ResizePodInPlace`).
pub const RESIZE_ACTION: &str = "ResizePodInPlace";

impl RuntimeManager {
    /// The pod cgroups, for resizes.
    pub fn with_pod_cgroups(mut self, cgroups: Arc<dyn crate::resize::PodCgroupResizer>) -> Self {
        self.pod_cgroups = cgroups;
        self
    }

    /// What the runtime was last told of each container (`actuated_pods_state`).
    pub fn with_actuated_state(mut self, state: Arc<kubelet_cm::allocation_state::PodResourceState>) -> Self {
        self.actuated = state;
        self
    }

    /// The resources the runtime was last told of a container.
    pub fn actuated(&self, uid: &str, container: &str) -> Option<k8s_openapi::api::core::v1::ResourceRequirements> {
        self.actuated.container(uid, container)
    }

    /// Whether a running container of the allocated pod still waits for its allocated resources.
    pub fn is_pod_resize_in_progress(&self, allocated: &Pod, status: &PodStatus) -> bool {
        let uid = allocated.metadata.uid.clone().unwrap_or_default();
        crate::resize::is_pod_resize_in_progress(allocated, status, &|c| self.actuated.container(&uid, c))
    }

    /// Forgets the actuated resources of pods not in `keep` (upstream's cleanup of terminated pods).
    pub fn forget_actuated_except(&self, keep: &std::collections::HashSet<String>) {
        self.actuated.remove_orphans(keep);
    }

    /// Resizes the pod cgroup and its running containers as `actions` say (doPodResizeAction).
    pub(crate) async fn do_pod_resize(&self, pod: &Pod, actions: &PodActions) -> Result<(), SyncError> {
        let started = tokio::time::Instant::now();
        let result = self.resize_inner(pod, actions).await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        kubelet_metrics::kubelet::POD_RESIZE_DURATION.observe(&[if result.is_ok() { "true" } else { "false" }], ms);
        result.map_err(|message| {
            error!(pod = %pod_ref(pod), error = %message, "pod resize failed");
            SyncError { action: RESIZE_ACTION, target: pod_ref(pod), reason: "ResizePodInPlaceError".into(), message }
        })
    }

    async fn resize_inner(&self, pod: &Pod, actions: &PodActions) -> Result<(), String> {
        let name = pod_ref(pod);
        let enforce_cpu_limits = self.cfg.cpu_cfs_quota && !self.cfg.quota_lift.pod(pod);
        let desired = kubelet_types::qos::pod_resources(pod, enforce_cpu_limits, self.cfg.cpu_cfs_quota_period_us);
        let current = self
            .pod_cgroups
            .pod_config(pod)
            .map_err(|e| format!("unable to get pod cgroup config for pod {name:?}: {e}"))?;
        let mut target = PodCgroupConfig {
            cpu_shares: Some(desired.cpu_shares),
            cpu_quota: desired.cpu_quota,
            cpu_period: desired.cpu_period,
            memory: desired.memory,
        };
        let memory = !actions.memory_updates.is_empty() || actions.update_pod_resources;
        if memory {
            self.validate_memory_resize(pod, actions, &current, &target).await?;
        }
        let mut amounts = actions.current.clone();
        if memory {
            // A pod without a memory limit keeps its current one (upstream cannot remove limits either).
            target.memory = target.memory.or(current.memory);
            let (have, want) = (current.memory.unwrap_or(i64::MAX), target.memory.unwrap_or(i64::MAX));
            self.resize_resource(
                pod,
                Resource::Memory,
                &actions.memory_updates,
                &mut amounts,
                (have, want),
                (0, 0),
                &target,
            )
            .await?;
        }
        if !actions.cpu_updates.is_empty() || actions.update_pod_resources {
            target.cpu_quota = target.cpu_quota.or(current.cpu_quota);
            target.cpu_period = target.cpu_period.or(current.cpu_period);
            let quotas = (current.cpu_quota.unwrap_or(-1), target.cpu_quota.unwrap_or(-1));
            let shares = (current.cpu_shares.unwrap_or(0), target.cpu_shares.unwrap_or(0));
            self.resize_resource(pod, Resource::Cpu, &actions.cpu_updates, &mut amounts, quotas, shares, &target)
                .await?;
        }
        info!(pod = %name, podUID = %pod.metadata.uid.as_deref().unwrap_or(""), "pod resized in place");
        Ok(())
    }

    /// One resource's steps (resizeContainers): the pod cgroup's limit and then request grown first, the containers
    /// updated, the pod cgroup's request and then limit shrunk last. `limits` and `requests` are (current, new).
    #[allow(clippy::too_many_arguments)]
    async fn resize_resource(
        &self,
        pod: &Pod,
        resource: Resource,
        updates: &[ContainerToUpdate],
        amounts: &mut std::collections::BTreeMap<String, Amounts>,
        limits: (i64, i64),
        requests: (i64, i64),
        target: &PodCgroupConfig,
    ) -> Result<(), String> {
        let set = |limit: bool| self.set_pod_cgroup(pod, resource, limit, target);
        if limits.1 > limits.0 {
            set(true)?;
        }
        if requests.1 > requests.0 {
            set(false)?;
        }
        for u in updates {
            self.update_container(pod, resource, u, amounts).await?;
        }
        if requests.1 < requests.0 {
            set(false)?;
        }
        if limits.1 < limits.0 {
            set(true)?;
        }
        Ok(())
    }

    fn set_pod_cgroup(
        &self,
        pod: &Pod,
        resource: Resource,
        limit: bool,
        target: &PodCgroupConfig,
    ) -> Result<(), String> {
        let config = match (resource, limit) {
            (Resource::Cpu, true) => {
                PodCgroupConfig { cpu_quota: target.cpu_quota, cpu_period: target.cpu_period, ..Default::default() }
            }
            (Resource::Cpu, false) => PodCgroupConfig { cpu_shares: target.cpu_shares, ..Default::default() },
            (Resource::Memory, true) => PodCgroupConfig { memory: target.memory, ..Default::default() },
            // Memory requests are not written to cgroups.
            (Resource::Memory, false) => return Ok(()),
        };
        debug!(pod = %pod_ref(pod), resource = resource.as_str(), ?config, "setting the pod cgroup");
        self.pod_cgroups.set_pod_config(pod, &config).map_err(|e| {
            format!(
                "failed to set the {} {} of the pod cgroup: {e}",
                resource.as_str(),
                if limit { "limit" } else { "request" }
            )
        })
    }

    /// Updates one container's resource (updatePodContainerResources, updateContainerResources) and records it as
    /// actuated.
    async fn update_container(
        &self,
        pod: &Pod,
        resource: Resource,
        u: &ContainerToUpdate,
        amounts: &mut std::collections::BTreeMap<String, Amounts>,
    ) -> Result<(), String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = kubelet_types::pod_update::container_spec(pod, &u.name)
            .ok_or_else(|| format!("container {:?} is not in the pod's spec", u.name))?;
        let current = amounts.get(&u.name).copied().unwrap_or_default();
        let c = container_for_update(&spec, resource, u.desired, current);
        let mut resources = crate::resources::container_resources(&self.cfg, pod, &c);
        if let Some(cpuset) = self.cpus.cpuset(&uid, &c.name) {
            resources.cpuset_cpus = cpuset;
        }
        if self.cfg.cpu_cfs_quota && self.cfg.quota_lift.container(&uid, &c.name) {
            resources.cpu_quota = -1;
        }
        self.runtime.update_container_resources(&u.id, resources).await.map_err(|e| {
            error!(pod = %pod_ref(pod), containerName = %u.name, containerID = %u.id, resourceName = resource.as_str(), error = %e, "updateContainerResources failed");
            format!("container {:?} updateContainerResources failed: {}", u.id, e.message())
        })?;
        let requirements = c.resources.clone().unwrap_or_default();
        self.actuated
            .set_container(&uid, &u.name, &requirements)
            .map_err(|e| format!("failed to record the resources of container {}: {e}", u.name))?;
        let updated = Amounts::of(Some(&requirements));
        amounts.insert(u.name.clone(), updated);
        Ok(())
    }

    /// Refuses memory limits below what the pod or a container uses (validateMemoryResizeAction).
    async fn validate_memory_resize(
        &self,
        pod: &Pod,
        actions: &PodActions,
        current: &PodCgroupConfig,
        target: &PodCgroupConfig,
    ) -> Result<(), String> {
        let pod_decreasing = target.memory.is_some_and(|m| current.memory.is_none_or(|c| m < c));
        let decreasing: Vec<&ContainerToUpdate> = actions
            .memory_updates
            .iter()
            .filter(|u| {
                let have = actions.current.get(&u.name).map(|a| a.memory_limit).unwrap_or(0);
                u.desired.memory_limit != 0 && (have == 0 || u.desired.memory_limit < have)
            })
            .collect();
        if !pod_decreasing && decreasing.is_empty() {
            return Ok(());
        }
        let mut errs = vec![];
        if pod_decreasing {
            let want = target.memory.unwrap_or(i64::MAX);
            match self.pod_cgroups.pod_memory_usage(pod) {
                Ok(Some(used)) if used >= want as u64 => {
                    errs.push(format!("attempting to set pod memory limit ({want}) below current usage ({used})"))
                }
                Ok(_) => {}
                Err(_) => return Err(format!("unable to read memory usage for pod {:?}", pod_ref(pod))),
            }
        }
        for u in decreasing {
            let filter = api::ContainerStatsFilter { id: u.id.clone(), ..Default::default() };
            let stats = self.runtime.list_container_stats(Some(filter)).await;
            let used = stats.ok().and_then(|s| s.into_iter().next()).and_then(|s| s.memory).and_then(|m| m.usage_bytes);
            match used {
                None => errs.push(format!("missing container {:?} memory usage", u.name)),
                Some(v) if v.value >= u.desired.memory_limit as u64 => errs.push(format!(
                    "attempting to set container {:?} memory limit ({}) below current usage ({})",
                    u.name, u.desired.memory_limit, v.value
                )),
                Some(_) => {}
            }
        }
        if errs.is_empty() { Ok(()) } else { Err(format!("cannot decrease memory limits: {}", aggregate(&errs))) }
    }
}

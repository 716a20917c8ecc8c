//! The device manager (`pkg/kubelet/cm/devicemanager/manager.go`, device plugin API `v1beta1`): device plugins
//! register on `kubelet.sock`, their devices become the node's extended resources, and each container that asks
//! for them gets devices from their plugin.
//!
//! Contract:
//! - [`DeviceManager::new`] restores the checkpoint (allocations, and the registered resources at 0 until their
//!   plugins come back); the binary spawns [`DeviceManager::run`], which serves the registration socket until
//!   cancelled (then removes it). Each registered plugin's `ListAndWatch` runs on a task of its own; when it ends
//!   (the plugin stopped or restarted) the resource's devices turn unhealthy, and the resource goes from the node
//!   after [`state::STOP_GRACE_PERIOD`] unless the plugin registers again.
//! - Node status calls [`DeviceManager::capacity`] at each update; [`DeviceManager::changes`] wakes it when a
//!   device list changed.
//! - Admission calls [`DeviceManager::allocate`] for each new pod (init containers first, then the others), as
//!   upstream's topology manager does before the resource fit check: devices are chosen (the plugin's preferred
//!   ones where it offers them) and `Allocate` is called per container; the answer is checkpointed.
//! - The runtime manager calls [`DeviceManager::run_options`] before creating each container: `PreStartContainer`
//!   where the plugin asks for it, then the devices, mounts, variables, annotations and CDI names of the answers.
//! - Errors are upstream's texts, naming the pod, container and resource; nothing here panics or blocks on a
//!   plugin beyond upstream's deadlines.

pub mod checkpoint;
pub mod endpoint;
mod pod_resources;
pub mod registration;
pub mod state;
pub mod watcher_handler;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_proto::deviceplugin::v1beta1 as pb;
use kubelet_proto::runtime::v1 as cri;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use endpoint::Endpoint;
pub use state::Capacity;
use state::{Key, Plan, State};

/// The device plugin folder upstream's kubelet always uses, whatever its root directory (`DevicePluginPath`):
/// plugins find `kubelet.sock` there.
pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
/// The registration socket's name.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// Why the registration service cannot run.
#[derive(Debug, thiserror::Error)]
pub enum DeviceManagerError {
    /// The socket cannot be made.
    #[error("device plugin registration socket {path}: {source}; no device plugin can register")]
    Socket {
        /// The socket.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What a container's devices add to its CRI config (`DeviceRunContainerOptions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOptions {
    /// Environment variables.
    pub envs: Vec<(String, String)>,
    /// Device nodes.
    pub devices: Vec<cri::Device>,
    /// Mounts.
    pub mounts: Vec<cri::Mount>,
    /// Annotations.
    pub annotations: Vec<(String, String)>,
    /// Fully qualified CDI device names.
    pub cdi_devices: Vec<String>,
}

/// The device manager.
pub struct DeviceManager {
    dir: PathBuf,
    state: Mutex<State>,
    changed: tokio::sync::watch::Sender<u64>,
}

/// The container's limits as whole counts (`Quantity.Value()`, rounded up).
fn limits(c: &Container) -> Vec<(String, usize)> {
    let l = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    l.into_iter()
        .flatten()
        .filter_map(|(k, q)| {
            let n = kubelet_types::quantity::parse_quantity(&q.0)?;
            Some((k.clone(), n.max(0.0).ceil() as usize))
        })
        .collect()
}

fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl DeviceManager {
    /// A manager of the device plugin folder `dir` ([`DEVICE_PLUGIN_PATH`] on a node), with what its checkpoint
    /// holds.
    pub fn new(dir: &Path) -> Arc<Self> {
        let mut state = State::default();
        match checkpoint::read(dir) {
            Ok(Some(data)) => {
                for s in state.restore(data, Instant::now()) {
                    warn!(entry = %s, "device manager checkpoint: cannot decode an allocation; it is dropped");
                }
                info!(
                    allocations = state.pods.len(),
                    resources = state.endpoints.len(),
                    "device manager checkpoint restored"
                );
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
            }
        }
        Arc::new(Self { dir: dir.to_path_buf(), state: Mutex::new(state), changed: tokio::sync::watch::channel(0).0 })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bumped whenever a resource's devices change: node status subscribes to update at once.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn write_checkpoint(&self, state: &State) {
        if let Err(e) = checkpoint::write(&self.dir, &state.to_checkpoint()) {
            warn!(error = %e, "unable to write the device manager checkpoint");
        }
    }

    /// Serves `kubelet.sock` until `cancel` fires: stale sockets of the folder are removed first (the plugins
    /// watch for the new `kubelet.sock` and register again), the socket goes when it stops.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) -> Result<(), DeviceManagerError> {
        let socket = self.dir.join(KUBELET_SOCKET);
        let err = |source| DeviceManagerError::Socket { path: socket.display().to_string(), source };
        std::fs::create_dir_all(&self.dir).map_err(err)?;
        remove_sockets(&self.dir);
        let listener = tokio::net::UnixListener::bind(&socket).map_err(err)?;
        info!(socket = %socket.display(), "device plugin registration service listening");
        // Go plugins may send their socket path as `:authority`: each connection goes through the relay.
        let incoming =
            tokio_stream::wrappers::UnixListenerStream::new(listener).map(|c| c.map(crate::uds_authority::relay));
        let svc = pb::registration_server::RegistrationServer::new(registration::RegistrationServer(self.clone()));
        let served = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await;
        let _ = std::fs::remove_file(&socket);
        if let Err(e) = served {
            warn!(error = %e, "device plugin registration service stopped");
        }
        Ok(())
    }

    /// A plugin's `Register` (see [`registration`]).
    pub(crate) async fn register(self: &Arc<Self>, req: pb::RegisterRequest) -> Result<(), String> {
        kubelet_metrics::kubelet::DEVICE_PLUGIN_REGISTRATION.inc(&[&req.resource_name]);
        info!(resourceName = %req.resource_name, endpoint = %req.endpoint, version = %req.version, "got registration request from device plugin");
        if let Some(e) = registration::check(&req) {
            warn!(resourceName = %req.resource_name, error = %e, "device plugin registration refused");
            return Err(e);
        }
        // The endpoint is a name in the folder (`filepath.Join`, which also cleans `..`).
        let socket = self.dir.join(req.endpoint.trim_start_matches('/'));
        self.connect(&req.resource_name, &socket).await
    }

    /// Dials a plugin, asks its options, records it and starts reading its device lists (`connectClient`).
    pub async fn connect(self: &Arc<Self>, resource: &str, socket: &Path) -> Result<(), String> {
        let e = Endpoint::connect(resource, socket).await.map_err(|e| format!("failed to dial device plugin: {e}"))?;
        let options = e.options().await.map_err(|e| format!("failed to get device plugin options: {e}"))?;
        let generation = self.lock().connected(resource, e.clone(), options);
        info!(resourceName = resource, socket = %socket.display(), "device plugin registered");
        let me = self.clone();
        let resource = resource.to_string();
        tokio::spawn(async move { me.watch(resource, generation, e).await });
        Ok(())
    }

    /// Reads the plugin's device lists until the stream ends, then stops the resource (unless a newer
    /// registration replaced this one).
    async fn watch(self: Arc<Self>, resource: String, generation: u64, e: Endpoint) {
        let why = match e.list_and_watch().await {
            Ok(mut stream) => loop {
                match stream.next().await {
                    Some(Ok(resp)) => {
                        let mut s = self.lock();
                        if s.endpoints
                            .get(&resource)
                            .is_none_or(|e| e.generation != generation || e.stopped_at.is_some())
                        {
                            // A newer registration of the resource took over, or this one was deregistered.
                            return;
                        }
                        debug!(resourceName = %resource, devices = resp.devices.len(), "device plugin device list");
                        s.devices(&resource, &resp.devices);
                        self.write_checkpoint(&s);
                        drop(s);
                        self.bump();
                    }
                    Some(Err(e)) => break e.message().to_string(),
                    None => break "the plugin closed the stream".to_string(),
                }
            },
            Err(e) => e.to_string(),
        };
        if self.lock().disconnected(&resource, generation, Instant::now()) {
            warn!(resourceName = %resource, error = %why, "ListAndWatch ended unexpectedly for device plugin");
            self.bump();
        }
    }

    /// The plugin of `resource` was deregistered by the plugin manager (its socket went, or it restarted): as a
    /// plugin whose stream ended, its devices turn unhealthy and the grace period starts (`disconnectClient`).
    pub fn disconnect(&self, resource: &str) {
        let mut s = self.lock();
        let Some(generation) = s.endpoints.get(resource).map(|e| e.generation) else { return };
        if s.disconnected(resource, generation, Instant::now()) {
            info!(resourceName = resource, "device plugin deregistered");
            self.write_checkpoint(&s);
            drop(s);
            self.bump();
        }
    }

    /// Capacity and allocatable of the device plugin resources (`GetCapacity`), and the resources removed.
    pub fn capacity(&self) -> Capacity {
        let mut s = self.lock();
        let c = s.capacity(Instant::now());
        if !c.removed.is_empty() {
            info!(resources = ?c.removed, "device plugin resources removed: their plugins did not come back");
            self.write_checkpoint(&s);
        }
        c
    }

    /// Records the containers the runtime runs as rkubelet starts, as (pod UID, container name): re-admitted, they
    /// keep the devices the checkpoint gives them, whether or not their plugin has registered again yet.
    pub fn set_running_at_start(&self, running: BTreeSet<(String, String)>) {
        debug!(containers = running.len(), "running containers at start");
        self.lock().running_at_start = running;
    }

    /// Allocates the devices of every container of `pod` (`Allocate`, init containers first), as admission does.
    /// `active`: the pods that hold their devices (others' are freed first, once `sources_ready`: until every
    /// source was seen after a restart, a pod not seen yet keeps its devices).
    pub async fn allocate(&self, pod: &Pod, active: &BTreeSet<String>, sources_ready: bool) -> Result<(), String> {
        self.prepare(pod, active, sources_ready);
        let spec = pod.spec.clone().unwrap_or_default();
        for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
            self.allocate_for(pod, c, None).await?;
        }
        Ok(())
    }

    /// Before a pod's containers get their devices: forgets the devices of pods no longer active.
    pub fn prepare(&self, pod: &Pod, active: &BTreeSet<String>, sources_ready: bool) {
        let uid = pod_uid(pod);
        let mut s = self.lock();
        s.reuse.retain(|u, _| *u == uid);
        if sources_ready && !s.pods.is_empty() {
            // The pods admitted, this one, and those whose containers ran when rkubelet started (the pods of
            // one batch are admitted one after another: a later one of them is not active yet).
            let mut keep = active.clone();
            keep.insert(uid.clone());
            keep.extend(s.running_at_start.iter().map(|(u, _)| u.clone()));
            s.forget_inactive(&keep);
        }
    }

    /// Allocates container `c`'s devices (`Allocate`), those on the NUMA nodes of `affinity` (the topology manager's
    /// hint) first.
    pub async fn allocate_for(&self, pod: &Pod, c: &Container, affinity: Option<u64>) -> Result<(), String> {
        let uid = pod_uid(pod);
        self.allocate_container(&uid, c, affinity).await?;
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|i| i.iter().any(|i| i.name == c.name));
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        self.lock().after_container(&uid, &c.name, init && !sidecar);
        Ok(())
    }

    /// The NUMA placements of container `c`'s devices by resource (`GetTopologyHints`).
    pub fn topology_hints(
        &self,
        pod: &Pod,
        c: &Container,
        numa_nodes: &[u32],
    ) -> crate::topologymanager::ProviderHints {
        let uid = pod_uid(pod);
        let s = self.lock();
        limits(c)
            .into_iter()
            .filter(|(r, _)| s.is_device_resource(r))
            .map(|(r, n)| {
                let key: Key = (uid.clone(), c.name.clone(), r.clone());
                let allocated = s.container_devices(&key).unwrap_or_default();
                let reusable = s.reuse.get(&uid).and_then(|m| m.get(&r)).cloned().unwrap_or_default();
                let hints = s.device_hints(&r, n, &allocated, &reusable, numa_nodes);
                (r, hints)
            })
            .collect()
    }

    /// The NUMA placements of the pod's devices by resource (`GetPodTopologyHints`).
    pub fn pod_topology_hints(&self, pod: &Pod, numa_nodes: &[u32]) -> crate::topologymanager::ProviderHints {
        let uid = pod_uid(pod);
        let s = self.lock();
        let opts = kubelet_types::resources::PodResourcesOptions { exclude_overhead: true, ..Default::default() };
        let limits = kubelet_types::resources::pod_limits(pod, opts, &mut |_| {});
        limits
            .into_iter()
            .filter(|(r, _)| s.is_device_resource(r))
            .map(|(r, n)| {
                let allocated: BTreeSet<String> = s
                    .pods
                    .iter()
                    .filter(|((u, _, res), _)| *u == uid && *res == r)
                    .flat_map(|(_, a)| a.ids())
                    .collect();
                let hints = s.device_hints(&r, n.max(0.0).ceil() as usize, &allocated, &BTreeSet::new(), numa_nodes);
                (r, hints)
            })
            .collect()
    }

    async fn allocate_container(&self, uid: &str, c: &Container, affinity: Option<u64>) -> Result<(), String> {
        for (r, required) in limits(c) {
            let key: Key = (uid.to_string(), c.name.clone(), r.clone());
            let (plan, endpoint, preferred_ok) = {
                let s = self.lock();
                if !s.is_device_resource(&r) {
                    continue;
                }
                let reusable = s.reuse.get(uid).and_then(|m| m.get(&r)).cloned().unwrap_or_default();
                let running = s.running_at_start.contains(&(uid.to_string(), c.name.clone()));
                let plan = s.plan(&key, required, &reusable, running)?;
                let e = s.endpoints.get(&r);
                let preferred =
                    e.and_then(|e| e.options.as_ref()).is_some_and(|o| o.get_preferred_allocation_available);
                (plan, e.and_then(|e| e.endpoint.clone()), preferred)
            };
            let Plan::Choose { needed, reusable, available } = plan else { continue };
            let Some(endpoint) = endpoint else { return Err(format!("unknown Device Plugin {r}")) };
            let preferred = if preferred_ok {
                let mut candidates = reusable.clone();
                candidates.extend(available.iter().cloned());
                let resp = endpoint
                    .preferred(candidates, reusable.clone(), required as i32)
                    .await
                    .map_err(|e| format!("device plugin GetPreferredAllocation rpc failed with err: {e}"))?;
                resp.container_responses.into_iter().next().map(|c| c.device_i_ds).unwrap_or_default()
            } else {
                vec![]
            };
            let ids = self.lock().choose(&key, needed, &reusable, &available, &preferred, affinity);
            let start = Instant::now();
            let answer = endpoint.allocate(ids.clone()).await;
            kubelet_metrics::kubelet::DEVICE_PLUGIN_ALLOC_DURATION.observe(&[&r], start.elapsed().as_secs_f64());
            let mut s = self.lock();
            let answer = answer.map_err(|e| e.to_string()).and_then(|a| {
                let first = a.container_responses.into_iter().next();
                first.ok_or_else(|| format!("no containers return in allocation response for {r}"))
            });
            let resp = match answer {
                Ok(resp) => resp,
                Err(e) => {
                    // The devices chosen for the call go back to the pool.
                    s.pods.remove(&key);
                    s.recount();
                    return Err(e);
                }
            };
            info!(podUID = uid, containerName = %c.name, resourceName = %r, devices = ?ids, "devices allocated");
            if let Some(a) = s.pods.get_mut(&key) {
                a.resp = Some(resp);
            }
            self.write_checkpoint(&s);
        }
        Ok(())
    }

    /// Frees the devices of a pod that will run nothing again (terminated, or gone).
    pub fn release(&self, uid: &str) {
        let mut s = self.lock();
        let before = s.pods.len();
        s.pods.retain(|(u, _, _), _| u != uid);
        s.reuse.remove(uid);
        s.running_at_start.retain(|(u, _)| u != uid);
        if s.pods.len() != before {
            s.recount();
            info!(podUID = uid, "devices of a terminated pod freed");
            self.write_checkpoint(&s);
        }
    }

    /// What container `c` of `pod` gets from its devices (`GetDeviceRunContainerOptions`): `PreStartContainer`
    /// first where the plugin asks for it, then the answers of its allocations merged, the first value of each
    /// variable, device path, mount path, annotation and CDI name winning, resources in name order.
    pub async fn run_options(&self, pod: &Pod, c: &Container) -> Result<RunOptions, String> {
        let uid = pod_uid(pod);
        // A container admitted before its resource's plugin registered has no devices yet: allocated now
        // (`needsReAllocate`), never started without them.
        let missing = {
            let s = self.lock();
            limits(c).iter().any(|(r, n)| {
                *n > 0
                    && s.is_device_resource(r)
                    && s.container_devices(&(uid.clone(), c.name.clone(), r.clone())).is_none()
            })
        };
        if missing {
            self.allocate_container(&uid, c, None).await?;
        }
        for (r, n) in limits(c) {
            if n == 0 {
                continue;
            }
            let key: Key = (uid.clone(), c.name.clone(), r.clone());
            let (endpoint, pre_start, devices) = {
                let s = self.lock();
                if !s.is_device_resource(&r) {
                    continue;
                }
                let Some(e) = s.endpoints.get(&r) else {
                    return Err(format!("endpoint not found in cache for a registered resource: {r}"));
                };
                let pre = e.options.as_ref().is_some_and(|o| o.pre_start_required);
                (e.endpoint.clone(), pre, s.container_devices(&key))
            };
            if pre_start {
                let Some(devices) = devices else {
                    return Err(format!(
                        "no devices found allocated in local cache for pod {uid}, container {}, resource {r}",
                        c.name
                    ));
                };
                let result = match endpoint {
                    Some(e) => e.pre_start(devices.into_iter().collect()).await.map_err(|e| e.to_string()),
                    None => Err(format!("endpoint {r} has been stopped")),
                };
                result.map_err(|e| format!("device plugin PreStartContainer rpc failed with err: {e}"))?;
            }
        }
        let s = self.lock();
        let mut out = RunOptions::default();
        let (mut envs, mut devs, mut mounts, mut notes, mut cdi) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let mine = s.pods.iter().filter(|((u, cn, _), _)| *u == uid && *cn == c.name);
        for (_, a) in mine {
            let Some(resp) = &a.resp else { continue };
            let envs_sorted: BTreeMap<&String, &String> = resp.envs.iter().collect();
            for (k, v) in envs_sorted {
                if envs.insert(k.clone()) {
                    out.envs.push((k.clone(), v.clone()));
                }
            }
            for d in &resp.devices {
                if devs.insert(d.container_path.clone()) {
                    out.devices.push(cri::Device {
                        container_path: d.container_path.clone(),
                        host_path: d.host_path.clone(),
                        permissions: d.permissions.clone(),
                    });
                }
            }
            for m in &resp.mounts {
                if mounts.insert(m.container_path.clone()) {
                    out.mounts.push(cri::Mount {
                        container_path: m.container_path.clone(),
                        host_path: m.host_path.clone(),
                        readonly: m.read_only,
                        ..Default::default()
                    });
                }
            }
            let notes_sorted: BTreeMap<&String, &String> = resp.annotations.iter().collect();
            for (k, v) in notes_sorted {
                if notes.insert(k.clone()) {
                    out.annotations.push((k.clone(), v.clone()));
                }
            }
            for d in &resp.cdi_devices {
                if cdi.insert(d.name.clone()) {
                    out.cdi_devices.push(d.name.clone());
                }
            }
        }
        Ok(out)
    }

    /// The devices allocated per resource over every pod, when `pod_uid` has devices allocated
    /// (`UpdatePluginResources`: a pod admitted again after a restart keeps its devices before its plugin registers
    /// again); None otherwise.
    pub fn allocated_if_pod_has_devices(&self, pod_uid: &str) -> Option<std::collections::BTreeMap<String, usize>> {
        let s = self.lock();
        if !s.pods.keys().any(|(u, _, _)| u == pod_uid) {
            return None;
        }
        let mut ids: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
        for ((_, _, r), a) in s.pods.iter() {
            ids.entry(r.clone()).or_default().extend(a.ids());
        }
        Some(ids.into_iter().map(|(r, d)| (r, d.len())).collect())
    }

    /// The devices allocated to each container of each pod, for the pod resources API: (pod UID, container,
    /// resource, device IDs).
    pub fn allocations(&self) -> Vec<(String, String, String, Vec<String>)> {
        let s = self.lock();
        s.pods
            .iter()
            .filter(|(_, a)| a.resp.is_some())
            .map(|((u, c, r), a)| (u.clone(), c.clone(), r.clone(), a.ids().into_iter().collect()))
            .collect()
    }
}

/// Removes every socket of the folder but its checkpoint (`CleanupPluginDirectory`): stale plugin sockets and a
/// previous `kubelet.sock`.
fn remove_sockets(dir: &Path) {
    use std::os::unix::fs::FileTypeExt;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name() == checkpoint::FILE {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_socket())
            && let Err(err) = std::fs::remove_file(e.path())
        {
            warn!(path = %e.path().display(), error = %err, "unable to remove a stale device plugin socket");
        }
    }
}

#[cfg(test)]
mod tests;

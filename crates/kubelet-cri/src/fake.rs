//! An in-memory CRI runtime for unit tests and scale benchmarks (`pkg/kubelet/cri/remote/fake`,
//! `k8s.io/cri-api/pkg/apis/testing`).
//!
//! It keeps real state (sandboxes, containers, images), records every call by method name, fails a method on
//! demand ([`FakeRuntime::inject_error`]), holds back the status calls of chosen objects as a runtime stuck on one
//! pod does ([`FakeRuntime::hang`]) and makes containers exit ([`FakeRuntime::exit_container`]) so PLEG and
//! restart logic can be tested. Times come from a counter so they are ordered and deterministic.
//!
//! Like containerd 1.6 it does not stream container events (`GetContainerEvents` answers Unimplemented) until
//! [`FakeRuntime::enable_events`]; from then on every state change it makes is sent to each open stream, as
//! containerd 2 does, and [`FakeRuntime::break_event_streams`] fails the open streams.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use async_trait::async_trait;

use crate::api;
use crate::{CriError, CriResult, ImageService, RuntimeService};

#[derive(Debug, Clone)]
struct FakeSandbox {
    config: api::PodSandboxConfig,
    state: i32,
    created_at: i64,
    /// The runtime handler it was created with.
    handler: String,
}

#[derive(Debug, Clone)]
struct FakeContainer {
    sandbox_id: String,
    config: api::ContainerConfig,
    state: i32,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
}

/// The label the kubelet selects pods by; the fake indexes it so lookups stay cheap at thousands of pods.
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";

#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<String, FakeSandbox>,
    containers: HashMap<String, FakeContainer>,
    /// Pod UID label -> sandbox and container IDs.
    by_uid: HashMap<String, std::collections::HashSet<String>>,
    images: HashMap<String, api::Image>,
    calls: Vec<&'static str>,
    errors: HashMap<&'static str, VecDeque<CriError>>,
    /// Containers that exit with this code as soon as they start.
    exit_on_start: HashMap<String, i32>,
    /// Cumulative CPU (core-ns) and working set (bytes) of containers, for `ListContainerStats`.
    usage: HashMap<String, (u64, u64)>,
    /// Writable layer bytes per container (`ListContainerStats`).
    writable: HashMap<String, u64>,
    /// Images whose pulls need this user and password; every pull's image and user name.
    private: HashMap<String, (String, String)>,
    pulls: Vec<(String, String)>,
    pulled_specs: Vec<api::ImageSpec>,
    /// What `Status` reports besides the conditions, and `RuntimeConfig`'s answer (None: Unimplemented, as 1.6).
    handlers: Vec<api::RuntimeHandler>,
    cgroup_driver: Option<api::CgroupDriver>,
}

/// What an `ExecSync` in the fake does: given the container name and the command, the output or an error.
pub type ExecHandler = std::sync::Arc<dyn Fn(&str, &[String]) -> CriResult<crate::ExecOutput> + Send + Sync>;

/// A source of Unix-nanosecond timestamps for the fake's created/started/finished times.
pub type TimeSource = Box<dyn Fn() -> i64 + Send + Sync>;

/// The sending end of one open `GetContainerEvents` stream.
type EventSender = tokio::sync::mpsc::UnboundedSender<CriResult<api::ContainerEventResponse>>;

/// The in-memory runtime.
#[derive(Default)]
pub struct FakeRuntime {
    state: Mutex<State>,
    next_id: AtomicU64,
    clock: AtomicI64,
    /// Whether every call records its name (off in benchmarks).
    record_calls: std::sync::atomic::AtomicBool,
    /// Where times come from (default: a counter).
    time: Option<TimeSource>,
    /// What `ExecSync` answers (default: exit code 0, no output).
    exec: Mutex<Option<ExecHandler>>,
    /// Sandboxes and containers whose status calls do not answer until released ([`FakeRuntime::hang`]).
    hung: Mutex<std::collections::HashSet<String>>,
    /// Woken when an object is released.
    released: tokio::sync::Notify,
    /// Whether `GetContainerEvents` streams ([`FakeRuntime::enable_events`]; off: Unimplemented, as 1.6).
    events_enabled: std::sync::atomic::AtomicBool,
    /// The open event streams.
    event_streams: Mutex<Vec<EventSender>>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, c) = self.object_counts();
        f.debug_struct("FakeRuntime").field("sandboxes", &s).field("containers", &c).finish()
    }
}

const READY: i32 = api::PodSandboxState::SandboxReady as i32;
const NOT_READY: i32 = api::PodSandboxState::SandboxNotready as i32;
const CREATED: i32 = api::ContainerState::ContainerCreated as i32;
const RUNNING: i32 = api::ContainerState::ContainerRunning as i32;
const EXITED: i32 = api::ContainerState::ContainerExited as i32;

use api::ContainerEventType::{
    ContainerCreatedEvent as CREATED_EVENT, ContainerDeletedEvent as DELETED_EVENT,
    ContainerStartedEvent as STARTED_EVENT, ContainerStoppedEvent as STOPPED_EVENT,
};

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl FakeRuntime {
    /// An empty runtime that records calls and has the given images.
    pub fn new(images: &[&str]) -> Self {
        let f = FakeRuntime::default();
        f.record_calls.store(true, Ordering::Relaxed);
        f.clock.store(1_000_000_000, Ordering::Relaxed);
        for i in images {
            f.add_image(i);
        }
        f
    }

    /// An empty runtime whose timestamps come from `time` (e.g. a test clock moving with tokio's paused clock).
    pub fn with_time(images: &[&str], time: TimeSource) -> Self {
        let mut f = Self::new(images);
        f.time = Some(time);
        f
    }

    /// Stops recording calls (benchmarks).
    pub fn set_record_calls(&self, on: bool) {
        self.record_calls.store(on, Ordering::Relaxed);
    }

    /// Makes an image present.
    pub fn add_image(&self, image: &str) {
        let img = api::Image {
            id: format!("sha256:{:064x}", image.len() as u64 * 7919 + image.bytes().map(u64::from).sum::<u64>()),
            repo_tags: vec![image.to_string()],
            size: 1024,
            ..Default::default()
        };
        self.state.lock().unwrap().images.insert(image.to_string(), img);
    }

    /// Makes pulls of `image` need `user` and `password` (a private registry); others fail with 401.
    pub fn require_credentials(&self, image: &str, user: &str, password: &str) {
        self.state.lock().unwrap().private.insert(image.into(), (user.into(), password.into()));
    }

    /// Every pull so far: the image and the user name it was pulled as ("" for anonymous).
    pub fn pulls(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().pulls.clone()
    }

    /// The image specs of every pull so far.
    pub fn pulled_specs(&self) -> Vec<api::ImageSpec> {
        self.state.lock().unwrap().pulled_specs.clone()
    }

    /// Marks an image pinned (as a runtime's sandbox image).
    pub fn pin_image(&self, image: &str) {
        if let Some(i) = self.state.lock().unwrap().images.get_mut(image) {
            i.pinned = true;
        }
    }

    /// Names of the images present.
    pub fn image_names(&self) -> Vec<String> {
        self.state.lock().unwrap().images.keys().cloned().collect()
    }

    /// Strictly increasing timestamps, as a real runtime's nanosecond clock gives.
    fn now(&self) -> i64 {
        match &self.time {
            Some(t) => {
                // Two events at the same instant still get distinct, ordered times.
                let want = t();
                let mut cur = self.clock.load(Ordering::Relaxed);
                loop {
                    let next = want.max(cur + 1);
                    match self.clock.compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                        Ok(_) => return next,
                        Err(v) => cur = v,
                    }
                }
            }
            None => self.clock.fetch_add(1_000, Ordering::Relaxed) + 1_000,
        }
    }

    fn id(&self, prefix: &str) -> String {
        format!("{prefix}{:012x}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn enter(&self, op: &'static str) -> CriResult<std::sync::MutexGuard<'_, State>> {
        let mut st = self.state.lock().unwrap();
        if self.record_calls.load(Ordering::Relaxed) {
            st.calls.push(op);
        }
        if let Some(q) = st.errors.get_mut(op)
            && let Some(e) = q.pop_front()
        {
            return Err(e);
        }
        Ok(st)
    }

    /// Makes `PodSandboxStatus` and `ContainerStatus` of the sandbox or container `id` hang (not answer) until
    /// [`FakeRuntime::release`]: a runtime stuck on one pod. Calls already waiting answer once released.
    pub fn hang(&self, id: &str) {
        self.hung.lock().unwrap().insert(id.to_string());
    }

    /// Ends the hang of `id`.
    pub fn release(&self, id: &str) {
        self.hung.lock().unwrap().remove(id);
        self.released.notify_waiters();
    }

    /// Waits while `id` hangs.
    async fn wait_while_hung(&self, id: &str) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.hung.lock().unwrap().contains(id) {
                return;
            }
            released.await;
        }
    }

    /// The runtime handlers `Status` reports (none by default, as containerd 1.6).
    pub fn set_runtime_handlers(&self, handlers: Vec<api::RuntimeHandler>) {
        self.state.lock().unwrap().handlers = handlers;
    }

    /// The cgroup driver `RuntimeConfig` answers (None, the default: Unimplemented, as containerd 1.6).
    pub fn set_cgroup_driver(&self, driver: Option<api::CgroupDriver>) {
        self.state.lock().unwrap().cgroup_driver = driver;
    }

    /// Makes the next call of `op` (a CRI method name such as `"StartContainer"`) fail with `err`.
    pub fn inject_error(&self, op: &'static str, err: CriError) {
        self.state.lock().unwrap().errors.entry(op).or_default().push_back(err);
    }

    /// The recorded method names, in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.state.lock().unwrap().calls.clear();
    }

    /// How many times `op` was called.
    pub fn count(&self, op: &str) -> usize {
        self.state.lock().unwrap().calls.iter().filter(|c| **c == op).count()
    }

    /// Sets a container's cumulative CPU (core-nanoseconds) and working set, as `ListContainerStats` reports them.
    pub fn set_usage(&self, id: &str, cpu_ns: u64, memory: u64) {
        self.state.lock().unwrap().usage.insert(id.to_string(), (cpu_ns, memory));
    }

    /// Sets the bytes of a container's writable layer in its stats.
    pub fn set_writable_layer(&self, id: &str, bytes: u64) {
        self.state.lock().unwrap().writable.insert(id.to_string(), bytes);
    }

    /// Makes a running container exit with `code` now.
    pub fn exit_container(&self, id: &str, code: i32) {
        let now = self.now();
        let mut st = self.state.lock().unwrap();
        if let Some(c) = st.containers.get_mut(id)
            && c.state == RUNNING
        {
            c.state = EXITED;
            c.finished_at = now;
            c.exit_code = code;
            c.reason = if code == 0 { "Completed".into() } else { "Error".into() };
            let ev = self.event(&st, id, STOPPED_EVENT, now);
            self.send_events(ev);
        }
    }

    /// Sets what `ExecSync` answers from now on.
    pub fn set_exec_handler(&self, h: ExecHandler) {
        *self.exec.lock().unwrap() = Some(h);
    }

    /// Makes every container named `name` exit with `code` right after it starts.
    pub fn exit_on_start(&self, name: &str, code: i32) {
        self.state.lock().unwrap().exit_on_start.insert(name.to_string(), code);
    }

    /// Marks a sandbox not ready, as if it died.
    pub fn kill_sandbox(&self, id: &str) {
        let now = self.now();
        let mut st = self.state.lock().unwrap();
        self.stop_sandbox_in(&mut st, id, now);
    }

    /// Stops the sandbox `id` and its running containers (exit code 137), with their events.
    fn stop_sandbox_in(&self, st: &mut State, id: &str, now: i64) {
        let mut stopped = vec![];
        for (cid, c) in st.containers.iter_mut().filter(|(_, c)| c.sandbox_id == id && c.state == RUNNING) {
            c.state = EXITED;
            c.finished_at = now;
            c.exit_code = 137;
            c.reason = "Error".into();
            stopped.push(cid.clone());
        }
        stopped.sort();
        let mut was_ready = false;
        if let Some(s) = st.sandboxes.get_mut(id) {
            was_ready = s.state == READY;
            s.state = NOT_READY;
        }
        if self.events_on() {
            let mut evs: Vec<_> = stopped.iter().filter_map(|c| self.event(st, c, STOPPED_EVENT, now)).collect();
            evs.extend(was_ready.then(|| self.event(st, id, STOPPED_EVENT, now)).flatten());
            self.send_events(evs);
        }
    }

    /// Makes `GetContainerEvents` stream events (off by default: Unimplemented, as containerd 1.6). Every state
    /// change from then on (sandbox run, stop, removal; container creation, start, stop, exit, removal) is sent to
    /// each open stream, with the sandbox's status and its containers' statuses.
    pub fn enable_events(&self) {
        self.events_enabled.store(true, Ordering::Relaxed);
    }

    /// Ends every open event stream with an error (code Unavailable), as a runtime restart does; later
    /// `GetContainerEvents` calls open new streams.
    pub fn break_event_streams(&self) {
        for tx in self.event_streams.lock().unwrap().drain(..) {
            let _ = tx.send(Err(CriError::Other {
                op: "GetContainerEvents",
                code: "Unavailable".into(),
                message: "error reading from server: EOF".into(),
            }));
        }
    }

    /// Whether events are streamed and someone listens.
    fn events_on(&self) -> bool {
        self.events_enabled.load(Ordering::Relaxed) && !self.event_streams.lock().unwrap().is_empty()
    }

    /// The event of `id` (a container, or a sandbox) as of the state `st`, while anyone listens: the sandbox's
    /// status and its containers' statuses, oldest first.
    fn event(
        &self,
        st: &State,
        id: &str,
        kind: api::ContainerEventType,
        at: i64,
    ) -> Option<api::ContainerEventResponse> {
        if !self.events_on() {
            return None;
        }
        let sandbox_id = st.containers.get(id).map(|c| c.sandbox_id.as_str()).unwrap_or(id);
        let mut containers: Vec<_> = st
            .containers
            .iter()
            .filter(|(_, c)| c.sandbox_id == sandbox_id)
            .map(|(cid, c)| Self::status_of(st, cid, c))
            .collect();
        containers.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Some(api::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: at,
            pod_sandbox_status: st.sandboxes.get(sandbox_id).map(|s| api::PodSandboxStatus {
                id: sandbox_id.to_string(),
                metadata: s.config.metadata.clone(),
                state: s.state,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: s.handler.clone(),
                ..Default::default()
            }),
            containers_statuses: containers,
        })
    }

    /// Sends events to every open stream (forgetting the streams nobody reads any more).
    fn send_events(&self, events: impl IntoIterator<Item = api::ContainerEventResponse>) {
        let mut streams = self.event_streams.lock().unwrap();
        for ev in events {
            streams.retain(|tx| tx.send(Ok(ev.clone())).is_ok());
        }
    }

    /// IDs of the containers named `name`, oldest first.
    pub fn container_ids(&self, name: &str) -> Vec<String> {
        let st = self.state.lock().unwrap();
        let mut v: Vec<_> = st
            .containers
            .iter()
            .filter(|(_, c)| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|(id, c)| (c.created_at, id.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| id).collect()
    }

    /// The config a container was created with.
    pub fn container_config(&self, id: &str) -> Option<api::ContainerConfig> {
        self.state.lock().unwrap().containers.get(id).map(|c| c.config.clone())
    }

    /// The config a sandbox was run with.
    pub fn sandbox_config(&self, id: &str) -> Option<api::PodSandboxConfig> {
        self.state.lock().unwrap().sandboxes.get(id).map(|s| s.config.clone())
    }

    /// Number of sandboxes and containers held.
    pub fn object_counts(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap();
        (st.sandboxes.len(), st.containers.len())
    }

    /// The CRI status of container `id`.
    fn status_of(st: &State, id: &str, c: &FakeContainer) -> api::ContainerStatus {
        api::ContainerStatus {
            id: id.to_string(),
            metadata: c.config.metadata.clone(),
            state: c.state,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: st
                .images
                .get(c.config.image.as_ref().map(|i| i.image.as_str()).unwrap_or(""))
                .map(|i| i.id.clone())
                .unwrap_or_default(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: c.config.log_path.clone(),
            // As containerd: the resources of the container's spec, as last created or updated.
            resources: c
                .config
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
                .map(|linux| api::ContainerResources { linux: Some(linux), ..Default::default() }),
            ..Default::default()
        }
    }

    fn to_container(id: &str, c: &FakeContainer) -> api::Container {
        api::Container {
            id: id.to_string(),
            pod_sandbox_id: c.sandbox_id.clone(),
            metadata: c.config.metadata.clone(),
            image: c.config.image.clone(),
            image_ref: c.config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
            state: c.state,
            created_at: c.created_at,
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            ..Default::default()
        }
    }
}

#[async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self) -> CriResult<api::VersionResponse> {
        drop(self.enter("Version")?);
        Ok(api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0.1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn status(&self) -> CriResult<api::StatusResponse> {
        let st = self.enter("Status")?;
        let cond = |t: &str| api::RuntimeCondition { r#type: t.into(), status: true, ..Default::default() };
        Ok(api::StatusResponse {
            status: Some(api::RuntimeStatus { conditions: vec![cond("RuntimeReady"), cond("NetworkReady")] }),
            runtime_handlers: st.handlers.clone(),
            ..Default::default()
        })
    }

    async fn runtime_config(&self) -> CriResult<api::RuntimeConfigResponse> {
        let st = self.enter("RuntimeConfig")?;
        let driver = st.cgroup_driver.ok_or(CriError::Unimplemented { op: "RuntimeConfig" })?;
        Ok(api::RuntimeConfigResponse { linux: Some(api::LinuxRuntimeConfiguration { cgroup_driver: driver as i32 }) })
    }

    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig, handler: &str) -> CriResult<String> {
        let now = self.now();
        let id = self.id("s");
        let mut st = self.enter("RunPodSandbox")?;
        if let Some(uid) = config.labels.get(POD_UID_LABEL) {
            st.by_uid.entry(uid.clone()).or_default().insert(id.clone());
        }
        let handler = handler.to_string();
        st.sandboxes.insert(id.clone(), FakeSandbox { config, state: READY, created_at: now, handler });
        let evs = [self.event(&st, &id, CREATED_EVENT, now), self.event(&st, &id, STARTED_EVENT, now)];
        self.send_events(evs.into_iter().flatten());
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let now = self.now();
        let mut st = self.enter("StopPodSandbox")?;
        self.stop_sandbox_in(&mut st, id, now);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let mut st = self.enter("RemovePodSandbox")?;
        // Its containers' removals, then its own, each with the sandbox as it was.
        let mut evs = vec![];
        if self.events_on() {
            let now = self.now();
            let mut ids: Vec<_> =
                st.containers.iter().filter(|(_, c)| c.sandbox_id == id).map(|(cid, _)| cid.clone()).collect();
            ids.sort();
            evs.extend(ids.iter().filter_map(|c| self.event(&st, c, DELETED_EVENT, now)));
            evs.extend(st.sandboxes.contains_key(id).then(|| self.event(&st, id, DELETED_EVENT, now)).flatten());
        }
        st.sandboxes.remove(id);
        st.containers.retain(|_, c| c.sandbox_id != id);
        self.send_events(evs);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> CriResult<api::PodSandboxStatus> {
        self.wait_while_hung(id).await;
        let st = self.enter("PodSandboxStatus")?;
        let s = st
            .sandboxes
            .get(id)
            .ok_or_else(|| CriError::NotFound { op: "PodSandboxStatus", message: format!("sandbox {id}") })?;
        let host_network = s
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .is_some_and(|n| n.network == api::NamespaceMode::Node as i32);
        let ip = if host_network { "192.0.2.1".to_string() } else { format!("10.88.0.{}", 2 + id.len()) };
        Ok(api::PodSandboxStatus {
            id: id.to_string(),
            metadata: s.config.metadata.clone(),
            state: s.state,
            created_at: s.created_at,
            runtime_handler: s.handler.clone(),
            network: Some(api::PodSandboxNetworkStatus { ip, additional_ips: vec![] }),
            linux: Some(api::LinuxPodSandboxStatus {
                namespaces: Some(api::Namespace {
                    options: s
                        .config
                        .linux
                        .as_ref()
                        .and_then(|l| l.security_context.as_ref())
                        .and_then(|sc| sc.namespace_options.clone()),
                }),
            }),
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
        })
    }

    async fn list_pod_sandbox(&self, filter: Option<api::PodSandboxFilter>) -> CriResult<Vec<api::PodSandbox>> {
        let st = self.enter("ListPodSandbox")?;
        let f = filter.unwrap_or_default();
        let ids = f.label_selector.get(POD_UID_LABEL).map(|u| st.by_uid.get(u).cloned().unwrap_or_default());
        let items: Box<dyn Iterator<Item = (&String, &FakeSandbox)>> = match &ids {
            Some(ids) => Box::new(ids.iter().filter_map(|id| st.sandboxes.get_key_value(id))),
            None => Box::new(st.sandboxes.iter()),
        };
        Ok(items
            .filter(|(id, s)| {
                (f.id.is_empty() || **id == f.id)
                    && f.state.as_ref().is_none_or(|v| v.state == s.state)
                    && labels_match(&s.config.labels, &f.label_selector)
            })
            .map(|(id, s)| api::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        _sandbox_config: api::PodSandboxConfig,
    ) -> CriResult<String> {
        let now = self.now();
        let id = self.id("c");
        let mut st = self.enter("CreateContainer")?;
        match st.sandboxes.get(sandbox_id) {
            Some(s) if s.state == READY => {}
            _ => {
                return Err(CriError::NotFound {
                    op: "CreateContainer",
                    message: format!("sandbox {sandbox_id} not ready"),
                });
            }
        }
        let image = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        if !st.images.contains_key(&image) {
            return Err(CriError::Other {
                op: "CreateContainer",
                code: "Unknown".into(),
                message: format!("image {image} not present"),
            });
        }
        // A PID namespace of another container (an ephemeral container's target) must exist: that container must
        // run in the same sandbox, as containerd's validateTargetContainer demands.
        let ns =
            config.linux.as_ref().and_then(|l| l.security_context.as_ref()).and_then(|s| s.namespace_options.as_ref());
        if let Some(ns) = ns.filter(|ns| ns.pid == api::NamespaceMode::Target as i32) {
            let target = st.containers.get(&ns.target_id);
            let problem = match target {
                None => Some(format!("container {:?} does not exist", ns.target_id)),
                Some(t) if t.sandbox_id != sandbox_id => {
                    Some(format!("container {:?} does not belong to sandbox {sandbox_id:?}", ns.target_id))
                }
                Some(t) if t.state != RUNNING => Some(format!("container {:?} is not running", ns.target_id)),
                Some(_) => None,
            };
            if let Some(p) = problem {
                return Err(CriError::Other {
                    op: "CreateContainer",
                    code: "Unknown".into(),
                    message: format!("invalid target container: {p}"),
                });
            }
        }
        if let Some(uid) = config.labels.get(POD_UID_LABEL) {
            st.by_uid.entry(uid.clone()).or_default().insert(id.clone());
        }
        st.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: sandbox_id.to_string(),
                config,
                state: CREATED,
                created_at: now,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
            },
        );
        let ev = self.event(&st, &id, CREATED_EVENT, now);
        self.send_events(ev);
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> CriResult<()> {
        let now = self.now();
        let mut st = self.enter("StartContainer")?;
        let exit = st.containers.get(id).and_then(|c| {
            let name = c.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            st.exit_on_start.get(&name).copied()
        });
        let c = st
            .containers
            .get_mut(id)
            .ok_or_else(|| CriError::NotFound { op: "StartContainer", message: format!("container {id}") })?;
        c.state = RUNNING;
        c.started_at = now;
        if let Some(code) = exit {
            c.state = EXITED;
            c.finished_at = now + 1;
            c.exit_code = code;
            c.reason = if code == 0 { "Completed".into() } else { "Error".into() };
        }
        let mut evs = vec![self.event(&st, id, STARTED_EVENT, now)];
        if exit.is_some() {
            evs.push(self.event(&st, id, STOPPED_EVENT, now + 1));
        }
        self.send_events(evs.into_iter().flatten());
        Ok(())
    }

    async fn stop_container(&self, id: &str, _timeout: i64) -> CriResult<()> {
        let now = self.now();
        let mut st = self.enter("StopContainer")?;
        if let Some(c) = st.containers.get_mut(id)
            && c.state == RUNNING
        {
            c.state = EXITED;
            c.finished_at = now;
            c.exit_code = 137;
            c.reason = "Error".into();
            let ev = self.event(&st, id, STOPPED_EVENT, now);
            self.send_events(ev);
        }
        Ok(())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        _timeout: std::time::Duration,
    ) -> CriResult<crate::ExecOutput> {
        let name = {
            let st = self.enter("ExecSync")?;
            let c = st
                .containers
                .get(id)
                .ok_or_else(|| CriError::NotFound { op: "ExecSync", message: format!("container {id}") })?;
            if c.state != RUNNING {
                return Err(CriError::Other {
                    op: "ExecSync",
                    code: "Unknown".into(),
                    message: format!("container {id} is not running"),
                });
            }
            c.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default()
        };
        let h = self.exec.lock().unwrap().clone();
        match h {
            Some(h) => h(&name, &cmd),
            None => Ok(crate::ExecOutput::default()),
        }
    }

    async fn remove_container(&self, id: &str) -> CriResult<()> {
        let mut st = self.enter("RemoveContainer")?;
        let ev = if st.containers.contains_key(id) && self.events_on() {
            let now = self.now();
            self.event(&st, id, DELETED_EVENT, now)
        } else {
            None
        };
        st.containers.remove(id);
        // The event carries the sandbox's containers as they are after the removal.
        let ev = ev.map(|mut ev| {
            ev.containers_statuses.retain(|c| c.id != id);
            ev
        });
        self.send_events(ev);
        Ok(())
    }

    async fn container_events(&self) -> CriResult<crate::ContainerEventStream> {
        drop(self.enter("GetContainerEvents")?);
        if !self.events_enabled.load(Ordering::Relaxed) {
            return Err(CriError::Unimplemented { op: "GetContainerEvents" });
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.event_streams.lock().unwrap().push(tx);
        Ok(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)))
    }

    async fn update_container_resources(&self, id: &str, resources: api::LinuxContainerResources) -> CriResult<()> {
        let mut st = self.enter("UpdateContainerResources")?;
        let c = st.containers.get_mut(id).ok_or_else(|| CriError::NotFound {
            op: "UpdateContainerResources",
            message: format!("container {id} not found"),
        })?;
        // As containerd: the fields given (non-zero) replace the container's, the others stay.
        let current =
            c.config.linux.get_or_insert_with(Default::default).resources.get_or_insert_with(Default::default);
        if !resources.cpuset_cpus.is_empty() {
            current.cpuset_cpus = resources.cpuset_cpus;
        }
        if !resources.cpuset_mems.is_empty() {
            current.cpuset_mems = resources.cpuset_mems;
        }
        if resources.cpu_shares != 0 {
            current.cpu_shares = resources.cpu_shares;
        }
        if resources.cpu_period != 0 {
            current.cpu_period = resources.cpu_period;
        }
        if resources.cpu_quota != 0 {
            current.cpu_quota = resources.cpu_quota;
        }
        if resources.memory_limit_in_bytes != 0 {
            current.memory_limit_in_bytes = resources.memory_limit_in_bytes;
        }
        Ok(())
    }

    async fn reopen_container_log(&self, id: &str) -> CriResult<()> {
        let st = self.enter("ReopenContainerLog")?;
        let c = st.containers.get(id).ok_or_else(|| CriError::NotFound {
            op: "ReopenContainerLog",
            message: format!("container {id} not found"),
        })?;
        if c.state != RUNNING {
            return Err(CriError::Other {
                op: "ReopenContainerLog",
                code: "FailedPrecondition".into(),
                message: format!("container {id} is not running"),
            });
        }
        if !c.config.log_path.is_empty() {
            std::fs::File::create(&c.config.log_path).map_err(|e| CriError::Other {
                op: "ReopenContainerLog",
                code: "Internal".into(),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> CriResult<Vec<api::Container>> {
        let st = self.enter("ListContainers")?;
        let f = filter.unwrap_or_default();
        let ids = f.label_selector.get(POD_UID_LABEL).map(|u| st.by_uid.get(u).cloned().unwrap_or_default());
        let items: Box<dyn Iterator<Item = (&String, &FakeContainer)>> = match &ids {
            Some(ids) => Box::new(ids.iter().filter_map(|id| st.containers.get_key_value(id))),
            None => Box::new(st.containers.iter()),
        };
        Ok(items
            .filter(|(id, c)| {
                (f.id.is_empty() || **id == f.id)
                    && (f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
                    && f.state.as_ref().is_none_or(|v| v.state == c.state)
                    && labels_match(&c.config.labels, &f.label_selector)
            })
            .map(|(id, c)| Self::to_container(id, c))
            .collect())
    }

    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> CriResult<Vec<api::ContainerStats>> {
        let st = self.enter("ListContainerStats")?;
        let now = self.now();
        let f = filter.unwrap_or_default();
        let mut out: Vec<api::ContainerStats> = st
            .containers
            .iter()
            .filter(|(_, c)| c.state == api::ContainerState::ContainerRunning as i32)
            .filter(|(id, c)| {
                (f.id.is_empty() || **id == f.id) && (f.pod_sandbox_id.is_empty() || c.sandbox_id == f.pod_sandbox_id)
            })
            .map(|(id, c)| {
                let (cpu, mem) = st.usage.get(id).copied().unwrap_or_default();
                let v = |value| Some(api::UInt64Value { value });
                api::ContainerStats {
                    attributes: Some(api::ContainerAttributes {
                        id: id.clone(),
                        metadata: c.config.metadata.clone(),
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                    }),
                    cpu: Some(api::CpuUsage { timestamp: now, usage_core_nano_seconds: v(cpu), ..Default::default() }),
                    memory: Some(api::MemoryUsage {
                        timestamp: now,
                        working_set_bytes: v(mem),
                        usage_bytes: v(mem),
                        ..Default::default()
                    }),
                    writable_layer: st.writable.get(id).map(|b| api::FilesystemUsage {
                        timestamp: now,
                        used_bytes: v(*b),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect();
        out.sort_by(|a, b| a.attributes.as_ref().map(|a| &a.id).cmp(&b.attributes.as_ref().map(|b| &b.id)));
        Ok(out)
    }

    async fn container_status(&self, id: &str) -> CriResult<api::ContainerStatus> {
        self.wait_while_hung(id).await;
        let st = self.enter("ContainerStatus")?;
        let c = st
            .containers
            .get(id)
            .ok_or_else(|| CriError::NotFound { op: "ContainerStatus", message: format!("container {id}") })?;
        Ok(Self::status_of(&st, id, c))
    }
}

#[async_trait]
impl ImageService for FakeRuntime {
    async fn list_images(&self, _filter: Option<api::ImageFilter>) -> CriResult<Vec<api::Image>> {
        Ok(self.enter("ListImages")?.images.values().cloned().collect())
    }

    async fn image_status(&self, image: api::ImageSpec) -> CriResult<Option<api::Image>> {
        Ok(self.enter("ImageStatus")?.images.get(&image.image).cloned())
    }

    async fn pull_image(
        &self,
        image: api::ImageSpec,
        auth: Option<api::AuthConfig>,
        _sandbox_config: Option<api::PodSandboxConfig>,
    ) -> CriResult<String> {
        let mut st = self.enter("PullImage")?;
        let user = auth.as_ref().map(|a| a.username.clone()).unwrap_or_default();
        st.pulls.push((image.image.clone(), user));
        st.pulled_specs.push(image.clone());
        if let Some((u, p)) = st.private.get(&image.image)
            && auth.is_none_or(|a| (&a.username, &a.password) != (u, p))
        {
            let message = format!("failed to pull and unpack image {:?}: 401 Unauthorized", image.image);
            return Err(CriError::Other { op: "PullImage", code: "Unknown".into(), message });
        }
        drop(st);
        self.add_image(&image.image);
        Ok(self.state.lock().unwrap().images[&image.image].id.clone())
    }

    async fn remove_image(&self, image: api::ImageSpec) -> CriResult<()> {
        // By name or by ID, as containerd.
        self.enter("RemoveImage")?.images.retain(|name, i| *name != image.image && i.id != image.image);
        Ok(())
    }

    async fn image_fs_info(&self) -> CriResult<api::ImageFsInfoResponse> {
        drop(self.enter("ImageFsInfo")?);
        let fs = api::FilesystemUsage {
            fs_id: Some(api::FilesystemIdentifier { mountpoint: "/".into() }),
            ..Default::default()
        };
        Ok(api::ImageFsInfoResponse { image_filesystems: vec![fs.clone()], container_filesystems: vec![fs] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app_config() -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn sandbox_and_container_lifecycle() {
        let f = FakeRuntime::new(&["busybox"]);
        let sid = f.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let cfg = app_config();
        let cid = f.create_container(&sid, cfg, Default::default()).await.unwrap();
        f.start_container(&cid).await.unwrap();
        assert_eq!(f.container_status(&cid).await.unwrap().state, RUNNING);
        f.exit_container(&cid, 3);
        let st = f.container_status(&cid).await.unwrap();
        assert_eq!((st.state, st.exit_code, st.reason.as_str()), (EXITED, 3, "Error"));
        f.inject_error("RemoveContainer", CriError::Unavailable { op: "RemoveContainer", message: "down".into() });
        assert!(f.remove_container(&cid).await.unwrap_err().is_unavailable());
        f.remove_pod_sandbox(&sid).await.unwrap();
        assert!(f.container_status(&cid).await.unwrap_err().is_not_found());
        assert_eq!(f.count("StartContainer"), 1);
    }

    #[tokio::test]
    async fn events_stream_every_state_change_once_enabled_and_break_on_demand() {
        use tokio_stream::StreamExt;
        let f = FakeRuntime::new(&["busybox"]);
        let e = f.container_events().await.err().expect("off by default");
        assert!(matches!(e, CriError::Unimplemented { op: "GetContainerEvents" }));
        f.enable_events();
        let mut s = f.container_events().await.unwrap();
        let meta = api::PodSandboxMetadata { uid: "u1".into(), name: "web".into(), ..Default::default() };
        let sid =
            f.run_pod_sandbox(api::PodSandboxConfig { metadata: Some(meta), ..Default::default() }, "").await.unwrap();
        let cfg = app_config();
        let cid = f.create_container(&sid, cfg, Default::default()).await.unwrap();
        f.start_container(&cid).await.unwrap();
        f.exit_container(&cid, 1);
        f.stop_pod_sandbox(&sid).await.unwrap();
        f.remove_container(&cid).await.unwrap();
        f.remove_pod_sandbox(&sid).await.unwrap();
        let want = [
            (&sid, CREATED_EVENT),
            (&sid, STARTED_EVENT),
            (&cid, CREATED_EVENT),
            (&cid, STARTED_EVENT),
            (&cid, STOPPED_EVENT),
            (&sid, STOPPED_EVENT),
            (&cid, DELETED_EVENT),
            (&sid, DELETED_EVENT),
        ];
        let mut last = 0;
        for (i, (id, kind)) in want.into_iter().enumerate() {
            let ev = s.next().await.unwrap().unwrap();
            assert_eq!((&ev.container_id, ev.container_event_type), (id, kind as i32), "event {i}");
            assert!(ev.created_at >= last, "event {i}: times do not go back");
            last = ev.created_at;
            let sb = ev.pod_sandbox_status.expect("the sandbox's status");
            assert_eq!((sb.id.as_str(), sb.metadata.unwrap().uid.as_str()), (sid.as_str(), "u1"));
            if i == 4 {
                let c = &ev.containers_statuses[0];
                assert_eq!((c.id.as_str(), c.state, c.exit_code), (cid.as_str(), EXITED, 1));
            }
        }
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(10), s.next()).await;
        assert!(quiet.is_err(), "nothing else: {quiet:?}");

        // Broken streams end with an error; a new call opens a new stream.
        let mut other = f.container_events().await.unwrap();
        f.break_event_streams();
        for s in [&mut s, &mut other] {
            let e = s.next().await.unwrap().unwrap_err();
            assert_eq!(e.code(), "Unavailable");
            assert!(s.next().await.is_none());
        }
        let mut s = f.container_events().await.unwrap();
        f.kill_sandbox("missing");
        f.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        assert_eq!(s.next().await.unwrap().unwrap().container_event_type, CREATED_EVENT as i32);
        assert_eq!(f.count("GetContainerEvents"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_object_answers_nothing_until_released_and_holds_back_nothing_else() {
        let f = std::sync::Arc::new(FakeRuntime::new(&["busybox"]));
        let a = f.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let b = f.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        f.hang(&a);
        let waiting = tokio::spawn({
            let (f, a) = (f.clone(), a.clone());
            async move { f.pod_sandbox_status(&a).await }
        });
        let late = tokio::time::timeout(std::time::Duration::from_secs(600), f.pod_sandbox_status(&a)).await;
        assert!(late.is_err(), "no answer for the hung sandbox");
        assert_eq!(f.pod_sandbox_status(&b).await.unwrap().id, b, "another sandbox answers");
        assert_eq!(f.list_pod_sandbox(None).await.unwrap().len(), 2, "lists answer");
        assert!(!waiting.is_finished());
        f.release(&a);
        assert_eq!(waiting.await.unwrap().unwrap().id, a, "a waiting call answers once released");
    }
}

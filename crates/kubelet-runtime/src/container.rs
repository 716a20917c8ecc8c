//! Starting one container (`kuberuntime_container.go` startContainer, `kuberuntime_image.go` EnsureImageExists,
//! `kubelet_pods.go` makeMounts for the kubelet-managed files): crash-loop back-off, the image by pull policy with
//! pull back-off, `/etc/hosts` and the termination-message file, CreateContainer, StartContainer, and the
//! `/var/log/containers` link. Called by [`RuntimeManager::sync_pod`] only.
//!
//! App, init and ephemeral containers take the same path ([`StartSpec`], upstream's `startSpec`): an ephemeral
//! container differs only by its `targetContainerName`, resolved to the newest container of that name in the
//! pod (`getTargetID`; none is `CreateContainerConfigError` "unable to find target container"), whose PID
//! namespace it joins (see [`config_gen::container_config`]). What the API forbids an ephemeral container to
//! have (probes, lifecycle hooks, ports, resources) is simply absent from its spec.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cri::api;
use kubelet_types::pod_update::{pod_ref, pod_uid};
use kubelet_types::{ContainerState, PodStatus, PodUid};
use tracing::{info, warn};

use kubelet_types::events::{NORMAL, WARNING, container_reference, reason};

use crate::config_gen;
use crate::lifecycle::run_handler;
use crate::logs::restart_count_from_log_dir;
use crate::manager::KillRequest;
use crate::manager::{RuntimeManager, SyncError, ns_to_system_time};

/// Whether the pod's volume `name` is one the kubelet makes and may relabel for SELinux (the volume plugins'
/// `Managed` and `SELinuxRelabel` attributes: emptyDir, configMap, secret, downwardAPI, projected; never a
/// hostPath, whose labels belong to the host).
fn kubelet_managed_volume(pod: &Pod, name: &str) -> bool {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().find(|v| v.name == name).is_some_and(|v| {
        v.empty_dir.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.projected.is_some()
    })
}

/// Default pull policy of an image (`Always` for `:latest` or no tag, else `IfNotPresent`).
pub fn default_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match name.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// A volumeMount's `subPathExpr` expanded from the container's environment (`ExpandContainerVolumeMounts`): a
/// reference to a variable that is missing or empty is an error naming it.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> std::io::Result<String> {
    let missing = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let expanded = kubelet_prober::handlers::expand(expr, &|name| {
        let v = env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default();
        if v.is_empty() {
            missing.borrow_mut().insert(name.to_string());
        }
        Some(v)
    });
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(std::io::Error::other(format!("missing value for {}", missing.into_iter().collect::<Vec<_>>().join(", "))))
    }
}

/// What to start (`startSpec`): an app, init or ephemeral container (as the container it runs as, see
/// [`kubelet_types::pod_update::ephemeral_container_common`]), and for an ephemeral container the
/// `targetContainerName` whose process namespace it shares.
#[derive(Debug, Clone, Copy)]
pub struct StartSpec<'a> {
    /// The container.
    pub container: &'a Container,
    /// An ephemeral container's `targetContainerName` (None or empty: no target).
    pub target: Option<&'a str>,
}

impl<'a> StartSpec<'a> {
    /// An app or init container (`containerStartSpec`).
    pub fn container(c: &'a Container) -> Self {
        Self { container: c, target: None }
    }

    /// An ephemeral container (`ephemeralContainerStartSpec`): `common` is its `EphemeralContainerCommon`.
    pub fn ephemeral(common: &'a Container, target: Option<&'a str>) -> Self {
        Self { container: common, target: target.filter(|t| !t.is_empty()) }
    }

    /// The ID of the target container (`getTargetID`): the newest container of that name in the pod, whatever
    /// its state (the runtime refuses a target that does not run).
    fn target_id(&self, status: &PodStatus) -> Result<Option<String>, String> {
        let Some(t) = self.target else { return Ok(None) };
        match status.find_container(t) {
            Some(s) => Ok(Some(s.id.clone())),
            None => Err(format!("unable to find target container {t}")),
        }
    }
}

/// A failed StartContainer step of container `c`.
pub(crate) fn start_error(c: &Container, reason: &str, message: String) -> SyncError {
    SyncError { action: "StartContainer", target: c.name.clone(), reason: reason.into(), message }
}

impl RuntimeManager {
    fn backoff_key(pod: &Pod, c: &Container) -> String {
        format!(
            "{}_{}_{}_{}_{:x}",
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or(""),
            c.name,
            crate::hash::hash_container(c)
        )
    }

    /// Crash-loop back-off check (`doBackOff`): whether the container must wait before starting again.
    fn do_backoff(&self, pod: &Pod, c: &Container, status: &PodStatus) -> Option<SyncError> {
        let exited =
            status.container_statuses.iter().find(|s| s.name == c.name && s.state == ContainerState::Exited)?;
        let ts = ns_to_system_time(exited.finished_at);
        let key = Self::backoff_key(pod, c);
        if self.crash_backoff.is_in_backoff_since(&key, ts) {
            let message = format!(
                "back-off {} restarting failed container={} pod={}_{}({})",
                humanize(self.crash_backoff.get(&key)),
                c.name,
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.uid.as_deref().unwrap_or("")
            );
            return Some(start_error(c, "CrashLoopBackOff", message));
        }
        self.crash_backoff.next(&key, ts);
        None
    }

    /// The container's volumeMounts as CRI mounts (`makeMounts`): the volume's host path, read-only when the
    /// mount or the volume is, with the mount propagation asked for. A subPath is made safely inside the volume
    /// and bind-mounted under `<pod-dir>/volume-subpaths` (see [`kubelet_volume::subpath`]); the runtime gets that
    /// bind, never a path it would resolve itself.
    fn volume_mounts(
        &self,
        pod: &Pod,
        c: &Container,
        env: &[(String, String)],
        image_volumes: &crate::images::ImageVolumes,
    ) -> std::io::Result<Vec<api::Mount>> {
        use kubelet_volume::subpath;
        let uid = kubelet_types::PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let volumes = self.volumes.volumes(&uid);
        // Once per container, as upstream's GenerateRunContainerOptions: whether the pod's handler can make
        // recursive read-only mounts.
        let supports_rro = match self.pod_runtime_handler(pod) {
            Ok(h) => crate::runtime_handlers::supports_recursive_read_only(&self.handlers.borrow(), &h),
            Err(e) => {
                warn!(pod = %pod_ref(pod), error = %e, "failed to look up the runtime handler");
                false
            }
        };
        let mut out = vec![];
        for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
            let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => Some(expand_sub_path(expr, env)?),
                None => m.sub_path.clone(),
            };
            let propagation = match m.mount_propagation.as_deref() {
                Some("HostToContainer") => api::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => api::MountPropagation::PropagationBidirectional,
                _ => api::MountPropagation::PropagationPrivate,
            } as i32;
            let recursive_read_only = crate::runtime_handlers::resolve_recursive_read_only(m, supports_rro)
                .map_err(|e| std::io::Error::other(format!("failed to resolve recursive read-only mode: {e}")))?;
            // An image volume: the runtime mounts the image (read-only), its subPath inside the image.
            // A subPath stays inside its volume, for the host's volumes and the runtime's image mounts alike.
            let sub = sub.filter(|s| !s.is_empty());
            if let Some(sub) = &sub {
                if std::path::Path::new(sub).is_absolute() {
                    return Err(std::io::Error::other(format!("error SubPath `{sub}` must not be an absolute path")));
                }
                if !subpath::is_relative_without_backsteps(sub) {
                    return Err(std::io::Error::other(format!(
                        "unable to provision SubPath `{sub}`: must not contain '..'"
                    )));
                }
            }
            if let Some(Ok(image)) = image_volumes.get(&m.name) {
                let sub = sub.unwrap_or_default();
                out.push(api::Mount {
                    container_path: m.mount_path.clone(),
                    readonly: true,
                    propagation,
                    recursive_read_only,
                    image: Some(image.clone()),
                    image_sub_path: sub,
                    ..Default::default()
                });
                continue;
            }
            let Some(v) = volumes.get(&m.name) else {
                return Err(std::io::Error::other(format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    m.name, c.name
                )));
            };
            let mut host = v.host_path.clone();
            if let Some(sub) = sub {
                let volume_path = v.host_path.clone();
                host = volume_path.join(&sub);
                // Made here rather than by the runtime, which would make it 0755 root:root.
                match std::fs::metadata(&host) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        let made = subpath::volume_mode(&volume_path)
                            .map_err(|e| subpath::SubpathError(e.to_string()))
                            .and_then(|perm| subpath::safe_make_dir(std::path::Path::new(&sub), &volume_path, perm));
                        if let Err(e) = made {
                            warn!(pod = %pod_ref(pod), containerName = %c.name, volumeMountName = %m.name, error = %e, "failed to create subPath directory for volumeMount of the container");
                            return Err(std::io::Error::other(format!(
                                "failed to create subPath directory for volumeMount {:?} of container {:?}",
                                m.name, c.name
                            )));
                        }
                    }
                    Err(e) => {
                        warn!(pod = %pod_ref(pod), path = %host.display(), error = %e, "could not determine if subPath exists, will not attempt to change its permissions");
                    }
                }
                let sp = subpath::Subpath {
                    volume_mount_index: i,
                    path: host.clone(),
                    volume_name: &m.name,
                    volume_path,
                    pod_dir: self.pod_dir(pod),
                    container_name: &c.name,
                };
                // The details name host paths: they go to the log only, as upstream.
                host = subpath::prepare_safe_subpath(&sp).map_err(|e| {
                    warn!(pod = %pod_ref(pod), containerName = %c.name, volumeMountName = %m.name, error = %e, "failed to prepare subPath for volumeMount of the container");
                    std::io::Error::other(format!(
                        "failed to prepare subPath for volumeMount {:?} of container {:?}",
                        m.name, c.name
                    ))
                })?;
            }
            out.push(api::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false) || v.read_only,
                propagation,
                selinux_relabel: crate::security::host_selinux_enabled() && kubelet_managed_volume(pod, &m.name),
                recursive_read_only,
                ..Default::default()
            });
        }
        Ok(out)
    }

    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        self.cfg.root_dir.join("pods").join(pod.metadata.uid.as_deref().unwrap_or("_"))
    }

    /// The kubelet-managed mounts: /etc/hosts (`makeHostsMount`) and the termination message file.
    fn managed_mounts(
        &self,
        pod: &Pod,
        c: &Container,
        inputs: &crate::pull::PodInputs<'_>,
        env: &[(String, String)],
    ) -> std::io::Result<Vec<api::Mount>> {
        let pod_ips = inputs.pod_ips;
        let dir = self.pod_dir(pod);
        let mut mounts = self.volume_mounts(pod, c, env, inputs.image_volumes)?;
        let host_network = config_gen::host_network(pod);
        let mounts_own_hosts = c.volume_mounts.iter().flatten().any(|m| m.mount_path == "/etc/hosts");
        if !mounts_own_hosts && (host_network || !pod_ips.is_empty()) {
            let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.clone()).unwrap_or_default();
            let text = if host_network {
                let node = std::fs::read_to_string(&self.cfg.node_hosts_file)?;
                crate::hosts::node_hosts_file(&node, &aliases)
            } else {
                let (name, domain) = config_gen::hostname_and_domain(pod, &self.cfg.cluster_domain);
                crate::hosts::managed_hosts_file(pod_ips, &name, &domain, &aliases)
            };
            let hosts = dir.join("etc-hosts");
            crate::logs::ensure_dir(&dir)?;
            // The pod's running containers see this very file: a rewrite truncates it first, and on a full disk
            // it would stay empty. The same content is not written again.
            if std::fs::read(&hosts).ok().as_deref() != Some(text.as_bytes()) {
                std::fs::write(&hosts, text)?;
            }
            std::fs::set_permissions(&hosts, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
            mounts.push(api::Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.to_string_lossy().into_owned(),
                selinux_relabel: crate::security::host_selinux_enabled(),
                ..Default::default()
            });
        }
        let path = c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
        if !path.is_empty() {
            let cdir = dir.join("containers").join(&c.name);
            let file = cdir.join(format!("{:08x}", rand_u32()));
            // As upstream, a file that cannot be made (a full disk) does not hold the container back: it runs
            // without it, and its termination message comes from the log if the policy allows.
            match crate::logs::ensure_dir(&cdir).and_then(|()| std::fs::write(&file, b"")) {
                Ok(()) => {
                    // Any user of the container must be able to write its termination message.
                    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o666);
                    if let Err(e) = std::fs::set_permissions(&file, mode) {
                        warn!(pod = %pod_ref(pod), containerName = %c.name, path = %file.display(), error = %e, "unable to set termination-log file permissions");
                    }
                    mounts.push(api::Mount {
                        container_path: path,
                        host_path: file.to_string_lossy().into_owned(),
                        selinux_relabel: crate::security::host_selinux_enabled(),
                        ..Default::default()
                    });
                }
                Err(e) => {
                    warn!(pod = %pod_ref(pod), containerName = %c.name, path = %file.display(), error = %e, "unable to create the termination-log file; the container runs without it")
                }
            }
        }
        Ok(mounts)
    }

    pub(crate) async fn start_container(
        &self,
        pod: &Pod,
        spec: StartSpec<'_>,
        status: &PodStatus,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        inputs: &crate::pull::PodInputs<'_>,
    ) -> Result<(), SyncError> {
        let c = spec.container;
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let res = self.start_container_inner(pod, spec, status, sandbox_id, sandbox_config, inputs).await;
        match &res {
            Ok(()) => self.reasons.remove(&uid, &c.name),
            Err(e) => {
                self.reasons.add(&uid, &c.name, &e.reason, e.message.clone());
                self.record_failure(pod, c, e);
            }
        }
        res
    }

    /// The events of a failed start, as upstream records them (the image steps recorded their own before).
    fn record_failure(&self, pod: &Pod, c: &Container, e: &SyncError) {
        let r = container_reference(pod, &c.name);
        match e.reason.as_str() {
            "CrashLoopBackOff" => self.recorder.event(
                &r,
                WARNING,
                reason::BACKOFF,
                format!(
                    "Back-off restarting failed container {} in pod {}_{}({})",
                    c.name,
                    pod.metadata.name.as_deref().unwrap_or(""),
                    pod.metadata.namespace.as_deref().unwrap_or(""),
                    pod.metadata.uid.as_deref().unwrap_or("")
                ),
            ),
            // The hook's own event (FailedPostStartHook) was recorded already.
            "PostStartHookError" => {}
            "ErrImagePull"
            | "ImagePullBackOff"
            | "ErrImageNeverPull"
            | "InvalidImageName"
            | "ImageInspectError"
            | "RegistryUnavailable"
            | "SignatureValidationFailed" => {
                self.recorder.event(&r, WARNING, reason::FAILED, format!("Error: {}", e.reason))
            }
            _ => self.recorder.event(&r, WARNING, reason::FAILED, format!("Error: {}", e.message)),
        }
    }

    async fn start_container_inner(
        &self,
        pod: &Pod,
        spec: StartSpec<'_>,
        status: &PodStatus,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        inputs: &crate::pull::PodInputs<'_>,
    ) -> Result<(), SyncError> {
        let c = spec.container;
        let pod_ips = inputs.pod_ips;
        if let Some(e) = self.do_backoff(pod, c, status) {
            return Err(e);
        }
        let err = |reason: &str, message: String| start_error(c, reason, message);
        // A mounted image volume whose image could not be had fails the container with the pull's reason, before
        // its own image is pulled (`toKubeContainerImageVolumes`): an `Error: <reason>` event per failing mount,
        // the last one's by the caller's record of the failure.
        let failed: Vec<&(String, String)> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter_map(|m| inputs.image_volumes.get(&m.name).and_then(|r| r.as_ref().err()))
            .collect();
        if let Some(((reason, message), earlier)) = failed.split_last() {
            for (r, _) in earlier {
                self.recorder.event(&container_reference(pod, &c.name), WARNING, reason::FAILED, format!("Error: {r}"));
            }
            return Err(start_error(c, reason, message.clone()));
        }
        let image_user = self.ensure_image(pod, c, sandbox_config, inputs.pull_secrets).await?;
        let log_dir = PathBuf::from(&sandbox_config.log_directory).join(&c.name);
        let kind = container_type(pod, &c.name);
        let cref = container_reference(pod, &c.name);
        let started_error = |e: &kubelet_cri::CriError| {
            kubelet_metrics::kubelet::STARTED_CONTAINERS_ERRORS.inc(&[e.code(), kind]);
        };
        let (id, restart_count) = match self.unstarted_instance(pod, c, status).await {
            Unstarted::Resume(id, count) => (id, count),
            Unstarted::Replace(count) => {
                self.create_instance(pod, spec, status, (sandbox_id, sandbox_config), inputs, &image_user, Some(count))
                    .await?
            }
            Unstarted::Retry(message) => return Err(err("RunContainerError", message)),
            Unstarted::None => {
                self.create_instance(pod, spec, status, (sandbox_id, sandbox_config), inputs, &image_user, None).await?
            }
        };
        self.runtime.start_container(&id).await.map_err(|e| {
            started_error(&e);
            err("RunContainerError", e.message())
        })?;
        self.recorder.event(&cref, NORMAL, reason::STARTED, format!("Started container {}", c.name));
        info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), containerType = kind, containerName = %c.name, containerID = %id, restartCount = restart_count, "started container");
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let ip = pod_ips.first().map(String::as_str).unwrap_or("");
            if let Err(msg) = run_handler(self.runtime.as_ref(), pod, c, &id, h, ip).await {
                warn!(pod = %pod_ref(pod), containerName = %c.name, containerID = %id, message = %msg, "failed to execute PostStartHook");
                self.recorder.event(&cref, WARNING, reason::FAILED_POST_START_HOOK, msg.clone());
                let kill = KillRequest { message: Some("FailedPostStartHook"), ..Default::default() };
                if let Err(e) = self.kill_container(Some(pod), &id, &c.name, kill).await {
                    warn!(pod = %pod_ref(pod), containerName = %c.name, error = %e, "failed to kill container after its postStart hook failed");
                }
                self.link_log(pod, c, &id, &log_dir, restart_count);
                return Err(err("PostStartHookError", msg));
            }
        }
        self.link_log(pod, c, &id, &log_dir, restart_count);
        Ok(())
    }

    /// Creates a new instance of the container (`CreateContainer`); its restart count is `count`, or one more than
    /// the latest instance's.
    #[allow(clippy::too_many_arguments)]
    async fn create_instance(
        &self,
        pod: &Pod,
        spec: StartSpec<'_>,
        status: &PodStatus,
        (sandbox_id, sandbox_config): (&str, &api::PodSandboxConfig),
        inputs: &crate::pull::PodInputs<'_>,
        image_user: &config_gen::ImageUser,
        count: Option<i32>,
    ) -> Result<(String, i32), SyncError> {
        let c = spec.container;
        let err = |reason: &str, message: String| start_error(c, reason, message);
        let log_dir = PathBuf::from(&sandbox_config.log_directory).join(&c.name);
        let kind = container_type(pod, &c.name);
        // Without a previous instance, the count continues from the log files left behind
        // (`calcRestartCountByLogDir`), so an earlier instance's log is never appended to.
        let restart_count = match (count, status.find_container(&c.name)) {
            (Some(n), _) => n,
            (None, Some(s)) => s.restart_count + 1,
            (None, None) => restart_count_from_log_dir(&log_dir),
        };
        let target_id = spec.target_id(status).map_err(|m| err("CreateContainerConfigError", m))?;
        // The container's devices first (`GetResources`), as upstream's GenerateRunContainerOptions.
        let devices = self.devices.run_options(pod, c).await.map_err(|m| err("CreateContainerConfigError", m))?;
        crate::logs::ensure_dir(&log_dir)
            .map_err(|e| err("CreateContainerConfigError", format!("create {}: {e}", log_dir.display())))?;
        let env = crate::env::make_environment(crate::env::EnvInputs {
            pod,
            container: c,
            pod_ips: inputs.pod_ips,
            node: &self.node,
            objects: self.objects.as_ref(),
        })
        .await
        .map_err(|m| err("CreateContainerConfigError", m))?;
        for (source, keys) in &env.invalid {
            self.recorder.event(
        &container_reference(pod, &c.name),
        WARNING,
        "InvalidEnvironmentVariableNames",
        format!(
            "Keys [{}] from the EnvFrom {source} were skipped since they are considered invalid environment variable names.",
            keys.join(", ")
        ),
    );
        }
        let mounts = self.managed_mounts(pod, c, inputs, &env.vars).map_err(|e| match e.kind() {
            // The pod's own mistakes (a missing volume, a bad subPath) are reported as they are.
            std::io::ErrorKind::Other => err("CreateContainerConfigError", e.to_string()),
            _ => err("CreateContainerConfigError", format!("prepare kubelet-managed files: {e}")),
        })?;
        // Device variables come before the container's own, which override them.
        let vars: Vec<(String, String)> = devices.envs.iter().cloned().chain(env.vars.iter().cloned()).collect();
        let mut config = config_gen::container_config(
            &self.cfg,
            pod,
            c,
            restart_count,
            &vars,
            mounts,
            image_user,
            target_id.as_deref(),
        )
        .map_err(|m| err("CreateContainerConfigError", m))?;
        crate::devices::apply(&mut config, devices);
        let uid = kubelet_types::PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let blocks = crate::devices::block_volumes(c, &self.volumes.volumes(&uid))
            .map_err(|m| err("CreateContainerConfigError", m))?;
        config.devices.extend(blocks);
        if let Some(cpuset) = self.cpus.cpuset(uid.as_str(), &c.name) {
            let linux = config.linux.get_or_insert_with(Default::default);
            linux.resources.get_or_insert_with(Default::default).cpuset_cpus = cpuset;
        }
        if self.cfg.cpu_cfs_quota && self.cfg.quota_lift.container(uid.as_str(), &c.name) {
            let linux = config.linux.get_or_insert_with(Default::default);
            linux.resources.get_or_insert_with(Default::default).cpu_quota = -1;
        }
        if let Some(mems) = self.mems.container_created(pod, c) {
            let linux = config.linux.get_or_insert_with(Default::default);
            linux.resources.get_or_insert_with(Default::default).cpuset_mems = mems;
        }
        let userns = self.user_namespace(pod).map_err(|m| err("CreateContainerConfigError", m))?;
        config_gen::set_container_user_namespace(&mut config, userns);
        // The container is made with its resources: they are what the runtime was last told.
        let requirements = c.resources.clone().unwrap_or_default();
        self.actuated.set_container(uid.as_str(), &c.name, &requirements).map_err(|e| {
            let m = e.to_string();
            self.recorder.event(&container_reference(pod, &c.name), WARNING, reason::FAILED, format!("Error: {m}"));
            err("CreateContainerConfigError", m)
        })?;
        kubelet_metrics::kubelet::STARTED_CONTAINERS.inc(&[kind]);
        let created = self.runtime.create_container(sandbox_id, config, sandbox_config.clone()).await;
        image_volume_metrics(c, inputs.image_volumes, created.as_ref().err());
        let id = created.map_err(|e| {
            kubelet_metrics::kubelet::STARTED_CONTAINERS_ERRORS.inc(&[e.code(), kind]);
            err("CreateContainerError", e.message())
        })?;
        self.recorder.event(
            &container_reference(pod, &c.name),
            NORMAL,
            reason::CREATED,
            format!("Created container: {}", c.name),
        );
        Ok((id, restart_count))
    }

    /// An instance of `c` that a stopped rkubelet left unstarted, in the pod's newest sandbox and made from the same
    /// definition:
    /// - created but never started (rkubelet stopped between CreateContainer and StartContainer): it is started, so
    ///   the container runs once, with its own restart count;
    /// - exited without ever running because its start was lost (`StartError`: `context canceled` when rkubelet
    ///   was killed mid-call, `already exists` when containerd was): it is removed and made again with the same
    ///   restart count, since it never ran.
    ///
    /// Upstream creates another container in both cases, counts a restart and leaves the first one to the garbage
    /// collector. A created instance that does not fit (another definition, an older sandbox) never ran either: it
    /// is removed before its successor is made.
    async fn unstarted_instance(&self, pod: &Pod, c: &Container, status: &PodStatus) -> Unstarted {
        let Some(s) = status.find_container(&c.name) else { return Unstarted::None };
        let newest_sandbox = status.sandbox_statuses.first().map(|sb| sb.created_at).unwrap_or(i64::MAX);
        let fits = s.hash == crate::hash::hash_container(c) && s.created_at >= newest_sandbox;
        // A start lost between rkubelet and containerd: cancelled by a killed rkubelet, or left half-made by a killed
        // containerd (its task exists, so the start again fails with "already exists").
        let cancelled = s.state == ContainerState::Exited
            && s.started_at == 0
            && s.reason == "StartError"
            && (s.message.contains("context canceled") || s.message.contains("already exists"));
        match s.state {
            ContainerState::Created if fits => {
                info!(pod = %pod_ref(pod), containerName = %c.name, containerID = %s.id, "starting the container created before rkubelet stopped");
                return Unstarted::Resume(s.id.clone(), s.restart_count);
            }
            ContainerState::Created => {}
            ContainerState::Exited if cancelled && fits => {}
            _ => return Unstarted::None,
        }
        if let Err(e) = self.runtime.remove_container(&s.id).await {
            if !e.message().contains("cannot delete running task") {
                warn!(pod = %pod_ref(pod), containerName = %c.name, containerID = %s.id, error = %e, "failed to remove a container that never started; retrying");
                return Unstarted::Retry(format!("removing container {} that never started: {}", s.id, e.message()));
            }
            // containerd 1.6 keeps the task of a start cancelled mid-way, and no CRI call removes it ("cannot delete
            // running task"): its never-started process (`runc init`) is killed so it holds nothing, and a new
            // instance is made under the next attempt, as upstream would. The container stays in the runtime until
            // its task is deleted (`ctr -n k8s.io tasks delete -f <id>`) or containerd is replaced by a fixed one.
            let killed = kill_container_processes(&self.cfg, pod, &s.id);
            warn!(pod = %pod_ref(pod), containerName = %c.name, containerID = %s.id, error = %e, killed, "the runtime cannot remove a container whose start was cancelled; making a new one");
            return Unstarted::None;
        }
        info!(pod = %pod_ref(pod), containerName = %c.name, containerID = %s.id, "removed a container that never started");
        if cancelled { Unstarted::Replace(s.restart_count) } else { Unstarted::None }
    }

    /// The /var/log/containers link, as upstream: `<pod>_<ns>_<container>-<id>.log` -> the CRI log file.
    fn link_log(&self, pod: &Pod, c: &Container, id: &str, log_dir: &std::path::Path, restart_count: i32) {
        let link = config_gen::container_log_link(&self.cfg.container_logs_dir, pod, &c.name, id);
        let target = log_dir.join(format!("{restart_count}.log"));
        if crate::logs::ensure_dir(&self.cfg.container_logs_dir).is_ok() {
            let _ = std::fs::remove_file(&link);
            if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
                warn!(pod = %pod_ref(pod), containerName = %c.name, error = %e, "failed to create container log symlink");
            }
        }
    }
}

/// What [`RuntimeManager::unstarted_instance`] found.
enum Unstarted {
    /// Start this created container, with this restart count.
    Resume(String, i32),
    /// Make a new container with this restart count (the removed one never ran).
    Replace(i32),
    /// Make a new container as usual.
    None,
    /// Not now: the unstarted instance could not be removed yet.
    Retry(String),
}

/// Kills the processes left in a container's cgroup, in every hierarchy: `<pod cgroup>/<id>` with the cgroupfs
/// driver, `<pod slice>/cri-containerd-<id>.scope` with systemd's (the pod cgroup under `cgroupRoot`, as the
/// sandbox's cgroup parent gives it); returns how many were signalled.
fn kill_container_processes(cfg: &crate::RuntimeManagerConfig, pod: &Pod, container_id: &str) -> usize {
    let parent = config_gen::cgroup_parent(cfg, pod);
    if parent.is_empty() {
        return 0;
    }
    let leaf = if cfg.systemd_cgroup { format!("cri-containerd-{container_id}.scope") } else { container_id.into() };
    let rel = PathBuf::from(parent.trim_start_matches('/')).join(leaf);
    let roots = std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten().map(|h| h.path());
    roots.chain(std::iter::once(PathBuf::from("/sys/fs/cgroup"))).map(|root| kill_cgroup_tree(&root.join(&rel))).sum()
}

/// Sends SIGKILL to every process of a cgroup folder and of its child cgroups; returns how many were signalled.
pub fn kill_cgroup_tree(dir: &std::path::Path) -> usize {
    let mut killed = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            killed += kill_cgroup_tree(&e.path());
        }
    }
    for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
        let Ok(pid) = pid.trim().parse::<i32>() else { continue };
        let pid = nix::unistd::Pid::from_raw(pid);
        if pid.as_raw() > 1 && nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// The user an image runs as (`getImageUser`): its numeric UID, else its user name; root when the runtime does not
/// say.
/// A duration as Go prints it after `Truncate(time.Millisecond)`: `523ms`, `1.234s`, `1m2.5s`.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, rest) = (ms / 60_000, ms % 60_000);
    let secs = format!("{}.{:03}", rest / 1000, rest % 1000);
    let secs = secs.trim_end_matches('0').trim_end_matches('.');
    if m > 0 { format!("{m}m{secs}s") } else { format!("{secs}s") }
}

/// Go-style duration text (`10s`, `5m0s`).
pub fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

/// A random number for file names (each `RandomState` is seeded at random; a counter keeps values apart).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish() as u32
}

/// `container`, `init_container` or `ephemeral_container`, as the started-containers metrics label them.
fn container_type(pod: &Pod, name: &str) -> &'static str {
    let spec = pod.spec.as_ref();
    if spec.is_some_and(|s| s.init_containers.iter().flatten().any(|c| c.name == name)) {
        "init_container"
    } else if spec.is_some_and(|s| s.ephemeral_containers.iter().flatten().any(|c| c.name == name)) {
        "ephemeral_container"
    } else {
        "container"
    }
}

/// Counts a container's image volumes as upstream's `incrementImageVolumeMetrics` once `CreateContainer` answered:
/// the pod's image volumes requested, and each of the container's mounts of one mounted, or failed where the
/// runtime said the image volume could not be mounted (`ImageVolumeMountFailed`).
fn image_volume_metrics(
    c: &Container,
    image_volumes: &crate::images::ImageVolumes,
    error: Option<&kubelet_cri::CriError>,
) {
    use kubelet_metrics::kubelet::{IMAGE_VOLUME_MOUNTED_ERRORS, IMAGE_VOLUME_MOUNTED_SUCCEED, IMAGE_VOLUME_REQUESTED};
    let requested = image_volumes.values().filter(|r| r.is_ok()).count();
    if requested == 0 {
        return;
    }
    IMAGE_VOLUME_REQUESTED.add(&[], requested as f64);
    let mount_failed = error.is_some_and(|e| e.message().starts_with("ImageVolumeMountFailed"));
    let mounts = c.volume_mounts.iter().flatten().filter(|m| image_volumes.get(&m.name).is_some_and(|r| r.is_ok()));
    let counter = if mount_failed { &IMAGE_VOLUME_MOUNTED_ERRORS } else { &IMAGE_VOLUME_MOUNTED_SUCCEED };
    counter.add(&[], mounts.count() as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_micros(523_400)), "523ms");
        assert_eq!(go_duration(Duration::from_millis(1234)), "1.234s");
        assert_eq!(go_duration(Duration::from_millis(2000)), "2s");
        assert_eq!(go_duration(Duration::from_millis(62_500)), "1m2.5s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn pull_policy_defaults() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/busybox:1"), "IfNotPresent");
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }
}

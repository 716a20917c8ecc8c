//! Pod admission (`pkg/kubelet/lifecycle` PodAdmitHandler, `kubelet.go` canAdmitPod/rejectPod,
//! `pkg/kubelet/sysctl` allowlist): every new pod is checked by the admit handlers before a worker runs it; a
//! rejected pod is Failed with the handler's reason and `Pod was rejected: <message>`, and never started.
//!
//! Called by the sync loop for each pod it sees for the first time; handlers are pure checks.

use kubelet_types::Pod;

/// A handler's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitResult {
    /// Upstream's brief reason (`SysctlForbidden`).
    pub reason: String,
    /// What is wrong.
    pub message: String,
}

/// One admission check (`PodAdmitHandler`).
pub trait PodAdmitHandler: Send + Sync + 'static {
    /// None admits the pod; `others` are the pods already admitted (`PodAdmitAttributes.OtherPods`).
    fn admit(&self, pod: &Pod, others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult>;
}

/// The admission step that allocates a pod's resources (upstream's topology manager admit handler, which calls the
/// device manager's `Allocate` for each container): asynchronous, since it calls the plugins. Runs after the
/// checks above have admitted the pod; a refusal is `UnexpectedAdmissionError` as upstream's.
#[async_trait::async_trait]
pub trait ResourceAllocator: Send + Sync + 'static {
    /// None admits the pod; `others` are the pods already admitted.
    async fn allocate(&self, pod: &Pod, others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult>;
}

/// Several allocators in turn (the device manager, then the CPU manager); the first refusal stops the chain.
pub struct AllocatorChain(pub Vec<std::sync::Arc<dyn ResourceAllocator>>);

#[async_trait::async_trait]
impl ResourceAllocator for AllocatorChain {
    async fn allocate(&self, pod: &Pod, others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        for a in &self.0 {
            if let Some(r) = a.allocate(pod, others).await {
                return Some(r);
            }
        }
        None
    }
}

/// The sysctls every pod may set (`pkg/kubelet/sysctl/safe_sysctls.go`, kernels of 4.15 and later).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// The namespace a sysctl lives in (`utilsysctl.GetNamespace`): `ipc`, `net`, or none (node-wide).
pub fn sysctl_namespace(name: &str) -> Option<&'static str> {
    if name.starts_with("kernel.shm")
        || name.starts_with("kernel.msg")
        || name == "kernel.sem"
        || name.starts_with("fs.mqueue.")
    {
        Some("ipc")
    } else if name.starts_with("net.") {
        Some("net")
    } else {
        None
    }
}

/// The sysctl allowlist (`patternAllowlist`): the safe set plus `allowedUnsafeSysctls` (`prefix*` patterns
/// allowed), each only in its own namespace and not with the host's.
#[derive(Debug, Clone)]
pub struct SysctlAllowlist {
    names: Vec<String>,
    prefixes: Vec<String>,
}

impl SysctlAllowlist {
    /// The safe sysctls plus `allowed_unsafe`; an unsafe entry that is not namespaced is refused, naming it.
    pub fn new(allowed_unsafe: &[String]) -> Result<Self, String> {
        let mut names: Vec<String> = SAFE_SYSCTLS.iter().map(|s| s.to_string()).collect();
        let mut prefixes = vec![];
        for s in allowed_unsafe {
            let s = kubelet_runtime::config_gen::sysctl_dots(s);
            match s.strip_suffix('*') {
                Some(p) => {
                    if sysctl_namespace(p).is_none() {
                        return Err(format!("the sysctls {s} are not known to be namespaced"));
                    }
                    prefixes.push(p.to_string());
                }
                None => {
                    if sysctl_namespace(&s).is_none() {
                        return Err(format!("the sysctl {s} is not known to be namespaced"));
                    }
                    names.push(s);
                }
            }
        }
        Ok(Self { names, prefixes })
    }

    fn validate(&self, name: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let name = kubelet_runtime::config_gen::sysctl_dots(name);
        let allowed = self.names.contains(&name) || self.prefixes.iter().any(|p| name.starts_with(p.as_str()));
        if !allowed {
            return Err(format!("{name:?} not allowlisted"));
        }
        match sysctl_namespace(&name) {
            Some("ipc") if host_ipc => Err(format!("{name:?} not allowed with host ipc enabled")),
            Some("net") if host_net => Err(format!("{name:?} not allowed with host net enabled")),
            _ => Ok(()),
        }
    }
}

impl PodAdmitHandler for SysctlAllowlist {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        let spec = pod.spec.as_ref()?;
        let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
        let (net, ipc) = (spec.host_network.unwrap_or(false), spec.host_ipc.unwrap_or(false));
        sysctls
            .iter()
            .find_map(|s| self.validate(&s.name, net, ipc).err())
            .map(|e| AdmitResult { reason: "SysctlForbidden".into(), message: format!("forbidden sysctl: {e}") })
    }
}

/// Refuses pods with a volume type rkubelet cannot set up (network file systems, in-tree cloud disks, ...): such a
/// pod could never start here, so it is Failed with `UnsupportedVolume` and a message naming the volume and its
/// type, instead of waiting forever in ContainerCreating.
#[derive(Debug, Default, Clone, Copy)]
pub struct SupportedVolumes;

impl PodAdmitHandler for SupportedVolumes {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        let (name, kind) = kubelet_volume::unsupported_volume(pod)?;
        Some(AdmitResult {
            reason: "UnsupportedVolume".into(),
            message: format!(
                "volume {name:?} has type {kind}, which rkubelet does not support (supported: emptyDir, hostPath, \
                 configMap, secret, downwardAPI, projected, image, csi, persistentVolumeClaim and ephemeral of CSI \
                 and hostPath volumes)"
            ),
        })
    }
}

/// The AppArmor admit handler (`lifecycle/handlers.go` appArmorAdmitHandler, `pkg/security/apparmor/validate.go`):
/// a pending pod that needs an AppArmor profile enforced (a profile other than Unconfined in a field or the
/// deprecated annotation) is refused with reason `AppArmor` on a host whose kernel does not enforce AppArmor, and
/// a Localhost profile without a name is refused everywhere. Running the pod unconfined instead would drop the
/// setting silently.
#[derive(Debug, Clone, Copy)]
pub struct AppArmor {
    /// Whether the kernel enforces AppArmor ([`kubelet_runtime::security::host_app_armor_enabled`]).
    pub host_enabled: bool,
}

impl PodAdmitHandler for AppArmor {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        // A pod already running or terminated is not checked again.
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if phase != "Pending" {
            return None;
        }
        let e = kubelet_runtime::security::app_armor_refusal(pod, self.host_enabled)?;
        Some(AdmitResult { reason: "AppArmor".into(), message: format!("Cannot enforce AppArmor: {e}") })
    }
}

/// Refuses pods that name a RuntimeClass on a node without an apiserver (no `--kubeconfig`): no class can ever be
/// resolved there. Upstream's kubelet has no RuntimeClass manager then and runs the pod on the default handler, as
/// if the field were absent; rkubelet refuses it instead, once, with an event.
#[derive(Debug, Default, Clone, Copy)]
pub struct StandaloneRuntimeClass;

impl PodAdmitHandler for StandaloneRuntimeClass {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        let name = pod.spec.as_ref()?.runtime_class_name.as_deref().filter(|n| !n.is_empty())?;
        Some(AdmitResult {
            reason: kubelet_types::pod_fields::REASON.into(),
            message: format!(
                "can't set `spec.runtimeClassName`: this node runs without an apiserver (no --kubeconfig) and cannot \
                 resolve RuntimeClass {name:?}; remove the field, or join the node to a cluster"
            ),
        })
    }
}

/// The pod features admit handler (`lifecycle/handlers.go` podFeaturesAdmitHandler, `features_linux.go`
/// isPodLevelResourcesSupported): with the PodLevelResources gate off, a pod with pod-level resources is refused.
#[derive(Debug, Clone, Copy)]
pub struct PodFeatures {
    /// The PodLevelResources feature gate (on by default since 1.34).
    pub pod_level_resources: bool,
}

impl PodAdmitHandler for PodFeatures {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        if self.pod_level_resources || !kubelet_types::resources::is_pod_level_resources_set(pod) {
            return None;
        }
        Some(AdmitResult {
            reason: "PodLevelResourcesNotSupported".into(),
            message: "PodLevelResources feature gate is disabled".into(),
        })
    }
}

/// The operating system checks of upstream's predicate admit handler (`lifecycle/predicate.go`
/// rejectPodAdmissionBasedOnOSSelector and rejectPodAdmissionBasedOnOSField): a pod labelled `kubernetes.io/os`
/// with another OS than the node's, or whose `spec.os.name` is not the node's, is refused. rkubelet runs on Linux
/// only, so the node's OS is `linux`.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeOs;

/// The node's operating system, as Go's `runtime.GOOS` names it.
pub const NODE_OS: &str = "linux";

impl PodAdmitHandler for NodeOs {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        // Upstream compares the pod's own label (not its node selector) with the node's label, which the kubelet
        // always sets to its OS.
        let label = pod.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/os"));
        if label.is_some_and(|os| os != NODE_OS) {
            return Some(AdmitResult {
                reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
                message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label".into(),
            });
        }
        let os = pod.spec.as_ref().and_then(|s| s.os.as_ref()).map(|o| o.name.as_str());
        if os.is_some_and(|os| os != NODE_OS) {
            return Some(AdmitResult {
                reason: "PodOSNotSupported".into(),
                message: "Failed to admit pod as the OS field doesn't match node OS".into(),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodOS, PodSecurityContext, PodSpec, Sysctl};

    #[test]
    fn a_pending_pod_needing_apparmor_is_refused_without_it_and_a_running_one_is_not_checked_again() {
        use k8s_openapi::api::core::v1::{AppArmorProfile, PodStatus};
        let profile = AppArmorProfile { type_: "RuntimeDefault".into(), localhost_profile: None };
        let psc = PodSecurityContext { app_armor_profile: Some(profile), ..Default::default() };
        let mut p =
            Pod { spec: Some(PodSpec { security_context: Some(psc), ..Default::default() }), ..Default::default() };
        let r = AppArmor { host_enabled: false }.admit(&p, &[]).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("AppArmor", "Cannot enforce AppArmor: AppArmor is not enabled on the host")
        );
        assert_eq!(AppArmor { host_enabled: true }.admit(&p, &[]), None);
        p.status = Some(PodStatus { phase: Some("Running".into()), ..Default::default() });
        assert_eq!(AppArmor { host_enabled: false }.admit(&p, &[]), None);
    }

    #[test]
    fn a_standalone_node_refuses_a_runtime_class_it_cannot_resolve() {
        let mut p = Pod { spec: Some(PodSpec::default()), ..Default::default() };
        assert_eq!(StandaloneRuntimeClass.admit(&p, &[]), None);
        p.spec.as_mut().unwrap().runtime_class_name = Some("gvisor".into());
        let r = StandaloneRuntimeClass.admit(&p, &[]).unwrap();
        assert_eq!(r.reason, "UnsupportedPodField");
        assert!(r.message.starts_with("can't set `spec.runtimeClassName`: this node runs without an apiserver"));
    }

    #[test]
    fn pod_level_resources_are_refused_only_with_their_gate_off() {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let limits = [("cpu".to_string(), Quantity("1".into()))].into();
        let resources = Some(ResourceRequirements { limits: Some(limits), ..Default::default() });
        let p = Pod { spec: Some(PodSpec { resources, ..Default::default() }), ..Default::default() };
        assert_eq!(PodFeatures { pod_level_resources: true }.admit(&p, &[]), None);
        let r = PodFeatures { pod_level_resources: false }.admit(&p, &[]).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("PodLevelResourcesNotSupported", "PodLevelResources feature gate is disabled")
        );
        let plain = Pod { spec: Some(PodSpec::default()), ..Default::default() };
        assert_eq!(PodFeatures { pod_level_resources: false }.admit(&plain, &[]), None);
    }

    #[test]
    fn pods_for_another_os_are_refused_as_upstream() {
        let mut p = Pod::default();
        assert_eq!(NodeOs.admit(&p, &[]), None);
        p.spec = Some(PodSpec { os: Some(PodOS { name: "linux".into() }), ..Default::default() });
        assert_eq!(NodeOs.admit(&p, &[]), None);
        p.spec = Some(PodSpec { os: Some(PodOS { name: "windows".into() }), ..Default::default() });
        let r = NodeOs.admit(&p, &[]).unwrap();
        assert_eq!(r.reason, "PodOSNotSupported");
        assert_eq!(r.message, "Failed to admit pod as the OS field doesn't match node OS");
        p.spec = None;
        p.metadata.labels = Some([("kubernetes.io/os".to_string(), "windows".to_string())].into());
        assert_eq!(NodeOs.admit(&p, &[]).unwrap().reason, "PodOSSelectorNodeLabelDoesNotMatch");
    }

    #[test]
    fn pods_with_unsupported_volume_types_are_refused_naming_the_type() {
        use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, NFSVolumeSource, Volume};
        let with = |vols: Vec<Volume>| Pod {
            spec: Some(PodSpec { volumes: Some(vols), ..Default::default() }),
            ..Default::default()
        };
        let scratch =
            Volume { name: "scratch".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() };
        assert_eq!(SupportedVolumes.admit(&with(vec![scratch.clone()]), &[]), None);
        let nfs = Volume {
            name: "data".into(),
            nfs: Some(NFSVolumeSource { server: "s".into(), path: "/".into(), read_only: None }),
            ..Default::default()
        };
        let r = SupportedVolumes.admit(&with(vec![scratch, nfs]), &[]).unwrap();
        assert_eq!(r.reason, "UnsupportedVolume");
        assert!(r.message.starts_with("volume \"data\" has type nfs, which rkubelet does not support"));
    }

    fn pod(names: &[&str], host_net: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                host_network: Some(host_net),
                security_context: Some(PodSecurityContext {
                    sysctls: Some(names.iter().map(|n| Sysctl { name: n.to_string(), value: "1".into() }).collect()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn safe_and_allowed_sysctls_are_admitted_others_refused_as_upstream() {
        let a = SysctlAllowlist::new(&["net.core.somaxconn".into(), "kernel.msg*".into()]).unwrap();
        assert_eq!(
            a.admit(&pod(&["net.ipv4.tcp_syncookies", "net.core.somaxconn", "kernel.msgmax"], false), &[]),
            None
        );
        assert_eq!(a.admit(&pod(&["net/ipv4/ip_local_port_range"], false), &[]), None, "slash form");
        let r = a.admit(&pod(&["kernel.sched_latency_ns"], false), &[]).unwrap();
        assert_eq!(r.reason, "SysctlForbidden");
        assert_eq!(r.message, "forbidden sysctl: \"kernel.sched_latency_ns\" not allowlisted");
        let r = a.admit(&pod(&["net.ipv4.tcp_syncookies"], true), &[]).unwrap();
        assert_eq!(r.message, "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled");
        assert!(SysctlAllowlist::new(&["vm.swappiness".into()]).is_err(), "node-wide sysctls cannot be allowed");
    }
}

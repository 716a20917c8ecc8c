//! The runtime's handlers and their features (`kubecontainer.RuntimeStatus` Handlers/Features,
//! `pkg/kubelet/kuberuntime/helpers.go` toKubeRuntimeStatus), and what a pod's mounts make of them
//! (`pkg/kubelet/kubelet_pods.go` resolveRecursiveReadOnly, runtimeHandlerSupportsRecursiveReadOnlyMounts).
//!
//! The runtime state task (`kubelet::runtime_state`) owns the value: it publishes each ready `Status` on a watch
//! channel; the node status and the runtime manager read the latest through their receivers.

use k8s_openapi::api::core::v1::VolumeMount;
use kubelet_cri::api;

/// What the runtime's `Status` says of its handlers and features (`kubecontainer.RuntimeStatus`'s Handlers and
/// Features), kept by the runtime state while the runtime is ready.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeInfo {
    /// Each handler (`""`: the default one) with whether it supports recursive read-only mounts and user
    /// namespaces; empty for a runtime that does not tell (containerd 1.6).
    pub handlers: Vec<RuntimeHandlerInfo>,
    /// The runtime's `supplementalGroupsPolicy` support; None when it reports no features.
    pub supplemental_groups_policy: Option<bool>,
}

/// One runtime handler and its features.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeHandlerInfo {
    /// Its name (`""` for the default handler).
    pub name: String,
    /// Whether it can make recursive read-only mounts.
    pub recursive_read_only_mounts: bool,
    /// Whether it can run pods in their own user namespaces.
    pub user_namespaces: bool,
}

impl RuntimeInfo {
    /// From the CRI `StatusResponse` (`toKubeRuntimeStatus`): handler order kept, missing features false.
    pub fn from_cri(resp: &api::StatusResponse) -> RuntimeInfo {
        RuntimeInfo {
            handlers: resp
                .runtime_handlers
                .iter()
                .map(|h| RuntimeHandlerInfo {
                    name: h.name.clone(),
                    recursive_read_only_mounts: h.features.as_ref().is_some_and(|f| f.recursive_read_only_mounts),
                    user_namespaces: h.features.as_ref().is_some_and(|f| f.user_namespaces),
                })
                .collect(),
            supplemental_groups_policy: resp.features.as_ref().map(|f| f.supplemental_groups_policy),
        }
    }

    /// The handler named `name`, if the runtime reported it.
    pub fn handler(&self, name: &str) -> Option<&RuntimeHandlerInfo> {
        self.handlers.iter().find(|h| h.name == name)
    }
}

/// Whether the handler `name` makes recursive read-only mounts (`runtimeHandlerSupportsRecursiveReadOnlyMounts`):
/// false for a runtime that reports no handlers, and for a handler it does not know (logged, as upstream).
pub fn supports_recursive_read_only(info: &RuntimeInfo, name: &str) -> bool {
    if info.handlers.is_empty() {
        return false;
    }
    match info.handler(name) {
        Some(h) => h.recursive_read_only_mounts,
        None => {
            tracing::error!(runtimeHandlerName = name, "unknown runtime handler");
            false
        }
    }
}

/// Whether a volume mount is made recursively read-only (`resolveRecursiveReadOnly`), or why it cannot be.
pub fn resolve_recursive_read_only(m: &VolumeMount, runtime_supports: bool) -> Result<bool, String> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if !m.read_only.unwrap_or(false) {
        return Err(format!("volume {:?} requested recursive read-only mode, but it is not read-only", m.name));
    }
    if let Some(p) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {p:?}",
            m.name
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            m.name
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(mode: Option<&str>, read_only: bool, propagation: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            read_only: Some(read_only),
            recursive_read_only: mode.map(str::to_string),
            mount_propagation: propagation.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn recursive_read_only_is_resolved_as_upstream() {
        assert_eq!(resolve_recursive_read_only(&mount(None, true, None), true), Ok(false));
        assert_eq!(resolve_recursive_read_only(&mount(Some("Disabled"), false, None), true), Ok(false));
        assert_eq!(resolve_recursive_read_only(&mount(Some("IfPossible"), true, None), true), Ok(true));
        assert_eq!(resolve_recursive_read_only(&mount(Some("IfPossible"), true, None), false), Ok(false));
        assert_eq!(resolve_recursive_read_only(&mount(Some("Enabled"), true, Some("None")), true), Ok(true));
        assert_eq!(
            resolve_recursive_read_only(&mount(Some("Enabled"), true, None), false).unwrap_err(),
            "volume \"data\" requested recursive read-only mode, but it is not supported by the runtime"
        );
        assert_eq!(
            resolve_recursive_read_only(&mount(Some("IfPossible"), false, None), true).unwrap_err(),
            "volume \"data\" requested recursive read-only mode, but it is not read-only"
        );
        assert_eq!(
            resolve_recursive_read_only(&mount(Some("Enabled"), true, Some("HostToContainer")), true).unwrap_err(),
            "volume \"data\" requested recursive read-only mode, but it is not compatible with propagation \"HostToContainer\""
        );
        assert_eq!(
            resolve_recursive_read_only(&mount(Some("Always"), true, None), true).unwrap_err(),
            "unknown recursive read-only mode \"Always\""
        );
    }

    #[test]
    fn a_handler_supports_recursive_read_only_only_when_the_runtime_says_so() {
        let info = RuntimeInfo {
            handlers: vec![
                RuntimeHandlerInfo { name: "".into(), recursive_read_only_mounts: true, user_namespaces: true },
                RuntimeHandlerInfo { name: "kata".into(), ..Default::default() },
            ],
            supplemental_groups_policy: Some(true),
        };
        assert!(supports_recursive_read_only(&info, ""));
        assert!(!supports_recursive_read_only(&info, "kata"));
        assert!(!supports_recursive_read_only(&info, "unknown"), "a handler the runtime does not know");
        assert!(!supports_recursive_read_only(&RuntimeInfo::default(), ""), "a runtime without handlers (1.6)");
    }
}

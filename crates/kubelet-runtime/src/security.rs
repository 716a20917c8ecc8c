//! AppArmor, SELinux and the supplemental groups policy of a pod, as the CRI receives them
//! (`pkg/security/apparmor/helpers.go` GetProfile and isRequired, `pkg/security/apparmor/validate.go` and
//! `third_party/forked/libcontainer/apparmor` IsEnabled, `pkg/kubelet/kuberuntime/security_context.go`
//! getAppArmorProfile and convertToRuntimeSELinuxOption, go-selinux's GetEnabled for volume relabelling).
//!
//! Pure functions of the pod, called by the sandbox and container config builders on every sandbox and container
//! creation, and by the AppArmor admit handler once per pod. The host checks read `/sys` once per process.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod, SELinuxOptions};
use kubelet_cri::api;

/// The deprecated per-container AppArmor annotation (`container.apparmor.security.beta.kubernetes.io/<name>`).
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The deprecated annotation values.
const ANNOTATION_RUNTIME_DEFAULT: &str = "runtime/default";
const ANNOTATION_UNCONFINED: &str = "unconfined";
const ANNOTATION_LOCALHOST_PREFIX: &str = "localhost/";

fn profile(type_: &str, localhost: Option<String>) -> AppArmorProfile {
    AppArmorProfile { type_: type_.into(), localhost_profile: localhost }
}

/// The profile an annotation value names; None for an invalid value (`getProfileFromPodAnnotations`).
fn annotation_profile(value: &str) -> Option<AppArmorProfile> {
    match value {
        ANNOTATION_RUNTIME_DEFAULT => Some(profile("RuntimeDefault", None)),
        ANNOTATION_UNCONFINED => Some(profile("Unconfined", None)),
        v => v.strip_prefix(ANNOTATION_LOCALHOST_PREFIX).map(|name| profile("Localhost", Some(name.into()))),
    }
}

/// The AppArmor profile of a container (`GetProfile`): the container's field, else the pod's deprecated
/// annotation for it (static pods may not have had it synced to the field), else the pod's field.
pub fn app_armor_profile(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c.security_context.as_ref().and_then(|s| s.app_armor_profile.clone()) {
        return Some(p);
    }
    let annotation =
        pod.metadata.annotations.as_ref().and_then(|a| a.get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name)));
    if let Some(p) = annotation.and_then(|v| annotation_profile(v)) {
        return Some(p);
    }
    pod.spec.as_ref().and_then(|s| s.security_context.as_ref()).and_then(|s| s.app_armor_profile.clone())
}

/// Every container of the pod (`podutil.AllContainers`): init, app and ephemeral (as plain containers).
fn all_containers(pod: &Pod) -> Vec<Container> {
    let Some(s) = pod.spec.as_ref() else { return vec![] };
    let ephemeral = s.ephemeral_containers.iter().flatten().map(|e| Container {
        name: e.name.clone(),
        security_context: e.security_context.clone(),
        ..Default::default()
    });
    s.init_containers.iter().flatten().chain(s.containers.iter()).cloned().chain(ephemeral).collect()
}

/// Whether the pod needs AppArmor enforced (`isRequired`): a profile other than Unconfined in the pod's or a
/// container's field, or (upstream looks at the first such annotation it meets) an annotation other than
/// `unconfined`.
pub fn app_armor_required(pod: &Pod) -> bool {
    let confined = |p: &Option<AppArmorProfile>| p.as_ref().is_some_and(|p| p.type_ != "Unconfined");
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    if confined(&psc.and_then(|s| s.app_armor_profile.clone())) {
        return true;
    }
    if all_containers(pod)
        .iter()
        .any(|c| confined(&c.security_context.as_ref().and_then(|s| s.app_armor_profile.clone())))
    {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != ANNOTATION_UNCONFINED)
}

/// Why the node cannot run the pod's AppArmor profiles (`validator.Validate`), given whether the host enforces
/// AppArmor: None when it can. Upstream's admit handler prefixes the text with "Cannot enforce AppArmor: ".
pub fn app_armor_refusal(pod: &Pod, host_enabled: bool) -> Option<String> {
    if !app_armor_required(pod) {
        return None;
    }
    if !host_enabled {
        return Some("AppArmor is not enabled on the host".into());
    }
    all_containers(pod).iter().find_map(|c| match app_armor_profile(pod, c) {
        Some(p) if p.type_ == "Localhost" && p.localhost_profile.as_deref().unwrap_or("").trim().is_empty() => {
            Some(format!("invalid empty AppArmor profile name: {:?}", p.localhost_profile.unwrap_or_default()))
        }
        _ => None,
    })
}

/// Whether the kernel enforces AppArmor (libcontainer's `IsEnabled`): `/sys/kernel/security/apparmor` exists and
/// the module's `enabled` parameter starts with `Y`. Read once per process, as upstream (a kubelet restart is
/// needed to notice a change).
pub fn host_app_armor_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::path::Path::new("/sys/kernel/security/apparmor").exists()
            && std::fs::read("/sys/module/apparmor/parameters/enabled").is_ok_and(|b| b.len() > 1 && b[0] == b'Y')
    })
}

/// The CRI AppArmor profile of a container and the deprecated string form older runtimes read
/// (`getAppArmorProfile`); (None, "") without a profile, so the runtime applies its default.
pub fn cri_app_armor(pod: &Pod, c: &Container) -> Result<(Option<api::SecurityProfile>, String), String> {
    use api::security_profile::ProfileType;
    let Some(p) = app_armor_profile(pod, c) else { return Ok((None, String::new())) };
    let of = |t: ProfileType, r: String| Some(api::SecurityProfile { profile_type: t as i32, localhost_ref: r });
    Ok(match p.type_.as_str() {
        "RuntimeDefault" => (of(ProfileType::RuntimeDefault, String::new()), ANNOTATION_RUNTIME_DEFAULT.into()),
        "Unconfined" => (of(ProfileType::Unconfined, String::new()), ANNOTATION_UNCONFINED.into()),
        "Localhost" => {
            let Some(name) = p.localhost_profile else {
                return Err("missing localhost apparmor profile name".into());
            };
            (of(ProfileType::Localhost, name.clone()), format!("{ANNOTATION_LOCALHOST_PREFIX}{name}"))
        }
        other => return Err(format!("unknown apparmor profile type: {other:?}")),
    })
}

/// `convertToRuntimeSELinuxOption`.
pub fn cri_selinux(opts: Option<&SELinuxOptions>) -> Option<api::SeLinuxOption> {
    opts.map(|o| api::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    })
}

/// The pod's `supplementalGroupsPolicy` as the CRI enum (`Merge` when unset; API validation refused any other
/// value before the pod got here).
pub fn cri_supplemental_groups_policy(pod: &Pod) -> i32 {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    match policy {
        Some("Strict") => api::SupplementalGroupsPolicy::Strict as i32,
        _ => api::SupplementalGroupsPolicy::Merge as i32,
    }
}

/// Whether SELinux is enabled on the host (go-selinux `GetEnabled`): a selinuxfs is mounted read-write and the
/// process's label is not `kernel` (an unreadable label counts as enabled, as go-selinux's). Mounts ask the runtime
/// to relabel only then. Read once per process.
pub fn host_selinux_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        selinux_enabled(&mountinfo, std::fs::read_to_string("/proc/self/attr/current").ok().as_deref())
    })
}

/// [`host_selinux_enabled`] from the mount table and the process's label.
fn selinux_enabled(mountinfo: &str, label: Option<&str>) -> bool {
    let selinuxfs_rw = mountinfo.lines().any(|l| {
        let Some((mount, rest)) = l.split_once(" - ") else { return false };
        let options = mount.split(' ').nth(5).unwrap_or("");
        rest.split(' ').next() == Some("selinuxfs") && options.split(',').any(|o| o == "rw")
    });
    selinuxfs_rw && label.is_none_or(|l| l.trim_end_matches(['\0', '\n']) != "kernel")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SecurityContext};
    use std::collections::BTreeMap;

    fn pod(pod_profile: Option<AppArmorProfile>, containers: Vec<Container>, annotations: &[(&str, &str)]) -> Pod {
        let annotations: BTreeMap<String, String> =
            annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                security_context: Some(PodSecurityContext { app_armor_profile: pod_profile, ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(name: &str, p: Option<AppArmorProfile>) -> Container {
        let security_context = Some(SecurityContext { app_armor_profile: p, ..Default::default() });
        Container { name: name.into(), security_context, ..Default::default() }
    }

    fn types(r: (Option<api::SecurityProfile>, String)) -> (Option<(i32, String)>, String) {
        (r.0.map(|p| (p.profile_type, p.localhost_ref)), r.1)
    }

    #[test]
    fn the_container_field_wins_then_the_annotation_then_the_pod_field() {
        use api::security_profile::ProfileType;
        let p = pod(
            Some(profile("Localhost", Some("pod-prof".into()))),
            vec![
                container("own", Some(profile("RuntimeDefault", None))),
                container("annotated", None),
                container("plain", None),
            ],
            &[(&format!("{APPARMOR_ANNOTATION_PREFIX}annotated"), "localhost/from-annotation")],
        );
        let s = &p.spec.as_ref().unwrap().containers;
        assert_eq!(
            types(cri_app_armor(&p, &s[0]).unwrap()),
            (Some((ProfileType::RuntimeDefault as i32, String::new())), "runtime/default".into())
        );
        assert_eq!(
            types(cri_app_armor(&p, &s[1]).unwrap()),
            (Some((ProfileType::Localhost as i32, "from-annotation".into())), "localhost/from-annotation".into())
        );
        assert_eq!(
            types(cri_app_armor(&p, &s[2]).unwrap()),
            (Some((ProfileType::Localhost as i32, "pod-prof".into())), "localhost/pod-prof".into())
        );
        let unconfined = pod(None, vec![container("c", Some(profile("Unconfined", None)))], &[]);
        assert_eq!(
            types(cri_app_armor(&unconfined, &unconfined.spec.as_ref().unwrap().containers[0]).unwrap()),
            (Some((ProfileType::Unconfined as i32, String::new())), "unconfined".into())
        );
        let none = pod(None, vec![container("c", None)], &[]);
        assert_eq!(types(cri_app_armor(&none, &none.spec.as_ref().unwrap().containers[0]).unwrap()), (None, "".into()));
        let missing = pod(None, vec![container("c", Some(profile("Localhost", None)))], &[]);
        assert_eq!(
            cri_app_armor(&missing, &missing.spec.as_ref().unwrap().containers[0]).unwrap_err(),
            "missing localhost apparmor profile name"
        );
    }

    #[test]
    fn a_pod_needing_apparmor_is_refused_on_a_host_without_it_and_unconfined_ones_are_not() {
        let plain = pod(None, vec![container("c", None)], &[]);
        assert_eq!(app_armor_refusal(&plain, false), None);
        let unconfined = pod(Some(profile("Unconfined", None)), vec![container("c", None)], &[]);
        assert_eq!(app_armor_refusal(&unconfined, false), None);
        let annotated_unconfined = pod(
            None,
            vec![container("c", None)],
            &[("container.apparmor.security.beta.kubernetes.io/c", "unconfined")],
        );
        assert_eq!(app_armor_refusal(&annotated_unconfined, false), None);
        for p in [
            pod(Some(profile("RuntimeDefault", None)), vec![container("c", None)], &[]),
            pod(None, vec![container("c", Some(profile("Localhost", Some("x".into()))))], &[]),
            pod(
                None,
                vec![container("c", None)],
                &[("container.apparmor.security.beta.kubernetes.io/c", "runtime/default")],
            ),
        ] {
            assert_eq!(app_armor_refusal(&p, false).as_deref(), Some("AppArmor is not enabled on the host"));
            assert_eq!(app_armor_refusal(&p, true), None);
        }
        let empty = pod(None, vec![container("c", Some(profile("Localhost", Some(" ".into()))))], &[]);
        assert_eq!(app_armor_refusal(&empty, true).as_deref(), Some("invalid empty AppArmor profile name: \" \""));
    }

    #[test]
    fn selinux_counts_as_enabled_only_with_a_writable_selinuxfs_and_a_label_other_than_kernel() {
        let rw = "31 22 0:28 / /sys/fs/selinux rw,relatime shared:9 - selinuxfs selinuxfs rw\n";
        let ro = "31 22 0:28 / /sys/fs/selinux ro,relatime shared:9 - selinuxfs selinuxfs rw\n";
        let none = "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n";
        assert!(selinux_enabled(rw, Some("system_u:system_r:kubelet_t:s0\0")));
        assert!(selinux_enabled(rw, None), "an unreadable label counts as enabled");
        assert!(!selinux_enabled(rw, Some("kernel\0")));
        assert!(!selinux_enabled(ro, Some("system_u:system_r:kubelet_t:s0")), "read-only selinuxfs: disabled");
        assert!(!selinux_enabled(none, Some("system_u:system_r:kubelet_t:s0")));
    }

    #[test]
    fn selinux_options_and_the_groups_policy_map_field_by_field() {
        let o = SELinuxOptions {
            user: Some("system_u".into()),
            role: Some("system_r".into()),
            type_: Some("svirt_lxc_net_t".into()),
            level: Some("s0:c1,c2".into()),
        };
        assert_eq!(
            cri_selinux(Some(&o)),
            Some(api::SeLinuxOption {
                user: "system_u".into(),
                role: "system_r".into(),
                r#type: "svirt_lxc_net_t".into(),
                level: "s0:c1,c2".into()
            })
        );
        assert_eq!(cri_selinux(None), None);
        let mut p = pod(None, vec![], &[]);
        assert_eq!(cri_supplemental_groups_policy(&p), api::SupplementalGroupsPolicy::Merge as i32);
        p.spec.as_mut().unwrap().security_context.as_mut().unwrap().supplemental_groups_policy = Some("Strict".into());
        assert_eq!(cri_supplemental_groups_policy(&p), api::SupplementalGroupsPolicy::Strict as i32);
    }
}

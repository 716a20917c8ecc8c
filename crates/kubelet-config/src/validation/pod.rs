//! The pod as a whole (`pkg/apis/core/validation/validation.go`: ValidatePodCreate, validatePodMetadataAndSpec,
//! ValidatePodSpecificAnnotations, ValidatePodSpec, validatePodSpecSecurityContext, validateSysctls,
//! validatePodDNSConfig, validatePodHostNetworkDeps, ValidateTolerations, ValidateHostAliases, validateOS,
//! validateLinux, validateHostUsers, validatePodHostName, validateFileKeyRefVolumes;
//! `staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`: ValidateObjectMetaAccessor).

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use super::container::{
    PodContext, validate_app_armor_profile, validate_containers, validate_init_containers, validate_seccomp_profile,
};
use super::field::{
    BadValue, ErrorList, Path, duplicate, forbidden, invalid, not_found, not_supported, required, too_long,
};
use super::names::{
    inclusive_range_error, invalid_each, is_label_value, is_valid_id, name_is_dns_subdomain, validate_annotations,
    validate_dns1123_label, validate_dns1123_subdomain, validate_ip_legacy, validate_labels, validate_qualified_name,
};
use super::resources::validate_overhead;
use super::volumes::{validate_local_descending_path, validate_volumes};

/// `ValidateObjectMeta` for a namespaced object named as a DNS subdomain (`ValidatePodName`).
fn validate_meta(pod: &Pod, errs: &mut ErrorList) {
    let m = &pod.metadata;
    let path = Path::new("metadata");
    if let Some(g) = m.generate_name.as_deref().filter(|g| !g.is_empty()) {
        errs.extend(invalid_each(&path.child("generateName"), g, name_is_dns_subdomain(g, true)));
    }
    match m.name.as_deref().unwrap_or("") {
        "" => errs.push(required(&path.child("name"), "name or generateName is required")),
        name => errs.extend(invalid_each(&path.child("name"), name, name_is_dns_subdomain(name, false))),
    }
    match m.namespace.as_deref().unwrap_or("") {
        "" => errs.push(required(&path.child("namespace"), "")),
        ns => errs.extend(invalid_each(&path.child("namespace"), ns, super::names::is_dns1123_label(ns))),
    }
    if let Some(g) = m.generation.filter(|g| *g < 0) {
        errs.push(invalid(&path.child("generation"), g, "must be greater than or equal to 0"));
    }
    errs.extend(validate_labels(m.labels.as_ref(), &path.child("labels")));
    errs.extend(validate_annotations(m.annotations.as_ref(), &path.child("annotations")));
    for f in m.finalizers.iter().flatten() {
        errs.extend(validate_qualified_name(f, &path.child("finalizers")));
    }
}

/// `ValidatePodSpecificAnnotations`: the deletion cost is a 32-bit integer; seccomp annotations name a profile.
fn validate_pod_annotations(pod: &Pod, errs: &mut ErrorList) {
    let path = Path::new("metadata").child("annotations");
    let Some(ann) = pod.metadata.annotations.as_ref() else { return };
    if let Some(v) = ann.get("kubernetes.io/config.mirror")
        && pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("").is_empty()
    {
        errs.push(invalid(
            &path.key("kubernetes.io/config.mirror"),
            v,
            "must set spec.nodeName if mirror pod annotation is set",
        ));
    }
    if let Some(v) = ann.get("controller.kubernetes.io/pod-deletion-cost")
        && v.parse::<i32>().is_err()
    {
        errs.push(invalid(&path.key("controller.kubernetes.io/pod-deletion-cost"), v, "must be a 32bit integer"));
    }
    for (k, v) in ann {
        let seccomp = k == "seccomp.security.alpha.kubernetes.io/pod"
            || k.starts_with("container.seccomp.security.alpha.kubernetes.io/");
        if !seccomp {
            continue;
        }
        let p = path.child(k);
        match v.as_str() {
            "runtime/default" | "docker/default" | "unconfined" => {}
            v if v.starts_with("localhost/") => {
                errs.extend(validate_local_descending_path(&v["localhost/".len()..], &p))
            }
            v => errs.push(invalid(&p, v, "must be a valid seccomp profile")),
        }
    }
}

/// `ValidatePodCreate` with `PodValidationOptions{}`, as upstream's kubelet validates static pods
/// (`pkg/kubelet/config/common.go`). The pod must carry the API's defaults (see [`super::defaults`]).
pub fn validate_pod_create(pod: &Pod) -> ErrorList {
    let mut errs = ErrorList::default();
    validate_meta(pod, &mut errs);
    validate_pod_annotations(pod, &mut errs);
    let spec_path = Path::new("spec");
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    validate_spec(spec, &spec_path, &mut errs);
    // Pod-only checks (`validatePodMetadataAndSpec`).
    if spec.service_account_name.as_deref().unwrap_or("").is_empty() {
        for (vi, v) in spec.volumes.iter().flatten().enumerate() {
            for (si, s) in v.projected.iter().flat_map(|p| p.sources.iter().flatten()).enumerate() {
                if s.service_account_token.is_some() {
                    let p = spec_path.child("volumes").index(vi).child("projected").child("sources").index(si);
                    errs.push(forbidden(
                        &p.child("serviceAccountToken"),
                        "must not be specified when serviceAccountName is not set",
                    ));
                }
            }
        }
    }
    for (field, list) in
        [("containers", &spec.containers[..]), ("initContainers", spec.init_containers.as_deref().unwrap_or(&[]))]
    {
        for (i, c) in list.iter().enumerate() {
            let image = c.image.as_deref().unwrap_or("");
            if image.len() != image.trim().len() {
                errs.push(invalid(
                    &spec_path.child(field).index(i).child("image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|e| !e.is_empty()) {
        errs.push(forbidden(&spec_path.child("ephemeralContainers"), "cannot be set on create"));
    }
    if !spec.node_name.as_deref().unwrap_or("").is_empty()
        && spec.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty())
    {
        errs.push(forbidden(&spec_path.child("nodeName"), "cannot be set until all schedulingGates have been cleared"));
    }
    errs
}

/// `ValidatePodSpec`.
fn validate_spec(spec: &PodSpec, path: &Path, errs: &mut ErrorList) {
    if spec.termination_grace_period_seconds.is_none() {
        errs.push(required(&path.child("terminationGracePeriodSeconds"), ""));
    }
    let host_users = spec.host_users.unwrap_or(true);
    let volumes = spec.volumes.as_deref().unwrap_or(&[]);
    let (valid_volumes, vol_errs) = validate_volumes(volumes, &path.child("volumes"));
    errs.extend(vol_errs);
    if !spec.resource_claims.as_ref().is_none_or(|c| c.is_empty()) {
        // Static pods do not support resource claims (`validatePodResourceClaim`, the mirror pod case).
        errs.push(forbidden(&path.child("resourceClaims"), "static pods do not support resource claims"));
    }
    let restart = spec.restart_policy.as_deref().unwrap_or("");
    let ctx = PodContext {
        volumes: &valid_volumes,
        grace_period: spec.termination_grace_period_seconds,
        restart_policy: restart,
        os: spec.os.as_ref().map(|o| o.name.as_str()),
        host_users,
    };
    errs.extend(validate_containers(&spec.containers, &ctx, &path.child("containers")));
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    errs.extend(validate_init_containers(init, &spec.containers, &ctx, &path.child("initContainers")));
    // `validatePodHostNetworkDeps`: with the host's network a port is the same on the host.
    if spec.host_network.unwrap_or(false) {
        for (i, c) in spec.containers.iter().enumerate() {
            for (j, port) in c.ports.iter().flatten().enumerate() {
                let hp = port.host_port.unwrap_or(0);
                if hp != port.container_port {
                    let p = path.child("containers").index(i).child("ports").index(j).child("hostPort");
                    errs.push(invalid(&p, hp, "must match `containerPort` when `hostNetwork` is true"));
                }
            }
        }
    }
    match restart {
        "Always" | "OnFailure" | "Never" => {}
        "" => errs.push(required(&path.child("restartPolicy"), "")),
        r => errs.push(not_supported(&path.child("restartPolicy"), r, &["Always", "OnFailure", "Never"])),
    }
    let dns_policy = spec.dns_policy.as_deref().unwrap_or("");
    match dns_policy {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => errs.push(required(&path.child("dnsPolicy"), "")),
        d => errs.push(not_supported(
            &path.child("dnsPolicy"),
            d,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    errs.extend(validate_labels(spec.node_selector.as_ref(), &path.child("nodeSelector")));
    validate_pod_security_context(spec, path, errs);
    validate_dns_config(spec, dns_policy, &path.child("dnsConfig"), errs);
    for (i, g) in spec.readiness_gates.iter().flatten().enumerate() {
        errs.extend(validate_qualified_name(
            &g.condition_type,
            &path.child("readinessGates").index(i).child("conditionType"),
        ));
    }
    let mut gates = std::collections::BTreeSet::new();
    for (i, g) in spec.scheduling_gates.iter().flatten().enumerate() {
        let p = path.child("schedulingGates").index(i);
        errs.extend(validate_qualified_name(&g.name, &p));
        if !gates.insert(g.name.as_str()) {
            errs.push(duplicate(&p, g.name.as_str()));
        }
    }
    if spec.host_users == Some(false) {
        for (set, field) in [(spec.host_network, "hostNetwork"), (spec.host_pid, "HostPID"), (spec.host_ipc, "HostIPC")]
        {
            if set.unwrap_or(false) {
                errs.push(forbidden(&path.child(field), "when `hostUsers` is false"));
            }
        }
        for (field, list) in [("containers", &spec.containers[..]), ("initContainers", init)] {
            for (i, c) in list.iter().enumerate() {
                if c.volume_devices.as_ref().is_some_and(|d| !d.is_empty()) {
                    errs.push(forbidden(
                        &path.child(field).index(i).child("volumeDevices"),
                        "when `hostUsers` is false",
                    ));
                }
            }
        }
    }
    if let Some(h) = spec.hostname_override.as_deref() {
        let p = path.child("hostnameOverride");
        if spec.set_hostname_as_fqdn == Some(true) {
            errs.push(forbidden(&p, "may not be specified when setHostnameAsFQDN is true"));
        }
        if spec.host_network == Some(true) {
            errs.push(forbidden(&p, "may not be specified when hostNetwork is true"));
        }
        if h.len() > 64 {
            errs.push(too_long(&p, 64));
        }
        errs.extend(validate_dns1123_subdomain(h, &p));
    }
    for (value, field) in
        [(spec.service_account_name.as_deref(), "serviceAccountName"), (spec.node_name.as_deref(), "nodeName")]
    {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            errs.extend(invalid_each(&path.child(field), v, name_is_dns_subdomain(v, false)));
        }
    }
    if let Some(d) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(invalid(&path.child("activeDeadlineSeconds"), d, inclusive_range_error(1, i32::MAX.into())));
    }
    for (value, field) in [(spec.hostname.as_deref(), "hostname"), (spec.subdomain.as_deref(), "subdomain")] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            errs.extend(validate_dns1123_label(v, &path.child(field)));
        }
    }
    validate_tolerations(spec, &path.child("tolerations"), errs);
    for (i, a) in spec.host_aliases.iter().flatten().enumerate() {
        let p = path.child("hostAliases").index(i);
        errs.extend(validate_ip_legacy(&p.child("ip"), &a.ip));
        for (j, h) in a.hostnames.iter().flatten().enumerate() {
            errs.extend(validate_dns1123_subdomain(h, &p.child("hostnames").index(j)));
        }
    }
    for (value, field) in [
        (spec.priority_class_name.as_deref(), "priorityClassName"),
        (spec.runtime_class_name.as_deref(), "runtimeClassName"),
    ] {
        if let Some(v) = value.filter(|v| field == "runtimeClassName" || !v.is_empty()) {
            errs.extend(invalid_each(&path.child(field), v, name_is_dns_subdomain(v, false)));
        }
    }
    match spec.preemption_policy.as_deref() {
        None | Some("PreemptLowerPriority" | "Never") => {}
        Some("") => errs.push(required(&path.child("preemptionPolicy"), "")),
        Some(p) => errs.push(not_supported(&path.child("preemptionPolicy"), p, &["PreemptLowerPriority", "Never"])),
    }
    if let Some(o) = &spec.overhead {
        errs.extend(validate_overhead(o, &path.child("overhead")));
    }
    validate_os(spec, path, errs);
    validate_file_key_ref_volumes(spec, path, errs);
}

fn validate_pod_security_context(spec: &PodSpec, spec_path: &Path, errs: &mut ErrorList) {
    let Some(sc) = spec.security_context.as_ref() else { return };
    let path = spec_path.child("securityContext");
    for (v, field) in [(sc.fs_group, "fsGroup"), (sc.run_as_user, "runAsUser"), (sc.run_as_group, "runAsGroup")] {
        if let Some(v) = v {
            errs.extend(is_valid_id(v).into_iter().map(|m| invalid(&path.child(field), v, m)));
        }
    }
    for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
        errs.extend(is_valid_id(*g).into_iter().map(|m| invalid(&path.child("supplementalGroups").index(i), *g, m)));
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        errs.push(invalid(
            &path.child("shareProcessNamespace"),
            true,
            "ShareProcessNamespace and HostPID cannot both be enabled",
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, s) in sc.sysctls.iter().flatten().enumerate() {
        let p = path.child("sysctls").index(i).child("name");
        if s.name.is_empty() {
            errs.push(required(&p, ""));
        } else if !is_valid_sysctl_name(&s.name) {
            errs.push(invalid(
                &p,
                s.name.as_str(),
                format!("must have at most 253 characters and match regex {SYSCTL_FMT}"),
            ));
        } else if names.contains(s.name.as_str()) {
            errs.push(duplicate(&p, s.name.as_str()));
        }
        let net = s.name.starts_with("net.");
        let ipc = s.name.starts_with("kernel.shm")
            || s.name.starts_with("kernel.msg")
            || s.name.starts_with("kernel.sem")
            || s.name.starts_with("fs.mqueue.");
        if spec.host_network == Some(true) && net {
            errs.push(invalid(&p, s.name.as_str(), "may not be specified when 'hostNetwork' is true"));
        } else if spec.host_ipc == Some(true) && ipc {
            errs.push(invalid(&p, s.name.as_str(), "may not be specified when 'hostIPC' is true"));
        }
        names.insert(s.name.as_str());
    }
    if let Some(p) = sc.fs_group_change_policy.as_deref()
        && !matches!(p, "Always" | "OnRootMismatch")
    {
        errs.push(not_supported(&path.child("fsGroupChangePolicy"), p, &["Always", "OnRootMismatch"]));
    }
    errs.extend(validate_seccomp_profile(sc.seccomp_profile.as_ref(), &path.child("seccompProfile")));
    errs.extend(validate_app_armor_profile(sc.app_armor_profile.as_ref(), &path.child("appArmorProfile")));
    if let Some(p) = sc.supplemental_groups_policy.as_deref()
        && !matches!(p, "Merge" | "Strict")
    {
        errs.push(not_supported(&path.child("supplementalGroupsPolicy"), p, &["Merge", "Strict"]));
    }
    if let Some(p) = sc.se_linux_change_policy.as_deref()
        && !matches!(p, "MountOption" | "Recursive")
    {
        errs.push(not_supported(&path.child("seLinuxChangePolicy"), p, &["MountOption", "Recursive"]));
    }
}

const SYSCTL_FMT: &str = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?";

/// `IsValidSysctlName`: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` joined by `.` or `/`.
fn is_valid_sysctl_name(name: &str) -> bool {
    let seg_ok = |s: &str| {
        let b = s.as_bytes();
        let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|c| edge(*c) || matches!(c, b'-' | b'_'))
    };
    name.len() <= 253 && name.split(['.', '/']).all(seg_ok)
}

/// `validatePodDNSConfig`.
fn validate_dns_config(spec: &PodSpec, policy: &str, path: &Path, errs: &mut ErrorList) {
    let cfg = spec.dns_config.as_ref();
    if policy == "None" {
        let Some(cfg) = cfg else {
            errs.push(required(path, "must provide `dnsConfig` when `dnsPolicy` is None"));
            return;
        };
        if cfg.nameservers.as_ref().is_none_or(|n| n.is_empty()) {
            errs.push(required(
                &path.child("nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
            return;
        }
    }
    let Some(cfg) = cfg else { return };
    let ns = cfg.nameservers.as_deref().unwrap_or(&[]);
    if ns.len() > 3 {
        errs.push(invalid(&path.child("nameservers"), BadValue::json(ns), "must not have more than 3 nameservers"));
    }
    for (i, n) in ns.iter().enumerate() {
        errs.extend(validate_ip_legacy(&path.child("nameservers").index(i), n));
    }
    let searches = cfg.searches.as_deref().unwrap_or(&[]);
    if searches.len() > 32 {
        errs.push(invalid(
            &path.child("searches"),
            BadValue::json(searches),
            "must not have more than 32 search paths",
        ));
    }
    if searches.join(" ").len() > 2048 {
        errs.push(invalid(
            &path.child("searches"),
            BadValue::json(searches),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, s) in searches.iter().enumerate() {
        errs.extend(validate_dns1123_subdomain(s.strip_suffix('.').unwrap_or(s), &path.child("searches").index(i)));
    }
    for (i, o) in cfg.options.iter().flatten().enumerate() {
        if o.name.as_deref().unwrap_or("").is_empty() {
            errs.push(required(&path.child("options").index(i), "must not be empty"));
        }
    }
}

/// `ValidateTolerations`.
fn validate_tolerations(spec: &PodSpec, path: &Path, errs: &mut ErrorList) {
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let p = path.index(i);
        let key = t.key.as_deref().unwrap_or("");
        let op = t.operator.as_deref().unwrap_or("");
        let effect = t.effect.as_deref().unwrap_or("");
        let value = t.value.as_deref().unwrap_or("");
        if !key.is_empty() {
            errs.extend(validate_qualified_name(key, &p.child("key")));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(invalid(
                &p.child("operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(invalid(
                &p.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let msgs = is_label_value(value);
                if !msgs.is_empty() {
                    errs.push(invalid(&p.child("operator"), value, msgs.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(invalid(&p.child("operator"), value, "value must be empty when `operator` is 'Exists'"));
                }
            }
            op => errs.push(not_supported(&p.child("operator"), op, &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            errs.push(not_supported(&p.child("effect"), effect, &["NoSchedule", "PreferNoSchedule", "NoExecute"]));
        }
    }
}

/// `validateOS`, then `validateLinux` or the part of `validateWindows` a manifest can hit.
fn validate_os(spec: &PodSpec, path: &Path, errs: &mut ErrorList) {
    let Some(os) = &spec.os else { return };
    let p = path.child("os");
    match os.name.as_str() {
        "" => errs.push(required(&p.child("name"), "")),
        "linux" => {
            let sc_path = path.child("securityContext").child("windowsOptions");
            if spec.security_context.as_ref().is_some_and(|s| s.windows_options.is_some()) {
                errs.push(forbidden(&sc_path, "windows options cannot be set for a linux pod"));
            }
            for (field, list) in [
                ("containers", &spec.containers[..]),
                ("initContainers", spec.init_containers.as_deref().unwrap_or(&[])),
            ] {
                for (i, c) in list.iter().enumerate() {
                    if c.security_context.as_ref().is_some_and(|s| s.windows_options.is_some()) {
                        let cp = path.child(field).index(i).child("securityContext").child("windowsOptions");
                        errs.push(forbidden(&cp, "windows options cannot be set for a linux pod"));
                    }
                }
            }
        }
        "windows" => {
            if let Some(sc) = &spec.security_context {
                let sp = path.child("securityContext");
                for (set, field) in [
                    (sc.app_armor_profile.is_some(), "appArmorProfile"),
                    (sc.se_linux_options.is_some(), "seLinuxOptions"),
                    (sc.seccomp_profile.is_some(), "seccompProfile"),
                    (sc.fs_group.is_some(), "fsGroup"),
                ] {
                    if set {
                        errs.push(forbidden(&sp.child(field), "cannot be set for a windows pod"));
                    }
                }
            }
            for (set, field) in [
                (spec.host_users.is_some(), "hostUsers"),
                (spec.host_pid == Some(true), "hostPID"),
                (spec.host_ipc == Some(true), "hostIPC"),
            ] {
                if set {
                    errs.push(forbidden(&path.child(field), "cannot be set for a windows pod"));
                }
            }
        }
        name => errs.push(not_supported(&p, name, &["linux", "windows"])),
    }
}

/// `validateFileKeyRefVolumes`: a `fileKeyRef` reads from an emptyDir volume of the pod.
fn validate_file_key_ref_volumes(spec: &PodSpec, path: &Path, errs: &mut ErrorList) {
    let vols = spec.volumes.as_deref().unwrap_or(&[]);
    for (field, list) in
        [("containers", &spec.containers[..]), ("initContainers", spec.init_containers.as_deref().unwrap_or(&[]))]
    {
        for (i, c) in list.iter().enumerate() {
            for (j, e) in c.env.iter().flatten().enumerate() {
                let Some(f) = e.value_from.as_ref().and_then(|v| v.file_key_ref.as_ref()) else { continue };
                let p = path
                    .child(field)
                    .index(i)
                    .child("env")
                    .index(j)
                    .child("valueFrom")
                    .child("fileKeyRef")
                    .child("volumeName");
                match vols.iter().find(|v| v.name == f.volume_name) {
                    None => errs.push(not_found(&p, f.volume_name.as_str())),
                    Some(v) if v.empty_dir.is_none() => {
                        errs.push(invalid(&p, f.volume_name.as_str(), "referenced volume must be of type emptyDir"))
                    }
                    Some(_) => {}
                }
            }
        }
    }
}

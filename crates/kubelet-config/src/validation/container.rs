//! Containers (`pkg/apis/core/validation/validation.go`: validateContainers, validateInitContainers,
//! validateContainerCommon, validateContainerPorts, ValidateEnv, validateEnvVarValueFrom, ValidateEnvFrom,
//! ValidateVolumeMounts, ValidateVolumeDevices, validatePullPolicy, validateResizePolicy, ValidateSecurityContext,
//! checkHostPortConflicts, validateInitContainerRestartPolicy) with the options static pods are validated with
//! (`PodValidationOptions{}`: strict environment variable names, no restart policy rules). Probes and lifecycle
//! handlers are in [`super::probe`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvFromSource, EnvVar, ObjectFieldSelector, ResourceFieldSelector, SecurityContext,
    Volume, VolumeMount,
};

use super::field::{ErrorList, Path, duplicate, forbidden, invalid, not_found, not_supported, required};
use super::names::{
    invalid_each, is_config_map_key, is_env_var_name, is_valid_id, is_valid_port_name, is_valid_port_num,
    name_is_dns_subdomain, validate_dns1123_label, validate_qualified_name,
};
use super::probe::{ProbeKind, validate_lifecycle, validate_probe_of};
use super::resources::{parse_quantity_at, validate_container_resources};
use super::volumes::{validate_local_descending_path, validate_path_no_backsteps};

/// What a container is checked against: the pod's valid volumes and its settings.
pub struct PodContext<'a> {
    /// Volumes that passed validation, by name.
    pub volumes: &'a BTreeMap<String, &'a Volume>,
    /// `spec.terminationGracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `spec.restartPolicy`.
    pub restart_policy: &'a str,
    /// `spec.os.name`, when set.
    pub os: Option<&'a str>,
    /// Whether the pod uses the host's user namespace (`hostUsers` unset or true).
    pub host_users: bool,
}

/// `validateContainerCommon`.
fn validate_common(c: &Container, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let name_path = path.child("name");
    if c.name.is_empty() {
        errs.push(required(&name_path, ""));
    } else {
        errs.extend(validate_dns1123_label(&c.name, &name_path));
    }
    if c.image.as_deref().unwrap_or("").is_empty() {
        errs.push(required(&path.child("image"), ""));
    }
    match c.termination_message_policy.as_deref().unwrap_or("") {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(required(&path.child("terminationMessagePolicy"), "")),
        p => errs.push(not_supported(&path.child("terminationMessagePolicy"), p, &["File", "FallbackToLogsOnError"])),
    }
    errs.extend(validate_ports(c.ports.as_deref().unwrap_or(&[]), &path.child("ports")));
    errs.extend(validate_env(c.env.as_deref().unwrap_or(&[]), &path.child("env")));
    errs.extend(validate_env_from(c.env_from.as_deref().unwrap_or(&[]), &path.child("envFrom")));
    errs.extend(validate_volume_mounts(c, ctx, &path.child("volumeMounts")));
    errs.extend(validate_volume_devices(c, ctx, &path.child("volumeDevices")));
    match c.image_pull_policy.as_deref().unwrap_or("") {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => errs.push(required(&path.child("imagePullPolicy"), "")),
        p => errs.push(not_supported(&path.child("imagePullPolicy"), p, &["Always", "IfNotPresent", "Never"])),
    }
    errs.extend(validate_container_resources(c.resources.as_ref(), &path.child("resources")));
    errs.extend(validate_resize_policy(c, ctx.restart_policy, &path.child("resizePolicy")));
    errs.extend(validate_security_context(c.security_context.as_ref(), ctx.host_users, &path.child("securityContext")));
    errs
}

/// `validateContainers`: the app containers (at least one), their names unique among them.
pub fn validate_containers(list: &[Container], ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if list.is_empty() {
        errs.push(required(path, ""));
        return errs;
    }
    let mut names = BTreeSet::new();
    for (i, c) in list.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_common(c, ctx, &p));
        if !names.insert(c.name.as_str()) {
            errs.push(duplicate(&p.child("name"), c.name.as_str()));
        }
        if let Some(l) = &c.lifecycle {
            errs.extend(validate_lifecycle(l, ctx, &p.child("lifecycle")));
        }
        errs.extend(validate_probes(c, ctx, &p));
        if c.restart_policy.is_some() {
            errs.push(forbidden(&p.child("restartPolicy"), "may not be set for non-init containers"));
        }
    }
    errs.extend(check_host_port_conflicts(list.iter().enumerate(), path));
    errs
}

fn validate_probes(c: &Container, ctx: &PodContext<'_>, p: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    errs.extend(validate_probe_of(c.liveness_probe.as_ref(), ProbeKind::Liveness, ctx, &p.child("livenessProbe")));
    errs.extend(validate_probe_of(c.readiness_probe.as_ref(), ProbeKind::Readiness, ctx, &p.child("readinessProbe")));
    errs.extend(validate_probe_of(c.startup_probe.as_ref(), ProbeKind::Startup, ctx, &p.child("startupProbe")));
    errs
}

/// `validateInitContainers`: names unique among init and app containers; only sidecars (`restartPolicy:
/// Always`) may have probes and lifecycle hooks.
pub fn validate_init_containers(
    list: &[Container],
    apps: &[Container],
    ctx: &PodContext<'_>,
    path: &Path,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut names: BTreeSet<&str> = apps.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in list.iter().enumerate() {
        let p = path.index(i);
        errs.extend(validate_common(c, ctx, &p));
        let mut sidecar = false;
        if let Some(policy) = c.restart_policy.as_deref() {
            if policy == "Always" {
                sidecar = true;
            } else {
                errs.push(not_supported(&p.child("restartPolicy"), policy, &["Always"]));
            }
        }
        if names.contains(c.name.as_str()) {
            errs.push(duplicate(&p.child("name"), c.name.as_str()));
        } else if !c.name.is_empty() {
            names.insert(c.name.as_str());
        }
        errs.extend(check_host_port_conflicts(std::iter::once((0, c)), path));
        if sidecar {
            if let Some(l) = &c.lifecycle {
                errs.extend(validate_lifecycle(l, ctx, &p.child("lifecycle")));
            }
            errs.extend(validate_probes(c, ctx, &p));
        } else {
            const WHY: &str = "may not be set for init containers without restartPolicy=Always";
            for (set, field) in [
                (c.lifecycle.is_some(), "lifecycle"),
                (c.liveness_probe.is_some(), "livenessProbe"),
                (c.readiness_probe.is_some(), "readinessProbe"),
                (c.startup_probe.is_some(), "startupProbe"),
            ] {
                if set {
                    errs.push(forbidden(&p.child(field), WHY));
                }
            }
        }
        if c.resize_policy.as_ref().is_some_and(|r| !r.is_empty()) {
            errs.push(invalid(
                &p.child("resizePolicy"),
                super::field::BadValue::json(&c.resize_policy),
                "must not be set for init containers",
            ));
        }
    }
    errs
}

/// `checkHostPortConflicts`: one `protocol/hostIP/hostPort` at most once across the containers.
fn check_host_port_conflicts<'a>(list: impl Iterator<Item = (usize, &'a Container)>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut seen = BTreeSet::new();
    for (ci, c) in list {
        for (pi, port) in c.ports.iter().flatten().enumerate() {
            let hp = port.host_port.unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let key =
                format!("{}/{}/{hp}", port.protocol.as_deref().unwrap_or(""), port.host_ip.as_deref().unwrap_or(""));
            if !seen.insert(key.clone()) {
                errs.push(duplicate(&path.index(ci).child("ports").index(pi).child("hostPort"), key));
            }
        }
    }
    errs
}

/// `validateContainerPorts`.
fn validate_ports(ports: &[ContainerPort], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = path.index(i);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let msgs = is_valid_port_name(name);
            if !msgs.is_empty() {
                errs.extend(invalid_each(&p.child("name"), name, msgs));
            } else if !names.insert(name) {
                errs.push(duplicate(&p.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(required(&p.child("containerPort"), ""));
        } else {
            for m in is_valid_port_num(port.container_port.into()) {
                errs.push(invalid(&p.child("containerPort"), port.container_port, m));
            }
        }
        if let Some(hp) = port.host_port.filter(|hp| *hp != 0) {
            for m in is_valid_port_num(hp.into()) {
                errs.push(invalid(&p.child("hostPort"), hp, m));
            }
        }
        match port.protocol.as_deref().unwrap_or("") {
            "" => errs.push(required(&p.child("protocol"), "")),
            "TCP" | "UDP" | "SCTP" => {}
            proto => errs.push(not_supported(&p.child("protocol"), proto, &["SCTP", "TCP", "UDP"])),
        }
    }
    errs
}

const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// `ValidateEnv` and `validateEnvVarValueFrom`.
fn validate_env(vars: &[EnvVar], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, ev) in vars.iter().enumerate() {
        let p = path.index(i);
        if ev.name.is_empty() {
            errs.push(required(&p.child("name"), ""));
        } else {
            errs.extend(invalid_each(&p.child("name"), &ev.name, is_env_var_name(&ev.name)));
        }
        let Some(from) = &ev.value_from else { continue };
        let vp = p.child("valueFrom");
        let mut n = 0;
        if let Some(f) = &from.field_ref {
            n += 1;
            errs.extend(validate_object_field_selector(f, ENV_FIELD_PATHS, &vp.child("fieldRef")));
        }
        if let Some(r) = &from.resource_field_ref {
            n += 1;
            errs.extend(validate_resource_field_selector(r, false, &vp.child("resourceFieldRef")));
        }
        if let Some(s) = &from.config_map_key_ref {
            n += 1;
            errs.extend(validate_key_selector(&s.name, &s.key, &vp.child("configMapKeyRef")));
        }
        if let Some(s) = &from.secret_key_ref {
            n += 1;
            errs.extend(validate_key_selector(&s.name, &s.key, &vp.child("secretKeyRef")));
        }
        if let Some(f) = &from.file_key_ref {
            n += 1;
            let fp = vp.child("fileKeyRef");
            if f.key.is_empty() {
                errs.push(required(&fp.child("key"), ""));
            }
            if f.volume_name.is_empty() {
                errs.push(required(&fp.child("volumeName"), ""));
            } else {
                errs.extend(validate_dns1123_label(&f.volume_name, &fp.child("volumeName")));
            }
            if f.path.is_empty() {
                errs.push(required(&fp.child("path"), ""));
            } else {
                errs.extend(validate_path_no_backsteps(&f.path, &fp.child("path")));
            }
        }
        if n == 0 {
            errs.push(invalid(
                &vp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !ev.value.as_deref().unwrap_or("").is_empty() {
            errs.push(invalid(&vp, "", "may not be specified when `value` is not empty"));
        } else if n > 1 {
            errs.push(invalid(&vp, "", "may not have more than one field specified at a time"));
        }
    }
    errs
}

fn validate_key_selector(name: &str, key: &str, path: &Path) -> ErrorList {
    let mut errs = invalid_each(&path.child("name"), name, name_is_dns_subdomain(name, false));
    if key.is_empty() {
        errs.push(required(&path.child("key"), ""));
    } else {
        errs.extend(invalid_each(&path.child("key"), key, is_config_map_key(key)));
    }
    errs
}

/// `validateObjectFieldSelector` (the API version is defaulted to `v1` beforehand).
pub fn validate_object_field_selector(f: &ObjectFieldSelector, allowed: &[&str], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let version = f.api_version.as_deref().unwrap_or("");
    if version.is_empty() {
        errs.push(required(&path.child("apiVersion"), ""));
        return errs;
    }
    if f.field_path.is_empty() {
        errs.push(required(&path.child("fieldPath"), ""));
        return errs;
    }
    if version != "v1" {
        errs.push(invalid(
            &path.child("fieldPath"),
            f.field_path.as_str(),
            format!("error converting fieldPath: unsupported pod version: {version}"),
        ));
        return errs;
    }
    // `path['subscript']` is allowed for labels and annotations only.
    if let Some((base, rest)) = f.field_path.split_once("['")
        && let Some(sub) = rest.strip_suffix("']")
    {
        match base {
            "metadata.annotations" => errs.extend(validate_qualified_name(&sub.to_lowercase(), path)),
            "metadata.labels" => errs.extend(validate_qualified_name(sub, path)),
            _ => errs.push(invalid(path, base, "does not support subscript")),
        }
    } else if !allowed.contains(&f.field_path.as_str()) {
        let mut sorted = allowed.to_vec();
        sorted.sort_unstable();
        errs.push(not_supported(&path.child("fieldPath"), f.field_path.as_str(), &sorted));
    }
    errs
}

/// `validateContainerResourceFieldSelector` and `validateContainerResourceDivisor`.
pub fn validate_resource_field_selector(r: &ResourceFieldSelector, volume: bool, path: &Path) -> ErrorList {
    const ALLOWED: &[&str] = &[
        "limits.cpu",
        "limits.ephemeral-storage",
        "limits.memory",
        "requests.cpu",
        "requests.ephemeral-storage",
        "requests.memory",
    ];
    let mut errs = ErrorList::default();
    let res = r.resource.as_str();
    let huge = res.starts_with("requests.hugepages-") || res.starts_with("limits.hugepages-");
    if volume && r.container_name.as_deref().unwrap_or("").is_empty() {
        errs.push(required(&path.child("containerName"), ""));
    } else if res.is_empty() {
        errs.push(required(&path.child("resource"), ""));
    } else if !ALLOWED.contains(&res) && !huge {
        errs.push(not_supported(&path.child("resource"), res, ALLOWED));
    }
    let Some(d) = &r.divisor else { return errs };
    let divisor = match parse_quantity_at(d, &path.child("divisor")) {
        Ok(q) if q.is_zero() => return errs,
        Ok(q) => q.to_string(),
        Err(e) => {
            errs.push(e);
            return errs;
        }
    };
    const SIZES: &[&str] = &["1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"];
    const SIZES_TEXT: &str = "1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei";
    let bad = |what: &str| {
        invalid(
            &path.child("divisor"),
            res,
            format!("only divisor's values {SIZES_TEXT} are supported with the {what} resource"),
        )
    };
    match res {
        "limits.cpu" | "requests.cpu" if !matches!(divisor.as_str(), "1m" | "1") => errs.push(invalid(
            &path.child("divisor"),
            res,
            "only divisor's values 1m and 1 are supported with the cpu resource",
        )),
        "limits.memory" | "requests.memory" if !SIZES.contains(&divisor.as_str()) => errs.push(bad("memory")),
        "limits.ephemeral-storage" | "requests.ephemeral-storage" if !SIZES.contains(&divisor.as_str()) => {
            errs.push(bad("local ephemeral storage"))
        }
        _ => {}
    }
    if huge && !SIZES.contains(&divisor.as_str()) {
        errs.push(bad("hugepages"));
    }
    errs
}

/// `ValidateEnvFrom`.
fn validate_env_from(list: &[EnvFromSource], path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    for (i, ev) in list.iter().enumerate() {
        let p = path.index(i);
        if let Some(prefix) = ev.prefix.as_deref().filter(|s| !s.is_empty()) {
            errs.extend(invalid_each(&p.child("prefix"), prefix, is_env_var_name(prefix)));
        }
        let mut n = 0;
        let mut check_name = |name: &str, field: &str, errs: &mut ErrorList| {
            n += 1;
            let np = p.child(field).child("name");
            if name.is_empty() {
                errs.push(required(&np, ""));
            } else {
                errs.extend(invalid_each(&np, name, name_is_dns_subdomain(name, true)));
            }
        };
        if let Some(r) = &ev.config_map_ref {
            check_name(&r.name, "configMapRef", &mut errs);
        }
        if let Some(r) = &ev.secret_ref {
            check_name(&r.name, "secretRef", &mut errs);
        }
        if n == 0 {
            errs.push(invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"));
        } else if n > 1 {
            errs.push(invalid(path, "", "may not have more than one field specified at a time"));
        }
    }
    errs
}

/// `ValidateVolumeMounts`.
fn validate_volume_mounts(c: &Container, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let devices: BTreeMap<&str, &str> =
        c.volume_devices.iter().flatten().map(|d| (d.name.as_str(), d.device_path.as_str())).collect();
    let mut mount_points = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let p = path.index(i);
        if m.name.is_empty() {
            errs.push(required(&p.child("name"), ""));
        }
        if !ctx.volumes.contains_key(&m.name) {
            errs.push(not_found(&p.child("name"), m.name.as_str()));
        }
        if m.mount_path.is_empty() {
            errs.push(required(&p.child("mountPath"), ""));
        }
        if !mount_points.insert(m.mount_path.as_str()) {
            errs.push(invalid(&p.child("mountPath"), m.mount_path.as_str(), "must be unique"));
        }
        if devices.contains_key(m.name.as_str()) {
            errs.push(invalid(&p.child("name"), m.name.as_str(), "must not already exist in volumeDevices"));
        }
        if devices.values().any(|dp| *dp == m.mount_path) {
            errs.push(invalid(
                &p.child("mountPath"),
                m.mount_path.as_str(),
                "must not already exist as a path in volumeDevices",
            ));
        }
        // Upstream names these paths without the mount's index.
        if let Some(sp) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            errs.extend(validate_local_descending_path(sp, &path.child("subPath")));
        }
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            if m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
                errs.push(invalid(&p.child("subPathExpr"), expr, "subPathExpr and subPath are mutually exclusive"));
            }
            errs.extend(validate_local_descending_path(expr, &path.child("subPathExpr")));
        }
        if let Some(mp) = m.mount_propagation.as_deref() {
            errs.extend(validate_mount_propagation(mp, c, &path.child("mountPropagation")));
        }
        errs.extend(validate_recursive_read_only(m, &path.child("recursiveReadOnly")));
    }
    errs
}

fn validate_mount_propagation(mp: &str, c: &Container, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if !matches!(mp, "Bidirectional" | "HostToContainer" | "None") {
        errs.push(not_supported(path, mp, &["Bidirectional", "HostToContainer", "None"]));
    }
    let privileged = c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false);
    if mp == "Bidirectional" && !privileged {
        errs.push(forbidden(path, "Bidirectional mount propagation is available only to privileged containers"));
    }
    errs
}

fn validate_recursive_read_only(m: &VolumeMount, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => {}
        Some("Enabled" | "IfPossible") => {
            if !m.read_only.unwrap_or(false) {
                errs.push(forbidden(path, "may only be specified when readOnly is true"));
            }
            if m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
                errs.push(forbidden(path, "may only be specified when mountPropagation is None or not specified"));
            }
        }
        Some(v) => errs.push(not_supported(path, v, &["Disabled", "Enabled", "IfPossible"])),
    }
    errs
}

/// `ValidateVolumeDevices`: block devices come from claims only.
fn validate_volume_devices(c: &Container, ctx: &PodContext<'_>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mounts: BTreeMap<&str, &str> =
        c.volume_mounts.iter().flatten().map(|m| (m.name.as_str(), m.mount_path.as_str())).collect();
    let (mut paths, mut names) = (BTreeSet::new(), BTreeSet::new());
    for (i, d) in c.volume_devices.iter().flatten().enumerate() {
        let p = path.index(i);
        let vol = ctx.volumes.get(&d.name);
        if d.name.is_empty() {
            errs.push(required(&p.child("name"), ""));
        }
        if names.contains(d.name.as_str()) {
            errs.push(invalid(&p.child("name"), d.name.as_str(), "must be unique"));
        }
        match vol {
            Some(v) if v.persistent_volume_claim.is_none() && v.ephemeral.is_none() => errs.push(invalid(
                &p.child("name"),
                d.name.as_str(),
                "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
            )),
            Some(_) => {}
            None => errs.push(not_found(&p.child("name"), d.name.as_str())),
        }
        if d.device_path.is_empty() {
            errs.push(required(&p.child("devicePath"), ""));
        }
        if paths.contains(d.device_path.as_str()) {
            errs.push(invalid(&p.child("devicePath"), d.device_path.as_str(), "must be unique"));
        }
        if !d.device_path.is_empty() && !validate_path_no_backsteps(&d.device_path, &p).is_empty() {
            errs.push(invalid(&p.child("devicePath"), d.device_path.as_str(), "can not contain backsteps ('..')"));
        } else {
            paths.insert(d.device_path.as_str());
        }
        if mounts.contains_key(d.name.as_str()) {
            errs.push(invalid(&p.child("name"), d.name.as_str(), "must not already exist in volumeMounts"));
        }
        if mounts.values().any(|mp| *mp == d.device_path) {
            errs.push(invalid(
                &p.child("devicePath"),
                d.device_path.as_str(),
                "must not already exist as a path in volumeMounts",
            ));
        }
        if !d.name.is_empty() {
            names.insert(d.name.as_str());
        }
    }
    errs
}

/// `validateResizePolicy`.
fn validate_resize_policy(c: &Container, pod_restart: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut seen = BTreeSet::new();
    for (i, rp) in c.resize_policy.iter().flatten().enumerate() {
        if !seen.insert(rp.resource_name.as_str()) {
            errs.push(duplicate(&path.index(i), rp.resource_name.as_str()));
        }
        match rp.resource_name.as_str() {
            "cpu" | "memory" => {}
            "" => errs.push(required(path, "")),
            r => errs.push(not_supported(path, r, &["cpu", "memory"])),
        }
        match rp.restart_policy.as_str() {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(required(path, "")),
            r => errs.push(not_supported(path, r, &["NotRequired", "RestartContainer"])),
        }
        if pod_restart == "Never" && rp.restart_policy != "NotRequired" {
            errs.push(invalid(
                path,
                rp.restart_policy.as_str(),
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
    errs
}

/// `validateSeccompProfileField`.
pub fn validate_seccomp_profile(sp: Option<&k8s_openapi::api::core::v1::SeccompProfile>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(sp) = sp else { return errs };
    let tp = path.child("type");
    match sp.type_.as_str() {
        "Localhost" | "RuntimeDefault" | "Unconfined" => {}
        "" => errs.push(required(&tp, "type is required when seccompProfile is set")),
        t => errs.push(not_supported(&tp, t, &["Localhost", "RuntimeDefault", "Unconfined"])),
    }
    if sp.type_ == "Localhost" {
        match sp.localhost_profile.as_deref() {
            None => errs.push(required(&path.child("localhostProfile"), "must be set when seccomp type is Localhost")),
            Some(p) => errs.extend(validate_local_descending_path(p, &path.child("localhostProfile"))),
        }
    } else if sp.localhost_profile.is_some() {
        errs.push(invalid(
            &path.child("localhostProfile"),
            super::field::BadValue::json(sp),
            "can only be set when seccomp type is Localhost",
        ));
    }
    errs
}

/// `ValidateAppArmorProfileField`.
pub fn validate_app_armor_profile(p: Option<&k8s_openapi::api::core::v1::AppArmorProfile>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(p) = p else { return errs };
    let lp = path.child("localhostProfile");
    match p.type_.as_str() {
        "Localhost" => match p.localhost_profile.as_deref() {
            None => errs.push(required(&lp, "must be set when AppArmor type is Localhost")),
            Some(s) if s.trim() != s => errs.push(invalid(&lp, s, "must not be padded with whitespace")),
            Some("") => errs.push(required(&lp, "must be set when AppArmor type is Localhost")),
            Some(s) if s.len() > 4095 => errs.push(super::field::too_long(&lp, 4095)),
            Some(_) => {}
        },
        "RuntimeDefault" | "Unconfined" => {
            if p.localhost_profile.is_some() {
                errs.push(invalid(
                    &lp,
                    p.localhost_profile.as_deref().unwrap_or(""),
                    "can only be set when AppArmor type is Localhost",
                ));
            }
        }
        "" => errs.push(required(&path.child("type"), "type is required when appArmorProfile is set")),
        t => errs.push(not_supported(&path.child("type"), t, &["Localhost", "RuntimeDefault", "Unconfined"])),
    }
    errs
}

/// `ValidateSecurityContext` (privileged containers are allowed, as the kubelet's default capabilities allow).
fn validate_security_context(sc: Option<&SecurityContext>, host_users: bool, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(sc) = sc else { return errs };
    if let Some(u) = sc.run_as_user {
        errs.extend(is_valid_id(u).into_iter().map(|m| invalid(&path.child("runAsUser"), u, m)));
    }
    if let Some(g) = sc.run_as_group {
        errs.extend(is_valid_id(g).into_iter().map(|m| invalid(&path.child("runAsGroup"), g, m)));
    }
    if let Some(pm) = sc.proc_mount.as_deref() {
        if !matches!(pm, "Default" | "Unmasked") {
            errs.push(not_supported(&path.child("procMount"), pm, &["Default", "Unmasked"]));
        }
        if host_users && pm == "Unmasked" {
            errs.push(invalid(&path.child("procMount"), pm, "`hostUsers` must be false to use `Unmasked`"));
        }
    }
    errs.extend(validate_seccomp_profile(sc.seccomp_profile.as_ref(), &path.child("seccompProfile")));
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            errs.push(invalid(
                path,
                super::field::BadValue::json(sc),
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        for cap in sc.capabilities.iter().flat_map(|c| c.add.iter().flatten()) {
            if cap == "CAP_SYS_ADMIN" {
                errs.push(invalid(
                    path,
                    super::field::BadValue::json(sc),
                    "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
                ));
            }
        }
    }
    errs.extend(validate_app_armor_profile(sc.app_armor_profile.as_ref(), &path.child("appArmorProfile")));
    errs
}

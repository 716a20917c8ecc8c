//! The API defaults that validation depends on and rkubelet's decoding does not apply
//! (`pkg/apis/core/v1/defaults.go`: SetDefaults_Pod's requests from limits and host-network ports,
//! SetDefaults_Probe, SetDefaults_HTTPGetAction, SetDefaults_ObjectFieldSelector). Upstream validates the pod as
//! defaulted; these are applied to the copy that is validated, so the pod the kubelet runs (and the UID hashed
//! from it) stays as rkubelet decodes it.

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, Pod, Probe};

fn default_http_get(h: &mut HTTPGetAction) {
    if h.path.as_deref().unwrap_or("").is_empty() {
        h.path = Some("/".into());
    }
    if h.scheme.as_deref().unwrap_or("").is_empty() {
        h.scheme = Some("HTTP".into());
    }
}

fn default_probe(p: &mut Probe) {
    for (v, d) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if v.unwrap_or(0) == 0 {
            *v = Some(d);
        }
    }
    if let Some(h) = p.http_get.as_mut() {
        default_http_get(h);
    }
}

fn default_handler(h: &mut LifecycleHandler) {
    if let Some(g) = h.http_get.as_mut() {
        default_http_get(g);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    for p in [&mut c.liveness_probe, &mut c.readiness_probe, &mut c.startup_probe].into_iter().flatten() {
        default_probe(p);
    }
    if let Some(l) = c.lifecycle.as_mut() {
        for h in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
            default_handler(h);
        }
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut())
            && f.api_version.as_deref().unwrap_or("").is_empty()
        {
            f.api_version = Some("v1".into());
        }
    }
    if let Some(r) = c.resources.as_mut()
        && let Some(limits) = r.limits.clone()
    {
        let requests = r.requests.get_or_insert_with(Default::default);
        // A limit that does not parse is reported once, at the limit (upstream refuses it while decoding).
        for (k, v) in limits {
            if kubelet_types::quantity::ParsedQuantity::parse(v.0.trim()).is_ok() {
                requests.entry(k).or_insert(v);
            }
        }
    }
    // The ports' TCP default is one of the decoding defaults (`sources::manifest`).
    for p in c.ports.iter_mut().flatten() {
        if host_network && p.host_port.unwrap_or(0) == 0 {
            p.host_port = Some(p.container_port);
        }
    }
}

/// Applies the defaults above to `pod`.
pub fn apply_validation_defaults(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else { return };
    let host_network = spec.host_network.unwrap_or(false);
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        let items = v.downward_api.iter_mut().flat_map(|d| d.items.iter_mut().flatten()).chain(
            v.projected
                .iter_mut()
                .flat_map(|p| p.sources.iter_mut().flatten())
                .flat_map(|s| s.downward_api.iter_mut().flat_map(|d| d.items.iter_mut().flatten())),
        );
        for f in items {
            if let Some(r) = f.field_ref.as_mut()
                && r.api_version.as_deref().unwrap_or("").is_empty()
            {
                r.api_version = Some("v1".into());
            }
        }
    }
}

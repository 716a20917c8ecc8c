//! Decoding static pod manifests (`pkg/kubelet/config/common.go`: tryDecodeSinglePod, tryDecodePodList,
//! applyDefaults): YAML or JSON into a Pod, the API defaults that matter to the kubelet, validation of the
//! the pod as the apiserver validates pod creation ([`crate::validation`]), and upstream's static-pod normalisation (name suffixed with the node name, UID
//! from a hash of the pod and its source, `kubernetes.io/config.*` annotations, namespace `default`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, Toleration};
use kubelet_types::labels as keys;
use md5::{Digest, Md5};
use thiserror::Error;

use crate::validation::{ErrorList, validate_static_pod};

/// Upstream's `maxConfigLength`: a manifest file or a static pod URL's body is read up to this many bytes, and
/// one that reaches it is refused (`utilio.ReadAtMost`), so a huge file, `/dev/zero` or an endless response
/// cannot take the kubelet's memory.
pub const MAX_MANIFEST_BYTES: usize = 10 << 20;
/// Upstream's `utilio.ErrLimitReached` text.
pub const READ_LIMIT_REACHED: &str = "the read limit is reached";

/// Why a manifest was refused.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ManifestError {
    /// Not YAML/JSON, or a field of the wrong type.
    #[error("{origin}: invalid manifest: field {field}: {message}")]
    Decode {
        /// File or URL.
        origin: String,
        /// JSON path of the offending field (`.` for the document).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Not a Pod (or PodList for URL sources).
    #[error("{origin}: invalid manifest: kind {kind:?} is not supported, expected Pod")]
    Kind {
        /// File or URL.
        origin: String,
        /// The kind found.
        kind: String,
    },
    /// The pod has no name (checked before the defaults, as upstream).
    #[error("{origin}: invalid pod: name is needed for the pod")]
    NoName {
        /// File or URL.
        origin: String,
    },
    /// The pod fails the apiserver's validation (`ValidatePodCreate`): every error, as upstream prints them.
    #[error("{origin}: invalid pod: {errors}")]
    Invalid {
        /// File or URL.
        origin: String,
        /// The pod as normalised (name with the node suffix, namespace, UID), for events about it.
        pod: Box<ObjectReference>,
        /// Every field error.
        errors: ErrorList,
    },
    /// The pod refers to API objects, which static pods may not (`PreventStaticPodAPIReferences`).
    #[error("{origin}: {message}")]
    ApiReference {
        /// File or URL.
        origin: String,
        /// The pod as normalised, for events about it.
        pod: Box<ObjectReference>,
        /// Upstream's text: `static pods may not reference secrets`, or the unknown volume.
        message: String,
    },
}

/// Parses YAML or JSON text into a JSON value.
fn parse_document(text: &str, origin: &str) -> Result<serde_json::Value, ManifestError> {
    let trimmed = text.trim_start();
    let r = if trimmed.starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        // As upstream's YAML 1.1 decoding: `0440` is octal (file modes are written that way).
        let mut options = serde_saphyr::Options::default();
        options.legacy_octal_numbers = true;
        serde_saphyr::from_str_with_options::<serde_json::Value>(text, options).map_err(|e| e.to_string())
    };
    r.map_err(|message| ManifestError::Decode { origin: origin.to_string(), field: ".".into(), message })
}

fn decode_pod(v: serde_json::Value, origin: &str) -> Result<Pod, ManifestError> {
    serde_path_to_error::deserialize::<_, Pod>(v).map_err(|e| ManifestError::Decode {
        origin: origin.to_string(),
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

fn kind_of(v: &serde_json::Value) -> &str {
    v.get("kind").and_then(|k| k.as_str()).unwrap_or("")
}

/// Decodes one pod (file sources: one pod per file).
pub fn decode_single_pod(text: &str, origin: &str) -> Result<Pod, ManifestError> {
    let v = parse_document(text, origin)?;
    match kind_of(&v) {
        "Pod" => decode_pod(v, origin),
        kind => Err(ManifestError::Kind { origin: origin.to_string(), kind: kind.to_string() }),
    }
}

/// Decodes a pod or a pod list (URL sources).
pub fn decode_pods(text: &str, origin: &str) -> Result<Vec<Pod>, ManifestError> {
    let v = parse_document(text, origin)?;
    match kind_of(&v) {
        "Pod" => Ok(vec![decode_pod(v, origin)?]),
        "PodList" => {
            let items = v.get("items").and_then(|i| i.as_array()).cloned().unwrap_or_default();
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    decode_pod(item, origin).map_err(|e| match e {
                        ManifestError::Decode { origin, field, message } => {
                            ManifestError::Decode { origin, field: format!("items[{i}].{field}"), message }
                        }
                        other => other,
                    })
                })
                .collect()
        }
        kind => Err(ManifestError::Kind { origin: origin.to_string(), kind: kind.to_string() }),
    }
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.is_none() {
        let image = c.image.clone().unwrap_or_default();
        let name = image.rsplit('/').next().unwrap_or("");
        let latest = !image.contains('@') && matches!(name.split_once(':'), None | Some((_, "latest")));
        c.image_pull_policy = Some(if latest { "Always" } else { "IfNotPresent" }.into());
    }
    c.termination_message_path.get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy.get_or_insert_with(|| "File".into());
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
}

/// The API server's defaults for the fields the kubelet reads (`pkg/apis/core/v1/defaults.go`).
pub fn apply_api_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name.get_or_insert_with(|| "default-scheduler".into());
    spec.security_context.get_or_insert_with(Default::default);
    spec.enable_service_links.get_or_insert(true);
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        default_container(c);
    }
    // `SetDefaults_Volume`: a volume without a source is an emptyDir.
    for v in spec.volumes.iter_mut().flatten() {
        if volume_has_no_source(v) {
            v.empty_dir = Some(Default::default());
        }
    }
}

fn volume_has_no_source(v: &k8s_openapi::api::core::v1::Volume) -> bool {
    let mut probe = v.clone();
    probe.name = String::new();
    probe == k8s_openapi::api::core::v1::Volume::default()
}

/// Where a static pod comes from, for its UID and annotations.
#[derive(Debug, Clone, Copy)]
pub enum StaticOrigin<'a> {
    /// A manifest file at this path.
    File(&'a str),
    /// A manifest URL.
    Url(&'a str),
}

/// Upstream's static-pod normalisation (`applyDefaults`). The UID is the MD5 of the pod (as decoded, with API
/// defaults) plus its source, unless the manifest sets one.
pub fn normalize_static_pod(pod: &mut Pod, origin: StaticOrigin<'_>, node_name: &str) {
    let node = node_name.to_lowercase();
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        let mut h = Md5::new();
        h.update(serde_json::to_vec(&*pod).unwrap_or_default());
        match origin {
            StaticOrigin::File(path) => {
                h.update(format!("host:{node_name}"));
                h.update(format!("file:{path}"));
            }
            StaticOrigin::Url(url) => h.update(format!("url:{url}")),
        }
        pod.metadata.uid = Some(hex::encode(h.finalize()));
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{node}"));
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    // Static pods tolerate every NoExecute taint, as upstream.
    let tol = Toleration { operator: Some("Exists".into()), effect: Some("NoExecute".into()), ..Default::default() };
    let tols = spec.tolerations.get_or_insert_with(Vec::new);
    if !tols.contains(&tol) {
        tols.push(tol);
    }
    let ann: &mut BTreeMap<String, String> = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(keys::CONFIG_HASH.into(), uid);
    ann.insert(
        keys::CONFIG_SOURCE.into(),
        match origin {
            StaticOrigin::File(_) => "file",
            StaticOrigin::Url(_) => "http",
        }
        .into(),
    );
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase.get_or_insert_with(|| "Pending".into());
}

impl ManifestError {
    /// The pod a refusal is about, when it was decoded far enough to have a name and namespace.
    pub fn pod(&self) -> Option<&ObjectReference> {
        match self {
            Self::Invalid { pod, .. } | Self::ApiReference { pod, .. } => Some(pod),
            _ => None,
        }
    }
}

/// What upstream does to a decoded pod, in its order (`tryDecodeSinglePod`): the name is required, then the API
/// and static-pod defaults (normalisation included), then `ValidatePodCreate`, then no reference to API objects
/// (`PreventStaticPodAPIReferences`); a pod with any error is refused.
pub fn accept_static_pod(mut pod: Pod, origin: StaticOrigin<'_>, node_name: &str) -> Result<Pod, ManifestError> {
    let text = match origin {
        StaticOrigin::File(s) | StaticOrigin::Url(s) => s,
    };
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err(ManifestError::NoName { origin: text.to_string() });
    }
    apply_api_defaults(&mut pod);
    normalize_static_pod(&mut pod, origin, node_name);
    let errors = validate_static_pod(&pod);
    if !errors.is_empty() {
        let pod = Box::new(kubelet_types::events::pod_reference(&pod));
        return Err(ManifestError::Invalid { origin: text.to_string(), pod, errors });
    }
    let reference = match super::references::api_object_reference(&pod) {
        Ok(None) => return Ok(pod),
        Ok(Some(resource)) => format!("static pods may not reference {resource}"),
        Err(unknown) => unknown,
    };
    let pod = Box::new(kubelet_types::events::pod_reference(&pod));
    Err(ManifestError::ApiReference { origin: text.to_string(), pod, message: reference })
}

/// Decode + defaults + normalisation + validation of a manifest file.
pub fn static_pod_from_file(text: &str, path: &str, node_name: &str) -> Result<Pod, ManifestError> {
    let pod = decode_single_pod(text, path)?;
    accept_static_pod(pod, StaticOrigin::File(path), node_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    command: [sleep, '3600']\n";

    #[test]
    fn normalises_as_upstream() {
        // Node names are lower case (as the kubelet makes them); `spec.nodeName` must be a DNS subdomain.
        let p = static_pod_from_file(GOOD, "/etc/kubernetes/manifests/web.yaml", "node-1").unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann["kubernetes.io/config.hash"], uid);
        assert_eq!(ann["kubernetes.io/config.source"], "file");
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("node-1"));
        // Same content and path: same UID; another path or content: another UID.
        assert_eq!(
            static_pod_from_file(GOOD, "/etc/kubernetes/manifests/web.yaml", "node-1").unwrap().metadata.uid.unwrap(),
            uid
        );
        assert_ne!(static_pod_from_file(GOOD, "/other/web.yaml", "node-1").unwrap().metadata.uid.unwrap(), uid);
        let edited = GOOD.replace("3600", "3601");
        assert_ne!(
            static_pod_from_file(&edited, "/etc/kubernetes/manifests/web.yaml", "node-1")
                .unwrap()
                .metadata
                .uid
                .unwrap(),
            uid
        );
    }

    #[test]
    fn leading_zero_modes_are_octal_as_upstreams_yaml() {
        let m = format!("{GOOD}  volumes:\n  - name: s\n    downwardAPI:\n      defaultMode: 0440\n");
        let p = static_pod_from_file(&m, "/m/web.yaml", "n").unwrap();
        let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        assert_eq!(v.downward_api.as_ref().unwrap().default_mode, Some(0o440));
    }

    #[test]
    fn static_pods_may_not_refer_to_api_objects() {
        let m = format!("{GOOD}  volumes:\n  - name: s\n    secret:\n      secretName: s\n");
        let e = static_pod_from_file(&m, "/m/web.yaml", "n").unwrap_err();
        assert_eq!(e.to_string(), "/m/web.yaml: static pods may not reference secrets");
        assert_eq!(e.pod().and_then(|p| p.name.as_deref()), Some("web-n"), "the event names the pod");
    }

    #[test]
    fn a_volume_without_a_source_is_an_empty_dir() {
        let m = format!("{GOOD}  volumes:\n  - name: scratch\n");
        let p = static_pod_from_file(&m, "/m/web.yaml", "n").unwrap();
        assert!(p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0].empty_dir.is_some());
    }

    #[test]
    fn errors_name_the_field() {
        let bad_type = GOOD.replace("  name: web\n", "  name: web\n  labels: [1]\n");
        let e = static_pod_from_file(&bad_type, "/m/x.yaml", "n").unwrap_err().to_string();
        assert!(e.contains("/m/x.yaml") && e.contains("metadata.labels"), "{e}");
        let no_image = GOOD.replace("    image: localhost/busybox:1\n", "");
        let e = static_pod_from_file(&no_image, "/m/x.yaml", "n").unwrap_err().to_string();
        assert!(e.contains("spec.containers[0].image: Required value"), "{e}");
        let e = static_pod_from_file("kind: Service\n", "/m/s.yaml", "n").unwrap_err().to_string();
        assert!(e.contains("kind \"Service\""), "{e}");
        let e = static_pod_from_file("a: [\n", "/m/y.yaml", "n").unwrap_err().to_string();
        assert!(e.starts_with("/m/y.yaml: invalid manifest"), "{e}");
        let dup = GOOD.replace("  - name: app\n", "  - name: app\n    image: b\n  - name: app\n");
        let e = static_pod_from_file(&dup, "/m/x.yaml", "n").unwrap_err().to_string();
        assert!(e.contains("Duplicate value"), "{e}");
    }

    #[test]
    fn json_and_pod_lists() {
        let j = r#"{"apiVersion":"v1","kind":"PodList","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}"#;
        assert_eq!(decode_pods(j, "http://x").unwrap().len(), 1);
    }
}

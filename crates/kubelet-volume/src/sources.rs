//! Payloads of the API-backed volumes (`pkg/volume/configmap`, `secret`, `downwardapi`, `projected` MakePayload):
//! which files a volume holds, with their modes, from the objects and the pod.
//!
//! The projected sources behind feature gates (`clusterTrustBundle`, `podCertificate`) are never skipped: while
//! their gate is off they fail the volume's set-up with the text of upstream's no-op managers
//! (`pkg/kubelet/clustertrustbundle` NoopManager, `pkg/kubelet/podcertificate` NoOpManager), as
//! `pkg/volume/projected/projected.go` collectData does; rkubelet does not serve them with the gate on either, and
//! says so in the same place, so a pod never runs without the content its volume promises.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, VolumeProjection};
use kubelet_types::objects::ObjectSource;

use crate::VolumeError;
use crate::atomic_writer::FileProjection;

/// The default file mode of these volumes (`0644`).
pub const DEFAULT_MODE: i32 = 0o644;

/// The pod's downward API values (`fieldpath.ExtractFieldPathAsString`, `ExtractResourceValueByContainerName`),
/// provided by the core.
pub trait DownwardValues: Send + Sync + 'static {
    /// A `fieldRef` value.
    fn field(&self, pod: &Pod, path: &str) -> Result<String, String>;
    /// A `resourceFieldRef` value of `container`.
    fn resource(&self, pod: &Pod, container: &str, resource: &str, divisor: Option<&str>) -> Result<String, String>;
}

type Payload = BTreeMap<String, FileProjection>;

fn project(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: bool,
    missing: &dyn Fn(&str) -> String,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(k, FileProjection::new(v, mode as u32));
            }
        }
        Some(items) => {
            for ktp in items {
                let Some(v) = data.get(&ktp.key) else {
                    if optional {
                        continue;
                    }
                    return Err(missing(&ktp.key));
                };
                out.insert(ktp.path.clone(), FileProjection::new(v.clone(), ktp.mode.unwrap_or(mode) as u32));
            }
        }
    }
    Ok(out)
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut d: BTreeMap<String, Vec<u8>> =
        cm.data.iter().flatten().map(|(k, v)| (k.clone(), v.clone().into_bytes())).collect();
    d.extend(cm.binary_data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())));
    d
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut d: BTreeMap<String, Vec<u8>> = s.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect();
    d.extend(s.string_data.iter().flatten().map(|(k, v)| (k.clone(), v.clone().into_bytes())));
    d
}

/// Where a keyed volume's items come from.
#[derive(Debug, Clone, Copy)]
pub struct KeyedSource<'a> {
    /// Namespace of the pod.
    pub ns: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// `items` (key to path); all keys when empty.
    pub items: Option<&'a [KeyToPath]>,
    /// `defaultMode`.
    pub mode: i32,
    /// `optional`: a missing object or key is skipped.
    pub optional: bool,
}

/// The payload of the object's data (None: the object does not exist).
fn keyed(
    kind: &'static str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    src: KeyedSource<'_>,
) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: kind, name: src.name.to_string(), message };
    let missing_key = |k: &str| match kind {
        "configmap" => format!("configmap references non-existent config key: {k}"),
        _ => format!("references non-existent secret key: {k}"),
    };
    match data {
        None if src.optional => Ok(Payload::new()),
        None => Err(fail(format!("{kind} {:?} not found", src.name))),
        Some(d) => project(d, src.items, src.mode, src.optional, &missing_key).map_err(fail),
    }
}

/// The payload of a ConfigMap volume or projection; a missing optional ConfigMap is empty.
pub async fn config_map_payload(objects: &dyn ObjectSource, src: KeyedSource<'_>) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: "configmap", name: src.name.to_string(), message };
    let cm = objects.config_map(src.ns, src.name).await.map_err(fail)?;
    keyed("configmap", cm.as_ref().map(config_map_data), src)
}

/// The payload of a Secret volume or projection; a missing optional Secret is empty.
pub async fn secret_payload(objects: &dyn ObjectSource, src: KeyedSource<'_>) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: "secret", name: src.name.to_string(), message };
    let s = objects.secret(src.ns, src.name).await.map_err(fail)?;
    keyed("secret", s.as_ref().map(secret_data), src)
}

/// The payload of a downward API volume or projection.
pub fn downward_payload(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
    values: &dyn DownwardValues,
) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: "downwardAPI", name: String::new(), message };
    let mut out = Payload::new();
    for f in items {
        let v = if let Some(r) = &f.field_ref {
            values.field(pod, &r.field_path).map_err(fail)?
        } else if let Some(r) = &f.resource_field_ref {
            let c = r.container_name.as_deref().unwrap_or("");
            values.resource(pod, c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str())).map_err(fail)?
        } else {
            continue;
        };
        out.insert(f.path.clone(), FileProjection::new(v.into_bytes(), f.mode.unwrap_or(mode) as u32));
    }
    Ok(out)
}

/// The feature gate of `clusterTrustBundle` projections.
pub const CLUSTER_TRUST_BUNDLE_PROJECTION: &str = "ClusterTrustBundleProjection";
/// The feature gate of `podCertificate` projections.
pub const POD_CERTIFICATE_REQUEST: &str = "PodCertificateRequest";

/// Which gated projected sources upstream's kubelet would serve on this node: each is true when its feature gate is
/// on and the node has an apiserver (`kubelet.go` NewMainKubelet picks the no-op managers otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatedProjections {
    /// `ClusterTrustBundleProjection` is on and the node has an apiserver.
    pub cluster_trust_bundle: bool,
    /// `PodCertificateRequest` is on and the node has an apiserver.
    pub pod_certificate: bool,
}

/// Why a `clusterTrustBundle` or `podCertificate` source cannot be projected (None for the other sources). With
/// the gate off (or no apiserver) the error is upstream's text; with it on, rkubelet names what it lacks.
pub fn gated_source_error(src: &VolumeProjection, gates: GatedProjections) -> Option<VolumeError> {
    let text = if let Some(b) = &src.cluster_trust_bundle {
        if b.name.is_none() && b.signer_name.is_none() {
            "ClusterTrustBundle projection requires either name or signerName to be set"
        } else if !gates.cluster_trust_bundle {
            "ClusterTrustBundle projection is not supported in static kubelet mode"
        } else {
            "ClusterTrustBundle projection is not implemented by rkubelet yet (the ClusterTrustBundleProjection \
             feature gate is on): the volume cannot be set up"
        }
    } else if src.pod_certificate.is_some() {
        if !gates.pod_certificate {
            "unimplemented"
        } else {
            "PodCertificate projection is not implemented by rkubelet yet (the PodCertificateRequest feature gate \
             is on): the volume cannot be set up"
        }
    } else {
        return None;
    };
    Some(VolumeError::Unavailable(text.into()))
}

/// No downward API values (for the unit tests of volumes that need none).
#[cfg(test)]
pub(crate) struct NoDownward;

#[cfg(test)]
impl DownwardValues for NoDownward {
    fn field(&self, _: &Pod, _: &str) -> Result<String, String> {
        Err("none".into())
    }
    fn resource(&self, _: &Pod, _: &str, _: &str, _: Option<&str>) -> Result<String, String> {
        Err("none".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_types::objects::NoObjects;

    struct One(ConfigMap);

    #[async_trait::async_trait]
    impl ObjectSource for One {
        async fn config_map(&self, _ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
            Ok((name == "cm").then(|| self.0.clone()))
        }
        async fn secret(&self, _ns: &str, _name: &str) -> Result<Option<Secret>, String> {
            Ok(None)
        }
        async fn services(&self, _ns: &str) -> Result<Vec<k8s_openapi::api::core::v1::Service>, String> {
            Ok(vec![])
        }
    }

    #[tokio::test]
    async fn keyed_payloads_as_upstream() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])),
            binary_data: Some(BTreeMap::from([("bin".into(), k8s_openapi::ByteString(vec![0, 1]))])),
            ..Default::default()
        };
        let o = One(cm);
        let all = KeyedSource { ns: "ns", name: "cm", items: None, mode: 0o644, optional: false };
        let p = config_map_payload(&o, all).await.unwrap();
        assert_eq!(p.keys().cloned().collect::<Vec<_>>(), vec!["a", "b", "bin"]);
        assert_eq!(p["bin"], FileProjection::new(vec![0, 1], 0o644));
        let items = vec![KeyToPath { key: "a".into(), path: "dir/x".into(), mode: Some(0o400) }];
        let p = config_map_payload(&o, KeyedSource { items: Some(&items), ..all }).await.unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p["dir/x"], FileProjection::new(b"1".to_vec(), 0o400));
        let missing = vec![KeyToPath { key: "zz".into(), path: "z".into(), mode: None }];
        let e = config_map_payload(&o, KeyedSource { items: Some(&missing), ..all }).await.unwrap_err();
        assert_eq!(e.to_string(), "configmap cm: configmap references non-existent config key: zz");
        assert!(
            config_map_payload(&o, KeyedSource { items: Some(&missing), optional: true, ..all })
                .await
                .unwrap()
                .is_empty()
        );
        let e = secret_payload(&o, KeyedSource { name: "s", ..all }).await.unwrap_err();
        assert_eq!(e.to_string(), "secret s: secret \"s\" not found");
        assert!(secret_payload(&o, KeyedSource { name: "s", optional: true, ..all }).await.unwrap().is_empty());
        assert!(config_map_payload(&NoObjects, all).await.unwrap_err().to_string().contains("no apiserver"));
    }
}

//! Payloads of the API-backed volumes (`pkg/volume/configmap`, `secret`, `downwardapi`, `projected` MakePayload):
//! which files a volume holds, with their modes, from the objects and the pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret};
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
                out.insert(k, FileProjection { data: v, mode: mode as u32 });
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
                out.insert(ktp.path.clone(), FileProjection { data: v.clone(), mode: ktp.mode.unwrap_or(mode) as u32 });
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

/// The payload of a ConfigMap volume or projection; a missing optional ConfigMap is empty.
pub async fn config_map_payload(
    objects: &dyn ObjectSource,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: bool,
) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: "configmap", name: name.to_string(), message };
    match objects.config_map(ns, name).await.map_err(fail)? {
        None if optional => Ok(Payload::new()),
        None => Err(fail(format!("configmap {name:?} not found"))),
        Some(cm) => project(config_map_data(&cm), items, mode, optional, &|k| {
            format!("configmap references non-existent config key: {k}")
        })
        .map_err(fail),
    }
}

/// The payload of a Secret volume or projection; a missing optional Secret is empty.
pub async fn secret_payload(
    objects: &dyn ObjectSource,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: bool,
) -> Result<Payload, VolumeError> {
    let fail = |message: String| VolumeError::Source { source_kind: "secret", name: name.to_string(), message };
    match objects.secret(ns, name).await.map_err(fail)? {
        None if optional => Ok(Payload::new()),
        None => Err(fail(format!("secret {name:?} not found"))),
        Some(s) => {
            project(secret_data(&s), items, mode, optional, &|k| format!("references non-existent secret key: {k}"))
                .map_err(fail)
        }
    }
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
        out.insert(f.path.clone(), FileProjection { data: v.into_bytes(), mode: f.mode.unwrap_or(mode) as u32 });
    }
    Ok(out)
}

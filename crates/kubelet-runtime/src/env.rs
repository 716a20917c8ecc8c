//! A container's environment (`kubelet_pods.go` makeEnvironmentVariables, getServiceEnvVarMap,
//! podFieldSelectorRuntimeValue; `pkg/kubelet/envvars`; `pkg/api/v1/resource` ExtractContainerResourceValue;
//! `pkg/fieldpath`): service links, `envFrom`, then `env` in order — literal values expanded with `$(VAR)`,
//! field and resource references, ConfigMap and Secret keys.
//!
//! Called by the runtime manager before each CreateContainer. A missing required reference is an error whose text
//! becomes the `CreateContainerConfigError` message; the pod worker retries at its next sync. So is a pod from the
//! apiserver started before the Services were read once ([`SERVICES_NOT_SYNCED`]); a static pod is not held back.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kubelet_prober::handlers::expand;

use crate::qos::parse_quantity;

pub use kubelet_types::objects::{NoObjects, ObjectSource};

/// What the environment needs of the node.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// The node's IPs (`status.hostIP(s)`).
    pub host_ips: Vec<String>,
    /// Allocatable CPU in millicores (a container without a CPU limit sees this as `limits.cpu`).
    pub allocatable_milli_cpu: i64,
    /// Allocatable memory in bytes (likewise for `limits.memory`).
    pub allocatable_memory: i64,
    /// Allocatable ephemeral storage in bytes.
    pub allocatable_ephemeral_storage: i64,
}

/// `SVC_NAME` from `svc-name`.
fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// The environment variables of services (`envvars.FromServices`): host, ports, and Docker-style links.
pub fn service_env(services: &[&Service]) -> Vec<(String, String)> {
    let mut out = vec![];
    for svc in services {
        let Some(spec) = svc.spec.as_ref() else { continue };
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        if ip.is_empty() || ip == "None" || ports.is_empty() {
            continue;
        }
        let prefix = env_name(svc.metadata.name.as_deref().unwrap_or(""));
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), ports[0].port.to_string()));
        for p in ports {
            if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{port_var}_{}", env_name(n)), p.port.to_string()));
            }
        }
        let host_port = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
        for (i, p) in ports.iter().enumerate() {
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{host_port}:{}", p.port);
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((pp.clone(), url));
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.to_string()));
        }
    }
    out
}

/// The service environment of a pod in `namespace` (`getServiceEnvVarMap`): the `kubernetes` service of the
/// `default` namespace always, the services of the pod's namespace when `enableServiceLinks`.
pub async fn service_env_map(
    objects: &dyn ObjectSource,
    namespace: &str,
    links: bool,
) -> Result<HashMap<String, String>, String> {
    let mut chosen: BTreeMap<String, Service> = BTreeMap::new();
    let default = objects.services("default").await?;
    let own = if links && namespace != "default" { objects.services(namespace).await? } else { vec![] };
    for s in default.into_iter().chain(own) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let ns = s.metadata.namespace.as_deref().unwrap_or("default");
        if ns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(s);
        } else if ns == namespace && links {
            chosen.insert(name, s);
        }
    }
    let list: Vec<&Service> = chosen.values().collect();
    Ok(service_env(&list).into_iter().collect())
}

/// Go's `%q`-ish quoting of a label or annotation value in the downward API's map format.
fn quote(v: &str) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// `key="value"` lines, sorted (`fieldpath.FormatMap`).
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter().map(|(k, v)| format!("{k}={}", quote(v))).collect::<Vec<_>>().join("\n")
}

/// The value of a `fieldRef` (`podFieldSelectorRuntimeValue`, `ExtractFieldPathAsString`).
pub fn field_value(pod: &Pod, path: &str, pod_ips: &[String], host_ips: &[String]) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    let m = &pod.metadata;
    let empty = BTreeMap::new();
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['").or_else(|| r.strip_prefix("[\"")))
            .and_then(|r| r.strip_suffix("']").or_else(|| r.strip_suffix("\"]")))
    };
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref().unwrap_or(&empty)),
        "metadata.annotations" => format_map(m.annotations.as_ref().unwrap_or(&empty)),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" => host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => host_ips.join(","),
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        _ => {
            if let Some(k) = subscript("metadata.labels") {
                m.labels.as_ref().and_then(|l| l.get(k)).cloned().unwrap_or_default()
            } else if let Some(k) = subscript("metadata.annotations") {
                m.annotations.as_ref().and_then(|a| a.get(k)).cloned().unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldPath: {path}"));
            }
        }
    })
}

/// The value of a `resourceFieldRef` (`ExtractContainerResourceValue`): the request or limit divided by the
/// divisor, rounded up; a missing limit is the pod-level one, else the node's allocatable amount
/// (`defaultPodLimitsForDownwardAPI`).
pub fn resource_value(
    pod: &Pod,
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    node: &NodeFacts,
) -> Result<String, String> {
    let res = c.resources.as_ref();
    let get = |kind: &str, name: &str| {
        let m =
            if kind == "limits" { res.and_then(|r| r.limits.as_ref()) } else { res.and_then(|r| r.requests.as_ref()) };
        m.and_then(|m| m.get(name)).and_then(|q| parse_quantity(&q.0))
    };
    let (kind, name) =
        resource.split_once('.').ok_or_else(|| format!("unsupported container resource : {resource}"))?;
    if !matches!(kind, "limits" | "requests") || !matches!(name, "cpu" | "memory" | "ephemeral-storage") {
        return Err(format!("unsupported container resource : {resource}"));
    }
    let mut allocatable = match name {
        "cpu" => node.allocatable_milli_cpu as f64 / 1000.0,
        "memory" => node.allocatable_memory as f64,
        _ => node.allocatable_ephemeral_storage as f64,
    };
    if kubelet_types::resources::is_pod_level_limits_set(pod)
        && kubelet_types::resources::is_supported_pod_level_resource(name)
        && let Some(l) = kubelet_types::resources::pod_level_limits(pod).get(name).filter(|l| **l != 0.0)
    {
        allocatable = *l;
    }
    let value = match kind {
        "limits" => get("limits", name).unwrap_or(allocatable),
        _ => get("requests", name).or_else(|| get("limits", name)).unwrap_or(0.0),
    };
    let divisor =
        divisor.filter(|d| !d.is_empty() && parse_quantity(d) != Some(0.0)).and_then(parse_quantity).unwrap_or(1.0);
    let v = if name == "cpu" {
        // In millis, as upstream, so 250m / 1 is 1 (rounded up).
        ((value * 1000.0).round() / (divisor * 1000.0).round()).ceil()
    } else {
        (value / divisor).ceil()
    };
    Ok(format!("{}", v as i64))
}

/// Whether an `envFrom` key may become a variable: printable ASCII without `=` (the relaxed rule of 1.34).
fn valid_env_name(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| (32..=126).contains(&b) && b != b'=')
}

/// Everything one container's environment is made of.
pub struct EnvInputs<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// The container.
    pub container: &'a Container,
    /// The pod's IPs.
    pub pod_ips: &'a [String],
    /// Facts of the node.
    pub node: &'a NodeFacts,
    /// ConfigMaps, Secrets, Services.
    pub objects: &'a dyn ObjectSource,
}

/// The result: the variables, and `envFrom` keys skipped as invalid (for the `InvalidEnvironmentVariableNames`
/// event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// Name, value; in the order they were defined (service links last).
    pub vars: Vec<(String, String)>,
    /// Skipped keys with their source (`configMap default/x`).
    pub invalid: Vec<(String, Vec<String>)>,
}

struct Env {
    order: Vec<String>,
    values: HashMap<String, String>,
}

impl Env {
    fn set(&mut self, k: String, v: String) {
        if self.values.insert(k.clone(), v).is_none() {
            self.order.push(k);
        }
    }
}

/// Upstream's error for a pod from the apiserver whose environment is asked for before the Services were listed.
pub const SERVICES_NOT_SYNCED: &str = "services have not yet been read at least once, cannot construct envvars";

/// Builds the environment of a container (`makeEnvironmentVariables`).
pub async fn make_environment(i: EnvInputs<'_>) -> Result<Environment, String> {
    let ns = i.pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = i.pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
    let is_static = kubelet_types::pod_update::is_static_pod(i.pod);
    // A pod from the apiserver waits until the Services were read once, so it never misses
    // `KUBERNETES_SERVICE_HOST` (the error fails the container's start; the pod worker retries).
    if !is_static && !i.objects.services_synced() {
        return Err(SERVICES_NOT_SYNCED.into());
    }
    let service = match service_env_map(i.objects, ns, links).await {
        Ok(s) => s,
        // A static pod must start without the apiserver (it may be the apiserver): no service links then.
        Err(e) if is_static => {
            tracing::warn!(pod = %kubelet_types::pod_update::pod_ref(i.pod), error = %e, "starting a static pod without service environment variables");
            HashMap::new()
        }
        Err(e) => return Err(e),
    };
    let mut env = Env { order: vec![], values: HashMap::new() };
    let mut out = Environment::default();
    let mut cms: HashMap<String, Option<ConfigMap>> = HashMap::new();
    let mut secrets: HashMap<String, Option<Secret>> = HashMap::new();

    for from in i.container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, source) = if let Some(r) = &from.config_map_ref {
            let cm = config_map(i.objects, &mut cms, ns, &r.name).await?;
            let Some(cm) = cm else {
                if r.optional == Some(true) {
                    continue;
                }
                return Err(format!("configmap {:?} not found", r.name));
            };
            let d: BTreeMap<String, String> = cm.data.clone().unwrap_or_default();
            (d, format!("configMap {ns}/{}", r.name))
        } else if let Some(r) = &from.secret_ref {
            let s = secret(i.objects, &mut secrets, ns, &r.name).await?;
            let Some(s) = s else {
                if r.optional == Some(true) {
                    continue;
                }
                return Err(format!("secret {:?} not found", r.name));
            };
            let d = s
                .data
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            (d, format!("secret {ns}/{}", r.name))
        } else {
            continue;
        };
        let mut invalid = vec![];
        for (k, v) in data {
            let name = format!("{prefix}{k}");
            if !valid_env_name(&name) {
                invalid.push(name);
                continue;
            }
            env.set(name, v);
        }
        if !invalid.is_empty() {
            invalid.sort();
            out.invalid.push((source, invalid));
        }
    }

    for e in i.container.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_value(i.pod, &f.field_path, i.pod_ips, &i.node.host_ips)?
            } else if let Some(r) = &from.resource_field_ref {
                // The container itself needs no lookup (an ephemeral container is not among the pod's).
                let target = match r.container_name.as_deref().filter(|n| !n.is_empty() && *n != i.container.name) {
                    Some(n) => find_container(i.pod, n).ok_or_else(|| format!("container {n} not found"))?,
                    None => i.container,
                };
                resource_value(i.pod, target, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()), i.node)?
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional == Some(true);
                match config_map(i.objects, &mut cms, ns, &r.name).await? {
                    None if optional => continue,
                    None => return Err(format!("configmap {:?} not found", r.name)),
                    Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => return Err(format!("couldn't find key {} in ConfigMap {ns}/{}", r.key, r.name)),
                    },
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional == Some(true);
                match secret(i.objects, &mut secrets, ns, &r.name).await? {
                    None if optional => continue,
                    None => return Err(format!("secret {:?} not found", r.name)),
                    Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                        None if optional => continue,
                        None => return Err(format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name)),
                    },
                }
            } else {
                String::new()
            }
        } else {
            let raw = e.value.as_deref().unwrap_or("");
            expand(raw, &|name| env.values.get(name).or_else(|| service.get(name)).cloned())
        };
        env.set(e.name.clone(), value);
    }
    let mut service: Vec<(String, String)> = service.into_iter().collect();
    service.sort();
    for (k, v) in service {
        if !env.values.contains_key(&k) {
            env.set(k, v);
        }
    }
    let Env { order, mut values } = env;
    out.vars = order.into_iter().filter_map(|k| values.remove(&k).map(|v| (k, v))).collect();
    Ok(out)
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

async fn config_map(
    objects: &dyn ObjectSource,
    cache: &mut HashMap<String, Option<ConfigMap>>,
    ns: &str,
    name: &str,
) -> Result<Option<ConfigMap>, String> {
    if let Some(v) = cache.get(name) {
        return Ok(v.clone());
    }
    let v = objects.config_map(ns, name).await?;
    cache.insert(name.to_string(), v.clone());
    Ok(v)
}

async fn secret(
    objects: &dyn ObjectSource,
    cache: &mut HashMap<String, Option<Secret>>,
    ns: &str,
    name: &str,
) -> Result<Option<Secret>, String> {
    if let Some(v) = cache.get(name) {
        return Ok(v.clone());
    }
    let v = objects.secret(ns, name).await?;
    cache.insert(name.to_string(), v.clone());
    Ok(v)
}

/// `$(VAR)` in a command or its arguments, from the container's final environment
/// (`ExpandContainerCommandAndArgs`).
pub fn expand_command(args: &[String], env: &[(String, String)]) -> Vec<String> {
    let m: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    args.iter().map(|a| expand(a, &|n| m.get(n).map(|v| v.to_string()))).collect()
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;

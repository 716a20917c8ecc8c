//! The verbs on one resource, as `apiserver/pkg/endpoints/handlers` and the generic registry
//! (`registry/generic/registry/store.go`) carry them out: create (namespace must exist), update with
//! the resourceVersion precondition, the three patch types, delete with graceful deletion and
//! preconditions, and list. Used by the HTTP handlers and directly by tests through the handle.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::patch::{json_patch, merge_patch, strategic_schema};
use crate::resources::{self, ResourceDef};
use crate::selector::Selectors;
use crate::store::Store;
use crate::strategy::{self, DeleteOptions, Part, User};

/// The patch types of a PATCH (by `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/json-patch+json`.
    Json,
}

impl PatchType {
    /// From a `Content-Type` header.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            _ => None,
        }
    }
}

/// The result of a DELETE.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    /// The body answered: the object (pods, namespaces, services, or any object still being deleted)
    /// or a `Status` of success.
    pub body: Value,
    /// Whether the object is gone (false while graceful deletion or finalizers hold it).
    pub removed: bool,
}

fn returns_deleted_object(def: &ResourceDef) -> bool {
    def.group.is_empty() && matches!(def.resource, "pods" | "namespaces" | "services")
}

/// `ns` for the store: empty for cluster-scoped resources.
fn scope<'a>(def: &ResourceDef, ns: Option<&'a str>) -> Result<&'a str, ApiError> {
    match (def.namespaced, ns) {
        (true, Some(n)) if !n.is_empty() => Ok(n),
        (true, _) => Err(ApiError::bad_request("a namespace is required for this resource")),
        (false, _) => Ok(""),
    }
}

/// Creates an object (POST).
pub fn create(store: &Store, def: &ResourceDef, ns: Option<&str>, obj: Value, user: &User) -> Result<Value, ApiError> {
    let ns = scope(def, ns)?;
    if !def.allows("create") {
        return Err(ApiError::method_not_allowed(format!("create is not supported on {}", def.resource)));
    }
    if def.namespaced {
        let nsdef = resources::namespaces();
        let namespace = store.get(nsdef, "", ns).map_err(|_| ApiError::not_found(nsdef, ns))?;
        if namespace.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
            return Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                crate::error::qualified(def),
                obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
            )));
        }
    }
    let mut obj = strategy::prepare_create(def, ns, obj, user)?;
    if def.group.is_empty() && def.resource == "pods" {
        crate::serviceaccount::admit_pod(store, ns, &mut obj)?;
    }
    store.create(def, ns, obj)
}

/// Reads an object (GET).
pub fn get(store: &Store, def: &ResourceDef, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
    store.get(def, scope(def, ns)?, name)
}

/// Lists objects; `ns = None` on a namespaced resource lists all namespaces.
pub fn list(store: &Store, def: &ResourceDef, ns: Option<&str>, sel: &Selectors) -> Value {
    let ns = if def.namespaced { ns.filter(|n| !n.is_empty()) } else { None };
    let (items, rv) = store.list(def, ns, sel);
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut o| {
            if let Some(m) = o.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            o
        })
        .collect();
    json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": { "resourceVersion": rv.to_string() },
        "items": items,
    })
}

/// Replaces an object (PUT) or its status/approval part.
pub fn update(
    store: &Store,
    def: &ResourceDef,
    part: Part,
    ns: Option<&str>,
    name: &str,
    obj: Value,
) -> Result<Value, ApiError> {
    let ns = scope(def, ns)?;
    let (out, removed) =
        store.update_with(def, ns, name, |cur| strategy::prepare_update(def, part, cur, obj, false))?;
    let _ = removed;
    Ok(out)
}

/// Patches an object (PATCH) or its status/approval part.
pub fn patch(
    store: &Store,
    def: &ResourceDef,
    part: Part,
    ns: Option<&str>,
    name: &str,
    kind: PatchType,
    patch: &Value,
) -> Result<Value, ApiError> {
    let ns = scope(def, ns)?;
    let (out, _) = store.update_with(def, ns, name, |cur| {
        let mut new = cur.clone();
        match kind {
            PatchType::Merge => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("the body of a merge patch must be a JSON object"));
                }
                merge_patch(&mut new, patch)
            }
            PatchType::Strategic => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("the body of a strategic merge patch must be a JSON object"));
                }
                kubelet_apiclient::patch::apply_patch(&mut new, patch, strategic_schema(def.resource)).map_err(|e| {
                    let mut err = ApiError::invalid(def, name, "patch", &e.to_string());
                    err.code = e.http_status();
                    err
                })?
            }
            PatchType::Json => json_patch(&mut new, patch).map_err(|e| {
                let mut err = ApiError::invalid(def, name, "patch", &e.0);
                if e.0.starts_with("testing value") {
                    err = ApiError::internal(e.0.clone());
                }
                err
            })?,
        }
        strategy::prepare_update(def, part, cur, new, true)
    })?;
    Ok(out)
}

/// Deletes an object (DELETE): graceful for pods bound to a node, held by finalizers, else at once.
pub fn delete(
    store: &Store,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Deleted, ApiError> {
    let ns = scope(def, ns)?;
    let (obj, removed) = store.update_with(def, ns, name, |cur| strategy::delete_outcome(def, cur, opts))?;
    if !removed || returns_deleted_object(def) {
        return Ok(Deleted { body: obj, removed });
    }
    let mut details = json!({
        "name": name,
        "kind": def.resource,
        "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    });
    if !def.group.is_empty() {
        details["group"] = json!(def.group);
    }
    Ok(Deleted {
        body: json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details }),
        removed,
    })
}

/// The namespaces every cluster has.
pub const SEEDED_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Seeds the namespaces every cluster has.
pub fn seed(store: &Store) -> Result<(), ApiError> {
    for ns in SEEDED_NAMESPACES {
        create(store, resources::namespaces(), None, json!({ "metadata": { "name": ns } }), &User::admin())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{nodes, pods};

    fn pod(name: &str, node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "x"}},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox:1"}]}})
    }

    #[test]
    fn crud_and_conflicts() {
        let s = Store::new(100);
        seed(&s).unwrap();
        crate::serviceaccount::publish(&s, "default", "CA").unwrap();
        let admin = User::admin();
        let e = create(&s, pods(), Some("nope"), pod("a", ""), &admin).unwrap_err();
        assert_eq!(e.message, "namespaces \"nope\" not found");
        let a = create(&s, pods(), Some("default"), pod("a", "n1"), &admin).unwrap();
        let stale = a.clone();
        let mut upd = a.clone();
        upd["metadata"]["labels"]["b"] = json!("c");
        upd["status"] = json!({"phase": "Running"});
        let u = update(&s, pods(), Part::Main, Some("default"), "a", upd).unwrap();
        assert_eq!(u["status"]["phase"], "Pending", "status is ignored on the main resource");
        assert_eq!(update(&s, pods(), Part::Main, Some("default"), "a", stale).unwrap_err().reason, "Conflict");
        let st = patch(
            &s,
            pods(),
            Part::Status,
            Some("default"),
            "a",
            PatchType::Strategic,
            &json!({"metadata": {"labels": {"z": "1"}}, "status": {"phase": "Running"}}),
        )
        .unwrap();
        assert_eq!(st["status"]["phase"], "Running");
        assert!(st["metadata"]["labels"].get("z").is_none());
        let d = delete(&s, pods(), Some("default"), "a", &DeleteOptions::default()).unwrap();
        assert!(!d.removed);
        assert_eq!(d.body["metadata"]["deletionGracePeriodSeconds"], 30);
        let zero = DeleteOptions { grace_period_seconds: Some(0), ..Default::default() };
        assert!(delete(&s, pods(), Some("default"), "a", &zero).unwrap().removed);
        let n =
            create(&s, nodes(), None, json!({"metadata": {"name": "n1"}, "status": {"phase": "x"}}), &admin).unwrap();
        assert_eq!(n["status"]["phase"], "x", "node status is kept on create");
        let d = delete(&s, nodes(), None, "n1", &DeleteOptions::default()).unwrap();
        assert_eq!(d.body["status"], "Success");
    }
}

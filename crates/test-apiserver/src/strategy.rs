//! Per-resource create/update/delete rules, as the registries' strategies do them
//! (`pkg/registry/core/pod/strategy.go`, `.../node/strategy.go`, `.../certificates/...`,
//! `apiserver/pkg/registry/rest/{create,update,delete}.go`): system metadata (uid,
//! creationTimestamp, generation), pod defaulting (`pkg/apis/core/v1/defaults.go`) and QoS class,
//! status reset on create, `.status` ignored on main-resource writes and everything but `.status`
//! ignored on status writes, resourceVersion/UID preconditions, graceful pod deletion
//! (`podStrategy.CheckGracefulDelete`, `rest.BeforeDelete`) and finalizers.

use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::store::Outcome;
use crate::util::{new_uid, now_secs, random_suffix, rfc3339};

/// The authenticated user of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// `user.Info.GetName()`.
    pub name: String,
    /// `user.Info.GetGroups()`.
    pub groups: Vec<String>,
}

impl User {
    /// The user of unauthenticated plain-HTTP requests: `system:admin` in `system:masters`, as the old
    /// insecure port treated them.
    pub fn admin() -> Self {
        User { name: "system:admin".into(), groups: vec!["system:masters".into(), "system:authenticated".into()] }
    }
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let meta = &mut obj["metadata"];
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("metadata was made an object above"),
    }
}

fn is(def: &ResourceDef, group: &str, resource: &str) -> bool {
    def.group == group && def.resource == resource
}

fn str_at<'a>(obj: &'a Value, ptr: &str) -> Option<&'a str> {
    obj.pointer(ptr).and_then(Value::as_str)
}

/// The `imagePullPolicy` default of `SetDefaults_Container`: `Always` for `:latest` or no tag,
/// else `IfNotPresent`.
fn default_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    m.entry("imagePullPolicy").or_insert_with(|| json!(default_pull_policy(&image)));
    m.entry("terminationMessagePath").or_insert_with(|| json!("/dev/termination-log"));
    m.entry("terminationMessagePolicy").or_insert_with(|| json!("File"));
    m.entry("resources").or_insert_with(|| json!({}));
    if let Some(Value::Array(ports)) = m.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
        }
    }
}

/// `GetPodQOS`: Guaranteed when every container has equal limits and requests for cpu and memory,
/// BestEffort when none has any, else Burstable.
fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let all = ["initContainers", "containers"];
    for list in all {
        for c in spec.get(list).and_then(Value::as_array).into_iter().flatten() {
            let req = c.pointer("/resources/requests");
            let lim = c.pointer("/resources/limits");
            for r in ["cpu", "memory"] {
                let rq = req.and_then(|x| x.get(r));
                let lm = lim.and_then(|x| x.get(r));
                if rq.is_some() || lm.is_some() {
                    any = true;
                }
                match (rq, lm) {
                    (_, None) => guaranteed = false,
                    (Some(a), Some(b)) if a != b => guaranteed = false,
                    _ => {}
                }
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_pod(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    if let Some(m) = spec.as_object_mut() {
        m.entry("restartPolicy").or_insert_with(|| json!("Always"));
        m.entry("terminationGracePeriodSeconds").or_insert_with(|| json!(30));
        m.entry("dnsPolicy").or_insert_with(|| json!("ClusterFirst"));
        m.entry("securityContext").or_insert_with(|| json!({}));
        m.entry("schedulerName").or_insert_with(|| json!("default-scheduler"));
        m.entry("enableServiceLinks").or_insert_with(|| json!(true));
        m.entry("preemptionPolicy").or_insert_with(|| json!("PreemptLowerPriority"));
        m.entry("priority").or_insert_with(|| json!(0));
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(list) {
                cs.iter_mut().for_each(default_container);
            }
        }
    }
    let qos = qos_class(&obj["spec"]);
    obj["status"] = json!({ "phase": "Pending", "qosClass": qos });
}

fn validate_name(def: &ResourceDef, name: &str) -> Result<(), ApiError> {
    // CSR names are only path segments (`ValidateCertificateRequestName`): kubelets name theirs
    // `node-csr-<base64url digest>`, with upper case and `_`.
    if def.resource == "certificatesigningrequests" {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Err(ApiError::invalid(
                def,
                name,
                "metadata.name",
                &format!("Invalid value: \"{name}\": may not contain '/' or '%'"),
            ));
        }
        return Ok(());
    }
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' || c == ':')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            def,
            name,
            "metadata.name",
            &format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ))
    }
}

/// Checks `kind`/`apiVersion` of a request body against the resource (filling them in when absent).
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if (!kind.is_empty() && kind != def.kind) || (!av.is_empty() && av != def.api_version()) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    obj["kind"] = json!(def.kind);
    obj["apiVersion"] = json!(def.api_version());
    Ok(())
}

/// Prepares an object for creation (`rest.BeforeCreate` + the strategy's `PrepareForCreate`).
pub fn prepare_create(def: &ResourceDef, ns: &str, mut obj: Value, user: &User) -> Result<Value, ApiError> {
    check_type(def, &mut obj)?;
    let m = meta_mut(&mut obj);
    let mut name = m.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if name.is_empty() {
        if let Some(g) = m.get("generateName").and_then(Value::as_str).filter(|g| !g.is_empty()) {
            name = format!("{g}{}", random_suffix(5));
        } else {
            return Err(ApiError::invalid(
                def,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
    }
    validate_name(def, &name)?;
    match m.get("namespace").and_then(Value::as_str) {
        Some(n) if def.namespaced && !n.is_empty() && n != ns => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        _ => {}
    }
    if m.get("resourceVersion").and_then(Value::as_str).is_some_and(|r| !r.is_empty()) {
        return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
    }
    m.insert("name".into(), json!(name));
    if def.namespaced {
        m.insert("namespace".into(), json!(ns));
    } else {
        m.remove("namespace");
    }
    m.insert("uid".into(), json!(new_uid()));
    m.insert("creationTimestamp".into(), json!(rfc3339(now_secs())));
    for k in ["deletionTimestamp", "deletionGracePeriodSeconds", "generation", "selfLink"] {
        m.remove(k);
    }
    match (def.group, def.resource) {
        ("", "pods") => {
            m.insert("generation".into(), json!(1));
            default_pod(&mut obj);
        }
        ("", "namespaces") => {
            let labels = meta_mut(&mut obj).entry("labels").or_insert_with(|| json!({}));
            labels["kubernetes.io/metadata.name"] = json!(name);
            obj["spec"] = json!({ "finalizers": ["kubernetes"] });
            obj["status"] = json!({ "phase": "Active" });
        }
        ("certificates.k8s.io", _) => {
            if !obj.get("spec").is_some_and(Value::is_object) {
                obj["spec"] = json!({});
            }
            obj["spec"]["username"] = json!(user.name);
            obj["spec"]["groups"] = json!(user.groups);
            obj["spec"]
                .as_object_mut()
                .map(|s| s.entry("usages").or_insert_with(|| json!(["digital signature", "key encipherment"])));
            obj["status"] = json!({});
        }
        ("", "services") => {
            obj["status"] = json!({ "loadBalancer": {} });
        }
        ("", "secrets") => {
            if obj.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
                obj["type"] = json!("Opaque");
            }
            merge_string_data(&mut obj);
        }
        _ => {}
    }
    Ok(obj)
}

/// A Secret's write-only `stringData` goes into `data`, base64-encoded, winning over the same key there (as the
/// apiserver's secret strategy).
fn merge_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else { return };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in sd {
        let text = v.as_str().unwrap_or_default();
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource (`.status` is kept for resources with a status subresource).
    Main,
    /// `/status`: only `.status` changes.
    Status,
    /// `/approval` of a CSR: only `.status.conditions` changes.
    Approval,
}

fn has_status_sub(def: &ResourceDef) -> bool {
    def.subresources.contains(&"status")
}

/// Prepares the result of an update or patch (`rest.BeforeUpdate` + `PrepareForUpdate`):
/// preconditions, immutable metadata, the part the endpoint may change, generation, finalizers.
pub fn prepare_update(
    def: &ResourceDef,
    part: Part,
    old: &Value,
    mut new: Value,
    is_patch: bool,
) -> Result<Outcome, ApiError> {
    check_type(def, &mut new)?;
    if is(def, "", "secrets") {
        merge_string_data(&mut new);
    }
    let name = str_at(old, "/metadata/name").unwrap_or("").to_string();
    let old_rv = str_at(old, "/metadata/resourceVersion").unwrap_or("");
    let new_rv = str_at(&new, "/metadata/resourceVersion").unwrap_or("");
    if !new_rv.is_empty() && new_rv != old_rv {
        return Err(ApiError::stale(def, &name));
    }
    let new_name = str_at(&new, "/metadata/name").unwrap_or("");
    if !new_name.is_empty() && new_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({new_name}) does not match the name on the URL ({name})"
        )));
    }
    let old_uid = str_at(old, "/metadata/uid").unwrap_or("").to_string();
    let new_uid = str_at(&new, "/metadata/uid").unwrap_or("").to_string();
    if !new_uid.is_empty() && new_uid != old_uid {
        return Err(if is_patch {
            ApiError::invalid(def, &name, "metadata.uid", &format!("Invalid value: \"{new_uid}\": field is immutable"))
        } else {
            ApiError::conflict(
                def,
                &name,
                &format!("Precondition failed: UID in precondition: {new_uid}, UID in object meta: {old_uid}"),
            )
        });
    }
    let mut out = match part {
        Part::Main => {
            let mut out = new;
            if has_status_sub(def) && !is(def, "", "namespaces") {
                match old.get("status") {
                    Some(s) => out["status"] = s.clone(),
                    None => {
                        if let Some(o) = out.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            out
        }
        Part::Status => {
            let mut out = old.clone();
            out["status"] = new.get("status").cloned().unwrap_or_else(|| json!({}));
            if !is(def, "", "pods") {
                // Labels and annotations may change through status too, except for pods' owner refs.
                for k in ["labels", "annotations"] {
                    match new.pointer(&format!("/metadata/{k}")) {
                        Some(v) => meta_mut(&mut out).insert(k.into(), v.clone()),
                        None => meta_mut(&mut out).remove(k),
                    };
                }
            }
            out
        }
        Part::Approval => {
            let mut out = old.clone();
            let conds = new.pointer("/status/conditions").cloned().unwrap_or_else(|| json!([]));
            if !out.get("status").is_some_and(Value::is_object) {
                out["status"] = json!({});
            }
            out["status"]["conditions"] = conds;
            out
        }
    };
    // System metadata is kept from the stored object.
    let om = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let m = meta_mut(&mut out);
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match om.get(k) {
            Some(v) => m.insert(k.into(), v.clone()),
            None => m.remove(k),
        };
    }
    if is(def, "", "pods") && part == Part::Main {
        check_pod_spec_update(def, &name, old, &out)?;
    }
    if part == Part::Main && old.get("spec") != out.get("spec") && om.get("generation").is_some() {
        let g = om.get("generation").and_then(Value::as_i64).unwrap_or(0);
        meta_mut(&mut out).insert("generation".into(), json!(g + 1));
    }
    if is(def, "certificates.k8s.io", "certificatesigningrequests") {
        // `populateConditionTimestamps`: missing condition times are now.
        if let Some(Value::Array(conds)) = out.pointer_mut("/status/conditions") {
            let now = json!(rfc3339(now_secs()));
            for c in conds.iter_mut().filter_map(Value::as_object_mut) {
                for k in ["lastUpdateTime", "lastTransitionTime"] {
                    if c.get(k).is_none_or(Value::is_null) {
                        c.insert(k.into(), now.clone());
                    }
                }
            }
        }
        let conds = out.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        let has = |t: &str| conds.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(t));
        if has("Approved") && has("Denied") {
            return Err(ApiError::invalid(
                def,
                &name,
                "status.conditions",
                "Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
            ));
        }
        if part != Part::Main {
            out["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
        } else if old.get("spec") != out.get("spec") {
            return Err(ApiError::invalid(
                def,
                &name,
                "spec",
                "Forbidden: updates to certificate signing request spec are forbidden",
            ));
        }
    }
    // A deleted object whose last finalizer went away is removed (`shouldDeleteDuringUpdate`).
    let deleting = out.pointer("/metadata/deletionTimestamp").is_some();
    let no_finalizers = out.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(|f| f.is_empty());
    let had_finalizers = old.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    let grace_done =
        !is(def, "", "pods") || out.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0);
    if deleting && no_finalizers && had_finalizers && grace_done {
        return Ok(Outcome::Delete);
    }
    Ok(Outcome::Update(out))
}

/// The spec fields of a pod an update may change (`ValidatePodUpdate`).
fn check_pod_spec_update(def: &ResourceDef, name: &str, old: &Value, new: &Value) -> Result<(), ApiError> {
    let mask = |pod: &Value| {
        let mut s = pod.get("spec").cloned().unwrap_or_else(|| json!({}));
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = s.get_mut(list) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
        if let Some(m) = s.as_object_mut() {
            m.remove("activeDeadlineSeconds");
            m.remove("tolerations");
            m.remove("terminationGracePeriodSeconds");
        }
        s
    };
    if mask(old) != mask(new) {
        return Err(ApiError::invalid(
            def,
            name,
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    Ok(())
}

/// `metav1.DeleteOptions` of a DELETE.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    /// From the JSON body (if any) and the query (`gracePeriodSeconds=`).
    pub fn from_request(body: Option<&Value>, query_grace: Option<&str>) -> Result<Self, ApiError> {
        let mut o = DeleteOptions::default();
        if let Some(b) = body {
            o.grace_period_seconds = b.get("gracePeriodSeconds").and_then(Value::as_i64);
            o.uid = b.pointer("/preconditions/uid").and_then(Value::as_str).map(String::from);
            o.resource_version = b.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(String::from);
        }
        if let Some(g) = query_grace.filter(|g| !g.is_empty()) {
            o.grace_period_seconds =
                Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g}")))?);
        }
        Ok(o)
    }
}

/// What a DELETE does with the current object (`rest.BeforeDelete`, `podStrategy.CheckGracefulDelete`,
/// finalizers).
pub fn delete_outcome(def: &ResourceDef, cur: &Value, opts: &DeleteOptions) -> Result<Outcome, ApiError> {
    let name = str_at(cur, "/metadata/name").unwrap_or("");
    let uid = str_at(cur, "/metadata/uid").unwrap_or("");
    if let Some(want) = opts.uid.as_deref().filter(|u| *u != uid) {
        return Err(ApiError::conflict(
            def,
            name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    let rv = str_at(cur, "/metadata/resourceVersion").unwrap_or("");
    if let Some(want) = opts.resource_version.as_deref().filter(|r| *r != rv) {
        return Err(ApiError::conflict(
            def,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {rv}"
            ),
        ));
    }
    let has_finalizers = cur.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    let mut period = 0;
    if is(def, "", "pods") {
        period = opts
            .grace_period_seconds
            .or_else(|| cur.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(0);
        let phase = str_at(cur, "/status/phase").unwrap_or("");
        if str_at(cur, "/spec/nodeName").unwrap_or("").is_empty() || phase == "Succeeded" || phase == "Failed" {
            period = 0;
        }
        if period < 0 {
            period = 1;
        }
    }
    let mut out = cur.clone();
    let now = now_secs();
    let m = meta_mut(&mut out);
    if let Some(ts) = m.get("deletionTimestamp").and_then(Value::as_str).map(String::from) {
        // Already being deleted: a grace period may only be shortened.
        let Some(old_period) = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64) else {
            return Ok(if has_finalizers { Outcome::Update(out) } else { Outcome::Delete });
        };
        if opts.grace_period_seconds.is_none() || period >= old_period {
            return Ok(Outcome::Update(out));
        }
        let start = crate::util::parse_rfc3339(&ts).unwrap_or(now) - old_period;
        m.insert("deletionTimestamp".into(), json!(rfc3339(start + period)));
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
    } else if period > 0 || has_finalizers {
        m.insert("deletionTimestamp".into(), json!(rfc3339(now + period)));
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        if let Some(g) = m.get("generation").and_then(Value::as_i64) {
            m.insert("generation".into(), json!(g + 1));
        }
    } else {
        return Ok(Outcome::Delete);
    }
    let grace_zero = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0);
    if grace_zero && !has_finalizers {
        return Ok(Outcome::Delete);
    }
    Ok(Outcome::Update(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{nodes, pods};

    #[test]
    fn pod_defaults_and_status_reset() {
        let p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Running"}});
        let p = prepare_create(pods(), "default", p, &User::admin()).unwrap();
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["metadata"]["generation"], 1);
    }

    #[test]
    fn graceful_delete() {
        let mut p = json!({"metadata": {"name": "p", "uid": "u"}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}});
        let Outcome::Update(d) = delete_outcome(pods(), &p, &DeleteOptions::default()).unwrap() else { panic!() };
        assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
        let zero = DeleteOptions { grace_period_seconds: Some(0), ..Default::default() };
        assert!(matches!(delete_outcome(pods(), &d, &zero).unwrap(), Outcome::Delete));
        p["spec"]["nodeName"] = json!("");
        assert!(matches!(delete_outcome(pods(), &p, &DeleteOptions::default()).unwrap(), Outcome::Delete));
        let bad = DeleteOptions { uid: Some("x".into()), ..Default::default() };
        assert_eq!(delete_outcome(nodes(), &p, &bad).unwrap_err().code, 409);
    }
}

//! The three patch types of the apiserver's PATCH handler (`endpoints/handlers/patch.go`):
//! JSON merge patch (RFC 7386, `evanphx/json-patch.MergePatch`), JSON patch (RFC 6902) and a
//! strategic merge patch (`apimachinery/pkg/util/strategicpatch`) driven by a table of the merge keys of
//! the core types instead of the Go struct tags.

use serde_json::{Map, Value};

/// A patch that cannot be applied (answered as 422 / 400 by the caller).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The merge key of a list field under strategic merge (`patchMergeKey` tags of the core types).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        "containerStatuses"
        | "initContainerStatuses"
        | "ephemeralContainerStatuses"
        | "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "volumesAttached"
        | "resourceClaims"
        | "resourceClaimStatuses"
        | "readinessGates" => match field {
            "readinessGates" => "conditionType",
            _ => "name",
        },
        "podIPs" | "hostIPs" => "ip",
        "ports" => "containerPort",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ownerReferences" => "uid",
        "taints" => "key",
        _ => return None,
    })
}

/// Primitive lists with `patchStrategy:"merge"` (set union).
fn is_merge_set(field: &str) -> bool {
    matches!(field, "finalizers" | "volumesInUse")
}

fn key_of<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_object().and_then(|o| o.get(key))
}

fn merge_keyed_list(
    target: &mut Vec<Value>,
    patch: &[Value],
    key: &str,
    order: Option<&Vec<Value>>,
) -> Result<(), PatchError> {
    for item in patch {
        let Some(k) = key_of(item, key).cloned() else {
            return Err(PatchError(format!("map: {item} does not contain declared merge key: {key}")));
        };
        let pos = target.iter().position(|t| key_of(t, key) == Some(&k));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                target.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut target[i], item)?,
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                strategic_merge(&mut fresh, item)?;
                target.push(fresh);
            }
        }
    }
    if let Some(order) = order {
        let keys: Vec<&Value> = order.iter().filter_map(|o| key_of(o, key)).collect();
        let mut ordered: Vec<Value> = Vec::with_capacity(target.len());
        for k in &keys {
            if let Some(i) = target.iter().position(|t| key_of(t, key) == Some(*k)) {
                ordered.push(target.remove(i));
            }
        }
        ordered.append(target);
        *target = ordered;
    }
    Ok(())
}

/// Strategic merge patch: maps merge recursively, `null` deletes, lists with a merge key merge by
/// that key (honouring `$patch: delete` items and `$setElementOrder/<list>`), merge-set lists of
/// primitives are unioned (with `$deleteFromPrimitiveList/<list>`), other lists are replaced.
/// `$patch: replace` on a map replaces it; `$retainKeys` is honoured.
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut p = p.clone();
        p.remove("$patch");
        *target = Value::Object(p);
        return Ok(());
    }
    if p.get("$patch").and_then(Value::as_str) == Some("delete") {
        *target = Value::Object(Map::new());
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    if let Some(Value::Array(retain)) = p.get("$retainKeys") {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if k.starts_with('$') {
            if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(cur)), Value::Array(del)) = (t.get_mut(list), v)
            {
                cur.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (v, merge_key(k)) {
            (Value::Array(items), Some(key)) => {
                let order = p.get(&format!("$setElementOrder/{k}")).and_then(Value::as_array);
                let entry = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                if !entry.is_array() {
                    *entry = Value::Array(Vec::new());
                }
                if let Value::Array(cur) = entry {
                    merge_keyed_list(cur, items, key, order)?;
                }
            }
            (Value::Array(items), None) if is_merge_set(k) => {
                let entry = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                if let Value::Array(cur) = entry {
                    for i in items {
                        if !cur.contains(i) {
                            cur.push(i.clone());
                        }
                    }
                }
            }
            (Value::Object(_), _) => {
                strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v)?;
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

fn unescape(tok: &str) -> String {
    tok.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(Vec<String>, String), PatchError> {
    if path.is_empty() {
        return Err(PatchError("replacing the whole document is not supported".into()));
    }
    let rest = path.strip_prefix('/').ok_or_else(|| PatchError(format!("invalid JSON pointer {path:?}")))?;
    let mut toks: Vec<String> = rest.split('/').map(unescape).collect();
    let last = toks.pop().unwrap_or_default();
    Ok((toks, last))
}

fn parent_mut<'a>(doc: &'a mut Value, toks: &[String], path: &str) -> Result<&'a mut Value, PatchError> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("doc is missing path: {path:?}")))?;
    }
    Ok(cur)
}

fn op_add(doc: &mut Value, path: &str, value: Value) -> Result<(), PatchError> {
    let (toks, last) = split_pointer(path)?;
    match parent_mut(doc, &toks, path)? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| PatchError(format!("add operation does not apply: doc is missing path: {path:?}")))?
            };
            a.insert(i, value);
        }
        _ => return Err(PatchError(format!("doc is missing path: {path:?}"))),
    }
    Ok(())
}

fn op_remove(doc: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (toks, last) = split_pointer(path)?;
    let missing = || PatchError(format!("remove operation does not apply: doc is missing path: {path:?}"));
    match parent_mut(doc, &toks, path)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i = last.parse::<usize>().ok().filter(|i| *i < a.len()).ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// RFC 6902 JSON patch (`add`, `remove`, `replace`, `move`, `copy`, `test`).
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), PatchError> {
    let ops = ops.as_array().ok_or_else(|| PatchError("json patch must be an array of operations".into()))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| PatchError(format!("operation missing path: {op}")))?;
        let value = || op.get("value").cloned().ok_or_else(|| PatchError(format!("operation missing value: {op}")));
        let from = || {
            op.get("from").and_then(Value::as_str).ok_or_else(|| PatchError(format!("operation missing from: {op}")))
        };
        match kind {
            "add" => op_add(doc, path, value()?)?,
            "remove" => {
                op_remove(doc, path)?;
            }
            "replace" => {
                if doc.pointer(path).is_none() {
                    return Err(PatchError(format!("replace operation does not apply: doc is missing key: {path}")));
                }
                op_remove(doc, path)?;
                op_add(doc, path, value()?)?;
            }
            "move" => {
                let v = op_remove(doc, from()?)?;
                op_add(doc, path, v)?;
            }
            "copy" => {
                let v = doc.pointer(from()?).cloned().ok_or_else(|| {
                    PatchError(format!("copy operation does not apply: doc is missing from path: {op}"))
                })?;
                op_add(doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&value()?) {
                    return Err(PatchError(format!("testing value {path} failed: test failed")));
                }
            }
            other => return Err(PatchError(format!("Unexpected kind: {other}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_conditions_and_order() {
        let mut t = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}
        ], "containerStatuses": [{"name": "a", "ready": false}], "podIPs": [{"ip": "1"}]}});
        let p = json!({"metadata": {"uid": "u"}, "status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": true}],
            "podIPs": [{"ip": "2"}]
        }});
        strategic_merge(&mut t, &p).unwrap();
        assert_eq!(
            t["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
        assert_eq!(t["status"]["containerStatuses"], json!([{"name": "a", "ready": true}]));
        assert_eq!(t["status"]["podIPs"], json!([{"ip": "1"}, {"ip": "2"}]));
        assert_eq!(t["metadata"]["uid"], "u");
        let p = json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}});
        strategic_merge(&mut t, &p).unwrap();
        assert_eq!(t["status"]["conditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn jsonpatch() {
        let mut t = json!({"a": [1, 2], "b": {"c": "x"}});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/b/c", "value": "x"},
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "replace", "path": "/b/c", "value": "y"},
                {"op": "remove", "path": "/a/0"},
                {"op": "add", "path": "/b/d~1e", "value": 1}
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": [2, 3], "b": {"c": "y", "d/e": 1}}));
        assert!(json_patch(&mut t, &json!([{"op": "test", "path": "/b/c", "value": "z"}])).is_err());
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}

//! Two of the three patch types of the apiserver's PATCH handler (`endpoints/handlers/patch.go`): JSON merge patch
//! (RFC 7386, `evanphx/json-patch.MergePatch`) and JSON patch (RFC 6902). Strategic merge patches are applied by
//! `kubelet_apiclient::patch::apply_patch` with the patch strategies of each kind ([`strategic_schema`]).

use kubelet_apiclient::patch::schema::{Field, OBJECT_META, Schema};

use serde_json::{Map, Value};

/// The patch strategies of a served kind (its struct tags): Pods and Nodes as the kubelet's own schema, Services
/// (`spec.ports` by `port`), ServiceAccounts (`secrets` by `name`) and Namespaces (`status.conditions` by `type`),
/// and for every other kind only its metadata's.
pub fn strategic_schema(resource: &str) -> &'static Schema {
    static CONDITIONS: Schema = Schema { fields: &[Field::merge_by("conditions", "type", None)] };
    static SERVICE_SPEC: Schema = Schema { fields: &[Field::merge_by("ports", "port", None)] };
    static SERVICE: Schema = Schema {
        fields: &[
            Field::nested("metadata", &OBJECT_META),
            Field::nested("spec", &SERVICE_SPEC),
            Field::nested("status", &CONDITIONS),
        ],
    };
    static SERVICE_ACCOUNT: Schema =
        Schema { fields: &[Field::nested("metadata", &OBJECT_META), Field::merge_by("secrets", "name", None)] };
    static NAMESPACE: Schema =
        Schema { fields: &[Field::nested("metadata", &OBJECT_META), Field::nested("status", &CONDITIONS)] };
    match resource {
        "pods" => &kubelet_apiclient::patch::POD,
        "nodes" => &kubelet_apiclient::patch::NODE,
        "services" => &SERVICE,
        "serviceaccounts" => &SERVICE_ACCOUNT,
        "namespaces" => &NAMESPACE,
        _ => &kubelet_apiclient::patch::OBJECT,
    }
}

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

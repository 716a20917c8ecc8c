//! Two-way strategic merge patches (`k8s.io/apimachinery/pkg/util/strategicpatch` CreateTwoWayMergePatch), as the
//! status manager sends them: fields that disappeared become `null`, maps are diffed recursively, lists with a
//! merge key (`conditions` by `type`, `containerStatuses` by `name`, ...) are diffed element by element with
//! `$setElementOrder` and `$patch: delete` for removed elements, other lists are replaced whole.

use serde_json::{Map, Value};

/// Merge keys of the lists in pod and node status.
pub const MERGE_KEYS: [(&str, &str); 8] = [
    ("conditions", "type"),
    ("addresses", "type"),
    ("containerStatuses", "name"),
    ("initContainerStatuses", "name"),
    ("ephemeralContainerStatuses", "name"),
    ("podIPs", "ip"),
    ("hostIPs", "ip"),
    ("ownerReferences", "uid"),
];

fn merge_key(field: &str) -> Option<&'static str> {
    MERGE_KEYS.iter().find(|(f, _)| *f == field).map(|(_, k)| *k)
}

/// The patch turning `old` into `new` (both JSON objects); an empty object when they are equal.
pub fn two_way_merge_patch(old: &Value, new: &Value) -> Value {
    diff_maps(old.as_object().unwrap_or(&Map::new()), new.as_object().unwrap_or(&Map::new()))
}

fn diff_maps(old: &Map<String, Value>, new: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (k, nv) in new {
        match old.get(k) {
            Some(ov) if ov == nv => {}
            Some(Value::Object(o)) if nv.is_object() => {
                let d = diff_maps(o, nv.as_object().unwrap_or(&Map::new()));
                if d.as_object().is_some_and(|m| !m.is_empty()) {
                    out.insert(k.clone(), d);
                }
            }
            Some(Value::Array(o)) if nv.is_array() && merge_key(k).is_some() => {
                let mk = merge_key(k).unwrap_or("name");
                let n = nv.as_array().cloned().unwrap_or_default();
                let mut items = vec![];
                for ni in &n {
                    match o.iter().find(|oi| oi.get(mk).is_some() && oi.get(mk) == ni.get(mk)) {
                        Some(oi) if oi == ni => {}
                        Some(oi) => {
                            let mut d =
                                diff_maps(oi.as_object().unwrap_or(&Map::new()), ni.as_object().unwrap_or(&Map::new()));
                            if let (Some(m), Some(kv)) = (d.as_object_mut(), ni.get(mk)) {
                                m.insert(mk.to_string(), kv.clone());
                            }
                            items.push(d);
                        }
                        None => items.push(ni.clone()),
                    }
                }
                for oi in o {
                    if !n.iter().any(|ni| ni.get(mk) == oi.get(mk)) {
                        items.push(
                            serde_json::json!({ mk: oi.get(mk).cloned().unwrap_or(Value::Null), "$patch": "delete" }),
                        );
                    }
                }
                if !items.is_empty() {
                    let order: Vec<Value> = n
                        .iter()
                        .map(|ni| serde_json::json!({ mk: ni.get(mk).cloned().unwrap_or(Value::Null) }))
                        .collect();
                    out.insert(format!("$setElementOrder/{k}"), Value::Array(order));
                    out.insert(k.clone(), Value::Array(items));
                }
            }
            _ => {
                out.insert(k.clone(), nv.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            out.insert(k.clone(), Value::Null);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::strategic_merge;
    use serde_json::json;

    #[test]
    fn patch_applied_to_old_gives_new() {
        let old = json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}, {"type": "Old", "status": "True"}],
            "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}], "message": "x"});
        let new = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "a", "state": {"running": {"startedAt": "t"}}}]});
        let p = two_way_merge_patch(&old, &new);
        assert_eq!(p["containerStatuses"][0]["state"]["waiting"], Value::Null, "removed fields become null: {p}");
        assert_eq!(p["message"], Value::Null);
        let mut applied = old.clone();
        strategic_merge(&mut applied, &p);
        assert_eq!(applied, new);
        assert_eq!(two_way_merge_patch(&new, &new), json!({}));
    }
}

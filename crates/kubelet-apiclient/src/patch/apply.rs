//! Applying a strategic merge patch as the apiserver does (`strategicpatch/patch.go`
//! `StrategicMergeMapPatchUsingLookupPatchMeta`: `mergeMap` with `MergeParallelList` and
//! `IgnoreUnmatchedNulls`), for the in-memory apiserver and the round-trip tests: `$patch` directives
//! (`replace`, `delete`), `$retainKeys`, `$setElementOrder/<list>` (merged first, then ordered),
//! `$deleteFromPrimitiveList/<list>`, `null` deletes, merge lists by key (or as sets of primitives), other lists
//! replaced. Errors are the ones upstream reports, including the one a real apiserver hits as a panic: an order
//! list for a list without a merge key whose items are maps.

use serde_json::{Map, Value};

use super::PatchError;
use super::diff::{
    DELETE_FROM_PRIMITIVE_LIST, DIRECTIVE, RETAIN_KEYS, SET_ELEMENT_ORDER, index, normalize_slice_order,
};
use super::golike::{Kind, dedup_scalars, kind, map_with_key, merge_key_value, slice_element_kind};
use super::schema::{Schema, lookup};

/// Applies `patch` to `target` (both JSON objects) with the patch metadata of `schema`.
pub fn apply_patch(target: &mut Value, patch: &Value, schema: &'static Schema) -> Result<(), PatchError> {
    let original = match std::mem::take(target) {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        _ => return Err(PatchError::NotAnObject),
    };
    let Value::Object(p) = patch else { return Err(PatchError::NotAnObject) };
    *target = Value::Object(merge_map(original, p.clone(), Some(schema))?);
    Ok(())
}

/// `mergeMap`.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Option<&'static Schema>,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(PatchError::BadDirective(d.to_string())),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_ordered_lists(&mut original, &mut patch, schema)?;
    for (k, pv) in patch {
        let (k, delete_list) = match k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => (suffix(rest)?, true),
            None => (k, false),
        };
        if pv.is_null() {
            original.remove(&k);
            continue;
        }
        let Some(ov) = original.remove(&k) else {
            if !delete_list && let Some(v) = without_nulls_and_directives(pv) {
                original.insert(k, v);
            }
            continue;
        };
        if kind(&ov) != kind(&pv) {
            if delete_list {
                original.insert(k, ov);
            } else if let Some(v) = without_nulls_and_directives(pv) {
                original.insert(k, v);
            }
            continue;
        }
        let field = lookup(schema, &k);
        let merged = match (ov, pv) {
            (Value::Object(o), Value::Object(p)) => Value::Object(merge_map(o, p, field.ty)?),
            (Value::Array(o), Value::Array(p)) => {
                if field.merge || delete_list {
                    Value::Array(merge_slice(o, p, field.ty, field.merge_key, delete_list)?)
                } else {
                    Value::Array(p)
                }
            }
            (_, pv) => match remove_directives(pv) {
                Some(v) => v,
                None => continue,
            },
        };
        original.insert(k, merged);
    }
    Ok(original)
}

/// The list name after `$setElementOrder` / `$deleteFromPrimitiveList` (`extractKey`).
fn suffix(rest: &str) -> Result<String, PatchError> {
    rest.strip_prefix('/').map(str::to_string).ok_or_else(|| PatchError::BadDirective(rest.to_string()))
}

/// `applyRetainKeysDirective`: every key of the patch must be listed; keys of `original` not listed go.
fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<(), PatchError> {
    let Some(list) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(list) = list else { return Err(PatchError::BadRetainKeys) };
    let listed = |k: &str| list.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if !listed(k) {
            return Err(PatchError::BadRetainKeys);
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `mergePatchIntoOriginal`: the lists named by a `$setElementOrder` are merged first and put in that order
/// (patch items in the order list's order, items only on the server kept where they were).
fn merge_ordered_lists(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Option<&'static Schema>,
) -> Result<(), PatchError> {
    let order_keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for ok in order_keys {
        let Some(Value::Array(order)) = patch.remove(&ok) else { return Err(PatchError::BadSetElementOrder) };
        let key = suffix(&ok[SET_ELEMENT_ORDER.len()..])?;
        let as_list = |v: Option<&Value>| match v {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a.clone())),
            Some(other) => Err(PatchError::NotAList(other.to_string())),
        };
        let original_list = as_list(original.get(&key))?;
        let patch_list = as_list(patch.get(&key))?;
        let field = lookup(schema, &key);
        let mk = if field.merge { field.merge_key } else { "" };
        validate_patch_with_order(patch_list.as_deref().unwrap_or(&[]), &order, mk)?;
        let merged = match (&original_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => match remove_directives(Value::Array(p.clone())) {
                Some(Value::Array(v)) => v,
                _ => continue,
            },
            (Some(o), Some(p)) => {
                if field.merge {
                    merge_slice(o.clone(), p.clone(), field.ty, field.merge_key, false)?
                } else {
                    p.clone()
                }
            }
            (None, None) => continue,
        };
        let element_kind =
            slice_element_kind(&[original_list.as_deref().unwrap_or(&[]), patch_list.as_deref().unwrap_or(&[])])?;
        let (in_order, server_only) = partition(merged, &order, mk, element_kind)?;
        let both = normalize_element_order(
            in_order,
            server_only,
            &order,
            original_list.as_deref().unwrap_or(&[]),
            mk,
            element_kind,
        )?;
        original.insert(key.clone(), Value::Array(both));
        patch.remove(&key);
    }
    Ok(())
}

/// `validatePatchWithSetOrderList`: the patch list's items (deletions aside) appear in the order list, in its
/// order. Without a merge key Go compares the items themselves with `==`, which panics on maps
/// (`comparing uncomparable type map[string]interface {}`); that is an error here.
fn validate_patch_with_order(patch_list: &[Value], order: &[Value], merge_key: &str) -> Result<(), PatchError> {
    if patch_list.is_empty() || order.is_empty() {
        return Ok(());
    }
    let items: Vec<&Value> = if merge_key.is_empty() {
        patch_list.iter().collect()
    } else {
        patch_list.iter().filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete")).collect()
    };
    let equal = |a: &Value, b: &Value| -> Result<bool, PatchError> {
        if merge_key.is_empty() {
            if a.is_object() || a.is_array() || b.is_object() || b.is_array() {
                return Err(PatchError::Uncomparable(a.to_string()));
            }
            return Ok(a == b);
        }
        Ok(map_with_key(a, merge_key)?.1 == map_with_key(b, merge_key)?.1)
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < items.len() && oi < order.len() {
        if items[pi].get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if equal(items[pi], &order[oi])? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < items.len() {
        return Err(PatchError::BadSetElementOrder);
    }
    Ok(())
}

/// `mergeSlice`.
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Option<&'static Schema>,
    merge_key: &str,
    delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let element_kind = slice_element_kind(&[&original, &patch])?;
    let (server_order, patch, merged) = if element_kind != Kind::Map {
        if delete_list {
            return Ok(original.into_iter().filter(|v| !patch.contains(v)).collect());
        }
        let merged = dedup_scalars(original.iter().chain(&patch).cloned().collect());
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::NoMergeKey);
        }
        let (original, patch) = merge_special_elements(original, patch, merge_key)?;
        let mut merged = original.clone();
        for p in &patch {
            let (pm, pk) = map_with_key(p, merge_key)?;
            match find_by_key(&merged, merge_key, pk)? {
                Some(i) => {
                    // `find_by_key` found a map there.
                    if let Value::Object(om) = std::mem::take(&mut merged[i]) {
                        merged[i] = Value::Object(merge_map(om, pm.clone(), schema)?);
                    }
                }
                None => merged.push(p.clone()),
            }
        }
        (original, patch, merged)
    };
    let (in_patch, server_only) = partition(merged, &patch, merge_key, element_kind)?;
    normalize_element_order(in_patch, server_only, &patch, &server_order, merge_key, element_kind)
}

/// `mergeSliceWithSpecialElements`: applies the `$patch: delete` items to `original`; a `$patch: replace`
/// item makes the patch's other items the whole list.
fn merge_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        match v.get(DIRECTIVE) {
            None => plain.push(v),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let k = merge_key_value(&v, merge_key).ok_or_else(|| PatchError::MissingMergeKey {
                        item: v.to_string(),
                        key: merge_key.to_string(),
                    })?;
                    while let Some(i) = find_by_key(&original, merge_key, k)? {
                        original.remove(i);
                    }
                }
                Some("replace") => replace = true,
                _ => return Err(PatchError::BadDirective(d.to_string())),
            },
        }
    }
    Ok(if replace { (plain, Vec::new()) } else { (original, plain) })
}

/// `findMapInSliceBasedOnKeyValue`.
fn find_by_key(list: &[Value], merge_key: &str, value: &Value) -> Result<Option<usize>, PatchError> {
    for (i, v) in list.iter().enumerate() {
        let m = v.as_object().ok_or_else(|| PatchError::NotAMap(v.to_string()))?;
        if m.get(merge_key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// `partitionMapsByPresentInList` / `partitionPrimitivesByPresentInList`.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
    element_kind: Kind,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    if merge_key.is_empty() && element_kind == Kind::Map {
        // Go puts the items in a map as keys: maps are not hashable (a panic there).
        return Err(PatchError::Uncomparable(by.first().map(Value::to_string).unwrap_or_default()));
    }
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    for v in merged {
        let present = if element_kind != Kind::Map {
            by.contains(&v)
        } else {
            let (_, k) = map_with_key(&v, merge_key)?;
            find_by_key(by, merge_key, k)?.is_some()
        };
        if present { inside.push(v) } else { outside.push(v) }
    }
    Ok((inside, outside))
}

/// `normalizeElementOrder` + `mergeSortedSlice`: patch items in the patch order, server-only items in the
/// server order, interleaved so that a server-only item goes before the first patch item it preceded.
fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    element_kind: Kind,
) -> Result<Vec<Value>, PatchError> {
    let right = normalize_slice_order(patch, patch_order, merge_key, element_kind)?;
    let left = normalize_slice_order(server_only, server_order, merge_key, element_kind)?;
    let pos = |v: &Value| index(server_order, v, merge_key, element_kind);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => matches!((pos(a), pos(b)), (Some(x), Some(y)) if x < y),
        };
        out.extend(if take_left { l.next() } else { r.next() });
    }
    Ok(out)
}

/// `removeDirectives`: `None` when the value itself is a directive map (and must not be kept).
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(m.into_iter().filter_map(|(k, v)| remove_directives(v).map(|v| (k, v))).collect()))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(remove_directives).collect())),
        other => Some(other),
    }
}

/// `discardNullValuesFromPatch` then `removeDirectives` (a value new to the object).
fn without_nulls_and_directives(v: Value) -> Option<Value> {
    fn discard_nulls(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, v| !v.is_null());
                m.values_mut().for_each(discard_nulls);
            }
            Value::Array(a) => a.iter_mut().for_each(discard_nulls),
            _ => {}
        }
    }
    let mut v = v;
    discard_nulls(&mut v);
    remove_directives(v)
}

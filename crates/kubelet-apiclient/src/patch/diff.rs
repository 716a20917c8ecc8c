//! The two-way diff (`strategicpatch/patch.go`: `diffMaps`, `handleMapDiff`, `handleSliceDiff`, `diffLists`,
//! `diffListsOfMaps`, `diffListsOfScalars`, `normalizeSliceOrder`, `isOrderSame`) with the options
//! `CreateTwoWayMergeMapPatchUsingLookupPatchMeta` passes: `SetElementOrder: true`, `IgnoreChangesAndAdditions`
//! and `IgnoreDeletions` false. With those options the conditions of the Go code reduce to the ones written here.

use serde_json::{Map, Value, json};

use super::PatchError;
use super::golike::{
    Kind, dedup_scalars, fmt_v, go_sort_by_key, go_stable_sort_by_pos, kind, map_with_key, merge_key_value,
    slice_element_kind,
};
use super::schema::{Schema, lookup};

pub(crate) const DIRECTIVE: &str = "$patch";
pub(crate) const RETAIN_KEYS: &str = "$retainKeys";
pub(crate) const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
pub(crate) const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// `diffMaps`: the patch turning `original` into `modified`; `retain_keys` builds the `$retainKeys` directive
/// (set for the fields tagged `retainKeys`).
pub(crate) fn diff_maps(
    original: &Map<String, Value>,
    modified: &Map<String, Value>,
    schema: Option<&'static Schema>,
    retain_keys: bool,
) -> Result<Map<String, Value>, PatchError> {
    let mut patch = Map::new();
    let mut retain: Vec<String> = Vec::new();
    for (key, mv) in modified {
        if retain_keys && !mv.is_null() {
            retain.push(key.clone());
        }
        let Some(ov) = original.get(key) else {
            // Added.
            patch.insert(key.clone(), mv.clone());
            continue;
        };
        if key == DIRECTIVE {
            // `handleDirectiveMarker`.
            let (Some(o), Some(m)) = (ov.as_str(), mv.as_str()) else {
                return Err(PatchError::BadDirective(key.clone()));
            };
            if o != m {
                patch.insert(key.clone(), mv.clone());
            }
            continue;
        }
        if kind(ov) != kind(mv) {
            patch.insert(key.clone(), mv.clone());
            continue;
        }
        match (ov, mv) {
            (Value::Object(o), Value::Object(m)) => {
                // `handleMapDiff`: no struct field of the core types is tagged `replace`, so always recurse.
                let field = lookup(schema, key);
                let p = diff_maps(o, m, field.ty, field.retain_keys)?;
                if !p.is_empty() {
                    patch.insert(key.clone(), Value::Object(p));
                }
            }
            (Value::Array(o), Value::Array(m)) => handle_slice_diff(key, o, m, schema, &mut patch)?,
            _ => {
                if ov != mv {
                    patch.insert(key.clone(), mv.clone());
                }
            }
        }
    }
    // `updatePatchIfMissing`: removed keys become null.
    for key in original.keys() {
        if !modified.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    // `hasAdditionalNewField` only adds the case of a removed key, which already made the patch non-empty.
    if !retain.is_empty() && !patch.is_empty() {
        // `sortScalars` of distinct strings: plain byte order.
        retain.sort();
        patch.insert(RETAIN_KEYS.to_string(), Value::Array(retain.into_iter().map(Value::String).collect()));
    }
    Ok(patch)
}

/// `handleSliceDiff`.
fn handle_slice_diff(
    key: &str,
    original: &[Value],
    modified: &[Value],
    schema: Option<&'static Schema>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let field = lookup(schema, key);
    if !field.merge {
        if original != modified {
            patch.insert(key.to_string(), Value::Array(modified.to_vec()));
        }
        return Ok(());
    }
    let lists = diff_lists(original, modified, field.ty, field.merge_key, field.retain_keys)?;
    if !lists.patch.is_empty() {
        patch.insert(key.to_string(), Value::Array(lists.patch));
    }
    if !lists.delete.is_empty() {
        patch.insert(format!("{DELETE_FROM_PRIMITIVE_LIST}/{key}"), Value::Array(lists.delete));
    }
    if !lists.order.is_empty() {
        patch.insert(format!("{SET_ELEMENT_ORDER}/{key}"), Value::Array(lists.order));
    }
    Ok(())
}

/// What `diffLists` returns: the patch list, the parallel deletion list (primitives) and the order list.
#[derive(Default)]
struct ListDiff {
    patch: Vec<Value>,
    delete: Vec<Value>,
    order: Vec<Value>,
}

/// `diffLists` for a list with the merge strategy.
fn diff_lists(
    original: &[Value],
    modified: &[Value],
    schema: Option<&'static Schema>,
    merge_key: &str,
    retain_keys: bool,
) -> Result<ListDiff, PatchError> {
    if original.is_empty() {
        // Everything is new: the list as it is, without an order list.
        return Ok(ListDiff { patch: modified.to_vec(), ..Default::default() });
    }
    match slice_element_kind(&[original, modified])? {
        Kind::Map => {
            let (patch, deletions) = diff_lists_of_maps(original, modified, schema, merge_key, retain_keys)?;
            let mut patch = normalize_slice_order(patch, modified, merge_key, Kind::Map)?;
            let order_same = is_order_same(original, modified, merge_key)?;
            patch.extend(deletions);
            let mut order = Vec::new();
            if !patch.is_empty() || !order_same {
                for v in modified {
                    let (_, k) = map_with_key(v, merge_key)?;
                    order.push(json!({ merge_key: k }));
                }
            }
            Ok(ListDiff { patch, delete: Vec::new(), order })
        }
        scalar => {
            // `diffListsOfScalars` sorts `original` in place, and `diffLists` then compares that sorted list
            // with `modified` to decide on the order list: an unsorted list that did not change still gets one.
            let sorted_original = go_sort_by_key(original.to_vec(), |v| fmt_v(Some(v)));
            let (adds, deletions) = diff_lists_of_scalars(&sorted_original, modified);
            let patch = normalize_slice_order(adds, modified, merge_key, scalar)?;
            let order =
                if !deletions.is_empty() || sorted_original != modified { modified.to_vec() } else { Vec::new() };
            Ok(ListDiff { patch, delete: deletions, order })
        }
    }
}

/// `diffListsOfMaps`: walks both lists sorted by the merge key's `%v` string; returns the additions and changes
/// (a changed element as its diff plus the merge key) and the `$patch: delete` entries.
fn diff_lists_of_maps(
    original: &[Value],
    modified: &[Value],
    schema: Option<&'static Schema>,
    merge_key: &str,
    retain_keys: bool,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let by_key = |v: &&Value| fmt_v(merge_key_value(v, merge_key));
    let original_sorted = go_sort_by_key(original.iter().collect(), by_key);
    let modified_sorted = go_sort_by_key(modified.iter().collect(), by_key);
    let mut patch = Vec::new();
    let mut deletions = Vec::new();
    let (mut oi, mut mi) = (0, 0);
    loop {
        let o = original_sorted.get(oi).map(|v| map_with_key(v, merge_key)).transpose()?;
        let m = modified_sorted.get(mi).map(|v| map_with_key(v, merge_key)).transpose()?;
        match (o, m) {
            (None, None) => break,
            (Some((oe, ok)), Some((me, mk))) if fmt_v(Some(ok)) == fmt_v(Some(mk)) => {
                let mut p = diff_maps(oe, me, schema, retain_keys)?;
                if !p.is_empty() {
                    p.insert(merge_key.to_string(), mk.clone());
                    patch.push(Value::Object(p));
                }
                oi += 1;
                mi += 1;
            }
            (None, Some((me, _))) => {
                patch.push(Value::Object(me.clone()));
                mi += 1;
            }
            (Some((_, ok)), Some((me, mk))) if fmt_v(Some(ok)) > fmt_v(Some(mk)) => {
                patch.push(Value::Object(me.clone()));
                mi += 1;
            }
            (Some((_, ok)), _) => {
                // Only in original (the modified element, if any, sorts after it): deleted.
                deletions.push(json!({ merge_key: ok, DIRECTIVE: "delete" }));
                oi += 1;
            }
        }
    }
    Ok((patch, deletions))
}

/// `diffListsOfScalars` (on the already sorted original): the added and the deleted values, compared by their
/// `%v` strings; the deletions deduplicated the way Go does it.
fn diff_lists_of_scalars(sorted_original: &[Value], modified: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let sorted_modified = go_sort_by_key(modified.to_vec(), |v| fmt_v(Some(v)));
    let (mut adds, mut deletions) = (Vec::new(), Vec::new());
    let (mut oi, mut mi) = (0, 0);
    loop {
        match (sorted_original.get(oi), sorted_modified.get(mi)) {
            (None, None) => break,
            (Some(o), Some(m)) if fmt_v(Some(o)) == fmt_v(Some(m)) => {
                oi += 1;
                mi += 1;
            }
            (None, Some(m)) => {
                adds.push(m.clone());
                mi += 1;
            }
            (Some(o), Some(m)) if fmt_v(Some(o)) > fmt_v(Some(m)) => {
                adds.push(m.clone());
                mi += 1;
            }
            (Some(o), _) => {
                deletions.push(o.clone());
                oi += 1;
            }
        }
    }
    (adds, dedup_scalars(deletions))
}

/// `normalizeSliceOrder`: the items in the order of `order` (by merge key for maps, by value for scalars), the
/// `$patch: delete` entries moved to the end.
pub(crate) fn normalize_slice_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: Kind,
) -> Result<Vec<Value>, PatchError> {
    let mut deletions = Vec::new();
    let mut keep = items;
    if kind == Kind::Map {
        for v in keep.iter().chain(order) {
            map_with_key(v, merge_key)?;
        }
        let (k, d): (Vec<Value>, Vec<Value>) =
            keep.into_iter().partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"));
        keep = k;
        deletions = d;
    }
    let mut sorted = go_stable_sort_by_pos(keep, |v| index(order, v, merge_key, kind));
    sorted.extend(deletions);
    Ok(sorted)
}

/// `index`: the first position of `v` in `list` (compared by merge key value for maps).
pub(crate) fn index(list: &[Value], v: &Value, merge_key: &str, kind: Kind) -> Option<usize> {
    if kind == Kind::Map {
        let want = merge_key_value(v, merge_key);
        list.iter().position(|x| merge_key_value(x, merge_key) == want)
    } else {
        list.iter().position(|x| x == v)
    }
}

/// `isOrderSame`: same length and the same merge keys position by position.
fn is_order_same(original: &[Value], modified: &[Value], merge_key: &str) -> Result<bool, PatchError> {
    if original.len() != modified.len() {
        return Ok(false);
    }
    for (o, m) in original.iter().zip(modified) {
        if map_with_key(o, merge_key)?.1 != map_with_key(m, merge_key)?.1 {
            return Ok(false);
        }
    }
    Ok(true)
}

//! Two-way strategic merge patches, as the Go kubelet sends them for `pods/status` and `nodes/status`.
//!
//! Mirrors, at the Kubernetes snapshot the test apiserver is built from:
//! - `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`: `CreateTwoWayMergePatch` (`diffMaps`,
//!   `handleSliceDiff`, `diffLists`, `diffListsOfMaps`, `diffListsOfScalars`) in [`two_way_merge_patch`], and
//!   `StrategicMergeMapPatch` (`mergeMap`, `mergeSlice`, `mergePatchIntoOriginal`) in [`apply_patch`];
//! - `strategicpatch/meta.go` and `third_party/forked/golang/json/fields.go` (patch metadata from struct tags),
//!   with the tags of `staging/src/k8s.io/api/core/v1/types.go` and `apimachinery/pkg/apis/meta/v1/types.go`
//!   written down in [`schema`];
//! - `pkg/util/pod/pod.go` `preparePatchBytesForPodStatus` in [`pod_status_patch`];
//! - `staging/src/k8s.io/component-helpers/node/util/status.go` `preparePatchBytesforNodeStatus` (what
//!   `PatchNodeStatus` sends) in [`node_status_patch`].
//!
//! Contract: for two JSON objects, [`two_way_merge_patch`] returns the patch `CreateTwoWayMergePatch` returns
//! for the same documents and the same type, equal as JSON values: map keys in any order, list items in
//! upstream's order. That is: added and changed keys carry the new value (maps are diffed recursively), removed
//! keys are `null`; lists without a patch strategy are replaced whole when they differ; lists of maps with
//! `patchStrategy:"merge"` carry the changed items (their diff plus the merge key) and the added items in the
//! new list's order, then `{"$patch": "delete", <key>: <value>}` for the removed ones, and
//! `$setElementOrder/<list>` (the merge keys of the whole new list) whenever something changed or the order
//! did; a list that was empty is sent whole, without an order list; merged lists of primitives carry the added
//! values, `$deleteFromPrimitiveList/<list>` and `$setElementOrder/<list>`; maps of fields tagged `retainKeys`
//! carry `$retainKeys`. Nothing changed gives `{}`. Errors (a merge list item without its merge key, a list
//! mixing types) are the ones upstream returns, typed as [`PatchError`].
//!
//! The JSON is what `k8s-openapi` serializes. Where Go's encoder writes something else for the same object
//! (`null` for a zero `metav1.Time` such as `lastProbeTime`, `{}` for an empty `ContainerState`), the patches
//! differ in those values only, never in what they do to the object.

mod apply;
mod diff;
mod golike;
pub mod schema;

use k8s_openapi::api::core::v1::{Node, PodStatus};
use serde_json::{Map, Value, json};

pub use apply::apply_patch;
pub use schema::{NODE, OBJECT, POD, Schema};

/// Why a patch cannot be computed or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A document or patch that is not a JSON object (`mergepatch.ErrBadJSONDoc`).
    #[error("invalid JSON document: not an object")]
    NotAnObject,
    /// An item of a merged list lacks the merge key (`mergepatch.ErrNoMergeKey`).
    #[error("map: {item} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The item.
        item: String,
        /// The merge key.
        key: String,
    },
    /// An item of a merged list of maps is not a map (`mergepatch.ErrBadArgType`).
    #[error("expected a map, but received {0}")]
    NotAMap(String),
    /// A value where a list is expected is not one.
    #[error("expected a list, but received {0}")]
    NotAList(String),
    /// A list of lists (`mergepatch.ErrNoListOfLists`).
    #[error("lists of lists are not supported")]
    ListOfLists,
    /// A list whose items are of different types.
    #[error("list element types are not identical")]
    MixedList,
    /// A `null` item in a merged list (Go dereferences its nil type).
    #[error("list element is null")]
    NullListItem,
    /// Lists that should give an element type have no elements.
    #[error("no elements in any of the given slices")]
    EmptyLists,
    /// A `$patch` directive that is not `replace`/`delete` (or not a string), or a malformed directive key.
    #[error("unknown or malformed patch directive {0}")]
    BadDirective(String),
    /// A `$retainKeys` that is not a list or does not list a key of the patch.
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    /// A `$setElementOrder` that is not a list, or whose order the patch list does not follow.
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    /// Merging a list of maps that has no merge key.
    #[error("cannot merge lists without merge key")]
    NoMergeKey,
    /// Comparing maps with `==`, as upstream does for an order list of a list without merge key (a panic in Go:
    /// `comparing uncomparable type map[string]interface {}`).
    #[error("comparing uncomparable type map[string]interface {{}}: {0}")]
    Uncomparable(String),
    /// The object could not be serialized.
    #[error("cannot serialize the object: {0}")]
    Serialize(String),
}

impl PatchError {
    /// The HTTP status an apiserver answers a patch that fails this way with (`endpoints/handlers/patch.go`
    /// interpretStrategicMergePatchError): 400 for a malformed document or directive list, 422 for lists of
    /// lists, 500 for the rest (a real apiserver panics on an order list of maps without merge key, also a 500).
    pub fn http_status(&self) -> u16 {
        match self {
            PatchError::NotAnObject | PatchError::BadRetainKeys | PatchError::BadSetElementOrder => 400,
            PatchError::ListOfLists => 422,
            _ => 500,
        }
    }
}

fn as_map(v: &Value) -> Result<Map<String, Value>, PatchError> {
    match v {
        Value::Object(m) => Ok(m.clone()),
        // `json.Unmarshal("null", &map)` leaves an empty map.
        Value::Null => Ok(Map::new()),
        _ => Err(PatchError::NotAnObject),
    }
}

fn to_json<T: serde::Serialize>(t: &T) -> Result<Value, PatchError> {
    serde_json::to_value(t).map_err(|e| PatchError::Serialize(e.to_string()))
}

/// `CreateTwoWayMergePatch(original, modified, <type of schema>)`: the patch turning `original` into `modified`
/// (both JSON objects); `{}` when they are equal.
pub fn two_way_merge_patch(original: &Value, modified: &Value, schema: &'static Schema) -> Result<Value, PatchError> {
    diff::diff_maps(&as_map(original)?, &as_map(modified)?, Some(schema), false).map(Value::Object)
}

/// A `pods/status` patch and whether it changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct PodStatusPatch {
    /// The patch: `metadata.uid` (a precondition) and the status diff.
    pub patch: Value,
    /// The patch carries the UID only: nothing to send.
    pub unchanged: bool,
}

/// `preparePatchBytesForPodStatus`: the diff of `Pod{status: old}` and `Pod{metadata: {uid}, status: new}` with
/// the Pod's patch metadata, so the patch carries `{"metadata":{"uid":<uid>}}` as a precondition.
/// `unchanged` when that is all it carries (upstream compares the bytes with `{"metadata":{"uid":"<uid>"}}`; with
/// an empty UID it would send `{}`, here that is `unchanged` too).
pub fn pod_status_patch(old: &PodStatus, new: &PodStatus, uid: &str) -> Result<PodStatusPatch, PatchError> {
    let original = json!({ "metadata": {}, "status": to_json(old)? });
    let metadata = if uid.is_empty() { json!({}) } else { json!({ "uid": uid }) };
    let modified = json!({ "metadata": metadata, "status": to_json(new)? });
    let patch = two_way_merge_patch(&original, &modified, &POD)?;
    let precondition_only = if uid.is_empty() { json!({}) } else { json!({ "metadata": { "uid": uid } }) };
    let unchanged = patch == precondition_only;
    Ok(PodStatusPatch { patch, unchanged })
}

/// `preparePatchBytesforNodeStatus`: the diff of `old` and `new` with the Node's patch metadata, `new`'s spec
/// reset to `old`'s (only status and metadata are patched). `status.addresses` is tagged merge-by-`type`, which
/// cannot express two addresses of one type: when the addresses changed (and there were some), the patch
/// replaces the list instead: `[<new addresses>..., {"$patch": "replace"}]`.
pub fn node_status_patch(old: &Node, new: &Node) -> Result<Value, PatchError> {
    let old_addresses = old.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    let new_addresses = new.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    // `equality.Semantic.DeepEqual`: a missing list equals an empty one.
    let replace_addresses = !old_addresses.is_empty() && old_addresses != new_addresses;
    let mut diff_node = new.clone();
    diff_node.spec = old.spec.clone();
    if replace_addresses {
        let old_list = old.status.as_ref().and_then(|s| s.addresses.clone());
        diff_node.status.get_or_insert_default().addresses = old_list;
    }
    let mut patch = two_way_merge_patch(&to_json(old)?, &to_json(&diff_node)?, &NODE)?;
    if replace_addresses {
        let mut list = match to_json(&new.status.as_ref().and_then(|s| s.addresses.clone()))? {
            Value::Array(a) => a,
            _ => Vec::new(),
        };
        list.push(json!({ "$patch": "replace" }));
        let Value::Object(p) = &mut patch else { return Err(PatchError::NotAnObject) };
        let status = p.entry("status").or_insert(Value::Null);
        if status.is_null() {
            *status = json!({});
        }
        let Value::Object(s) = status else { return Err(PatchError::NotAnObject) };
        s.insert("addresses".into(), Value::Array(list));
    }
    Ok(patch)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod upstream_tests;

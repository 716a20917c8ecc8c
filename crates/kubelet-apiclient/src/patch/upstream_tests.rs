//! Upstream's own cases (`strategicpatch/patch_test.go`), run against the same test type (`MergeItem`,
//! `RetainKeysMergeItem`, described here as a [`Schema`]).
//!
//! `testdata/upstream_raw_cases.json` holds `strategicMergePatchRawTestCases` (Original, Modified, TwoWay,
//! TwoWayResult of each, converted from the YAML in the Go file). Upstream compares those patches as bytes
//! without sorting any list, so they pin the order of list items too; `testTwoWayPatchForRawTestCase` also
//! applies each patch to the original and expects TwoWayResult (or Modified).

use serde_json::{Value, json};

use super::schema::{Field, Schema};
use super::{PatchError, apply_patch, two_way_merge_patch};

/// `MergeItem` of `patch_test.go`.
static MERGE_ITEM: Schema = Schema {
    fields: &[
        Field::plain("name"),
        Field::plain("value"),
        Field::plain("other"),
        Field::merge_by("mergingList", "name", Some(&MERGE_ITEM)),
        Field::nested("nonMergingList", &MERGE_ITEM),
        Field::merge_set("mergingIntList"),
        Field::atomic("nonMergingIntList"),
        Field::merge_by("mergeItemPtr", "name", Some(&MERGE_ITEM)),
        Field::plain("simpleMap"),
        Field::nested("retainKeysMap", &RETAIN_KEYS_MERGE_ITEM).retain_keys(),
        Field::merge_by("retainKeysMergingList", "name", Some(&MERGE_ITEM)).retain_keys(),
    ],
};

/// `RetainKeysMergeItem` of `patch_test.go`.
static RETAIN_KEYS_MERGE_ITEM: Schema = Schema {
    fields: &[
        Field::plain("name"),
        Field::plain("value"),
        Field::plain("other"),
        Field::plain("simpleMap"),
        Field::merge_set("mergingIntList"),
        Field::merge_by("mergingList", "name", Some(&MERGE_ITEM)),
    ],
};

#[test]
fn upstream_raw_two_way_cases_give_the_same_patches_and_results() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("testdata/upstream_raw_cases.json")).expect("valid test data");
    assert_eq!(cases.len(), 94);
    for c in &cases {
        let name = c["description"].as_str().unwrap_or_default();
        let patch =
            two_way_merge_patch(&c["original"], &c["modified"], &MERGE_ITEM).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(patch, c["two_way"], "patch of {name:?}");
        let mut result = c["original"].clone();
        apply_patch(&mut result, &patch, &MERGE_ITEM).unwrap_or_else(|e| panic!("{name}: applying: {e}"));
        let want = c.get("two_way_result").unwrap_or(&c["modified"]);
        assert_eq!(&result, want, "result of {name:?}");
    }
}

fn apply(original: Value, patch: Value) -> Result<Value, PatchError> {
    let mut v = original;
    apply_patch(&mut v, &patch, &MERGE_ITEM)?;
    Ok(v)
}

/// `customStrategicMergePatchRawTestCases`: patches written by hand, applied.
#[test]
fn upstream_custom_cases_apply_as_upstream() {
    // "$setElementOrder contains item that is not present in the list to be merged"
    let r = apply(
        json!({"mergingList": [{"name": 1}, {"name": 3}]}),
        json!({"$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
               "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
    );
    assert_eq!(r, Ok(json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]})));
    // ... in the int list
    let r = apply(json!({"mergingIntList": [1, 3]}), json!({"$setElementOrder/mergingIntList": [3, 2, 1]}));
    assert_eq!(r, Ok(json!({"mergingIntList": [3, 1]})));
    // "should check if order in $setElementOrder and patch list match"
    let r = apply(
        json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
        json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
               "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
    );
    assert_eq!(r, Err(PatchError::BadSetElementOrder));
    let r = apply(
        json!({"mergingIntList": [1, 3, 2]}),
        json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
    );
    assert_eq!(r, Err(PatchError::BadSetElementOrder));
    // "missing merge key should error out"
    let r = apply(json!({"mergingList": [{"name": 1, "value": "a"}]}), json!({"mergingList": [{"value": "b"}]}));
    assert!(matches!(r, Err(PatchError::MissingMergeKey { .. })), "{r:?}");
    // "$deleteFromPrimitiveList of nonexistent item in primitive list should not add the item to the list"
    let r = apply(json!({"mergingIntList": [1, 2]}), json!({"$deleteFromPrimitiveList/mergingIntList": [3]}));
    assert_eq!(r, Ok(json!({"mergingIntList": [1, 2]})));
    // "... on empty primitive list ..."
    let r = apply(json!({"mergingIntList": null}), json!({"$deleteFromPrimitiveList/mergingIntList": [3]}));
    assert_eq!(r, Ok(json!({"mergingIntList": null})));
    // "... on nonexistent primitive list should not add the primitive list"
    let r = apply(json!({"foo": ["bar"]}), json!({"$deleteFromPrimitiveList/mergingIntList": [3]}));
    assert_eq!(r, Ok(json!({"foo": ["bar"]})));
    // "... should delete item from a list with merge patch strategy" / "... without merge patch strategy"
    let r = apply(json!({"mergingIntList": [1, 2, 3]}), json!({"$deleteFromPrimitiveList/mergingIntList": [2]}));
    assert_eq!(r, Ok(json!({"mergingIntList": [1, 3]})));
    let r = apply(json!({"nonMergingIntList": [1, 2, 3]}), json!({"$deleteFromPrimitiveList/nonMergingIntList": [2]}));
    assert_eq!(r, Ok(json!({"nonMergingIntList": [1, 3]})));
}

/// A merge list item without its merge key: the diff fails as upstream's (`getMapAndMergeKeyValueByIndex`
/// returns `ErrNoMergeKey`), unless the original list is empty (then the new list is sent as it is).
#[test]
fn items_without_the_merge_key() {
    let r = two_way_merge_patch(
        &json!({"mergingList": [{"name": "a"}]}),
        &json!({"mergingList": [{"name": "a"}, {"value": "x"}]}),
        &MERGE_ITEM,
    );
    assert!(matches!(r, Err(PatchError::MissingMergeKey { ref key, .. }) if key == "name"), "{r:?}");
    let r = two_way_merge_patch(&json!({"mergingList": []}), &json!({"mergingList": [{"value": "x"}]}), &MERGE_ITEM);
    assert_eq!(r, Ok(json!({"mergingList": [{"value": "x"}]})));
    // Items of mixed types.
    let r = two_way_merge_patch(&json!({"mergingIntList": [1]}), &json!({"mergingIntList": ["1"]}), &MERGE_ITEM);
    assert_eq!(r, Err(PatchError::MixedList));
}

/// Equal merge keys: Go's sort (an insertion sort with `<=` for short lists) reverses them, in both lists alike.
#[test]
fn duplicate_merge_keys_pair_up_as_upstream_sorts_them() {
    let original = json!({"mergingList": [{"name": "x", "value": "1"}, {"name": "x", "value": "2"}]});
    let modified = json!({"mergingList": [{"name": "x", "value": "1"}, {"name": "x", "value": "3"}]});
    // Sorted: [x/2, x/1] and [x/3, x/1]; x/2 pairs with x/3.
    let p = two_way_merge_patch(&original, &modified, &MERGE_ITEM).unwrap();
    assert_eq!(
        p,
        json!({"$setElementOrder/mergingList": [{"name": "x"}, {"name": "x"}],
               "mergingList": [{"name": "x", "value": "3"}]})
    );
}

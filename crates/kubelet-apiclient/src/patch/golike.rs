//! What the Go code of `strategicpatch` gets from its runtime and that decides the output: the dynamic type of a
//! decoded JSON value (`reflect.TypeOf` after `k8s.io/apimachinery/pkg/util/json.Unmarshal`, which turns whole
//! numbers into `int64` and the others into `float64`), `fmt.Sprintf("%v", v)` of a scalar, `sort.Sort` with the
//! package's `<=` comparators, and `deduplicateScalars`.

use serde_json::{Map, Value};

use super::PatchError;

/// The Go type a value decodes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Int,
    Float,
    String,
    Map,
    Slice,
}

pub(crate) fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) if n.is_i64() => Kind::Int,
        Value::Number(_) => Kind::Float,
        Value::String(_) => Kind::String,
        Value::Object(_) => Kind::Map,
        Value::Array(_) => Kind::Slice,
    }
}

/// `sliceElementType`: the one type of the elements of all the lists. Lists of lists, mixed types and (where Go
/// would dereference a nil type) `null` elements are errors, as are lists with no elements at all.
pub(crate) fn slice_element_kind(lists: &[&[Value]]) -> Result<Kind, PatchError> {
    let mut found: Option<Kind> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = kind(v);
        match (found, k) {
            (_, Kind::Slice) => return Err(PatchError::ListOfLists),
            (_, Kind::Null) => return Err(PatchError::NullListItem),
            (None, k) => found = Some(k),
            (Some(f), k) if f != k => return Err(PatchError::MixedList),
            _ => {}
        }
    }
    found.ok_or(PatchError::EmptyLists)
}

/// `fmt.Sprintf("%v", v)` of a scalar (and `<nil>` for a missing value).
pub(crate) fn fmt_v(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<nil>".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => fmt_float(n.as_f64().unwrap_or(0.0)),
        },
        // Not reached for merge keys and primitive lists; Go would print `map[...]` / `[...]`.
        Some(other) => other.to_string(),
    }
}

/// `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits, in exponent form (`1e+06`)
/// when the decimal exponent is below -4 or at least 6.
fn fmt_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits: "d.ddde<exp>".
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// `sort.Sort` of a slice with `Less(i, j) = key(i) <= key(j)` (the package's `SortableSliceOf...` types). Up
/// to 12 elements Go's pdqsort is an insertion sort, emulated here step by step, which decides where elements
/// with equal keys end up (they come out reversed). Longer lists are sorted stably: the same result unless
/// they hold equal keys.
pub(crate) fn go_sort_by_key<T>(items: Vec<T>, key: impl Fn(&T) -> String) -> Vec<T> {
    let keys: Vec<String> = items.iter().map(&key).collect();
    let mut idx: Vec<usize> = (0..items.len()).collect();
    if items.len() <= 12 {
        insertion_sort(&mut idx, |a, b| keys[a] <= keys[b]);
    } else {
        idx.sort_by(|a, b| keys[*a].cmp(&keys[*b]));
    }
    permute(items, &idx)
}

/// `sort.SliceStable` with `less(i, j) = pos(i) < pos(j)` when both are found, else `true`
/// (`normalizeSliceOrder`), run as Go's insertion sort runs it (lists of up to 20 elements; longer ones take the
/// same steps here, which only matters when some element is not found).
pub(crate) fn go_stable_sort_by_pos<T>(items: Vec<T>, pos: impl Fn(&T) -> Option<usize>) -> Vec<T> {
    let p: Vec<Option<usize>> = items.iter().map(&pos).collect();
    let mut idx: Vec<usize> = (0..items.len()).collect();
    insertion_sort(&mut idx, |a, b| match (p[a], p[b]) {
        (Some(x), Some(y)) => x < y,
        _ => true,
    });
    permute(items, &idx)
}

/// Go's `insertionSort`: `for j := i; j > 0 && less(data[j], data[j-1]); j-- { swap }`.
fn insertion_sort(idx: &mut [usize], less: impl Fn(usize, usize) -> bool) {
    for i in 1..idx.len() {
        let mut j = i;
        while j > 0 && less(idx[j], idx[j - 1]) {
            idx.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// The items in the order `idx` gives (position k receives the item that was at `idx[k]`).
fn permute<T>(items: Vec<T>, idx: &[usize]) -> Vec<T> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    idx.iter().filter_map(|&i| slots[i].take()).collect()
}

/// `deduplicateScalars`: removes later duplicates by moving the last element into their place (so the order
/// changes the way Go's does).
pub(crate) fn dedup_scalars(mut s: Vec<Value>) -> Vec<Value> {
    let mut i = 0;
    while i + 1 < s.len() {
        let mut j = i + 1;
        while j < s.len() {
            if s[i] == s[j] {
                let last = s.len() - 1;
                s.swap(j, last);
                s.pop();
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    s
}

/// The value of the merge key of a list element, or `None` when the element is not a map or lacks the key.
pub(crate) fn merge_key_value<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_object().and_then(|m| m.get(key))
}

/// The element as a map with its merge key's value, or the error Go returns (`ErrBadArgType`, `ErrNoMergeKey`).
pub(crate) fn map_with_key<'a>(v: &'a Value, key: &str) -> Result<(&'a Map<String, Value>, &'a Value), PatchError> {
    let m = v.as_object().ok_or_else(|| PatchError::NotAMap(v.to_string()))?;
    let k = m.get(key).ok_or_else(|| PatchError::MissingMergeKey { item: v.to_string(), key: key.to_string() })?;
    Ok((m, k))
}

#[cfg(test)]
mod tests {
    use super::fmt_float;

    #[test]
    fn floats_print_as_go_prints_them() {
        let cases = [
            (0.5, "0.5"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (2.5e21, "2.5e+21"),
        ];
        for (f, want) in cases {
            assert_eq!(fmt_float(f), want, "{f}");
        }
    }
}

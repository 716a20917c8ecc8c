//! Label and field selectors, as `k8s.io/apimachinery/pkg/labels` and `.../fields` parse and match
//! them, with the per-resource field sets the real registries allow (`pod.ToSelectableFields`,
//! `node.ToSelectableFields`, `event.ToSelectableFields`, ...). An unsupported field is refused with
//! `field label not supported: <f>` as upstream.

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::util::field_string;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector (equality- and set-based).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// A parsed field selector (`=`, `==`, `!=` terms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Splits on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect()
}

fn set_values(rest: &str, sel: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: found '{rest}', expected: '('")))?;
    let _ = sel;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),!f`.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            if let Some(k) = term.strip_prefix('!') {
                reqs.push(Req::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = term.split_once("!=") {
                reqs.push(Req::Ne(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = term.split_once(" notin ") {
                reqs.push(Req::NotIn(k.trim().into(), set_values(v, s)?));
            } else if let Some((k, v)) = term.split_once(" in ") {
                reqs.push(Req::In(k.trim().into(), set_values(v, s)?));
            } else if term.contains(' ') || term.contains('(') {
                return Err(ApiError::bad_request(format!("unable to parse requirement: {term}")));
            } else {
                reqs.push(Req::Exists(term));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fields a resource can be selected by, besides `metadata.name` and `metadata.namespace`.
fn selectable(def: &ResourceDef) -> &'static [&'static str] {
    match (def.group, def.resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("certificates.k8s.io", _) => &["spec.signerName"],
        _ => &[],
    }
}

/// The value of a selectable field of an object.
fn field_value(obj: &Value, field: &str) -> String {
    match field {
        // `source` of core events is `source.component`.
        "source" => field_string(obj, "source.component"),
        "spec.hostNetwork" | "spec.unschedulable" => {
            let v = field_string(obj, field);
            if v.is_empty() { "false".into() } else { v }
        }
        "status.podIPs" => field_string(obj, "status.podIP"),
        _ => field_string(obj, field),
    }
}

impl FieldSelector {
    /// Parses `metadata.name=x,spec.nodeName!=y` for a resource; unknown fields are refused.
    pub fn parse(s: &str, def: &ResourceDef) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for term in split_terms(s) {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{s}'; can't understand '{term}'")));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" && !selectable(def).contains(&k) {
                return Err(ApiError::bad_request(format!("field label not supported: {k}")));
            }
            terms.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let actual =
                if k == "metadata.namespace" { field_string(obj, "metadata.namespace") } else { field_value(obj, k) };
            (actual == *v) == *eq
        })
    }

    /// The value the selector requires for `metadata.name`, if it pins one.
    pub fn name(&self) -> Option<&str> {
        self.0.iter().find(|(k, eq, _)| k == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }
}

/// Both selectors of a request.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Selectors {
    /// Whether an object matches both.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::pods;
    use serde_json::json;

    #[test]
    fn labels() {
        let o = json!({"metadata": {"labels": {"a": "b", "c": "x"}}});
        assert!(LabelSelector::parse("a=b,c!=d").unwrap().matches(&o));
        assert!(!LabelSelector::parse("a=b,c!=x").unwrap().matches(&o));
        assert!(LabelSelector::parse("a in (b, z),!q").unwrap().matches(&o));
        assert!(!LabelSelector::parse("c notin (x)").unwrap().matches(&o));
        assert!(LabelSelector::parse("a").unwrap().matches(&o));
        assert!(LabelSelector::parse("").unwrap().matches(&o));
    }

    #[test]
    fn fields() {
        let o = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}});
        assert!(FieldSelector::parse("spec.nodeName=n1,metadata.name=p", pods()).unwrap().matches(&o));
        assert!(!FieldSelector::parse("spec.nodeName!=n1", pods()).unwrap().matches(&o));
        let e = FieldSelector::parse("spec.foo=1", pods()).unwrap_err();
        assert_eq!(e.message, "field label not supported: spec.foo");
    }
}

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// The document that mirrors the table.
const DOC: &str = include_str!("../../../docs/pod-fields.md");

/// The rkubelet column of a row the handler refuses.
const REFUSED_CELL: &str = "refused: UnsupportedPodField";

/// The (object, field) of every row of `doc` whose rkubelet column is [`REFUSED_CELL`]: the object is the first word
/// of the `## ` heading above the row, the field the first backquoted text of its first column.
fn refused_rows(doc: &str) -> BTreeSet<(String, String)> {
    let mut heading = String::new();
    let mut out = BTreeSet::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.split_whitespace().next().unwrap_or("").to_string();
            continue;
        }
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.get(3) != Some(&REFUSED_CELL) {
            continue;
        }
        let field = cells[1].split('`').nth(1).unwrap_or_else(|| panic!("no backquoted field in row {line:?}"));
        assert!(out.insert((heading.clone(), field.to_string())), "row {line:?} appears twice under {heading}");
    }
    out
}

#[test]
fn the_document_lists_exactly_the_refused_fields() {
    let doc = refused_rows(DOC);
    let code: BTreeSet<(String, String)> =
        UNSUPPORTED_FIELDS.iter().map(|r| (r.object.heading().to_string(), r.field.to_string())).collect();
    assert_eq!(code.len(), UNSUPPORTED_FIELDS.len(), "a row of the table appears twice");
    let missing: Vec<_> = code.difference(&doc).collect();
    assert!(missing.is_empty(), "refused in code but not marked `{REFUSED_CELL}` in docs/pod-fields.md: {missing:?}");
    let extra: Vec<_> = doc.difference(&code).collect();
    assert!(extra.is_empty(), "marked `{REFUSED_CELL}` in docs/pod-fields.md but not refused in code: {extra:?}");
}

#[test]
fn the_document_parser_sees_rows_and_headings() {
    let doc = "## PodSpec (`spec`)\n\n| field | acts | rkubelet | where | proof |\n|---|---|---|---|---|\n\
               | `a.b` (x) | yes | refused: UnsupportedPodField | here | t |\n| `c` | yes | applied | there | t |\n";
    assert_eq!(refused_rows(doc), BTreeSet::from([("PodSpec".to_string(), "a.b".to_string())]));
}

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("a pod")
}

fn plain() -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "app", "image": "localhost/busybox:1"}]}
    })
}

/// A container setting the row's field at index 0 of its list (None for rows about the pod).
fn container_fragment(field: &str) -> Option<Value> {
    Some(match field {
        "resources.claims" => json!({"resources": {"claims": [{"name": "gpu"}]}}),
        "lifecycle.stopSignal" => json!({"lifecycle": {"stopSignal": "SIGUSR1"}}),
        "restartPolicy" => json!({"restartPolicy": "Never"}),
        "restartPolicyRules" => {
            json!({"restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]})
        }
        "env[*].valueFrom.fileKeyRef" => json!({"env": [{"name": "A", "valueFrom": {"fileKeyRef":
            {"volumeName": "env", "path": "vars.env", "key": "A"}}}]}),
        _ => return None,
    })
}

fn merged(mut base: Value, fragment: &Value) -> Value {
    for (k, v) in fragment.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

/// For each row, minimal pods that set its field, with the path the message must name.
fn examples(row: &UnsupportedField) -> Vec<(Pod, String)> {
    let base = plain();
    let with = |path: &str, value: Value| {
        let mut p = base.clone();
        let (top, key) = path.split_once('.').unwrap();
        if p.get(top).is_none() {
            p[top] = json!({});
        }
        p[top][key] = value;
        (pod(p), path.to_string())
    };
    match (row.object, row.field) {
        (Object::PodSpec, "hostnameOverride") => vec![with("spec.hostnameOverride", json!("web-override"))],
        (Object::PodSpec, "resourceClaims") => {
            vec![with("spec.resourceClaims", json!([{"name": "gpu", "resourceClaimName": "gpu-claim"}]))]
        }
        (Object::PodStatus, "extendedResourceClaimStatus") => vec![with(
            "status.extendedResourceClaimStatus",
            json!({"resourceClaimName": "web-extended-resources", "requestMappings":
                [{"containerName": "app", "resourceName": "example.com/gpu", "requestName": "container-0"}]}),
        )],
        (Object::Container, field) => {
            let fragment =
                container_fragment(field).unwrap_or_else(|| panic!("no example for container field {field}"));
            let path = field.replace("[*]", "[0]");
            let c = merged(json!({"name": "c", "image": "localhost/busybox:1"}), &fragment);
            let mut app = base.clone();
            app["spec"]["containers"] = json!([c.clone()]);
            let mut init = base.clone();
            init["spec"]["initContainers"] = json!([c.clone()]);
            let mut debug = base.clone();
            debug["spec"]["ephemeralContainers"] = json!([merged(c, &json!({"targetContainerName": "app"}))]);
            vec![
                (pod(app), format!("spec.containers[0].{path}")),
                (pod(init), format!("spec.initContainers[0].{path}")),
                (pod(debug), format!("spec.ephemeralContainers[0].{path}")),
            ]
        }
        (object, field) => panic!("no example pod for the row {object:?} {field}: add one"),
    }
}

#[test]
fn every_unsupported_field_is_refused_naming_its_path_and_what_to_do() {
    for row in UNSUPPORTED_FIELDS {
        for (p, path) in examples(row) {
            let r = UnsupportedPodFields
                .admit(&p, &[])
                .unwrap_or_else(|| panic!("{path} was admitted, as if rkubelet applied it"));
            assert_eq!(r.reason, "UnsupportedPodField", "{path}");
            assert!(r.message.starts_with(&format!("can't set `{path}`: {}", row.lacks)), "{path}: {}", r.message);
            assert!(
                r.message.ends_with("remove the field, or run the pod on a node with the upstream kubelet"),
                "{path}: {}",
                r.message
            );
        }
    }
}

#[test]
fn a_plain_pod_and_the_defaults_the_apiserver_fills_in_are_admitted() {
    assert_eq!(UnsupportedPodFields.admit(&pod(plain()), &[]), None);
    assert_eq!(UnsupportedPodFields.admit(&Pod::default(), &[]), None, "a pod without a spec");
    // What the apiserver defaults, and values of the refused fields that need nothing rkubelet lacks.
    let defaulted = json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {
            "containers": [{"name": "app", "image": "localhost/busybox:1", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}, "claims": []},
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true, "recursiveReadOnly": "Disabled"}],
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}}, "restartPolicyRules": [], "volumeDevices": []}],
            "initContainers": [{"name": "sidecar", "image": "localhost/busybox:1", "restartPolicy": "Always"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "enableServiceLinks": true, "securityContext": {}, "terminationGracePeriodSeconds": 30,
            "priority": 0, "preemptionPolicy": "PreemptLowerPriority", "serviceAccountName": "default",
            "resourceClaims": []
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"}
    });
    assert_eq!(UnsupportedPodFields.admit(&pod(defaulted), &[]), None);
}

#[test]
fn every_field_a_pod_sets_is_named_once_in_the_tables_order() {
    let mut p = plain();
    p["spec"]["hostnameOverride"] = json!("x");
    p["spec"]["containers"][0]["lifecycle"] = json!({"stopSignal": "SIGINT"});
    p["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "a"},
        {"name": "B", "valueFrom": {"fileKeyRef": {"volumeName": "e", "path": "p", "key": "B"}}}]);
    let paths: Vec<String> = unsupported_fields(&pod(p.clone())).into_iter().map(|(path, _)| path).collect();
    assert_eq!(
        paths,
        [
            "spec.hostnameOverride",
            "spec.containers[0].lifecycle.stopSignal",
            "spec.containers[0].env[1].valueFrom.fileKeyRef"
        ]
    );
    let r = UnsupportedPodFields.admit(&pod(p), &[]).unwrap();
    for path in &paths {
        assert_eq!(r.message.matches(&format!("`{path}`")).count(), 1, "{path} in {}", r.message);
    }
}

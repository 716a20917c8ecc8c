//! Server-side `meta.k8s.io/v1` Table output (`Accept: application/json;as=Table;...`), with the columns
//! and cell values of the real printers (`pkg/printers/internalversion/printers.go`: `printPod`,
//! `printNode`, `printEvent`, `printCertificateSigningRequest`, `printLease`, ...) and the default
//! `Name`/`Created At` table of resources without a printer.

use serde_json::{Value, json};

use crate::resources::ResourceDef;
use crate::util::{age, field_string, human_duration, now_secs, parse_rfc3339};

/// What each row's `object` holds (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// From the `includeObject` query parameter.
    pub fn parse(v: Option<&str>) -> Self {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn col(name: &str, typ: &str, priority: u8) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({ "name": name, "type": typ, "format": format, "description": "", "priority": priority })
}

fn columns(def: &ResourceDef) -> Vec<Value> {
    let spec: &[(&str, &str, u8)] = match (def.group, def.resource) {
        ("", "pods") => &[
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        ("", "nodes") => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        ("", "events") | ("events.k8s.io", "events") => &[
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Subobject", "string", 1),
            ("Source", "string", 1),
            ("Message", "string", 0),
            ("First Seen", "string", 1),
            ("Count", "string", 1),
            ("Name", "string", 1),
        ],
        ("", "namespaces") => &[("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
        ("", "configmaps") => &[("Name", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
        ("", "secrets") => &[("Name", "string", 0), ("Type", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
        ("", "serviceaccounts") => &[("Name", "string", 0), ("Secrets", "string", 0), ("Age", "string", 0)],
        ("", "services") => &[
            ("Name", "string", 0),
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            ("Age", "string", 0),
            ("Selector", "string", 1),
        ],
        ("coordination.k8s.io", "leases") => &[("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
        ("certificates.k8s.io", _) => &[
            ("Name", "string", 0),
            ("Age", "string", 0),
            ("SignerName", "string", 0),
            ("Requestor", "string", 0),
            ("RequestedDuration", "string", 0),
            ("Condition", "string", 0),
        ],
        _ => &[("Name", "string", 0), ("Created At", "date", 0)],
    };
    spec.iter().map(|(n, t, p)| col(n, t, *p)).collect()
}

fn or_none(s: String) -> Value {
    if s.is_empty() { json!("<none>") } else { json!(s) }
}

fn arr<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// The STATUS column of a pod, as `printPod` computes it.
pub fn pod_status(pod: &Value) -> (String, i64, usize, usize, Option<i64>) {
    let mut reason = s(pod, "/status/phase").to_string();
    if !s(pod, "/status/reason").is_empty() {
        reason = s(pod, "/status/reason").to_string();
    }
    for c in arr(pod, "/status/conditions") {
        if s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated" {
            reason = "SchedulingGated".into();
        }
    }
    let total = arr(pod, "/spec/containers").len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart: Option<i64> = None;
    let mut note_restart = |c: &Value| {
        if let Some(t) = c.pointer("/lastState/terminated/finishedAt").and_then(Value::as_str).and_then(parse_rfc3339) {
            last_restart = Some(last_restart.map_or(t, |l: i64| l.max(t)));
        }
    };
    let init_total = arr(pod, "/spec/initContainers").len();
    let mut initializing = false;
    for (i, c) in arr(pod, "/status/initContainerStatuses").iter().enumerate() {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        note_restart(c);
        let term = c.pointer("/state/terminated");
        let waiting_reason = s(c, "/state/waiting/reason");
        if let Some(t) = term {
            if t.get("exitCode").and_then(Value::as_i64) == Some(0) {
                continue;
            }
            reason = if !s(t, "/reason").is_empty() {
                format!("Init:{}", s(t, "/reason"))
            } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                format!("Init:Signal:{sig}")
            } else {
                format!("Init:ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0))
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{init_total}");
        }
        initializing = true;
        break;
    }
    let initialized =
        arr(pod, "/status/conditions").iter().any(|c| s(c, "/type") == "Initialized" && s(c, "/status") == "True");
    if !initializing || initialized {
        let mut has_running = false;
        for c in arr(pod, "/status/containerStatuses").iter().rev() {
            restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            note_restart(c);
            let waiting = s(c, "/state/waiting/reason");
            let term = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = term {
                reason = if !s(t, "/reason").is_empty() {
                    s(t, "/reason").to_string()
                } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|s| *s != 0) {
                    format!("Signal:{sig}")
                } else {
                    format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0))
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true) && c.pointer("/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let ready_cond =
                arr(pod, "/status/conditions").iter().any(|c| s(c, "/type") == "Ready" && s(c, "/status") == "True");
            reason = if ready_cond { "Running" } else { "NotReady" }.into();
        }
    }
    let phase = s(pod, "/status/phase");
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        if s(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    (reason, restarts, ready, total, last_restart)
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let (reason, restarts, ready, total, last) = pod_status(pod);
    let restarts = match last {
        Some(t) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(now_secs() - t)),
        _ => restarts.to_string(),
    };
    let gates = arr(pod, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = gates
            .iter()
            .filter(|g| {
                arr(pod, "/status/conditions")
                    .iter()
                    .any(|c| s(c, "/type") == s(g, "/conditionType") && s(c, "/status") == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        json!(s(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        json!(age(pod.pointer("/metadata/creationTimestamp"))),
        or_none(s(pod, "/status/podIP").into()),
        or_none(s(pod, "/spec/nodeName").into()),
        or_none(s(pod, "/status/nominatedNodeName").into()),
        json!(gates),
    ]
}

/// The STATUS column of a node (`printNode`).
pub fn node_status(node: &Value) -> String {
    let mut status: Vec<String> = Vec::new();
    if let Some(c) = arr(node, "/status/conditions").iter().find(|c| s(c, "/type") == "Ready") {
        status.push(if s(c, "/status") == "True" { "Ready".into() } else { "NotReady".into() });
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    status.join(",")
}

fn node_cells(node: &Value) -> Vec<Value> {
    let mut roles: Vec<String> = Vec::new();
    if let Some(l) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in l {
            if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                if !r.is_empty() {
                    roles.push(r.into());
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v.into());
            }
        }
    }
    roles.sort();
    let addr = |t: &str| {
        arr(node, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == t)
            .map(|a| s(a, "/address").to_string())
            .unwrap_or_default()
    };
    let unknown = |v: &str| if v.is_empty() { "<unknown>".to_string() } else { v.to_string() };
    vec![
        json!(s(node, "/metadata/name")),
        json!(node_status(node)),
        or_none(roles.join(",")),
        json!(age(node.pointer("/metadata/creationTimestamp"))),
        json!(s(node, "/status/nodeInfo/kubeletVersion")),
        or_none(addr("InternalIP")),
        or_none(addr("ExternalIP")),
        json!(unknown(s(node, "/status/nodeInfo/osImage"))),
        json!(unknown(s(node, "/status/nodeInfo/kernelVersion"))),
        json!(unknown(s(node, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

fn event_cells(ev: &Value, core: bool) -> Vec<Value> {
    let (obj, note, count) = if core {
        (ev.get("involvedObject"), s(ev, "/message"), ev.get("count").and_then(Value::as_i64))
    } else {
        (ev.get("regarding"), s(ev, "/note"), ev.pointer("/deprecatedCount").and_then(Value::as_i64))
    };
    let obj = obj.cloned().unwrap_or_else(|| json!({}));
    let first = ["/firstTimestamp", "/deprecatedFirstTimestamp", "/eventTime"]
        .iter()
        .find_map(|p| ev.pointer(p).filter(|v| !v.is_null()));
    let last = ["/series/lastObservedTime", "/lastTimestamp", "/deprecatedLastTimestamp", "/eventTime"]
        .iter()
        .find_map(|p| ev.pointer(p).filter(|v| !v.is_null()))
        .or(first);
    let source = if core {
        let c = s(ev, "/source/component");
        let h = s(ev, "/source/host");
        if h.is_empty() { c.to_string() } else { format!("{c}, {h}") }
    } else {
        s(ev, "/reportingController").to_string()
    };
    vec![
        json!(age(last)),
        json!(s(ev, "/type")),
        json!(s(ev, "/reason")),
        json!(format!("{}/{}", s(&obj, "/kind").to_lowercase(), s(&obj, "/name"))),
        json!(s(&obj, "/fieldPath")),
        json!(source),
        json!(note),
        json!(age(first)),
        json!(count.unwrap_or(1).to_string()),
        json!(s(ev, "/metadata/name")),
    ]
}

fn count(v: &Value, ptrs: &[&str]) -> usize {
    ptrs.iter().map(|p| v.pointer(p).and_then(Value::as_object).map_or(0, |m| m.len())).sum()
}

fn cells(def: &ResourceDef, o: &Value) -> Vec<Value> {
    let name = json!(s(o, "/metadata/name"));
    let created = o.pointer("/metadata/creationTimestamp");
    match (def.group, def.resource) {
        ("", "pods") => pod_cells(o),
        ("", "nodes") => node_cells(o),
        ("", "events") => event_cells(o, true),
        ("events.k8s.io", "events") => event_cells(o, false),
        ("", "namespaces") => vec![name, json!(s(o, "/status/phase")), json!(age(created))],
        ("", "configmaps") => vec![name, json!(count(o, &["/data", "/binaryData"])), json!(age(created))],
        ("", "secrets") => vec![name, json!(s(o, "/type")), json!(count(o, &["/data"])), json!(age(created))],
        ("", "serviceaccounts") => vec![name, json!(arr(o, "/secrets").len()), json!(age(created))],
        ("", "services") => {
            let ports: Vec<String> = arr(o, "/spec/ports")
                .iter()
                .map(|p| {
                    let port = field_string(p, "port");
                    let proto = if s(p, "/protocol").is_empty() { "TCP" } else { s(p, "/protocol") };
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(n) => format!("{port}:{n}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect();
            let selector: Vec<String> = o
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect())
                .unwrap_or_default();
            vec![
                name,
                json!(if s(o, "/spec/type").is_empty() { "ClusterIP" } else { s(o, "/spec/type") }),
                or_none(s(o, "/spec/clusterIP").into()),
                json!("<none>"),
                or_none(ports.join(",")),
                json!(age(created)),
                or_none(selector.join(",")),
            ]
        }
        ("coordination.k8s.io", "leases") => vec![name, json!(s(o, "/spec/holderIdentity")), json!(age(created))],
        ("certificates.k8s.io", _) => {
            let mut conds: Vec<String> =
                arr(o, "/status/conditions").iter().map(|c| s(c, "/type").to_string()).collect();
            if conds.is_empty() {
                conds.push("Pending".into());
            }
            if !s(o, "/status/certificate").is_empty() {
                conds.push("Issued".into());
            }
            let dur = o
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
                .map(human_duration)
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                json!(age(created)),
                json!(s(o, "/spec/signerName")),
                json!(s(o, "/spec/username")),
                json!(dur),
                json!(conds.join(",")),
            ]
        }
        _ => vec![name, created.cloned().unwrap_or(Value::Null)],
    }
}

fn row_object(o: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(o.clone()),
        IncludeObject::Metadata => Some(partial_metadata(o)),
    }
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(o: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Table of objects of one resource.
pub fn table(def: &ResourceDef, items: &[Value], rv: Option<&str>, include: IncludeObject, headers: bool) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut r = json!({ "cells": cells(def, o) });
            if let Some(obj) = row_object(o, include) {
                r["object"] = obj;
            }
            r
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = rv {
        meta["resourceVersion"] = json!(rv);
    }
    let cols = if headers { columns(def) } else { Vec::new() };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": cols,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_statuses() {
        let p = |st: Value| json!({"spec": {"containers": [{"name": "c"}]}, "status": st});
        assert_eq!(pod_status(&p(json!({"phase": "Pending"}))).0, "Pending");
        let creating = p(
            json!({"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(pod_status(&creating).0, "ContainerCreating");
        let running = p(
            json!({"phase": "Running", "containerStatuses": [{"name": "c", "ready": true, "restartCount": 2, "state": {"running": {}}}]}),
        );
        let (r, restarts, ready, total, _) = pod_status(&running);
        assert_eq!((r.as_str(), restarts, ready, total), ("Running", 2, 1, 1));
        let done = p(
            json!({"phase": "Succeeded", "containerStatuses": [{"name": "c", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        assert_eq!(pod_status(&done).0, "Completed");
        let mut term = running.clone();
        term["metadata"] = json!({"deletionTimestamp": "2024-01-01T00:00:00Z"});
        assert_eq!(pod_status(&term).0, "Terminating");
        let node = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        assert_eq!(node_status(&node), "NotReady");
    }
}

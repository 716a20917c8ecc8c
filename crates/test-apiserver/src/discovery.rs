//! Discovery as the real apiserver serves it to client-go: `/version`, the legacy (non-aggregated)
//! `/api` (`APIVersions`), `/api/v1` and `/apis/<g>/<v>` (`APIResourceList`), `/apis`
//! (`APIGroupList`), `/apis/<g>` (`APIGroup`). Aggregated discovery
//! (`as=APIGroupDiscoveryList`) is not offered: the answer's plain `application/json` content type
//! makes client-go fall back to the legacy documents. A minimal OpenAPI v3 (`/openapi/v3` index and one
//! document per group/version listing each resource's PATCH operation with its `fieldValidation`
//! parameter and `x-kubernetes-group-version-kind`) lets kubectl's `QueryParamVerifierV3` choose
//! server-side field validation, so `kubectl create -f` works without `--validate=false`.

use serde_json::{Value, json};

use crate::resources::{RESOURCES, ResourceDef, group_versions, subresource_kind, subresource_verbs};

/// The `/version` document (`version.Info`).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0",
        "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T17:56:54Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn api_versions(server_addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_addr }]
    })
}

fn group_doc(group: &str) -> Value {
    let versions: Vec<Value> = group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({ "groupVersion": format!("{g}/{v}"), "version": v }))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": versions, "preferredVersion": preferred })
}

/// `/apis`.
pub fn api_group_list() -> Value {
    let mut groups: Vec<&str> = Vec::new();
    for (g, _) in group_versions() {
        if !g.is_empty() && !groups.contains(&g) {
            groups.push(g);
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups.into_iter().map(group_doc).collect::<Vec<_>>()
    })
}

/// `/apis/<group>`, if served.
pub fn api_group(group: &str) -> Option<Value> {
    if group.is_empty() || !group_versions().iter().any(|(g, _)| *g == group) {
        return None;
    }
    let mut d = group_doc(group);
    d["kind"] = json!("APIGroup");
    d["apiVersion"] = json!("v1");
    Some(d)
}

fn api_resource(r: &ResourceDef) -> Value {
    let mut v = json!({
        "name": r.resource,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    v
}

/// `/api/v1` or `/apis/<g>/<v>`, if served.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group && r.version == version) {
        resources.push(api_resource(r));
        for sub in r.subresources {
            let mut s = json!({
                "name": format!("{}/{}", r.resource, sub),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": subresource_kind(r, sub),
                "verbs": subresource_verbs(sub),
            });
            if *sub == "eviction" {
                s["group"] = json!("policy");
                s["version"] = json!("v1");
            }
            if *sub == "token" {
                s["group"] = json!("authentication.k8s.io");
                s["version"] = json!("v1");
            }
            resources.push(s);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources }))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// `/openapi/v3`: the index of group/version documents.
pub fn openapi_v3_index() -> Value {
    let mut paths = serde_json::Map::new();
    for (g, v) in group_versions() {
        let p = gv_path(g, v);
        paths.insert(p.clone(), json!({ "serverRelativeURL": format!("/openapi/v3/{p}?hash=TESTAPISERVER") }));
    }
    json!({ "paths": paths })
}

/// `/openapi/v3/<api/v1|apis/g/v>`: the PATCH operations of each resource, with `fieldValidation`.
pub fn openapi_v3_doc(path: &str) -> Option<Value> {
    let (g, v) = group_versions().into_iter().find(|(g, v)| gv_path(g, v) == path)?;
    let mut paths = serde_json::Map::new();
    for r in RESOURCES.iter().filter(|r| r.group == g && r.version == v) {
        let base = if g.is_empty() { format!("/api/{v}") } else { format!("/apis/{g}/{v}") };
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.resource)
        } else {
            format!("{base}/{}/{{name}}", r.resource)
        };
        let gvk = json!({ "group": g, "version": v, "kind": r.kind });
        let params = json!([
            { "name": "dryRun", "in": "query", "schema": { "type": "string", "uniqueItems": true } },
            { "name": "fieldManager", "in": "query", "schema": { "type": "string", "uniqueItems": true } },
            { "name": "fieldValidation", "in": "query", "schema": { "type": "string", "uniqueItems": true } },
            { "name": "force", "in": "query", "schema": { "type": "boolean", "uniqueItems": true } }
        ]);
        let op = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": { "200": { "description": "OK" } }
            })
        };
        paths.insert(item, json!({ "get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete") }));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": "v1.32.0" },
        "paths": paths,
        "components": { "schemas": {} }
    }))
}

//! The wire protocol over raw HTTP/1.1: verbs, Status errors, patches, graceful deletion, watches
//! (resume, selectors, 410, timeout), Table output, discovery, stop/restart.

mod common;

use std::time::Duration;

use common::{Watch, call, call_h, get, post};
use serde_json::{Value, json};
use test_apiserver::{Options, TestApiServer};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "web", "tier": name}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx:1.27"}]}})
}

async fn server() -> TestApiServer {
    TestApiServer::start(Options::default()).await.expect("start")
}

#[tokio::test]
async fn create_get_list_and_errors() {
    let s = server().await;
    let p = s.port();
    let (code, a) = post(p, PODS, &pod("a", "n1")).await;
    assert_eq!(code, 201);
    assert_eq!(a["metadata"]["namespace"], "default");
    assert!(a["metadata"]["uid"].as_str().unwrap().len() == 36);
    assert!(a["metadata"]["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    let (code, e) = post(p, PODS, &pod("a", "n1")).await;
    assert_eq!(code, 409);
    assert_eq!(
        e,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"a\" already exists", "reason": "AlreadyExists",
               "details": {"name": "a", "kind": "pods"}, "code": 409})
    );
    let (code, e) = get(p, &format!("{PODS}/nope")).await;
    assert_eq!(
        (code, e["reason"].as_str(), e["message"].as_str()),
        (404, Some("NotFound"), Some("pods \"nope\" not found"))
    );
    let (code, e) = get(p, "/apis/coordination.k8s.io/v1/namespaces/default/leases/l").await;
    assert_eq!(code, 404);
    assert_eq!(e["message"], "leases.coordination.k8s.io \"l\" not found");
    assert_eq!(e["details"]["group"], "coordination.k8s.io");
    let mut genp = pod("", "");
    genp["metadata"] = json!({"generateName": "gen-"});
    let (code, g) = post(p, PODS, &genp).await;
    assert_eq!(code, 201);
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("gen-"));
    post(p, PODS, &pod("b", "n2")).await;
    let (code, l) = get(p, &format!("{PODS}?labelSelector=app%3Dweb,tier!%3Da")).await;
    assert_eq!(code, 200);
    assert_eq!(l["kind"], "PodList");
    let names: Vec<&str> =
        l["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b"]);
    assert!(l["items"][0].get("kind").is_none(), "list items carry no kind, as upstream");
    assert_eq!(l["metadata"]["resourceVersion"], s.resource_version().to_string());
    let (_, l) = get(p, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1").await;
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let (code, e) = get(p, "/api/v1/pods?fieldSelector=spec.bogus%3D1").await;
    assert_eq!((code, e["message"].as_str()), (400, Some("field label not supported: spec.bogus")));
    let (code, e) = post(p, "/api/v1/namespaces/nope/pods", &pod("c", "")).await;
    assert_eq!((code, e["message"].as_str()), (404, Some("namespaces \"nope\" not found")));
}

#[tokio::test]
async fn update_conflict_and_patches() {
    let s = server().await;
    let p = s.port();
    let (_, a) = post(p, PODS, &pod("a", "n1")).await;
    let mut upd = a.clone();
    upd["metadata"]["labels"]["x"] = json!("1");
    let (code, u) = call(p, "PUT", &format!("{PODS}/a"), "application/json", Some(&upd.to_string())).await;
    assert_eq!(code, 200);
    assert_ne!(u["metadata"]["resourceVersion"], a["metadata"]["resourceVersion"]);
    let (code, e) = call(p, "PUT", &format!("{PODS}/a"), "application/json", Some(&upd.to_string())).await;
    assert_eq!(code, 409);
    assert_eq!(
        e["message"],
        "Operation cannot be fulfilled on pods \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(e["reason"], "Conflict");

    let (code, m) = call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"labels":{"x":null,"y":"2"}}}"#),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(m["metadata"]["labels"], json!({"app": "web", "tier": "a", "y": "2"}));

    let status = json!({"metadata": {"uid": a["metadata"]["uid"]}, "status": {
        "phase": "Running", "podIP": "10.0.0.5",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]}});
    let (code, st) = call(
        p,
        "PATCH",
        &format!("{PODS}/a/status"),
        "application/strategic-merge-patch+json",
        Some(&status.to_string()),
    )
    .await;
    assert_eq!(code, 200, "{st}");
    let again = json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                                  "conditions": [{"type": "Ready", "status": "False"}]}});
    let (_, st) = call(
        p,
        "PATCH",
        &format!("{PODS}/a/status"),
        "application/strategic-merge-patch+json",
        Some(&again.to_string()),
    )
    .await;
    assert_eq!(
        st["status"]["conditions"],
        json!([{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}])
    );
    assert_eq!(st["status"]["containerStatuses"][0]["ready"], true);
    let wrong_uid = json!({"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}, "status": {"phase": "Failed"}});
    let (code, e) = call(
        p,
        "PATCH",
        &format!("{PODS}/a/status"),
        "application/strategic-merge-patch+json",
        Some(&wrong_uid.to_string()),
    )
    .await;
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")));
    // A main-resource write ignores .status; a status write ignores everything else.
    let (_, m) = call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        Some(r#"{"status":{"phase":"Failed"}}"#),
    )
    .await;
    assert_eq!(m["status"]["phase"], "Running");

    let jp = r#"[{"op":"test","path":"/metadata/labels/y","value":"2"},{"op":"add","path":"/metadata/annotations","value":{"k":"v"}}]"#;
    let (code, j) = call(p, "PATCH", &format!("{PODS}/a"), "application/json-patch+json", Some(jp)).await;
    assert_eq!(code, 200);
    assert_eq!(j["metadata"]["annotations"]["k"], "v");
    let (code, _) = call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/json-patch+json",
        Some(r#"[{"op":"test","path":"/metadata/labels/y","value":"9"}]"#),
    )
    .await;
    assert_ne!(code, 200);
    let (code, _) = call(p, "PATCH", &format!("{PODS}/a"), "text/plain", Some("{}")).await;
    assert_eq!(code, 415);
    // Spec changes other than images are refused, image changes bump the generation.
    let (code, _) = call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        Some(r#"{"spec":{"nodeName":"other"}}"#),
    )
    .await;
    assert_eq!(code, 422);
    let img = r#"{"spec":{"containers":[{"name":"c","image":"nginx:1.28"}]}}"#;
    let (code, g) = call(p, "PATCH", &format!("{PODS}/a"), "application/strategic-merge-patch+json", Some(img)).await;
    assert_eq!((code, g["metadata"]["generation"].as_i64()), (200, Some(2)));
    assert_eq!(g["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
}

#[tokio::test]
async fn graceful_pod_deletion() {
    let s = server().await;
    let p = s.port();
    let (_, a) = post(p, PODS, &pod("a", "n1")).await;
    let (code, d) =
        call(p, "DELETE", &format!("{PODS}/a"), "application/json", Some(r#"{"gracePeriodSeconds":20}"#)).await;
    assert_eq!(code, 200);
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 20);
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get(p, &format!("{PODS}/a")).await.0, 200, "still there while the kubelet stops it");
    let wrong = r#"{"gracePeriodSeconds":0,"preconditions":{"uid":"x"}}"#;
    let (code, e) = call(p, "DELETE", &format!("{PODS}/a"), "application/json", Some(wrong)).await;
    assert_eq!(code, 409);
    assert_eq!(
        e["message"],
        format!(
            "Operation cannot be fulfilled on pods \"a\": Precondition failed: UID in precondition: x, UID in object meta: {}",
            a["metadata"]["uid"].as_str().unwrap()
        )
    );
    let fin = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": a["metadata"]["uid"]}});
    let (code, _) = call(p, "DELETE", &format!("{PODS}/a"), "application/json", Some(&fin.to_string())).await;
    assert_eq!(code, 200);
    assert_eq!(get(p, &format!("{PODS}/a")).await.0, 404);
    // Not bound to a node: deleted at once.
    post(p, PODS, &pod("b", "")).await;
    call(p, "DELETE", &format!("{PODS}/b"), "", None).await;
    assert_eq!(get(p, &format!("{PODS}/b")).await.0, 404);
    // Other resources: at once, answered with a Status.
    post(p, "/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "cm"}, "data": {"a": "b"}})).await;
    let (code, st) = call(p, "DELETE", "/api/v1/namespaces/default/configmaps/cm", "", None).await;
    assert_eq!((code, st["status"].as_str()), (200, Some("Success")));
}

#[tokio::test]
async fn watch_from_zero_resume_and_selectors() {
    let s = server().await;
    let p = s.port();
    post(p, PODS, &pod("a", "n1")).await;
    let mut w = Watch::open(p, &format!("{PODS}?watch=1&resourceVersion=0&labelSelector=tier%3Da")).await;
    assert_eq!(w.code, 200);
    let ev = w.next().await.unwrap();
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("a")));
    let rv_after_add = s.resource_version();
    post(p, PODS, &pod("b", "n1")).await; // does not match
    call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"labels":{"x":"1"}}}"#),
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["metadata"]["labels"]["x"], "1");
    call(
        p,
        "PATCH",
        &format!("{PODS}/a"),
        "application/merge-patch+json",
        Some(r#"{"metadata":{"labels":{"tier":"z"}}}"#),
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(ev["type"], "DELETED", "an object leaving the selector is DELETED for the watcher");

    // Resume from an earlier resourceVersion replays what happened since.
    let mut w2 = Watch::open(p, &format!("{PODS}?watch=true&resourceVersion={rv_after_add}")).await;
    let types: Vec<String> = [w2.next().await.unwrap(), w2.next().await.unwrap(), w2.next().await.unwrap()]
        .iter()
        .map(|e| format!("{} {}", e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(types, ["ADDED b", "MODIFIED a", "MODIFIED a"]);
    assert!(w2.next_within(Duration::from_millis(200)).await.is_err(), "nothing more");

    // A watch on one object by field selector, ending with its deletion.
    let mut w3 = Watch::open(
        p,
        &format!("{PODS}?watch=1&fieldSelector=metadata.name%3Db&resourceVersion={}", s.resource_version()),
    )
    .await;
    call(p, "DELETE", &format!("{PODS}/b"), "application/json", Some(r#"{"gracePeriodSeconds":0}"#)).await;
    let ev = w3.next().await.unwrap();
    assert_eq!((ev["type"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("DELETED"), Some("b")));
}

#[tokio::test]
async fn watch_expired_timeout_bookmarks_and_close() {
    let s = server().await;
    let p = s.port();
    post(p, PODS, &pod("a", "n1")).await;
    let old = s.resource_version() - 1;
    s.expire_watch_history();
    let mut w = Watch::open(p, &format!("{PODS}?watch=1&resourceVersion={old}")).await;
    let ev = w.next().await.unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert_eq!(ev["object"]["message"], format!("too old resource version: {old} ({})", old + 1));
    assert!(w.next().await.is_none(), "the stream ends after the error");

    let mut w =
        Watch::open(p, &format!("{PODS}?watch=1&resourceVersion={}&timeoutSeconds=1", s.resource_version())).await;
    assert!(w.next().await.is_none(), "timeoutSeconds ends the stream");

    let mut w = Watch::open(
        p,
        &format!("{PODS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(w.next().await.unwrap()["type"], "ADDED");
    let b = w.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    s.close_watches();
    assert!(w.next().await.is_none());
}

#[tokio::test]
async fn stop_and_restart_keep_the_store() {
    let mut s = server().await;
    let p = s.port();
    post(p, PODS, &pod("a", "n1")).await;
    let mut w = Watch::open(p, &format!("{PODS}?watch=1&resourceVersion={}", s.resource_version())).await;
    s.stop().await;
    assert!(w.next().await.is_none(), "watches are cut");
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", p)).await.is_err());
    s.restart().await.expect("restart");
    assert_eq!(s.port(), p);
    assert_eq!(get(p, &format!("{PODS}/a")).await.0, 200);
}

#[tokio::test]
async fn table_and_discovery() {
    let s = server().await;
    let p = s.port();
    post(p, PODS, &pod("a", "n1")).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let (code, t) = call_h(p, "GET", PODS, &[("Accept", accept)], None).await;
    assert_eq!(code, 200);
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> =
        t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(&cols[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(
        t["rows"][0]["cells"].as_array().unwrap()[..4],
        [json!("a"), json!("0/1"), json!("Pending"), json!("0")]
    );
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let (code, _) = call_h(p, "GET", PODS, &[("Accept", "application/vnd.kubernetes.protobuf")], None).await;
    assert_eq!(code, 406);

    let (_, v) = get(p, "/version").await;
    assert_eq!(v["gitVersion"], "v1.32.0");
    let (_, api) = get(p, "/api").await;
    assert_eq!(api["versions"], json!(["v1"]));
    let (_, v1) = get(p, "/api/v1").await;
    let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["namespaced"], true);
    let (_, apis) = get(p, "/apis").await;
    let groups: Vec<&str> = apis["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert!(groups.contains(&"coordination.k8s.io") && groups.contains(&"certificates.k8s.io"));
    let (code, l) = get(p, "/apis/coordination.k8s.io/v1").await;
    assert_eq!((code, l["resources"][0]["name"].as_str()), (200, Some("leases")));
    assert_eq!(get(p, "/apis/nope.io/v1").await.0, 404);
    assert!(s.requests().iter().any(|r| r.uri == "/apis"));
}

#[tokio::test]
async fn the_binary_prints_its_url_and_serves() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_test-apiserver"))
        .args(["--port", "0", "--kubeconfig"])
        .arg(&kc)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.unwrap().unwrap().unwrap();
    let port: u16 = url.strip_prefix("http://127.0.0.1:").expect("url").parse().unwrap();
    assert!(std::fs::read_to_string(&kc).unwrap().contains(&url));
    let (code, ns) = get(port, "/api/v1/namespaces").await;
    assert_eq!(code, 200);
    assert_eq!(ns["items"].as_array().unwrap().len(), 4);
    child.kill().await.unwrap();
}

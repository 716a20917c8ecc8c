use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::*;
use crate::auth::PeerCert;
use crate::handlers::tests::{FakeHost, call, handlers, pod};
use crate::handlers::{Auth, secure_router};

fn q(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn query_decodes_like_pod_log_options() {
    let o = decode(&q("follow=true&previous=1&timestamps=True&tailLines=10&limitBytes=5&sinceSeconds=3")).unwrap();
    assert!(o.follow && o.previous && o.timestamps);
    assert_eq!((o.tail_lines, o.limit_bytes, o.since_seconds), (Some(10), Some(5), Some(3)));
    assert_eq!(decode(&q("tail=7")).unwrap().tail_lines, Some(7));
    assert_eq!(decode(&q("tailLines=3&tail=all")).unwrap().tail_lines, None);
    assert_eq!(
        decode(&q("sinceTime=2024-01-02T03:04:05Z")).unwrap().since_time.unwrap().to_rfc3339(),
        "2024-01-02T03:04:05+00:00"
    );
    assert!(decode(&q("follow=yes")).unwrap().follow, "only 0 and false are false");
    assert!(decode(&q("follow=")).unwrap().follow);
    assert!(!decode(&q("follow=FALSE")).unwrap().follow);
    assert_eq!(decode(&q("tailLines=1&tailLines=5")).unwrap().tail_lines, Some(1), "the first value counts");
    assert!(decode(&q("tailLines=x")).is_none());
    assert!(decode(&q("unknown=1")).is_some());
}

#[test]
fn validation_follows_validate_pod_log_options() {
    let v = |s: &str| validate(&decode(&q(s)).unwrap());
    assert_eq!(v(""), Ok(Streams::All));
    assert_eq!(v("stream=Stderr"), Ok(Streams::Stderr));
    assert!(v("tailLines=-1").is_err());
    assert!(v("limitBytes=0").is_err());
    assert!(v("sinceSeconds=0").is_err());
    assert!(v("sinceSeconds=5&sinceTime=2024-01-02T03:04:05Z").is_err());
    assert!(v("stream=Stdout&tailLines=3").is_err());
    assert!(v("stream=stdout").is_err());
}

fn with_state(state: serde_json::Value, last: serde_json::Value) -> Pod {
    let mut p = pod("default", "web", "uid-1");
    let mut st = serde_json::to_value(p.status.take().unwrap()).unwrap();
    st["containerStatuses"][0]["state"] = state;
    st["containerStatuses"][0]["lastState"] = last;
    p.status = Some(serde_json::from_value(st).unwrap());
    p
}

#[test]
fn the_container_is_picked_from_the_status_as_upstream() {
    let p = pod("default", "web", "uid-1");
    assert_eq!(container_id(&p, "app", false), Ok("c2".into()));
    assert_eq!(container_id(&p, "app", true), Ok("c1".into()));
    assert_eq!(container_id(&p, "side", false), Err("container \"side\" in pod \"web\" is not available".into()));
    let waiting = with_state(serde_json::json!({"waiting": {"reason": "ImagePullBackOff"}}), serde_json::json!({}));
    assert_eq!(
        container_id(&waiting, "app", false),
        Err("container \"app\" in pod \"web\" is waiting to start: trying and failing to pull image".into())
    );
    assert_eq!(
        container_id(&waiting, "app", true),
        Err("previous terminated container \"app\" in pod \"web\" not found".into())
    );
    let creating = with_state(serde_json::json!({"waiting": {"reason": "ContainerCreating"}}), serde_json::json!({}));
    assert_eq!(
        container_id(&creating, "app", false),
        Err("container \"app\" in pod \"web\" is waiting to start: ContainerCreating".into())
    );
    let none = with_state(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(
        container_id(&none, "app", false),
        Err("container \"app\" in pod \"web\" is waiting to start - no logs yet".into())
    );
    let crashed = with_state(
        serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}),
        serde_json::json!({"terminated": {"exitCode": 2, "containerID": "containerd://c9"}}),
    );
    assert_eq!(container_id(&crashed, "app", false), Ok("c9".into()), "the last run's log while backing off");
    let done = with_state(
        serde_json::json!({"terminated": {"exitCode": 0, "containerID": "containerd://c5"}}),
        serde_json::json!({}),
    );
    assert_eq!(container_id(&done, "app", false), Ok("c5".into()));
}

const LOG: &str = "\
2024-01-02T03:04:05.000000001Z stdout F one
2024-01-02T03:04:06Z stderr F two
2024-01-02T03:04:07Z stdout P thr
2024-01-02T03:04:07.5Z stdout F ee
";

fn setup(log: &str) -> (tempfile::TempDir, Arc<FakeHost>, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("1.log");
    std::fs::write(&path, log).unwrap();
    let host = Arc::new(FakeHost::default());
    *host.log_path.lock().unwrap() = path;
    let auth = Arc::new(Auth {
        authenticator: crate::auth::Authenticator { anonymous: true, webhook: None },
        authorizer: crate::auth::Authorizer::AlwaysAllow,
        node_name: "node-a".into(),
    });
    let r = secure_router(handlers(host.clone(), true), auth);
    (dir, host, r)
}

#[tokio::test]
async fn logs_are_read_with_each_option() {
    let (_d, host, r) = setup(LOG);
    let get = |s: &str| {
        let r = r.clone();
        let uri = format!("/containerLogs/default/web/app?{s}");
        async move { call(&r, "GET", &uri, PeerCert::None, &[]).await }
    };
    assert_eq!(get("").await, (200, "one\ntwo\nthree\n".into()));
    assert_eq!(host.calls.lock().unwrap().last().unwrap(), "log c2");
    assert_eq!(get("previous=true").await.0, 200);
    assert_eq!(host.calls.lock().unwrap().last().unwrap(), "log c1");
    assert_eq!(get("tailLines=2").await.1, "three\n", "two file lines: the fragments of the last");
    assert_eq!(get("tailLines=0").await.1, "");
    assert_eq!(get("limitBytes=6").await.1, "one\ntw");
    assert_eq!(get("sinceTime=2024-01-02T03:04:06Z").await.1, "two\nthree\n");
    assert_eq!(get("sinceSeconds=60").await.1, "", "written long ago");
    assert_eq!(
        get("timestamps=true").await.1,
        "2024-01-02T03:04:05.000000001Z one\n2024-01-02T03:04:06.000000000Z two\n2024-01-02T03:04:07.000000000Z three\n"
    );
    assert_eq!(get("stream=Stderr").await.1, "two\n");
    assert_eq!(get("tailLines=x").await, (400, r#"{"message": "Unable to decode query."}"#.into()));
    assert_eq!(get("tailLines=-2").await, (422, r#"{"message": "Invalid request."}"#.into()));
    let (code, body) = call(&r, "GET", "/containerLogs/default/nope/app", PeerCert::None, &[]).await;
    assert_eq!((code, body.as_str()), (404, "pod \"nope\" does not exist\n"));
    let (code, body) = call(&r, "GET", "/containerLogs/default/web/side", PeerCert::None, &[]).await;
    assert_eq!((code, body.as_str()), (404, "container \"side\" not found in pod \"web\"\n"));
}

#[tokio::test]
async fn a_followed_log_streams_new_lines_survives_rotation_and_ends_with_the_container() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let (dir, host, r) = setup("2024-01-02T03:04:05Z stdout F first\n");
    host.running.store(true, Ordering::SeqCst);
    let mut req =
        axum::http::Request::get("/containerLogs/default/web/app?follow=true").body(axum::body::Body::empty()).unwrap();
    req.extensions_mut().insert(crate::listen::ConnInfo::default());
    let resp = r.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut next = async || {
        let f = tokio::time::timeout(Duration::from_secs(10), body.frame()).await.expect("a chunk in time");
        f.map(|f| String::from_utf8(f.unwrap().into_data().unwrap().to_vec()).unwrap())
    };
    assert_eq!(next().await.as_deref(), Some("first\n"));
    let path = dir.path().join("1.log");
    let append = |s: &str| {
        use std::io::Write;
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(s.as_bytes()).unwrap();
    };
    // A fragment, then a line written in two pieces: nothing is sent of the piece without its newline.
    append("2024-01-02T03:04:06Z stdout P sec\n2024-01-02T03:04:06Z stdout F o");
    let mut got = next().await.unwrap();
    assert_eq!(got, "sec");
    append("nd\n");
    got.push_str(&next().await.unwrap());
    assert_eq!(got, "second\n");
    // Rotation: the kubelet renames the file and the runtime opens a new one.
    std::fs::rename(&path, dir.path().join("1.log.20240102-030407")).unwrap();
    std::fs::write(&path, "2024-01-02T03:04:08Z stderr F third\n").unwrap();
    assert_eq!(next().await.as_deref(), Some("third\n"));
    append("2024-01-02T03:04:09Z stdout F last\n");
    host.running.store(false, Ordering::SeqCst);
    let mut rest = String::new();
    while let Some(chunk) = next().await {
        rest.push_str(&chunk);
    }
    assert_eq!(rest, "last\n", "drained, then the stream ends");
}

/// `web` with an ephemeral container `debugger` that ran (`kubectl debug`): in the spec and in
/// `ephemeralContainerStatuses`, as the kubelet reports it.
fn debugged() -> Pod {
    let mut v = serde_json::to_value(pod("default", "web", "uid-1")).unwrap();
    v["spec"]["ephemeralContainers"] =
        serde_json::json!([{"name": "debugger", "image": "busybox", "targetContainerName": "app"}]);
    v["status"]["ephemeralContainerStatuses"] = serde_json::json!([{"name": "debugger", "image": "busybox", "imageID": "",
        "ready": false, "restartCount": 0, "containerID": "containerd://c7",
        "state": {"terminated": {"exitCode": 0, "containerID": "containerd://c7"}}}]);
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn an_ephemeral_containers_log_is_served_as_any_other() {
    let p = debugged();
    assert_eq!(container_id(&p, "debugger", false), Ok("c7".into()));
    assert_eq!(
        container_id(&p, "debugger", true),
        Err("previous terminated container \"debugger\" in pod \"web\" not found".into())
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, LOG).unwrap();
    let host = Arc::new(FakeHost { pods: vec![p], ..Default::default() });
    *host.log_path.lock().unwrap() = path;
    let auth = Arc::new(Auth {
        authenticator: crate::auth::Authenticator { anonymous: true, webhook: None },
        authorizer: crate::auth::Authorizer::AlwaysAllow,
        node_name: "node-a".into(),
    });
    let r = secure_router(handlers(host.clone(), true), auth);
    let got = call(&r, "GET", "/containerLogs/default/web/debugger", PeerCert::None, &[]).await;
    assert_eq!(got, (200, "one\ntwo\nthree\n".into()));
    assert_eq!(host.calls.lock().unwrap().last().unwrap(), "log c7");
}

#[tokio::test]
async fn a_log_file_linked_out_of_the_pod_log_folder_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(tmp.path().join("shadow"), "2024-01-02T03:04:05Z stdout F MARKER\n").unwrap();
    std::fs::write(root.join("0.log"), LOG).unwrap();
    let host = Arc::new(FakeHost::default());
    let mut h = handlers(host.clone(), true);
    let mut o = (*h.options).clone();
    o.pod_logs_dir = root.clone();
    h.options = Arc::new(o);
    let auth = Arc::new(Auth {
        authenticator: crate::auth::Authenticator { anonymous: true, webhook: None },
        authorizer: crate::auth::Authorizer::AlwaysAllow,
        node_name: "node-a".into(),
    });
    let r = secure_router(h, auth);
    *host.log_path.lock().unwrap() = root.join("0.log");
    let got = call(&r, "GET", "/containerLogs/default/web/app", PeerCert::None, &[]).await;
    assert_eq!(got, (200, "one\ntwo\nthree\n".into()));
    // The pod replaced its log file with a link to a file of the host.
    std::fs::remove_file(root.join("0.log")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("shadow"), root.join("0.log")).unwrap();
    for follow in ["", "?follow=true"] {
        let (code, body) =
            call(&r, "GET", &format!("/containerLogs/default/web/app{follow}"), PeerCert::None, &[]).await;
        assert_eq!(code, 200, "upstream has answered 200 when the file is opened");
        assert!(!body.contains("MARKER"), "{body}");
        assert!(body.starts_with("failed to open log file ") && body.contains("outside"), "{body}");
    }
}

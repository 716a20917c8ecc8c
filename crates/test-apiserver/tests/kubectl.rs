//! The real kubectl (`/usr/bin/kubectl`, or `$KUBECTL`) against the test apiserver: discovery, `get`
//! with server-side Tables, `create -f` with server-side field validation, `-o json`, `delete
//! --wait=false` of a bound pod (Terminating), `get -w`, `certificate approve` (protobuf body),
//! imperative `create configmap|secret` and error messages. Skipped when kubectl is not installed.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use test_apiserver::{Options, TestApiServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(server: &TestApiServer) -> Option<Kubectl> {
        let bin = PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
        if !bin.exists() {
            eprintln!("skipping: {} is not installed", bin.display());
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        server.kubeconfig(dir.path().join("kubeconfig")).expect("kubeconfig");
        Some(Kubectl { bin, dir })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = tokio::time::timeout(Duration::from_secs(60), self.cmd(args).output())
            .await
            .expect("kubectl in time")
            .expect("kubectl runs");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(o.ok, "kubectl {args:?} failed: {}{}", o.stdout, o.stderr);
        o.stdout
    }

    fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write");
        p.display().to_string()
    }
}

/// The whitespace-separated cells of each output line.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines().map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

fn node(name: &str, ready: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": ""}},
           "status": {"conditions": [{"type": "Ready", "status": ready}],
                      "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                      "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian", "kernelVersion": "6.1",
                                   "containerRuntimeVersion": "containerd://1.7"}}})
}

const POD_YAML: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    app: web\nspec:\n  nodeName: node1\n  containers:\n  - name: c\n    image: nginx:1.27\n";

#[tokio::test]
async fn get_create_delete_and_errors() {
    let s = TestApiServer::start(Options::default()).await.expect("start");
    let Some(k) = Kubectl::new(&s) else { return };
    s.create("v1", "nodes", None, node("node1", "True")).unwrap();
    s.create("v1", "nodes", None, node("node2", "Unknown")).unwrap();
    let out = k.ok(&["get", "nodes"]).await;
    let r = rows(&out);
    assert_eq!(r[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!((r[1][0].as_str(), r[1][1].as_str(), r[1][2].as_str()), ("node1", "Ready", "worker"));
    assert_eq!(r[2][1], "NotReady");
    assert_eq!(rows(&k.ok(&["get", "no", "-o", "wide"]).await)[1][5], "10.0.0.1");

    let f = k.file("pod.yaml", POD_YAML);
    assert_eq!(k.ok(&["create", "-f", &f]).await.trim(), "pod/web created");
    let r = rows(&k.ok(&["get", "pods", "-o", "wide"]).await);
    assert_eq!(
        r[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    );
    assert_eq!(
        [&r[1][0], &r[1][1], &r[1][2], &r[1][3], &r[1][5], &r[1][6]],
        ["web", "0/1", "Pending", "0", "<none>", "node1"]
    );

    let pod = s.get("v1", "pods", Some("default"), "web").unwrap();
    let mut st = pod.clone();
    st["status"] = json!({"phase": "Running", "podIP": "10.88.0.2", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c", "ready": true, "restartCount": 1, "image": "nginx:1.27", "imageID": "",
                               "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]});
    s.update("v1", "pods", Some("default"), "web", st, true).unwrap();
    let r = rows(&k.ok(&["get", "po", "-o", "wide"]).await);
    assert_eq!([&r[1][1], &r[1][2], &r[1][3], &r[1][5]], ["1/1", "Running", "1", "10.88.0.2"]);
    let json: Value = serde_json::from_str(&k.ok(&["get", "pod", "web", "-o", "json"]).await).unwrap();
    assert_eq!(json["status"]["podIP"], "10.88.0.2");
    assert_eq!(json["spec"]["terminationGracePeriodSeconds"], 30);

    let o = k.run(&["get", "pod", "nope"]).await;
    assert!(!o.ok);
    assert_eq!(o.stderr.trim(), "Error from server (NotFound): pods \"nope\" not found");
    let o = k.run(&["create", "-f", &f]).await;
    assert_eq!(
        o.stderr.trim(),
        format!("Error from server (AlreadyExists): error when creating \"{f}\": pods \"web\" already exists")
    );

    assert_eq!(k.ok(&["delete", "pod", "web", "--wait=false"]).await.trim(), "pod \"web\" deleted");
    let r = rows(&k.ok(&["get", "pods"]).await);
    assert_eq!(r[1][2], "Terminating");
    let p = s.get("v1", "pods", Some("default"), "web").unwrap();
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 30);
    // What the kubelet does once the containers are gone.
    assert!(s.delete("v1", "pods", Some("default"), "web", Some(0)).unwrap());
    let o = k.run(&["get", "pods"]).await;
    assert_eq!(o.stderr.trim(), "No resources found in default namespace.");

    assert_eq!(k.ok(&["create", "configmap", "cm", "--from-literal=a=b"]).await.trim(), "configmap/cm created");
    assert_eq!(s.get("v1", "configmaps", Some("default"), "cm").unwrap()["data"], json!({"a": "b"}));
    k.ok(&["create", "secret", "generic", "sec", "--from-literal=x=yy"]).await;
    let sec = s.get("v1", "secrets", Some("default"), "sec").unwrap();
    assert_eq!((sec["data"]["x"].as_str(), sec["type"].as_str()), (Some("eXk="), Some("Opaque")));
    k.ok(&["create", "namespace", "team"]).await;
    k.ok(&["-n", "team", "create", "-f", &f]).await;
    let r = rows(&k.ok(&["get", "pods", "-A"]).await);
    assert_eq!((r[1][0].as_str(), r[1][1].as_str()), ("team", "web"));
    let o = k.run(&["get", "leases", "-A"]).await;
    assert!(o.ok, "{}", o.stderr);
}

#[tokio::test]
async fn get_watch_streams_rows() {
    let s = TestApiServer::start(Options::default()).await.expect("start");
    let Some(k) = Kubectl::new(&s) else { return };
    let f = k.file("pod.yaml", POD_YAML);
    k.ok(&["create", "-f", &f]).await;
    let mut child = k.cmd(&["get", "pods", "-w"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a line in time")
            .expect("read")
            .expect("a line")
    };
    assert!(next().await.starts_with("NAME"));
    assert!(next().await.starts_with("web "));
    // Wait until kubectl's watch is open before changing anything.
    let watching = async {
        loop {
            if s.requests().iter().any(|r| r.uri.contains("watch=true")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), watching).await.expect("kubectl watches");
    let mut other = serde_json::from_str::<Value>(
        &serde_json::to_string(&json!({
        "metadata": {"name": "second"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .unwrap(),
    )
    .unwrap();
    other["apiVersion"] = json!("v1");
    s.create("v1", "pods", Some("default"), other).unwrap();
    let line = next().await;
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cells[..3], ["second", "0/1", "Pending"]);
    s.delete("v1", "pods", Some("default"), "web", None).unwrap();
    let line = next().await;
    assert!(line.starts_with("web ") && line.contains("Terminating"), "{line}");
    child.kill().await.expect("kill");
}

#[tokio::test]
async fn certificate_approve() {
    let s = TestApiServer::start(Options::default()).await.expect("start");
    let Some(k) = Kubectl::new(&s) else { return };
    let csr = "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: node-csr-1\nspec:\n  request: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K\n  signerName: kubernetes.io/kube-apiserver-client-kubelet\n  usages:\n  - digital signature\n  - client auth\n";
    let f = k.file("csr.yaml", csr);
    k.ok(&["create", "-f", &f]).await;
    let r = rows(&k.ok(&["get", "csr"]).await);
    assert_eq!(r[0], ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]);
    assert_eq!([&r[1][3], &r[1][5]], ["system:admin", "Pending"]);
    assert_eq!(
        k.ok(&["certificate", "approve", "node-csr-1"]).await.trim(),
        "certificatesigningrequest.certificates.k8s.io/node-csr-1 approved"
    );
    let c = s.get("certificates.k8s.io/v1", "certificatesigningrequests", None, "node-csr-1").unwrap();
    let cond = &c["status"]["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str(), cond["reason"].as_str()),
        (Some("Approved"), Some("True"), Some("KubectlApprove"))
    );
    assert!(cond["lastUpdateTime"].is_string());
    assert_eq!(c["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(rows(&k.ok(&["get", "csr"]).await)[1][5], "Approved");
    let o = k.run(&["certificate", "deny", "node-csr-1"]).await;
    assert!(!o.ok, "approved and denied are exclusive");
}

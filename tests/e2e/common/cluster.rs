//! The cluster side of the end-to-end harness: the real kube-apiserver and kube-controller-manager of the
//! `test-cluster` crate (one control plane for the whole run, started by `scripts/test.sh` or by the first test
//! that needs it), and per test its own node name and namespace, so tests never see each other's objects.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use test_cluster::ControlPlane;
use tokio::sync::OnceCell;

use super::{Node, get_json, kubectl};

static CONTROL_PLANE: OnceCell<ControlPlane> = OnceCell::const_new();

/// The shared control plane, started if it does not run yet.
pub async fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| ControlPlane::ensure(&test_cluster::default_dir()))
                .await
                .expect("start the control plane")
                .unwrap_or_else(|e| panic!("the test control plane: {e}"))
        })
        .await
}

/// One test's slice of the cluster: a node name (resolvable by the apiserver), a namespace of the same name, the
/// admin's kubeconfig and the node's.
pub struct TestEnv {
    /// The control plane.
    pub cp: &'static ControlPlane,
    /// The node name, also the namespace.
    pub node: String,
    /// The test's namespace.
    pub ns: String,
    /// The admin kubeconfig (`system:masters`).
    pub admin: PathBuf,
    /// The node's kubeconfig (`system:node:<node>` in `system:nodes`).
    pub kubelet_kubeconfig: PathBuf,
    /// A folder for the test's files.
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl TestEnv {
    /// A new node name and its namespace (ready for pods: the service-account controller made `default`).
    pub async fn new() -> TestEnv {
        let cp = control_plane().await;
        let node = cp.next_node_name().expect("a node name");
        let tmp = tempfile::Builder::new().prefix("rkubelet-e2e-env-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let kubelet_kubeconfig = dir.join("kubelet.conf");
        cp.write_node_kubeconfig(&kubelet_kubeconfig, &node).unwrap();
        let admin = cp.admin_kubeconfig();
        // A Node object left by an earlier run of the pool is removed, so registration starts fresh.
        kubectl(&admin, &["delete", "node", &node, "--ignore-not-found", "--wait=false"]).await;
        let env = TestEnv { cp, ns: node.clone(), node, admin, kubelet_kubeconfig, dir, _tmp: tmp };
        if get_json(&env.admin, &["namespace", &env.ns]).await.is_some() {
            kubectl(&env.admin, &["delete", "namespace", &env.ns, "--wait=true", "--timeout=120s"]).await;
        }
        kubectl(&env.admin, &["create", "namespace", &env.ns]).await;
        env.wait("the namespace's default service account", Duration::from_secs(60), || async {
            get_json(&env.admin, &["-n", &env.ns, "serviceaccount", "default"]).await
        })
        .await;
        env
    }

    /// Waits for `f` (polling every 100 ms), failing with `what` after `timeout`.
    pub async fn wait<T, F, Fut>(&self, what: &str, timeout: Duration, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        super::wait_until(what, timeout, async || f().await).await
    }

    /// A node of this environment joined to the cluster with its kubeconfig, started.
    pub fn start_node(&self, manifests: &[(&str, &str)]) -> Node {
        self.start_node_with(manifests, |n| std::fs::read_to_string(&n.config).unwrap(), vec![])
    }

    /// As [`TestEnv::start_node`], with the config edited and extra flags.
    pub fn start_node_with(
        &self,
        manifests: &[(&str, &str)],
        edit: impl FnOnce(&Node) -> String,
        mut extra_args: Vec<String>,
    ) -> Node {
        extra_args.insert(0, format!("--kubeconfig={}", self.kubelet_kubeconfig.display()));
        Node::start_named(&self.node, manifests, edit, extra_args)
    }

    /// As [`TestEnv::start_node_with`], with extra environment variables.
    pub fn start_node_env(&self, edit: impl FnOnce(&Node) -> String, env: Vec<(String, String)>) -> Node {
        let args = vec![format!("--kubeconfig={}", self.kubelet_kubeconfig.display())];
        Node::start_named_env(&self.node, &[], edit, args, env)
    }

    /// The node's configuration as kubeadm writes it: webhook authentication and authorization, and the cluster CA
    /// for client certificates.
    pub fn kubeadm_config(&self, n: &Node) -> String {
        let ca = self.cp.pki.path("ca.crt");
        std::fs::read_to_string(&n.config)
            .unwrap()
            .replace(
                "  webhook:\n    enabled: false\n",
                &format!(
                    "  webhook:\n    enabled: true\n    cacheTTL: 2m\n  x509:\n    clientCAFile: {}\n",
                    ca.display()
                ),
            )
            .replace("mode: AlwaysAllow", "mode: Webhook")
    }

    /// A node whose API trusts the cluster CA and asks the apiserver about tokens and rights (webhook
    /// authentication and authorization), as kubeadm configures it, so the apiserver's `pods/log`, `exec`,
    /// `attach` and `portforward` reach it with its kubelet-client certificate; started, its secure port open.
    pub async fn start_kubeadm_node(&self) -> Node {
        self.start_kubeadm_node_with("").await
    }

    /// As [`TestEnv::start_kubeadm_node`], with `extra` appended to the configuration.
    pub async fn start_kubeadm_node_with(&self, extra: &str) -> Node {
        let mut node = self.start_node_with(&[], |n| self.kubeadm_config(n) + extra, vec![]);
        node.wait_for("the secure port", Duration::from_secs(30), || async {
            std::net::TcpStream::connect(("127.0.0.1", super::secure_port())).is_ok().then_some(())
        })
        .await;
        node
    }

    /// kubectl as the admin in the test's namespace.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let mut a = vec!["-n", self.ns.as_str()];
        a.extend_from_slice(args);
        kubectl(&self.admin, &a).await
    }

    /// kubectl as the admin in the test's namespace: (success, stdout, stderr).
    pub async fn kubectl_output(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.admin.display()))
            .args(["-n", self.ns.as_str()])
            .args(args)
            .output()
            .await
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A long-running kubectl as the admin in the test's namespace (a watch, exec, attach, port-forward): stdout
    /// piped (and stdin when `stdin`), stderr dropped, killed when dropped.
    pub fn spawn_kubectl(&self, args: &[&str], stdin: bool) -> tokio::process::Child {
        tokio::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.admin.display()))
            .args(["-n", self.ns.as_str()])
            .args(args)
            .stdin(if stdin { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("run kubectl")
    }

    /// `kubectl get <args> -o json` in the test's namespace, or None.
    pub async fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["-n", self.ns.as_str()];
        a.extend_from_slice(args);
        get_json(&self.admin, &a).await
    }

    /// The pod `name` of the test's namespace, or None.
    pub async fn pod(&self, name: &str) -> Option<Value> {
        self.get(&["pod", name]).await
    }

    /// The test's Node object, or None.
    pub async fn node_object(&self) -> Option<Value> {
        get_json(&self.admin, &["node", &self.node]).await
    }

    /// `kubectl create -f` of `yaml` (written to a file of the test) in the test's namespace.
    pub async fn create(&self, yaml: &str) {
        let f = self.write(&format!("obj-{}.yaml", rand_suffix()), yaml);
        self.kubectl(&["create", "-f", f.to_str().unwrap()]).await;
    }

    /// Writes a file of the test.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Waits until the Node is Ready.
    pub async fn wait_node_ready(&self, node: &mut Node) -> Value {
        node.wait_for("Node Ready", Duration::from_secs(60), || async {
            self.node_object().await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
        })
        .await
    }

    /// Waits until the apiserver shows pod `name` Running with every container ready.
    pub async fn wait_pod_running(&self, node: &mut Node, name: &str) -> Value {
        node.wait_for(&format!("pod {name} Running in the apiserver"), Duration::from_secs(60), || async {
            self.pod(name).await.filter(super::all_running)
        })
        .await
    }

    /// A pod of busybox containers `(name, script)` bound to the test's node, as YAML.
    pub fn pod_yaml(&self, name: &str, containers: &[(&str, &str)], extra_spec: &str) -> String {
        let mut s = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {}\n  \
             terminationGracePeriodSeconds: 2\n{extra_spec}  containers:\n",
            self.node
        );
        for (n, script) in containers {
            s.push_str(&format!(
                "  - name: {n}\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", {}]\n",
                serde_json::to_string(script).unwrap()
            ));
        }
        s
    }

    /// The audit events of this node's requests so far (`system:node:<node>`).
    pub fn node_requests(&self) -> Vec<Value> {
        self.cp.audit_events(&format!("system:node:{}", self.node))
    }

    /// Panics the apiserver logged (there must be none).
    pub fn apiserver_panics(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.cp.apiserver_log()).unwrap_or_default();
        log.lines().filter(|l| l.contains("apiserver panic'd") && l.contains(&self.ns)).map(str::to_string).collect()
    }

    /// The path of a file of the test.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    /// The events of the test's namespace: (object name, reason, message, count).
    pub async fn events(&self) -> Vec<(String, String, String, i64)> {
        let Some(list) = self.get(&["events"]).await else { return vec![] };
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or("").to_string();
                (s(&e["involvedObject"]["name"]), s(&e["reason"]), s(&e["message"]), e["count"].as_i64().unwrap_or(1))
            })
            .collect()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // The namespace's contents are removed by the namespace controller and the Node's pods, once it is gone, by
        // the pod garbage collector; nothing waits for either.
        for what in [["namespace", self.ns.as_str()], ["node", self.node.as_str()]] {
            let _ = std::process::Command::new("kubectl")
                .arg(format!("--kubeconfig={}", self.admin.display()))
                .args(["delete", what[0], what[1], "--wait=false", "--ignore-not-found"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// The status of condition `kind` of a Node or Pod.
pub fn condition(obj: &Value, kind: &str) -> Option<String> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(String::from))
}

/// A short random suffix for file and object names.
pub fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The verb, resource and name of an audit event, e.g. `("watch", "configmaps", "app-config")`.
pub fn audit_request(e: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (s(&e["verb"]), s(&e["objectRef"]["resource"]), s(&e["objectRef"]["name"]))
}

/// `pod` (a pod manifest of a test) as the pod template of a DaemonSet on the test node only, as an operator
/// deploys a node plugin (the other nodes of the shared cluster are other tests').
pub fn daemonset(env: &TestEnv, pod: &str) -> String {
    let (head, spec) = pod.split_once("\nspec:\n").expect("a pod manifest");
    let name = head.lines().find_map(|l| l.trim().strip_prefix("name: ")).expect("a name");
    let spec: String =
        spec.lines().filter(|l| !l.trim_start().starts_with("nodeName:")).map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: {name}\nspec:\n  selector:\n    matchLabels:\n      \
         app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      \
         nodeSelector:\n        kubernetes.io/hostname: {}\n{spec}",
        env.node
    )
}

/// The running pod of the DaemonSet `name` on the node, once there.
pub async fn daemon_pod(env: &TestEnv, name: &str) -> Option<Value> {
    let (_, out, _) = env.kubectl_output(&["get", "pods", "-l", &format!("app={name}"), "-o", "json"]).await;
    let list: Value = serde_json::from_str(&out).ok()?;
    list["items"]
        .as_array()?
        .iter()
        .find(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
}

/// A fresh runtime and a kubeadm-style node, Ready, with the node plugins' images imported again, for the tests of
/// node plugins on containerd 2 (DRA and CSI drivers); None, with `why` printed, where the suite runs on 1.6.
pub async fn plugin_node(why: &str) -> Option<(super::Serial, kubelet_cri::RemoteRuntime, TestEnv, Node)> {
    plugin_node_with(why, "").await
}

/// As [`plugin_node`], with `extra` appended to the node's configuration.
pub async fn plugin_node_with(
    why: &str,
    extra: &str,
) -> Option<(super::Serial, kubelet_cri::RemoteRuntime, TestEnv, Node)> {
    if super::containerd_version() == "1.6" {
        println!("{why}");
        return None;
    }
    let (guard, rt) = super::fresh_runtime().await;
    super::restore_node_images();
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node_with(extra).await;
    env.wait_node_ready(&mut node).await;
    Some((guard, rt, env, node))
}

//! End to end: rkubelet on kubeadm's terms (issue 35) — the real kubeadm v1.35 (`../shared/k8s/bin/kubeadm.xz`,
//! or `$KUBEADM`) runs its preflight with rkubelet first in PATH as `kubelet`, and rkubelet starts from the files
//! and flags kubeadm wrote on a real control-plane node (`../shared/fixtures/kubeadm-v1.35-init`: its
//! `config.yaml` with kubeadm's zero values and `cgroupRoot: /kubeadm-node`, its `kubeadm-flags.env`), only the
//! runtime socket, the addresses and the paths substituted, and joins the real apiserver with the node Ready.

mod common;

use std::path::{Path, PathBuf};

use common::cluster::TestEnv;
use common::*;

const SERVE_SH: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// The fixture's folder.
fn fixture() -> PathBuf {
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/kubeadm-v1.35-init");
    [beside, PathBuf::from("/work/shared/fixtures/kubeadm-v1.35-init")]
        .into_iter()
        .find(|p| p.is_dir())
        .expect("../shared/fixtures/kubeadm-v1.35-init beside the project")
}

/// The arguments of `KUBELET_KUBEADM_ARGS="..."` in kubeadm's flags file.
fn kubeadm_args(text: &str) -> Vec<String> {
    let line = text.lines().find_map(|l| l.strip_prefix("KUBELET_KUBEADM_ARGS=")).expect("KUBELET_KUBEADM_ARGS");
    line.trim_matches('"').split_whitespace().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeadms_preflight_finds_no_fault_with_rkubelet_as_the_kubelet() {
    let kubeadm = test_cluster::unpacked_binary("KUBEADM", "k8s/bin/kubeadm").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rkubelet"), bin.join("kubelet")).unwrap();
    let out = std::process::Command::new(bin.join("kubelet")).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Kubernetes v1.35.0\n", "what the upstream kubelet prints");

    let version = std::process::Command::new(&kubeadm).args(["version", "-o", "short"]).output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let cfg = dir.path().join("kubeadm.yaml");
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  criSocket: {}\n  \
             name: localhost\n---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
             kubernetesVersion: {version}\netcd:\n  external:\n    endpoints:\n    - https://127.0.0.1:2379\n",
            endpoint()
        ),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    // Every other check (ports, swap, kernel config, the systemd unit) depends on this machine, not on the
    // kubelet: they are reported as warnings, and only the kubelet's must be clean. The node is `localhost`, so
    // the hostname check resolves it from /etc/hosts and asks no DNS server.
    let out = tokio::process::Command::new(&kubeadm)
        .args(["init", "phase", "preflight", "--dry-run", "--ignore-preflight-errors=all", "--v=1", "--config"])
        .arg(&cfg)
        .env("PATH", &path)
        .output()
        .await
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("kubeadm init phase preflight with rkubelet as the kubelet:\n{text}");
    assert!(out.status.success(), "kubeadm preflight failed");
    assert!(text.contains("validating kubelet version"), "the kubelet check ran");
    let complaints: Vec<&str> = text.lines().filter(|l| l.contains("KubeletVersion")).collect();
    assert!(complaints.is_empty(), "kubeadm complains about the kubelet: {complaints:?}");
}

/// Removes the cgroups below `root` of every v1 hierarchy, deepest first (nothing runs in them any more).
fn remove_cgroups(root: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else { return };
    for h in hierarchies.flatten() {
        let top = h.path().join(root.trim_start_matches('/'));
        let mut dirs = vec![];
        let mut stack = vec![top];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
                dirs.push(d);
            }
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rkubelet_starts_from_kubeadms_own_files_and_flags_and_the_node_turns_ready() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let fx = fixture();
    let kubeadm_cfg = std::fs::read_to_string(fx.join("var/lib/kubelet/config.yaml")).unwrap();
    let ca = env.cp.pki.path("ca.crt");
    remove_cgroups("/kubeadm-node");
    let edit = |n: &Node| {
        let text = kubeadm_cfg
            .replace("unix:///run/containerd/containerd.sock", &endpoint())
            .replace("/etc/kubernetes/manifests", &n.manifests.display().to_string())
            .replace("/etc/kubernetes/pki/ca.crt", &ca.display().to_string())
            .replace("healthzPort: 10248", &format!("healthzPort: {HEALTHZ_PORT}"));
        format!("{text}address: 127.0.0.1\nport: {SECURE_PORT}\npodLogsDir: {}\n", n.logs.display())
    };
    // kubeadm's flags as its drop-in passes them, the node name substituted.
    let mut args: Vec<String> =
        kubeadm_args(&std::fs::read_to_string(fx.join("var/lib/kubelet/kubeadm-flags.env")).unwrap())
            .into_iter()
            .map(
                |a| if a.starts_with("--hostname-override=") { format!("--hostname-override={}", env.node) } else { a },
            )
            .collect();
    assert!(args.iter().any(|a| a.starts_with("--pod-infra-container-image=")), "{args:?}");
    args.push(format!("--kubeconfig={}", env.kubelet_kubeconfig.display()));
    let mut node = Node::start_named_env(&env.node, &[], edit, args, vec![]);
    let n = env.wait_node_ready(&mut node).await;
    assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.35.0");
    let log = node.log();
    assert!(
        log.contains("Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will get sandbox image information from CRI."),
        "upstream's deprecation warning:\n{}",
        tail(&log, 40)
    );

    // A pod runs under the configured cgroup root.
    env.create(&env.pod_yaml("web", &[("app", SERVE_SH)], "")).await;
    let p = env.wait_pod_running(&mut node, "web").await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let pod_cgroup = Path::new("/sys/fs/cgroup/cpu/kubeadm-node/kubepods/besteffort").join(format!("pod{uid}"));
    assert!(pod_cgroup.is_dir(), "{} exists", pod_cgroup.display());
    node.stop_and_clean(&rt).await;
    remove_cgroups("/kubeadm-node");
}

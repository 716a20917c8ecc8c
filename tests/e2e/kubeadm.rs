//! End to end: rkubelet on kubeadm's terms (issue 35) — the real kubeadm v1.35 (`../shared/k8s/bin/kubeadm.xz`,
//! or `$KUBEADM`) runs its preflight with rkubelet first in PATH as `kubelet`, and rkubelet starts from the files
//! and flags kubeadm wrote on a real control-plane node (`../shared/fixtures/kubeadm-v1.35-init`: its
//! `config.yaml` with kubeadm's zero values and `cgroupRoot: /kubeadm-node`, its `kubeadm-flags.env`), only the
//! runtime socket, the addresses and the paths substituted, and joins the real apiserver with the node Ready.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// The hierarchies where upstream's kubelet checks that the cgroup root exists (`cgroupV1impl.Validate`).
const CHECKED: [&str; 7] = ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "hugetlb"];

const CGROUPS: &str = "/sys/fs/cgroup";

/// A cgroup root of the test, absent at first (what a failed run left is removed); removed with everything below
/// it when dropped, also when the test fails.
struct CgroupRoot(&'static str);

impl CgroupRoot {
    fn absent(root: &'static str) -> CgroupRoot {
        remove_cgroups(root);
        CgroupRoot(root)
    }

    /// Makes the root as a node's admin does: its folder in every hierarchy the kubelet checks.
    fn make(&self) {
        for h in CHECKED.iter().map(|h| Path::new(CGROUPS).join(h)).filter(|h| h.join("cgroup.procs").exists()) {
            std::fs::create_dir_all(h.join(self.0.trim_start_matches('/'))).unwrap();
        }
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        remove_cgroups(self.0);
    }
}

/// Removes the cgroups below `root` of every v1 hierarchy, deepest first; a process still in them (the containers
/// of a failed run) is killed first.
fn remove_cgroups(root: &str) {
    let Ok(hierarchies) = std::fs::read_dir(CGROUPS) else { return };
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
            for _ in 0..50 {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
                }
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
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
    let edit = |n: &Node| {
        let text = kubeadm_cfg
            .replace("unix:///run/containerd/containerd.sock", &endpoint())
            .replace("/etc/kubernetes/manifests", &n.manifests.display().to_string())
            .replace("/etc/kubernetes/pki/ca.crt", &ca.display().to_string())
            .replace("healthzPort: 10248", &format!("healthzPort: {}", healthz_port()));
        // The test nodes' eviction thresholds: upstream's default percentages put a fuller build disk under
        // DiskPressure at once, and no pod would be admitted.
        format!("{text}address: 127.0.0.1\nport: {}\npodLogsDir: {}\n{EVICTION_HARD}", secure_port(), n.logs.display())
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
    // As upstream's kubelet: the cgroup root must exist; the kubelet makes `<cgroupRoot>/kubepods` in it.
    let cgroup_root = CgroupRoot::absent("/kubeadm-node");
    let mut node = Node::start_named_env(&env.node, &[], edit, args, vec![]);
    let status = node.wait_exit(Duration::from_secs(60)).await;
    let log = node.log();
    assert!(!status.success(), "{}", tail(&log, 20));
    assert!(
        log.contains(
            "invalid configuration: cgroup [\"kubeadm-node\"] has some missing paths: /sys/fs/cgroup/cpu/kubeadm-node"
        ),
        "upstream's refusal of a missing cgroup root:\n{}",
        tail(&log, 20)
    );
    assert!(!Path::new("/sys/fs/cgroup/cpu/kubeadm-node").exists(), "the root is not made");
    cgroup_root.make();
    node.spawn();
    let n = env.wait_node_ready(&mut node).await;
    assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.35.0");
    let log = node.log();
    // What an operator sees at start-up from kubeadm's files (printed past the harness's capture).
    let start_up: Vec<&str> = log
        .lines()
        .filter(|l| {
            ["Flag --", "starting rkubelet", "cgroup-root", "registered", "Ready"].iter().any(|w| l.contains(w))
        })
        .take(12)
        .collect();
    eprintln!("rkubelet from kubeadm's files:\n{}", start_up.join("\n"));
    assert!(
        log.contains("Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will get sandbox image information from CRI."),
        "upstream's deprecation warning:\n{}",
        tail(&log, 40)
    );

    // A pod runs under the configured cgroup root, its containers too (the sandbox's cgroup parent).
    env.create(&env.pod_yaml("web", &[("app", SERVE_SH)], "")).await;
    let p = env.wait_pod_running(&mut node, "web").await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let pod_cgroup =
        |h: &str| Path::new(CGROUPS).join(h).join("kubeadm-node/kubepods/besteffort").join(format!("pod{uid}"));
    assert!(pod_cgroup("cpu").is_dir(), "{} exists", pod_cgroup("cpu").display());
    let busy = std::fs::read_dir(pod_cgroup("memory"))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path().join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty()))
        .count();
    assert_eq!(busy, 2, "the sandbox's and the container's cgroups hold their processes");
    // Node allocatable on `<cgroupRoot>/kubepods` (kubeadm reserves nothing: the capacity); BestEffort's minimum.
    let read = |f: &str| std::fs::read_to_string(f).unwrap().trim().to_string();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(read("/sys/fs/cgroup/cpu/kubeadm-node/kubepods/cpu.shares"), (cores * 1024).to_string());
    assert_eq!(read("/sys/fs/cgroup/pids/kubeadm-node/kubepods/pids.max"), read("/proc/sys/kernel/pid_max"));
    assert_eq!(read("/sys/fs/cgroup/cpu/kubeadm-node/kubepods/besteffort/cpu.shares"), "2");

    // A deleted pod's cgroups go, in every hierarchy.
    env.kubectl(&["delete", "pod", "web", "--grace-period=1", "--wait=false"]).await;
    node.wait_for("the pod's cgroups removed", Duration::from_secs(60), || {
        let gone = !["cpu", "memory", "pids", "freezer"].iter().any(|h| pod_cgroup(h).exists());
        async move { gone.then_some(()) }
    })
    .await;
    node.stop_and_clean(&rt).await;
}

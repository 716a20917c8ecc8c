//! Node allocatable enforcement on the real cgroup hierarchy (`enforceNodeAllocatable: pods, system-reserved,
//! kube-reserved`), with the real rkubelet and containerd; the systemd cgroup driver and, under real systemd, the
//! service notifications (`READY=1`, the `SystemdWatchdog` keep-alives).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::systemd_ns::SystemdNs;
use common::*;

const CGROUPS: &str = "/sys/fs/cgroup";
const SYSTEM: &str = "rk-e2e-system.slice";
const KUBE: &str = "rk-e2e-kube.slice";

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display())).trim().to_string()
}

/// The reserved cgroups the operator made (systemd would, for `system.slice`), removed at the end.
struct Reserved(Vec<PathBuf>);

impl Reserved {
    fn make() -> Reserved {
        let mut v = vec![];
        for c in ["cpu", "memory", "pids"] {
            for g in [SYSTEM, KUBE] {
                let d = Path::new(CGROUPS).join(c).join(g);
                let _ = std::fs::create_dir(&d);
                v.push(d);
            }
        }
        Reserved(v)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn mem_total() -> u64 {
    read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_allocatable_is_enforced_on_the_pods_and_reserved_cgroups() {
    let (_g, rt) = fresh_runtime().await;
    if Path::new(CGROUPS).join("cgroup.controllers").exists() {
        panic!("this test reads cgroup v1 files; the machine mounts cgroup v2 only");
    }
    let _reserved = Reserved::make();
    let config = |n: &Node| {
        std::fs::read_to_string(&n.config).unwrap()
            + &format!(
                "systemReserved:\n  cpu: 500m\n  memory: 256Mi\n  pid: \"1000\"\nkubeReserved:\n  cpu: 250m\n  memory: \
                 128Mi\nenforceNodeAllocatable: [pods, system-reserved, kube-reserved]\nsystemReservedCgroup: \
                 /{SYSTEM}\nkubeReservedCgroup: /{KUBE}\n"
            )
    };
    let web = manifest("web", &[], &[("app", "exec sleep 3600")], "");
    let mut node = Node::start_with(&[("web.yaml", &web)], config);
    let pod = node.wait_running("web-e2e-node").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();

    let cores = std::thread::available_parallelism().unwrap().get() as i64;
    let pid_max: i64 = read("/proc/sys/kernel/pid_max").parse().unwrap();
    let kubepods = |c: &str, f: &str| read(Path::new(CGROUPS).join(c).join("kubepods").join(f));
    // Allocatable = capacity − 750m CPU, − 384Mi memory, − 1000 pids.
    assert_eq!(kubepods("cpu", "cpu.shares"), ((cores * 1000 - 750) * 1024 / 1000).to_string());
    assert_eq!(kubepods("memory", "memory.limit_in_bytes"), (mem_total() - (384 << 20)).to_string());
    assert_eq!(kubepods("pids", "pids.max"), (pid_max - 1000).to_string());
    let reserved = |c: &str, g: &str, f: &str| read(Path::new(CGROUPS).join(c).join(g).join(f));
    assert_eq!(reserved("cpu", SYSTEM, "cpu.shares"), "512");
    assert_eq!(reserved("memory", SYSTEM, "memory.limit_in_bytes"), (256u64 << 20).to_string());
    assert_eq!(reserved("pids", SYSTEM, "pids.max"), "1000");
    assert_eq!(reserved("cpu", KUBE, "cpu.shares"), "256");
    assert_eq!(reserved("memory", KUBE, "memory.limit_in_bytes"), (128u64 << 20).to_string());
    assert_eq!(reserved("pids", KUBE, "pids.max"), "max", "no pid reservation: no limit");
    // The pod runs under the limited pods cgroup.
    assert!(Path::new(CGROUPS).join("memory/kubepods/besteffort").join(format!("pod{uid}")).is_dir());
    let log = node.log();
    assert!(log.contains("Updated Node Allocatable limit across pods"), "{}", tail(&log, 20));
    assert!(log.contains(&format!("Updated limits on system reserved cgroup /{SYSTEM}")));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_reserved_cgroup_stops_start_up_with_its_name() {
    let (_g, rt) = fresh_runtime().await;
    let config = |n: &Node| {
        std::fs::read_to_string(&n.config).unwrap()
            + "kubeReserved:\n  cpu: 250m\nenforceNodeAllocatable: [pods, kube-reserved]\nkubeReservedCgroup: /rk-e2e-absent.slice\n"
    };
    let mut node = Node::start_with(&[], config);
    let status = node.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = node.log();
    assert!(
        log.contains("Failed to enforce Kube Reserved Cgroup Limits on \"/rk-e2e-absent.slice\"")
            && log.contains("cgroup does not exist"),
        "{}",
        tail(&log, 10)
    );
    node.stop_and_clean(&rt).await;
}

/// The static pod `web` whose container requests 100m CPU and 16Mi and is limited to 500m and 64Mi (Burstable);
/// its `sleep` ignores SIGTERM, so it is stopped after a grace period of 1 s.
fn burstable_web() -> String {
    let web = manifest("web", &[], &[("app", "exec sleep 3600")], "  terminationGracePeriodSeconds: 1\n").replace(
        "    command:",
        "    resources:\n      requests: {cpu: 100m, memory: 16Mi}\n      limits: {cpu: 500m, memory: 64Mi}\n    command:",
    );
    assert!(web.contains("limits"), "{web}");
    web
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_the_systemd_driver_are_slices_systemd_knows() {
    let _g = serial().await;
    let ns = SystemdNs::start();
    let config = ns.node_config(
        "systemReserved:\n  cpu: 200m\n  memory: 64Mi\nenforceNodeAllocatable: [pods, system-reserved]\n\
         systemReservedCgroup: /system.slice\n",
    );
    let web = burstable_web();
    let env = vec![(WRAPPER_ENV.to_string(), ns.wrapper().display().to_string())];
    let mut node = Node::start_named_env("e2e-node", &[("web.yaml", &web)], config, vec![], env);
    let pod = node.wait_running("web-e2e-node").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let id = container_status(&pod, "app").unwrap()["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();

    // The QoS slices and the pod's slice are systemd units, active.
    let slice = format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    for unit in ["kubepods.slice", "kubepods-burstable.slice", "kubepods-besteffort.slice", slice.as_str()] {
        assert_eq!(ns.unit_state(unit), "active", "{unit}");
    }
    let status = ns.exec(&["systemctl", "status", "--no-pager", &slice]);
    assert!(
        status.contains(&format!("cri-containerd-{id}.scope")),
        "the container's scope is in the pod's slice:\n{status}"
    );
    // systemd wrote the pod's limits.
    let path = format!("kubepods.slice/kubepods-burstable.slice/{slice}");
    let read = |f: &str| ns.exec(&["cat", &format!("/sys/fs/cgroup/{f}")]).trim().to_string();
    assert_eq!(read(&format!("memory/{path}/memory.limit_in_bytes")), "67108864");
    assert_eq!(read(&format!("cpu/{path}/cpu.shares")), "102");
    assert_eq!(read(&format!("cpu/{path}/cpu.cfs_quota_us")), "50000");
    assert_eq!(read("cpu/kubepods.slice/kubepods-besteffort.slice/cpu.shares"), "2");
    // Node allocatable through unit properties: kubepods.slice gets capacity − systemReserved, system.slice the
    // reservation.
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(read("memory/kubepods.slice/memory.limit_in_bytes"), (mem_total() - (64 << 20)).to_string());
    assert_eq!(read("cpu/kubepods.slice/cpu.shares"), ((cores * 1000 - 200) * 1024 / 1000).to_string());
    assert_eq!(read("memory/system.slice/memory.limit_in_bytes"), (64u64 << 20).to_string());
    assert_eq!(read("cpu/system.slice/cpu.shares"), "204");
    assert!(node.log().contains("Updated limits on system reserved cgroup /system.slice"));

    // Removing the pod stops its slice.
    node.remove_manifest("web.yaml");
    node.wait_for("the pod's slice stopped", Duration::from_secs(60), || async {
        matches!(ns.unit_state(&slice).as_str(), "inactive" | "").then_some(())
    })
    .await;
    assert!(!node.log().contains("panicked"));
    node.kill9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_cgroup_root_the_systemd_driver_s_slices_are_named_as_upstream_s() {
    let _g = serial().await;
    let ns = SystemdNs::start();
    let env = vec![(WRAPPER_ENV.to_string(), ns.wrapper().display().to_string())];
    let config = ns.node_config("cgroupRoot: /kubeadm-node\n");
    // As upstream: the root's slice must exist in every hierarchy the kubelet checks.
    let mut node = Node::start_named_env("e2e-node", &[("web.yaml", &burstable_web())], config, vec![], env);
    assert!(!node.wait_exit(Duration::from_secs(30)).await.success());
    let log = node.log();
    assert!(
        log.contains(
            "invalid configuration: cgroup [\"kubeadm-node\"] has some missing paths: \
             /sys/fs/cgroup/cpu/kubeadm_node.slice"
        ),
        "{}",
        tail(&log, 10)
    );
    // The admin's slice: systemd makes it where it accounts (memory, pids), the admin in the other hierarchies.
    ns.exec(&["systemctl", "start", "kubeadm_node.slice"]);
    for h in ["cpu", "cpuacct", "cpuset"] {
        ns.exec(&["mkdir", "-p", &format!("/sys/fs/cgroup/{h}/kubeadm_node.slice")]);
    }
    node.spawn();
    let pod = node.wait_running("web-e2e-node").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let id = container_id(&pod, "app");

    // Every slice is named as upstream's ToSystemd names `[kubeadm-node, kubepods, ...]`.
    let slice = format!("kubeadm_node-kubepods-burstable-pod{}.slice", uid.replace('-', "_"));
    for unit in ["kubeadm_node-kubepods.slice", "kubeadm_node-kubepods-besteffort.slice", slice.as_str()] {
        assert_eq!(ns.unit_state(unit), "active", "{unit}");
    }
    assert!(matches!(ns.unit_state("kubepods.slice").as_str(), "inactive" | ""), "nothing at the default root");
    let status = ns.exec(&["systemctl", "status", "--no-pager", &slice]);
    assert!(status.contains(&format!("cri-containerd-{id}.scope")), "the container's scope:\n{status}");
    let path = format!("kubeadm_node.slice/kubeadm_node-kubepods.slice/kubeadm_node-kubepods-burstable.slice/{slice}");
    let read = |f: &str| ns.exec(&["cat", &format!("/sys/fs/cgroup/{f}")]).trim().to_string();
    assert_eq!(read(&format!("memory/{path}/memory.limit_in_bytes")), "67108864");
    assert_eq!(
        read("memory/kubeadm_node.slice/kubeadm_node-kubepods.slice/memory.limit_in_bytes"),
        mem_total().to_string()
    );

    node.remove_manifest("web.yaml");
    node.wait_for("the pod's slice stopped", Duration::from_secs(60), || async {
        matches!(ns.unit_state(&slice).as_str(), "inactive" | "").then_some(())
    })
    .await;
    node.kill9();
}

/// The pod cgroup of `uid` in the v1 hierarchy `controller` (Guaranteed pods sit in `kubepods` itself).
fn pod_dir(controller: &str, qos: &str, uid: &str) -> PathBuf {
    Path::new(CGROUPS).join(controller).join("kubepods").join(qos).join(format!("pod{uid}"))
}

fn container_id(pod: &serde_json::Value, name: &str) -> String {
    let id = container_status(pod, name).unwrap()["containerID"].as_str().unwrap();
    id.trim_start_matches("containerd://").to_string()
}

/// The app of the pod-level resources pod: prints the limits it sees in its own cgroups, then sleeps.
const SHOW_LIMITS: &str = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us \
                           /sys/fs/cgroup/cpu/cpu.shares; exec sleep 3600";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_only_pod_level_resources_runs_with_upstreams_cgroups_through_the_apiserver() {
    let (_g, rt) = fresh_runtime().await;
    assert!(!Path::new(CGROUPS).join("cgroup.controllers").exists(), "this test reads cgroup v1 files");
    let env = common::cluster::TestEnv::new().await;
    let mut node = env.start_node(&[]);
    env.wait_node_ready(&mut node).await;
    // Pod-level limits only: the apiserver defaults the pod-level requests to them and calls the pod Guaranteed.
    let plr = env.pod_yaml("plr", &[("app", SHOW_LIMITS)], "  resources:\n    limits: {cpu: 500m, memory: 64Mi}\n");
    env.create(&plr).await;
    let pod = env.wait_pod_running(&mut node, "plr").await;
    assert_eq!(pod["status"]["qosClass"], "Guaranteed");
    assert_eq!(pod["spec"]["resources"]["requests"]["memory"], "64Mi", "defaulted by the apiserver");
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let id = container_id(&pod, "app");
    // The pod cgroup as upstream's ResourceConfigForPod makes it (rkubelet wrote a memory limit of 0 before).
    assert_eq!(read(pod_dir("memory", "", &uid).join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read(pod_dir("cpu", "", &uid).join("cpu.shares")), "512");
    assert_eq!(read(pod_dir("cpu", "", &uid).join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(pod_dir("cpu", "", &uid).join("cpu.cfs_period_us")), "100000");
    // The container has no limits of its own: it gets the pod's (getMemoryLimit, getCPULimit), and sees them.
    assert_eq!(read(pod_dir("memory", "", &uid).join(&id).join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read(pod_dir("cpu", "", &uid).join(&id).join("cpu.cfs_quota_us")), "50000");
    let log = node.logs.join(format!("{}_plr_{uid}/app/0.log", env.ns));
    let seen = node
        .wait_for("the app's output", Duration::from_secs(10), || async {
            let t = texts(&std::fs::read_to_string(&log).unwrap_or_default());
            (t.len() >= 3).then_some(t)
        })
        .await;
    assert_eq!(seen, ["67108864", "50000", "512"]);

    // Huge pages this node does not have (capacity 0) are refused by the fit, with upstream's reason.
    let huge = env.pod_yaml("huge", &[("app", "exec sleep 3600")], "").replace(
        "    command:",
        "    resources:\n      limits: {cpu: 100m, memory: 32Mi, hugepages-2Mi: 2Mi}\n    command:",
    );
    env.create(&huge).await;
    let refused = node
        .wait_for("pod huge Failed", Duration::from_secs(60), || async {
            env.pod("huge").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(refused["status"]["reason"], "OutOfhugepages-2Mi");
    assert!(sandboxes_of(&rt, "huge").await.is_empty(), "nothing started");

    // Deleted, the pod leaves no cgroup behind.
    env.kubectl(&["delete", "pod", "plr", "--wait=false"]).await;
    node.wait_for("the pod cgroup removed", Duration::from_secs(60), || async {
        (!pod_cgroup_exists(&uid)).then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overhead_is_in_the_pod_cgroup_and_huge_pages_are_refused_without_a_hugetlb_hierarchy() {
    let (_g, rt) = fresh_runtime().await;
    assert!(!Path::new(CGROUPS).join("hugetlb").exists(), "this machine's v1 hierarchies have no hugetlb");
    let sleeper = |name: &str, spec: &str, limits: &str, mounts: &str| {
        manifest(name, &[], &[("app", "exec sleep 3600")], spec)
            .replace("    command:", &format!("    resources:\n      limits: {limits}\n{mounts}    command:"))
    };
    let overhead = "  terminationGracePeriodSeconds: 2\n  overhead: {cpu: 250m, memory: 32Mi}\n";
    let ovh = sleeper("ovh", overhead, "{cpu: 500m, memory: 64Mi}", "");
    let volume = "  volumes:\n  - name: hp\n    emptyDir: {medium: HugePages}\n";
    let mounts = "    volumeMounts:\n    - {name: hp, mountPath: /hp}\n";
    let huge = sleeper("huge", volume, "{cpu: 100m, memory: 32Mi, hugepages-2Mi: 2Mi}", mounts);
    let mut node = Node::start(&[("ovh.yaml", &ovh), ("huge.yaml", &huge)]);
    let pod = node.wait_running("ovh-e2e-node").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    // The overhead adds to the pod cgroup's request and limits (ResourceConfigForPod): 750m, 96Mi.
    assert_eq!(read(pod_dir("memory", "", &uid).join("memory.limit_in_bytes")), (96u64 << 20).to_string());
    assert_eq!(read(pod_dir("cpu", "", &uid).join("cpu.shares")), "768");
    assert_eq!(read(pod_dir("cpu", "", &uid).join("cpu.cfs_quota_us")), "75000");
    // The container keeps its own limits.
    let id = container_id(&pod, "app");
    assert_eq!(read(pod_dir("memory", "", &uid).join(&id).join("memory.limit_in_bytes")), (64u64 << 20).to_string());

    // A pod with huge pages is refused (upstream would run it without any hugetlb limit), with an event.
    let refused = node
        .wait_for("pod huge Failed", Duration::from_secs(30), || async {
            common::pod("huge-e2e-node").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(refused["status"]["reason"], "HugePagesNotSupported");
    let message = refused["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Pod was rejected: pod asks for hugepages-2Mi, but this node cannot limit huge pages: no cgroup v1 \
             hugetlb hierarchy is mounted at /sys/fs/cgroup/hugetlb"
        ),
        "{message}"
    );
    assert!(sandboxes_of(&rt, "huge-e2e-node").await.is_empty(), "nothing started");
    let log = node.log();
    assert!(
        log.contains("reason=\"HugePagesNotSupported\"") || log.contains("reason=HugePagesNotSupported"),
        "the event: {}",
        tail(&log, 20)
    );

    node.remove_manifest("ovh.yaml");
    node.wait_for("the pod cgroup removed", Duration::from_secs(60), || async {
        (!pod_cgroup_exists(&uid)).then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

/// rkubelet as a `Type=notify` service with `WatchdogSec=4` under Debian's systemd (in its own namespaces): the
/// unit turns active once rkubelet says `READY=1`, stays active past several watchdog timeouts because rkubelet
/// sends `WATCHDOG=1` every 2 s while healthy, and is killed by systemd with `Result=watchdog` once rkubelet stops
/// sending (frozen with SIGSTOP). A watchdog timeout of 1 s stops start-up with upstream's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_systemd_rkubelet_says_ready_and_feeds_the_watchdog_until_it_stops() {
    let _g = serial().await;
    let standalone = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/kubelet-standalone.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
        .arg(format!("--config={}", standalone.display()))
        .env("WATCHDOG_USEC", "1000000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("create health checker: configure watchdog timeout too small: 1s"), "{stderr}");
    let ns = SystemdNs::start();
    // The system bus, for `systemd-run --wait`.
    ns.logind();
    let config = ns.node_config("");
    let log = PathBuf::from("/tmp/rksd-e2e-watchdog.log");
    let _ = std::fs::remove_file(&log);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/systemd-ns.sh");
    let wrapper = PathBuf::from("/tmp/rksd-e2e-watchdog.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec bash {} exec /tmp/rksd-e2e systemd-run --unit=rk-watchdog --quiet --wait --same-dir \
             -p Type=notify -p NotifyAccess=main -p WatchdogSec=4 -p StandardOutput=append:{log} \
             -p StandardError=append:{log} -E RKUBELET_LOG=\"$RKUBELET_LOG\" \"$@\"\n",
            script.display(),
            log = log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = vec![(WRAPPER_ENV.to_string(), wrapper.display().to_string())];
    let mut node = Node::start_named_env("e2e-node", &[], config, vec![], env);
    let show = |p: &str| ns.exec(&["systemctl", "show", "-p", p, "--value", "rk-watchdog"]).trim().to_string();
    let rk_log = || std::fs::read_to_string(&log).unwrap_or_default();
    node.wait_for("the unit active (READY=1)", Duration::from_secs(60), || async {
        (show("ActiveState") == "active").then_some(())
    })
    .await;
    assert!(rk_log().contains("Starting systemd watchdog with interval"), "{}", rk_log());
    // Keep-alives: systemd records each; it sees several over two timeouts, and the unit stays up.
    let mut seen = std::collections::BTreeSet::new();
    node.wait_for("five watchdog keep-alives", Duration::from_secs(30), || {
        seen.insert(show("WatchdogTimestampMonotonic"));
        let n = seen.len();
        async move { (n >= 5).then_some(()) }
    })
    .await;
    assert_eq!((show("ActiveState").as_str(), show("NRestarts").as_str()), ("active", "0"), "{}", rk_log());

    // Frozen, rkubelet stops feeding the watchdog: systemd kills it when the timeout runs out.
    ns.exec(&["systemctl", "kill", "-s", "SIGSTOP", "rk-watchdog"]);
    node.wait_for("systemd's watchdog killing the unit", Duration::from_secs(30), || async {
        (show("Result") == "watchdog").then_some(())
    })
    .await;
    ns.exec(&["systemctl", "reset-failed", "rk-watchdog"]);
    node.kill9();
    let _ = std::fs::remove_file(&wrapper);
}

//! Pods on a pure cgroup v2 hierarchy, for real: this machine binds cpu, memory and pids to cgroup v1, so the
//! test boots a qemu VM with Debian's kernel and `cgroup_no_v1=all` (`scripts/lib/vm-cgroup2.sh`; software
//! emulation here, about 20 s to boot), runs Debian's containerd and the real rkubelet binary in it, and reads
//! the pod's v2 files and the kubelet's stats. The VM boots with 8 huge pages of 2 MiB (`hugepages=8`), so the same
//! run also shows a pod with only pod-level resources and a pod with huge pages and a `HugePages-2Mi` emptyDir.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use tokio::time::Instant;

/// The host port forwarded to the VM's read-only port 10255.
const RO_PORT: u16 = 18255;

struct Vm {
    dir: PathBuf,
    script: PathBuf,
}

impl Vm {
    fn start() -> Vm {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/vm-cgroup2.sh");
        let dir = PathBuf::from("/tmp/rkvm-e2e");
        let vm = Vm { dir, script };
        let _ = vm.run(&["stop"], &[]);
        let _ = std::fs::remove_dir_all(&vm.dir);
        std::fs::create_dir_all(&vm.dir).unwrap();
        let (ok, out) = vm.run(&["start"], &[]);
        assert!(ok, "vm-cgroup2.sh start: {out}");
        let node_dir = endpoint().trim_start_matches("unix://").rsplit_once('/').unwrap().0.to_string();
        let images = [format!("{node_dir}/images/pause.oci.tar"), format!("{node_dir}/images/busybox.oci.tar")];
        let (ok, out) = vm.run(&["containerd"], &[&images[0], &images[1]]);
        assert!(ok, "vm-cgroup2.sh containerd: {out}");
        vm
    }

    fn run(&self, cmd: &[&str], args: &[&str]) -> (bool, String) {
        let out = std::process::Command::new("bash")
            .arg(&self.script)
            .arg(cmd[0])
            .arg(&self.dir)
            .args(&cmd[1..])
            .args(args)
            .env("RK_VM_HOSTFWD", format!("tcp:127.0.0.1:{RO_PORT}-:10255"))
            .env("RK_VM_CMDLINE", "hugepages=8")
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// A command inside: its stdout (and stderr), trimmed; empty when it failed.
    fn exec(&self, args: &[&str]) -> String {
        let (ok, out) = self.run(&["exec"], args);
        if ok { out.trim().to_string() } else { String::new() }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.run(&["stop"], &[]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_cgroup_v2_get_weight_max_and_pids_files_and_stats() {
    let _g = serial().await;
    let t0 = Instant::now();
    let vm = Vm::start();
    drill::report(format_args!("FIGURE cgroup v2 VM booted with containerd and images in {:?}", t0.elapsed()));
    assert_eq!(vm.exec(&["stat", "-fc", "%T", "/sys/fs/cgroup"]), "cgroup2fs", "a pure cgroup v2 hierarchy");

    let d = vm.dir.display().to_string();
    std::fs::create_dir_all(vm.dir.join("manifests")).unwrap();
    std::fs::write(
        vm.dir.join("config.yaml"),
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nstaticPodPath: {d}/manifests\n\
             podLogsDir: /var/log/pods\nhealthzBindAddress: 127.0.0.1\nreadOnlyPort: 10255\naddress: 0.0.0.0\n\
             failSwapOn: false\nresolvConf: /etc/resolv.conf\npodPidsLimit: 100\n\
             authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false\n\
             authorization:\n  mode: AlwaysAllow\nevictionHard:\n  memory.available: 10Mi\n  nodefs.available: 1%\n  \
             imagefs.available: 1%\n  nodefs.inodesFree: 1%\n"
        ),
    )
    .unwrap();
    // Host network: the pod needs no CNI inside the VM.
    let web = manifest("web", &[], &[("app", "exec sleep 3600")], "  hostNetwork: true\n").replace(
        "    command:",
        "    resources:\n      requests: {cpu: 100m, memory: 16Mi}\n      limits: {cpu: 500m, memory: 64Mi}\n    command:",
    );
    std::fs::write(vm.dir.join("manifests/web.yaml"), web).unwrap();
    std::fs::write(vm.dir.join("manifests/plr.yaml"), PLR).unwrap();
    std::fs::write(vm.dir.join("manifests/huge.yaml"), HUGE).unwrap();
    let bin = env!("CARGO_BIN_EXE_rkubelet");
    let start = format!(
        "nohup {bin} --config={d}/config.yaml --root-dir=/var/lib/kubelet --hostname-override=vm-node --v=3 \
         > {d}/rkubelet.log 2>&1 &"
    );
    vm.exec(&["bash", "-c", &start]);
    let log = || std::fs::read_to_string(vm.dir.join("rkubelet.log")).unwrap_or_default();

    // Running, as the read-only API says (forwarded to the host).
    let deadline = Instant::now() + Duration::from_secs(240);
    let pods = loop {
        if let Some((200, body)) = http_get(RO_PORT, "/pods").await {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            let items = v["items"].as_array().cloned().unwrap_or_default();
            if items.len() == 3 && items.iter().all(all_running) {
                break items;
            }
        }
        assert!(Instant::now() < deadline, "pods Running in the VM within 4 minutes:\n{}", tail(&log(), 40));
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let named = |n: &str| pods.iter().find(|p| p["metadata"]["name"] == format!("{n}-vm-node")).unwrap().clone();
    let pod = named("web");
    drill::report(format_args!("FIGURE cgroup v2: static pod Running {:?} after the VM was started", t0.elapsed()));
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let id =
        container_status(&pod, "app").unwrap()["containerID"].as_str().unwrap().trim_start_matches("containerd://");
    let dir = format!("/sys/fs/cgroup/kubepods/burstable/pod{uid}");
    let read = |f: &str| vm.exec(&["cat", &format!("{dir}/{f}")]);
    // 100m = 102 shares → weight 1 + (100 × 9999) / 262142 = 4 (upstream's CpuSharesToCpuWeight).
    assert_eq!(read("cpu.weight"), "4");
    assert_eq!(read("cpu.max"), "50000 100000");
    assert_eq!(read("memory.max"), "67108864");
    assert_eq!(read("pids.max"), "100");
    assert_eq!(vm.exec(&["cat", &format!("{dir}/{id}/cgroup.procs")]).lines().count(), 1, "the container runs in it");
    assert_eq!(vm.exec(&["cat", "/sys/fs/cgroup/kubepods/besteffort/cpu.weight"]), "1", "2 shares");
    let mem_total: u64 = vm.exec(&["awk", "/MemTotal/ {print $2 * 1024}", "/proc/meminfo"]).parse().unwrap();
    assert_eq!(vm.exec(&["cat", "/sys/fs/cgroup/kubepods/memory.max"]), mem_total.to_string(), "node allocatable");

    // The node's and the pod's stats come from the v2 files.
    let (_, body) = http_get(RO_PORT, "/stats/summary").await.expect("stats");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(s["node"]["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0, "{}", s["node"]);
    assert!(s["node"]["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0, "{}", s["node"]);
    let p = &s["pods"][0];
    assert!(p["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0, "pod memory from memory.current: {p}");
    assert!(p["containers"][0]["cpu"]["usageCoreNanoSeconds"].as_u64().is_some(), "container cpu from cpu.stat: {p}");
    // Pressure (KubeletPSI, on by default) from the v2 `*.pressure` files: the total in µs, at most what the file says
    // when read after.
    let web_stats = s["pods"].as_array().unwrap().iter().find(|p| p["podRef"]["uid"] == uid).expect("the web pod");
    let app_stats = web_stats["containers"].as_array().unwrap().iter().find(|c| c["name"] == "app").unwrap();
    let psi_total = app_stats["cpu"]["psi"]["some"]["total"].as_u64().unwrap_or_else(|| panic!("psi: {app_stats}"));
    let file = vm.exec(&["cat", &format!("{dir}/{id}/cpu.pressure")]);
    let file_total: u64 = file.lines().next().unwrap().rsplit("total=").next().unwrap().trim().parse().unwrap();
    assert!(psi_total <= file_total, "summary {psi_total} vs cpu.pressure {file}");
    assert!(web_stats["io"]["psi"]["full"]["total"].as_u64().is_some(), "pod io psi: {web_stats}");
    assert!(s["node"]["memory"]["psi"]["some"]["avg10"].as_f64().is_some(), "{}", s["node"]);
    // /metrics/cadvisor from the same v2 files.
    let (_, metrics) = http_get(RO_PORT, "/metrics/cadvisor").await.expect("cadvisor metrics");
    let app_id = format!("id=\"/kubepods/burstable/pod{uid}/{id}\"");
    let app_line = |family: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{family}{{")) && l.contains(&app_id) && l.contains("container=\"app\""))
            .unwrap_or_else(|| panic!("{family} of container app:\n{metrics}"))
            .to_string()
    };
    app_line("container_pressure_cpu_waiting_seconds_total");
    app_line("container_memory_working_set_bytes");
    // cAdvisor's shares of the container's cpu.weight (runc's conversion of 102 shares): 2 + (w - 1) × 262142 / 9999.
    let weight: u64 = vm.exec(&["cat", &format!("{dir}/{id}/cpu.weight")]).parse().unwrap();
    let shares = app_line("container_spec_cpu_shares");
    assert!(shares.ends_with(&format!(" {}", 2 + (weight - 1) * 262_142 / 9_999)), "weight {weight}: {shares}");
    // Swap figures (NodeSwap): the machine's and each cgroup's, as cAdvisor gives them.
    assert!(s["node"]["swap"]["swapUsageBytes"].as_u64().is_some(), "{}", s["node"]);
    assert!(p["containers"][0]["swap"]["swapUsageBytes"].as_u64().is_some(), "{p}");
    // NoSwap (the default) on cgroup v2: memory.swap.max 0 for the container when the swap controller is in the
    // kubelet's own cgroup (upstream's checkSwapControllerAvailability); else the runtime's default is left.
    let swap_max = vm.exec(&["cat", &format!("{dir}/{id}/memory.swap.max")]);
    let own = vm.exec(&[
        "sh",
        "-c",
        "test -e /sys/fs/cgroup$(cut -d: -f3 /proc/$(pidof rkubelet)/cgroup)/memory.swap.max && echo yes",
    ]);
    if !swap_max.trim().is_empty() {
        let want = if own.trim() == "yes" { "0" } else { "max" };
        println!(
            "e2e_cgroup_v2: swap controller in rkubelet's cgroup: {}; the container's memory.swap.max: {}",
            own.trim() == "yes",
            swap_max.trim()
        );
        assert_eq!(
            swap_max.trim(),
            want,
            "memory.swap.max of the container (swap controller in rkubelet's cgroup: {own:?})"
        );
    }

    pod_level_resources_and_huge_pages(&vm, &named("plr"), &named("huge")).await;
    assert!(!log().contains("panicked"));
}

/// Only pod-level limits: Guaranteed, the pod cgroup and the container get them (the container prints what it
/// sees).
const PLR: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: plr\nspec:\n  hostNetwork: true\n  \
                   resources:\n    limits: {cpu: 500m, memory: 64Mi}\n  containers:\n  - name: app\n    \
                   image: localhost/busybox:1\n    command: [sh, -c, 'cat /sys/fs/cgroup/memory.max \
                   /sys/fs/cgroup/cpu.max; exec sleep 3600']\n";

/// Huge pages of 2 MiB, limited and mounted as a hugetlbfs emptyDir.
const HUGE: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: huge\nspec:\n  hostNetwork: true\n  \
                    terminationGracePeriodSeconds: 2\n  volumes:\n  - name: hp\n    emptyDir: {medium: HugePages-2Mi}\n  \
                    containers:\n  - name: app\n    image: localhost/busybox:1\n    resources:\n      limits: {cpu: \
                    100m, memory: 32Mi, hugepages-2Mi: 4Mi}\n    volumeMounts:\n    - {name: hp, mountPath: /hp}\n    \
                    command: [sh, -c, 'grep \" /hp \" /proc/mounts; exec sleep 3600']\n";

async fn pod_level_resources_and_huge_pages(vm: &Vm, plr: &serde_json::Value, huge: &serde_json::Value) {
    let cgroup = |pod: &serde_json::Value, file: &str| {
        let uid = pod["metadata"]["uid"].as_str().unwrap();
        let id =
            container_status(pod, "app").unwrap()["containerID"].as_str().unwrap().trim_start_matches("containerd://");
        let path = file.replace("{pod}", &format!("/sys/fs/cgroup/kubepods/pod{uid}")).replace("{ctr}", id);
        vm.exec(&["cat", &path])
    };
    let app_log = |pod: &serde_json::Value| {
        let m = &pod["metadata"];
        let path =
            format!("/var/log/pods/default_{}_{}/app/0.log", m["name"].as_str().unwrap(), m["uid"].as_str().unwrap());
        texts(&vm.exec(&["cat", &path]))
    };
    assert_eq!(plr["status"]["qosClass"], "Guaranteed");
    // 500m = 512 shares → weight 1 + (510 × 9999) / 262142 = 20.
    assert_eq!(cgroup(plr, "{pod}/cpu.weight"), "20");
    assert_eq!(cgroup(plr, "{pod}/cpu.max"), "50000 100000");
    assert_eq!(cgroup(plr, "{pod}/memory.max"), "67108864");
    assert_eq!(cgroup(plr, "{pod}/{ctr}/memory.max"), "67108864", "the container takes the pod-level limit");
    assert_eq!(app_log(plr), ["67108864", "50000 100000"], "and sees it");

    // Huge pages: the pod cgroup's hugetlb limit, the container's (sent over CRI), the QoS tiers unbounded.
    assert_eq!(cgroup(huge, "{pod}/hugetlb.2MB.max"), "4194304");
    assert_eq!(cgroup(huge, "{pod}/{ctr}/hugetlb.2MB.max"), "4194304");
    assert_eq!(cgroup(plr, "{pod}/{ctr}/hugetlb.2MB.max"), "0", "every size of the node is limited, 0 when unasked");
    assert_eq!(vm.exec(&["cat", "/sys/fs/cgroup/kubepods/burstable/hugetlb.2MB.max"]), (1u64 << 62).to_string());
    // The emptyDir is a hugetlbfs of 2 MiB pages, in the container too.
    let uid = huge["metadata"]["uid"].as_str().unwrap();
    let dir = format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/hp");
    let mounts = vm.exec(&["grep", "hugetlbfs", "/proc/mounts"]);
    assert!(
        mounts.lines().any(|l| l.starts_with(&format!("nodev {dir} hugetlbfs ")) && l.contains("pagesize=2M")),
        "{mounts}"
    );
    let seen = app_log(huge);
    assert!(seen.len() == 1 && seen[0].contains(" /hp hugetlbfs ") && seen[0].contains("pagesize=2M"), "{seen:?}");

    // Removed, the pod leaves neither its mount nor its cgroup.
    vm.exec(&["rm", &format!("{}/manifests/huge.yaml", vm.dir.display())]);
    let present = |args: &[&str]| !vm.exec(args).is_empty();
    let cgroup_dir = format!("/sys/fs/cgroup/kubepods/pod{uid}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while present(&["grep", "-c", &dir, "/proc/mounts"]) || present(&["ls", "-d", &cgroup_dir]) {
        assert!(Instant::now() < deadline, "the removed pod's hugetlbfs mount and cgroup are gone within a minute");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

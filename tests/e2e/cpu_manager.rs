//! End to end: the CPU manager's static policy (issue 30's first part) with the real rkubelet and containerd, on
//! this machine's CPUs (at least 2): with CPU 0 reserved (`reservedSystemCPUs`), a Guaranteed pod asking for 1 CPU
//! gets CPU 1 alone while a Burstable pod's containers shrink to CPU 0 (`UpdateContainerResources`), and both are
//! restored when the Guaranteed pod goes; `cpu_manager_state` holds the assignment in upstream's format and keeps
//! it across an rkubelet restart. The pinned container and its pod cgroup run without a CFS quota
//! (`DisableCPUQuotaWithExclusiveCPUs`).

mod common;

use std::time::Duration;

use common::*;
use kubelet_cri::RuntimeService;
use kubelet_types::cpuset::CpuSet;
use serde_json::Value;

/// The CFS quota of the running container of static pod `pod`, as it sees its cgroup (v1 `cpu.cfs_quota_us`, v2
/// the first field of `cpu.max`).
async fn quota(rt: &kubelet_cri::RemoteRuntime, pod: &str) -> String {
    let c = containers_of(rt, pod).await.into_iter().find(|c| c.state == 1).expect("a running container");
    let script = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max";
    let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let out = rt.exec_sync(&c.id, cmd, Duration::from_secs(10)).await.unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The CPUs a container of static pod `pod` may run on (`Cpus_allowed_list` of its first process).
async fn allowed(rt: &kubelet_cri::RemoteRuntime, pod: &str) -> String {
    let c = containers_of(rt, pod).await.into_iter().find(|c| c.state == 1).expect("a running container");
    let cmd = vec!["sh".to_string(), "-c".to_string(), "grep Cpus_allowed_list /proc/1/status".to_string()];
    let out = rt.exec_sync(&c.id, cmd, Duration::from_secs(10)).await.unwrap();
    String::from_utf8_lossy(&out.stdout).split(':').nth(1).unwrap_or_default().trim().to_string()
}

fn cpu_pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    \
         command: [\"sleep\", \"3600\"]\n    resources:\n{resources}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guaranteed_pod_gets_a_cpu_alone_and_the_shared_pool_shrinks_and_grows_back() {
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
        println!("e2e_cpu_manager skipped: the machine has fewer than 2 CPUs");
        return;
    }
    let (_g, rt) = fresh_runtime().await;
    let shared = cpu_pod("shared", "      requests:\n        memory: 32Mi\n");
    let mut node = Node::start_with(&[("shared.yaml", &shared)], |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 1s\n"
    });
    node.wait_running("shared-e2e-node").await;
    let all = allowed(&rt, "shared-e2e-node").await;
    assert!(all.starts_with("0-"), "the shared pool is every CPU at first: {all}");

    let pinned = cpu_pod(
        "pinned",
        "      requests:\n        cpu: \"1\"\n        memory: 32Mi\n      limits:\n        cpu: \"1\"\n        memory: 32Mi\n",
    );
    node.write_manifest("pinned.yaml", &pinned);
    let p = node.wait_running("pinned-e2e-node").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(allowed(&rt, "pinned-e2e-node").await, "1", "CPU 1 alone (CPU 0 is reserved)");
    // DisableCPUQuotaWithExclusiveCPUs (beta, on): no CFS quota for a container with exclusive CPUs, nor for its pod
    // cgroup (a 1-CPU limit is 100000 otherwise).
    assert!(["-1", "max"].contains(&quota(&rt, "pinned-e2e-node").await.as_str()), "the pinned container's quota");
    let pod_quota = std::path::Path::new("/sys/fs/cgroup/cpu/kubepods").join(format!("pod{uid}/cpu.cfs_quota_us"));
    if pod_quota.exists() {
        assert_eq!(std::fs::read_to_string(&pod_quota).unwrap().trim(), "-1", "the pod cgroup's quota");
    }
    let without = CpuSet::parse(&all).unwrap().difference(&CpuSet::of([1])).to_string();
    node.wait_for("the shared pool without CPU 1", Duration::from_secs(30), || async {
        (allowed(&rt, "shared-e2e-node").await == without).then_some(())
    })
    .await;
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(node.root.join("cpu_manager_state")).unwrap()).unwrap();
    assert_eq!(state["policyName"], "static");
    assert_eq!(state["entries"][&uid]["app"], "1", "{state}");
    assert!(state["checksum"].as_u64().unwrap() > 0);

    // rkubelet restarts: the assignment stays.
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    node.wait_running("pinned-e2e-node").await;
    assert_eq!(allowed(&rt, "pinned-e2e-node").await, "1");

    // A downgrade to the Go kubelet v1.35 on the same root folder reads rkubelet's file (format, checksum, the
    // policy and the CPUs it covers; a file it cannot read stops it with "could not restore state"). It honours
    // the assignment: the Go kubelet hashes static pods to other UIDs (a gap of rkubelet's, see the README), so to
    // it the pinned pod is a new one, and CPU 1 is taken: `available=0`. Then rkubelet again.
    match test_cluster::unpacked_binary("KUBELET", "k8s/bin/kubelet") {
        Ok(go) => {
            node.sigterm();
            node.binary = Some(go);
            node.spawn();
            let refused = "not enough cpus available to satisfy request: requested=1, available=0";
            let log_path = node.log_path();
            node.wait_for("the Go kubelet's static policy at work", Duration::from_secs(60), || async {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                log.contains("Static policy: Allocate").then_some(())
            })
            .await;
            node.assert_alive();
            let log = node.log();
            assert!(log.contains("\"Kubelet version\" kubeletVersion=\"v1.35"), "the Go kubelet runs the node");
            assert!(!log.contains("could not restore state from checkpoint"), "it read rkubelet's cpu_manager_state");
            assert!(log.contains(refused), "it kept rkubelet's assignment of CPU 1");
            node.sigterm();
            node.binary = None;
            node.spawn();
            node.wait_healthy().await;
            node.wait_running("pinned-e2e-node").await;
            node.wait_for("CPU 1 for the pinned pod again", Duration::from_secs(30), || async {
                (allowed(&rt, "pinned-e2e-node").await == "1").then_some(())
            })
            .await;
        }
        Err(e) => println!("e2e_cpu_manager: the downgrade to the Go kubelet skipped: no upstream kubelet ({e})"),
    }

    // The Guaranteed pod goes: its CPU returns to the shared pool.
    node.remove_manifest("pinned.yaml");
    node.wait_for("the pinned pod gone", Duration::from_secs(60), || async {
        containers_of(&rt, "pinned-e2e-node").await.is_empty().then_some(())
    })
    .await;
    node.wait_for("the shared pool back to every CPU", Duration::from_secs(30), || async {
        (allowed(&rt, "shared-e2e-node").await == all).then_some(())
    })
    .await;
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(node.root.join("cpu_manager_state")).unwrap()).unwrap();
    assert!(state.get("entries").is_none(), "{state}");
    node.stop_and_clean(&rt).await;
}

/// The topology manager on this machine's one NUMA node (`single-numa-node`, pod scope): a Guaranteed pod whose CPUs
/// fit the node is admitted with them; one asking for more CPUs than the node has free is refused with upstream's
/// `TopologyAffinityError` (the CPU manager has no placement for it), and the admissions are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_manager_admits_what_fits_one_numa_node_and_refuses_the_rest() {
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
        println!("e2e_cpu_manager skipped: the machine has fewer than 2 CPUs");
        return;
    }
    let (_g, rt) = fresh_runtime().await;
    let cores = std::thread::available_parallelism().unwrap().get();
    let limits = |cpu: usize| {
        format!(
            "      requests:\n        cpu: \"{cpu}\"\n        memory: 32Mi\n      limits:\n        cpu: \"{cpu}\"\n        memory: 32Mi\n"
        )
    };
    let pinned = cpu_pod("pinned", &limits(1));
    let greedy = cpu_pod("greedy", &limits(cores));
    let mut node = Node::start_with(&[("pinned.yaml", &pinned), ("greedy.yaml", &greedy)], |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\n\
               topologyManagerScope: pod\n"
    });
    node.wait_running("pinned-e2e-node").await;
    assert_eq!(allowed(&rt, "pinned-e2e-node").await, "1");
    let p = node.wait_phase("greedy-e2e-node", "Failed").await;
    assert_eq!(p["status"]["reason"], "TopologyAffinityError", "{}", p["status"]);
    assert_eq!(p["status"]["message"], "Pod was rejected: Resources cannot be allocated with Topology locality");
    let metrics = http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(metrics.contains("kubelet_topology_manager_admission_requests_total 2"), "{}", tail(&metrics, 30));
    assert!(metrics.contains("kubelet_topology_manager_admission_errors_total 1"));
    assert!(node.log().contains("Creating topology manager with policy per scope"));
    node.stop_and_clean(&rt).await;
}

/// The memory manager's static policy on this machine's NUMA node 0, with `reservedMemory` matching the 100Mi hard
/// eviction threshold: a Guaranteed pod's memory is recorded on node 0 in `memory_manager_state` (upstream's format,
/// read back with its checksum) and its container pinned there (`cpuset.mems`); a Guaranteed pod asking more memory
/// than any node holds is refused with upstream's message; a restart keeps the assignment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_manager_pins_guaranteed_memory_to_a_numa_node_and_refuses_what_no_node_holds() {
    let (_g, rt) = fresh_runtime().await;
    let limits = |mem: &str| {
        format!(
            "      requests:\n        cpu: 100m\n        memory: {mem}\n      limits:\n        cpu: 100m\n        memory: {mem}\n"
        )
    };
    let pinned = cpu_pod("pinned", &limits("64Mi"));
    let huge = cpu_pod("huge", &limits("64Ti"));
    let mut node = Node::start_with(&[("pinned.yaml", &pinned), ("huge.yaml", &huge)], |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + "memoryManagerPolicy: Static\nreservedMemory:\n- numaNode: 0\n  limits:\n    memory: 100Mi\n"
    });
    let p = node.wait_running("pinned-e2e-node").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let h = node.wait_phase("huge-e2e-node", "Failed").await;
    assert_eq!(h["status"]["reason"], "UnexpectedAdmissionError", "{}", h["status"]);
    assert_eq!(
        h["status"]["message"],
        "Pod was rejected: Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes \
         with enough memory is available, which is unexpected"
    );
    let state_file = node.root.join("memory_manager_state");
    let read = || {
        let bytes = std::fs::read(&state_file).unwrap();
        kubelet_cm::memorymanager::state::decode("Static", &bytes).expect("upstream's format and checksum")
    };
    let state = read();
    let blocks = &state.assignments[&uid]["app"];
    assert_eq!(
        (blocks[0].kind.as_str(), blocks[0].size, blocks[0].numa_affinity.clone()),
        ("memory", 64 << 20, vec![0])
    );
    assert_eq!(state.machine[&0].memory["memory"].system_reserved, 100 << 20);
    assert_eq!(state.machine[&0].memory["memory"].reserved, 64 << 20);
    let c = containers_of(&rt, "pinned-e2e-node").await.into_iter().find(|c| c.state == 1).unwrap();
    let out = rt
        .exec_sync(&c.id, vec!["cat".into(), "/sys/fs/cgroup/cpuset/cpuset.mems".into()], Duration::from_secs(10))
        .await;
    if let Some(out) = out.ok().filter(|o| o.exit_code == 0) {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    }
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    node.wait_running("pinned-e2e-node").await;
    assert_eq!(read().assignments[&uid]["app"], *blocks, "kept across a restart");
    node.stop_and_clean(&rt).await;
}

/// `cpuManagerPolicyOptions` on this machine: with `strict-cpu-reservation` the reserved CPU 0 leaves the shared pool,
/// so a Burstable pod runs on CPU 1 only (not on every CPU); `full-pcpus-only` admits whole cores (one thread per core
/// here, so any count); an alpha option without its gate stops the start with upstream's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_cpu_reservation_keeps_the_reserved_cpu_out_of_the_shared_pool() {
    if std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) < 2 {
        println!("e2e_cpu_manager skipped: the machine has fewer than 2 CPUs");
        return;
    }
    let (_g, rt) = fresh_runtime().await;
    let shared = cpu_pod("shared", "      requests:\n        memory: 32Mi\n");
    let mut node = Node::start_with(&[("shared.yaml", &shared)], |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions:\n  \
               strict-cpu-reservation: \"true\"\n  full-pcpus-only: \"true\"\n"
    });
    node.wait_running("shared-e2e-node").await;
    let all = std::thread::available_parallelism().unwrap().get();
    let want = if all == 2 { "1".to_string() } else { format!("1-{}", all - 1) };
    assert_eq!(allowed(&rt, "shared-e2e-node").await, want, "the reserved CPU 0 is not shared");
    node.stop_and_clean(&rt).await;

    let mut bad = Node::start_with(&[], |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions:\n  align-by-socket: \"true\"\n"
    });
    let status = bad.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = bad.log();
    let line = log.lines().find(|l| l.contains("CPU Manager Policy Alpha-level Options not enabled, but option"));
    assert!(line.is_some_and(|l| l.contains("align-by-socket") && l.contains("provided")), "{}", tail(&log, 5));
    bad.stop_and_clean(&rt).await;
}

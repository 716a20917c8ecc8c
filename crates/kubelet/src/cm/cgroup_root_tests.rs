//! The cgroupfs driver under a `cgroupRoot` of depth 0, 1 and 2, on fake v1 and v2 trees: the QoS and pod
//! cgroups are made, limited, listed and removed under `<cgroupRoot>/kubepods`, where the sandbox's cgroup parent
//! points, and nothing is made outside the root.

use super::pod_resources_tests::{pod, read, v1_tree};
use super::*;
use kubelet_runtime::RuntimeManagerConfig;

const ROOTS: [(&str, &str); 3] = [("/", ""), ("/kubeadm-node", "kubeadm-node/"), ("/a/b", "a/b/")];

/// The sandbox's cgroup parent of `p` with the cgroupfs driver and `cgroup_root`.
fn sandbox_parent(cgroup_root: &str, p: &Pod) -> String {
    let cfg = RuntimeManagerConfig { cgroup_root: cgroup_root.into(), ..Default::default() };
    kubelet_runtime::config_gen::cgroup_parent(&cfg, p)
}

#[test]
fn v1_qos_and_pod_cgroups_live_under_the_cgroup_root() {
    for (cgroup_root, under) in ROOTS {
        let t = v1_tree(false);
        let m = CgroupfsManager::new(t.path()).with_cgroup_root(cgroup_root);
        m.setup_qos().unwrap();
        let at = |h: &str, rest: &str| t.path().join(h).join(format!("{under}kubepods{rest}"));
        for h in ["cpu", "memory", "pids"] {
            assert!(at(h, "/burstable").is_dir() && at(h, "/besteffort").is_dir(), "{cgroup_root}: {h}");
        }
        assert_eq!(read(at("cpu", "/besteffort/cpu.shares")), "2", "{cgroup_root}");
        let p = pod("u1", &[], &[("cpu", "500m")]);
        m.ensure_pod(&p).unwrap();
        assert_eq!(read(at("cpu", "/burstable/podu1/cpu.shares")), "512", "{cgroup_root}");
        assert_eq!(read(at("cpu", "/burstable/podu1/cpu.cfs_quota_us")), "50000", "{cgroup_root}");
        // The runtime is told the same folder.
        let parent = sandbox_parent(cgroup_root, &p);
        assert_eq!(t.path().join("cpu").join(parent.trim_start_matches('/')), at("cpu", "/burstable/podu1"));
        if !under.is_empty() {
            for h in ["cpu", "memory"] {
                assert!(!t.path().join(h).join("kubepods").exists(), "{cgroup_root}: nothing in /{h}/kubepods");
            }
            assert!(!t.path().join(under).exists(), "{cgroup_root}: no hierarchy-like folder at the mount");
        }
        // runc made the pod's cgroup in another hierarchy too; a pod of a kubelet with another root is not ours.
        std::fs::create_dir_all(at("freezer", "/burstable/podu1/c1")).unwrap();
        let other = if under.is_empty() { "x/kubepods/podu9" } else { "kubepods/podu9" };
        std::fs::create_dir_all(t.path().join("memory").join(other)).unwrap();
        assert_eq!(m.list_pods(), vec![PodUid::from("u1")], "{cgroup_root}");
        m.destroy_pod(&PodUid::from("u1")).unwrap();
        for h in ["cpu", "memory", "freezer"] {
            assert!(!at(h, "/burstable/podu1").exists(), "{cgroup_root}: {h}");
        }
        assert!(at("memory", "/burstable").is_dir(), "the QoS cgroup stays");
        assert!(m.list_pods().is_empty(), "{cgroup_root}");
    }
}

#[test]
fn v2_qos_and_pod_cgroups_live_under_the_cgroup_root_and_the_controllers_reach_them() {
    for (cgroup_root, under) in ROOTS {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        // The root exists (the admin made it), and lists what the fake parent passes on.
        let mut dir = t.path().to_path_buf();
        for c in cgroup_root.split('/').filter(|c| !c.is_empty()) {
            dir.push(c);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        }
        let m = CgroupfsManager::new(t.path()).with_cgroup_root(cgroup_root).with_limits(true, 1024);
        m.setup_qos().unwrap();
        let at = |rest: &str| t.path().join(format!("{under}kubepods{rest}"));
        assert!(at("/burstable").is_dir() && at("/besteffort").is_dir(), "{cgroup_root}");
        assert_eq!(read(at("/besteffort/cpu.weight")), "1", "{cgroup_root}");
        // Every folder down to the root passes its controllers on (the fake file keeps the last write).
        assert_eq!(read(t.path().join("cgroup.subtree_control")), "+pids", "{cgroup_root}");
        if !under.is_empty() {
            assert_eq!(read(t.path().join(under).join("cgroup.subtree_control")), "+pids", "{cgroup_root}");
        }
        let p = pod("u2", &[], &[("cpu", "1500m")]);
        m.ensure_pod(&p).unwrap();
        assert_eq!(read(at("/burstable/podu2/cpu.max")), "150000 100000", "{cgroup_root}");
        assert_eq!(read(at("/burstable/podu2/pids.max")), "1024", "{cgroup_root}");
        assert_eq!(t.path().join(sandbox_parent(cgroup_root, &p).trim_start_matches('/')), at("/burstable/podu2"));
        assert_eq!(m.list_pods(), vec![PodUid::from("u2")], "{cgroup_root}");
        m.destroy_pod(&PodUid::from("u2")).unwrap();
        assert!(!at("/burstable/podu2").exists() && m.list_pods().is_empty(), "{cgroup_root}");
    }
}

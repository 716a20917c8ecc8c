//! The pod cgroup files of pods with pod-level resources, overhead and huge pages, on fake v1 and v2 trees.

use super::*;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn rl(v: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, Quantity>> {
    (!v.is_empty()).then(|| v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect())
}

pub(super) fn pod(uid: &str, pod_limits: &[(&str, &str)], container_limits: &[(&str, &str)]) -> Pod {
    let resources =
        |l: &[(&str, &str)]| (!l.is_empty()).then(|| ResourceRequirements { limits: rl(l), ..Default::default() });
    Pod {
        metadata: ObjectMeta { uid: Some(uid.into()), ..Default::default() },
        spec: Some(PodSpec {
            resources: resources(pod_limits),
            containers: vec![Container {
                name: "a".into(),
                resources: resources(container_limits),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A v1 tree with the hierarchies of this machine plus, when `hugetlb`, a hugetlb one.
pub(super) fn v1_tree(hugetlb: bool) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for c in ["cpu", "memory", "pids", "freezer"] {
        std::fs::create_dir_all(root.path().join(c)).unwrap();
    }
    if hugetlb {
        std::fs::create_dir_all(root.path().join("hugetlb")).unwrap();
    }
    root
}

pub(super) fn read(p: std::path::PathBuf) -> String {
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn a_pod_with_only_pod_level_limits_gets_them_in_its_v1_cgroup() {
    let root = v1_tree(false);
    let m = CgroupfsManager::new(root.path());
    m.setup_qos().unwrap();
    // No container limits: the pod is Guaranteed by its pod-level limits, which its cgroup gets (not 0).
    m.ensure_pod(&pod("u1", &[("cpu", "500m"), ("memory", "64Mi")], &[])).unwrap();
    let dir = |c: &str| root.path().join(c).join("kubepods/podu1");
    assert_eq!(read(dir("memory").join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read(dir("cpu").join("cpu.shares")), "512");
    assert_eq!(read(dir("cpu").join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(dir("cpu").join("cpu.cfs_period_us")), "100000");
}

#[test]
fn the_overhead_is_in_the_pod_cgroup() {
    let root = v1_tree(false);
    let m = CgroupfsManager::new(root.path());
    let mut p = pod("u2", &[], &[("cpu", "500m"), ("memory", "64Mi")]);
    p.spec.as_mut().unwrap().overhead = rl(&[("cpu", "250m"), ("memory", "32Mi")]);
    m.ensure_pod(&p).unwrap();
    let dir = |c: &str| root.path().join(c).join("kubepods/podu2");
    assert_eq!(read(dir("memory").join("memory.limit_in_bytes")), (96u64 << 20).to_string());
    assert_eq!(read(dir("cpu").join("cpu.shares")), "768");
    assert_eq!(read(dir("cpu").join("cpu.cfs_quota_us")), "75000");
}

#[test]
fn huge_page_limits_go_to_the_v1_hugetlb_hierarchy_and_qos_tiers_are_unbounded() {
    let root = v1_tree(true);
    let m = CgroupfsManager::new(root.path()).with_hugepage_sizes(vec!["2MB".into(), "1GB".into()]);
    m.setup_qos().unwrap();
    let qos = root.path().join("hugetlb/kubepods/burstable");
    assert_eq!(read(qos.join("hugetlb.2MB.limit_in_bytes")), (1u64 << 62).to_string());
    assert_eq!(
        read(root.path().join("hugetlb/kubepods/besteffort/hugetlb.1GB.limit_in_bytes")),
        (1u64 << 62).to_string()
    );
    m.ensure_pod(&pod("u3", &[], &[("cpu", "1"), ("memory", "64Mi"), ("hugepages-2Mi", "4Mi")])).unwrap();
    let dir = root.path().join("hugetlb/kubepods/podu3");
    assert_eq!(read(dir.join("hugetlb.2MB.limit_in_bytes")), "4194304");
    assert_eq!(read(dir.join("hugetlb.1GB.limit_in_bytes")), "0", "sizes the pod does not ask for: 0");
    assert!(!root.path().join("memory/kubepods/podu3/hugetlb.2MB.limit_in_bytes").exists());
    m.destroy_pod(&PodUid::from("u3")).unwrap();
    assert!(!dir.exists());
}

#[test]
fn huge_page_limits_go_to_v2_max_files_when_the_root_has_hugetlb() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("cgroup.controllers"), "cpu memory hugetlb pids\n").unwrap();
    let m = CgroupfsManager::new(root.path()).with_hugepage_sizes(vec!["2MB".into()]);
    m.setup_qos().unwrap();
    assert_eq!(read(root.path().join("kubepods/besteffort/hugetlb.2MB.max")), (1u64 << 62).to_string());
    let p = pod("u4", &[("cpu", "1"), ("memory", "128Mi"), ("hugepages-2Mi", "8Mi")], &[]);
    m.ensure_pod(&p).unwrap();
    let dir = root.path().join("kubepods/podu4");
    assert_eq!(read(dir.join("hugetlb.2MB.max")), "8388608");
    assert_eq!(read(dir.join("memory.max")), "134217728");
    assert_eq!(read(dir.join("cpu.max")), "100000 100000");
    // Without the controller at the root nothing is written (the pod is refused at admission).
    std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    let m = CgroupfsManager::new(root.path()).with_hugepage_sizes(vec!["2MB".into()]);
    m.ensure_pod(&pod("u5", &[], &[("memory", "64Mi"), ("hugepages-2Mi", "2Mi")])).unwrap();
    assert!(!root.path().join("kubepods/burstable/podu5/hugetlb.2MB.max").exists());
    assert!(root.path().join("kubepods/burstable/podu5/memory.max").exists());
}

#[test]
fn page_size_names_are_read_back_in_bytes() {
    assert_eq!(size_bytes("2MB"), Some(2 << 20));
    assert_eq!(size_bytes("1GB"), Some(1 << 30));
    assert_eq!(size_bytes("64KB"), Some(64 << 10));
    assert_eq!(size_bytes("lots"), None);
}

//! The media of emptyDir volumes (`pkg/volume/emptydir/empty_dir.go` SetUpAt, setupHugepages,
//! getPageSizeMountOption; `pkg/apis/core/v1/helper` IsHugePageMedium, HugePageSizeFromMedium).
//!
//! Contract: `""` is a directory on the node's disk, `Memory` a tmpfs, `HugePages` and `HugePages-<size>` a
//! hugetlbfs mounted with `pagesize=` the page size of the pod's huge page requests; any other medium, and a huge
//! page medium the pod's requests do not back, fail the volume's set-up with upstream's message (never a plain
//! directory in their place).

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod};
use kubelet_types::quantity::ParsedQuantity;
use kubelet_types::resources::{
    container_requests, is_hugepage_resource, is_pod_level_resources_set, pod_level_requests,
};

/// `v1.StorageMediumHugePages`.
pub const HUGEPAGES: &str = "HugePages";
/// `v1.StorageMediumHugePagesPrefix`.
pub const HUGEPAGES_PREFIX: &str = "HugePages-";

/// What an emptyDir lives on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Medium {
    /// The node's disk.
    Disk,
    /// A tmpfs.
    Memory,
    /// A hugetlbfs, `HugePages` or `HugePages-<size>` as written.
    HugePages(String),
}

/// The medium of `e` (`IsHugePageMedium`); an unknown one is upstream's `unknown storage medium "<m>"`.
pub fn medium(e: &EmptyDirVolumeSource) -> Result<Medium, String> {
    match e.medium.as_deref().unwrap_or("") {
        "" => Ok(Medium::Disk),
        "Memory" => Ok(Medium::Memory),
        m if m == HUGEPAGES || m.starts_with(HUGEPAGES_PREFIX) => Ok(Medium::HugePages(m.to_string())),
        m => Err(format!("unknown storage medium {m:?}")),
    }
}

/// The page size of a `hugepages-<size>` resource name (`HugePageSizeFromResourceName`).
fn size_of_resource(name: &str) -> Result<ParsedQuantity, String> {
    let size = name.strip_prefix(kubelet_types::resources::HUGEPAGES_PREFIX).unwrap_or(name);
    ParsedQuantity::parse(size).map_err(|e| e.to_string())
}

/// The mount option of a huge page medium (`getPageSizeMountOption`): `pagesize=<size>` of the pod's huge page
/// requests (pod level, then every container's): for `HugePages` the one size they all use, for
/// `HugePages-<size>` that size if requested.
pub fn page_size_mount_option(medium: &str, pod: &Pod) -> Result<String, String> {
    let medium_size = if medium == HUGEPAGES {
        None
    } else {
        // HugePageSizeFromMedium.
        let size = medium
            .strip_prefix(HUGEPAGES_PREFIX)
            .ok_or_else(|| format!("medium: {medium} is not a hugepage medium"))?;
        Some(ParsedQuantity::parse(size).map_err(|e| e.to_string())?)
    };
    let spec = pod.spec.as_ref();
    let mut lists: Vec<Vec<String>> = vec![];
    if is_pod_level_resources_set(pod) {
        lists.push(pod_level_requests(pod).into_keys().collect());
    }
    for c in spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())) {
        lists.push(container_requests(c).into_keys().collect());
    }
    let mut found: Option<ParsedQuantity> = None;
    for name in lists.iter().flatten().filter(|n| is_hugepage_resource(n)) {
        let current = size_of_resource(name)?;
        match &medium_size {
            None => {
                if found.as_ref().is_some_and(|f| f.cmp_value(&current).is_ne()) {
                    return Err(format!(
                        "medium: {medium} can't be used if container requests multiple huge page sizes"
                    ));
                }
                found = Some(current);
            }
            Some(want) if want.cmp_value(&current).is_eq() => found = Some(current),
            Some(_) => {}
        }
    }
    let size = found.ok_or_else(|| {
        format!("medium {medium}: hugePages storage requested, but there is no resource request for huge pages")
    })?;
    Ok(format!("pagesize={size}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(containers: &[&[(&str, &str)]]) -> Pod {
        let c = |l: &&[(&str, &str)]| Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(l.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()),
                ..Default::default()
            }),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec { containers: containers.iter().map(c).collect(), ..Default::default() }),
            ..Default::default()
        }
    }

    /// Records mounts (fs type, option) instead of making them.
    #[derive(Default)]
    struct Mounts(std::sync::Mutex<Vec<(std::path::PathBuf, String, String)>>);

    impl crate::Mounter for Mounts {
        fn mount_tmpfs(&self, path: &std::path::Path, size: Option<u64>) -> Result<(), String> {
            self.0.lock().unwrap().push((path.into(), "tmpfs".into(), format!("{size:?}")));
            Ok(())
        }
        fn mount_hugetlbfs(&self, path: &std::path::Path, option: &str) -> Result<(), String> {
            self.0.lock().unwrap().push((path.into(), "hugetlbfs".into(), option.into()));
            Ok(())
        }
        fn unmount(&self, path: &std::path::Path) -> Result<(), String> {
            self.0.lock().unwrap().retain(|m| m.0 != path);
            Ok(())
        }
        fn mounts_under(&self, path: &std::path::Path) -> Vec<std::path::PathBuf> {
            self.0.lock().unwrap().iter().filter(|m| m.0.starts_with(path)).map(|m| m.0.clone()).collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn huge_page_volumes_are_hugetlbfs_mounts_torn_down_with_the_pod() {
        use k8s_openapi::api::core::v1::Volume;
        let vol = |name: &str, m: &str| Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: Some(m.into()), ..Default::default() }),
            ..Default::default()
        };
        let mut p = pod(&[&[("hugepages-2Mi", "4Mi"), ("memory", "64Mi")]]);
        p.metadata.uid = Some("u1".into());
        p.spec.as_mut().unwrap().volumes =
            Some(vec![vol("huge", "HugePages"), vol("ram", "Memory"), vol("odd", "Tape")]);
        let tmp = tempfile::tempdir().unwrap();
        let mounts = std::sync::Arc::new(Mounts::default());
        let m = crate::VolumeManager::new(
            tmp.path().join("pods"),
            std::sync::Arc::new(kubelet_types::objects::NoObjects),
            std::sync::Arc::new(crate::sources::NoDownward),
            mounts.clone(),
        );
        let e = m.mount_pod(&p).await.expect_err("the unknown medium fails");
        let failed: Vec<(String, String)> = e.failures.into_iter().map(|f| (f.volume, f.error.to_string())).collect();
        assert_eq!(failed, vec![("odd".to_string(), "unknown storage medium \"Tape\"".to_string())]);
        assert!(!tmp.path().join("pods/u1/volumes/kubernetes.io~empty-dir/odd").exists(), "no directory in its place");
        let dir = tmp.path().join("pods/u1/volumes/kubernetes.io~empty-dir");
        let got = mounts.0.lock().unwrap().clone();
        assert!(got.contains(&(dir.join("huge"), "hugetlbfs".into(), "pagesize=2Mi".into())), "{got:?}");
        // The tmpfs is sized by the pod cgroup's memory limit.
        assert!(got.contains(&(dir.join("ram"), "tmpfs".into(), format!("{:?}", Some(64u64 << 20)))), "{got:?}");
        m.unmount_pod(&kubelet_types::PodUid::from("u1")).await.unwrap();
        assert!(mounts.0.lock().unwrap().is_empty(), "both unmounted");
        assert!(!dir.exists());
    }

    #[test]
    fn media_are_read_and_unknown_ones_refused_as_upstream() {
        let e = |m: &str| EmptyDirVolumeSource { medium: Some(m.into()), ..Default::default() };
        assert_eq!(medium(&EmptyDirVolumeSource::default()), Ok(Medium::Disk));
        assert_eq!(medium(&e("Memory")), Ok(Medium::Memory));
        assert_eq!(medium(&e("HugePages-2Mi")), Ok(Medium::HugePages("HugePages-2Mi".into())));
        assert_eq!(medium(&e("Tape")), Err("unknown storage medium \"Tape\"".into()));
    }

    #[test]
    fn the_page_size_comes_from_the_pods_huge_page_requests() {
        let two = pod(&[&[("hugepages-2Mi", "4Mi"), ("memory", "64Mi")]]);
        assert_eq!(page_size_mount_option("HugePages", &two).unwrap(), "pagesize=2Mi");
        assert_eq!(page_size_mount_option("HugePages-2Mi", &two).unwrap(), "pagesize=2Mi");
        // Written another way, the same size; the option is the size as the resource names it, canonical.
        let kib = pod(&[&[("hugepages-2048Ki", "4Mi")]]);
        assert_eq!(page_size_mount_option("HugePages-2Mi", &kib).unwrap(), "pagesize=2Mi");
        assert_eq!(
            page_size_mount_option("HugePages-1Gi", &two).unwrap_err(),
            "medium HugePages-1Gi: hugePages storage requested, but there is no resource request for huge pages"
        );
        let both = pod(&[&[("hugepages-2Mi", "4Mi")], &[("hugepages-1Gi", "1Gi")]]);
        assert_eq!(
            page_size_mount_option("HugePages", &both).unwrap_err(),
            "medium: HugePages can't be used if container requests multiple huge page sizes"
        );
        assert_eq!(page_size_mount_option("HugePages-1Gi", &both).unwrap(), "pagesize=1Gi");
        let none = pod(&[&[("memory", "64Mi")]]);
        assert!(page_size_mount_option("HugePages", &none).unwrap_err().contains("no resource request for huge pages"));
        assert_eq!(
            page_size_mount_option("HugePages-lots", &two).unwrap_err(),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }
}

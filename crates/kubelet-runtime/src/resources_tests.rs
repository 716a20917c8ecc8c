use super::*;

#[test]
fn huge_page_sizes_are_read_as_cgroups_name_them() {
    let dir = tempfile::tempdir().unwrap();
    for d in ["hugepages-1048576kB", "hugepages-2048kB", "not-a-size", "hugepages-64MB"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    assert_eq!(node_hugepage_sizes(dir.path()), vec!["2MB".to_string(), "1GB".to_string()]);
    assert!(node_hugepage_sizes(&dir.path().join("absent")).is_empty());
}

//! Unit tests of the user namespace manager (`userns.rs`), after upstream's `userns_manager_test.go` and
//! `kubelet_pods_test.go` TestParseGetSubIdsOutput.
use super::*;
use std::os::unix::fs::PermissionsExt;

const SLOT: u32 = 65536;
const FILE_65536: &str = r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}"#;

fn fixed(i: usize) -> Box<dyn Fn(usize) -> usize + Send + Sync> {
    Box::new(move |_| i)
}

fn manager(pods: &Path) -> UsernsManager {
    UsernsManager::new(pods.to_path_buf(), SLOT, KubeletMappings::DEFAULT, 110, fixed(0)).unwrap()
}

fn small(pods: &Path, slots: u64, start: Box<dyn Fn(usize) -> usize + Send + Sync>) -> UsernsManager {
    let mappings = KubeletMappings { first_id: SLOT, length: slots * u64::from(SLOT) };
    UsernsManager::new(pods.to_path_buf(), SLOT, mappings, slots as u32, start).unwrap()
}

/// The pod's mapping, checking the shape of the answer.
fn pod_ns(m: &UsernsManager, uid: &str) -> api::IdMapping {
    let ns = m.get_or_create(uid, Some(false), "", Ok(true)).unwrap();
    assert_eq!(ns.mode, api::NamespaceMode::Pod as i32);
    assert_eq!(ns.uids.len(), 1);
    assert_eq!(ns.uids, ns.gids);
    assert_eq!(ns.uids[0].container_id, 0);
    assert_eq!(ns.uids[0].length, SLOT);
    ns.uids[0]
}

fn new_err(pods: &Path, ids_per_pod: u32, first_id: u32, length: u64, max_pods: u32) -> String {
    let mappings = KubeletMappings { first_id, length };
    match UsernsManager::new(pods.to_path_buf(), ids_per_pod, mappings, max_pods, fixed(0)) {
        Ok(_) => panic!("no error for {ids_per_pod} {first_id} {length} {max_pods}"),
        Err(e) => e.to_string(),
    }
}

fn write_file(pods: &Path, uid: &str, content: &str) -> PathBuf {
    fs::create_dir_all(pods.join(uid)).unwrap();
    let path = pods.join(uid).join(MAPPINGS_FILE);
    fs::write(&path, content).unwrap();
    path
}

fn file_for(host_id: u32) -> String {
    mappings_json(&api::IdMapping { host_id, container_id: 0, length: SLOT })
}

#[test]
fn defaults_are_upstreams() {
    assert_eq!(KubeletMappings::DEFAULT, KubeletMappings { first_id: 65536, length: 4_294_901_760 });
    fn send_sync<T: Send + Sync>() {}
    send_sync::<UsernsManager>();
}

#[test]
fn allocations_are_distinct_aligned_slots_from_65536() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(&tmp.path().join("pods"));
    assert_eq!(pod_ns(&m, "a").host_id, 65536);
    assert_eq!(pod_ns(&m, "b").host_id, 131072);
    assert_eq!(pod_ns(&m, "c").host_id, 196608);

    let m = UsernsManager::new(tmp.path().join("r"), SLOT, KubeletMappings::DEFAULT, 110, random_start()).unwrap();
    let mut seen = HashSet::new();
    for i in 0..100 {
        let id = pod_ns(&m, &format!("pod-{i}")).host_id;
        assert!(id.is_multiple_of(SLOT));
        assert!(id >= 65536 && u64::from(id) + u64::from(SLOT) <= 1 << 32, "{id}");
        assert!(seen.insert(id), "{id} handed out twice");
    }
    assert_eq!(m.allocated(), 100);
}

#[test]
fn the_search_wraps_around_from_the_random_start() {
    let tmp = tempfile::tempdir().unwrap();
    let m = small(tmp.path(), 3, fixed(usize::MAX - 1)); // taken modulo 3: slot 2
    assert_eq!(pod_ns(&m, "a").host_id, 3 * SLOT);
    assert_eq!(pod_ns(&m, "b").host_id, SLOT);
    assert_eq!(pod_ns(&m, "c").host_id, 2 * SLOT);
}

#[test]
fn the_same_pod_keeps_its_range() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let first = pod_ns(&m, "a");
    assert_eq!(pod_ns(&m, "a"), first);
    assert_eq!(m.allocated(), 1);
}

#[test]
fn a_pod_whose_file_vanished_keeps_its_range() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    pod_ns(&m, "a");
    assert_eq!(pod_ns(&m, "b").host_id, 2 * SLOT);
    fs::remove_file(tmp.path().join("b/userns")).unwrap();
    assert_eq!(pod_ns(&m, "b").host_id, 2 * SLOT);
    assert_eq!(fs::read_to_string(tmp.path().join("b/userns")).unwrap(), file_for(2 * SLOT));
    assert_eq!(m.allocated(), 2);
    assert_eq!(pod_ns(&m, "c").host_id, 3 * SLOT);
}

#[test]
fn a_restart_keeps_every_range_and_hands_none_out_again() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let before: Vec<_> = ["a", "b", "c"].iter().map(|p| pod_ns(&m, p)).collect();
    fs::create_dir_all(tmp.path().join("no-userns")).unwrap();
    fs::write(tmp.path().join("a-file"), "x").unwrap();
    drop(m);

    let m = manager(tmp.path());
    assert_eq!(m.allocated(), 3);
    assert_eq!(pod_ns(&m, "d").host_id, 4 * SLOT);
    let after: Vec<_> = ["a", "b", "c"].iter().map(|p| pod_ns(&m, p)).collect();
    assert_eq!(before, after);
    assert_eq!(m.allocated(), 4);
}

#[test]
fn release_frees_the_slot_and_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    assert_eq!(pod_ns(&m, "a").host_id, SLOT);
    let file = tmp.path().join("a").join(MAPPINGS_FILE);
    assert!(file.exists());
    m.release("a");
    assert!(!file.exists());
    assert!(tmp.path().join("a").is_dir(), "only the file goes");
    assert_eq!(m.allocated(), 0);
    m.release("a");
    m.release("never-seen");
    assert_eq!(pod_ns(&m, "b").host_id, SLOT);
}

#[test]
fn the_file_is_byte_identical_to_upstreams() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    pod_ns(&m, "a");
    assert_eq!(fs::read_to_string(tmp.path().join("a/userns")).unwrap(), FILE_65536);
    let names: Vec<_> =
        fs::read_dir(tmp.path().join("a")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["userns"], "no temporary file is left");
    let mode = fs::metadata(tmp.path().join("a/userns")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_file_written_by_upstream_is_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let spaced = r#"{ "gidMappings": [{"hostId": 655360, "containerId": 0, "length": 65536}],
        "uidMappings": [{"length": 65536, "hostId": 655360, "containerId": 0}], "extra": true }"#;
    write_file(tmp.path(), "a", spaced);
    let m = manager(tmp.path());
    assert_eq!(pod_ns(&m, "a").host_id, 655360);
    assert_eq!(fs::read_to_string(tmp.path().join("a/userns")).unwrap(), spaced, "a reused file is not rewritten");
}

#[test]
fn validation_messages_are_upstreams() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let len = KubeletMappings::DEFAULT.length;
    assert_eq!(new_err(p, 65537, 65536, len, 110), "kubelet user namespace length 65537 is not a multiple of 65536");
    assert_eq!(new_err(p, 131072, 65536, len, 110), "kubelet user assigned ID 65536 is not a multiple of 131072");
    assert_eq!(new_err(p, 65536, 0, len, 110), "kubelet user assigned ID 0 must be greater or equal to 65536");
    assert_eq!(
        new_err(p, 65536, 65536, 10 * 65536 + 1, 1),
        "kubelet user assigned IDs length 655361 is not a multiple of 65536"
    );
    assert_eq!(new_err(p, 65536, 65536, 10 * 65536, 11), "kubelet user assigned IDs are not enough to support 11 pods");
    assert!(new_err(p, 65536, 65536, 1 << 32, 1).contains("do not fit in 32 bits"));
    // 0 is the default of 65536; exactly enough IDs is fine.
    let mappings = KubeletMappings { first_id: 65536, length: 10 * 65536 };
    assert!(UsernsManager::new(p.to_path_buf(), 0, mappings, 10, fixed(0)).is_ok());
}

#[test]
fn host_users_unset_or_true_is_the_node_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(&tmp.path().join("pods"));
    for host_users in [None, Some(true)] {
        let ns = m.get_or_create("a", host_users, "kata", Ok(false)).unwrap();
        assert_eq!(ns, api::UserNamespace { mode: api::NamespaceMode::Node as i32, uids: vec![], gids: vec![] });
    }
    assert_eq!(m.allocated(), 0);
    assert!(!tmp.path().join("pods").exists());
}

#[test]
fn unsupported_handlers_are_refused_with_upstreams_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let err = |handler: &str, supports: Result<bool, String>| {
        m.get_or_create("a", Some(false), handler, supports).unwrap_err().to_string()
    };
    assert_eq!(err("", Ok(false)), "can't set `spec.hostUsers: false`, runtime does not support user namespaces");
    assert_eq!(
        err("kata", Ok(false)),
        "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"
    );
    assert_eq!(
        err("foo", Err("the handler \"foo\" is not known".into())),
        "can't set `spec.hostUsers: false`, RuntimeClass handler \"foo\" does not support user namespaces: \
         the handler \"foo\" is not known"
    );
    assert_eq!(
        err("", Err("boom".into())),
        "can't set `spec.hostUsers: false`, runtime does not support user namespaces: boom"
    );
    assert_eq!(m.allocated(), 0);
    assert!(!tmp.path().join("a").exists());
}

#[test]
fn a_corrupt_file_fails_start_up_naming_it() {
    let cases = [
        ("not json", "invalid user namespace mappings file: "),
        ("[1]", "invalid user namespace mappings file: "),
        (r#"{"uidMappings":[{"hostId":-1}]}"#, "invalid user namespace mappings file: "),
        (r#"{"uidMappings":"x"}"#, "invalid user namespace mappings file: "),
        ("{}", "invalid user namespace configuration: no more than one mapping allowed."),
        (
            r#"{"uidMappings":[{"hostId":65536,"length":65536},{"hostId":131072,"length":65536}]}"#,
            "invalid user namespace configuration: no more than one mapping allowed.",
        ),
        (
            r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}"#,
            "invalid user namespace configuration: GID and UID mappings should be identical.",
        ),
        (
            r#"{"uidMappings":[{"hostId":65536,"length":65536}],"gidMappings":[{"hostId":131072,"length":65536}]}"#,
            "invalid user namespace configuration: GID and UID mapping should be identical",
        ),
        (
            r#"{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}"#,
            "invalid user namespace configuration: UID 0 must be mapped",
        ),
    ];
    for (content, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = write_file(tmp.path(), "p1", content);
        let err = UsernsManager::new(tmp.path().to_path_buf(), SLOT, KubeletMappings::DEFAULT, 110, fixed(0))
            .err()
            .unwrap_or_else(|| panic!("{content} was accepted"))
            .to_string();
        let prefix = format!("record pod mappings: {}: {want}", path.display());
        assert!(err.starts_with(&prefix), "{content}: {err}");
    }
}

#[test]
fn ranges_that_cannot_be_recorded_are_refused() {
    let cases = [
        (
            mappings_json(&api::IdMapping { host_id: 65536, container_id: 0, length: 1000 }),
            "wrong user namespace length 1000",
        ),
        (file_for(65537), "wrong user namespace offset specified 65537"),
        (file_for(0), "id 0 is out of range"),
        (file_for(11 * SLOT), "id 720896 is out of range"),
    ];
    for (content, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        write_file(tmp.path(), "p1", &content);
        let err = UsernsManager::new(
            tmp.path().to_path_buf(),
            SLOT,
            KubeletMappings { first_id: SLOT, length: 10 * u64::from(SLOT) },
            10,
            fixed(0),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.ends_with(want), "{err}");
    }

    let tmp = tempfile::tempdir().unwrap();
    write_file(tmp.path(), "p1", &file_for(SLOT));
    write_file(tmp.path(), "p2", &file_for(SLOT));
    let err = UsernsManager::new(tmp.path().to_path_buf(), SLOT, KubeletMappings::DEFAULT, 110, fixed(0))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("range picked for pod \"p") && err.ends_with("\" already taken"), "{err}");
}

#[test]
fn a_corrupt_file_fails_the_sandbox_and_allocates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    write_file(tmp.path(), "a", "{}");
    let err = m.get_or_create("a", Some(false), "", Ok(true)).unwrap_err().to_string();
    assert_eq!(err, "user namespace: invalid user namespace configuration: no more than one mapping allowed.");
    assert_eq!(m.allocated(), 0);

    // An empty file means no user namespace yet, as upstream.
    write_file(tmp.path(), "b", "");
    assert_eq!(pod_ns(&m, "b").host_id, SLOT);
    assert_eq!(fs::read_to_string(tmp.path().join("b/userns")).unwrap(), FILE_65536);

    assert!(m.get_or_create("../x", Some(false), "", Ok(true)).is_err());
    assert!(m.get_or_create("", Some(false), "", Ok(true)).is_err());
}

#[test]
fn full_allocation_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let m = small(tmp.path(), 3, random_start());
    let b = pod_ns(&m, "b").host_id;
    let mut ids = vec![pod_ns(&m, "a").host_id, b, pod_ns(&m, "c").host_id];
    ids.sort();
    assert_eq!(ids, [SLOT, 2 * SLOT, 3 * SLOT]);
    let err = m.get_or_create("d", Some(false), "", Ok(true)).unwrap_err();
    assert!(matches!(&err, UsernsError::Context { inner, .. } if matches!(**inner, UsernsError::Full)), "{err:?}");
    assert_eq!(err.to_string(), "create user namespace: could not find an empty slot to allocate a user namespace");
    assert!(!tmp.path().join("d").join(MAPPINGS_FILE).exists());
    assert_eq!(m.allocated(), 3);
    m.release("b");
    assert_eq!(pod_ns(&m, "d").host_id, b);
}

#[test]
fn cleanup_releases_orphans_on_disk_and_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    for p in ["known", "unknown", "gone", "known-but-gone"] {
        pod_ns(&m, p);
    }
    fs::remove_dir_all(tmp.path().join("gone")).unwrap();
    fs::remove_dir_all(tmp.path().join("known-but-gone")).unwrap();
    let known: HashSet<String> = ["known", "known-but-gone"].iter().map(|s| s.to_string()).collect();
    m.cleanup_orphans(&known);
    assert_eq!(m.allocated(), 1);
    assert!(tmp.path().join("known/userns").exists());
    assert!(!tmp.path().join("unknown/userns").exists());
    assert_eq!(pod_ns(&m, "known").host_id, SLOT);

    // A missing pods directory is logged, and nothing is released.
    let m = manager(&tmp.path().join("absent"));
    pod_ns(&m, "x");
    fs::remove_dir_all(tmp.path().join("absent")).unwrap();
    m.cleanup_orphans(&HashSet::new());
    assert_eq!(m.allocated(), 1);
}

#[test]
fn getsubids_output_parsing() {
    let line = "0: kubelet 65536 2147483648\n";
    let m = KubeletMappings::from_getsubids(line, line).unwrap();
    assert_eq!(m, KubeletMappings { first_id: 65536, length: 2_147_483_648 });
    let err = |uids: &str, gids: &str| KubeletMappings::from_getsubids(uids, gids).unwrap_err().to_string();
    let two = "0: kubelet 65536 65536\n1: kubelet 131072 65536\n";
    assert_eq!(
        err(two, two),
        r#"error parsing line "0: kubelet 65536 65536\n1: kubelet 131072 65536\n": it must contain only one line"#
    );
    assert_eq!(err("0: kubelet 65536\n", "0: kubelet 65536\n"), r#"invalid line "0: kubelet 65536\n""#);
    assert_eq!(err("", ""), r#"invalid line """#);
    assert_eq!(
        err("0: kubelet abc 65536", "0: kubelet abc 65536"),
        r#"error parsing line "0: kubelet abc 65536": strconv.ParseUint: parsing "abc": invalid syntax"#
    );
    assert_eq!(
        err("0: kubelet 65536 4294967296", "0: kubelet 65536 4294967296"),
        r#"error parsing line "0: kubelet 65536 4294967296": strconv.ParseUint: parsing "4294967296": value out of range"#
    );
    assert_eq!(err(line, "0: kubelet 65536 65536\n"), r#"mismatched subuids and subgids for user "kubelet""#);
}

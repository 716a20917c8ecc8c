use super::*;

fn numa(nodes: &[u32]) -> NumaInfo {
    NumaInfo { nodes: nodes.to_vec(), distances: Default::default() }
}

fn policy(kind: PolicyKind, nodes: &[u32]) -> Policy {
    Policy { kind, numa: numa(nodes), options: PolicyOptions::default() }
}

fn h(nodes: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint { affinity: Some(mask_of(nodes.iter().copied())), preferred }
}

fn provider(resource: &str, hints: Vec<TopologyHint>) -> ProviderHints {
    [(resource.to_string(), Some(hints))].into()
}

#[test]
fn best_non_preferred_affinity_counts_are_upstreams() {
    // policy_test.go: "bestNonPreferredAffinityCount (1)" .. "(6)", with NUMA nodes 0-3.
    let p = policy(PolicyKind::BestEffort, &[0, 1, 2, 3]);
    let r1 = provider("resource1", vec![h(&[0, 1, 2, 3], false), h(&[0, 1], false)]);
    for (other, want) in [
        (vec![h(&[0, 1], false)], h(&[0, 1], false)),
        (vec![h(&[0, 3], false)], h(&[0, 3], false)),
        (vec![h(&[1, 2], false)], h(&[1, 2], false)),
        (vec![h(&[2, 3], false)], h(&[2, 3], false)),
        (vec![h(&[1, 2], false), h(&[2, 3], false)], h(&[1, 2], false)),
        (vec![h(&[1, 2, 3], false), h(&[1, 2], false), h(&[1, 3], false), h(&[2, 3], false)], h(&[1, 2], false)),
    ] {
        let (best, admit) = p.merge(&[r1.clone(), provider("resource2", other.clone())]);
        assert_eq!((best, admit), (want, true), "{other:?}");
    }
}

#[test]
fn preferred_hints_win_and_each_policy_admits_as_upstream() {
    let nodes = [0, 1];
    // "Two providers, 1 hint each, same mask, both preferred 1/2".
    let both = [provider("resource1", vec![h(&[0], true)]), provider("resource2", vec![h(&[0], true)])];
    // "Two providers, 1 hint each, no common mask": the default affinity, not preferred.
    let apart = [provider("resource1", vec![h(&[0], true)]), provider("resource2", vec![h(&[1], true)])];
    // "Ensure less narrow preferred hints are chosen over narrower non-preferred hints".
    let wide = [
        provider("resource1", vec![h(&[1], true), h(&[0, 1], false)]),
        provider("resource2", vec![h(&[0], true), h(&[1], true), h(&[0, 1], false)]),
    ];
    let none_pref: ProviderHints = Default::default();
    let impossible: ProviderHints = [("resource".to_string(), Some(vec![]))].into();
    for kind in [PolicyKind::BestEffort, PolicyKind::Restricted, PolicyKind::SingleNumaNode] {
        let p = policy(kind, &nodes);
        assert_eq!(p.merge(&both), (h(&[0], true), true), "{kind:?}");
        let (best, admit) = p.merge(&apart);
        assert!(!best.preferred, "{kind:?}");
        assert_eq!(admit, kind == PolicyKind::BestEffort, "{kind:?}");
        let (best, _) = p.merge(std::slice::from_ref(&none_pref));
        let any = if kind == PolicyKind::SingleNumaNode { None } else { Some(0b11) };
        assert_eq!(best, TopologyHint { affinity: any, preferred: true }, "no preference: anywhere, {kind:?}");
        let (best, admit) = p.merge(std::slice::from_ref(&impossible));
        assert!(!best.preferred && admit == (kind == PolicyKind::BestEffort), "{kind:?}");
    }
    let (best, admit) = policy(PolicyKind::BestEffort, &nodes).merge(&wide);
    assert_eq!((best, admit), (h(&[1], true), true));
    assert_eq!(policy(PolicyKind::None, &nodes).merge(&apart), (TopologyHint::default(), true));
}

#[test]
fn masks_options_and_closest_numa_nodes() {
    let mut seen = vec![];
    iterate_masks(&[0, 1, 2], |m| seen.push(m));
    assert_eq!(seen, [0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111]);
    assert!(is_narrower(0b01, 0b10) && is_narrower(0b10, 0b011) && !is_narrower(0b11, 0b01));
    let opts = [("prefer-closest-numa-nodes".to_string(), "true".to_string())].into();
    assert!(PolicyOptions::parse(&opts, false).unwrap().prefer_closest_numa);
    let bad = [("max-allowable-numa-nodes".to_string(), "4".to_string())].into();
    assert_eq!(
        PolicyOptions::parse(&bad, true).unwrap_err(),
        "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8"
    );
    assert_eq!(
        PolicyOptions::parse(&bad, false).unwrap_err(),
        "topology manager policy beta-level options not enabled, but option \"max-allowable-numa-nodes\" provided"
    );
    let unknown = [("x".to_string(), "1".to_string())].into();
    assert_eq!(PolicyOptions::parse(&unknown, true).unwrap_err(), "unknown Topology Manager Policy option: \"x\"");
    let n = NumaInfo {
        nodes: vec![0, 1, 2, 3],
        distances: [
            (0, vec![10, 11, 21, 21]),
            (1, vec![11, 10, 21, 21]),
            (2, vec![21, 21, 10, 11]),
            (3, vec![21, 21, 11, 10]),
        ]
        .into(),
    };
    assert_eq!(n.closest(0b0101, 0b0011), 0b0011, "nodes 0 and 1 are closer than 0 and 2");
    assert_eq!(n.closest(0b0011, 0b1100), 0b0011, "equally close: the lower");
}

#[test]
fn numa_nodes_are_read_from_sysfs() {
    let d = tempfile::tempdir().unwrap();
    for (n, dist) in [(0, "10 21"), (1, "21 10")] {
        let p = d.path().join(format!("devices/system/node/node{n}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("distance"), format!("{dist}\n")).unwrap();
    }
    let n = NumaInfo::read(d.path()).unwrap();
    assert_eq!((n.nodes.clone(), n.distances[&1].clone(), n.default_mask()), (vec![0, 1], vec![21, 10], 0b11));
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(NumaInfo::read(empty.path()).unwrap().nodes, vec![0], "no NUMA in sysfs: one node");
}

use super::*;

/// One socket, 4 cores with 2 threads: CPUs 0-3 are the first threads of cores 0-3, CPUs 4-7 their siblings.
fn single_socket_ht() -> Topology {
    Topology::from_rows(&(0..8).map(|cpu| (cpu, cpu % 4, 0, 0)).collect::<Vec<_>>())
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn the_best_fit_is_upstreams() {
    // pkg/kubelet/cm/cpumanager/cpu_assignment_test.go and policy_static_test.go, topoSingleSocketHT.
    let t = single_socket_ht();
    let take = |free: &str, n| take_by_topology(&t, &set(free), n).map(|s| s.to_string());
    assert_eq!(take("1-7", 1).unwrap(), "4", "the sibling of the partly used core");
    assert_eq!(take("1,4-5", 2).unwrap(), "1,5", "the first free whole core (CPU 0 reserved)");
    assert_eq!(take("0-7", 1).unwrap(), "0");
    assert_eq!(take("0-7", 2).unwrap(), "0,4");
    assert_eq!(take("0-7", 8).unwrap(), "0-7", "the whole socket");
    assert_eq!(take("1,3,5-7", 1).unwrap(), "6", "partly used core 2 first");
    assert_eq!(take("0-3,6", 2).unwrap(), "2,6", "the only whole free core");
    assert_eq!(take("1-7", 8).unwrap_err(), "not enough cpus available to satisfy request: requested=8, available=7");
    // topoDualSocketHT: cores i and i+6 are siblings, even cores on socket 0 (also NUMA node 0).
    let dual = Topology::from_rows(&(0..12).map(|cpu| (cpu, cpu % 6, cpu % 2, cpu % 2)).collect::<Vec<_>>());
    let take2 = |free: &str, n| take_by_topology(&dual, &set(free), n).map(|s| s.to_string());
    assert_eq!(take2("0-11", 6).unwrap(), "0,2,4,6,8,10", "a whole socket");
    assert_eq!(take2("1-5,7-11", 1).unwrap(), "2", "a core of socket 0");
    assert_eq!(take2("0-11", 8).unwrap(), "0-2,4,6-8,10", "3 cores of NUMA node 0, then 1 of node 1");
    // Without SMT: ascending.
    let flat = Topology::from_rows(&(0..4).map(|cpu| (cpu, cpu, 0, 0)).collect::<Vec<_>>());
    assert_eq!(take_by_topology(&flat, &set("1-3"), 2).unwrap().to_string(), "1-2");
}

fn pod(uid: &str, containers: &[(&str, &str)]) -> Pod {
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let c = |(name, cpu): &(&str, &str)| {
        let r = std::collections::BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.to_string())),
            ("memory".to_string(), Quantity("100Mi".into())),
        ]);
        Container {
            name: name.to_string(),
            resources: Some(ResourceRequirements { requests: Some(r.clone()), limits: Some(r), ..Default::default() }),
            ..Default::default()
        }
    };
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: containers.iter().map(c).collect(), ..Default::default() }),
        ..Default::default()
    }
}

#[test]
fn guaranteed_containers_with_whole_cpus_get_them_and_give_them_back() {
    let flat = Topology::from_rows(&(0..4).map(|cpu| (cpu, cpu, 0, 0)).collect::<Vec<_>>());
    let p = StaticPolicy::new(flat, 1, None).unwrap();
    assert_eq!(p.reserved().to_string(), "0");
    assert_eq!(p.allocatable().to_string(), "1-3");
    let mut st = State::default();
    p.validate(&mut st).unwrap();
    assert_eq!(st.default_cpu_set.to_string(), "0-3", "every CPU shared at first, the reserved one too");
    let g = pod("g", &[("app", "2"), ("side", "500m")]);
    let app = &g.spec.as_ref().unwrap().containers[0];
    let side = &g.spec.as_ref().unwrap().containers[1];
    assert_eq!(guaranteed_cpus(&g, side), 0, "a fraction: the shared pool");
    assert_eq!(p.allocate(&mut st, &g, app, &CpuSet::default(), None).unwrap().unwrap().to_string(), "1-2");
    assert_eq!(
        p.allocate(&mut st, &g, app, &CpuSet::default(), None).unwrap().unwrap().to_string(),
        "1-2",
        "idempotent"
    );
    assert_eq!(p.allocate(&mut st, &g, side, &CpuSet::default(), None).unwrap(), None);
    assert_eq!(st.default_cpu_set.to_string(), "0,3");
    assert_eq!(p.cpuset_of(&st, "g", "side").to_string(), "0,3");
    p.validate(&mut st.clone()).unwrap();
    let h = pod("h", &[("app", "2")]);
    assert_eq!(
        p.allocate(&mut st, &h, &h.spec.as_ref().unwrap().containers[0], &CpuSet::default(), None).unwrap_err(),
        AllocateError::Other("not enough cpus available to satisfy request: requested=2, available=1".into())
    );
    p.remove(&mut st, "g", "app");
    assert_eq!(st.default_cpu_set.to_string(), "0-3");
    assert!(st.assignments.is_empty());
    let mut bad = State { default_cpu_set: set("1-3"), ..Default::default() };
    assert_eq!(p.validate(&mut bad).unwrap_err(), "not all reserved cpus: \"0\" are present in defaultCpuSet: \"1-3\"");
    assert_eq!(
        StaticPolicy::new(Topology::from_rows(&[(0, 0, 0, 0)]), 2, None).unwrap_err(),
        "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 2)"
    );
}

#[test]
fn numa_hints_and_allocation_along_the_chosen_nodes_are_upstreams() {
    // Two NUMA nodes of two single-thread cores each; CPU 0 reserved.
    let topo = Topology::from_rows(&[(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 1), (3, 3, 1, 1)]);
    let p = StaticPolicy::new(topo, 1, None).unwrap();
    let available = CpuSet::parse("1-3").unwrap();
    let hint = |m: u64, preferred| TopologyHint { affinity: Some(m), preferred };
    let none = CpuSet::default();
    assert_eq!(p.cpu_hints(&available, &none, 1), [hint(0b01, true), hint(0b10, true), hint(0b11, false)]);
    assert_eq!(p.cpu_hints(&available, &none, 2), [hint(0b10, true), hint(0b11, false)], "node 0 has one free CPU");
    assert_eq!(p.cpu_hints(&available, &none, 3), [hint(0b11, true)]);
    assert_eq!(
        p.cpu_hints(&available, &CpuSet::parse("1").unwrap(), 2),
        [hint(0b01, true), hint(0b11, false)],
        "reusable CPUs stay"
    );
    let mut st = State { default_cpu_set: CpuSet::parse("0-3").unwrap(), ..Default::default() };
    let g = pod("g", &[("app", "2")]);
    let app = &g.spec.as_ref().unwrap().containers[0];
    assert_eq!(p.topology_hints(&st, &g, app, &none), Some(vec![hint(0b10, true), hint(0b11, false)]));
    let cpus = p.allocate(&mut st, &g, app, &none, Some(0b10)).unwrap().unwrap();
    assert_eq!(cpus.to_string(), "2-3", "the chosen node's CPUs");
    assert_eq!(
        p.topology_hints(&st, &g, app, &none),
        Some(vec![hint(0b10, true), hint(0b11, false)]),
        "regenerated from its CPUs"
    );
    let b = pod("b", &[("app", "1")]);
    assert_eq!(
        p.topology_hints(&st, &b, &b.spec.as_ref().unwrap().containers[0], &none),
        Some(vec![hint(0b01, true), hint(0b11, false)])
    );
    assert_eq!(pod_guaranteed_cpus(&pod("two", &[("a", "1"), ("b", "2")])), 3);
}

#[test]
fn policy_options_are_parsed_and_carried_out_as_upstream() {
    let opts = |v: &[(&str, &str)]| v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let o = StaticPolicyOptions::parse(
        &opts(&[("full-pcpus-only", "true"), ("strict-cpu-reservation", "true")]),
        false,
        true,
    )
    .unwrap();
    assert!(o.full_pcpus_only && o.strict_cpu_reservation);
    assert_eq!(
        StaticPolicyOptions::parse(&opts(&[("x", "1")]), true, true).unwrap_err(),
        "unknown CPU Manager Policy option: \"x\""
    );
    assert_eq!(
        StaticPolicyOptions::parse(&opts(&[("align-by-socket", "true")]), false, true).unwrap_err(),
        "CPU Manager Policy Alpha-level Options not enabled, but option \"align-by-socket\" provided"
    );
    assert_eq!(
        StaticPolicyOptions::parse(&opts(&[("strict-cpu-reservation", "yes")]), false, true).unwrap_err(),
        "bad value for option \"strict-cpu-reservation\": strconv.ParseBool: parsing \"yes\": invalid syntax"
    );
    // One socket, 2 cores of 2 threads: 0/2 on core 0, 1/3 on core 1. CPU 0 reserved: core 0 is not whole.
    let ht = Topology::from_rows(&[(0, 0, 0, 0), (1, 1, 0, 0), (2, 0, 0, 0), (3, 1, 0, 0)]);
    let p = StaticPolicy::new(ht, 1, None).unwrap().with_options(o);
    let mut st = State::default();
    p.validate(&mut st).unwrap();
    assert_eq!(st.default_cpu_set.to_string(), "1-3", "strict: the reserved CPU is not in the shared pool");
    let odd = pod("odd", &[("app", "1")]);
    assert_eq!(
        p.allocate(&mut st, &odd, &odd.spec.as_ref().unwrap().containers[0], &CpuSet::default(), None),
        Err(AllocateError::SmtAlignment("SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2".into()))
    );
    let four = pod("four", &[("app", "4")]);
    assert_eq!(
        p.allocate(&mut st, &four, &four.spec.as_ref().unwrap().containers[0], &CpuSet::default(), None),
        Err(AllocateError::SmtAlignment(
            "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 2, requested CPUs = 4, CPUs per core = 2".into()
        ))
    );
    let two = pod("two", &[("app", "2")]);
    let cpus = p
        .allocate(&mut st, &two, &two.spec.as_ref().unwrap().containers[0], &CpuSet::default(), None)
        .unwrap()
        .unwrap();
    assert_eq!(cpus.to_string(), "1,3", "a whole core");
    let mut tampered = State { default_cpu_set: set("0-3"), ..Default::default() };
    assert_eq!(
        p.validate(&mut tampered).unwrap_err(),
        "some of strictly reserved cpus: \"0\" are present in defaultCpuSet: \"0-3\""
    );
}

#[test]
fn uncore_caches_are_filled_before_spreading_over_them() {
    // One socket and NUMA node, 8 single-thread cores, two L3 caches of 4 (CPUs 0-3 and 4-7); CPU 0 taken.
    let mut topo = Topology::from_rows(&(0..8).map(|c| (c, c, 0, 0)).collect::<Vec<_>>());
    for (cpu, info) in topo.cpus.iter_mut() {
        info.uncore = cpu / 4;
    }
    let available = set("1-7");
    // Packed without the option: fewest free first by core, which here is any order of single cores.
    assert_eq!(take_packed(&topo, &available, 4, true).unwrap().to_string(), "4-7", "one whole cache");
    assert_eq!(
        take_packed(&topo, &available, 3, true).unwrap().to_string(),
        "1-3",
        "the rest of the partly used cache"
    );
    let opts = |v: &[(&str, &str)]| v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(
        StaticPolicyOptions::parse(
            &opts(&[("prefer-align-cpus-by-uncorecache", "true"), ("distribute-cpus-across-numa", "true")]),
            false,
            true
        )
        .unwrap_err(),
        "static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used at the same time"
    );
}

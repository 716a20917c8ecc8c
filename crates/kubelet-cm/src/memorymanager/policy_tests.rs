use super::*;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const GI: u64 = 1 << 30;

fn two_nodes() -> StaticPolicy {
    let nodes = vec![
        NumaMemory { id: 0, memory: 4 * GI, hugepages: vec![] },
        NumaMemory { id: 1, memory: 4 * GI, hugepages: vec![] },
    ];
    let reserved = [(0, [("memory".to_string(), GI)].into()), (1, BTreeMap::new())].into();
    StaticPolicy::new(nodes, reserved).unwrap()
}

fn pod(uid: &str, mem: &str) -> Pod {
    let r: BTreeMap<String, Quantity> =
        [("cpu".to_string(), Quantity("1".into())), ("memory".to_string(), Quantity(mem.into()))].into();
    let c = Container {
        name: "app".into(),
        resources: Some(ResourceRequirements { requests: Some(r.clone()), limits: Some(r), claims: None }),
        ..Default::default()
    };
    let mut p = Pod { spec: Some(PodSpec { containers: vec![c], ..Default::default() }), ..Default::default() };
    p.metadata.uid = Some(uid.into());
    p
}

fn no_reuse(_: Mask, _: &str) -> u64 {
    0
}

#[test]
fn the_machine_state_hints_and_blocks_are_upstreams() {
    let p = two_nodes();
    let mut s = State::default();
    p.validate(&mut s).unwrap();
    assert_eq!(
        s.machine[&0].memory["memory"],
        MemoryTable { total: 4 * GI, system_reserved: GI, allocatable: 3 * GI, reserved: 0, free: 3 * GI }
    );
    assert_eq!(s.machine[&1].memory["memory"].allocatable, 4 * GI);
    let h = |m: u64, preferred| TopologyHint { affinity: Some(m), preferred };
    let request = requested(&pod("a", "2Gi").spec.unwrap().containers[0]);
    assert_eq!(
        p.calculate_hints(&s.machine, &request, &no_reuse)["memory"],
        [h(0b01, true), h(0b10, true), h(0b11, false)]
    );
    let big = requested(&pod("a", "5Gi").spec.unwrap().containers[0]);
    assert_eq!(p.calculate_hints(&s.machine, &big, &no_reuse)["memory"], [h(0b11, true)], "only both nodes together");

    // A pod without a hint gets the narrowest node with room: node 0; then a 5 GiB pod spans both nodes.
    let a = pod("a", "2Gi");
    let blocks = p.allocate(&mut s, &a, &a.spec.as_ref().unwrap().containers[0], None, &no_reuse).unwrap().unwrap();
    assert_eq!(blocks, [Block { numa_affinity: vec![0], kind: "memory".into(), size: 2 * GI }]);
    assert_eq!((s.machine[&0].memory["memory"].free, s.machine[&0].assignments), (GI, 1));
    let b = pod("b", "4Gi");
    let e =
        p.allocate(&mut s, &b, &b.spec.as_ref().unwrap().containers[0], Some(h(0b11, false)), &no_reuse).unwrap_err();
    assert_eq!(
        e, "[memorymanager] preferred hint violates NUMA node allocation",
        "node 0 holds a single-node assignment"
    );
    let blocks = p
        .allocate(&mut s, &b, &b.spec.as_ref().unwrap().containers[0], Some(h(0b10, true)), &no_reuse)
        .unwrap()
        .unwrap();
    assert_eq!(blocks[0].numa_affinity, [1]);
    // A restart reads the same state back; removing gives the memory back.
    let mut restored = s.clone();
    p.validate(&mut restored).unwrap();
    p.remove(&mut s, "a", "app");
    assert_eq!(
        (s.machine[&0].memory["memory"].free, s.machine[&0].assignments, s.machine[&0].cells.clone()),
        (3 * GI, 0, Some(vec![0]))
    );
    let mut tampered = restored.clone();
    tampered.machine.get_mut(&1).unwrap().memory.get_mut("memory").unwrap().free = GI;
    assert_eq!(
        p.validate(&mut tampered).unwrap_err(),
        "[memorymanager] the expected machine state is different from the real one"
    );
    assert_eq!(
        StaticPolicy::new(vec![], BTreeMap::new()).unwrap_err(),
        "[memorymanager] you should specify the system reserved memory"
    );
    let not_guaranteed = {
        let mut p = pod("c", "1Gi");
        p.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap().limits = None;
        p
    };
    assert_eq!(
        p.allocate(&mut s, &not_guaranteed, &not_guaranteed.spec.as_ref().unwrap().containers[0], None, &no_reuse),
        Ok(None)
    );
}

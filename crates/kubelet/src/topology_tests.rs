use super::*;
use k8s_openapi::api::core::v1::PodSpec;
use kubelet_cm::topologymanager::{Mask, NumaInfo, PolicyOptions};

/// A provider with fixed hints for each container (and the pod), recording what it allocated.
struct Fixed {
    resource: &'static str,
    hints: HashMap<String, Vec<TopologyHint>>,
    allocated: Mutex<Vec<(String, Option<Mask>)>>,
}

impl Fixed {
    fn new(resource: &'static str, hints: &[(&str, Vec<TopologyHint>)]) -> Arc<Self> {
        let hints = hints.iter().map(|(c, h)| (c.to_string(), h.clone())).collect();
        Arc::new(Self { resource, hints, allocated: Mutex::default() })
    }
}

#[async_trait]
impl HintProvider for Fixed {
    async fn prepare(&self, _: &Pod, _: &[Arc<Pod>]) {}
    fn hints(&self, _: &Pod, c: &Container) -> ProviderHints {
        self.hints.get(&c.name).map(|h| [(self.resource.to_string(), Some(h.clone()))].into()).unwrap_or_default()
    }
    fn pod_hints(&self, _: &Pod) -> ProviderHints {
        self.hints.get("pod").map(|h| [(self.resource.to_string(), Some(h.clone()))].into()).unwrap_or_default()
    }
    async fn allocate(&self, _: &Pod, c: &Container, hint: TopologyHint) -> Result<(), AdmitResult> {
        self.allocated.lock().unwrap().push((c.name.clone(), hint.affinity));
        Ok(())
    }
}

fn h(m: Mask, preferred: bool) -> TopologyHint {
    TopologyHint { affinity: Some(m), preferred }
}

fn pod() -> Pod {
    let c = |n: &str| Container { name: n.into(), ..Default::default() };
    let mut p = Pod {
        spec: Some(PodSpec {
            init_containers: Some(vec![c("init")]),
            containers: vec![c("app")],
            ..Default::default()
        }),
        ..Default::default()
    };
    p.metadata.uid = Some("u1".into());
    p
}

fn manager(kind: PolicyKind, scope: Scope, providers: Vec<Arc<dyn HintProvider>>) -> TopologyManager {
    let policy = Policy {
        kind,
        numa: NumaInfo { nodes: vec![0, 1], distances: Default::default() },
        options: PolicyOptions::default(),
    };
    TopologyManager::new(policy, scope, providers)
}

#[tokio::test]
async fn single_numa_node_aligns_each_container_or_refuses_the_pod_as_upstream() {
    let cpu = Fixed::new("cpu", &[("app", vec![h(0b01, true), h(0b10, true), h(0b11, false)])]);
    let dev = Fixed::new("example.com/dev", &[("app", vec![h(0b10, true)])]);
    let m = manager(PolicyKind::SingleNumaNode, Scope::Container, vec![cpu.clone(), dev.clone()]);
    assert_eq!(m.allocate(&pod(), &[]).await, None);
    assert_eq!(*cpu.allocated.lock().unwrap(), [("init".to_string(), None), ("app".to_string(), Some(0b10))]);
    assert_eq!(dev.allocated.lock().unwrap().last(), Some(&("app".to_string(), Some(0b10))));
    assert_eq!(m.affinity("u1", "app"), Some(h(0b10, true)));
    assert_eq!(m.affinity("u1", "init"), Some(TopologyHint { affinity: None, preferred: true }), "no preference");

    let cpu = Fixed::new("cpu", &[("app", vec![h(0b01, true)])]);
    let dev = Fixed::new("example.com/dev", &[("app", vec![h(0b10, true)])]);
    let m = manager(PolicyKind::SingleNumaNode, Scope::Container, vec![cpu.clone(), dev.clone()]);
    let r = m.allocate(&pod(), &[]).await.unwrap();
    assert_eq!(
        (r.reason.as_str(), r.message.as_str()),
        ("TopologyAffinityError", "Resources cannot be allocated with Topology locality")
    );
    assert_eq!(cpu.allocated.lock().unwrap().len(), 1, "the init container only: the app container was refused before");
    // best-effort admits the same pod on the default affinity.
    let m = manager(PolicyKind::BestEffort, Scope::Container, vec![cpu.clone(), dev]);
    assert_eq!(m.allocate(&pod(), &[]).await, None);
    assert_eq!(cpu.allocated.lock().unwrap().last(), Some(&("app".to_string(), Some(0b11))));
}

#[tokio::test]
async fn pod_scope_gives_every_container_the_pods_affinity_and_none_allocates_alone() {
    let cpu = Fixed::new("cpu", &[("pod", vec![h(0b10, true), h(0b11, false)])]);
    let m = manager(PolicyKind::Restricted, Scope::Pod, vec![cpu.clone()]);
    assert_eq!(m.allocate(&pod(), &[]).await, None);
    assert_eq!(*cpu.allocated.lock().unwrap(), [("init".to_string(), Some(0b10)), ("app".to_string(), Some(0b10))]);
    let cpu = Fixed::new("cpu", &[("app", vec![])]);
    let m = manager(PolicyKind::None, Scope::Container, vec![cpu.clone()]);
    assert_eq!(m.allocate(&pod(), &[]).await, None, "the none policy looks at no hint");
    assert_eq!(*cpu.allocated.lock().unwrap(), [("init".to_string(), None), ("app".to_string(), None)]);
    assert_eq!(Scope::parse("node").unwrap_err(), "unknown scope: \"node\"");
}

/// A machine of two NUMA nodes with two CPUs each, as a sysfs tree.
fn two_numa_sysfs() -> tempfile::TempDir {
    let sys = tempfile::tempdir().unwrap();
    let w = |p: &str, v: &str| {
        let p = sys.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    };
    for cpu in 0..4u32 {
        let node = cpu / 2;
        w(&format!("devices/system/cpu/cpu{cpu}/topology/core_id"), &format!("{cpu}\n"));
        w(&format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"), &format!("{node}\n"));
        std::fs::create_dir_all(sys.path().join(format!("devices/system/node/node{node}/cpu{cpu}"))).unwrap();
        w(&format!("devices/system/node/node{node}/distance"), if node == 0 { "10 21\n" } else { "21 10\n" });
    }
    w("devices/system/cpu/online", "0-3\n");
    sys
}

fn guaranteed(uid: &str, cpus: &str) -> Pod {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let r: std::collections::BTreeMap<String, Quantity> =
        [("cpu".to_string(), Quantity(cpus.into())), ("memory".to_string(), Quantity("64Mi".into()))].into();
    let c = Container {
        name: "app".into(),
        resources: Some(ResourceRequirements { requests: Some(r.clone()), limits: Some(r), claims: None }),
        ..Default::default()
    };
    let mut p = Pod { spec: Some(PodSpec { containers: vec![c], ..Default::default() }), ..Default::default() };
    p.metadata.uid = Some(uid.into());
    p
}

#[tokio::test]
async fn on_a_two_numa_machine_single_numa_node_keeps_each_pods_cpus_on_one_node() {
    let sys = two_numa_sysfs();
    let topo = kubelet_cm::cpumanager::topology::Topology::discover(sys.path()).unwrap();
    let numa = NumaInfo::read(sys.path()).unwrap();
    assert_eq!(numa.nodes, [0, 1]);
    let root = tempfile::tempdir().unwrap();
    let policy = kubelet_cm::cpumanager::policy::StaticPolicy::new(topo, 1, None).unwrap();
    let cpus = Arc::new(kubelet_cm::cpumanager::manager::CpuManager::new(root.path(), Some(policy)).unwrap());
    let provider: Arc<dyn HintProvider> = Arc::new(crate::cpus::Cpus(cpus.clone()));
    let m = TopologyManager::new(
        Policy { kind: PolicyKind::SingleNumaNode, numa, options: PolicyOptions::default() },
        Scope::Container,
        vec![provider],
    );
    // CPU 0 is reserved: node 0 has one free CPU, node 1 two.
    let a = Arc::new(guaranteed("a", "2"));
    assert_eq!(m.allocate(&a, &[]).await, None);
    assert_eq!(cpus.cpuset("a", "app").as_deref(), Some("2-3"), "both CPUs of node 1");
    let b = Arc::new(guaranteed("b", "1"));
    assert_eq!(m.allocate(&b, std::slice::from_ref(&a)).await, None);
    assert_eq!(cpus.cpuset("b", "app").as_deref(), Some("1"));
    let c = guaranteed("c", "2");
    let r = m.allocate(&c, &[a.clone(), b.clone()]).await.unwrap();
    assert_eq!(r.reason, "TopologyAffinityError", "no node has two free CPUs left");
    assert_eq!(m.affinity("a", "app"), Some(TopologyHint { affinity: Some(0b10), preferred: true }));
}

#[tokio::test]
async fn cpus_and_memory_are_aligned_on_one_numa_node() {
    use kubelet_cm::memorymanager::{
        MemoryManager,
        policy::{NumaMemory, StaticPolicy as MemoryPolicy},
    };
    let sys = two_numa_sysfs();
    let topo = kubelet_cm::cpumanager::topology::Topology::discover(sys.path()).unwrap();
    let numa = NumaInfo::read(sys.path()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let cpu_policy = kubelet_cm::cpumanager::policy::StaticPolicy::new(topo, 1, None).unwrap();
    let cpus = Arc::new(kubelet_cm::cpumanager::manager::CpuManager::new(root.path(), Some(cpu_policy)).unwrap());
    // Node 0 has 1 GiB free for pods, node 1 4 GiB.
    let gi = 1u64 << 30;
    let nodes = vec![
        NumaMemory { id: 0, memory: 2 * gi, hugepages: vec![] },
        NumaMemory { id: 1, memory: 4 * gi, hugepages: vec![] },
    ];
    let reserved = [(0, [("memory".to_string(), gi)].into()), (1, Default::default())].into();
    let memory = Arc::new(MemoryManager::new(root.path(), Some(MemoryPolicy::new(nodes, reserved).unwrap())).unwrap());
    let providers: Vec<Arc<dyn HintProvider>> =
        vec![Arc::new(crate::cpus::Cpus(cpus.clone())), Arc::new(crate::memory::Memory(memory.clone()))];
    let m = TopologyManager::new(
        Policy { kind: PolicyKind::SingleNumaNode, numa, options: PolicyOptions::default() },
        Scope::Container,
        providers,
    );
    // One CPU fits either node, 2 GiB only node 1: both go to node 1.
    let mut a = guaranteed("a", "1");
    a.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert("memory".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into()));
    a.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .limits
        .as_mut()
        .unwrap()
        .insert("memory".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into()));
    assert_eq!(m.allocate(&a, &[]).await, None);
    let cpu = cpus.cpuset("a", "app").unwrap();
    assert!(cpu == "2" || cpu == "3", "a CPU of node 1: {cpu}");
    let c = &a.spec.as_ref().unwrap().containers[0];
    assert_eq!(memory.container_created(&a, c).as_deref(), Some("1"), "cpuset.mems");
}

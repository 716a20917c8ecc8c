//! The manager against fake stats, pods, killer and reclaimer, on tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, ObjectReference, PodSpec, ResourceRequirements, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_types::Pod;
use kubelet_types::events::Recorder;

use super::*;
use crate::manager::{FRESH_FIGURES_TIMEOUT, IMMEDIATE_GRACE_SECONDS, RELEASE_TIMEOUT};

const MI: i64 = 1 << 20;

#[derive(Default)]
struct Fake {
    stats: Mutex<NodeStats>,
    pods: Mutex<Vec<Arc<Pod>>>,
    kills: Mutex<Vec<(String, i64, EvictionStatus)>>,
    events: Mutex<Vec<(String, String)>>,
    /// Memory freed by the image GC (applied to nodefs).
    image_gc_frees: Mutex<i64>,
    reclaims: Mutex<u32>,
    /// Space the next removal of dead containers frees on nodefs, and after how long the figures show it (the
    /// runtime removes a writable layer a moment after the container).
    container_frees: Mutex<Option<(i64, Duration)>>,
    /// Frees not yet visible: when, how much.
    pending_frees: Mutex<Vec<(tokio::time::Instant, i64)>>,
    /// Passes that asked for the pods' figures.
    pod_fetches: Mutex<usize>,
}

#[async_trait]
impl StatsSource for Fake {
    async fn node_stats(&self, pods: bool) -> Result<NodeStats, String> {
        let now = tokio::time::Instant::now();
        let due: i64 = {
            let mut pending = self.pending_frees.lock().unwrap();
            let due = pending.iter().filter(|(at, _)| *at <= now).map(|(_, b)| b).sum();
            pending.retain(|(at, _)| *at > now);
            due
        };
        if let Some(o) = self.stats.lock().unwrap().observations.get_mut(&Signal::NodeFsAvailable) {
            o.available += due;
        }
        let mut s = self.stats.lock().unwrap().clone();
        *self.pod_fetches.lock().unwrap() += usize::from(pods);
        if !pods {
            s.pods.clear();
        }
        Ok(s)
    }
}

impl ActivePods for Fake {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        let killed: Vec<String> = self.kills.lock().unwrap().iter().map(|k| k.0.clone()).collect();
        self.pods.lock().unwrap().iter().filter(|p| !killed.contains(&name(p))).cloned().collect()
    }
    fn cleaned_up(&self, _: &Pod) -> bool {
        true
    }
}

#[async_trait]
impl PodKiller for Fake {
    async fn kill(&self, pod: &Arc<Pod>, grace: i64, status: EvictionStatus) -> Result<(), String> {
        self.kills.lock().unwrap().push((name(pod), grace, status));
        Ok(())
    }
}

#[async_trait]
impl NodeReclaimer for Fake {
    async fn delete_unused_containers(&self) -> Result<usize, String> {
        *self.reclaims.lock().unwrap() += 1;
        let Some((bytes, after)) = self.container_frees.lock().unwrap().take() else { return Ok(0) };
        self.pending_frees.lock().unwrap().push((tokio::time::Instant::now() + after, bytes));
        Ok(1)
    }
    async fn delete_unused_images(&self) -> Result<u64, String> {
        let freed = *self.image_gc_frees.lock().unwrap();
        if let Some(o) = self.stats.lock().unwrap().observations.get_mut(&Signal::NodeFsAvailable) {
            o.available += freed;
        }
        Ok(freed as u64)
    }
}

impl Recorder for Fake {
    fn event(&self, _: &ObjectReference, _: &str, reason: &str, message: String) {
        self.events.lock().unwrap().push((reason.to_string(), message));
    }
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn pod(n: &str, priority: i32, mem_request: Option<&str>) -> Pod {
    let requests = mem_request.map(|r| BTreeMap::from([("memory".to_string(), Quantity(r.into()))]));
    let mut p = Pod::default();
    p.metadata.name = Some(n.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{n}"));
    p.spec = Some(PodSpec {
        priority: Some(priority),
        containers: vec![Container {
            name: "app".into(),
            resources: Some(ResourceRequirements { requests, ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn usage(mem: i64) -> PodUsage {
    PodUsage {
        memory_working_set: Some(mem as u64),
        containers: vec![ContainerUsage {
            name: "app".into(),
            memory_working_set: Some(mem as u64),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn obs(available: i64, capacity: i64) -> Observation {
    Observation { available, capacity, time: None }
}

fn thresholds(hard: &[(&str, &str)], soft: &[(&str, &str)], grace: &[(&str, u64)]) -> Vec<Threshold> {
    let m = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let g = grace.iter().map(|(a, s)| (a.to_string(), Duration::from_secs(*s))).collect();
    parse_thresholds(&[], &m(hard), &m(soft), &g, &BTreeMap::new()).unwrap()
}

fn manager(fake: &Arc<Fake>, thresholds: Vec<Threshold>) -> EvictionManager {
    EvictionManager::new(
        EvictionConfig {
            thresholds,
            pressure_transition_period: Duration::from_secs(300),
            max_pod_grace_period: 30,
            local_storage_capacity_isolation: true,
            monitoring_period: Duration::from_secs(10),
        },
        EvictionDeps {
            stats: fake.clone(),
            pods: fake.clone(),
            killer: fake.clone(),
            reclaimer: fake.clone(),
            recorder: fake.clone(),
            node_ref: ObjectReference::default(),
            clock: Arc::new(kubelet_types::TestClock::fixed()),
            wakeups: None,
        },
    )
}

fn set_pods(fake: &Fake, pods: Vec<(Pod, i64)>) {
    let mut s = fake.stats.lock().unwrap();
    s.pods = pods.iter().map(|(p, m)| (p.metadata.uid.clone().unwrap(), usage(*m))).collect();
    *fake.pods.lock().unwrap() = pods.into_iter().map(|(p, _)| Arc::new(p)).collect();
}

fn set_obs(fake: &Fake, signal: Signal, o: Observation) {
    fake.stats.lock().unwrap().observations.insert(signal, o);
}

#[test]
fn thresholds_parse_as_upstream_and_errors_name_the_field() {
    let hard: BTreeMap<String, String> =
        [("memory.available", "100Mi"), ("nodefs.available", "10%"), ("imagefs.available", "0%")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    let t = parse_thresholds(&["pods".into()], &hard, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap();
    let signals: Vec<Signal> = t.iter().map(|t| t.signal).collect();
    assert_eq!(
        signals,
        [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable, Signal::NodeFsAvailable],
        "0% is no threshold; pods enforcement adds the allocatable twin"
    );
    assert_eq!(t[0].value.quantity(0), 100 * MI);
    assert_eq!(t[2].value.quantity(1000), 100);

    let soft = BTreeMap::from([("memory.available".to_string(), "300Mi".to_string())]);
    let e = parse_thresholds(&[], &BTreeMap::new(), &soft, &BTreeMap::new(), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "evictionSoftGracePeriod[memory.available]: grace period must be specified for the soft eviction threshold memory.available"
    );
    let bad = BTreeMap::from([("memory.free".to_string(), "1Gi".to_string())]);
    let e = parse_thresholds(&[], &bad, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap_err();
    assert_eq!(e.to_string(), "evictionHard[memory.free]: unsupported eviction signal memory.free");
    let bad = BTreeMap::from([("nodefs.available".to_string(), "110%".to_string())]);
    let e = parse_thresholds(&[], &bad, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap_err();
    assert_eq!(e.field, "evictionHard");
    assert!(e.message.contains("must be <= 100%"), "{e}");
    let bad = BTreeMap::from([("nodefs.available".to_string(), "lots".to_string())]);
    assert!(parse_thresholds(&[], &bad, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).is_err());
}

#[tokio::test(start_paused = true)]
async fn memory_pressure_evicts_the_pod_most_over_its_request_one_per_pass() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[("memory.available", "100Mi")], &[], &[]));
    let state = m.state();
    set_obs(&fake, Signal::MemoryAvailable, obs(500 * MI, 1000 * MI));
    set_pods(
        &fake,
        vec![
            (pod("guaranteed", 0, Some("300Mi")), 200 * MI),
            (pod("hog", 0, Some("10Mi")), 150 * MI),
            (pod("besteffort", 0, None), 50 * MI),
            (pod("important", 1000, None), 400 * MI),
        ],
    );
    assert!(m.synchronize().await.is_empty());
    assert!(state.conditions().is_empty());
    assert_eq!(*fake.pod_fetches.lock().unwrap(), 0, "without pressure nor limits, the pods' figures are not read");

    set_obs(&fake, Signal::MemoryAvailable, obs(80 * MI, 1000 * MI));
    let evicted = m.synchronize().await;
    assert_eq!(
        evicted.iter().map(|p| name(p)).collect::<Vec<_>>(),
        ["hog"],
        "over its request, lowest priority, most above request"
    );
    assert!(state.has(NodeCondition::MemoryPressure));
    let kills = fake.kills.lock().unwrap().clone();
    assert_eq!(kills[0].1, IMMEDIATE_GRACE_SECONDS, "hard thresholds kill at once");
    assert_eq!(
        kills[0].2.message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
         Container app was using 150Mi, request is 10Mi, has larger consumption of memory. "
    );
    assert_eq!(kills[0].2.reason, "Evicted");
    assert_eq!(kills[0].2.disruption_message.as_deref(), Some(kills[0].2.message.as_str()));
    let events = fake.events.lock().unwrap().clone();
    assert_eq!(events[0], ("EvictionThresholdMet".to_string(), "Attempting to reclaim memory".to_string()));
    assert_eq!(events[1].0, "Evicted");

    // Next pass: the next in rank (besteffort exceeds its zero request; important has higher priority).
    let evicted = m.synchronize().await;
    assert_eq!(evicted.iter().map(|p| name(p)).collect::<Vec<_>>(), ["besteffort"]);
    assert_eq!(*fake.reclaims.lock().unwrap(), 0, "memory has no node-level reclaim");
}

#[tokio::test(start_paused = true)]
async fn critical_pods_are_never_evicted() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[("memory.available", "100Mi")], &[], &[]));
    let mut critical = pod("kube-proxy", kubelet_types::qos::SYSTEM_CRITICAL_PRIORITY, None);
    critical.spec.as_mut().unwrap().priority = Some(2_000_001_000);
    let mut static_pod = pod("etcd-node", 0, None);
    static_pod.metadata.annotations =
        Some(BTreeMap::from([(kubelet_types::labels::CONFIG_SOURCE.to_string(), "file".to_string())]));
    set_pods(&fake, vec![(critical, 900 * MI), (static_pod, 800 * MI)]);
    set_obs(&fake, Signal::MemoryAvailable, obs(10 * MI, 1000 * MI));
    assert!(m.synchronize().await.is_empty());
    assert!(fake.kills.lock().unwrap().is_empty());
    assert!(m.state().has(NodeCondition::MemoryPressure));
}

#[tokio::test(start_paused = true)]
async fn soft_thresholds_wait_their_grace_period_and_cap_the_pod_grace() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[], &[("memory.available", "300Mi")], &[("memory.available", 60)]));
    let mut p = pod("web", 0, None);
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(120);
    set_pods(&fake, vec![(p, 100 * MI)]);
    set_obs(&fake, Signal::MemoryAvailable, obs(200 * MI, 1000 * MI));
    assert!(m.synchronize().await.is_empty(), "grace period not over");
    assert!(m.state().has(NodeCondition::MemoryPressure), "the condition does not wait for the grace period");
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(m.synchronize().await.is_empty());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(m.synchronize().await.len(), 1);
    assert_eq!(fake.kills.lock().unwrap()[0].1, 30, "min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)");
}

#[tokio::test(start_paused = true)]
async fn conditions_stay_for_the_transition_period_after_pressure_ends() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[("pid.available", "100")], &[], &[]));
    let state = m.state();
    set_obs(&fake, Signal::PidAvailable, obs(50, 1000));
    m.synchronize().await;
    assert!(state.has(NodeCondition::PidPressure));
    set_obs(&fake, Signal::PidAvailable, obs(900, 1000));
    tokio::time::advance(Duration::from_secs(299)).await;
    m.synchronize().await;
    assert!(state.has(NodeCondition::PidPressure), "within evictionPressureTransitionPeriod");
    tokio::time::advance(Duration::from_secs(1)).await;
    m.synchronize().await;
    assert!(state.conditions().is_empty());
}

#[tokio::test(start_paused = true)]
async fn disk_pressure_reclaims_images_before_evicting_and_honours_minimum_reclaim() {
    let fake = Arc::new(Fake::default());
    let hard = BTreeMap::from([("nodefs.available".to_string(), "1Gi".to_string())]);
    let reclaim = BTreeMap::from([("nodefs.available".to_string(), "500Mi".to_string())]);
    let t = parse_thresholds(&[], &hard, &BTreeMap::new(), &BTreeMap::new(), &reclaim).unwrap();
    let mut m = manager(&fake, t);
    set_pods(&fake, vec![(pod("writer", 0, None), 0)]);
    set_obs(&fake, Signal::NodeFsAvailable, obs(900 * MI, 10_000 * MI));
    // The image GC frees 700Mi: 1600Mi available, above 1Gi + 500Mi: no eviction.
    *fake.image_gc_frees.lock().unwrap() = 700 * MI;
    assert!(m.synchronize().await.is_empty());
    assert_eq!(*fake.reclaims.lock().unwrap(), 1, "dead containers first");
    assert!(fake.kills.lock().unwrap().is_empty());
    assert!(m.state().has(NodeCondition::DiskPressure));

    // Later only 300Mi can be freed: 1100Mi is above the threshold but not by the minimum reclaim, so a pod goes.
    set_obs(&fake, Signal::NodeFsAvailable, obs(800 * MI, 10_000 * MI));
    *fake.image_gc_frees.lock().unwrap() = 300 * MI;
    let evicted = m.synchronize().await;
    assert_eq!(evicted.len(), 1);
    let msg = &fake.kills.lock().unwrap()[0].2.message;
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: "),
        "{msg}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_dir_over_its_size_limit_is_evicted_without_pressure() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, vec![]);
    let mut p = pod("scratch", 0, None);
    p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "cache".into(),
        empty_dir: Some(EmptyDirVolumeSource { size_limit: Some(Quantity("10Mi".into())), medium: None }),
        ..Default::default()
    }]);
    let uid = p.metadata.uid.clone().unwrap();
    set_pods(&fake, vec![(p, 0)]);
    fake.stats
        .lock()
        .unwrap()
        .pods
        .get_mut(&uid)
        .unwrap()
        .volumes
        .insert("cache".into(), FsUsage { bytes: Some(9 * MI as u64), inodes: Some(1) });
    assert!(m.synchronize().await.is_empty());
    fake.stats
        .lock()
        .unwrap()
        .pods
        .get_mut(&uid)
        .unwrap()
        .volumes
        .insert("cache".into(), FsUsage { bytes: Some(11 * MI as u64), inodes: Some(1) });
    assert_eq!(m.synchronize().await.len(), 1);
    let k = fake.kills.lock().unwrap()[0].clone();
    assert_eq!(k.2.message, "Usage of EmptyDir volume \"cache\" exceeds the limit \"10Mi\". ");
    assert_eq!(k.2.disruption_message, None);
}

#[tokio::test(start_paused = true)]
async fn pressure_admission_as_upstream() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[("memory.available", "100Mi"), ("nodefs.available", "1Gi")], &[], &[]));
    let state = m.state();
    let best_effort = pod("be", 0, None);
    let burstable = pod("bu", 0, Some("10Mi"));
    assert_eq!(state.admit(&best_effort), None);
    set_obs(&fake, Signal::MemoryAvailable, obs(10 * MI, 1000 * MI));
    set_obs(&fake, Signal::NodeFsAvailable, obs(10_000 * MI, 100_000 * MI));
    m.synchronize().await;
    assert_eq!(
        state.admit(&best_effort),
        Some(("Evicted".to_string(), "The node had condition: [MemoryPressure]. ".to_string()))
    );
    assert_eq!(state.admit(&burstable), None, "memory pressure refuses only BestEffort pods");
    let mut tolerant = best_effort.clone();
    tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some("node.kubernetes.io/memory-pressure".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    assert_eq!(state.admit(&tolerant), None);
    set_obs(&fake, Signal::NodeFsAvailable, obs(10 * MI, 100_000 * MI));
    m.synchronize().await;
    assert_eq!(
        state.admit(&burstable).map(|r| r.1),
        Some("The node had condition: [MemoryPressure DiskPressure]. ".to_string())
    );
    let mut critical = burstable.clone();
    critical.spec.as_mut().unwrap().priority = Some(kubelet_types::qos::SYSTEM_CRITICAL_PRIORITY);
    assert_eq!(state.admit(&critical), None);
}

#[tokio::test(start_paused = true)]
async fn the_loop_wakes_on_a_notification_before_its_period() {
    let fake = Arc::new(Fake::default());
    let mut m = manager(&fake, thresholds(&[("memory.available", "100Mi")], &[], &[]));
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    m.d_wakeups(rx);
    set_obs(&fake, Signal::MemoryAvailable, obs(500 * MI, 1000 * MI));
    set_pods(&fake, vec![(pod("hog", 0, None), 400 * MI)]);
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(m.run(cancel.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_obs(&fake, Signal::MemoryAvailable, obs(50 * MI, 1000 * MI));
    let start = tokio::time::Instant::now();
    tx.send(()).await.unwrap();
    while fake.kills.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(start.elapsed() < Duration::from_millis(10), "evicted {:?} after the wake-up", start.elapsed());
    cancel.cancel();
    task.await.unwrap();
}

fn disk_usage(rootfs: i64) -> PodUsage {
    PodUsage {
        containers: vec![ContainerUsage {
            name: "app".into(),
            rootfs: FsUsage { bytes: Some(rootfs as u64), inodes: Some(10) },
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The issue 25 scenario: a writer evicted for nodefs leaves its writable layer until its container is removed,
/// and the runtime frees the layer a moment after the removal. The next pass must not rank the bystander on
/// figures taken before that.
#[tokio::test(start_paused = true)]
async fn the_next_pass_waits_for_the_evicted_pods_space_before_evicting_again() {
    let fake = Arc::new(Fake::default());
    let hard = BTreeMap::from([("nodefs.available".to_string(), "1Gi".to_string())]);
    let t = parse_thresholds(&[], &hard, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap();
    let mut m = manager(&fake, t);
    let (writer, bystander) = (pod("writer", 0, None), pod("bystander", 0, None));
    *fake.pods.lock().unwrap() = vec![Arc::new(writer.clone()), Arc::new(bystander.clone())];
    {
        let mut s = fake.stats.lock().unwrap();
        // The runtime measures writable layers every few seconds: the writer's figure can be as stale as this.
        s.pods.insert("uid-writer".into(), disk_usage(4096));
        s.pods.insert("uid-bystander".into(), disk_usage(0));
    }
    set_obs(&fake, Signal::NodeFsAvailable, obs(700 * MI, 10_000 * MI));
    let evicted = m.synchronize().await;
    assert_eq!(evicted.iter().map(|p| name(p)).collect::<Vec<_>>(), ["writer"]);

    // The writer's containers go at the next reclaim; their 600Mi show 2 s later.
    *fake.container_frees.lock().unwrap() = Some((600 * MI, Duration::from_secs(2)));
    let started = tokio::time::Instant::now();
    assert!(m.synchronize().await.is_empty(), "the bystander stays");
    assert_eq!(fake.kills.lock().unwrap().len(), 1);
    assert_eq!(started.elapsed(), Duration::from_secs(2), "waited for the release, no longer");

    // Pressure that the evicted pod's space does not end (another writer on the node): the wait is bounded and
    // the next pod goes.
    set_obs(&fake, Signal::NodeFsAvailable, obs(300 * MI, 10_000 * MI));
    fake.kills.lock().unwrap().clear();
    *fake.pods.lock().unwrap() = vec![Arc::new(writer.clone()), Arc::new(bystander.clone())];
    assert_eq!(m.synchronize().await.len(), 1, "writer evicted again");
    fake.kills.lock().unwrap().retain(|k| k.0 != "writer");
    *fake.pods.lock().unwrap() = vec![Arc::new(bystander.clone())];
    let started = tokio::time::Instant::now();
    let evicted = m.synchronize().await;
    assert_eq!(evicted.iter().map(|p| name(p)).collect::<Vec<_>>(), ["bystander"]);
    assert_eq!(started.elapsed(), RELEASE_TIMEOUT, "gave up waiting after the timeout");
}

/// The runtime measures writable layers every few seconds: a pass that would rank on figures measured before the
/// threshold was crossed (the writer looks empty) evicts nothing, and the next pass ranks on new ones.
#[tokio::test(start_paused = true)]
async fn a_disk_ranking_waits_for_layer_figures_measured_after_the_crossing() {
    use kubelet_types::Clock;
    let fake = Arc::new(Fake::default());
    let hard = BTreeMap::from([("nodefs.available".to_string(), "1Gi".to_string())]);
    let t = parse_thresholds(&[], &hard, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap();
    let mut m = manager(&fake, t);
    let clock = kubelet_types::TestClock::fixed();
    let (bystander, writer) = (pod("bystander", 0, None), pod("writer", 0, None));
    *fake.pods.lock().unwrap() = vec![Arc::new(bystander), Arc::new(writer)];
    let measured = |bytes: i64, at: std::time::SystemTime| {
        let mut u = disk_usage(bytes);
        u.containers[0].rootfs_time = Some(at);
        u
    };
    let before = clock.now() - Duration::from_secs(5);
    {
        let mut s = fake.stats.lock().unwrap();
        s.pods.insert("uid-bystander".into(), measured(4096, before));
        s.pods.insert("uid-writer".into(), measured(4096, before));
    }
    set_obs(&fake, Signal::NodeFsAvailable, obs(700 * MI, 10_000 * MI));
    assert!(m.synchronize().await.is_empty(), "figures from before the crossing: nobody is ranked on them");
    assert!(m.state().has(NodeCondition::DiskPressure));

    tokio::time::advance(Duration::from_secs(10)).await;
    {
        let mut s = fake.stats.lock().unwrap();
        let now = clock.now();
        s.pods.insert("uid-bystander".into(), measured(4096, now));
        s.pods.insert("uid-writer".into(), measured(600 * MI, now));
    }
    let evicted = m.synchronize().await;
    assert_eq!(evicted.iter().map(|p| name(p)).collect::<Vec<_>>(), ["writer"]);

    // A runtime that never measures again does not hold evictions back for ever.
    let mut m =
        manager(&fake, parse_thresholds(&[], &hard, &BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()).unwrap());
    fake.kills.lock().unwrap().clear();
    let old = kubelet_types::TestClock::fixed().now() - Duration::from_secs(1);
    fake.stats.lock().unwrap().pods.insert("uid-writer".into(), measured(600 * MI, old));
    assert!(m.synchronize().await.is_empty());
    tokio::time::advance(FRESH_FIGURES_TIMEOUT).await;
    assert_eq!(m.synchronize().await.len(), 1, "ranked on old figures after the timeout");
}

use std::collections::HashMap;

use kubelet_cri::FakeRuntime;
use kubelet_types::Clock;

use super::*;

/// A wall clock the test moves.
struct TestClock(Mutex<SystemTime>);

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap()
    }
}

async fn pod(fake: &FakeRuntime, name: &str, containers: &[&str]) -> (String, Vec<String>) {
    let meta = cri::PodSandboxMetadata {
        name: name.into(),
        uid: format!("uid-{name}"),
        namespace: "default".into(),
        attempt: 0,
    };
    let cfg = cri::PodSandboxConfig { metadata: Some(meta), ..Default::default() };
    let sb = fake.run_pod_sandbox(cfg.clone(), "").await.unwrap();
    let mut ids = vec![];
    for c in containers {
        let cc = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: c.to_string(), attempt: 0 }),
            image: Some(cri::ImageSpec { image: "busybox".into(), ..Default::default() }),
            labels: HashMap::from([("io.kubernetes.pod.uid".to_string(), format!("uid-{name}"))]),
            ..Default::default()
        };
        let id = fake.create_container(&sb, cc, cfg.clone()).await.unwrap();
        fake.start_container(&id).await.unwrap();
        ids.push(id);
    }
    (sb, ids)
}

fn provider(fake: Arc<FakeRuntime>, clock: Arc<TestClock>, root: &Path) -> SummaryProvider {
    provider_with(fake, clock, root, HostPaths::default(), None)
}

fn provider_with(
    fake: Arc<FakeRuntime>,
    clock: Arc<TestClock>,
    root: &Path,
    paths: HostPaths,
    pods_cgroup: Option<&str>,
) -> SummaryProvider {
    SummaryProvider::new(SummaryDeps {
        node_name: "node-a".into(),
        runtime: fake.clone(),
        images: fake,
        paths,
        root_dir: root.to_path_buf(),
        pod_logs_dir: root.join("logs"),
        pods_cgroup: pods_cgroup.map(str::to_string),
        volume_stats_period: Duration::from_secs(60),
        csi: Default::default(),
        clock,
        pressure: true,
    })
}

/// A cgroup v1 tree and `/proc` in a folder, laid out as the cgroupfs driver and containerd make them.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Self {
        let h = Host { dir: tempfile::tempdir().unwrap() };
        h.write("proc/stat", "cpu  100 0 50 1000 0 0 0 0 0 0\nbtime 1700000000\n");
        h.write("proc/meminfo", "MemTotal:        2048000 kB\n");
        h
    }

    fn paths(&self) -> HostPaths {
        HostPaths { proc: self.dir.path().join("proc"), cgroup: self.dir.path().join("cg") }
    }

    fn write(&self, rel: &str, s: &str) {
        let f = self.dir.path().join(rel);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    }

    /// CPU and memory of cgroup `cg` (v1: cpuacct and memory hierarchies).
    fn cgroup(&self, cg: &str, cpu_ns: u64, working_set: u64) {
        self.write(&format!("cg/cpuacct{cg}/cpuacct.usage"), &format!("{cpu_ns}\n"));
        self.write(&format!("cg/memory{cg}/memory.usage_in_bytes"), &format!("{}\n", working_set + 1000));
        self.write(&format!("cg/memory{cg}/memory.limit_in_bytes"), "9223372036854771712\n");
        self.write(
            &format!("cg/memory{cg}/memory.stat"),
            "total_inactive_file 1000\ntotal_rss 4096\ntotal_pgfault 9\ntotal_pgmajfault 1\n",
        );
    }
}

#[tokio::test]
async fn pods_and_containers_come_from_their_cgroups_with_rates_after_two_samples() {
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    fake.set_record_calls(true);
    let (sb, ids) = pod(&fake, "web", &["app", "side"]).await;
    let (_, gone) = pod(&fake, "done", &["x"]).await;
    fake.exit_container(&gone[0], 0);
    // What the runtime says is not what is reported: the cgroup files are.
    fake.set_usage(&ids[0], 1, 1);
    let host = Host::new();
    let pod_cg = "/kubepods/besteffort/poduid-web";
    host.cgroup(pod_cg, 1_600_000_000, 16 << 20);
    host.cgroup(&format!("{pod_cg}/{}", ids[0]), 1_000_000_000, 10 << 20);
    host.cgroup(&format!("{pod_cg}/{}", ids[1]), 500_000_000, 5 << 20);
    host.cgroup(&format!("{pod_cg}/{sb}"), 100_000_000, 1 << 20);
    host.write(&format!("cg/cpuacct{pod_cg}/{sb}/cgroup.procs"), "4242\n");
    host.write(&format!("cg/pids{pod_cg}/pids.current"), "3\n");
    host.write(
        "proc/4242/net/dev",
        "Inter-|   Receive\n face |bytes\n    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n  eth0: 1000 10 2 0 0 0 0 0 500 5 1 0 0 0 0 0\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let p = provider_with(fake.clone(), clock.clone(), dir.path(), host.paths(), Some("/kubepods"));

    let s = p.summary(true).await.unwrap();
    let pods = s.pods.unwrap();
    assert_eq!(pods.iter().map(|p| p.pod_ref.name.as_str()).collect::<Vec<_>>(), ["done", "web"]);
    assert_eq!(pods[0].containers.as_ref().unwrap().len(), 0, "only running containers are reported");
    let web = &pods[1];
    assert_eq!(web.pod_ref.uid, "uid-web");
    let names: Vec<&str> = web.containers.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app", "side"]);
    let app = &web.containers.as_ref().unwrap()[0];
    assert_eq!(app.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(1_000_000_000));
    assert_eq!(app.cpu.as_ref().unwrap().usage_nano_cores, None, "no rate before two samples");
    let mem = app.memory.as_ref().unwrap();
    assert_eq!(
        (mem.working_set_bytes, mem.usage_bytes, mem.rss_bytes),
        (Some(10 << 20), Some((10 << 20) + 1000), Some(4096))
    );
    assert_eq!((mem.page_faults, mem.major_page_faults, mem.available_bytes), (Some(9), Some(1), None));
    assert_eq!(web.memory.as_ref().unwrap().working_set_bytes, Some(16 << 20), "the pod's own cgroup");
    assert_eq!(web.cpu.as_ref().unwrap().usage_core_nano_seconds, Some(1_600_000_000));
    assert!(s.node.fs.is_none() && s.node.network.is_none() && web.network.is_none(), "cpu and memory only");
    assert_eq!(fake.count("ListContainerStats") + fake.count("ListPodSandboxStats"), 0, "no stats call to the runtime");

    // Two samples 10 s apart: half a core used by app, the pod's rate from its own cgroup.
    p.sample_cpu().await;
    host.cgroup(&format!("{pod_cg}/{}", ids[0]), 6_000_000_000, 10 << 20);
    host.cgroup(pod_cg, 6_600_000_000, 16 << 20);
    *clock.0.lock().unwrap() += Duration::from_secs(10);
    p.sample_cpu().await;
    fake.set_writable_layer(&ids[0], 8192);
    let s = p.summary(false).await.unwrap();
    let web = &s.pods.as_ref().unwrap()[1];
    let app = &web.containers.as_ref().unwrap()[0];
    assert_eq!(app.cpu.as_ref().unwrap().usage_nano_cores, Some(500_000_000));
    assert_eq!(web.cpu.as_ref().unwrap().usage_nano_cores, Some(500_000_000));
    assert_eq!(app.rootfs.as_ref().unwrap().used_bytes, Some(8192), "the writable layer is the runtime's");
    assert_eq!(web.process_stats.as_ref().unwrap().process_count, Some(3));
    let net = web.network.as_ref().unwrap();
    assert_eq!(
        (net.default.name.as_str(), net.default.rx_bytes, net.default.tx_bytes),
        ("eth0", Some(1000), Some(500))
    );
    assert_eq!(net.interfaces.len(), 1, "lo is left out");
    assert!(s.node.fs.is_some() && s.node.rlimit.is_some(), "the full summary has the node's fs and limits");
    assert!(web.ephemeral_storage.as_ref().unwrap().used_bytes.unwrap() >= 8192);
}

#[tokio::test]
async fn volumes_and_logs_are_measured_in_the_background_and_read_from_the_cache() {
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    pod(&fake, "web", &["app"]).await;
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("pods/uid-web/volumes/kubernetes.io~empty-dir/scratch");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("data"), vec![7u8; 100_000]).unwrap();
    let logs = dir.path().join("logs/default_web_uid-web/app");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("0.log"), vec![b'x'; 50_000]).unwrap();
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let p = Arc::new(provider(fake, clock, dir.path()));
    let before = p.summary(false).await.unwrap();
    assert!(before.pods.as_ref().unwrap()[0].volume.is_empty(), "nothing measured yet");
    p.measure_disks();
    let s = p.summary(false).await.unwrap();
    let web = &s.pods.as_ref().unwrap()[0];
    assert_eq!(web.volume.len(), 1);
    assert_eq!(web.volume[0].name, "scratch");
    assert!(web.volume[0].fs.used_bytes.unwrap() >= 100_000);
    assert_eq!(web.volume[0].fs.inodes_used, Some(2));
    let app = &web.containers.as_ref().unwrap()[0];
    assert!(app.logs.as_ref().unwrap().used_bytes.unwrap() >= 50_000);
    let eph = web.ephemeral_storage.as_ref().unwrap().used_bytes.unwrap();
    assert!(eph >= 150_000, "the emptyDir and the logs count as ephemeral storage: {eph}");
}

#[tokio::test(start_paused = true)]
async fn writable_layers_are_listed_rarely_and_new_containers_asked_for_alone() {
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    fake.set_record_calls(true);
    let (_, ids) = pod(&fake, "web", &["app"]).await;
    fake.set_writable_layer(&ids[0], 100);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let p = provider(fake.clone(), clock, dir.path());
    p.sample_cpu().await;
    for _ in 0..5 {
        p.summary(true).await.unwrap();
    }
    assert_eq!(fake.count("ListContainerStats"), 0, "cpu and memory never ask the runtime");
    p.summary(false).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 1, "the first full summary lists the writable layers");
    fake.set_writable_layer(&ids[0], 200);
    let (_, new) = pod(&fake, "late", &["x"]).await;
    fake.set_writable_layer(&new[0], 300);
    let s = p.summary(false).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 2, "one call for the new container alone");
    let rootfs = |s: &Summary, name: &str| {
        let pod = s.pods.iter().flatten().find(|p| p.pod_ref.name == name).unwrap();
        pod.containers.as_ref().unwrap()[0].rootfs.as_ref().and_then(|r| r.used_bytes)
    };
    assert_eq!((rootfs(&s, "web"), rootfs(&s, "late")), (Some(100), Some(300)), "web's figure is cached");
    tokio::time::advance(WRITABLE_LAYER_MAX_AGE + Duration::from_secs(1)).await;
    let s = p.summary(false).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 3, "listed again once older than the maximum age");
    assert_eq!(rootfs(&s, "web"), Some(200));
    // A new container's layer is not measured yet (0): asked again, at most every 10 s.
    let (_, fresh) = pod(&fake, "fresh", &["y"]).await;
    fake.set_writable_layer(&fresh[0], 0);
    p.summary(false).await.unwrap();
    p.summary(false).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 4);
    fake.set_writable_layer(&fresh[0], 500);
    tokio::time::advance(Duration::from_secs(10)).await;
    let s = p.summary(false).await.unwrap();
    assert_eq!((fake.count("ListContainerStats"), rootfs(&s, "fresh")), (5, Some(500)));
}

#[tokio::test]
async fn a_pod_is_reported_once_whatever_its_sandboxes() {
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    let (first, _) = pod(&fake, "web", &[]).await;
    fake.kill_sandbox(&first);
    let (second, _) = pod(&fake, "web", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let p = provider(fake.clone(), clock, dir.path());
    let names = |s: &Summary| s.pods.iter().flatten().map(|p| p.pod_ref.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&p.summary(true).await.unwrap()), ["web"], "the ready sandbox");
    fake.kill_sandbox(&second);
    let (third, _) = pod(&fake, "web", &[]).await;
    fake.kill_sandbox(&third);
    assert_eq!(names(&p.summary(true).await.unwrap()), ["web"], "no ready one: only the newest");
}

#[tokio::test]
async fn pressure_is_reported_for_the_node_pods_and_containers_with_kubelet_psi() {
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    let (_, ids) = pod(&fake, "web", &["app"]).await;
    let host = Host::new();
    host.write("cg/cgroup.controllers", "cpu memory io\n");
    host.write("cg/cpu.stat", "usage_usec 1000\n");
    host.write("cg/memory.stat", "anon 1\nfile 1\ninactive_file 0\n");
    host.write("proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n");
    let pod_cg = "/kubepods/besteffort/poduid-web";
    for cg in [pod_cg.to_string(), format!("{pod_cg}/{}", ids[0])] {
        host.write(&format!("cg{cg}/cpu.stat"), "usage_usec 1000\n");
        host.write(&format!("cg{cg}/memory.current"), "4096\n");
        host.write(&format!("cg{cg}/memory.stat"), "anon 1\nfile 1\ninactive_file 0\n");
        host.write(
            &format!("cg{cg}/cpu.pressure"),
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=2500\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n",
        );
        host.write(
            &format!("cg{cg}/io.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=30\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=20\n",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let p = provider_with(fake.clone(), clock.clone(), dir.path(), host.paths(), Some("/kubepods"));
    let s = p.summary(false).await.unwrap();
    let web = &s.pods.as_ref().unwrap()[0];
    let app = &web.containers.as_ref().unwrap()[0];
    let psi = app.cpu.as_ref().unwrap().psi.unwrap();
    assert_eq!((psi.some.total, psi.some.avg10, psi.some.avg60, psi.full.total), (2500, 1.5, 0.25, 1000));
    assert_eq!(app.memory.as_ref().unwrap().psi, Some(Default::default()), "no memory.pressure: zeros, as cAdvisor's");
    assert_eq!(app.io.as_ref().unwrap().psi.unwrap().some.total, 30);
    assert_eq!(web.cpu.as_ref().unwrap().psi.unwrap().some.total, 2500);
    assert_eq!(s.node.cpu.as_ref().unwrap().psi.unwrap().some.total, 7, "the root's from /proc/pressure");
    let json = serde_json::to_string(&app.cpu).unwrap();
    assert!(json.contains(r#""psi":{"full":{"total":1000,"avg10":0,"avg60":0,"avg300":0},"some":{"total":2500,"avg10":1.5,"avg60":0.25,"avg300":0}}"#), "{json}");
    // Only CPU and memory: no I/O, as upstream's ListPodCPUAndMemoryStats.
    let s = p.summary(true).await.unwrap();
    assert!(s.pods.as_ref().unwrap()[0].io.is_none());
    assert!(s.pods.as_ref().unwrap()[0].cpu.as_ref().unwrap().psi.is_some());
}

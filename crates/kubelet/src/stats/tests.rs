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
    SummaryProvider::new(SummaryDeps {
        node_name: "node-a".into(),
        runtime: fake.clone(),
        images: fake,
        paths: HostPaths::default(),
        root_dir: root.to_path_buf(),
        pod_logs_dir: root.join("logs"),
        pods_cgroup: None,
        volume_stats_period: Duration::from_secs(60),
        clock,
    })
}

#[tokio::test]
async fn pods_and_containers_come_from_the_runtime_with_rates_after_two_samples() {
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let c = clock.clone();
    let fake = Arc::new(FakeRuntime::with_time(
        &["busybox"],
        Box::new(move || c.now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64),
    ));
    let (_, ids) = pod(&fake, "web", &["app", "side"]).await;
    let (_, gone) = pod(&fake, "done", &["x"]).await;
    fake.exit_container(&gone[0], 0);
    fake.set_usage(&ids[0], 1_000_000_000, 10 << 20);
    fake.set_usage(&ids[1], 500_000_000, 5 << 20);
    let dir = tempfile::tempdir().unwrap();
    let p = provider(fake.clone(), clock.clone(), dir.path());

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
    assert_eq!(app.memory.as_ref().unwrap().working_set_bytes, Some(10 << 20));
    assert_eq!(web.memory.as_ref().unwrap().working_set_bytes, Some(15 << 20), "summed without sandbox stats");
    assert!(s.node.fs.is_none() && s.node.network.is_none(), "cpu and memory only");

    // Two samples 10 s apart: half a core used by app.
    p.sample_cpu().await;
    fake.set_usage(&ids[0], 6_000_000_000, 10 << 20);
    *clock.0.lock().unwrap() += Duration::from_secs(10);
    p.sample_cpu().await;
    let s = p.summary(false).await.unwrap();
    let web = &s.pods.as_ref().unwrap()[1];
    let app = &web.containers.as_ref().unwrap()[0];
    assert_eq!(app.cpu.as_ref().unwrap().usage_nano_cores, Some(500_000_000));
    assert!(s.node.fs.is_some() && s.node.rlimit.is_some(), "the full summary has the node's fs and limits");
    assert!(web.ephemeral_storage.is_some());
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
async fn requests_read_the_last_sampling_of_the_runtime_stats() {
    let fake = Arc::new(FakeRuntime::new(&["busybox"]));
    fake.set_record_calls(true);
    let (_, ids) = pod(&fake, "web", &["app"]).await;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(Mutex::new(UNIX_EPOCH + Duration::from_secs(1_800_000_000))));
    let p = provider(fake.clone(), clock, dir.path());
    p.sample_cpu().await;
    assert_eq!(fake.count("ListContainerStats"), 1);
    fake.set_usage(&ids[0], 0, 64 << 20);
    for _ in 0..5 {
        p.summary(true).await.unwrap();
    }
    assert_eq!(fake.count("ListContainerStats"), 1, "requests within 15 s of the sampling reuse it");
    let (_, new) = pod(&fake, "late", &["x"]).await;
    fake.set_usage(&new[0], 0, 1 << 20);
    p.summary(true).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 1, "not within 2 s of the last sampling");
    tokio::time::advance(Duration::from_secs(3)).await;
    let s = p.summary(true).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 2, "a container the sampling has not seen makes a new one");
    let late = s.pods.as_ref().unwrap().iter().find(|p| p.pod_ref.name == "late").unwrap();
    assert_eq!(late.containers.as_ref().unwrap()[0].memory.as_ref().unwrap().working_set_bytes, Some(1 << 20));
    tokio::time::advance(Duration::from_secs(16)).await;
    let s = p.summary(true).await.unwrap();
    assert_eq!(fake.count("ListContainerStats"), 3, "then they ask the runtime again");
    let pods = s.pods.unwrap();
    let web = pods.iter().find(|p| p.pod_ref.name == "web").unwrap();
    let app = &web.containers.as_ref().unwrap()[0];
    assert_eq!(app.memory.as_ref().unwrap().working_set_bytes, Some(64 << 20));
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

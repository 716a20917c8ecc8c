use super::*;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::PodSpec;

#[test]
fn groups_migrate_the_grace_periods_and_pods_fall_into_the_range_they_reach() {
    let s = Duration::from_secs;
    assert_eq!(
        groups(s(30), s(10), &[]),
        [Group { priority: 0, grace_seconds: 20 }, Group { priority: SYSTEM_CRITICAL_PRIORITY, grace_seconds: 10 }]
    );
    assert!(groups(s(10), s(20), &[]).is_empty(), "more for critical pods than in all");
    assert!(groups(s(0), s(0), &[]).is_empty(), "disabled");
    let by = [Group { priority: 100, grace_seconds: 5 }, Group { priority: -10, grace_seconds: 3 }];
    let g = groups(s(0), s(0), &by);
    assert_eq!(g.iter().map(|g| g.priority).collect::<Vec<_>>(), [-10, 100]);
    let pods: Vec<Arc<Pod>> = [-20, -10, 50, 100, 1000].iter().map(|p| pod(&format!("p{p}"), *p, None)).collect();
    let grouped = group_by_priority(&g, &pods);
    let names = |i: usize| grouped[i].1.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
    assert_eq!(names(0), ["p-20", "p-10", "p50"]);
    assert_eq!(names(1), ["p100", "p1000"]);
}

fn pod(name: &str, priority: i32, grace: Option<i64>) -> Arc<Pod> {
    let mut p = Pod {
        spec: Some(PodSpec { priority: Some(priority), termination_grace_period_seconds: grace, ..Default::default() }),
        ..Default::default()
    };
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    Arc::new(p)
}

/// logind: a delay that the reload raises to what the drop-in says, locks as pipe ends, signals from the test.
#[derive(Default)]
struct FakeLogind {
    delay: Mutex<Duration>,
    written: Mutex<Option<Duration>>,
    locks: Mutex<Vec<OwnedFd>>,
    signals: Mutex<Option<mpsc::Receiver<bool>>>,
}

impl Logind for FakeLogind {
    fn current_inhibit_delay(&self) -> Result<Duration, String> {
        Ok(*self.delay.lock().unwrap())
    }
    fn inhibit_shutdown(&self) -> Result<InhibitLock, String> {
        let (read, write) = nix::unistd::pipe().map_err(|e| e.to_string())?;
        nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        self.locks.lock().unwrap().push(read);
        Ok(InhibitLock(Some(write)))
    }
    fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String> {
        *self.written.lock().unwrap() = Some(delay);
        Ok(())
    }
    fn reload_logind_conf(&self) -> Result<(), String> {
        if let Some(d) = *self.written.lock().unwrap() {
            *self.delay.lock().unwrap() = d;
        }
        Ok(())
    }
    fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>, String> {
        self.signals.lock().unwrap().take().ok_or_else(|| "no bus".to_string())
    }
}

impl FakeLogind {
    /// Whether lock `i` is still held (its write end open).
    fn held(&self, i: usize) -> bool {
        let locks = self.locks.lock().unwrap();
        let mut b = [0u8; 1];
        matches!(nix::unistd::read(&locks[i], &mut b), Err(nix::errno::Errno::EAGAIN))
    }
}

/// Pods that stop after half their grace period; the kills in order with their grace periods.
struct Pods {
    pods: Vec<Arc<Pod>>,
    kills: Mutex<Vec<(String, i64, tokio::time::Instant, EvictionStatus)>>,
}

impl ActivePods for Pods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }
    fn cleaned_up(&self, _: &Pod) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl PodKiller for Pods {
    async fn kill(&self, pod: &Arc<Pod>, grace: i64, status: EvictionStatus) -> Result<(), String> {
        let name = pod.metadata.name.clone().unwrap();
        self.kills.lock().unwrap().push((name, grace, tokio::time::Instant::now(), status));
        tokio::time::sleep(Duration::from_millis(grace as u64 * 500)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_stops_the_pods_by_priority_within_their_budgets_and_then_releases_the_lock() {
    let (signals, rx) = mpsc::channel(1);
    let logind = Arc::new(FakeLogind { delay: Mutex::new(Duration::from_secs(5)), ..Default::default() });
    *logind.signals.lock().unwrap() = Some(rx);
    let pods = Arc::new(Pods {
        pods: vec![pod("critical", SYSTEM_CRITICAL_PRIORITY, None), pod("web", 0, Some(4)), pod("batch", 0, None)],
        kills: Mutex::default(),
    });
    let dir = tempfile::tempdir().unwrap();
    let state = Arc::new(NodeShutdown::default());
    let m = ShutdownManager {
        state: state.clone(),
        groups: groups(Duration::from_secs(30), Duration::from_secs(10), &[]),
        logind: logind.clone(),
        pods: pods.clone(),
        killer: pods.clone(),
        recorder: Arc::new(kubelet_types::events::LogRecorder),
        node_ref: Default::default(),
        state_file: dir.path().join(STATE_FILE),
        clock: Arc::new(kubelet_types::TestClock::fixed()),
    };
    let tracker = tokio_util::task::TaskTracker::new();
    let cancel = CancellationToken::new();
    m.start(&tracker, cancel.clone()).await.unwrap();
    assert_eq!(*logind.written.lock().unwrap(), Some(Duration::from_secs(30)), "InhibitDelayMaxSec raised to the sum");
    assert!(logind.held(0));
    let admit = ShutdownAdmit(state.clone());
    assert_eq!(admit.admit(&pod("new", 0, None), &[]), None);

    let t0 = tokio::time::Instant::now();
    let mut changed = state.subscribe();
    signals.send(true).await.unwrap();
    changed.changed().await.unwrap();
    assert_eq!(state.error().as_deref(), Some("node is shutting down"));
    let refused = admit.admit(&pod("new", 0, None), &[]).unwrap();
    assert_eq!((refused.reason.as_str(), refused.message.as_str()), (NOT_ADMITTED_REASON, NOT_ADMITTED_MESSAGE));
    while logind.held(0) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kills = pods.kills.lock().unwrap().clone();
    let order: Vec<(&str, i64)> = kills.iter().map(|k| (k.0.as_str(), k.1)).collect();
    assert_eq!(order, [("web", 4), ("batch", 20), ("critical", 10)], "priority 0 first, each within its budget");
    assert_eq!(kills[2].2 - t0, Duration::from_secs(10), "the critical group starts once the others stopped");
    assert_eq!((kills[0].3.reason.as_str(), kills[0].3.message.as_str()), (SHUTDOWN_REASON, SHUTDOWN_MESSAGE));
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(STATE_FILE)).unwrap()).unwrap();
    assert_eq!(saved["startTime"], "2026-01-01T00:00:00.1Z", "after the 100 ms wait for logind's reload");
    assert_eq!(saved["endTime"], "2026-01-01T00:00:15.1Z");

    // A cancelled shutdown: the lock is taken again and pods are admitted.
    signals.send(false).await.unwrap();
    changed.changed().await.unwrap();
    assert_eq!(state.error(), None);
    while logind.locks.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(logind.held(1));
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

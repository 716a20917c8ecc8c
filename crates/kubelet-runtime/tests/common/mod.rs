//! The runtime manager over the in-memory fake runtime, on a fixed test clock, for the integration tests.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use kubelet_cri::FakeRuntime;
use kubelet_runtime::{RuntimeManager, RuntimeManagerConfig};
use kubelet_types::{Clock, PodStatus, PodUid, TestClock};

/// A runtime manager and its fake runtime.
pub struct Env {
    pub fake: Arc<FakeRuntime>,
    pub mgr: RuntimeManager,
    _dir: tempfile::TempDir,
}

/// A manager over a fake runtime with `busybox:1`, its folders in a temporary directory.
pub fn env() -> Env {
    let clock = Arc::new(TestClock::fixed());
    let c2 = clock.clone();
    let time = Box::new(move || c2.now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64);
    let fake = Arc::new(FakeRuntime::with_time(&["busybox:1"], time));
    let dir = tempfile::tempdir().unwrap();
    let cfg = RuntimeManagerConfig {
        pod_logs_dir: dir.path().join("pods-logs"),
        container_logs_dir: dir.path().join("containers"),
        root_dir: dir.path().join("root"),
        resolv_conf: None,
        ..Default::default()
    };
    let mgr = RuntimeManager::new(fake.clone(), fake.clone(), cfg, clock);
    Env { fake, mgr, _dir: dir }
}

/// The runtime status of pod `default/p` (UID `uid-1`).
pub async fn status(e: &Env) -> PodStatus {
    e.mgr.get_pod_status(&PodUid::from("uid-1"), "p", "default").await.unwrap()
}

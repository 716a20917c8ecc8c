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
#[allow(dead_code)] // not every test binary uses every helper
pub fn env() -> Env {
    env_with(|_| {})
}

/// As [`env`], with the manager built further by `build` (its collaborators: objects, recorder, credentials).
#[allow(dead_code)] // not every test binary uses every helper
pub fn env_built(build: impl FnOnce(RuntimeManager) -> RuntimeManager) -> Env {
    let Env { fake, mgr, _dir } = env();
    Env { fake, mgr: build(mgr), _dir }
}

/// As [`env`], with the configuration changed by `edit`.
pub fn env_with(edit: impl FnOnce(&mut RuntimeManagerConfig)) -> Env {
    let clock = Arc::new(TestClock::fixed());
    let c2 = clock.clone();
    let time = Box::new(move || c2.now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64);
    let fake = Arc::new(FakeRuntime::with_time(&["busybox:1"], time));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = RuntimeManagerConfig {
        pod_logs_dir: dir.path().join("pods-logs"),
        container_logs_dir: dir.path().join("containers"),
        root_dir: dir.path().join("root"),
        resolv_conf: None,
        ..Default::default()
    };
    edit(&mut cfg);
    let mgr = RuntimeManager::new(fake.clone(), fake.clone(), cfg, clock);
    Env { fake, mgr, _dir: dir }
}

/// Pod `default/p` (UID `uid-1`) with `spec`.
#[allow(dead_code)] // not every test binary uses every helper
pub fn pod_p(spec: k8s_openapi::api::core::v1::PodSpec) -> k8s_openapi::api::core::v1::Pod {
    k8s_openapi::api::core::v1::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    }
}

/// The runtime status of pod `default/p` (UID `uid-1`).
pub async fn status(e: &Env) -> PodStatus {
    e.mgr.get_pod_status(&PodUid::from("uid-1"), "p", "default").await.unwrap()
}

/// The events a manager records: (reason, message) in order.
#[derive(Default)]
#[allow(dead_code)] // not every test binary uses every helper
pub struct Events(pub std::sync::Mutex<Vec<(String, String)>>);

impl kubelet_types::events::Recorder for Events {
    fn event(&self, _: &k8s_openapi::api::core::v1::ObjectReference, _: &str, reason: &str, message: String) {
        self.0.lock().unwrap().push((reason.into(), message));
    }
}

//! The whole core — sync loop, pod workers, runtime manager, PLEG and housekeeping — wired over an in-memory CRI
//! runtime, in this process. Used by the core's integration tests and by the scale benchmark; the binary wires
//! the same pieces over the real runtime in `rkubelet/src/app.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubelet_config::podconfig::SourcesReady;
use kubelet_cri::FakeRuntime;
use kubelet_runtime::pleg::{RELIST_PERIOD, RELIST_THRESHOLD};
use kubelet_runtime::{GenericPleg, PlegHealth, PodCache, RuntimeManager, RuntimeManagerConfig};
use kubelet_types::{Clock, PodUpdate};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cm::NoCgroups;
use crate::pod_workers::PodWorkers;
use crate::server::SyncLoopHealth;
use crate::status::StatusManager;
use crate::sync_loop::{SyncLoop, SyncLoopDeps};
use crate::syncer::KubeletSyncer;

/// A running core over a fake runtime.
pub struct FakeNode {
    /// The runtime manager (shared with the core).
    pub runtime: Arc<RuntimeManager>,
    /// API statuses the core computes.
    pub status: Arc<StatusManager>,
    /// Where pod updates go (as from the PodConfig merge).
    pub updates: mpsc::Sender<PodUpdate>,
    /// Cancels every task of the core.
    pub cancel: CancellationToken,
    /// The core's tasks.
    pub tracker: TaskTracker,
}

/// An in-memory runtime with `images`, whose timestamps come from a test clock that moves with tokio's paused
/// clock; and that clock, for the node.
pub fn fake_runtime_on_test_clock(images: &[&str]) -> (Arc<FakeRuntime>, Arc<kubelet_types::TestClock>) {
    let clock = Arc::new(kubelet_types::TestClock::fixed());
    let c2 = clock.clone();
    let fake = Arc::new(FakeRuntime::with_time(
        images,
        Box::new(move || c2.now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as i64),
    ));
    (fake, clock)
}

/// What a [`FakeNode`] admits with, beyond the defaults (no admit handlers, events only logged).
#[derive(Default)]
pub struct FakeNodeOptions {
    /// The Node admission reads: with it, new pods go through the predicate handler and critical pods that lack
    /// resources preempt others.
    pub node: Option<k8s_openapi::api::core::v1::Node>,
    /// Where events are recorded.
    pub recorder: Option<Arc<dyn kubelet_types::events::Recorder>>,
}

impl FakeNode {
    /// Starts the core over `fake`, with its files under `dir`, reading wall time from `clock`; housekeeping waits
    /// for `sources_ready`. Call inside a tokio runtime.
    pub fn start(fake: Arc<FakeRuntime>, clock: Arc<dyn Clock>, dir: &Path, sources_ready: Arc<SourcesReady>) -> Self {
        Self::start_with(fake, clock, dir, sources_ready, FakeNodeOptions::default())
    }

    /// As [`FakeNode::start`], with `opts`.
    pub fn start_with(
        fake: Arc<FakeRuntime>,
        clock: Arc<dyn Clock>,
        dir: &Path,
        sources_ready: Arc<SourcesReady>,
        opts: FakeNodeOptions,
    ) -> Self {
        let recorder = opts.recorder.unwrap_or_else(|| Arc::new(kubelet_types::events::LogRecorder));
        let cfg = RuntimeManagerConfig {
            pod_logs_dir: dir.join("logs"),
            container_logs_dir: dir.join("containers"),
            root_dir: dir.join("root"),
            resolv_conf: None,
            ..Default::default()
        };
        let status = Arc::new(StatusManager::new(clock.clone()));
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (probes, probe_updates) = kubelet_prober::ProbeManager::new(kubelet_prober::ProbeManagerDeps {
            runtime: fake.clone(),
            status: status.clone(),
            recorder: recorder.clone(),
            clock: clock.clone(),
            cancel: cancel.clone(),
            tracker: tracker.clone(),
        });
        let probes = Arc::new(probes);
        let volumes = Arc::new(kubelet_volume::VolumeManager::new(
            dir.join("root/pods"),
            Arc::new(kubelet_types::objects::NoObjects),
            Arc::new(crate::volumes::PodDownward::default()),
            Arc::new(kubelet_volume::SystemMounter),
        ));
        let runtime = Arc::new(
            RuntimeManager::new(fake.clone(), fake, cfg, clock.clone())
                .with_probe_results(probes.clone())
                .with_volumes(volumes.clone()),
        );
        let cache = Arc::new(PodCache::default());
        let (pleg_tx, pleg_rx) = mpsc::channel(1000);
        let pleg_health = Arc::new(PlegHealth::new(RELIST_THRESHOLD));
        let pleg = GenericPleg::new(runtime.clone(), cache.clone(), pleg_tx, pleg_health, RELIST_PERIOD);
        tracker.spawn(pleg.run(cancel.clone()));
        let syncer = Arc::new(KubeletSyncer {
            runtime: runtime.clone(),
            cache: cache.clone(),
            status: status.clone(),
            cgroups: Arc::new(NoCgroups),
            host_ips: vec!["192.0.2.10".into()],
            probes: probes.clone(),
            volumes: volumes.clone(),
        });
        let workers = PodWorkers::new(syncer, Duration::from_secs(60), cancel.clone(), tracker.clone());
        let (admit, preemption) = match opts.node {
            Some(node) => {
                let node = watch::channel(Some(node)).1;
                let predicate = crate::predicate::PredicateAdmit { node: node.clone(), plugin_resources: None };
                let killer = Arc::new(crate::pressure::WorkerKiller(workers.clone()));
                let preemption = crate::preemption::CriticalPodPreemption::new(node, killer, recorder.clone());
                (vec![Arc::new(predicate) as Arc<dyn crate::admission::PodAdmitHandler>], Some(Arc::new(preemption)))
            }
            None => (vec![], None),
        };
        let (updates, upd_rx) = mpsc::channel(10);
        let sync_loop = SyncLoop::new(SyncLoopDeps {
            updates: upd_rx,
            pleg_events: pleg_rx,
            probe_updates,
            probes,
            workers,
            runtime: runtime.clone(),
            cache,
            cgroups: Arc::new(NoCgroups),
            sources_ready,
            health: Arc::new(SyncLoopHealth::new(Duration::from_secs(60))),
            pods_out: watch::channel(Arc::new(vec![])).0,
            pods_dir: dir.join("root/pods"),
            mirror: None,
            volumes: volumes.clone(),
            admit,
            allocator: None,
            allocate_after: 0,
            status: status.clone(),
            recorder,
            node_name: "fake-node".into(),
            allocations: Arc::new(crate::allocation::Allocations::new(Arc::new(
                kubelet_cm::allocation_state::PodResourceState::in_memory(),
            ))),
            resize_facts: crate::allocation::ResizeFacts {
                allocatable_cpu_milli: i64::MAX,
                allocatable_memory: i64::MAX,
                static_cpu_policy: false,
                static_memory_policy: false,
            },
        });
        let sync_loop = match preemption {
            Some(p) => sync_loop.with_preemption(p),
            None => sync_loop,
        };
        tracker.spawn(sync_loop.run(cancel.clone()));
        Self { runtime, status, updates, cancel, tracker }
    }

    /// Cancels the core and waits for its tasks.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

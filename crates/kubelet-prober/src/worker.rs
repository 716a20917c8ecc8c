//! One probe of one container (`pkg/kubelet/prober/worker.go`): a task that checks every `periodSeconds` and
//! caches the result once it held `successThreshold` / `failureThreshold` times in a row.
//!
//! Started by the manager for each probe a pod's spec has; stopped by its token when the pod is removed (or, for
//! liveness and startup, when the pod starts terminating), or by itself once the pod is terminal or its container
//! exited for good. A manual trigger runs the probe at once (readiness, when a container just started).

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, ContainerStatus as ApiContainerStatus, Probe};
use kubelet_types::events::{WARNING, container_reference, reason};
use kubelet_types::probe::{ProbeResult, ProbeType};
use kubelet_types::{Pod, PodUid};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::handlers::{self, Outcome};
use crate::manager::Shared;
use crate::results::ResultsCache;

/// Retries of a probe that errored before its result is thrown away (`maxProbeRetries`).
const MAX_PROBE_RETRIES: usize = 3;

/// What the manager keeps of a worker.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub(crate) stop: CancellationToken,
    pub(crate) trigger: Arc<Notify>,
    pub(crate) pod: Arc<Mutex<Arc<Pod>>>,
}

pub(crate) struct Worker {
    pub(crate) probe_type: ProbeType,
    pub(crate) spec: Probe,
    pub(crate) container: Container,
    pub(crate) pod: Arc<Mutex<Arc<Pod>>>,
    pub(crate) uid: PodUid,
    pub(crate) results: Arc<ResultsCache>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) stop: CancellationToken,
    pub(crate) trigger: Arc<Notify>,
    container_id: Option<String>,
    last_result: Option<ProbeResult>,
    result_run: i32,
    on_hold: bool,
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        probe_type: ProbeType,
        spec: Probe,
        container: Container,
        pod: Arc<Mutex<Arc<Pod>>>,
        uid: PodUid,
        results: Arc<ResultsCache>,
        shared: Arc<Shared>,
        stop: CancellationToken,
        trigger: Arc<Notify>,
    ) -> Self {
        Self {
            probe_type,
            spec,
            container,
            pod,
            uid,
            results,
            shared,
            stop,
            trigger,
            container_id: None,
            last_result: None,
            result_run: 0,
            on_hold: false,
        }
    }

    /// The result a new container starts with: readiness fails until proven, liveness passes until disproven,
    /// startup is unknown.
    fn initial_value(&self) -> ProbeResult {
        match self.probe_type {
            ProbeType::Readiness => ProbeResult::Failure,
            ProbeType::Liveness => ProbeResult::Success,
            ProbeType::Startup => ProbeResult::Unknown,
        }
    }

    /// Probes until stopped.
    pub(crate) async fn run(mut self) {
        let period = Duration::from_secs(self.spec.period_seconds.unwrap_or(10).max(1) as u64);
        // Right after a kubelet start every probe would fire at once: spread them over one period.
        if self.shared.started.elapsed() < period {
            let jitter = period.mul_f64(rand::random::<f64>());
            tokio::select! {
                _ = self.stop.cancelled() => return self.finish(),
                _ = tokio::time::sleep(jitter) => {}
            }
        }
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            if !self.do_probe().await {
                break;
            }
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = ticker.tick() => {}
                _ = self.trigger.notified() => {}
            }
        }
        self.finish();
    }

    fn finish(&self) {
        if let Some(id) = &self.container_id {
            self.results.remove(id);
        }
        // The worker's series go with it, as upstream deletes them when the worker stops.
        let pod = self.pod.lock().unwrap().clone();
        let (ns, name) = (pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""));
        let (c, kind, uid) = (self.container.name.as_str(), self.probe_type_label(), self.uid.to_string());
        for result in ["successful", "failed", "unknown"] {
            kubelet_metrics::prober::PROBE_TOTAL.remove(&[c, ns, name, &uid, kind, result]);
        }
        kubelet_metrics::prober::PROBE_DURATION.remove(&[c, ns, name, kind]);
        self.shared.worker_done(&self.uid, &self.container.name, self.probe_type, &self.stop);
    }

    /// One round (`doProbe`); false ends the worker.
    async fn do_probe(&mut self) -> bool {
        let Some(status) = self.shared.status.pod_status(&self.uid) else {
            debug!(podUID = %self.uid, "no status for pod yet");
            return true;
        };
        if matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
            return false;
        }
        let find = |list: &Option<Vec<ApiContainerStatus>>| {
            list.iter().flatten().find(|c| c.name == self.container.name && c.container_id.is_some()).cloned()
        };
        let Some(c) = find(&status.container_statuses).or_else(|| find(&status.init_container_statuses)) else {
            return true; // not created yet, or gone
        };
        let id = c.container_id.as_deref().unwrap_or_default();
        let id = id.split_once("://").map(|(_, i)| i).unwrap_or(id).to_string();
        if self.container_id.as_deref() != Some(id.as_str()) {
            if let Some(old) = &self.container_id {
                self.results.remove(old);
            }
            // The first container a new worker sees may have a result seeded from the pod's last status (a
            // restarted kubelet); it stands until this worker's probes decide.
            if self.container_id.is_some() || self.results.get(&id).is_none() {
                self.results.set(&id, self.initial_value(), &self.uid).await;
            }
            self.container_id = Some(id.clone());
            // A new container: probing resumes.
            self.on_hold = false;
        }
        if self.on_hold {
            return true;
        }
        let pod = self.pod.lock().unwrap().clone();
        let state = c.state.clone().unwrap_or_default();
        let Some(running) = state.running else {
            // A container that waits to start (one created before rkubelet restarted) has not failed a liveness
            // or startup probe: recording Failure for it, as upstream does, would have it killed by the first sync
            // after its start, before the worker probes it. Those results only matter for running containers.
            if self.probe_type == ProbeType::Readiness || state.terminated.is_some() {
                self.results.set(&id, ProbeResult::Failure, &self.uid).await;
            }
            // Stop for good only if the container will not run again.
            let never = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never");
            return state.terminated.is_none() || !never;
        };
        if pod.metadata.deletion_timestamp.is_some()
            && matches!(self.probe_type, ProbeType::Liveness | ProbeType::Startup)
        {
            // A quiet shutdown: no restart while the pod terminates.
            self.results.set(&id, ProbeResult::Success, &self.uid).await;
            return false;
        }
        if let Some(started_at) = running.started_at {
            let now = self.shared.clock.now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
            if now - started_at.0.as_second() < self.spec.initial_delay_seconds.unwrap_or(0) as i64 {
                return true;
            }
        }
        let started = c.started == Some(true);
        match (self.probe_type, started) {
            // The startup probe is done once the container started; the others wait for that.
            (ProbeType::Startup, true) => return true,
            (ProbeType::Liveness | ProbeType::Readiness, false) => return true,
            _ => {}
        }
        let pod_ip = status.pod_ip.clone().unwrap_or_default();
        let Some(result) = self.probe(&pod, &id, &pod_ip).await else { return true };
        if self.last_result == Some(result) {
            self.result_run += 1;
        } else {
            self.last_result = Some(result);
            self.result_run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => self.spec.failure_threshold.unwrap_or(3),
            _ => self.spec.success_threshold.unwrap_or(1),
        };
        if self.result_run < threshold.max(1) {
            return true;
        }
        self.results.set(&id, result, &self.uid).await;
        if matches!(self.probe_type, ProbeType::Liveness | ProbeType::Startup) && result == ProbeResult::Failure {
            // The container will be restarted: no probing until a new one runs.
            self.on_hold = true;
            self.result_run = 0;
        }
        true
    }

    /// `Liveness`, `Readiness` or `Startup`, as the probe metrics label them.
    fn probe_type_label(&self) -> &'static str {
        match self.probe_type {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }

    /// `prober_probe_total` and `prober_probe_duration_seconds` (the latter not for failures, as upstream).
    fn record(&self, pod: &Pod, outcome: Outcome, seconds: f64) {
        let (ns, name) = (pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""));
        let (c, kind, uid) = (self.container.name.as_str(), self.probe_type_label(), self.uid.to_string());
        let result = match outcome {
            Outcome::Success | Outcome::Warning => "successful",
            Outcome::Failure => "failed",
            Outcome::Unknown => "unknown",
        };
        kubelet_metrics::prober::PROBE_TOTAL.inc(&[c, ns, name, &uid, kind, result]);
        if result != "failed" {
            kubelet_metrics::prober::PROBE_DURATION.observe(&[c, ns, name, kind], seconds);
        }
    }

    /// One check with upstream's events; None when the probe errored (its result is thrown away).
    async fn probe(&self, pod: &Pod, id: &str, pod_ip: &str) -> Option<ProbeResult> {
        let cref = container_reference(pod, &self.container.name);
        let kind = self.probe_type.as_str();
        let mut last_err = None;
        for _ in 0..MAX_PROBE_RETRIES {
            let started = tokio::time::Instant::now();
            match handlers::run_probe(&self.spec, self.shared.runtime.as_ref(), &self.container, id, pod_ip).await {
                Ok(out) => {
                    self.record(pod, out.outcome, started.elapsed().as_secs_f64());
                    let (result, event) = match out.outcome {
                        Outcome::Success => (ProbeResult::Success, None),
                        Outcome::Warning => (
                            ProbeResult::Success,
                            Some((reason::PROBE_WARNING, format!("{kind} probe warning: {}", out.output))),
                        ),
                        Outcome::Failure => (
                            ProbeResult::Failure,
                            Some((reason::UNHEALTHY, format!("{kind} probe failed: {}", out.output))),
                        ),
                        Outcome::Unknown => (ProbeResult::Failure, None),
                    };
                    if result == ProbeResult::Failure {
                        info!(probeType = kind, pod = %format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or("")), podUID = %self.uid, containerName = %self.container.name, output = %out.output, "probe failed");
                    }
                    if let Some((r, m)) = event {
                        self.shared.recorder.event(&cref, WARNING, r, m);
                    }
                    return Some(result);
                }
                Err(e) => last_err = Some(e),
            }
        }
        let e = last_err.expect("at least one try");
        self.shared.recorder.event(
            &cref,
            WARNING,
            reason::UNHEALTHY,
            format!("{kind} probe errored and resulted in unknown state: {e}"),
        );
        None
    }
}

//! "Why is my pod not running" (beyond upstream): for a pod on this node, the step it is blocked at, from what the
//! kubelet knows: the pod's status as the status manager computes it (admission refusals, container waiting
//! reasons and messages, the last termination) and the pod's recent events (failed mounts, sandbox and network
//! failures, failing probes with their output), so an operator does not assemble it from events, logs and crictl.
//!
//! Contract: [`EventLog`] keeps the last [`PER_POD`] events of each pod as [`LoggedRecorder`] passes them on to the
//! real recorder (bounded to [`MAX_PODS`] pods, the oldest dropped); [`explain`] is a pure function of a pod with its
//! status, its events and the time, called by the HTTP handler for each request.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ContainerStatus, ObjectReference, Pod};
use kubelet_types::Clock;
use kubelet_types::events::Recorder;
use serde::Serialize;

/// Events kept per pod.
pub const PER_POD: usize = 16;
/// Pods whose events are kept.
pub const MAX_PODS: usize = 2048;

/// One event of a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodEvent {
    pub at: SystemTime,
    pub kind: String,
    pub reason: String,
    pub message: String,
    /// `spec.containers{name}` and the like.
    pub field_path: String,
}

/// A pod's namespace and name.
type PodKey = (String, String);

/// The events by pod, and the pods in the order they were first seen (the oldest is forgotten first).
#[derive(Default)]
struct Logged {
    events: HashMap<PodKey, VecDeque<PodEvent>>,
    order: VecDeque<PodKey>,
}

/// The recent events of the pods, by namespace and name.
#[derive(Default)]
pub struct EventLog {
    pods: Mutex<Logged>,
}

impl EventLog {
    fn record(&self, object: &ObjectReference, e: PodEvent) {
        if object.kind.as_deref() != Some("Pod") {
            return;
        }
        let key = (object.namespace.clone().unwrap_or_default(), object.name.clone().unwrap_or_default());
        let mut g = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        let Logged { events: map, order } = &mut *g;
        if !map.contains_key(&key) {
            order.push_back(key.clone());
            if order.len() > MAX_PODS
                && let Some(old) = order.pop_front()
            {
                map.remove(&old);
            }
        }
        let list = map.entry(key).or_default();
        list.push_back(e);
        if list.len() > PER_POD {
            list.pop_front();
        }
    }

    /// The pod's recent events, oldest first.
    pub fn of(&self, namespace: &str, name: &str) -> Vec<PodEvent> {
        let g = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        g.events
            .get(&(namespace.to_string(), name.to_string()))
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A recorder that keeps each pod's recent events in an [`EventLog`], then passes the event on.
pub struct LoggedRecorder {
    pub inner: Arc<dyn Recorder>,
    pub log: Arc<EventLog>,
    pub clock: Arc<dyn Clock>,
}

impl Recorder for LoggedRecorder {
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
        let e = PodEvent {
            at: self.clock.now(),
            kind: kind.to_string(),
            reason: reason.to_string(),
            message: message.clone(),
            field_path: object.field_path.clone().unwrap_or_default(),
        };
        self.log.record(object, e);
        self.inner.event(object, kind, reason, message);
    }
}

/// Where a pod stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub phase: String,
    /// Whether something keeps it from running.
    pub blocked: bool,
    /// The step: `refused at admission`, `volume not mounted`, `image pull back-off`, `sandbox not created`,
    /// `container not created`, `crash loop back-off`, `readiness probe failing`, `container exited`, `starting`,
    /// `running`, `finished`.
    pub step: String,
    /// What exactly, in words.
    pub detail: String,
}

/// A Go duration (`10s`, `1m20s`, `5m0s`).
fn go_duration(s: &str) -> Option<Duration> {
    let (mut total, mut num) = (0f64, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += n * match c {
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
    }
    num.is_empty().then(|| Duration::from_secs_f64(total))
}

fn time_of(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    let secs = t.0.as_second();
    std::time::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64)
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The newest Warning event with one of `reasons`, for `container` when given.
fn newest<'a>(events: &'a [PodEvent], reasons: &[&str], container: Option<&str>) -> Option<&'a PodEvent> {
    events.iter().rev().find(|e| {
        e.kind == "Warning"
            && reasons.contains(&e.reason.as_str())
            && container.is_none_or(|c| e.field_path.ends_with(&format!("{{{c}}}")))
    })
}

fn container_step(c: &ContainerStatus, events: &[PodEvent], now: SystemTime) -> Option<(bool, String, String)> {
    let name = &c.name;
    let state = c.state.as_ref()?;
    if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        let message = w.message.clone().unwrap_or_default();
        let step = match reason.as_str() {
            "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" | "ImageInspectError" => {
                "image pull back-off"
            }
            "CrashLoopBackOff" => {
                let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                let mut detail = format!("container {name}");
                if let Some(t) = last {
                    detail.push_str(&format!(
                        " exited with code {}{}",
                        t.exit_code,
                        t.reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
                    ));
                    let backoff = message.strip_prefix("back-off ").and_then(|m| m.split_whitespace().next());
                    if let (Some(finished), Some(d)) = (t.finished_at.as_ref(), backoff.and_then(go_duration)) {
                        let next = time_of(finished) + d;
                        let wait = next.duration_since(now).unwrap_or_default().as_secs();
                        detail.push_str(&format!("; next try at {} (in {wait}s)", rfc3339(next)));
                    }
                }
                detail.push_str(&format!(" [{reason}: {message}]"));
                return Some((true, "crash loop back-off".into(), detail));
            }
            "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" | "PreStartHookError" => {
                "container not created"
            }
            "ContainerCreating" | "PodInitializing" => {
                if let Some(e) = newest(events, &["FailedMount", "FailedAttachVolume", "FailedMapVolume"], None) {
                    return Some((true, "volume not mounted".into(), format!("{}: {}", e.reason, e.message)));
                }
                if let Some(e) = newest(events, &["FailedCreatePodSandBox", "FailedPodSandBoxStatus"], None) {
                    return Some((true, "sandbox not created".into(), format!("{}: {}", e.reason, e.message)));
                }
                return Some((false, "starting".into(), format!("container {name}: {reason}")));
            }
            _ => "waiting",
        };
        return Some((true, step.into(), format!("container {name}: {reason}: {message}")));
    }
    if state.running.is_some() && !c.ready {
        if let Some(e) = newest(events, &["Unhealthy"], Some(name)) {
            return Some((true, "readiness probe failing".into(), format!("container {name}: {}", e.message)));
        }
        return Some((false, "starting".into(), format!("container {name} runs, not ready yet")));
    }
    if let Some(t) = &state.terminated
        && t.exit_code != 0
    {
        let reason = t.reason.clone().unwrap_or_default();
        return Some((
            true,
            "container exited".into(),
            format!("container {name} exited with code {} ({reason})", t.exit_code),
        ));
    }
    None
}

/// Where `pod` (with its status) stands, given its recent `events` and the time.
pub fn explain(pod: &Pod, events: &[PodEvent], now: SystemTime) -> Explanation {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
    let mut e = Explanation {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        phase: phase.clone(),
        blocked: false,
        step: String::new(),
        detail: String::new(),
    };
    let reason = status.reason.clone().unwrap_or_default();
    let message = status.message.clone().unwrap_or_default();
    if phase == "Failed" && status.container_statuses.as_ref().is_none_or(|c| c.is_empty()) {
        (e.blocked, e.step, e.detail) = (true, "refused at admission".into(), format!("{reason}: {message}"));
        return e;
    }
    if phase == "Succeeded" || phase == "Failed" {
        e.step = "finished".into();
        e.detail = [reason, message].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join(": ");
        e.blocked = phase == "Failed";
        return e;
    }
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for c in containers {
        if let Some((blocked, step, detail)) = container_step(c, events, now) {
            (e.blocked, e.step, e.detail) = (blocked, step, detail);
            if blocked || e.step == "starting" {
                return e;
            }
        }
    }
    if status.container_statuses.as_ref().is_none_or(|c| c.is_empty()) {
        if let Some(ev) = newest(events, &["FailedMount", "FailedAttachVolume"], None) {
            (e.blocked, e.step, e.detail) =
                (true, "volume not mounted".into(), format!("{}: {}", ev.reason, ev.message));
            return e;
        }
        (e.step, e.detail) = ("starting".into(), "not synced yet".into());
        return e;
    }
    (e.step, e.detail) = ("running".into(), "every container runs and is ready".into());
    e
}

#[cfg(test)]
mod tests;

//! Events to the apiserver (`client-go/tools/record`: the broadcaster's sink with its spam filter and
//! correlator). [`EventSink`] is the [`Recorder`] the components write to: it logs the event and hands it to the
//! [`EventWriter`] task through a bounded channel (a full channel drops the event, as upstream's broadcaster
//! does). The writer rate-limits with a token bucket (`eventRecordQPS`, `eventBurst`), aggregates repeats of the
//! same event (a PATCH of `count` and `lastTimestamp` instead of a new object) and retries nothing: events are
//! best effort. Ends when cancelled.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_apiclient::EventApi;
use kubelet_types::Clock;
use kubelet_types::clock::api_time;
use kubelet_types::events::{LogRecorder, Recorder};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// Events waiting to be written (upstream's broadcaster queue is 1000).
pub const EVENT_QUEUE: usize = 1000;

/// One event to write.
#[derive(Debug, Clone)]
pub struct EventMsg {
    object: ObjectReference,
    kind: String,
    reason: String,
    message: String,
}

/// The recorder handed to components.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<EventMsg>,
}

impl EventSink {
    /// A sink and the receiving end for the [`EventWriter`].
    pub fn new() -> (Self, mpsc::Receiver<EventMsg>) {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        (Self { tx }, rx)
    }
}

impl Recorder for EventSink {
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
        LogRecorder.event(object, kind, reason, message.clone());
        let _ =
            self.tx.try_send(EventMsg { object: object.clone(), kind: kind.into(), reason: reason.into(), message });
    }
}

/// What makes two events the same (object UID, field path, reason, message, type), for aggregation: a 64-bit hash
/// of those, so the aggregation cache costs about 100 bytes per event it remembers (up to 4096, as upstream's LRU)
/// instead of copies of every message.
type EventKey = u64;

fn event_key(m: &EventMsg) -> EventKey {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&m.object.uid, &m.object.field_path, &m.reason, &m.message, &m.kind).hash(&mut h);
    h.finish()
}

/// Writes events to the apiserver.
pub struct EventWriter {
    api: Arc<dyn EventApi>,
    rx: mpsc::Receiver<EventMsg>,
    node_name: String,
    clock: Arc<dyn Clock>,
    qps: f64,
    burst: f64,
    /// Aggregation of repeats: the event written for a key (`namespace/name`) and its count.
    seen: HashMap<EventKey, (Box<str>, i32)>,
}

impl EventWriter {
    /// A writer for `node_name` with `eventRecordQPS` (0: unlimited) and `eventBurst`.
    pub fn new(
        api: Arc<dyn EventApi>,
        rx: mpsc::Receiver<EventMsg>,
        node_name: String,
        clock: Arc<dyn Clock>,
        qps: i32,
        burst: i32,
    ) -> Self {
        Self { api, rx, node_name, clock, qps: f64::from(qps), burst: f64::from(burst.max(1)), seen: HashMap::new() }
    }

    async fn write(&mut self, m: EventMsg) {
        let now = self.clock.now();
        let ts = api_time(now);
        let key = event_key(&m);
        if let Some((written, count)) = self.seen.get_mut(&key) {
            *count += 1;
            let patch = serde_json::json!({ "count": *count, "lastTimestamp": ts });
            let (ns, name) = written.split_once('/').unwrap_or(("default", written));
            if let Err(e) = self.api.patch_event(ns, name, &patch).await {
                debug!(error = %e, "failed to update event");
            }
            return;
        }
        let ns = m.object.namespace.clone().unwrap_or_else(|| "default".into());
        let nanos = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let name = format!("{}.{:x}", m.object.name.clone().unwrap_or_default(), nanos);
        let event = Event {
            metadata: ObjectMeta { name: Some(name.clone()), namespace: Some(ns.clone()), ..Default::default() },
            involved_object: m.object,
            reason: Some(m.reason),
            message: Some(m.message),
            source: Some(EventSource { component: Some("kubelet".into()), host: Some(self.node_name.clone()) }),
            first_timestamp: Some(ts.clone()),
            last_timestamp: Some(ts),
            count: Some(1),
            type_: Some(m.kind),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node_name.clone()),
            ..Default::default()
        };
        match self.api.create_event(&event).await {
            Ok(()) => {
                if self.seen.len() > 4096 {
                    self.seen.clear();
                }
                self.seen.insert(key, (format!("{ns}/{name}").into_boxed_str(), 1));
            }
            Err(e) => debug!(error = %e, "failed to write event"),
        }
    }

    /// Writes until cancelled or every sink is gone.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tokens = self.burst;
        let mut last = Instant::now();
        loop {
            let m = tokio::select! {
                _ = cancel.cancelled() => return,
                m = self.rx.recv() => match m { Some(m) => m, None => return },
            };
            if self.qps > 0.0 {
                tokens = (tokens + last.elapsed().as_secs_f64() * self.qps).min(self.burst);
                last = Instant::now();
                if tokens < 1.0 {
                    tokio::time::sleep(Duration::from_secs_f64((1.0 - tokens) / self.qps)).await;
                    tokens = 1.0;
                    last = Instant::now();
                }
                tokens -= 1.0;
            }
            self.write(m).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_apiclient::fake::FakeApi;
    use kubelet_types::TestClock;

    #[tokio::test(start_paused = true)]
    async fn writes_and_aggregates_repeats() {
        let api = Arc::new(FakeApi::new());
        let (sink, rx) = EventSink::new();
        let cancel = CancellationToken::new();
        let w = EventWriter::new(api.clone(), rx, "n1".into(), Arc::new(TestClock::fixed()), 50, 100);
        let task = tokio::spawn(w.run(cancel.clone()));
        let obj = ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        sink.event(&obj, "Warning", "BackOff", "Back-off restarting failed container".into());
        sink.event(&obj, "Warning", "BackOff", "Back-off restarting failed container".into());
        sink.event(&obj, "Normal", "Started", "Started container app".into());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let evs = api.events();
        assert_eq!(evs.len(), 2, "a repeat is aggregated");
        let backoff = evs.iter().find(|e| e.reason.as_deref() == Some("BackOff")).unwrap();
        assert_eq!(backoff.count, Some(2));
        assert_eq!(backoff.source.as_ref().unwrap().component.as_deref(), Some("kubelet"));
        assert!(backoff.metadata.name.as_ref().unwrap().starts_with("web."));
        cancel.cancel();
        task.await.unwrap();
    }
}

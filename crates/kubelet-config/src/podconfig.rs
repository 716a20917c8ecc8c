//! The PodConfig merge (`pkg/kubelet/config/config.go`): turns the successive complete sets of each source into
//! upstream's operations — ADD for new pods, UPDATE for changed specs, DELETE for pods whose deletion timestamp
//! appeared, REMOVE for pods gone from their source, RECONCILE for status-only changes — and tracks which sources
//! have been seen at least once ([`SourcesReady`]), so the kubelet never removes running pods before every
//! source has spoken.
//!
//! Refused manifests ride on the sources' updates, each once, when it first appears; the merge records a Warning
//! `FailedValidation` event for each, about the pod when the refusal names one, else about the node. Upstream
//! records that event here for duplicate names (`filterInvalidPods`) and only logs manifests that fail decoding or
//! validation; the event for those is rkubelet's addition, so that a refused manifest is visible from the API.
//!
//! [`PodConfig::run`] is one task: it reads source sets until every sender is dropped or it is cancelled, and
//! writes [`PodUpdate`]s in upstream's order (REMOVE, ADD, UPDATE, DELETE, RECONCILE) to the sync loop.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_types::events::{Recorder, WARNING, reason};
use kubelet_types::labels as keys;
use kubelet_types::{Clock, Operation, Pod, PodSource, PodUid, PodUpdate};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::sources::{RefusedManifest, SourceUpdate};

/// Which sources have delivered their first set.
#[derive(Debug)]
pub struct SourcesReady {
    expected: BTreeSet<PodSource>,
    seen: Mutex<BTreeSet<PodSource>>,
    tx: watch::Sender<bool>,
}

impl SourcesReady {
    /// Readiness over the `expected` sources.
    pub fn new(expected: impl IntoIterator<Item = PodSource>) -> Arc<Self> {
        let expected: BTreeSet<PodSource> = expected.into_iter().collect();
        let (tx, _) = watch::channel(expected.is_empty());
        Arc::new(Self { expected, seen: Mutex::new(BTreeSet::new()), tx })
    }

    fn mark(&self, s: PodSource) {
        let mut seen = self.seen.lock().unwrap();
        seen.insert(s);
        let all = self.expected.iter().all(|e| seen.contains(e));
        self.tx.send_replace(all);
    }

    /// Whether every expected source has been seen.
    pub fn all_ready(&self) -> bool {
        *self.tx.borrow()
    }

    /// Waits until every source has been seen.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }
}

fn without_local_annotations(p: &Pod) -> BTreeMap<String, String> {
    let mut a = p.metadata.annotations.clone().unwrap_or_default();
    for k in [keys::CONFIG_SOURCE, keys::CONFIG_MIRROR, keys::CONFIG_SEEN] {
        a.remove(k);
    }
    a
}

fn differ_semantically(a: &Pod, b: &Pod) -> bool {
    a.spec != b.spec
        || a.metadata.labels != b.metadata.labels
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
        || a.metadata.deletion_grace_period_seconds != b.metadata.deletion_grace_period_seconds
        || without_local_annotations(a) != without_local_annotations(b)
}

/// Formats wall time as RFC 3339 with nanoseconds, as Go's `time.RFC3339Nano` in UTC.
pub fn rfc3339_nano(t: std::time::SystemTime) -> String {
    kubelet_types::clock::rfc3339_nano(t)
}

/// One pod of a source: as the source last sent it, and as merged (with the config annotations).
#[derive(Clone)]
struct Known {
    sent: Arc<Pod>,
    merged: Arc<Pod>,
}

/// The merge state.
pub struct PodConfig {
    pods: HashMap<PodSource, HashMap<PodUid, Known>>,
    ready: Arc<SourcesReady>,
    clock: Arc<dyn Clock>,
    /// Where refusals become events, and the node they are about when no pod is named.
    events: Option<(Arc<dyn Recorder>, ObjectReference)>,
}

impl std::fmt::Debug for PodConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodConfig").field("sources", &self.pods.len()).finish()
    }
}

impl PodConfig {
    /// A merge marking sources in `ready`.
    pub fn new(ready: Arc<SourcesReady>, clock: Arc<dyn Clock>) -> Self {
        Self { pods: HashMap::new(), ready, clock, events: None }
    }

    /// Records the sources' refusals with `recorder`; `node` is the involved object of those that name no pod.
    pub fn with_events(mut self, recorder: Arc<dyn Recorder>, node: ObjectReference) -> Self {
        self.events = Some((recorder, node));
        self
    }

    fn record_refusal(&self, r: &RefusedManifest) {
        if let Some((recorder, node)) = &self.events {
            let object = r.pod.as_ref().unwrap_or(node);
            recorder.event(object, WARNING, reason::FAILED_VALIDATION, r.message().to_string());
        }
    }

    /// Compares one pod the source sent with what the merge has of it: the merged pod to keep, and the operation
    /// it calls for, if any.
    fn merge_one(&self, source: PodSource, sent: &Arc<Pod>, existing: Option<&Known>) -> (Arc<Pod>, Option<Operation>) {
        let mut pod = Pod::clone(sent);
        let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        ann.insert(keys::CONFIG_SOURCE.into(), source.as_str().into());
        let Some(Known { merged: existing, .. }) = existing else {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(keys::CONFIG_SEEN.into(), rfc3339_nano(self.clock.now()));
            return (Arc::new(pod), Some(Operation::Add));
        };
        let seen = existing.metadata.annotations.as_ref().and_then(|a| a.get(keys::CONFIG_SEEN)).cloned();
        if let Some(seen) = seen {
            pod.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(keys::CONFIG_SEEN.into(), seen);
        }
        if !differ_semantically(existing, &pod) {
            if existing.status != pod.status {
                return (Arc::new(pod), Some(Operation::Reconcile));
            }
            return (existing.clone(), None);
        }
        let op = if pod.metadata.deletion_timestamp.is_some() { Operation::Delete } else { Operation::Update };
        (Arc::new(pod), Some(op))
    }

    /// Merges one update of a source — a complete set, or a delta of changed and removed pods — and returns the
    /// updates to emit, in upstream's order. A delta costs what it changes, not the size of the source.
    pub fn merge(&mut self, update: SourceUpdate) -> Vec<PodUpdate> {
        for r in &update.refused {
            self.record_refusal(r);
        }
        if update.refusals_only {
            return vec![];
        }
        let source = update.source;
        let first = !self.pods.contains_key(&source);
        let mut map = self.pods.remove(&source).unwrap_or_default();
        let (mut removes, mut adds, mut updates, mut deletes, mut reconciles) =
            (vec![], vec![], vec![], vec![], vec![]);
        let mut record = |op: Option<Operation>, p: &Arc<Pod>| match op {
            Some(Operation::Add) => adds.push(p.clone()),
            Some(Operation::Update) => updates.push(p.clone()),
            Some(Operation::Delete) => deletes.push(p.clone()),
            Some(Operation::Reconcile) => reconciles.push(p.clone()),
            _ => {}
        };
        match update.removed {
            // A delta: only the pods sent changed, and the removed ones are gone.
            Some(removed) => {
                for sent in update.pods {
                    let uid = PodUid(sent.metadata.uid.clone().unwrap_or_default());
                    let (merged, op) = self.merge_one(source, &sent, map.get(&uid));
                    record(op, &merged);
                    map.insert(uid, Known { sent, merged });
                }
                for uid in removed {
                    if let Some(k) = map.remove(&uid) {
                        removes.push(k.merged);
                    }
                }
            }
            // A complete set: every pod not in it is gone.
            None => {
                let old = std::mem::take(&mut map);
                map.reserve(update.pods.len());
                for sent in update.pods {
                    let uid = PodUid(sent.metadata.uid.clone().unwrap_or_default());
                    if map.contains_key(&uid) {
                        continue;
                    }
                    let existing = old.get(&uid);
                    // The source sent the very pod it sent last time: nothing to compare.
                    if let Some(k) = existing.filter(|k| Arc::ptr_eq(&k.sent, &sent)) {
                        map.insert(uid, k.clone());
                        continue;
                    }
                    let (merged, op) = self.merge_one(source, &sent, existing);
                    record(op, &merged);
                    map.insert(uid, Known { sent, merged });
                }
                removes = old.into_iter().filter(|(u, _)| !map.contains_key(u)).map(|(_, k)| k.merged).collect();
            }
        }
        self.pods.insert(source, map);
        self.ready.mark(source);

        let no_changes = adds.is_empty() && updates.is_empty() && deletes.is_empty();
        let mut out: Vec<PodUpdate> = [
            (Operation::Remove, removes),
            (Operation::Add, adds),
            (Operation::Update, updates),
            (Operation::Delete, deletes),
        ]
        .into_iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(op, pods)| PodUpdate { op, source, pods })
        .collect();
        if first && no_changes {
            // An empty ADD tells the sync loop the source was seen, as upstream.
            out.push(PodUpdate { op: Operation::Add, source, pods: vec![] });
        }
        if !reconciles.is_empty() {
            out.push(PodUpdate { op: Operation::Reconcile, source, pods: reconciles });
        }
        out
    }

    /// Merges source sets until cancelled or every source is gone.
    pub async fn run(
        mut self,
        mut input: mpsc::Receiver<SourceUpdate>,
        out: mpsc::Sender<PodUpdate>,
        cancel: CancellationToken,
    ) {
        loop {
            let update = tokio::select! {
                _ = cancel.cancelled() => return,
                u = input.recv() => match u { Some(u) => u, None => return },
            };
            for u in self.merge(update) {
                debug!(op = %u.op, source = %u.source, pods = u.pods.len(), "pod config update");
                if out.send(u).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kubelet_types::TestClock;

    fn pod(uid: &str, image: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("p-{uid}")),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container { name: "c".into(), image: Some(image.into()), ..Default::default() }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ops(v: &[PodUpdate]) -> Vec<(Operation, Vec<String>)> {
        v.iter().map(|u| (u.op, u.pods.iter().map(|p| p.metadata.uid.clone().unwrap()).collect())).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn merge_emits_upstream_operations() {
        let ready = SourcesReady::new([PodSource::File, PodSource::Http]);
        let mut pc = PodConfig::new(ready.clone(), Arc::new(TestClock::fixed()));
        let set = |pods: Vec<Pod>| SourceUpdate::set(PodSource::File, pods.into_iter().map(Arc::new).collect());

        let out = pc.merge(set(vec![pod("a", "i1"), pod("b", "i1")]));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].op, Operation::Add);
        let seen = out[0].pods[0].metadata.annotations.as_ref().unwrap()[keys::CONFIG_SEEN].clone();
        assert_eq!(seen, "2026-01-01T00:00:00Z");
        assert_eq!(out[0].pods[0].metadata.annotations.as_ref().unwrap()[keys::CONFIG_SOURCE], "file");
        assert!(!ready.all_ready());

        // Same set again: nothing.
        assert!(pc.merge(set(vec![pod("a", "i1"), pod("b", "i1")])).is_empty());

        // b changes spec, a disappears, c appears.
        let out = pc.merge(set(vec![pod("b", "i2"), pod("c", "i1")]));
        assert_eq!(
            ops(&out),
            vec![
                (Operation::Remove, vec!["a".into()]),
                (Operation::Add, vec!["c".into()]),
                (Operation::Update, vec!["b".into()])
            ]
        );
        // The first-seen time survives the update.
        assert_eq!(out[2].pods[0].metadata.annotations.as_ref().unwrap()[keys::CONFIG_SEEN], seen);

        // Status-only change: RECONCILE; deletion timestamp: DELETE.
        let mut c2 = pod("c", "i1");
        c2.status = Some(Default::default());
        c2.status.as_mut().unwrap().phase = Some("Running".into());
        let mut b3 = pod("b", "i2");
        b3.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let out = pc.merge(set(vec![b3, c2]));
        assert_eq!(ops(&out), vec![(Operation::Delete, vec!["b".into()]), (Operation::Reconcile, vec!["c".into()])]);

        // An empty first set of the other source still says it was seen.
        let out = pc.merge(SourceUpdate::set(PodSource::Http, vec![]));
        assert_eq!(ops(&out), vec![(Operation::Add, vec![])]);
        assert!(ready.all_ready());
    }

    #[derive(Default)]
    struct Events(Mutex<Vec<(ObjectReference, String, String, String)>>);

    impl Recorder for Events {
        fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
            self.0.lock().unwrap().push((object.clone(), kind.into(), reason.into(), message));
        }
    }

    fn node() -> ObjectReference {
        ObjectReference {
            kind: Some("Node".into()),
            name: Some("n1".into()),
            uid: Some("n1".into()),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_one_warning_event_and_the_other_pods_are_merged() {
        let events = Arc::new(Events::default());
        let ready = SourcesReady::new([PodSource::File, PodSource::Http]);
        let mut pc = PodConfig::new(ready.clone(), Arc::new(TestClock::fixed())).with_events(events.clone(), node());
        let dir = tempfile::tempdir().unwrap();
        let good =
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  containers:\n  - name: c\n    image: i\n";
        std::fs::write(dir.path().join("a.yaml"), good.replace("NAME", "a")).unwrap();
        std::fs::write(
            dir.path().join("b.yaml"),
            good.replace("NAME", "b") + "    resources:\n      limits:\n        memory: lots\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("c.yaml"), "kind: Pod\nspec: [").unwrap();
        std::fs::write(dir.path().join("d.yaml"), good.replace("NAME", "a")).unwrap();
        let (tx, _rx) = mpsc::channel(1);
        let src = crate::sources::file::FileSource::new(
            dir.path().into(),
            "n1".into(),
            std::time::Duration::from_secs(20),
            tx,
        );
        let mut last = vec![];
        for read in 0..3 {
            // Every read of the folder refuses the same manifests; each becomes an event once.
            let (pods, new) = src.read_and_log(&mut last);
            let out = pc
                .merge(SourceUpdate::set(PodSource::File, pods.into_iter().map(Arc::new).collect()).with_refused(new));
            if read == 0 {
                let ops: Vec<_> = out.iter().map(|u| (u.op, u.pods.len())).collect();
                assert_eq!(ops, [(Operation::Add, 1)], "the good pod is merged");
            } else {
                assert!(out.is_empty(), "nothing changed: {out:?}");
            }
        }
        let ev = events.0.lock().unwrap().clone();
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert!(ev.iter().all(|(_, kind, reason, _)| kind == "Warning" && reason == "FailedValidation"));
        // b: about the pod, naming the file and the field.
        assert_eq!(ev[0].0.name.as_deref(), Some("b-n1"));
        assert!(ev[0].3.contains("b.yaml: invalid pod: [spec.containers[0].resources.limits[memory]"), "{}", ev[0].3);
        // c: does not decode, about the node.
        assert_eq!(ev[1].0.kind.as_deref(), Some("Node"));
        assert!(ev[1].3.contains("c.yaml"));
        // d: upstream's duplicate-name event, about the pod.
        let uid = ev[2].0.uid.clone().unwrap();
        assert_eq!(
            ev[2].3,
            format!("Error validating pod a-n1_default({uid}) from file due to duplicate pod name \"a-n1\", ignoring")
        );
        // The valid pod was merged.
        assert_eq!(pc.pods[&PodSource::File].len(), 1);

        // A refusal alone changes no pod and does not mark the source as seen.
        let r = RefusedManifest::new("http://x".into(), "http://x: invalid manifest".into(), None);
        assert!(pc.merge(SourceUpdate::refusals(PodSource::Http, vec![r])).is_empty());
        assert_eq!(events.0.lock().unwrap().len(), 4);
        assert!(!ready.all_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_sent_again_unchanged_is_skipped_and_deltas_change_only_what_they_name() {
        let mut pc = PodConfig::new(SourcesReady::new([PodSource::Api]), Arc::new(TestClock::fixed()));
        let (a, b) = (Arc::new(pod("a", "i1")), Arc::new(pod("b", "i1")));
        let set = |pods: &[&Arc<Pod>]| SourceUpdate::set(PodSource::Api, pods.iter().map(|p| Arc::clone(p)).collect());
        assert_eq!(ops(&pc.merge(set(&[&a, &b]))), vec![(Operation::Add, vec!["a".into(), "b".into()])]);
        // A set where the untouched pods are the same `Arc`s: only the changed one is compared.
        let mut a2 = pod("a", "i1");
        a2.status = Some(k8s_openapi::api::core::v1::PodStatus { phase: Some("Running".into()), ..Default::default() });
        let a2 = Arc::new(a2);
        assert_eq!(ops(&pc.merge(set(&[&a2, &b]))), vec![(Operation::Reconcile, vec!["a".into()])]);
        assert!(pc.merge(set(&[&a2, &b])).is_empty());
        // Deltas: a changed pod, a new one, a removed one; the others stay.
        let b2 = Arc::new(pod("b", "i2"));
        let out = pc.merge(SourceUpdate::delta(PodSource::Api, vec![b2.clone()], vec![]));
        assert_eq!(ops(&out), vec![(Operation::Update, vec!["b".into()])]);
        assert_eq!(out[0].pods[0].metadata.annotations.as_ref().unwrap()[keys::CONFIG_SOURCE], "api");
        let c = Arc::new(pod("c", "i1"));
        let out = pc.merge(SourceUpdate::delta(PodSource::Api, vec![c.clone()], vec![PodUid("a".into())]));
        assert_eq!(ops(&out), vec![(Operation::Remove, vec!["a".into()]), (Operation::Add, vec!["c".into()])]);
        // A set after deltas (a relist) compares against what the deltas left: b and c unchanged, nothing to do.
        assert!(pc.merge(set(&[&b2, &c])).is_empty());
        assert_eq!(ops(&pc.merge(set(&[&c]))), vec![(Operation::Remove, vec!["b".into()])]);
    }
}

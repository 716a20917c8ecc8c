//! Pod sources (`pkg/kubelet/config`): the static pod folder ([`file`]), the static pod URL ([`http`]), and the
//! decoding they share ([`manifest`]), and the apiserver ([`apiserver`]). Each source sends [`SourceUpdate`]s — its
//! whole current set, or what changed — to the [`crate::podconfig::PodConfig`] merge, which turns them into
//! ADD/UPDATE/REMOVE/... updates.

pub mod apiserver;
pub mod file;
pub mod http;
pub mod manifest;
pub mod references;

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_types::{Pod, PodSource, PodUid};

/// What one source says: its complete set of pods as of now (upstream's SET), or what changed since its last
/// update (upstream's ADD/UPDATE/REMOVE of `kubetypes.PodUpdate`, which config.go's merge also accepts).
#[derive(Debug, Clone)]
pub struct SourceUpdate {
    /// The source.
    pub source: PodSource,
    /// A set: every pod of the source, normalised. A pod the source did not change since its last set is the same
    /// `Arc` (the merge then skips it without comparing). A delta: the pods added or changed.
    pub pods: Vec<Arc<Pod>>,
    /// `None` for a set; for a delta, the UIDs of the pods removed.
    pub removed: Option<Vec<PodUid>>,
    /// Manifests the source refused that it had not refused before: each refusal travels once, when it first
    /// appears, and the merge records an event for it.
    pub refused: Vec<RefusedManifest>,
    /// Only news of refusals ([`SourceUpdate::refusals`]): the merge records them and leaves the source alone.
    pub refusals_only: bool,
}

impl SourceUpdate {
    /// The complete set of `source`.
    pub fn set(source: PodSource, pods: Vec<Arc<Pod>>) -> Self {
        Self { source, pods, removed: None, refused: vec![], refusals_only: false }
    }

    /// A change of `source`: `changed` pods added or updated, `removed` gone.
    pub fn delta(source: PodSource, changed: Vec<Arc<Pod>>, removed: Vec<PodUid>) -> Self {
        Self { source, pods: changed, removed: Some(removed), refused: vec![], refusals_only: false }
    }

    /// Only news of refused manifests: the source's pods stay as they are, and the source is not marked as seen
    /// (a URL whose content is refused keeps its previous pods and sends no set, as upstream).
    pub fn refusals(source: PodSource, refused: Vec<RefusedManifest>) -> Self {
        Self { source, pods: vec![], removed: Some(vec![]), refused, refusals_only: true }
    }

    /// The same update, carrying these new refusals too.
    pub fn with_refused(mut self, refused: Vec<RefusedManifest>) -> Self {
        self.refused = refused;
        self
    }
}

/// A manifest the source refused, for its log line and its `FailedValidation` event.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedManifest {
    /// File path or URL.
    pub origin: String,
    /// Why, naming the file or URL and every field.
    pub reason: String,
    /// The pod it is about, when it decoded far enough to have a name and namespace; else the event is about the
    /// node.
    pub pod: Option<ObjectReference>,
    /// Upstream's event text where it has one (a duplicate name); the event says the reason otherwise.
    event_message: Option<String>,
}

impl RefusedManifest {
    /// A manifest refused for `reason`, about `pod` when known.
    pub fn new(origin: String, reason: String, pod: Option<ObjectReference>) -> Self {
        Self { origin, reason, pod, event_message: None }
    }

    /// The message of its `FailedValidation` event.
    pub fn message(&self) -> &str {
        self.event_message.as_deref().unwrap_or(&self.reason)
    }

    /// A pod dropped because another pod of the source has its name (`filterInvalidPods` in
    /// `pkg/kubelet/config/config.go`), with upstream's event message.
    pub fn duplicate(origin: String, source: PodSource, pod: &Pod) -> Self {
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        Self {
            reason: format!(
                "{origin}: duplicate pod \"{ns}/{name}\": another manifest of this source already defines it"
            ),
            event_message: Some(format!(
                "Error validating pod {name}_{ns}({uid}) from {} due to duplicate pod name {name:?}, ignoring",
                source.as_str()
            )),
            pod: Some(kubelet_types::events::pod_reference(pod)),
            origin,
        }
    }
}

/// Keeps the first pod of each namespace and name and refuses the others (`filterInvalidPods`); `origin` is the
/// file or URL each pod came from.
pub(crate) fn drop_duplicates(pods: Vec<(String, Pod)>, source: PodSource) -> (Vec<Pod>, Vec<RefusedManifest>) {
    let mut names = std::collections::HashSet::new();
    let (mut kept, mut refused) = (vec![], vec![]);
    for (origin, p) in pods {
        if names.insert((p.metadata.namespace.clone(), p.metadata.name.clone())) {
            kept.push(p);
        } else {
            refused.push(RefusedManifest::duplicate(origin, source, &p));
        }
    }
    (kept, refused)
}

/// The refusals of `now` that `last` did not have (each is logged and becomes an event once, when it first
/// appears); `last` becomes `now`.
pub(crate) fn fresh_refusals(last: &mut Vec<RefusedManifest>, now: Vec<RefusedManifest>) -> Vec<RefusedManifest> {
    let new = now.iter().filter(|m| !last.contains(m)).cloned().collect();
    *last = now;
    new
}

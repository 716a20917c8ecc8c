//! Pod sources (`pkg/kubelet/config`): the static pod folder ([`file`]), the static pod URL ([`http`]), and the
//! decoding they share ([`manifest`]), and the apiserver ([`apiserver`]). Each source sends [`SourceUpdate`]s — its
//! whole current set, or what changed — to the [`crate::podconfig::PodConfig`] merge, which turns them into
//! ADD/UPDATE/REMOVE/... updates.

pub mod apiserver;
pub mod file;
pub mod http;
pub mod manifest;

use std::sync::Arc;

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
}

impl SourceUpdate {
    /// The complete set of `source`.
    pub fn set(source: PodSource, pods: Vec<Arc<Pod>>) -> Self {
        Self { source, pods, removed: None }
    }

    /// A change of `source`: `changed` pods added or updated, `removed` gone.
    pub fn delta(source: PodSource, changed: Vec<Arc<Pod>>, removed: Vec<PodUid>) -> Self {
        Self { source, pods: changed, removed: Some(removed) }
    }
}

/// A manifest the source refused, for logs and (later) events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedManifest {
    /// File path or URL.
    pub origin: String,
    /// Why.
    pub reason: String,
}

//! Pod sources (`pkg/kubelet/config`): the static pod folder ([`file`]), the static pod URL ([`http`]), and the
//! decoding they share ([`manifest`]). Each source sends its whole current set of pods as a [`SourceUpdate`]
//! to the [`crate::podconfig::PodConfig`] merge, which turns successive sets into ADD/UPDATE/REMOVE/... updates.

pub mod apiserver;
pub mod file;
pub mod http;
pub mod manifest;

use kubelet_types::{Pod, PodSource};

/// The complete set of pods of one source, as of now.
#[derive(Debug, Clone)]
pub struct SourceUpdate {
    /// The source.
    pub source: PodSource,
    /// Every pod of the source, normalised. A pod the source did not change since its last set is the same `Arc`
    /// (the merge then skips it without comparing), so a set of N pods costs N pointer copies, not N deep copies.
    pub pods: Vec<std::sync::Arc<Pod>>,
}

/// A manifest the source refused, for logs and (later) events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedManifest {
    /// File path or URL.
    pub origin: String,
    /// Why.
    pub reason: String,
}

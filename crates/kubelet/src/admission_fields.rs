//! The admit handler refusing pods that set a field rkubelet does not apply (`UnsupportedPodField`); the table of
//! such fields and how each is found are in [`kubelet_types::pod_fields`], re-exported here.
//!
//! Contract: called by the sync loop for each pod it admits; a pure check.

use kubelet_types::Pod;
pub use kubelet_types::pod_fields::*;

use crate::admission::{AdmitResult, PodAdmitHandler};

/// Refuses pods that set a field of [`UNSUPPORTED_FIELDS`].
#[derive(Debug, Default, Clone, Copy)]
pub struct UnsupportedPodFields;

impl PodAdmitHandler for UnsupportedPodFields {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        let found = unsupported_fields(pod);
        if found.is_empty() {
            return None;
        }
        Some(AdmitResult { reason: REASON.into(), message: refusal(&found) })
    }
}

#[cfg(test)]
#[path = "admission_fields_tests.rs"]
mod tests;

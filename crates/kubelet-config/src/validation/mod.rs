//! Validation of static pods as the apiserver validates pod creation.
//!
//! Upstream's kubelet decodes a static pod manifest, applies the API defaults and its static-pod defaults
//! (`pkg/kubelet/config/common.go`: tryDecodeSinglePod, tryDecodePodList, applyDefaults), then refuses the pod
//! when `validation.ValidatePodCreate(pod, PodValidationOptions{})` (`pkg/apis/core/validation/validation.go`)
//! finds any error, with `invalid pod: <errors>`. This module mirrors that function for what a manifest can
//! contain: [`validate_static_pod`] returns every error, in upstream's order, each naming its field as upstream
//! prints it ([`field`]).
//!
//! Contract: the pod given has rkubelet's decoding defaults and static-pod normalisation
//! (`sources::manifest`); the remaining API defaults that validation depends on ([`defaults`]) are applied to a
//! copy. Map entries (labels, resources) are checked in key order, where upstream's order is Go's random map
//! order. Parts of `ValidatePodCreate` left out: affinity, topology spread constraints, Windows host-process and
//! GMSA options, ephemeral container details (they are refused at creation anyway), the details of network and
//! cloud volume sources (they are only counted), cluster trust bundle and pod certificate projections (counted),
//! pod-level resources (feature gate off), the match of seccomp and AppArmor annotations with fields.
//!
//! Split by responsibility: [`field`] (errors and their text), [`names`] (name and value syntax, labels,
//! annotations), [`resources`] (quantities and resource requirements), [`container`] (container lists, ports,
//! environment, mounts, security context), [`probe`] (probes and lifecycle hooks), [`volumes`], [`pod`] (metadata
//! and pod-level fields).

pub mod container;
pub mod defaults;
pub mod field;
pub mod names;
pub mod pod;
pub mod probe;
pub mod resources;
pub mod volumes;

use k8s_openapi::api::core::v1::Pod;

pub use field::{ErrorList, FieldError};

/// Every reason upstream's apiserver would refuse to create `pod`; empty when it is valid.
pub fn validate_static_pod(pod: &Pod) -> ErrorList {
    let mut defaulted = pod.clone();
    defaults::apply_validation_defaults(&mut defaulted);
    pod::validate_pod_create(&defaulted)
}

#[cfg(test)]
mod tests;

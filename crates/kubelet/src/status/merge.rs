//! The status the kubelet writes, merged with what the apiserver has (`pkg/kubelet/status/status_manager.go`
//! mergePodStatus, `pkg/kubelet/types/pod_status.go` PodConditionsByKubelet).
//!
//! Called by the apiserver sync for every status it is about to patch: conditions that the kubelet does not own
//! (readiness gates set by controllers, `DisruptionTarget` set by others, anything a client added) are taken from
//! the apiserver's copy and kept in their place, the kubelet's own conditions from the new status; the
//! `resourceClaimStatuses` and `extendedResourceClaimStatus` belong to the scheduler and DRA drivers and are kept
//! as the apiserver has them. Pure.

use k8s_openapi::api::core::v1::PodStatus;

/// The pod conditions the kubelet owns (`PodConditionsByKubelet`, with `PodReadyToStartContainers`, whose feature
/// gate is on by default).
pub const KUBELET_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodResizeInProgress",
    "PodResizePending",
    "PodReadyToStartContainers",
];

/// Whether the kubelet owns a pod condition type.
pub fn owned_by_kubelet(kind: &str) -> bool {
    KUBELET_CONDITIONS.contains(&kind)
}

/// The status to send: `new` with the conditions others own taken from `old` (first, in their order), then the
/// kubelet's own conditions of `new`, and `old`'s resource claim statuses.
pub fn merge_pod_status(old: &PodStatus, new: &PodStatus) -> PodStatus {
    let mut merged = new.clone();
    let others = old.conditions.iter().flatten().filter(|c| !owned_by_kubelet(&c.type_)).cloned();
    let own = new.conditions.iter().flatten().filter(|c| owned_by_kubelet(&c.type_)).cloned();
    let mut conditions: Vec<_> = others.chain(own).collect();
    // `DisruptionTarget` is shared with the kubelet (`PodConditionSharedByKubelet`): the kubelet's replaces the
    // apiserver's once the pod is terminal (an eviction), and is sent only then.
    let terminal = matches!(new.phase.as_deref(), Some("Failed" | "Succeeded"));
    if terminal && let Some(c) = new.conditions.iter().flatten().find(|c| c.type_ == "DisruptionTarget") {
        match conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = c.clone(),
            None => conditions.push(c.clone()),
        }
    }
    merged.conditions = (!conditions.is_empty() || new.conditions.is_some()).then_some(conditions);
    merged.resource_claim_statuses = old.resource_claim_statuses.clone();
    merged.extended_resource_claim_status = old.extended_resource_claim_status.clone();
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;

    fn cond(kind: &str, status: &str) -> PodCondition {
        PodCondition { type_: kind.into(), status: status.into(), ..Default::default() }
    }

    fn types(s: &PodStatus) -> Vec<(String, String)> {
        s.conditions.iter().flatten().map(|c| (c.type_.clone(), c.status.clone())).collect()
    }

    #[test]
    fn conditions_of_others_are_kept_and_the_kubelets_own_replaced() {
        let old = PodStatus {
            conditions: Some(vec![
                cond("Ready", "False"),
                cond("k8s.io/gate", "True"),
                cond("PodScheduled", "True"),
                cond("DisruptionTarget", "True"),
            ]),
            ..Default::default()
        };
        let new = PodStatus {
            conditions: Some(vec![
                cond("PodReadyToStartContainers", "True"),
                cond("Initialized", "True"),
                cond("Ready", "True"),
                cond("ContainersReady", "True"),
                cond("PodScheduled", "True"),
            ]),
            ..Default::default()
        };
        let m = merge_pod_status(&old, &new);
        let want = [
            ("k8s.io/gate", "True"),
            ("DisruptionTarget", "True"),
            ("PodReadyToStartContainers", "True"),
            ("Initialized", "True"),
            ("Ready", "True"),
            ("ContainersReady", "True"),
            ("PodScheduled", "True"),
        ];
        assert_eq!(types(&m), want.map(|(a, b)| (a.to_string(), b.to_string())));
        // A condition of another owner in the new status (from the pod as the kubelet last saw it) does not win
        // over the apiserver's current one.
        let new2 = PodStatus { conditions: Some(vec![cond("k8s.io/gate", "False")]), ..Default::default() };
        assert_eq!(types(&merge_pod_status(&old, &new2))[0], ("k8s.io/gate".to_string(), "True".to_string()));
    }

    #[test]
    fn resource_claim_statuses_are_not_the_kubelets() {
        use k8s_openapi::api::core::v1::PodResourceClaimStatus;
        let claims = vec![PodResourceClaimStatus { name: "gpu".into(), resource_claim_name: Some("c".into()) }];
        let old = PodStatus { resource_claim_statuses: Some(claims.clone()), ..Default::default() };
        let m = merge_pod_status(&old, &PodStatus::default());
        assert_eq!(m.resource_claim_statuses, Some(claims));
        assert_eq!(m.conditions, None);
    }
}

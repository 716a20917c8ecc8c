//! Taints and tolerations (`k8s.io/api/core/v1` Toleration.ToleratesTaint,
//! `component-helpers/scheduling/corev1` TolerationsTolerateTaint), shared by eviction and admission.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `t` tolerates `taint` (`ToleratesTaint`): the effect matches (an empty one matches every effect), the
/// key matches (an empty key with `Exists` matches every key), and with `Equal` (the default) the values match.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint` (`TolerationsTolerateTaint`).
pub fn tolerations_tolerate(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    fn tol(key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_as_upstream() {
        let mp = taint("node.kubernetes.io/memory-pressure", None, "NoSchedule");
        assert!(tolerates(&tol(Some("node.kubernetes.io/memory-pressure"), Some("Exists"), None, None), &mp));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &mp), "empty key with Exists tolerates all");
        assert!(!tolerates(&tol(Some("node.kubernetes.io/disk-pressure"), Some("Exists"), None, None), &mp));
        assert!(!tolerates(&tol(Some("node.kubernetes.io/memory-pressure"), None, None, Some("NoExecute")), &mp));
        let dedicated = taint("dedicated", Some("gpu"), "NoExecute");
        assert!(tolerates(&tol(Some("dedicated"), Some("Equal"), Some("gpu"), Some("NoExecute")), &dedicated));
        assert!(!tolerates(&tol(Some("dedicated"), None, Some("cpu"), None), &dedicated));
        assert!(tolerations_tolerate(
            &[tol(Some("x"), None, None, None), tol(Some("dedicated"), None, Some("gpu"), None)],
            &dedicated
        ));
    }
}

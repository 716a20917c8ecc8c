//! A pod's ResourceClaims as the kubelet finds them (`k8s.io/dynamic-resource-allocation/resourceclaim`): which
//! claim a pod's `spec.resourceClaims` entry names, whether a generated claim belongs to the pod, and whether the
//! claim is reserved for it. Pure functions of the objects, with upstream's error texts.

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::ResourceClaim;

/// The claim a pod's entry names (`resourceclaim.Name`): `Ok(None)` when the pod needs none (its generated claim
/// was not needed), and whether the claim must be checked to be the pod's own (a claim made from a template).
pub fn claim_name(pod: &Pod, entry: &PodResourceClaim) -> Result<(Option<String>, bool), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if let Some(n) = &entry.resource_claim_name {
        return Ok((Some(n.clone()), false));
    }
    if entry.resource_claim_template_name.is_some() {
        let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
        return match statuses.into_iter().flatten().find(|s| s.name == entry.name) {
            Some(s) => Ok((s.resource_claim_name.clone(), true)),
            None => Err(format!("pod \"{ns}/{name}\": ResourceClaim not created yet")),
        };
    }
    Err(format!("pod \"{ns}/{name}\", spec.resourceClaim {:?}: none of the supported fields are set", entry.name))
}

/// The names of the claims a pod uses, in the order of its spec (entries whose claim was not needed left out).
pub fn claim_names(pod: &Pod) -> Result<Vec<String>, String> {
    let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    let mut out = vec![];
    for e in entries.into_iter().flatten() {
        if let (Some(n), _) = claim_name(pod, e)? {
            out.push(n);
        }
    }
    Ok(out)
}

/// Whether a claim made from a template is the pod's (`IsForPod`): same namespace and the pod its controller.
pub fn is_for_pod(pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    let (pns, pname) = (pod.metadata.namespace.as_deref().unwrap_or_default(), pod.metadata.name.as_deref());
    let cns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let owned = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == pod.metadata.uid.as_deref());
    if cns != pns || !owned {
        return Err(format!(
            "ResourceClaim {cns}/{} was not created for pod {pns}/{} (pod is not owner)",
            claim.metadata.name.as_deref().unwrap_or_default(),
            pname.unwrap_or_default()
        ));
    }
    Ok(())
}

/// Whether the claim is reserved for the pod (`IsReservedForPod`).
pub fn is_reserved_for_pod(pod: &Pod, claim: &ResourceClaim) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref());
    reserved.into_iter().flatten().any(|r| r.uid == uid)
}

/// The drivers of an allocated claim (`newClaimInfoFromClaim`), or upstream's "not allocated".
pub fn allocated_drivers(claim: &ResourceClaim) -> Result<Vec<String>, String> {
    let alloc = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).ok_or("not allocated")?;
    let mut drivers: Vec<String> =
        alloc.devices.iter().flat_map(|d| d.results.iter().flatten()).map(|r| r.driver.clone()).collect();
    drivers.sort();
    drivers.dedup();
    Ok(drivers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn claim(v: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn entries_name_their_claims_as_upstream() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [], "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "t"},
                {"name": "c", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "web-b-x"}, {"name": "c"}]}
        }));
        let entries = p.spec.as_ref().unwrap().resource_claims.clone().unwrap();
        assert_eq!(claim_name(&p, &entries[0]), Ok((Some("shared".into()), false)));
        assert_eq!(claim_name(&p, &entries[1]), Ok((Some("web-b-x".into()), true)));
        assert_eq!(claim_name(&p, &entries[2]), Ok((None, true)), "a generated claim that was not needed");
        assert_eq!(claim_names(&p).unwrap(), vec!["shared", "web-b-x"]);
        let mut early = p.clone();
        early.status = None;
        assert_eq!(claim_names(&early).unwrap_err(), "pod \"ns/web\": ResourceClaim not created yet");
        let bad = PodResourceClaim { name: "d".into(), ..Default::default() };
        assert_eq!(
            claim_name(&p, &bad).unwrap_err(),
            "pod \"ns/web\", spec.resourceClaim \"d\": none of the supported fields are set"
        );
    }

    #[test]
    fn ownership_reservation_and_allocation_are_read_from_the_claim() {
        let p = pod(json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}}));
        let mut c = claim(json!({
            "metadata": {"name": "web-b-x", "namespace": "ns",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1", "controller": true}]},
            "spec": {},
            "status": {"reservedFor": [{"resource": "pods", "name": "web", "uid": "u1"}],
                "allocation": {"devices": {"results": [
                    {"request": "r", "driver": "b.example.com", "pool": "n", "device": "d0"},
                    {"request": "r", "driver": "a.example.com", "pool": "n", "device": "d1"},
                    {"request": "s", "driver": "b.example.com", "pool": "n", "device": "d2"}]}}}
        }));
        assert_eq!(is_for_pod(&p, &c), Ok(()));
        assert!(is_reserved_for_pod(&p, &c));
        assert_eq!(allocated_drivers(&c).unwrap(), vec!["a.example.com", "b.example.com"]);
        c.metadata.owner_references = None;
        assert_eq!(
            is_for_pod(&p, &c).unwrap_err(),
            "ResourceClaim ns/web-b-x was not created for pod ns/web (pod is not owner)"
        );
        c.status = None;
        assert!(!is_reserved_for_pod(&p, &c));
        assert_eq!(allocated_drivers(&c).unwrap_err(), "not allocated");
    }
}

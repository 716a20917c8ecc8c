//! Resources of containers and the pod overhead (`pkg/apis/core/validation/validation.go`:
//! validateResourceRequirements, validateContainerResourceName, ValidateResourceQuantityValue,
//! validateResourceQuantityHugePageValue; `pkg/apis/core/helper/helpers.go` for the resource name classes).
//!
//! Every quantity must parse as `resource.ParseQuantity` does. Upstream refuses a quantity that does not parse
//! while decoding the manifest (`Quantity.UnmarshalJSON`), with only the regular expression as message; rkubelet
//! decodes quantities as plain strings, so it reports the same text here, with the field's path:
//! `spec.containers[0].resources.limits[memory]: Invalid value: "lots": quantities must match …`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_types::quantity::ParsedQuantity;

use super::field::{BadValue, ErrorList, FieldError, Path, forbidden, invalid, not_found, required};
use super::names::{is_qualified_name, validate_dns1123_label};

const HUGEPAGES_PREFIX: &str = "hugepages-";
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// Parses a quantity as the API does when decoding (surrounding spaces trimmed), or says why not at `path`.
pub fn parse_quantity_at(q: &Quantity, path: &Path) -> Result<ParsedQuantity, FieldError> {
    ParsedQuantity::parse(q.0.trim()).map_err(|e| invalid(path, q.0.as_str(), e.to_string()))
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended(name: &str) -> bool {
    !is_native(name) && !name.starts_with("requests.") && is_qualified_name(&format!("requests.{name}")).is_empty()
}

fn is_integer_resource(name: &str) -> bool {
    INTEGER_RESOURCES.contains(&name) || is_extended(name)
}

fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

/// `validateResourceName`.
fn validate_resource_name(name: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList(is_qualified_name(name).into_iter().map(|m| invalid(path, name, m)).collect());
    if !errs.is_empty() {
        return errs;
    }
    let standard = STANDARD_RESOURCES.contains(&name) || is_hugepages(name) || name.starts_with("requests.hugepages-");
    if !name.contains('/') && !standard {
        errs.push(invalid(path, name, "must be a standard resource type or fully qualified"));
    }
    errs
}

/// `validateContainerResourceName`.
fn validate_container_resource_name(name: &str, path: &Path) -> ErrorList {
    let mut errs = validate_resource_name(name, path);
    if !name.contains('/') {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_hugepages(name) {
            errs.push(invalid(path, name, "must be a standard resource for containers"));
        }
    } else if !is_native(name) && !is_extended(name) {
        errs.push(invalid(path, name, "doesn't follow extended resource name standard"));
    }
    errs
}

/// `ValidateResourceQuantityValue`: not negative; whole for integer resources.
fn validate_quantity_value(name: &str, q: &ParsedQuantity, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if q.is_negative() {
        errs.push(invalid(path, q.to_string(), "must be greater than or equal to 0"));
    }
    if is_integer_resource(name) && !q.is_integer() {
        errs.push(invalid(path, BadValue::json(&q.to_string()), "must be an integer"));
    }
    errs
}

/// `validateResourceQuantityHugePageValue` (indivisible values are not allowed for pods that are created).
fn validate_hugepages_value(name: &str, q: &ParsedQuantity, path: &Path) -> Option<FieldError> {
    let page = ParsedQuantity::parse(&name[HUGEPAGES_PREFIX.len()..]).ok();
    let divisible = match page {
        Some(page) if !page.is_negative() && !page.is_zero() && page.is_integer() => {
            matches!((q.value(), page.value()), (Some(v), Some(p)) if p != 0 && v % p == 0)
        }
        _ => false,
    };
    (!divisible).then(|| {
        let s = q.to_string();
        invalid(path, s.as_str(), format!("{s} is not positive integer multiple of {name}"))
    })
}

/// Parses every quantity of a resource list, rounded up to a thousandth as the API's defaulting does
/// (`SetDefaults_ResourceList`); the ones that do not parse are errors.
fn parse_list(
    list: Option<&BTreeMap<String, Quantity>>,
    path: &Path,
    errs: &mut ErrorList,
) -> BTreeMap<String, ParsedQuantity> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        match parse_quantity_at(q, &path.key(name)) {
            Ok(mut p) => {
                p.round_up(-3);
                out.insert(name.clone(), p);
            }
            Err(e) => errs.push(e),
        }
    }
    out
}

/// `ValidateContainerResourceRequirements` (requests defaulted from limits beforehand, as the API does).
pub fn validate_container_resources(req: Option<&ResourceRequirements>, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let Some(req) = req else { return errs };
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let limits = parse_list(req.limits.as_ref(), &lim_path, &mut errs);
    let requests = parse_list(req.requests.as_ref(), &req_path, &mut errs);
    let (mut lim_cpu_mem, mut req_cpu_mem, mut lim_huge, mut req_huge) = (false, false, false, false);
    // The checks every entry of either list gets; whether it is hugepages, and cpu or memory.
    let entry = |name: &String, q: Option<&ParsedQuantity>, p: &Path, errs: &mut ErrorList| {
        errs.extend(validate_container_resource_name(name, p));
        let q = q?;
        errs.extend(validate_quantity_value(name, q, p));
        let huge = is_hugepages(name);
        if huge {
            errs.extend(validate_hugepages_value(name, q, p));
        }
        Some((huge, matches!(name.as_str(), "cpu" | "memory")))
    };
    for name in req.limits.iter().flat_map(|m| m.keys()) {
        if let Some((huge, cpu_mem)) = entry(name, limits.get(name), &lim_path.key(name), &mut errs) {
            lim_huge |= huge;
            lim_cpu_mem |= cpu_mem;
        }
    }
    for name in req.requests.iter().flat_map(|m| m.keys()) {
        let Some((huge, cpu_mem)) = entry(name, requests.get(name), &req_path.key(name), &mut errs) else { continue };
        req_huge |= huge;
        req_cpu_mem |= cpu_mem;
        let q = &requests[name];
        match limits.get(name) {
            Some(limit) if !q.cmp_value(limit).is_eq() && !overcommit_allowed(name) => {
                errs.push(invalid(&req_path, q.to_string(), format!("must be equal to {name} limit of {limit}")));
            }
            Some(limit) if q.cmp_value(limit).is_gt() => errs.push(invalid(
                &req_path,
                q.to_string(),
                format!("must be less than or equal to {name} limit of {limit}"),
            )),
            Some(_) => {}
            None if !overcommit_allowed(name) && !req.limits.as_ref().is_some_and(|l| l.contains_key(name)) => {
                errs.push(required(&lim_path, "Limit must be set for non overcommitable resources"));
            }
            None => {}
        }
    }
    if !lim_cpu_mem && !req_cpu_mem && (req_huge || lim_huge) {
        errs.push(forbidden(path, "HugePages require cpu or memory"));
    }
    // Claims refer to the pod's resource claims, which static pods may not have.
    let mut names = std::collections::BTreeSet::new();
    for (i, claim) in req.claims.iter().flatten().enumerate() {
        let p = path.child("claims").index(i);
        if claim.name.is_empty() {
            errs.push(required(&p, ""));
            continue;
        }
        if let Some(r) = claim.request.as_deref().filter(|r| !r.is_empty()) {
            errs.extend(validate_dns1123_label(r, &p.child("request")));
        }
        let key = match claim.request.as_deref().filter(|r| !r.is_empty()) {
            Some(r) => format!("{}/{r}", claim.name),
            None => claim.name.clone(),
        };
        if !names.insert(key.clone()) {
            errs.push(super::field::duplicate(&p, key));
        }
        let mut e = not_found(&p, claim.name.as_str());
        e.detail = "must be one of the names in pod.spec.resourceClaims which is empty".into();
        errs.push(e);
    }
    errs
}

/// `validateOverhead`: the overhead is checked as container limits.
pub fn validate_overhead(overhead: &BTreeMap<String, Quantity>, path: &Path) -> ErrorList {
    let req = ResourceRequirements { limits: Some(overhead.clone()), ..Default::default() };
    validate_container_resources(Some(&req), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> ResourceRequirements {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect())
        };
        ResourceRequirements { limits: m(limits), requests: m(requests), ..Default::default() }
    }

    fn check(r: &ResourceRequirements) -> Vec<String> {
        let p = Path::new("spec").child("containers").index(0).child("resources");
        validate_container_resources(Some(r), &p).into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn quantities_must_parse() {
        assert_eq!(
            check(&req(&[("memory", "lots")], &[])),
            vec![
                "spec.containers[0].resources.limits[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            ]
        );
        assert!(check(&req(&[("memory", "128Mi"), ("cpu", "500m")], &[("cpu", " 0.25 ")])).is_empty());
    }

    #[test]
    fn requests_are_at_most_limits() {
        assert_eq!(
            check(&req(&[("cpu", "1")], &[("cpu", "2")])),
            vec![
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ]
        );
        assert_eq!(
            check(&req(&[("memory", "-1")], &[])),
            vec![
                "spec.containers[0].resources.limits[memory]: Invalid value: \"-1\": must be greater than or equal to 0"
            ]
        );
    }

    #[test]
    fn names_and_integer_resources() {
        assert_eq!(
            check(&req(&[], &[("pods", "1")])),
            vec![
                "spec.containers[0].resources.requests[pods]: Invalid value: \"pods\": must be a standard resource for containers"
            ]
        );
        assert_eq!(
            check(&req(&[], &[("foo", "1")])),
            vec![
                "spec.containers[0].resources.requests[foo]: Invalid value: \"foo\": must be a standard resource type or fully qualified",
                "spec.containers[0].resources.requests[foo]: Invalid value: \"foo\": must be a standard resource for containers"
            ]
        );
        assert_eq!(
            check(&req(&[("example.com/gpu", "1.5")], &[("example.com/gpu", "1.5")])),
            vec![
                "spec.containers[0].resources.limits[example.com/gpu]: Invalid value: \"1500m\": must be an integer",
                "spec.containers[0].resources.requests[example.com/gpu]: Invalid value: \"1500m\": must be an integer"
            ]
        );
        assert_eq!(
            check(&req(&[], &[("example.com/gpu", "1")])),
            vec![
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"
            ]
        );
    }

    #[test]
    fn hugepages() {
        assert_eq!(
            check(&req(&[("hugepages-2Mi", "1Mi")], &[("hugepages-2Mi", "1Mi")])),
            vec![
                "spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: \"1Mi\": 1Mi is not positive integer multiple of hugepages-2Mi",
                "spec.containers[0].resources.requests[hugepages-2Mi]: Invalid value: \"1Mi\": 1Mi is not positive integer multiple of hugepages-2Mi",
                "spec.containers[0].resources: Forbidden: HugePages require cpu or memory"
            ]
        );
        assert!(check(&req(&[("hugepages-2Mi", "4Mi"), ("memory", "1Gi")], &[("hugepages-2Mi", "4Mi")])).is_empty());
    }
}

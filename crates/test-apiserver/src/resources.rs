//! The resources this server serves, as the real apiserver's storage registry
//! (`pkg/registry/...`) and its discovery documents (`APIResourceList`) describe them: group, version,
//! plural and singular names, kind, scope, verbs, short names and subresources.

/// One served resource.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Singular name.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`po`, `no`, ...).
    pub short_names: &'static [&'static str],
    /// Verbs of the main resource.
    pub verbs: &'static [&'static str],
    /// Subresources (`status`, `approval`, `eviction`).
    pub subresources: &'static [&'static str],
    /// Categories (`all`).
    pub categories: &'static [&'static str],
}

const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const NS_VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
const LIST_ONLY: &[&str] = &["get", "list", "watch"];
const CREATE_ONLY: &[&str] = &["create"];

macro_rules! res {
    ($g:expr, $v:expr, $r:expr, $s:expr, $k:expr, $ns:expr, $short:expr, $verbs:expr, $sub:expr, $cat:expr) => {
        ResourceDef {
            group: $g,
            version: $v,
            resource: $r,
            singular: $s,
            kind: $k,
            namespaced: $ns,
            short_names: $short,
            verbs: $verbs,
            subresources: $sub,
            categories: $cat,
        }
    };
}

/// Every served resource.
pub static RESOURCES: &[ResourceDef] = &[
    res!(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        true,
        &["po"],
        ALL_VERBS,
        &["status", "eviction", "log", "exec", "attach", "portforward"],
        &["all"]
    ),
    res!("", "v1", "nodes", "node", "Node", false, &["no"], ALL_VERBS, &["status"], &[]),
    res!("", "v1", "namespaces", "namespace", "Namespace", false, &["ns"], NS_VERBS, &["status", "finalize"], &[]),
    res!("", "v1", "events", "event", "Event", true, &["ev"], ALL_VERBS, &[], &[]),
    res!("", "v1", "configmaps", "configmap", "ConfigMap", true, &["cm"], ALL_VERBS, &[], &[]),
    res!("", "v1", "secrets", "secret", "Secret", true, &[], ALL_VERBS, &[], &[]),
    res!("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, &["sa"], ALL_VERBS, &["token"], &[]),
    res!("", "v1", "services", "service", "Service", true, &["svc"], NS_VERBS, &["status"], &["all"]),
    res!("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, &[], ALL_VERBS, &[], &[]),
    res!(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "certificatesigningrequest",
        "CertificateSigningRequest",
        false,
        &["csr"],
        ALL_VERBS,
        &["approval", "status"],
        &[]
    ),
    res!("events.k8s.io", "v1", "events", "event", "Event", true, &["ev"], ALL_VERBS, &[], &[]),
    res!(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        false,
        &[],
        CREATE_ONLY,
        &[],
        &[]
    ),
    res!(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "subjectaccessreview",
        "SubjectAccessReview",
        false,
        &[],
        CREATE_ONLY,
        &[],
        &[]
    ),
    res!("storage.k8s.io", "v1", "csidrivers", "csidriver", "CSIDriver", false, &[], LIST_ONLY, &[], &[]),
    res!("storage.k8s.io", "v1", "csinodes", "csinode", "CSINode", false, &[], ALL_VERBS, &[], &[]),
];

/// The verbs of a subresource in discovery.
pub fn subresource_verbs(sub: &str) -> &'static [&'static str] {
    match sub {
        "eviction" | "token" => &["create"],
        "log" => &["get"],
        "exec" | "attach" | "portforward" => &["create", "get"],
        "finalize" => &["update"],
        _ => &["get", "patch", "update"],
    }
}

/// The kind a subresource reports in discovery.
pub fn subresource_kind(def: &ResourceDef, sub: &str) -> &'static str {
    match sub {
        "eviction" => "Eviction",
        "token" => "TokenRequest",
        "exec" => "PodExecOptions",
        "attach" => "PodAttachOptions",
        "portforward" => "PodPortForwardOptions",
        _ => def.kind,
    }
}

/// The resource of `group`/`version` named `name` (plural).
pub fn find(group: &str, version: &str, name: &str) -> Option<&'static ResourceDef> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.resource == name)
}

/// The resource of a given kind in `group`/`version`.
pub fn find_kind(group: &str, version: &str, kind: &str) -> Option<&'static ResourceDef> {
    RESOURCES.iter().find(|r| r.group == group && r.version == version && r.kind == kind)
}

/// The served group/versions: `("", "v1")` first, then the groups in order.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

impl ResourceDef {
    /// `apiVersion` of the objects (`v1`, `coordination.k8s.io/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The key of this resource in the store.
    pub fn key(&self) -> String {
        format!("{}/{}", self.group, self.resource)
    }

    /// The URL path prefix of this resource's group/version (`/api/v1`, `/apis/g/v`).
    pub fn prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// Whether the verb is served on the main resource.
    pub fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

/// The core pods resource.
pub fn pods() -> &'static ResourceDef {
    &RESOURCES[0]
}

/// The core nodes resource.
pub fn nodes() -> &'static ResourceDef {
    &RESOURCES[1]
}

/// The core namespaces resource.
pub fn namespaces() -> &'static ResourceDef {
    &RESOURCES[2]
}

//! The patch metadata of the Pod and Node types: per field, the `patchStrategy` and `patchMergeKey` struct tags
//! of `k8s.io/api/core/v1/types.go` and `k8s.io/apimachinery/pkg/apis/meta/v1/types.go`, which is what
//! `strategicpatch.NewPatchMetaFromStruct(v1.Pod{})` / `(v1.Node{})` reads (the struct tags, not the OpenAPI
//! `+listType` markers: `status.hostIPs` is `+listType=atomic` but tagged `patchStrategy:"merge"`, and the tag
//! wins).
//!
//! Only the structs that lead to a tagged field need a table; a field that is not listed behaves like an
//! untagged one (maps are diffed key by key, lists are replaced whole). The tables of `PodStatus`, `NodeStatus`,
//! `NodeSpec`, `ObjectMeta`, `PodSpec` and `Container` list every field so that the atomic lists are written
//! down too.

/// A struct: its JSON fields and their patch metadata.
#[derive(Debug)]
pub struct Schema {
    /// The Go type, for error messages.
    pub name: &'static str,
    /// The fields with their patch metadata.
    pub fields: &'static [Field],
}

/// The patch metadata of one field.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The JSON name.
    pub name: &'static str,
    /// `patchStrategy` contains `merge`: the list is merged (a list of maps by `merge_key`, a list of
    /// primitives as a set with `$deleteFromPrimitiveList`). Without it a list is replaced whole.
    pub merge: bool,
    /// `patchMergeKey` (empty for a list of primitives).
    pub merge_key: &'static str,
    /// `patchStrategy` contains `retainKeys`: the map (or each map of the list) carries `$retainKeys`.
    pub retain_keys: bool,
    /// The struct of the field's value (of each element, for a list), when it has tagged fields below.
    pub ty: Option<&'static Schema>,
}

impl Field {
    /// A scalar, a map or an untagged (atomic) list whose values have no tagged fields.
    pub const fn plain(name: &'static str) -> Field {
        Field { name, merge: false, merge_key: "", retain_keys: false, ty: None }
    }

    /// A list without `patchStrategy`: replaced whole. (Same as [`Field::plain`]; named for the tables.)
    pub const fn atomic(name: &'static str) -> Field {
        Field::plain(name)
    }

    /// An untagged struct whose fields are described by `ty`.
    pub const fn nested(name: &'static str, ty: &'static Schema) -> Field {
        Field { name, merge: false, merge_key: "", retain_keys: false, ty: Some(ty) }
    }

    /// `patchStrategy:"merge" patchMergeKey:"<key>"` on a list of structs.
    pub const fn merge_by(name: &'static str, key: &'static str, ty: Option<&'static Schema>) -> Field {
        Field { name, merge: true, merge_key: key, retain_keys: false, ty }
    }

    /// `patchStrategy:"merge"` on a list of primitives.
    pub const fn merge_set(name: &'static str) -> Field {
        Field { name, merge: true, merge_key: "", retain_keys: false, ty: None }
    }

    /// Adds `retainKeys` to the strategy (`patchStrategy:"merge,retainKeys"`).
    pub const fn retain_keys(self) -> Field {
        Field { retain_keys: true, ..self }
    }

    /// The metadata of a field that is not in any table: no strategy, nothing known below.
    pub const UNKNOWN: Field = Field::plain("");
}

impl Schema {
    /// The metadata of the field `name` of this struct.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// The metadata of `name` under `schema` (an unknown field, or a field of an unknown struct, has none).
pub(crate) fn lookup(schema: Option<&'static Schema>, name: &str) -> Field {
    schema.and_then(|s| s.field(name)).copied().unwrap_or(Field::UNKNOWN)
}

/// `v1.Pod` (`core/v1/types.go` `type Pod struct`).
pub static POD: Schema = Schema {
    name: "Pod",
    fields: &[
        Field::plain("apiVersion"),
        Field::plain("kind"),
        Field::nested("metadata", &OBJECT_META),
        Field::nested("spec", &POD_SPEC),
        Field::nested("status", &POD_STATUS),
    ],
};

/// `v1.Node` (`core/v1/types.go` `type Node struct`).
pub static NODE: Schema = Schema {
    name: "Node",
    fields: &[
        Field::plain("apiVersion"),
        Field::plain("kind"),
        Field::nested("metadata", &OBJECT_META),
        Field::nested("spec", &NODE_SPEC),
        Field::nested("status", &NODE_STATUS),
    ],
};

/// Any object whose only tagged fields are in its metadata (Event, Lease, ConfigMap, ...).
pub static OBJECT: Schema = Schema {
    name: "Object",
    fields: &[Field::plain("apiVersion"), Field::plain("kind"), Field::nested("metadata", &OBJECT_META)],
};

/// `metav1.ObjectMeta` (`apimachinery/pkg/apis/meta/v1/types.go`).
pub static OBJECT_META: Schema = Schema {
    name: "ObjectMeta",
    fields: &[
        Field::plain("name"),
        Field::plain("generateName"),
        Field::plain("namespace"),
        Field::plain("selfLink"),
        Field::plain("uid"),
        Field::plain("resourceVersion"),
        Field::plain("generation"),
        Field::plain("creationTimestamp"),
        Field::plain("deletionTimestamp"),
        Field::plain("deletionGracePeriodSeconds"),
        Field::plain("labels"),
        Field::plain("annotations"),
        // `patchStrategy:"merge" patchMergeKey:"uid"`
        Field::merge_by("ownerReferences", "uid", None),
        // `patchStrategy:"merge"`
        Field::merge_set("finalizers"),
        Field::atomic("managedFields"),
    ],
};

/// `v1.PodStatus`.
pub static POD_STATUS: Schema = Schema {
    name: "PodStatus",
    fields: &[
        Field::plain("observedGeneration"),
        Field::plain("phase"),
        // `patchStrategy:"merge" patchMergeKey:"type"`
        Field::merge_by("conditions", "type", None),
        Field::plain("message"),
        Field::plain("reason"),
        Field::plain("nominatedNodeName"),
        Field::plain("hostIP"),
        // `patchStrategy:"merge" patchMergeKey:"ip"` (the `+listType=atomic` marker is for apply, not SMP)
        Field::merge_by("hostIPs", "ip", None),
        Field::plain("podIP"),
        // `patchStrategy:"merge" patchMergeKey:"ip"`
        Field::merge_by("podIPs", "ip", None),
        Field::plain("startTime"),
        // No patch strategy: the three container status lists are atomic and replaced whole.
        Field::atomic("initContainerStatuses"),
        Field::atomic("containerStatuses"),
        Field::plain("qosClass"),
        Field::atomic("ephemeralContainerStatuses"),
        Field::plain("resize"),
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"`
        Field::merge_by("resourceClaimStatuses", "name", None).retain_keys(),
        Field::plain("extendedResourceClaimStatus"),
    ],
};

/// `v1.ContainerStatus`. Never consulted by a diff of a Pod (the lists holding it are atomic); kept for
/// completeness and for patches addressed to it directly.
pub static CONTAINER_STATUS: Schema = Schema {
    name: "ContainerStatus",
    fields: &[
        Field::plain("name"),
        Field::plain("state"),
        Field::plain("lastState"),
        Field::plain("ready"),
        Field::plain("restartCount"),
        Field::plain("image"),
        Field::plain("imageID"),
        Field::plain("containerID"),
        Field::plain("started"),
        Field::plain("allocatedResources"),
        Field::plain("resources"),
        // `patchStrategy:"merge" patchMergeKey:"mountPath"`
        Field::merge_by("volumeMounts", "mountPath", None),
        Field::plain("user"),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("allocatedResourcesStatus", "name", None),
        Field::plain("stopSignal"),
    ],
};

/// `v1.PodSpec`.
pub static POD_SPEC: Schema = Schema {
    name: "PodSpec",
    fields: &[
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"` (the volume sources are inlined in Volume)
        Field::merge_by("volumes", "name", None).retain_keys(),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("initContainers", "name", Some(&CONTAINER)),
        Field::merge_by("containers", "name", Some(&CONTAINER)),
        // EphemeralContainer inlines EphemeralContainerCommon, which carries the same tags as Container.
        Field::merge_by("ephemeralContainers", "name", Some(&CONTAINER)),
        Field::plain("restartPolicy"),
        Field::plain("terminationGracePeriodSeconds"),
        Field::plain("activeDeadlineSeconds"),
        Field::plain("dnsPolicy"),
        Field::plain("nodeSelector"),
        Field::plain("serviceAccountName"),
        Field::plain("serviceAccount"),
        Field::plain("automountServiceAccountToken"),
        Field::plain("nodeName"),
        Field::plain("hostNetwork"),
        Field::plain("hostPID"),
        Field::plain("hostIPC"),
        Field::plain("shareProcessNamespace"),
        Field::plain("securityContext"),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("imagePullSecrets", "name", None),
        Field::plain("hostname"),
        Field::plain("subdomain"),
        Field::plain("affinity"),
        Field::plain("schedulerName"),
        Field::atomic("tolerations"),
        // `patchStrategy:"merge" patchMergeKey:"ip"`
        Field::merge_by("hostAliases", "ip", None),
        Field::plain("priorityClassName"),
        Field::plain("priority"),
        Field::plain("dnsConfig"),
        Field::atomic("readinessGates"),
        Field::plain("runtimeClassName"),
        Field::plain("enableServiceLinks"),
        Field::plain("preemptionPolicy"),
        Field::plain("overhead"),
        // `patchStrategy:"merge" patchMergeKey:"topologyKey"`
        Field::merge_by("topologySpreadConstraints", "topologyKey", None),
        Field::plain("setHostnameAsFQDN"),
        Field::plain("os"),
        Field::plain("hostUsers"),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("schedulingGates", "name", None),
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"`
        Field::merge_by("resourceClaims", "name", None).retain_keys(),
        Field::plain("resources"),
        Field::plain("hostnameOverride"),
    ],
};

/// `v1.Container` (and `v1.EphemeralContainerCommon`, whose tags are the same, plus `targetContainerName`).
pub static CONTAINER: Schema = Schema {
    name: "Container",
    fields: &[
        Field::plain("name"),
        Field::plain("image"),
        Field::atomic("command"),
        Field::atomic("args"),
        Field::plain("workingDir"),
        // `patchStrategy:"merge" patchMergeKey:"containerPort"`
        Field::merge_by("ports", "containerPort", None),
        Field::atomic("envFrom"),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("env", "name", None),
        Field::plain("resources"),
        Field::atomic("resizePolicy"),
        Field::plain("restartPolicy"),
        Field::atomic("restartPolicyRules"),
        // `patchStrategy:"merge" patchMergeKey:"mountPath"`
        Field::merge_by("volumeMounts", "mountPath", None),
        // `patchStrategy:"merge" patchMergeKey:"devicePath"`
        Field::merge_by("volumeDevices", "devicePath", None),
        Field::plain("livenessProbe"),
        Field::plain("readinessProbe"),
        Field::plain("startupProbe"),
        Field::plain("lifecycle"),
        Field::plain("terminationMessagePath"),
        Field::plain("terminationMessagePolicy"),
        Field::plain("imagePullPolicy"),
        Field::plain("securityContext"),
        Field::plain("stdin"),
        Field::plain("stdinOnce"),
        Field::plain("tty"),
        Field::plain("targetContainerName"),
    ],
};

/// `v1.NodeSpec`.
pub static NODE_SPEC: Schema = Schema {
    name: "NodeSpec",
    fields: &[
        Field::plain("podCIDR"),
        // `patchStrategy:"merge"`
        Field::merge_set("podCIDRs"),
        Field::plain("providerID"),
        Field::plain("unschedulable"),
        Field::atomic("taints"),
        Field::plain("configSource"),
        Field::plain("externalID"),
    ],
};

/// `v1.NodeStatus`.
pub static NODE_STATUS: Schema = Schema {
    name: "NodeStatus",
    fields: &[
        Field::plain("capacity"),
        Field::plain("allocatable"),
        Field::plain("phase"),
        // `patchStrategy:"merge" patchMergeKey:"type"`
        Field::merge_by("conditions", "type", None),
        // `patchStrategy:"merge" patchMergeKey:"type"` -- wrong for several addresses of one type, which is
        // why `PatchNodeStatus` replaces the list itself when it changed (see `node_status_patch`).
        Field::merge_by("addresses", "type", None),
        Field::plain("daemonEndpoints"),
        Field::plain("nodeInfo"),
        Field::atomic("images"),
        Field::atomic("volumesInUse"),
        Field::atomic("volumesAttached"),
        Field::plain("config"),
        Field::atomic("runtimeHandlers"),
        Field::plain("features"),
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_depend_on_where_the_field_is() {
        let status = lookup(Some(&POD), "status").ty;
        let conditions = lookup(status, "conditions");
        assert!(conditions.merge && conditions.merge_key == "type");
        let cs = lookup(status, "containerStatuses");
        assert!(!cs.merge, "containerStatuses has no patch strategy");
        // `conditions` somewhere else (an unknown struct) has no strategy.
        assert!(!lookup(None, "conditions").merge);
        let spec = lookup(Some(&POD), "spec").ty;
        let containers = lookup(spec, "containers");
        assert_eq!(containers.merge_key, "name");
        assert_eq!(lookup(containers.ty, "volumeMounts").merge_key, "mountPath");
        assert!(lookup(spec, "volumes").retain_keys);
        assert!(!lookup(spec, "tolerations").merge);
        let meta = lookup(Some(&NODE), "metadata").ty;
        assert!(lookup(meta, "finalizers").merge && lookup(meta, "finalizers").merge_key.is_empty());
    }
}

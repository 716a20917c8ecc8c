//! The patch metadata of the Pod and Node types: per field, the `patchStrategy` and `patchMergeKey` struct tags
//! of `k8s.io/api/core/v1/types.go` and `k8s.io/apimachinery/pkg/apis/meta/v1/types.go`, which is what
//! `strategicpatch.NewPatchMetaFromStruct(v1.Pod{})` / `(v1.Node{})` reads (the struct tags, not the OpenAPI
//! `+listType` markers: `status.hostIPs` is `+listType=atomic` but tagged `patchStrategy:"merge"`, and the tag
//! wins).
//!
//! Only the structs that lead to a tagged field need a table, and only their tagged fields and the ones leading to
//! them are listed: a field that is not listed behaves like an untagged one (maps are diffed key by key, lists are
//! replaced whole). The untagged lists that matter to the kubelet (the container status lists above all) are
//! written down as [`Field::atomic`] all the same, so the table says what upstream's tags say about them.

/// A struct: its JSON fields and their patch metadata.
#[derive(Debug)]
pub struct Schema {
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
    fields: &[
        Field::nested("metadata", &OBJECT_META),
        Field::nested("spec", &POD_SPEC),
        Field::nested("status", &POD_STATUS),
    ],
};

/// `v1.Node` (`core/v1/types.go` `type Node struct`).
pub static NODE: Schema = Schema {
    fields: &[
        Field::nested("metadata", &OBJECT_META),
        Field::nested("spec", &NODE_SPEC),
        Field::nested("status", &NODE_STATUS),
    ],
};

/// Any object whose only tagged fields are in its metadata (Event, Lease, ConfigMap, ...).
pub static OBJECT: Schema = Schema { fields: &[Field::nested("metadata", &OBJECT_META)] };

/// `metav1.ObjectMeta` (`apimachinery/pkg/apis/meta/v1/types.go`).
pub static OBJECT_META: Schema = Schema {
    fields: &[
        // `patchStrategy:"merge" patchMergeKey:"uid"`
        Field::merge_by("ownerReferences", "uid", None),
        // `patchStrategy:"merge"`
        Field::merge_set("finalizers"),
        Field::atomic("managedFields"),
    ],
};

/// `v1.PodStatus`.
pub static POD_STATUS: Schema = Schema {
    fields: &[
        // `patchStrategy:"merge" patchMergeKey:"type"`
        Field::merge_by("conditions", "type", None),
        // `patchStrategy:"merge" patchMergeKey:"ip"` (the `+listType=atomic` marker is for apply, not SMP)
        Field::merge_by("hostIPs", "ip", None),
        // `patchStrategy:"merge" patchMergeKey:"ip"`
        Field::merge_by("podIPs", "ip", None),
        // No patch strategy: the three container status lists are atomic and replaced whole.
        Field::atomic("initContainerStatuses"),
        Field::atomic("containerStatuses"),
        Field::atomic("ephemeralContainerStatuses"),
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"`
        Field::merge_by("resourceClaimStatuses", "name", None).retain_keys(),
    ],
};

/// `v1.PodSpec`.
pub static POD_SPEC: Schema = Schema {
    fields: &[
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"` (the volume sources are inlined in Volume)
        Field::merge_by("volumes", "name", None).retain_keys(),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("initContainers", "name", Some(&CONTAINER)),
        Field::merge_by("containers", "name", Some(&CONTAINER)),
        // EphemeralContainer inlines EphemeralContainerCommon, which carries the same tags as Container.
        Field::merge_by("ephemeralContainers", "name", Some(&CONTAINER)),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("imagePullSecrets", "name", None),
        Field::atomic("tolerations"),
        // `patchStrategy:"merge" patchMergeKey:"ip"`
        Field::merge_by("hostAliases", "ip", None),
        Field::atomic("readinessGates"),
        // `patchStrategy:"merge" patchMergeKey:"topologyKey"`
        Field::merge_by("topologySpreadConstraints", "topologyKey", None),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("schedulingGates", "name", None),
        // `patchStrategy:"merge,retainKeys" patchMergeKey:"name"`
        Field::merge_by("resourceClaims", "name", None).retain_keys(),
    ],
};

/// `v1.Container` (and `v1.EphemeralContainerCommon`, whose tags are the same, plus `targetContainerName`).
pub static CONTAINER: Schema = Schema {
    fields: &[
        Field::atomic("command"),
        Field::atomic("args"),
        // `patchStrategy:"merge" patchMergeKey:"containerPort"`
        Field::merge_by("ports", "containerPort", None),
        Field::atomic("envFrom"),
        // `patchStrategy:"merge" patchMergeKey:"name"`
        Field::merge_by("env", "name", None),
        Field::atomic("resizePolicy"),
        Field::atomic("restartPolicyRules"),
        // `patchStrategy:"merge" patchMergeKey:"mountPath"`
        Field::merge_by("volumeMounts", "mountPath", None),
        // `patchStrategy:"merge" patchMergeKey:"devicePath"`
        Field::merge_by("volumeDevices", "devicePath", None),
    ],
};

/// `v1.NodeSpec`.
pub static NODE_SPEC: Schema = Schema {
    fields: &[
        // `patchStrategy:"merge"`
        Field::merge_set("podCIDRs"),
        Field::atomic("taints"),
    ],
};

/// `v1.NodeStatus`.
pub static NODE_STATUS: Schema = Schema {
    fields: &[
        // `patchStrategy:"merge" patchMergeKey:"type"`
        Field::merge_by("conditions", "type", None),
        // `patchStrategy:"merge" patchMergeKey:"type"` -- wrong for several addresses of one type, which is
        // why `PatchNodeStatus` replaces the list itself when it changed (see `node_status_patch`).
        Field::merge_by("addresses", "type", None),
        Field::atomic("images"),
        Field::atomic("volumesInUse"),
        Field::atomic("volumesAttached"),
        Field::atomic("runtimeHandlers"),
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

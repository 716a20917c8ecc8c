//! Static pods may not refer to API objects (`pkg/api/pod/util.go` HasAPIObjectReference, used by
//! `pkg/kubelet/config/common.go` tryDecodeSinglePod under the `PreventStaticPodAPIReferences` gate, beta and on by
//! default): a static pod runs without the apiserver, and its mirror pod could not be created by the node anyway
//! (NodeRestriction refuses mirror pods that refer to service accounts, secrets, configmaps or claims).
//!
//! Called by the manifest acceptance for every decoded static pod; pure.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVarSource, Pod, PodSpec, Volume};

/// What a static pod refers to, named as upstream's refusal names it (`"secrets"`, `"configmaps (via configmap
/// volumes)"`, ...), or an error naming a volume of an unknown type; `Ok(None)` when it refers to nothing.
pub fn api_object_reference(pod: &Pod) -> Result<Option<&'static str>, String> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(None) };
    if spec.service_account_name.as_deref().is_some_and(|s| !s.is_empty()) {
        return Ok(Some("serviceaccounts"));
    }
    if refers_to_secrets(spec) {
        return Ok(Some("secrets"));
    }
    if refers_to_configmaps(spec) {
        return Ok(Some("configmaps"));
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Ok(Some("resourceclaims"));
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(r) = volume_reference(v)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Whether any container (init, app or ephemeral: upstream's `AllContainers`) takes its environment from `env_from`
/// or has a variable from `env`, as `VisitPodSecretNames` / `VisitPodConfigmapNames` look at them.
fn any_env(spec: &PodSpec, env_from: impl Fn(&EnvFromSource) -> bool, env: impl Fn(&EnvVarSource) -> bool) -> bool {
    let lists = spec.init_containers.iter().flatten().chain(spec.containers.iter()).map(|c| (&c.env, &c.env_from));
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|c| (&c.env, &c.env_from));
    lists.chain(ephemeral).any(|(vars, froms)| {
        froms.iter().flatten().any(&env_from) || vars.iter().flatten().filter_map(|v| v.value_from.as_ref()).any(&env)
    })
}

/// `VisitPodSecretNames`: image pull secrets, secret volumes (also projected and the cloud volume types that take a
/// secret), and the containers' `envFrom` and `env` secret references.
fn refers_to_secrets(spec: &PodSpec) -> bool {
    if spec.image_pull_secrets.as_ref().is_some_and(|s| s.iter().any(|r| !r.name.is_empty())) {
        return true;
    }
    let volume = |v: &Volume| {
        v.secret.is_some()
            || v.azure_file.is_some()
            || v.cephfs.as_ref().is_some_and(|c| c.secret_ref.is_some())
            || v.cinder.as_ref().is_some_and(|c| c.secret_ref.is_some())
            || v.flex_volume.as_ref().is_some_and(|f| f.secret_ref.is_some())
            || v.rbd.as_ref().is_some_and(|r| r.secret_ref.is_some())
            || v.iscsi.as_ref().is_some_and(|i| i.secret_ref.is_some())
            || v.scale_io.as_ref().is_some_and(|s| !s.secret_ref.name.is_empty())
            || v.storageos.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.csi.as_ref().is_some_and(|c| c.node_publish_secret_ref.is_some())
            || v.projected.as_ref().is_some_and(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()))
    };
    spec.volumes.iter().flatten().any(volume)
        || any_env(spec, |f| f.secret_ref.is_some(), |v| v.secret_key_ref.is_some())
}

/// `VisitPodConfigmapNames`: configMap volumes (also projected), and the containers' `envFrom` and `env`
/// configMap references.
fn refers_to_configmaps(spec: &PodSpec) -> bool {
    let volume = |v: &Volume| {
        v.config_map.is_some()
            || v.projected.as_ref().is_some_and(|p| p.sources.iter().flatten().any(|s| s.config_map.is_some()))
    };
    spec.volumes.iter().flatten().any(volume)
        || any_env(spec, |f| f.config_map_ref.is_some(), |v| v.config_map_key_ref.is_some())
}

/// The API objects a volume refers to, by its type.
fn volume_reference(v: &Volume) -> Result<Option<&'static str>, String> {
    let plain = v.aws_elastic_block_store.is_some()
        || v.azure_disk.is_some()
        || v.cephfs.is_some()
        || v.cinder.is_some()
        || v.downward_api.is_some()
        || v.empty_dir.is_some()
        || v.fc.is_some()
        || v.flex_volume.is_some()
        || v.flocker.is_some()
        || v.gce_persistent_disk.is_some()
        || v.git_repo.is_some()
        || v.host_path.is_some()
        || v.image.is_some()
        || v.iscsi.is_some()
        || v.nfs.is_some()
        || v.photon_persistent_disk.is_some()
        || v.portworx_volume.is_some()
        || v.quobyte.is_some()
        || v.rbd.is_some()
        || v.scale_io.is_some()
        || v.storageos.is_some()
        || v.vsphere_volume.is_some();
    if plain {
        return Ok(None);
    }
    if v.config_map.is_some() {
        return Ok(Some("configmaps (via configmap volumes)"));
    }
    if v.secret.is_some() {
        return Ok(Some("secrets (via secret volumes)"));
    }
    if v.csi.is_some() {
        return Ok(Some("csidrivers (via CSI volumes)"));
    }
    if v.glusterfs.is_some() {
        return Ok(Some("endpoints (via glusterFS volumes)"));
    }
    if v.persistent_volume_claim.is_some() {
        return Ok(Some("persistentvolumeclaims"));
    }
    if v.ephemeral.is_some() {
        return Ok(Some("persistentvolumeclaims (via ephemeral volumes)"));
    }
    if v.azure_file.is_some() {
        return Ok(Some("secrets (via azureFile volumes)"));
    }
    if let Some(p) = &v.projected {
        for s in p.sources.iter().flatten() {
            if s.config_map.is_some() {
                return Ok(Some("configmaps (via projected volumes)"));
            }
            if s.secret.is_some() {
                return Ok(Some("secrets (via projected volumes)"));
            }
            if s.service_account_token.is_some() {
                return Ok(Some("serviceaccounts (via projected volumes)"));
            }
            if s.cluster_trust_bundle.is_some() {
                return Ok(Some("clustertrustbundles"));
            }
            if s.pod_certificate.is_some() {
                return Ok(Some("podcertificates"));
            }
            if s.downward_api.is_some() {
                continue;
            }
            return Err(format!("unknown source for projected volume {:?}", v.name));
        }
        return Ok(None);
    }
    Err(format!("unknown volume type for volume  {:?}", v.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        let v: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn references_are_named_as_upstream() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: i\n";
        assert_eq!(api_object_reference(&pod(base)), Ok(None));
        let env = format!(
            "{base}    env:\n    - name: X\n      valueFrom:\n        secretKeyRef:\n          name: s\n          key: k\n"
        );
        assert_eq!(api_object_reference(&pod(&env)), Ok(Some("secrets")));
        let from = format!("{base}    envFrom:\n    - configMapRef:\n        name: c\n");
        assert_eq!(api_object_reference(&pod(&from)), Ok(Some("configmaps")));
        let sa = base.replace("spec:\n", "spec:\n  serviceAccountName: default\n");
        assert_eq!(api_object_reference(&pod(&sa)), Ok(Some("serviceaccounts")));
        let vol = |v: &str| format!("{base}  volumes:\n  - name: v\n{v}");
        assert_eq!(api_object_reference(&pod(&vol("    emptyDir: {}\n"))), Ok(None));
        assert_eq!(api_object_reference(&pod(&vol("    nfs:\n      server: s\n      path: /p\n"))), Ok(None));
        let pvc = vol("    persistentVolumeClaim:\n      claimName: data\n");
        assert_eq!(api_object_reference(&pod(&pvc)), Ok(Some("persistentvolumeclaims")));
        // A secret volume is a secret reference first (VisitPodSecretNames runs before the volume types).
        assert_eq!(api_object_reference(&pod(&vol("    secret:\n      secretName: s\n"))), Ok(Some("secrets")));
        let token = vol("    projected:\n      sources:\n      - serviceAccountToken:\n          path: t\n");
        assert_eq!(api_object_reference(&pod(&token)), Ok(Some("serviceaccounts (via projected volumes)")));
        let downward = vol("    projected:\n      sources:\n      - downwardAPI:\n          items: []\n");
        assert_eq!(api_object_reference(&pod(&downward)), Ok(None));
        let bundle = vol(
            "    projected:\n      sources:\n      - clusterTrustBundle:\n          name: ca\n          path: ca\n",
        );
        assert_eq!(api_object_reference(&pod(&bundle)), Ok(Some("clustertrustbundles")));
        let cert = vol(
            "    projected:\n      sources:\n      - podCertificate:\n          signerName: example.com/s\n          \
             keyType: ED25519\n          credentialBundlePath: creds.pem\n",
        );
        assert_eq!(api_object_reference(&pod(&cert)), Ok(Some("podcertificates")));
        let sourceless: Pod = {
            let mut p = pod(base);
            p.spec.as_mut().unwrap().volumes = Some(vec![Volume { name: "v".into(), ..Default::default() }]);
            p
        };
        assert!(api_object_reference(&sourceless).unwrap_err().contains("unknown volume type"));
    }
}

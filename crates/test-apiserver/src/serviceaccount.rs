//! Service accounts as a cluster provides them to pods:
//! - the `serviceaccount` controller's `default` ServiceAccount and the `root-ca-cert-publisher`'s
//!   `kube-root-ca.crt` ConfigMap in every namespace (created with the namespace, synchronously);
//! - the `ServiceAccount` admission plugin on pod creation (`plugin/pkg/admission/serviceaccount`): the default
//!   service account, the refusal of unknown ones and of mirror pods referring to them, and the projected
//!   `kube-api-access-<suffix>` volume (token, `ca.crt`, namespace) mounted read-only at
//!   `/var/run/secrets/kubernetes.io/serviceaccount` in every init and app container;
//! - `serviceaccounts/<name>/token` (`pkg/registry/core/serviceaccount/storage/token.go`): bound tokens signed
//!   as ES256 JWTs with upstream's claims; a configurable maximum lifetime caps the one granted
//!   (`--service-account-max-token-expiration`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::{self, ResourceDef};
use crate::store::Store;
use crate::util::{new_uid, now_secs, random_suffix, rfc3339};

/// The issuer and default audience of tokens (kubeadm's `--service-account-issuer`).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Where the admission plugin mounts the token volume.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The lifetime the admission plugin asks for (`WarnOnlyBoundTokenExpirationSeconds`).
pub const API_ACCESS_EXPIRATION: i64 = 3607;
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn service_accounts() -> &'static ResourceDef {
    resources::find("", "v1", "serviceaccounts").expect("serviceaccounts are served")
}

fn config_maps() -> &'static ResourceDef {
    resources::find("", "v1", "configmaps").expect("configmaps are served")
}

/// The token signer: an ECDSA P-256 key generated per server.
pub struct Signer {
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
    /// The root CA published as `kube-root-ca.crt`.
    pub root_ca_pem: String,
    /// The longest lifetime granted, in seconds.
    pub max_expiration: Option<i64>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("kid", &self.kid).finish()
    }
}

impl Signer {
    /// A new key; `root_ca_pem` is the cluster CA published to namespaces.
    pub fn new(root_ca_pem: String, max_expiration: Option<i64>) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("ring generates keys");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("a generated key parses");
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Self { key, kid, rng, root_ca_pem, max_expiration }
    }

    /// The public key (uncompressed point), to verify tokens.
    pub fn public_key(&self) -> &[u8] {
        self.key.public_key().as_ref()
    }

    fn sign(&self, claims: &Value) -> String {
        let header = json!({ "alg": "ES256", "kid": self.kid });
        let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap_or_default());
        let input = format!("{}.{}", enc(&header), enc(claims));
        let sig = self.key.sign(&self.rng, input.as_bytes()).expect("signing with a valid key");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// What the controllers create in a new namespace: the `default` ServiceAccount and `kube-root-ca.crt`.
pub fn publish(store: &Store, ns: &str, root_ca_pem: &str) -> Result<(), ApiError> {
    let now = rfc3339(now_secs());
    let meta = |name: &str| json!({ "name": name, "namespace": ns, "uid": new_uid(), "creationTimestamp": now });
    let sa = json!({ "kind": "ServiceAccount", "apiVersion": "v1", "metadata": meta("default") });
    let mut cm_meta = meta("kube-root-ca.crt");
    cm_meta["annotations"] = json!({ "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters." });
    let cm = json!({ "kind": "ConfigMap", "apiVersion": "v1", "metadata": cm_meta, "data": { "ca.crt": root_ca_pem } });
    for (def, obj) in [(service_accounts(), sa), (config_maps(), cm)] {
        match store.create(def, ns, obj) {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn forbidden(pod: &Value, why: &str) -> ApiError {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    ApiError::forbidden(format!("pods \"{name}\" is forbidden: {why}"))
}

fn references_secrets(spec: &Value) -> bool {
    let vols = spec.get("volumes").and_then(Value::as_array).into_iter().flatten();
    let in_volumes = vols.clone().any(|v| {
        v.get("secret").is_some()
            || v.pointer("/projected/sources")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|s| s.get("secret").is_some()))
    });
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|l| spec.get(*l).and_then(Value::as_array).into_iter().flatten());
    let in_env = containers.clone().any(|c| {
        c.get("env")
            .and_then(Value::as_array)
            .is_some_and(|e| e.iter().any(|e| e.pointer("/valueFrom/secretKeyRef").is_some()))
            || c.get("envFrom")
                .and_then(Value::as_array)
                .is_some_and(|e| e.iter().any(|e| e.get("secretRef").is_some()))
    });
    in_volumes || in_env || spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|s| !s.is_empty())
}

/// The `ServiceAccount` admission plugin on a pod being created (after defaulting).
pub fn admit_pod(store: &Store, ns: &str, pod: &mut Value) -> Result<(), ApiError> {
    let spec = &pod["spec"];
    if pod.pointer(&format!("/metadata/annotations/{}", MIRROR_ANNOTATION.replace('/', "~1"))).is_some() {
        if spec.get("serviceAccountName").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return Err(forbidden(pod, "a mirror pod may not reference service accounts"));
        }
        if references_secrets(spec) {
            return Err(forbidden(pod, "a mirror pod may not reference secrets"));
        }
        let projects_token = spec.get("volumes").and_then(Value::as_array).into_iter().flatten().any(|v| {
            v.pointer("/projected/sources")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|s| s.get("serviceAccountToken").is_some()))
        });
        if projects_token {
            return Err(forbidden(pod, "a mirror pod may not use ServiceAccountToken volume projections"));
        }
        return Ok(());
    }
    let sa_name = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "default".to_string(),
    };
    pod["spec"]["serviceAccountName"] = json!(sa_name);
    pod["spec"]["serviceAccount"] = json!(sa_name);
    let sa = store.get(service_accounts(), ns, &sa_name).map_err(|_| {
        forbidden(
            pod,
            &format!("error looking up service account {ns}/{sa_name}: serviceaccount \"{sa_name}\" not found"),
        )
    })?;
    let automount = pod["spec"]
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| sa.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let spec = pod["spec"].as_object_mut().expect("a defaulted pod has a spec");
    let taken: Vec<String> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
        .collect();
    let volume = loop {
        let n = format!("kube-api-access-{}", random_suffix(5));
        if !taken.contains(&n) {
            break n;
        }
    };
    let mount = json!({ "name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH });
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            let mounts = c.as_object_mut().map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            let Some(Value::Array(mounts)) = mounts else { continue };
            if !mounts.iter().any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH)) {
                mounts.push(mount.clone());
                needed = true;
            }
        }
    }
    if needed {
        let vols = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Value::Array(vols) = vols {
            vols.push(json!({
                "name": volume,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        { "serviceAccountToken": { "expirationSeconds": API_ACCESS_EXPIRATION, "path": "token" } },
                        { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                        { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } },
                    ],
                },
            }));
        }
    }
    Ok(())
}

fn invalid_token_request(name: &str, field: &str, detail: &str) -> ApiError {
    let def = resources::find("", "v1", "serviceaccounts").expect("served");
    let mut e = ApiError::invalid(def, name, field, detail);
    e.message = format!("TokenRequest.authentication.k8s.io \"{name}\" is invalid: {field}: {detail}");
    e
}

/// `POST serviceaccounts/<name>/token`: a TokenRequest answered with a signed, bound token.
pub fn create_token(store: &Store, signer: &Signer, ns: &str, name: &str, req: &Value) -> Result<Value, ApiError> {
    let sa = store.get(service_accounts(), ns, name)?;
    let kind = req.get("kind").and_then(Value::as_str).unwrap_or("TokenRequest");
    let av = req.get("apiVersion").and_then(Value::as_str).unwrap_or("authentication.k8s.io/v1");
    if kind != "TokenRequest" || av != "authentication.k8s.io/v1" {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version (authentication.k8s.io/v1)"
        )));
    }
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut exp = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    if exp < 600 {
        return Err(invalid_token_request(
            name,
            "spec.expirationSeconds",
            &format!("Invalid value: {exp}: may not specify a duration less than 10 minutes"),
        ));
    }
    if exp > 1 << 32 {
        return Err(invalid_token_request(
            name,
            "spec.expirationSeconds",
            &format!("Invalid value: {exp}: may not specify a duration larger than 2^32 seconds"),
        ));
    }
    if let Some(max) = signer.max_expiration {
        exp = exp.min(max);
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_string()]);
    let now = now_secs();
    let sa_uid = sa.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let mut k8s = json!({ "namespace": ns, "serviceaccount": { "name": name, "uid": sa_uid } });
    let bound = spec.get("boundObjectRef").filter(|b| !b.is_null()).cloned();
    if let Some(b) = &bound {
        let bkind = b.get("kind").and_then(Value::as_str).unwrap_or("");
        let bname = b.get("name").and_then(Value::as_str).unwrap_or("");
        let buid = b.get("uid").and_then(Value::as_str).unwrap_or("");
        if bkind != "Pod" {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount {name:?} to an object of kind {bkind:?} (this server binds to pods)"
            )));
        }
        let pod = store.get(resources::pods(), ns, bname)?;
        let pod_uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
        if !buid.is_empty() && buid != pod_uid {
            return Err(ApiError::conflict(
                resources::pods(),
                bname,
                &format!(
                    "the UID in the bound object reference ({buid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        if pod.pointer("/spec/serviceAccountName").and_then(Value::as_str) != Some(name) {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
            )));
        }
        k8s["pod"] = json!({ "name": bname, "uid": pod_uid });
        if let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
            && let Ok(n) = store.get(resources::nodes(), "", node)
        {
            k8s["node"] = json!({ "name": node, "uid": n.pointer("/metadata/uid").cloned().unwrap_or(Value::Null) });
        }
    }
    let claims = json!({
        "aud": audiences,
        "exp": now + exp,
        "iat": now,
        "iss": ISSUER,
        "jti": new_uid(),
        "kubernetes.io": k8s,
        "nbf": now,
        "sub": format!("system:serviceaccount:{ns}:{name}"),
    });
    let mut out_spec = json!({ "audiences": audiences, "expirationSeconds": exp });
    if let Some(b) = bound {
        out_spec["boundObjectRef"] = b;
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": { "name": name, "namespace": ns, "creationTimestamp": Value::Null },
        "spec": out_spec,
        "status": { "token": signer.sign(&claims), "expirationTimestamp": rfc3339(now + exp) },
    }))
}

/// The claims of a token this server signed, after checking its signature.
pub fn verify(signer: &Signer, token: &str) -> Option<Value> {
    let (input, sig) = token.rsplit_once('.')?;
    let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
    let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, signer.public_key());
    key.verify(input.as_bytes(), &sig).ok()?;
    let payload = input.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::User;

    fn setup() -> (Store, Signer) {
        let s = Store::new(100);
        crate::api::seed(&s).unwrap();
        let signer = Signer::new("CA".into(), None);
        publish(&s, "default", &signer.root_ca_pem).unwrap();
        (s, signer)
    }

    fn pod(extra: Value) -> Value {
        let mut p = json!({"metadata": {"name": "web"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}],
                     "initContainers": [{"name": "i", "image": "busybox",
                        "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}]}});
        if let (Some(p), Some(e)) = (p["spec"].as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        p
    }

    #[test]
    fn admission_adds_the_api_access_volume_as_upstream() {
        let (s, _) = setup();
        let mut p = pod(json!({}));
        admit_pod(&s, "default", &mut p).unwrap();
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 1);
        let name = vols[0]["name"].as_str().unwrap();
        assert!(name.starts_with("kube-api-access-") && name.len() == 21, "{name}");
        assert_eq!(vols[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"][0]["name"], name);
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"][0]["readOnly"], true);
        assert_eq!(p["spec"]["initContainers"][0]["volumeMounts"].as_array().unwrap().len(), 1, "own mount kept");

        let mut off = pod(json!({"automountServiceAccountToken": false}));
        admit_pod(&s, "default", &mut off).unwrap();
        assert!(off["spec"].get("volumes").is_none());

        let mut other = pod(json!({"serviceAccountName": "robot"}));
        let e = admit_pod(&s, "default", &mut other).unwrap_err();
        assert_eq!(
            e.message,
            "pods \"web\" is forbidden: error looking up service account default/robot: serviceaccount \"robot\" not found"
        );
        let mut mirror = pod(json!({"serviceAccountName": "default"}));
        mirror["metadata"]["annotations"] = json!({ MIRROR_ANNOTATION: "x" });
        let e = admit_pod(&s, "default", &mut mirror).unwrap_err();
        assert!(e.message.ends_with("a mirror pod may not reference service accounts"), "{}", e.message);
    }

    #[test]
    fn tokens_are_bound_signed_and_capped() {
        let (s, mut signer) = setup();
        let mut p = pod(json!({}));
        admit_pod(&s, "default", &mut p).unwrap();
        let created = crate::api::create(&s, resources::pods(), Some("default"), p, &User::admin()).unwrap();
        let uid = created["metadata"]["uid"].as_str().unwrap();
        let req = json!({"spec": {"audiences": ["vault"], "expirationSeconds": 3607,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid}}});
        let tr = create_token(&s, &signer, "default", "default", &req).unwrap();
        assert_eq!(tr["spec"]["expirationSeconds"], 3607);
        let claims = verify(&signer, tr["status"]["token"].as_str().unwrap()).unwrap();
        assert_eq!(claims["aud"], json!(["vault"]));
        assert_eq!(claims["sub"], "system:serviceaccount:default:default");
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid);
        assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 3607);

        signer.max_expiration = Some(20);
        let tr = create_token(&s, &signer, "default", "default", &req).unwrap();
        assert_eq!(tr["spec"]["expirationSeconds"], 20, "the granted lifetime is capped");

        let mut stale = req.clone();
        stale["spec"]["boundObjectRef"]["uid"] = json!("other");
        assert_eq!(create_token(&s, &signer, "default", "default", &stale).unwrap_err().code, 409);
        let short = json!({"spec": {"expirationSeconds": 60}});
        let e = create_token(&s, &signer, "default", "default", &short).unwrap_err();
        assert!(e.message.contains("may not specify a duration less than 10 minutes"), "{}", e.message);
        assert_eq!(create_token(&s, &signer, "default", "nobody", &short).unwrap_err().code, 404);
        let tampered = tr["status"]["token"].as_str().unwrap().replacen('e', "f", 1);
        assert!(verify(&signer, &tampered).is_none());
    }
}

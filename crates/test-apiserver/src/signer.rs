//! The certificate controllers of kube-controller-manager that a kubelet's TLS bootstrap depends on,
//! running while the server listens with TLS:
//! - `csrapproving` (optional, `Options::auto_approve_node_csrs`): approves
//!   `kubernetes.io/kube-apiserver-client-kubelet` CSRs for `system:node:<name>` / `system:nodes`
//!   requested by a `system:bootstrappers` member (`nodeclient`) or by that node itself
//!   (`selfnodeclient`), as the default RBAC lets them;
//! - `csrsigning`: signs approved CSRs of the signers `kubernetes.io/kube-apiserver-client-kubelet`,
//!   `kubernetes.io/kube-apiserver-client` and `kubernetes.io/kubelet-serving` with the test CA
//!   (`status.certificate`), or marks them `Failed` when the request does not suit the signer.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::resources::{self, ResourceDef};
use crate::selector::Selectors;
use crate::server::Shared;
use crate::store::Outcome;
use crate::tls::{DEFAULT_SIGNING_DURATION, Pki, csr_subject};
use crate::util::{now_secs, rfc3339};

/// `kubernetes.io/kube-apiserver-client-kubelet`.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// `kubernetes.io/kube-apiserver-client`.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// `kubernetes.io/kubelet-serving`.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

fn csr_def() -> Option<&'static ResourceDef> {
    resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")
}

fn has_condition(csr: &Value, t: &str) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(t)))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// The PEM request of a CSR object (`spec.request` is base64 in JSON).
fn request_pem(csr: &Value) -> Result<String, String> {
    let b64 = csr.pointer("/spec/request").and_then(Value::as_str).unwrap_or("");
    let raw = STANDARD.decode(b64).map_err(|e| format!("spec.request is not base64: {e}"))?;
    String::from_utf8(raw).map_err(|_| "spec.request is not PEM".to_string())
}

/// Whether the request is for a node: CN `system:node:<name>`, O exactly `system:nodes`.
fn node_subject(pem: &str) -> Result<String, String> {
    let (cn, orgs) = csr_subject(pem.as_bytes()).map_err(|e| e.to_string())?;
    if orgs != ["system:nodes"] {
        return Err(format!("subject organization is not system:nodes: {orgs:?}"));
    }
    cn.strip_prefix("system:node:")
        .filter(|n| !n.is_empty())
        .map(|_| cn.clone())
        .ok_or_else(|| format!("subject common name does not begin with system:node: {cn:?}"))
}

/// What the approver decides for one CSR (`csrapproving` `recognizers`).
fn auto_approvable(csr: &Value) -> bool {
    if csr.pointer("/spec/signerName").and_then(Value::as_str) != Some(KUBELET_CLIENT_SIGNER)
        || has_condition(csr, "Approved")
        || has_condition(csr, "Denied")
    {
        return false;
    }
    let Ok(cn) = request_pem(csr).and_then(|p| node_subject(&p)) else { return false };
    let usages = strings(csr.pointer("/spec/usages"));
    if !usages.iter().any(|u| u == "client auth")
        || !usages.iter().all(|u| matches!(u.as_str(), "client auth" | "digital signature" | "key encipherment"))
    {
        return false;
    }
    let groups = strings(csr.pointer("/spec/groups"));
    let username = csr.pointer("/spec/username").and_then(Value::as_str).unwrap_or("");
    groups.iter().any(|g| g == "system:bootstrappers") || (groups.iter().any(|g| g == "system:nodes") && username == cn)
}

/// The certificate (PEM) for an approved CSR, or why the signer refuses it.
fn sign(pki: &Pki, csr: &Value) -> Result<String, String> {
    let signer = csr.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
    let pem = request_pem(csr)?;
    let usages = strings(csr.pointer("/spec/usages"));
    let has = |u: &str| usages.iter().any(|x| x == u);
    match signer {
        KUBELET_CLIENT_SIGNER => {
            node_subject(&pem)?;
            if !has("client auth") {
                return Err("usages did not contain client auth".into());
            }
        }
        KUBELET_SERVING_SIGNER => {
            node_subject(&pem)?;
            if !has("server auth") {
                return Err("usages did not contain server auth".into());
            }
        }
        _ if !has("client auth") => return Err("usages did not contain client auth".into()),
        _ => {}
    }
    let duration = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_u64)
        .map(|s| Duration::from_secs(s.max(600)))
        .unwrap_or(DEFAULT_SIGNING_DURATION)
        .min(DEFAULT_SIGNING_DURATION);
    pki.sign_request(&pem, &usages, duration).map_err(|e| e.to_string())
}

fn condition(t: &str, reason: &str, message: &str) -> Value {
    let now = rfc3339(now_secs());
    json!({
        "type": t, "status": "True", "reason": reason, "message": message,
        "lastUpdateTime": now, "lastTransitionTime": now,
    })
}

fn push_condition(csr: &mut Value, c: Value) {
    if !csr.get("status").is_some_and(Value::is_object) {
        csr["status"] = json!({});
    }
    match csr["status"].get_mut("conditions").and_then(Value::as_array_mut) {
        Some(cs) => cs.push(c),
        None => csr["status"]["conditions"] = json!([c]),
    }
}

/// One pass over every CSR.
fn sync(shared: &Shared, pki: &Pki) {
    let Some(def) = csr_def() else { return };
    let (csrs, _) = shared.store.list(def, None, &Selectors::default());
    for csr in csrs {
        let name = csr.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let res = shared.store.update_with(def, "", &name, |cur| {
            let mut new = cur.clone();
            if shared.opts.auto_approve_node_csrs && auto_approvable(cur) {
                let msg = "Auto approving kubelet client certificate after SubjectAccessReview.";
                push_condition(&mut new, condition("Approved", "AutoApproved", msg));
            }
            let signer = new.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("");
            let ours = matches!(signer, KUBELET_CLIENT_SIGNER | CLIENT_SIGNER | KUBELET_SERVING_SIGNER);
            let approved = new.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Approved")
                        && c.get("status").and_then(Value::as_str) != Some("False")
                })
            });
            let signed = new.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
            if ours && approved && !signed && !has_condition(&new, "Failed") && !has_condition(&new, "Denied") {
                match sign(pki, &new) {
                    Ok(cert) => new["status"]["certificate"] = json!(STANDARD.encode(cert)),
                    Err(e) => push_condition(&mut new, condition("Failed", "SignerValidationFailure", &e)),
                }
            }
            Ok(Outcome::Update(new))
        });
        if let Err(e) = res {
            tracing::debug!(csr = %name, error = %e, "CSR controller");
        }
    }
}

/// Runs the controllers until the task is aborted: a pass at start and after every write.
pub async fn run(shared: Arc<Shared>, pki: Arc<Pki>) {
    let mut rx = shared.store.subscribe();
    loop {
        rx.borrow_and_update();
        sync(&shared, &pki);
        if rx.changed().await.is_err() {
            return;
        }
    }
}

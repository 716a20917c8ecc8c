//! Delegated authentication and authorization, as a kubelet (or any aggregated server) uses them:
//! `authentication.k8s.io/v1` TokenReview (`pkg/registry/authentication/tokenreview`) and
//! `authorization.k8s.io/v1` SubjectAccessReview (`pkg/registry/authorization/subjectaccessreview`). Neither is
//! stored: the answer is the request with `status` filled in.
//!
//! Tokens are checked with the server's own authenticators (static tokens, bootstrap tokens, service account
//! tokens it signed and that have not expired). Access is decided by [`AccessRule`]s, a small stand-in for
//! RBAC: the first rule that matches the user or one of its groups, the verb and `resource[/subresource]`
//! allows; nothing else does. `system:masters` is allowed everything, as with RBAC's bootstrap policy.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::server::Shared;
use crate::strategy::User;

/// Who may do what: one RBAC-like rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    /// `user:<name>` or `group:<name>`.
    pub subject: String,
    /// Verbs (`*` for any).
    pub verbs: Vec<String>,
    /// `resource` or `resource/subresource` (`*` for any; `nodes/*` for any subresource of nodes).
    pub resources: Vec<String>,
}

impl AccessRule {
    /// A rule for `subject` (`user:x` or `group:y`).
    pub fn new(subject: &str, verbs: &[&str], resources: &[&str]) -> Self {
        AccessRule {
            subject: subject.into(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn matches(&self, user: &str, groups: &[String], verb: &str, resource: &str, sub: &str) -> bool {
        let who = match self.subject.split_once(':') {
            Some(("user", u)) => u == user,
            Some(("group", g)) => groups.iter().any(|x| x == g),
            _ => false,
        };
        let full = if sub.is_empty() { resource.to_string() } else { format!("{resource}/{sub}") };
        who && self.verbs.iter().any(|v| v == "*" || v == verb)
            && self.resources.iter().any(|r| {
                r == "*" || *r == full || r.strip_suffix("/*").is_some_and(|base| base == resource && !sub.is_empty())
            })
    }
}

/// The user a bearer token stands for, if this server accepts it.
pub fn user_of_token(shared: &Shared, token: &str) -> Option<User> {
    if let Some((_, u)) = shared.opts.tokens.iter().find(|(t, _)| t == token) {
        return Some(u.clone());
    }
    if shared.opts.bootstrap_tokens.iter().any(|t| t == token) {
        let id = token.split('.').next().unwrap_or("");
        return Some(User {
            name: format!("system:bootstrap:{id}"),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
        });
    }
    let claims = crate::serviceaccount::verify(&shared.signer, token)?;
    if claims.get("exp").and_then(Value::as_i64).is_some_and(|exp| exp <= crate::util::now_secs()) {
        return None;
    }
    let sub = claims.get("sub").and_then(Value::as_str)?;
    let ns = sub.strip_prefix("system:serviceaccount:")?.split(':').next()?;
    Some(User {
        name: sub.to_string(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
    })
}

/// POST `tokenreviews`.
pub fn token_review(shared: &Shared, def: &ResourceDef, mut req: Value) -> Result<Value, ApiError> {
    let token = req.pointer("/spec/token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::invalid(def, "", "spec.token", "Required value: token must be provided"));
    }
    let status = match user_of_token(shared, token) {
        Some(u) => json!({"authenticated": true, "user": {"username": u.name, "groups": u.groups},
            "audiences": req.pointer("/spec/audiences").cloned().unwrap_or(json!(["https://kubernetes.default.svc.cluster.local"]))}),
        None => json!({"user": {}}),
    };
    req["status"] = status;
    req["metadata"] = json!({"creationTimestamp": Value::Null});
    req["kind"] = json!("TokenReview");
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    Ok(req)
}

/// POST `subjectaccessreviews`.
pub fn access_review(shared: &Shared, def: &ResourceDef, mut req: Value) -> Result<Value, ApiError> {
    let spec = req.get("spec").cloned().unwrap_or(Value::Null);
    let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|g| g.as_str().map(String::from)).collect())
        .unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            def,
            "",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let ra = spec.get("resourceAttributes").cloned().unwrap_or(Value::Null);
    let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (verb, resource, sub) = (s("verb"), s("resource"), s("subresource"));
    let masters = groups.iter().any(|g| g == "system:masters");
    let rule = shared.opts.access_rules.iter().position(|r| r.matches(user, &groups, &verb, &resource, &sub));
    req["status"] = match (masters, rule) {
        (true, _) => json!({"allowed": true, "reason": "allowed: system:masters"}),
        (false, Some(i)) => json!({"allowed": true, "reason": format!("allowed by access rule {i}")}),
        (false, None) => json!({"allowed": false}),
    };
    req["metadata"] = json!({"creationTimestamp": Value::Null});
    req["kind"] = json!("SubjectAccessReview");
    req["apiVersion"] = json!("authorization.k8s.io/v1");
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_subjects_verbs_and_subresources() {
        let r = AccessRule::new("user:metrics", &["get"], &["nodes/metrics", "nodes/stats"]);
        assert!(r.matches("metrics", &[], "get", "nodes", "metrics"));
        assert!(!r.matches("metrics", &[], "create", "nodes", "metrics"));
        assert!(!r.matches("metrics", &[], "get", "nodes", "proxy"));
        assert!(!r.matches("other", &[], "get", "nodes", "metrics"));
        let g = AccessRule::new("group:ops", &["*"], &["nodes/*"]);
        assert!(g.matches("x", &["ops".into()], "create", "nodes", "proxy"));
        assert!(!g.matches("x", &["ops".into()], "get", "nodes", ""), "nodes/* is subresources only");
    }
}

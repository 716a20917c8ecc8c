//! API errors as the real apiserver reports them: `metav1.Status` objects built the way
//! `k8s.io/apimachinery/pkg/api/errors` builds them (`NewNotFound`, `NewAlreadyExists`, `NewConflict`,
//! `NewResourceExpired`, `NewBadRequest`, `NewInvalid`, ...), so `kubectl` prints
//! `Error from server (NotFound): pods "x" not found`.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code (`Status.code`).
    pub code: u16,
    /// `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`, `Expired`, `BadRequest`, `Invalid`, ...).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, if any.
    pub details: Option<Value>,
}

/// Errors of the server itself (not of a request).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding or accepting on the listening socket failed.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing a file (a kubeconfig) failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The server is already running / not running.
    #[error("{0}")]
    State(&'static str),
    /// A direct store call failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The test PKI failed (or TLS is not enabled).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// The name of a resource as upstream's `schema.GroupResource.String()` prints it: `pods`,
/// `leases.coordination.k8s.io`.
pub fn qualified(def: &ResourceDef) -> String {
    if def.group.is_empty() { def.resource.to_string() } else { format!("{}.{}", def.resource, def.group) }
}

fn details(def: &ResourceDef, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": def.resource });
    if !def.group.is_empty() {
        d["group"] = json!(def.group);
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: String, details: Option<Value>) -> Self {
        ApiError { code, reason, message, details }
    }

    /// 404 `<resource> "<name>" not found`.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{}\" not found", qualified(def), name), Some(details(def, name)))
    }

    /// 409 `<resource> "<name>" already exists`.
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(def), name),
            Some(details(def, name)),
        )
    }

    /// 409 `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{}\": {}", qualified(def), name, why),
            Some(details(def, name)),
        )
    }

    /// The optimistic-lock conflict (`registry.OptimisticLockErrorMsg`).
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 410 `Expired` (`too old resource version`).
    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message, None)
    }

    /// 503 `ServiceUnavailable`.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message.into(), None)
    }

    /// Another status from a backend, with its text (`NewGenericServerResponse`).
    pub fn generic(code: u16, message: String) -> Self {
        let reason = match code {
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        };
        Self::new(code, reason, message, None)
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message.into(), None)
    }

    /// 415 `UnsupportedMediaType`.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type})"
            ),
            None,
        )
    }

    /// 406 `NotAcceptable`.
    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!("only the following media types are accepted: application/json (got {accept})"),
            None,
        )
    }

    /// 404 for a path that names no resource (the real server answers a bare 404 page; kubectl shows
    /// `the server could not find the requested resource`).
    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource".to_string(), None)
    }

    /// 422 `<Kind> "<name>" is invalid: <field>: <detail>`.
    pub fn invalid(def: &ResourceDef, name: &str, field: &str, detail: &str) -> Self {
        let mut d = details(def, name);
        d["kind"] = json!(def.kind);
        d["causes"] = json!([{ "reason": "FieldValueInvalid", "message": detail, "field": field }]);
        Self::new(422, "Invalid", format!("{} \"{}\" is invalid: {}: {}", def.kind, name, field, detail), Some(d))
    }

    /// 403 `Forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message.into(), None)
    }

    /// 401 `Unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".to_string(), None)
    }

    /// 500 `InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {}", message.into()), None)
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

//! The kubelet's HTTP API (`pkg/kubelet/server`).
//!
//! - [`tls`] — the secure port's certificates and rustls configuration.
//! - [`auth`] — authentication (x509, TokenReview, anonymous) and authorization (SubjectAccessReview).

pub mod auth;
pub mod handlers;
pub mod host;
pub mod listen;
pub mod logs;
pub mod stats;
pub mod tls;

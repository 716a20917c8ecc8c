//! The kubelet's HTTP API (`pkg/kubelet/server`): what the apiserver (logs, exec, attach, port-forward),
//! metrics-server and Prometheus call on a node.
//!
//! - [`tls`] — the secure port's certificates and rustls configuration (`cmd/kubelet/app/server.go` InitializeTLS).
//! - [`auth`] — authentication (x509, TokenReview, anonymous) and authorization (SubjectAccessReview)
//!   (`pkg/kubelet/server/auth.go`, `cmd/kubelet/app/auth.go`).
//! - [`listen`] — accepting connections with bounds (`ListenAndServeKubeletServer`).
//! - [`handlers`] — the routes of the three ports (`server.go` NewServer and its handlers).
//! - [`logs`] — `/containerLogs` (`kubelet_pods.go` GetKubeletContainerLogs, `cri-client/pkg/logs`).
//! - [`stats`] — the Summary API schema, `/stats/summary` and `/metrics/resource` (`pkg/kubelet/server/stats`).
//! - [`confined`] — opening what `/logs/` and `/containerLogs/` serve only within their folders.
//! - [`host`] — what the handlers read of the kubelet (`HostInterface`), implemented by the core.

pub mod auth;
pub mod confined;
pub mod handlers;
pub mod host;
pub mod listen;
pub mod logs;
pub mod stats;
pub mod tls;
pub mod tls_reload;

//! An in-process test Kubernetes apiserver speaking the real wire protocol for the subset a kubelet and
//! `kubectl` use: core/v1 pods (with `status` and `eviction`), nodes, namespaces, events,
//! configmaps, secrets, serviceaccounts (with `token`) and services; coordination.k8s.io/v1 leases;
//! certificates.k8s.io/v1 CSRs (with `approval` and `status`); events.k8s.io/v1 events;
//! storage.k8s.io/v1 csidrivers and csinodes; TokenReviews and SubjectAccessReviews ([`review`]). It mirrors kube-apiserver's REST handlers, generic registry,
//! watch cache and printers closely enough that the real kubelet-side clients and kubectl work
//! against it; `DIFFERENCES.md` lists where it does not. With [`Options::tls`] it serves HTTPS with a
//! generated test CA, authenticates client certificates and signs approved CSRs, which is what a
//! kubelet's TLS bootstrap needs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), test_apiserver::ServerError> {
//! let server = test_apiserver::TestApiServer::start(Default::default()).await?;
//! server.kubeconfig("/tmp/kubeconfig")?;
//! println!("{}", server.url());
//! # Ok(()) }
//! ```

pub mod api;
pub mod discovery;
pub mod error;
mod http;
mod kubeconfig;
pub mod patch;
pub mod protobuf;
pub mod proxy;
pub mod resources;
pub mod review;
pub mod selector;
pub mod server;
pub mod serviceaccount;
pub mod signer;
pub mod store;
pub mod strategy;
pub mod table;
pub mod tls;
pub mod util;
pub mod watch;

pub use error::{ApiError, ServerError};
pub use server::{Options, RequestRecord, TestApiServer};
pub use strategy::User;
pub use tls::TlsOptions;

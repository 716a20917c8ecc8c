//! The Container Runtime Interface as rkubelet consumes it.
//!
//! Mirrors `k8s.io/cri-api/pkg/apis/services.go` (the `RuntimeService` and `ImageManagerService` interfaces)
//! and `pkg/kubelet/cri/remote` (the gRPC client). The kubelet's runtime manager holds an
//! `Arc<dyn RuntimeService>` and an `Arc<dyn ImageService>`; in production those are one [`RemoteRuntime`]
//! talking gRPC over the unix socket of `containerRuntimeEndpoint`, in unit tests and benchmarks one
//! [`FakeRuntime`] that keeps real state in memory.
//!
//! Every call returns a typed [`CriError`]; a lost connection shows as [`CriError::Unavailable`] and the next
//! call reconnects, so an outage of the runtime is something callers retry, never a crash.

pub mod brief;
mod error;
pub mod fake;
pub mod grpc;
mod remote;
mod service;

pub use brief::{BriefContainer, BriefSandbox};
pub use error::{CriError, CriResult};
pub use fake::FakeRuntime;
pub use kubelet_proto::runtime::v1 as api;
pub use remote::{RemoteRuntime, socket_path};
pub use service::{ContainerEventStream, ExecOutput, ImageService, RuntimeService};

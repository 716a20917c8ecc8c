//! Configuration of the kubelet and the sources of the pods it runs.
//!
//! - [`kubelet_config`]: the `KubeletConfiguration` file (kubelet.config.k8s.io/v1beta1) with upstream's defaults
//!   and validation (`staging/src/k8s.io/kubelet/config/v1beta1`, `pkg/kubelet/apis/config/validation`).
//! - [`sources`]: the static pod folder and URL (`pkg/kubelet/config/file.go`, `http.go`).
//! - [`podconfig`]: the merge of every source into one stream of pod updates (`pkg/kubelet/config/config.go`).

pub mod kubelet_config;
pub mod podconfig;
pub mod sources;
pub mod validation;

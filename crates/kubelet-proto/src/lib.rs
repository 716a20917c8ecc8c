//! Generated gRPC bindings for the APIs rkubelet speaks.
//!
//! [`runtime::v1`] mirrors the Go package `k8s.io/cri-api/pkg/apis/runtime/v1`
//! (the Container Runtime Interface, protobuf package `runtime.v1`, as published
//! for Kubernetes 1.34). It is generated at build time by `tonic-prost-build`
//! from `proto/cri/runtime/v1/api.proto` and contains:
//!
//! * prost message and enum types (e.g. `PodSandboxConfig`, `ContainerState`),
//! * tonic clients: `runtime_service_client::RuntimeServiceClient` and
//!   `image_service_client::ImageServiceClient`,
//! * tonic servers: the `runtime_service_server::RuntimeService` and
//!   `image_service_server::ImageService` traits with their
//!   `RuntimeServiceServer` / `ImageServiceServer` wrappers.

/// The CRI protobuf package `runtime`.
pub mod runtime {
    /// CRI `runtime.v1`: mirrors `k8s.io/cri-api/pkg/apis/runtime/v1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

/// The gRPC health checking protocol `grpc.health.v1`, which gRPC probes call (`Health/Check`).
pub mod health {
    /// `grpc.health.v1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1 {
        tonic::include_proto!("grpc.health.v1");
    }
}

/// The device plugin API (`k8s.io/kubelet/pkg/apis/deviceplugin`): protobuf package `v1beta1`.
pub mod deviceplugin {
    /// `v1beta1`: the kubelet's `Registration` service and each plugin's `DevicePlugin` service.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");
    }
}

/// The plugin registration API (`k8s.io/kubelet/pkg/apis/pluginregistration/v1`; protobuf package
/// `pluginregistration`), which each plugin in `<root-dir>/plugins_registry` serves.
pub mod pluginregistration {
    /// `pluginregistration`: `GetInfo` and `NotifyRegistrationStatus`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1 {
        tonic::include_proto!("pluginregistration");
    }
}

/// The pod resources API (`k8s.io/kubelet/pkg/apis/podresources`; protobuf packages `v1` and `v1alpha1`), which the
/// kubelet serves on `<root-dir>/pod-resources/kubelet.sock`.
pub mod podresources {
    /// `v1`: `List`, `GetAllocatableResources` and `Get`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1 {
        tonic::include_proto!("v1");
    }
    /// `v1alpha1`: `List`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1alpha1 {
        tonic::include_proto!("v1alpha1");
    }
}

/// The DRA kubelet plugin API (`k8s.io/kubelet/pkg/apis/dra`; protobuf packages `k8s.io.kubelet.pkg.apis.dra.v1`
/// and `...v1beta1`, wire-identical), which DRA drivers serve for `NodePrepareResources` and
/// `NodeUnprepareResources`.
pub mod dra {
    /// `v1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    /// `v1beta1`.
    #[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
}

/// The Container Storage Interface (`csi.v1`): the Identity and Node services a CSI driver serves on its socket, which
/// the kubelet calls to register it and to stage, publish and measure its volumes.
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all, unreachable_pub, unused_qualifications)]
pub mod csi {
    /// `v1`.
    pub mod v1 {
        tonic::include_proto!("csi.v1");
    }
}

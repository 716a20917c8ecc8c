//! Compiles rkubelet's copies of the CRI `runtime.v1` proto, the gRPC health protocol, the device plugin API
//! `v1beta1`, the plugin registration API, the pod resources API (`v1`, `v1alpha1`), the DRA kubelet plugin API
//! (`v1`, `v1beta1`) and the CSI spec's Identity and Node services (`csi.v1`) into Rust (prost messages plus tonic
//! client and server stubs).
//!
//! `protoc` comes from `protoc-bin-vendored`, so no system protoc is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let cri_proto = proto_root.join("cri/runtime/v1/api.proto");
    let health_proto = proto_root.join("grpc/health/v1/health.proto");
    let deviceplugin_proto = proto_root.join("deviceplugin/v1beta1/api.proto");
    let registration_proto = proto_root.join("pluginregistration/v1/api.proto");
    let podresources_proto = proto_root.join("podresources/v1/api.proto");
    let podresources_alpha_proto = proto_root.join("podresources/v1alpha1/api.proto");
    let dra_proto = proto_root.join("dra/v1/api.proto");
    let dra_beta_proto = proto_root.join("dra/v1beta1/api.proto");
    let csi_proto = proto_root.join("csi/v1/csi.proto");
    let protos = [
        cri_proto,
        health_proto,
        deviceplugin_proto,
        registration_proto,
        podresources_proto,
        podresources_alpha_proto,
        dra_proto,
        dra_beta_proto,
        csi_proto,
    ];

    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed=build.rs");

    // SAFETY: build scripts are single-threaded; nothing else reads the
    // environment concurrently.
    unsafe {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Server methods the fake does not serve answer UNIMPLEMENTED, as an older runtime would.
        .generate_default_stubs(true)
        // The well-known types' folder, for CSI's `google.protobuf.BoolValue` (prost maps it to `Option<bool>`).
        .compile_protos(&protos, &[proto_root, protoc_bin_vendored::include_path()?])?;

    Ok(())
}

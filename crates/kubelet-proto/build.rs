//! Compiles rkubelet's copy of the CRI `runtime.v1` proto and the gRPC health protocol into Rust
//! (prost messages plus tonic client and server stubs).
//!
//! `protoc` comes from `protoc-bin-vendored`, so no system protoc is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let cri_proto = proto_root.join("cri/runtime/v1/api.proto");
    let health_proto = proto_root.join("grpc/health/v1/health.proto");

    println!("cargo:rerun-if-changed={}", cri_proto.display());
    println!("cargo:rerun-if-changed={}", health_proto.display());
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
        .compile_protos(&[cri_proto, health_proto], &[proto_root])?;

    Ok(())
}

//! The kubelet's device plugin registration service (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go`):
//! `v1beta1.Registration/Register` on `kubelet.sock` in the device plugin folder.
//!
//! A request is checked as upstream (its API version, its resource name), then the plugin's socket is dialled and
//! asked for its options before the answer, so a plugin that registered can be called at once; its device list is
//! then read on a task of its own. Every error goes back to the plugin as upstream's text.

use std::sync::Arc;

use kubelet_proto::deviceplugin::v1beta1 as pb;

use super::DeviceManager;

/// The API versions the kubelet speaks (`SupportedVersions`).
pub const SUPPORTED_VERSIONS: &[&str] = &["v1beta1"];

/// Whether `name` is an extended resource a device plugin may serve (`IsExtendedResourceName`): `domain/name`
/// outside `kubernetes.io/`, not `requests.`-prefixed, and a valid qualified name with `requests.` before it.
pub fn is_extended_resource_name(name: &str) -> bool {
    if !name.contains('/') || name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return false;
    }
    let full = format!("requests.{name}");
    let mut parts = full.splitn(3, '/');
    let (Some(prefix), Some(local), None) = (parts.next(), parts.next(), parts.next()) else { return false };
    is_dns1123_subdomain(prefix) && is_qualified_local_name(local)
}

fn is_dns1123_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

fn is_qualified_local_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Upstream's answer to a request it refuses, or None to go on.
pub fn check(req: &pb::RegisterRequest) -> Option<String> {
    if !SUPPORTED_VERSIONS.contains(&req.version.as_str()) {
        let supported: Vec<String> = SUPPORTED_VERSIONS.iter().map(|v| format!("{v:?}")).collect();
        return Some(format!(
            "requested API version {:?} is not supported by kubelet. Supported version is [{}]",
            req.version,
            supported.join(" ")
        ));
    }
    if !is_extended_resource_name(&req.resource_name) {
        return Some(format!("the ResourceName {:?} is invalid", req.resource_name));
    }
    None
}

/// The gRPC service.
#[derive(Clone)]
pub struct RegistrationServer(pub Arc<DeviceManager>);

#[tonic::async_trait]
impl pb::registration_server::Registration for RegistrationServer {
    async fn register(
        &self,
        req: tonic::Request<pb::RegisterRequest>,
    ) -> Result<tonic::Response<pb::Empty>, tonic::Status> {
        let req = req.into_inner();
        self.0.register(req).await.map(|()| tonic::Response::new(pb::Empty {})).map_err(tonic::Status::unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_checked_as_upstreams_extended_resource_names() {
        for ok in ["example.com/resource", "nvidia.com/gpu", "a.b-c.io/x_y.z", "vendor/thing"] {
            assert!(is_extended_resource_name(ok), "{ok}");
        }
        for bad in [
            "resource",
            "kubernetes.io/thing",
            "foo.kubernetes.io/thing",
            "requests.example.com/x",
            "Example.com/x",
            "example.com/a/b",
            "example.com/-x",
            "example.com/",
        ] {
            assert!(!is_extended_resource_name(bad), "{bad}");
        }
    }

    #[test]
    fn refusals_carry_upstreams_texts() {
        let req = |version: &str, name: &str| pb::RegisterRequest {
            version: version.into(),
            endpoint: "p.sock".into(),
            resource_name: name.into(),
            options: None,
        };
        assert_eq!(
            check(&req("v1alpha", "example.com/r")).unwrap(),
            r#"requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]"#
        );
        assert_eq!(check(&req("v1beta1", "r")).unwrap(), r#"the ResourceName "r" is invalid"#);
        assert!(check(&req("v1beta1", "example.com/r")).is_none());
    }
}

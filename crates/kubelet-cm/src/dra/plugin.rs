//! DRA driver plugins (`pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`): which gRPC service the kubelet speaks
//! with a driver that registers through the plugin manager. A driver lists the services it serves as its
//! "supported versions" (`v1.DRAPlugin`, `v1beta1.DRAPlugin`); the kubelet takes the first of the driver's list that
//! it supports. The handler that registers drivers is [`super::registry::Handler`].

/// The services the kubelet speaks (`servicesSupportedByKubelet`).
pub const SERVICES: &[&str] = &["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// Go's `%q` of a list of strings: `["a" "b"]`.
fn go_quoted(list: &[&str]) -> String {
    let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// The service to call a driver through, from its list (`validateSupportedServices`), with upstream's errors as
/// `ValidatePlugin` wraps them.
pub fn choose_service(driver: &str, endpoint: &str, versions: &[String]) -> Result<&'static str, String> {
    let why = if versions.is_empty() {
        "empty list of supported gRPC services (aka supported versions)".to_string()
    } else if let Some(s) = versions.iter().find_map(|v| SERVICES.iter().find(|s| **s == v.as_str())) {
        return Ok(s);
    } else {
        let theirs: Vec<&str> = versions.iter().map(String::as_str).collect();
        format!(
            "none of services supported by the plugin ({}) are supported by the kubelet ({})",
            go_quoted(&theirs),
            go_quoted(SERVICES)
        )
    };
    Err(format!("invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_first_service_of_the_drivers_list_the_kubelet_speaks_is_taken() {
        assert_eq!(choose_service("d", "/e", &v(&["v1.DRAPlugin", "v1beta1.DRAPlugin"])), Ok("v1.DRAPlugin"));
        assert_eq!(choose_service("d", "/e", &v(&["v2.DRAPlugin", "v1beta1.DRAPlugin"])), Ok("v1beta1.DRAPlugin"));
    }

    #[test]
    fn the_v1_and_v1beta1_claims_have_upstreams_wire_form() {
        use kubelet_proto::dra::{v1, v1beta1};
        use prost::Message;
        let claim = v1::Claim { namespace: "ns".into(), uid: "u".into(), name: "c".into() };
        // Fields 1, 2 and 3 as length-delimited strings, in order.
        assert_eq!(claim.encode_to_vec(), b"\x0a\x02ns\x12\x01u\x1a\x01c");
        let beta = v1beta1::Claim::decode(claim.encode_to_vec().as_slice()).unwrap();
        assert_eq!((beta.namespace.as_str(), beta.uid.as_str(), beta.name.as_str()), ("ns", "u", "c"));
        let dev = v1::Device {
            request_names: vec![],
            pool_name: "p".into(),
            device_name: "d".into(),
            cdi_device_ids: vec!["x=y".into()],
        };
        assert_eq!(dev.encode_to_vec(), b"\x12\x01p\x1a\x01d\x22\x03x=y");
    }

    #[test]
    fn no_or_unknown_services_are_refused_with_upstreams_texts() {
        assert_eq!(
            choose_service("test-driver.cdi.k8s.io", "/p/dra.sock", &[]).unwrap_err(),
            "invalid supported gRPC versions of DRA driver plugin test-driver.cdi.k8s.io at endpoint /p/dra.sock: \
             empty list of supported gRPC services (aka supported versions)"
        );
        assert_eq!(
            choose_service("d", "/e", &v(&["1.0.0"])).unwrap_err(),
            "invalid supported gRPC versions of DRA driver plugin d at endpoint /e: none of services supported by \
             the plugin ([\"1.0.0\"]) are supported by the kubelet ([\"v1.DRAPlugin\" \"v1beta1.DRAPlugin\"])"
        );
    }
}

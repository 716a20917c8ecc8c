//! Table tests for the environment, ported from upstream's cases (`third_party/forked/golang/expansion`
//! expand_test.go, `pkg/kubelet/envvars` envvars_test.go, `kubelet_pods_test.go` TestMakeEnvironmentVariables).

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, Container, EnvFromSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, Pod, PodSpec, ResourceFieldSelector, ResourceRequirements, Secret, SecretKeySelector, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_prober::handlers::expand;

use crate::env::*;

#[test]
fn expansion_as_upstream() {
    let vars: HashMap<&str, &str> =
        [("VAR_A", "A"), ("VAR_B", "B"), ("VAR_C", "C"), ("VAR_REF", "$(VAR_A)"), ("VAR_EMPTY", "")].into();
    let m = |n: &str| vars.get(n).map(|v| v.to_string());
    for (input, want) in [
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
        ("$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"),
        ("$(VAR_DNE)", "$(VAR_DNE)"),
        ("$(VAR_EMPTY)", ""),
        ("$$(VAR_A)", "$(VAR_A)"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("$(VAR_REF)", "$(VAR_A)"),
        ("$(VAR_A", "$(VAR_A"),
        ("$(VAR_A$$", "$(VAR_A$"),
        ("$()", "$()"),
        ("$", "$"),
        ("$x$(VAR_B)", "$xB"),
        ("$é", "$é"),
        ("", ""),
    ] {
        assert_eq!(expand(input, &m), want, "input {input:?}");
    }
}

fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Service {
    Service {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p, proto)| ServicePort {
                        name: (!n.is_empty()).then(|| n.to_string()),
                        port: *p,
                        protocol: (!proto.is_empty()).then(|| proto.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn service_variables_as_upstream() {
    let a = svc("default", "foo-bar", "1.2.3.4", &[("", 8080, "TCP")]);
    let b = svc("default", "abc-123", "5.6.7.8", &[("u-d-p", 8081, "UDP"), ("t-c-p", 8081, "TCP")]);
    let none = svc("default", "headless", "None", &[("", 80, "TCP")]);
    let v6 = svc("default", "super-ipv6", "2001:DB8::", &[("u-d-p", 8084, "UDP"), ("t-c-p", 8084, "TCP")]);
    let got = service_env(&[&a, &b, &none, &v6]);
    let want: Vec<(&str, &str)> = vec![
        ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
        ("FOO_BAR_SERVICE_PORT", "8080"),
        ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
        ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
        ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
        ("ABC_123_SERVICE_HOST", "5.6.7.8"),
        ("ABC_123_SERVICE_PORT", "8081"),
        ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
        ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
        ("ABC_123_PORT", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
        ("ABC_123_PORT_8081_UDP_PORT", "8081"),
        ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
        ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
        ("ABC_123_PORT_8081_TCP_PORT", "8081"),
        ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
        ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
        ("SUPER_IPV6_SERVICE_PORT", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
        ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
        ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
        ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
        ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
    ];
    let got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(got, want);
}

#[derive(Default)]
struct Objects {
    cms: HashMap<String, ConfigMap>,
    secrets: HashMap<String, Secret>,
    services: Vec<Service>,
    /// The Services were not read yet.
    unsynced: bool,
}

#[async_trait]
impl ObjectSource for Objects {
    async fn config_map(&self, _ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        Ok(self.cms.get(name).cloned())
    }
    async fn secret(&self, _ns: &str, name: &str) -> Result<Option<Secret>, String> {
        Ok(self.secrets.get(name).cloned())
    }
    async fn services(&self, ns: &str) -> Result<Vec<Service>, String> {
        Ok(self.services.iter().filter(|s| s.metadata.namespace.as_deref() == Some(ns)).cloned().collect())
    }
    fn services_synced(&self) -> bool {
        !self.unsynced
    }
}

fn value(name: &str, v: &str) -> EnvVar {
    EnvVar { name: name.into(), value: Some(v.into()), ..Default::default() }
}

fn from(name: &str, src: EnvVarSource) -> EnvVar {
    EnvVar { name: name.into(), value_from: Some(src), ..Default::default() }
}

fn field(path: &str) -> EnvVarSource {
    EnvVarSource {
        field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
        ..Default::default()
    }
}

fn test_pod(c: Container, links: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("dapi-test-pod-name".into()),
            namespace: Some("test1".into()),
            uid: Some("u-1".into()),
            labels: Some(BTreeMap::from([("app".into(), "web".into()), ("tier".into(), "front \"end\"".into())])),
            annotations: Some(BTreeMap::from([("a".into(), "1".into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![c],
            node_name: Some("node-name".into()),
            service_account_name: Some("special".into()),
            enable_service_links: Some(links),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn objects() -> Objects {
    let mut o = Objects {
        services: vec![
            svc("default", "kubernetes", "1.2.3.1", &[("", 8081, "TCP")]),
            svc("default", "other", "1.2.3.9", &[("", 80, "TCP")]),
            svc("test1", "test", "1.2.3.3", &[("", 8083, "TCP")]),
        ],
        ..Default::default()
    };
    o.cms.insert(
        "cm".into(),
        ConfigMap {
            data: Some(BTreeMap::from([
                ("REPLACE_ME".into(), "cm-value".into()),
                ("DUPE_TEST".into(), "from-cm".into()),
                ("1bad=key".into(), "x".into()),
            ])),
            ..Default::default()
        },
    );
    o.secrets.insert(
        "sec".into(),
        Secret {
            data: Some(BTreeMap::from([("password".into(), ByteString(b"s3cr3t".to_vec()))])),
            ..Default::default()
        },
    );
    o
}

async fn run(pod: &Pod, o: &Objects) -> Result<Environment, String> {
    let node = NodeFacts {
        host_ips: vec!["192.0.2.10".into(), "2001:db8::10".into()],
        allocatable_milli_cpu: 2000,
        allocatable_memory: 8 << 30,
        allocatable_ephemeral_storage: 100 << 30,
    };
    let ips = vec!["10.88.0.7".to_string()];
    make_environment(EnvInputs {
        pod,
        container: &pod.spec.as_ref().unwrap().containers[0],
        pod_ips: &ips,
        node: &node,
        objects: o,
    })
    .await
}

fn get<'a>(e: &'a Environment, k: &str) -> Option<&'a str> {
    e.vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn environment_as_upstream() {
    let q = |s: &str| Quantity(s.into());
    let c = Container {
        name: "app".into(),
        env_from: Some(vec![EnvFromSource {
            prefix: Some("P_".into()),
            config_map_ref: Some(ConfigMapEnvSource { name: "cm".into(), optional: None }),
            ..Default::default()
        }]),
        env: Some(vec![
            value("FOO", "bar"),
            value("EXPANDED", "$(FOO)-$(P_REPLACE_ME)-$(TEST_SERVICE_HOST)-$$(FOO)-$(MISSING)"),
            value("TEST_SERVICE_HOST", "overridden"),
            from("POD_NAME", field("metadata.name")),
            from("POD_NAMESPACE", field("metadata.namespace")),
            from("POD_UID", field("metadata.uid")),
            from("NODE", field("spec.nodeName")),
            from("SA", field("spec.serviceAccountName")),
            from("HOST_IP", field("status.hostIP")),
            from("HOST_IPS", field("status.hostIPs")),
            from("POD_IP", field("status.podIP")),
            from("LABEL", field("metadata.labels['app']")),
            from("LABELS", field("metadata.labels")),
            from("ANNOTATION", field("metadata.annotations['a']")),
            from(
                "CPU_LIMIT",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.cpu".into(),
                        divisor: Some(q("1m")),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "CPU_REQUEST",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "requests.cpu".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "MEM_LIMIT_MI",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.memory".into(),
                        divisor: Some(q("1Mi")),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
            from(
                "CM_KEY",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "cm".into(),
                        key: "DUPE_TEST".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ),
            from(
                "OPTIONAL_MISSING",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "nope".into(),
                        key: "x".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                },
            ),
            from(
                "PASSWORD",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "password".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".into(), q("250m"))])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pod = test_pod(c, true);
    let e = run(&pod, &objects()).await.unwrap();
    assert_eq!(get(&e, "EXPANDED"), Some("bar-cm-value-1.2.3.3-$(FOO)-$(MISSING)"));
    assert_eq!(get(&e, "TEST_SERVICE_HOST"), Some("overridden"), "the pod's own variable wins over a service link");
    assert_eq!(get(&e, "TEST_SERVICE_PORT"), Some("8083"));
    assert_eq!(get(&e, "KUBERNETES_SERVICE_HOST"), Some("1.2.3.1"));
    assert_eq!(get(&e, "OTHER_SERVICE_HOST"), None, "only the kubernetes service of another namespace");
    assert_eq!(get(&e, "P_REPLACE_ME"), Some("cm-value"));
    assert_eq!(e.invalid, vec![("configMap test1/cm".to_string(), vec!["P_1bad=key".to_string()])]);
    for (k, v) in [
        ("POD_NAME", "dapi-test-pod-name"),
        ("POD_NAMESPACE", "test1"),
        ("POD_UID", "u-1"),
        ("NODE", "node-name"),
        ("SA", "special"),
        ("HOST_IP", "192.0.2.10"),
        ("HOST_IPS", "192.0.2.10,2001:db8::10"),
        ("POD_IP", "10.88.0.7"),
        ("LABEL", "web"),
        ("LABELS", "app=\"web\"\ntier=\"front \\\"end\\\"\""),
        ("ANNOTATION", "1"),
        ("CPU_LIMIT", "2000"),
        ("CPU_REQUEST", "1"),
        ("MEM_LIMIT_MI", "8192"),
        ("CM_KEY", "from-cm"),
        ("PASSWORD", "s3cr3t"),
    ] {
        assert_eq!(get(&e, k), Some(v), "{k}");
    }
    assert_eq!(get(&e, "OPTIONAL_MISSING"), None);

    // Without service links only the master service is there.
    let e = run(&test_pod(Container { name: "app".into(), ..Default::default() }, false), &objects()).await.unwrap();
    assert_eq!(get(&e, "KUBERNETES_SERVICE_HOST"), Some("1.2.3.1"));
    assert_eq!(get(&e, "TEST_SERVICE_HOST"), None);
}

#[tokio::test]
async fn missing_required_references_fail_with_upstreams_messages() {
    let cases: Vec<(EnvVar, &str)> = vec![
        (
            from(
                "A",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "nope".into(),
                        key: "k".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            ),
            "configmap \"nope\" not found",
        ),
        (
            from(
                "A",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "cm".into(),
                        key: "k".into(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                },
            ),
            "couldn't find key k in ConfigMap test1/cm",
        ),
        (
            from(
                "A",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: "sec".into(), key: "k".into(), optional: None }),
                    ..Default::default()
                },
            ),
            "couldn't find key k in Secret test1/sec",
        ),
        (
            from(
                "A",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector { name: "gone".into(), key: "k".into(), optional: None }),
                    ..Default::default()
                },
            ),
            "secret \"gone\" not found",
        ),
    ];
    for (var, want) in cases {
        let pod = test_pod(Container { name: "app".into(), env: Some(vec![var]), ..Default::default() }, true);
        assert_eq!(run(&pod, &objects()).await, Err(want.to_string()));
    }
    // Standalone: a reference cannot be resolved and says why.
    let pod = test_pod(
        Container {
            name: "app".into(),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource { name: "cm".into(), optional: None }),
                ..Default::default()
            }]),
            ..Default::default()
        },
        true,
    );
    let node = NodeFacts::default();
    let err = make_environment(EnvInputs {
        pod: &pod,
        container: &pod.spec.as_ref().unwrap().containers[0],
        pod_ips: &[],
        node: &node,
        objects: &NoObjects,
    })
    .await
    .unwrap_err();
    assert!(err.contains("no apiserver"), "{err}");
}

/// An apiserver that cannot be reached.
struct Down;

#[async_trait]
impl ObjectSource for Down {
    async fn config_map(&self, _ns: &str, _name: &str) -> Result<Option<ConfigMap>, String> {
        Err("apiserver unavailable".into())
    }
    async fn secret(&self, _ns: &str, _name: &str) -> Result<Option<Secret>, String> {
        Err("apiserver unavailable".into())
    }
    async fn services(&self, _ns: &str) -> Result<Vec<Service>, String> {
        Err("failed to list services when setting up env vars: apiserver unavailable".into())
    }
}

#[tokio::test]
async fn static_pods_start_without_service_links_when_the_apiserver_is_down() {
    let mut pod =
        test_pod(Container { name: "app".into(), env: Some(vec![value("A", "1")]), ..Default::default() }, true);
    let node = NodeFacts::default();
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    fn inputs<'a>(p: &'a Pod, c: &'a Container, node: &'a NodeFacts) -> EnvInputs<'a> {
        EnvInputs { pod: p, container: c, pod_ips: &[], node, objects: &Down }
    }
    let err = make_environment(inputs(&pod, &c, &node)).await.unwrap_err();
    assert!(err.starts_with("failed to list services"), "an API pod waits for the services: {err}");
    pod.metadata.annotations = Some(BTreeMap::from([("kubernetes.io/config.source".into(), "file".into())]));
    let e = make_environment(inputs(&pod, &c, &node)).await.unwrap();
    assert_eq!(e.vars, vec![("A".to_string(), "1".to_string())]);
}

#[tokio::test]
async fn a_pod_from_the_apiserver_waits_until_the_services_were_read_and_a_static_pod_does_not() {
    let objects = Objects { unsynced: true, ..objects() };
    let mut pod =
        test_pod(Container { name: "app".into(), env: Some(vec![value("A", "1")]), ..Default::default() }, true);
    let node = NodeFacts::default();
    let c = pod.spec.as_ref().unwrap().containers[0].clone();
    let env = |pod: Pod| {
        let (c, node, objects) = (&c, &node, &objects);
        async move { make_environment(EnvInputs { pod: &pod, container: c, pod_ips: &[], node, objects }).await }
    };
    let err = env(pod.clone()).await.unwrap_err();
    assert_eq!(err, "services have not yet been read at least once, cannot construct envvars");
    pod.metadata.annotations = Some(BTreeMap::from([("kubernetes.io/config.source".into(), "file".into())]));
    let e = env(pod).await.unwrap();
    let names: Vec<&str> = e.vars.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"A"), "{names:?}");
    assert!(names.contains(&"TEST_SERVICE_HOST"), "a static pod gets what was read so far: {names:?}");
}

#[test]
fn a_missing_limit_is_the_pod_level_one_before_the_nodes_allocatable() {
    let node = NodeFacts {
        host_ips: vec![],
        allocatable_milli_cpu: 2000,
        allocatable_memory: 8 << 30,
        allocatable_ephemeral_storage: 100 << 30,
    };
    let c = Container { name: "app".into(), ..Default::default() };
    let limits = BTreeMap::from([("memory".to_string(), Quantity("64Mi".into()))]);
    let pod = Pod {
        spec: Some(PodSpec {
            resources: Some(ResourceRequirements { limits: Some(limits), ..Default::default() }),
            containers: vec![c.clone()],
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(resource_value(&pod, &c, "limits.memory", Some("1Mi"), &node).unwrap(), "64");
    assert_eq!(resource_value(&pod, &c, "limits.cpu", None, &node).unwrap(), "2", "no pod-level cpu: allocatable");
    let plain = Pod { spec: Some(PodSpec { containers: vec![c.clone()], ..Default::default() }), ..Default::default() };
    assert_eq!(resource_value(&plain, &c, "limits.memory", Some("1Mi"), &node).unwrap(), "8192");
}

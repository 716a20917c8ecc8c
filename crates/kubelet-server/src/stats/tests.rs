use super::*;

pub(crate) struct FixedStats(pub Summary);

#[async_trait]
impl StatsProvider for FixedStats {
    async fn summary(&self, only: bool) -> Result<Summary, HostError> {
        if self.0.node.node_name == "broken" {
            return Err(HostError::Other("failed to get root cgroup stats: boom".into()));
        }
        let mut s = self.0.clone();
        if only {
            s.node.fs = None;
        }
        Ok(s)
    }
}

fn t(s: &str) -> Time {
    Time::at(DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc))
}

pub(crate) fn sample() -> Summary {
    let cpu = |n: u64| {
        Some(CpuStats {
            time: t("2026-01-02T03:04:05.6Z"),
            usage_nano_cores: None,
            usage_core_nano_seconds: Some(n),
            psi: None,
        })
    };
    let mem = |w: u64| {
        Some(MemoryStats { time: t("2026-01-02T03:04:05.6Z"), working_set_bytes: Some(w), ..Default::default() })
    };
    Summary {
        node: NodeStats {
            node_name: "node-a".into(),
            start_time: t("2026-01-01T00:00:00Z"),
            cpu: cpu(2_500_000_000),
            memory: mem(1 << 30),
            fs: Some(FsStats { time: t("2026-01-02T03:04:05Z"), capacity_bytes: Some(100), ..Default::default() }),
            network: Some(NetworkStats {
                time: t("2026-01-02T03:04:05Z"),
                default: InterfaceStats::default(),
                interfaces: vec![InterfaceStats { name: "ens3".into(), rx_bytes: Some(7), ..Default::default() }],
            }),
            ..Default::default()
        },
        pods: Some(vec![PodStats {
            pod_ref: PodReference { name: "web".into(), namespace: "default".into(), uid: "u1".into() },
            start_time: t("2026-01-02T00:00:00Z"),
            containers: Some(vec![
                ContainerStats {
                    name: "b".into(),
                    start_time: t("2026-01-02T00:00:01Z"),
                    cpu: cpu(1_000_000),
                    memory: mem(2048),
                    ..Default::default()
                },
                ContainerStats {
                    name: "a".into(),
                    start_time: t("2026-01-02T00:00:01Z"),
                    cpu: cpu(3_000_000),
                    memory: None,
                    ..Default::default()
                },
            ]),
            cpu: cpu(4_000_000),
            memory: mem(4096),
            ..Default::default()
        }]),
    }
}

#[test]
fn summary_json_has_the_v1alpha1_shape() {
    let v = serde_json::to_value(sample()).unwrap();
    assert_eq!(v["node"]["nodeName"], "node-a");
    assert_eq!(v["node"]["startTime"], "2026-01-01T00:00:00Z");
    assert_eq!(v["node"]["cpu"]["time"], "2026-01-02T03:04:05Z", "whole seconds, as metav1.Time");
    assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 2_500_000_000u64);
    assert!(v["node"]["cpu"].get("usageNanoCores").is_none(), "omitted until two samples exist");
    assert!(v["node"].get("systemContainers").is_none());
    assert_eq!(v["node"]["network"]["name"], "", "the inline default interface is always named");
    assert_eq!(v["node"]["network"]["interfaces"][0], serde_json::json!({"name": "ens3", "rxBytes": 7}));
    let pod = &v["pods"][0];
    assert_eq!(pod["podRef"], serde_json::json!({"name": "web", "namespace": "default", "uid": "u1"}));
    assert!(pod.get("volume").is_none() && pod.get("ephemeral-storage").is_none());
    assert_eq!(serde_json::to_value(Summary::default()).unwrap()["pods"], serde_json::Value::Null);
    assert_eq!(serde_json::to_value(Time::default()).unwrap(), serde_json::Value::Null);
}

#[test]
fn resource_metrics_carry_stats_timestamps_and_upstream_names() {
    let text = resource_metrics(Ok(&sample()));
    let expected = "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"a\",namespace=\"default\",pod=\"web\"} 0.003 1767323045600
container_cpu_usage_seconds_total{container=\"b\",namespace=\"default\",pod=\"web\"} 0.001 1767323045600
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"b\",namespace=\"default\",pod=\"web\"} 2048 1767323045600
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"a\",namespace=\"default\",pod=\"web\"} 1.767312001e+09
container_start_time_seconds{container=\"b\",namespace=\"default\",pod=\"web\"} 1.767312001e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 2.5 1767323045600
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.073741824e+09 1767323045600
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 0.004 1767323045600
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 4096 1767323045600
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";
    assert_eq!(text, expected);
    let failed = resource_metrics(Err(&HostError::Other("x".into())));
    assert!(failed.ends_with("resource_scrape_error 1\n"), "{failed}");
    assert!(!failed.contains("node_cpu"));
}

#[tokio::test]
async fn summary_endpoint_answers_get_and_post_and_reports_errors() {
    use crate::handlers::tests::{FakeHost, call, handlers};
    use crate::handlers::{Auth, secure_router};
    let auth = || {
        std::sync::Arc::new(Auth {
            authenticator: crate::auth::Authenticator { anonymous: true, webhook: None },
            authorizer: crate::auth::Authorizer::AlwaysAllow,
            node_name: "node-a".into(),
        })
    };
    let r = secure_router(handlers(std::sync::Arc::new(FakeHost::default()), true), auth());
    let none = crate::auth::PeerCert::None;
    let (code, body) = call(&r, "GET", "/stats/summary", none.clone(), &[]).await;
    assert_eq!(code, 200);
    assert!(body.contains("\"fs\""));
    let (code, body) = call(&r, "POST", "/stats/summary?only_cpu_and_memory=true", none.clone(), &[]).await;
    assert_eq!(code, 200);
    assert!(!body.contains("\"fs\""), "cpu and memory only");
    let (_, body) =
        call(&r, "GET", "/stats/summary?only_cpu_and_memory=true&only_cpu_and_memory=true", none.clone(), &[]).await;
    assert!(body.contains("\"fs\""), "only exactly one value 'true' counts");
    let (code, body) = call(&r, "GET", "/metrics/resource", none.clone(), &[]).await;
    assert_eq!(code, 200);
    assert!(body.contains("node_memory_working_set_bytes 1.073741824e+09 "), "{body}");
    let mut h = handlers(std::sync::Arc::new(FakeHost::default()), true);
    let mut broken = sample();
    broken.node.node_name = "broken".into();
    h.stats = std::sync::Arc::new(FixedStats(broken));
    let r = secure_router(h, auth());
    assert_eq!(
        call(&r, "GET", "/stats/summary", none.clone(), &[]).await,
        (500, "Internal Error: failed to get root cgroup stats: boom".into())
    );
    assert!(call(&r, "GET", "/metrics/resource", none, &[]).await.1.ends_with("resource_scrape_error 1\n"));
}

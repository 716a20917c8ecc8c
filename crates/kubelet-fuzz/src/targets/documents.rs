//! Documents: the `KubeletConfiguration` file, static pod manifests (a file, a URL's Pod or PodList) and a pod
//! judged against a node (selectors, affinity expressions, tolerations, requests, host ports). Each starts from a
//! valid document that exercises most fields ([`base_config`], [`base_pod`], [`base_node`]), mutated at random
//! places and printed as JSON or YAML ([`crate::strategies::Doc`]), besides arbitrary text.

use std::sync::Arc;

use kubelet_types::Pod;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::engine::run;
use crate::strategies::{any_text, doc, text_from};
use crate::{Options, Report};

/// A configuration that sets most fields, valid.
pub fn base_config() -> Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "syncFrequency": "1m0s", "fileCheckFrequency": "20s", "httpCheckFrequency": "20s",
        "address": "0.0.0.0", "port": 10250, "readOnlyPort": 10255,
        "staticPodPath": "/etc/kubernetes/manifests", "staticPodURL": "http://127.0.0.1/pods",
        "staticPodURLHeader": {"X-A": ["a"]},
        "authentication": {"anonymous": {"enabled": false}, "webhook": {"enabled": true, "cacheTTL": "2m0s"},
            "x509": {"clientCAFile": "ca.crt"}},
        "authorization": {"mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}},
        "registryPullQPS": 5, "registryBurst": 10, "eventRecordQPS": 50, "eventBurst": 100,
        "enableDebuggingHandlers": true, "healthzPort": 10248, "healthzBindAddress": "127.0.0.1",
        "oomScoreAdj": -999, "clusterDomain": "cluster.local", "clusterDNS": ["10.96.0.10"],
        "streamingConnectionIdleTimeout": "4h0m0s", "nodeStatusUpdateFrequency": "10s",
        "nodeStatusReportFrequency": "5m0s", "nodeLeaseDurationSeconds": 40,
        "imageMinimumGCAge": "2m0s", "imageMaximumGCAge": "0s",
        "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80, "volumeStatsAggPeriod": "1m0s",
        "cgroupsPerQOS": true, "cgroupDriver": "cgroupfs", "cpuManagerPolicy": "none",
        "cpuManagerReconcilePeriod": "10s", "memoryManagerPolicy": "None", "topologyManagerPolicy": "none",
        "runtimeRequestTimeout": "2m0s", "hairpinMode": "promiscuous-bridge", "maxPods": 110, "podPidsLimit": -1,
        "resolvConf": "/etc/resolv.conf", "cpuCFSQuota": true, "cpuCFSQuotaPeriod": "100ms",
        "maxOpenFiles": 1000000, "kubeAPIQPS": 50, "kubeAPIBurst": 100, "serializeImagePulls": true,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
        "evictionSoft": {"memory.available": "200Mi"}, "evictionSoftGracePeriod": {"memory.available": "1m30s"},
        "evictionPressureTransitionPeriod": "5m0s", "evictionMaxPodGracePeriod": 30,
        "evictionMinimumReclaim": {"memory.available": "0Mi"},
        "makeIPTablesUtilChains": true, "iptablesMasqueradeBit": 14, "iptablesDropBit": 15,
        "featureGates": {"AllAlpha": false}, "failSwapOn": true, "containerLogMaxSize": "10Mi",
        "containerLogMaxFiles": 5, "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "kubeReserved": {"cpu": "100m"}, "reservedSystemCPUs": "0-1", "enforceNodeAllocatable": ["pods"],
        "allowedUnsafeSysctls": ["net.*"], "logging": {"format": "text", "flushFrequency": "5s", "verbosity": 0},
        "enableSystemLogHandler": true, "shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "10s",
        "memoryThrottlingFactor": 0.9, "registerWithTaints": [{"key": "a", "value": "b", "effect": "NoSchedule"}],
        "registerNode": true, "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "containerLogMaxWorkers": 1, "containerLogMonitorInterval": "10s", "podLogsDir": "/var/log/pods",
    })
}

const CONFIG_KEYS: &[&str] = &[
    "syncFrequency",
    "address",
    "port",
    "staticPodURLHeader",
    "authentication",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMinimumReclaim",
    "featureGates",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "reservedMemory",
    "tracing",
    "logging",
    "memorySwap",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "allowedUnsafeSysctls",
    "tlsCipherSuites",
    "tlsMinVersion",
    "clusterDNS",
    "providerID",
    "unknownField",
    "apiVersion",
    "kind",
];

/// A pod that sets most fields the kubelet reads, valid as a static pod.
pub fn base_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}, "annotations": {"a": "b"}},
        "spec": {
            "containers": [{
                "name": "app", "image": "localhost/busybox:1", "command": ["sleep", "3600"], "args": ["a"],
                "workingDir": "/",
                "ports": [{"name": "http", "containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "b"},
                    {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                    "limits": {"cpu": "1", "memory": "128Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                    {"name": "cfg", "mountPath": "/cfg", "readOnly": true}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 80, "httpHeaders": [{"name": "X", "value": "y"}]},
                    "initialDelaySeconds": 1, "periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3},
                "readinessProbe": {"exec": {"command": ["true"]}},
                "startupProbe": {"tcpSocket": {"port": "http"}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
                "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true,
                    "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
                "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"
            }],
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "cfg", "hostPath": {"path": "/etc/cfg", "type": "Directory"}},
                {"name": "dw", "downwardAPI": {"items": [{"path": "labels",
                    "fieldRef": {"fieldPath": "metadata.labels"}}], "defaultMode": 420}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "activeDeadlineSeconds": 600,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute",
                "tolerationSeconds": 30}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                    {"key": "cores", "operator": "Gt", "values": ["1"]}],
                 "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}}},
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["foo"]}],
            "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["a.b"], "options": [{"name": "ndots", "value": "2"}]},
            "securityContext": {"fsGroup": 2000, "sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}],
                "supplementalGroups": [1]},
            "hostname": "web", "subdomain": "sub"
        }
    })
}

const POD_KEYS: &[&str] = &[
    "metadata",
    "spec",
    "name",
    "generateName",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "resources",
    "requests",
    "limits",
    "claims",
    "ports",
    "hostPort",
    "env",
    "envFrom",
    "valueFrom",
    "fieldRef",
    "resourceFieldRef",
    "divisor",
    "probe",
    "httpGet",
    "grpc",
    "port",
    "sizeLimit",
    "secret",
    "configMap",
    "projected",
    "serviceAccountToken",
    "expirationSeconds",
    "overhead",
    "priority",
    "os",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "restartPolicy",
    "resizePolicy",
    "tolerations",
    "tolerationSeconds",
    "affinity",
    "nodeSelector",
    "topologySpreadConstraints",
    "readinessGates",
    "schedulingGates",
    "hostUsers",
    "sysctls",
    "items",
    "kind",
    "hugepages-2Mi",
    "hugepages-",
    "cpu",
    "memory",
    "ephemeral-storage",
    "example.com/gpu",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/app",
    "controller.kubernetes.io/pod-deletion-cost",
    "kubernetes.io/config.mirror",
    "localhostProfile",
    "appArmorProfile",
    "seccompProfile",
    "fsGroupChangePolicy",
    "subPath",
    "subPathExpr",
    "mountPropagation",
    "preStop",
    "postStart",
];

/// A node with labels, taints and capacity for [`base_pod`].
pub fn base_node() -> Value {
    json!({
        "metadata": {"name": "node-a", "labels": {"zone": "a", "cores": "4", "kubernetes.io/os": "linux"}},
        "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoExecute"},
            {"key": "t", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi",
            "example.com/gpu": "2"},
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    })
}

fn document(base: fn() -> Value, keys: &'static [&'static str]) -> BoxedStrategy<String> {
    let b = base();
    prop_oneof![
        8 => doc(keys).prop_map(move |d| d.render(&b)),
        1 => text_from(&["apiVersion: v1\n", "kind: Pod\n", "{", "}", "[", "]", ": ", "- ", "\n", "  ", "\"", "&a", "*a"]),
        1 => any_text(),
    ]
    .boxed()
}

/// The configuration file: parsing, defaults, relative paths, the eviction defaults and validation.
pub(crate) fn kubelet_config(o: &Options) -> Report {
    use kubelet_config::kubelet_config::from_yaml_str;
    run(
        "kubelet-config",
        o,
        document(base_config, CONFIG_KEYS),
        Arc::new(|s: &String| {
            let Ok(mut c) = from_yaml_str(s, "fuzz.yaml") else { return Ok(()) };
            c.set_defaults();
            c.resolve_relative_paths(std::path::Path::new("/etc/kubernetes"));
            c.apply_default_eviction_hard();
            let _ = c.validate();
            let _ = serde_json::to_string(&c);
            Ok(())
        }),
    )
}

/// A static pod file: decoding, defaults, normalisation and validation; an accepted pod has a name, a
/// namespace and a UID.
pub(crate) fn static_pod_file(o: &Options) -> Report {
    use kubelet_config::sources::manifest::static_pod_from_file;
    run(
        "static-pod-file",
        o,
        document(base_pod, POD_KEYS),
        Arc::new(|s: &String| {
            let Ok(p) = static_pod_from_file(s, "/etc/kubernetes/manifests/fuzz.yaml", "node-a") else { return Ok(()) };
            let m = &p.metadata;
            if [&m.name, &m.namespace, &m.uid].iter().any(|v| v.as_deref().unwrap_or("").is_empty()) {
                return Err(format!("accepted a pod without name, namespace or UID: {m:?}"));
            }
            Ok(())
        }),
    )
}

fn base_pod_list() -> Value {
    let mut second = base_pod();
    second["metadata"]["name"] = json!("db");
    json!({"apiVersion": "v1", "kind": "PodList", "items": [base_pod(), second]})
}

/// A static pod URL's body (Pod or PodList).
pub(crate) fn static_pod_url(o: &Options) -> Report {
    use kubelet_config::sources::http::pods_from_body;
    let body = prop_oneof![3 => document(base_pod_list, POD_KEYS), 1 => document(base_pod, POD_KEYS)];
    run(
        "static-pod-url",
        o,
        body,
        Arc::new(|s: &String| {
            let _ = pods_from_body(s, "http://127.0.0.1:8080/pods", "node-a");
            Ok(())
        }),
    )
}

/// A pod and a node as JSON.
#[derive(Clone, Debug)]
pub(crate) struct PodOnNode {
    pod: String,
    node: String,
}

/// The admission predicates of a pod on a node (selectors, affinity expressions, tolerations, requests).
pub(crate) fn pod_admission(o: &Options) -> Report {
    let (pod, node) = (base_pod(), base_node());
    let input = (doc(POD_KEYS), doc(POD_KEYS)).prop_map(move |(p, n)| {
        let (mut p, mut n) = (p, n);
        // JSON only: the YAML printers are covered by the manifest targets, and the typed decoding is the point.
        p.format = crate::strategies::DocFormat::Json;
        n.format = crate::strategies::DocFormat::Json;
        p.edits.clear();
        n.edits.clear();
        PodOnNode { pod: p.render(&pod), node: n.render(&node) }
    });
    run(
        "pod-admission",
        o,
        input,
        Arc::new(|i: &PodOnNode| {
            let (Ok(pod), Ok(node)) = (serde_json::from_str::<Pod>(&i.pod), serde_json::from_str(&i.node)) else {
                return Ok(());
            };
            let others = [Arc::new(pod.clone())];
            let _ = kubelet::predicate::admit_on(&pod, &others, &node);
            Ok(())
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_documents_are_valid() {
        let text = serde_json::to_string(&base_config()).unwrap();
        let mut c = kubelet_config::kubelet_config::from_yaml_str(&text, "base").unwrap();
        c.set_defaults();
        c.validate().unwrap();
        let pod = serde_json::to_string(&base_pod()).unwrap();
        kubelet_config::sources::manifest::static_pod_from_file(&pod, "/m/base.yaml", "node-a").unwrap();
        let yaml = crate::strategies::to_yaml(&base_pod(), &[]);
        kubelet_config::sources::manifest::static_pod_from_file(&yaml, "/m/base.yaml", "node-a").unwrap();
        let list = serde_json::to_string(&base_pod_list()).unwrap();
        assert_eq!(kubelet_config::sources::http::pods_from_body(&list, "http://x/", "node-a").unwrap().len(), 2);
        let pod: Pod = serde_json::from_value(base_pod()).unwrap();
        let node = serde_json::from_value(base_node()).unwrap();
        assert_eq!(kubelet::predicate::admit_on(&pod, &[], &node), None);
    }
}

//! Rule families of [`super::validate_static_pod`], with upstream's messages (`validation_test.go`).

use k8s_openapi::api::core::v1::Pod;

use super::validate_static_pod;
use crate::sources::manifest::{ManifestError, static_pod_from_file};

const BASE: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: kube-system\nspec:\n  containers:\n  - name: app\n    image: busybox\n";

/// The errors of a manifest, as strings.
fn errors(manifest: &str) -> Vec<String> {
    match static_pod_from_file(manifest, "/m/web.yaml", "node1") {
        Ok(_) => vec![],
        Err(ManifestError::Invalid { errors, .. }) => errors.iter().map(|e| e.to_string()).collect(),
        Err(e) => vec![e.to_string()],
    }
}

fn with(extra_container: &str, extra_spec: &str) -> String {
    format!("{BASE}{extra_container}{extra_spec}")
}

#[test]
fn a_valid_pod_has_no_errors() {
    let m = with(
        "    ports:\n    - containerPort: 80\n      name: http\n    env:\n    - name: A\n      value: x\n    - name: NODE\n      valueFrom:\n        fieldRef:\n          fieldPath: spec.nodeName\n    resources:\n      limits:\n        memory: 128Mi\n        cpu: 1\n      requests:\n        cpu: 100m\n    volumeMounts:\n    - name: data\n      mountPath: /data\n    livenessProbe:\n      httpGet:\n        port: 80\n    readinessProbe:\n      tcpSocket:\n        port: http\n",
        "  volumes:\n  - name: data\n    hostPath:\n      path: /var/data\n      type: DirectoryOrCreate\n  - name: cfg\n    downwardAPI:\n      defaultMode: 0644\n      items:\n      - path: name\n        fieldRef:\n          fieldPath: metadata.name\n",
    );
    assert_eq!(errors(&m), Vec::<String>::new());
}

#[test]
fn metadata() {
    let m = BASE.replace("  namespace: kube-system\n", "  namespace: Kube\n  labels:\n    'a/b/c': x\n");
    assert_eq!(
        errors(&m),
        vec![
            "metadata.namespace: Invalid value: \"Kube\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "metadata.labels: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ]
    );
    let e = static_pod_from_file(&BASE.replace("  name: web\n", ""), "/m/x.yaml", "n").unwrap_err();
    assert_eq!(e.to_string(), "/m/x.yaml: invalid pod: name is needed for the pod");
}

#[test]
fn containers() {
    let m = BASE.replace(
        "  - name: app\n    image: busybox\n",
        "  - name: app\n    image: busybox\n    imagePullPolicy: Sometimes\n    terminationMessagePolicy: Nope\n    ports:\n    - containerPort: 70000\n      protocol: ICMP\n  - name: app\n  initContainers:\n  - name: app\n    image: x\n    restartPolicy: Never\n    livenessProbe:\n      exec:\n        command: [x]\n",
    );
    assert_eq!(
        errors(&m),
        vec![
            "spec.containers[0].terminationMessagePolicy: Unsupported value: \"Nope\": supported values: \"File\", \"FallbackToLogsOnError\"",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            "spec.containers[1].image: Required value",
            "spec.containers[1].name: Duplicate value: \"app\"",
            "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            "spec.initContainers[0].name: Duplicate value: \"app\"",
            "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ]
    );
}

#[test]
fn env_and_mounts() {
    let m = with(
        "    env:\n    - name: 1BAD\n    - name: B\n      value: v\n      valueFrom:\n        secretKeyRef:\n          name: s\n          key: k\n    envFrom:\n    - prefix: '9'\n    volumeMounts:\n    - name: missing\n      mountPath: /a\n    - name: v\n      mountPath: /a\n      subPath: ../x\n",
        "  volumes:\n  - name: v\n    emptyDir: {}\n",
    );
    assert_eq!(
        errors(&m),
        vec![
            "spec.containers[0].env[0].name: Invalid value: \"1BAD\": a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')",
            "spec.containers[0].env[1].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
            "spec.containers[0].envFrom[0].prefix: Invalid value: \"9\": a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')",
            "spec.containers[0].envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`",
            "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
            "spec.containers[0].volumeMounts.subPath: Invalid value: \"../x\": must not contain '..'",
        ]
    );
}

#[test]
fn probes_and_lifecycle() {
    let m = with(
        "    livenessProbe:\n      successThreshold: 2\n      exec:\n        command: [a]\n      tcpSocket:\n        port: 80\n    startupProbe:\n      periodSeconds: -1\n    lifecycle:\n      preStop:\n        sleep:\n          seconds: 100\n",
        "",
    );
    assert_eq!(
        errors(&m),
        vec![
            "spec.containers[0].lifecycle.preStop.sleep: Invalid value: 100: must be greater than 0 and less than terminationGracePeriodSeconds (30). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep.",
            "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
            "spec.containers[0].startupProbe: Required value: must specify a handler type",
            "spec.containers[0].startupProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
        ]
    );
}

#[test]
fn volumes() {
    let m = with(
        "",
        "  volumes:\n  - name: Bad_Name\n    emptyDir:\n      sizeLimit: -1Gi\n  - name: h\n    hostPath:\n      path: ''\n  - name: t\n    hostPath:\n      path: /x\n      type: Weird\n  - name: two\n    emptyDir: {}\n    hostPath:\n      path: /y\n  - name: s\n    secret:\n      secretName: s\n      defaultMode: 01000\n      items:\n      - key: k\n        path: /abs\n",
    );
    assert_eq!(
        errors(&m),
        vec![
            "spec.volumes[0].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity",
            "spec.volumes[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.volumes[1].hostPath.path: Required value",
            "spec.volumes[2].hostPath.type: Unsupported value: \"Weird\": supported values: \"\", \"BlockDevice\", \"CharDevice\", \"Directory\", \"DirectoryOrCreate\", \"File\", \"FileOrCreate\", \"Socket\"",
            "spec.volumes[3].hostPath: Forbidden: may not specify more than 1 volume type",
            "spec.volumes[4].secret.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
            "spec.volumes[4].secret.items[0].path: Invalid value: \"/abs\": must be a relative path",
        ]
    );
}

#[test]
fn pod_spec_fields() {
    let m = with(
        "    ports:\n    - containerPort: 80\n      hostPort: 8080\n",
        "  hostNetwork: true\n  restartPolicy: Sometimes\n  dnsPolicy: None\n  activeDeadlineSeconds: 0\n  hostname: My_Host\n  tolerations:\n  - operator: Equal\n    value: x\n  os:\n    name: plan9\n  securityContext:\n    fsGroupChangePolicy: Never\n    sysctls:\n    - name: net.ipv4.ip_forward\n      value: '1'\n  hostAliases:\n  - ip: not-an-ip\n  overhead:\n    cpu: lots\n",
    );
    assert_eq!(
        errors(&m),
        vec![
            "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            "spec.securityContext.sysctls[0].name: Invalid value: \"net.ipv4.ip_forward\": may not be specified when 'hostNetwork' is true",
            "spec.securityContext.fsGroupChangePolicy: Unsupported value: \"Never\": supported values: \"Always\", \"OnRootMismatch\"",
            "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None",
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
            "spec.hostname: Invalid value: \"My_Host\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            "spec.hostAliases[0].ip: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            "spec.overhead.limits[cpu]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            "spec.os: Unsupported value: \"plan9\": supported values: \"linux\", \"windows\"",
        ]
    );
}

#[test]
fn memory_lots_is_refused_naming_the_file_and_the_field() {
    let m = with("    resources:\n      limits:\n        memory: lots\n", "");
    let e = static_pod_from_file(&m, "/etc/kubernetes/manifests/web.yaml", "node1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/kubernetes/manifests/web.yaml: invalid pod: [spec.containers[0].resources.limits[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$']"
    );
    let pod = e.pod().unwrap();
    assert_eq!((pod.name.as_deref(), pod.namespace.as_deref()), (Some("web-node1"), Some("kube-system")));
}

#[test]
fn accepted_pods_are_kept_without_the_defaults_validation_applies() {
    let pod: Pod = static_pod_from_file(
        &with(
            "    resources:\n      limits:\n        cpu: 1\n    livenessProbe:\n      exec:\n        command: [a]\n",
            "",
        ),
        "/m/web.yaml",
        "node1",
    )
    .unwrap();
    assert!(validate_static_pod(&pod).is_empty());
    let c = &pod.spec.as_ref().unwrap().containers[0];
    // The defaults validation needs are applied to a copy: the UID hashed from the pod does not change.
    assert!(c.resources.as_ref().unwrap().requests.is_none());
    assert_eq!(c.liveness_probe.as_ref().unwrap().period_seconds, None);
}

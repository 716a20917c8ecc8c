//! The targets, one module per family of input: small values (durations, quantities, CPU sets, labels,
//! thresholds), documents (the configuration file, static pod manifests, pods against a node), pods against the CRI
//! requests built for them, the kubelet API (paths, queries, headers, CRI log files) and the host's files (kernel
//! log, resolv.conf, `/proc`, cgroups).

mod documents;
mod host;
mod pods;
mod server;
mod values;

use crate::Target;

/// Every target, cheap ones first.
pub(crate) static ALL: &[Target] = &[
    Target {
        name: "duration",
        parser: "kubelet_config::kubelet_config::Duration::parse (Go's time.ParseDuration)",
        test_cases: 3000,
        run: values::duration,
    },
    Target {
        name: "quantity",
        parser: "kubelet_types::quantity::ParsedQuantity::parse, parse_quantity",
        test_cases: 3000,
        run: values::quantity,
    },
    Target {
        name: "cpu-set",
        parser: "kubelet_config::kubelet_config::parse_cpu_set (reservedSystemCPUs)",
        test_cases: 2000,
        run: values::cpu_set,
    },
    Target {
        name: "label-syntax",
        parser: "kubelet_config::validation::names (qualified names, label values, DNS names, ports, headers)",
        test_cases: 2000,
        run: values::label_syntax,
    },
    Target {
        name: "eviction-thresholds",
        parser: "kubelet_eviction::threshold::parse_thresholds, kubelet::nodestatus::quantity::threshold",
        test_cases: 1500,
        run: values::eviction_thresholds,
    },
    Target {
        name: "log-query",
        parser: "kubelet_server::logs::decode, validate (the PodLogOptions query)",
        test_cases: 2000,
        run: values::log_query,
    },
    Target {
        name: "cri-log-line",
        parser: "kubelet_server::logs::cri::parse, LineWriter::push, tail_offset; kubelet_runtime::logs::tail_of_cri_log",
        test_cases: 2000,
        run: values::cri_log_line,
    },
    Target {
        name: "request-path",
        parser: "kubelet_server::auth::clean_path, attributes, bearer_token",
        test_cases: 2000,
        run: values::request_path,
    },
    Target {
        name: "kmsg-oom",
        parser: "kubelet::oom::parse_record, OomParser::feed (/dev/kmsg)",
        test_cases: 1500,
        run: host::kmsg,
    },
    Target {
        name: "resolv-conf",
        parser: "kubelet_runtime::config_gen::parse_resolv_conf",
        test_cases: 1000,
        run: host::resolv_conf,
    },
    Target {
        name: "proc-files",
        parser: "kubelet::stats::host (cgroup v1/v2 files, /proc/stat, meminfo, net/dev, loadavg), \
                 kubelet_metrics::process::parse_stat",
        test_cases: 150,
        run: host::proc_files,
    },
    Target {
        name: "kubelet-config",
        parser: "kubelet_config::kubelet_config::from_yaml_str, set_defaults, validate (YAML and JSON)",
        test_cases: 150,
        run: documents::kubelet_config,
    },
    Target {
        name: "static-pod-file",
        parser: "kubelet_config::sources::manifest::static_pod_from_file (YAML and JSON)",
        test_cases: 150,
        run: documents::static_pod_file,
    },
    Target {
        name: "static-pod-url",
        parser: "kubelet_config::sources::http::pods_from_body (Pod or PodList)",
        test_cases: 60,
        run: documents::static_pod_url,
    },
    Target {
        name: "pod-admission",
        parser: "kubelet::predicate::admit_on (node selector, affinity expressions, tolerations, requests, ports)",
        test_cases: 300,
        run: documents::pod_admission,
    },
    Target {
        name: "pod-cri-config",
        parser: "kubelet::admission_fields, kubelet::admission handlers, kubelet_runtime::config_gen::sandbox_config, \
                 container_config (pods' security fields against their CRI requests)",
        test_cases: 300,
        run: pods::pod_cri_config,
    },
    Target {
        name: "kubelet-api",
        parser: "kubelet_server::handlers (read-only and secure routers: paths, queries, methods, headers)",
        test_cases: 400,
        run: server::kubelet_api,
    },
    Target {
        name: "container-logs",
        parser: "kubelet_server /containerLogs over a CRI log file (query and file content)",
        test_cases: 200,
        run: server::container_logs,
    },
];

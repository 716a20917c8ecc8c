//! The kubelet's own metrics on `/metrics` (`pkg/kubelet/metrics/metrics.go`, `pkg/kubelet/server/metrics`),
//! with upstream's names, help, labels, buckets and stability. Each is registered in [`crate::global`] when first
//! used; [`register_all`] registers every one at start-up so a scrape lists them from the beginning, as
//! upstream's `metrics.Register()` does.

use std::sync::{Arc, LazyLock};

use crate::{
    CounterVec, DEFAULT_BUCKETS, GaugeVec, HistogramVec, Opts, exponential_buckets, exponential_buckets_range,
    register_global,
};

/// `podStartupDurationBuckets`.
pub const POD_STARTUP_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0,
    600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

macro_rules! metric {
    ($(#[$m:meta])* $name:ident: $t:ty = $init:expr) => {
        $(#[$m])*
        pub static $name: LazyLock<Arc<$t>> = LazyLock::new(|| register_global($init));
    };
}

metric!(
    /// `kubelet_pod_start_duration_seconds`: from the kubelet first seeing a pod to its containers running.
    POD_START_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            &[],
        ),
        POD_STARTUP_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pod_start_sli_duration_seconds`: from pod creation to all containers started, image pulls excluded.
    POD_START_SLI_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_pod_start_sli_duration_seconds",
            "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            &[],
        )
        .vec(),
        POD_STARTUP_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pod_start_total_duration_seconds`: from pod creation to all containers started.
    POD_START_TOTAL_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_pod_start_total_duration_seconds",
            "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            &[],
        )
        .vec(),
        POD_STARTUP_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pod_worker_duration_seconds{operation_type}`: one pod sync (`create`, `update`, `sync`, `kill`).
    POD_WORKER_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
            &["operation_type"],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pod_worker_start_duration_seconds`: from seeing a pod to starting its worker.
    POD_WORKER_START_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_pod_worker_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod to starting a worker.",
            &[],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pleg_relist_duration_seconds`.
    PLEG_RELIST_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha("kubelet_pleg_relist_duration_seconds", "Duration in seconds for relisting pods in PLEG.", &[]),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pleg_relist_interval_seconds`.
    PLEG_RELIST_INTERVAL: HistogramVec = HistogramVec::new(
        Opts::alpha("kubelet_pleg_relist_interval_seconds", "Interval in seconds between relisting in PLEG.", &[]),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pleg_last_seen_seconds`: Unix time of the last relist.
    PLEG_LAST_SEEN: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_pleg_last_seen_seconds",
        "Timestamp in seconds when PLEG was last seen active.",
        &[],
    ))
);
metric!(
    /// `kubelet_pleg_discard_events`.
    PLEG_DISCARD_EVENTS: CounterVec =
        CounterVec::new(Opts::alpha("kubelet_pleg_discard_events", "The number of discard events in PLEG.", &[]))
);
metric!(
    /// `kubelet_running_pods`: pods with a running sandbox.
    RUNNING_PODS: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_running_pods", "Number of pods that have a running pod sandbox", &[]))
);
metric!(
    /// `kubelet_running_containers{container_state}`.
    RUNNING_CONTAINERS: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_running_containers",
        "Number of containers currently running",
        &["container_state"],
    ))
);
metric!(
    /// `kubelet_runtime_operations_total{operation_type}`.
    RUNTIME_OPERATIONS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_runtime_operations_total",
        "Cumulative number of runtime operations by operation type.",
        &["operation_type"],
    ))
);
metric!(
    /// `kubelet_runtime_operations_duration_seconds{operation_type}`.
    RUNTIME_OPERATIONS_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            &["operation_type"],
        ),
        exponential_buckets(0.005, 2.5, 14),
    )
);
metric!(
    /// `kubelet_runtime_operations_errors_total{operation_type}`.
    RUNTIME_OPERATIONS_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_runtime_operations_errors_total",
        "Cumulative number of runtime operation errors by operation type.",
        &["operation_type"],
    ))
);
metric!(
    /// `kubelet_started_pods_total`.
    STARTED_PODS: CounterVec =
        CounterVec::new(Opts::alpha("kubelet_started_pods_total", "Cumulative number of pods started", &[]))
);
metric!(
    /// `kubelet_started_pods_errors_total`.
    STARTED_PODS_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_started_pods_errors_total",
        "Cumulative number of errors when starting pods",
        &[],
    ))
);
metric!(
    /// `kubelet_started_containers_total{container_type}`.
    STARTED_CONTAINERS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_started_containers_total",
        "Cumulative number of containers started",
        &["container_type"],
    ))
);
metric!(
    /// `kubelet_started_containers_errors_total{code,container_type}`.
    STARTED_CONTAINERS_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_started_containers_errors_total",
        "Cumulative number of errors when starting containers",
        &["code", "container_type"],
    ))
);
metric!(
    /// `kubelet_node_name{node}`, always 1.
    NODE_NAME: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_node_name", "The node's name. The count is always 1.", &["node"]))
);
metric!(
    /// `kubelet_cri_losing_support{version}`, 1: the Kubernetes version whose kubelet stops working with the running
    /// runtime (a runtime without `RuntimeConfig`). Registered, as upstream, only when the fallback happens.
    CRI_LOSING_SUPPORT: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_cri_losing_support",
        "the Kubernetes version that the currently running CRI implementation will lose support on if not upgraded.",
        &["version"],
    ))
);
metric!(
    /// `kubelet_desired_pods{static}`.
    DESIRED_PODS: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_desired_pods",
        "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
        &["static"],
    ))
);
metric!(
    /// `kubelet_mirror_pods`.
    MIRROR_PODS: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_mirror_pods",
        "The number of mirror pods the kubelet will try to create (one per admitted static pod)",
        &[],
    ))
);
metric!(
    /// `kubelet_image_pull_duration_seconds{image_size_in_bytes}`.
    IMAGE_PULL_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_image_pull_duration_seconds",
            "Duration in seconds to pull an image.",
            &["image_size_in_bytes"],
        ),
        vec![
            1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0,
            2700.0, 3600.0,
        ],
    )
);
metric!(
    /// `kubelet_http_requests_total{long_running,method,path,server_type}`.
    HTTP_REQUESTS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_http_requests_total",
        "Number of the http requests received since the server started",
        &["long_running", "method", "path", "server_type"],
    ))
);
metric!(
    /// `kubelet_http_requests_duration_seconds{long_running,method,path,server_type}`.
    HTTP_REQUESTS_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_http_requests_duration_seconds",
            "Duration in seconds to serve http requests",
            &["long_running", "method", "path", "server_type"],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_http_inflight_requests{long_running,method,path,server_type}`.
    HTTP_INFLIGHT: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_http_inflight_requests",
        "Number of the inflight http requests",
        &["long_running", "method", "path", "server_type"],
    ))
);

metric!(
    /// `kubelet_evictions{eviction_signal}`: pods evicted, by the signal that made the kubelet evict.
    EVICTIONS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_evictions",
        "Cumulative number of pod evictions by eviction signal",
        &["eviction_signal"],
    ))
);
metric!(
    /// `kubelet_preemptions{preemption_signal}`: pods preempted to admit a critical pod, by the first resource it
    /// lacked.
    PREEMPTIONS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_preemptions",
        "Cumulative number of pod preemptions by preemption resource",
        &["preemption_signal"],
    ))
);
metric!(
    /// `kubelet_eviction_stats_age_seconds{eviction_signal}`: age of the figures an eviction was decided on.
    EVICTION_STATS_AGE: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_eviction_stats_age_seconds",
            "Time between when stats are collected, and when pod is evicted based on those stats by eviction signal",
            &["eviction_signal"],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_image_garbage_collected_total{reason}`: images removed by the image garbage collector.
    IMAGE_GARBAGE_COLLECTED: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_image_garbage_collected_total",
        "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
        &["reason"],
    ))
);

metric!(
    /// `kubelet_started_user_namespaced_pods_total`: sandboxes made for pods with `hostUsers: false`.
    STARTED_USER_NAMESPACED_PODS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_started_user_namespaced_pods_total",
        "Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.",
        &[],
    ))
);
metric!(
    /// `kubelet_started_user_namespaced_pods_errors_total`: their syncs that failed a step.
    STARTED_USER_NAMESPACED_PODS_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_started_user_namespaced_pods_errors_total",
        "Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.",
        &[],
    ))
);
metric!(
    /// `kubelet_image_volume_requested_total`: the pod's image volumes, per container created.
    IMAGE_VOLUME_REQUESTED: CounterVec =
        CounterVec::new(Opts::alpha("kubelet_image_volume_requested_total", "Number of requested image volumes.", &[]))
);
metric!(
    /// `kubelet_image_volume_mounted_succeed_total`.
    IMAGE_VOLUME_MOUNTED_SUCCEED: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_image_volume_mounted_succeed_total",
        "Number of successful image volume mounts.",
        &[],
    ))
);
metric!(
    /// `kubelet_image_volume_mounted_errors_total`.
    IMAGE_VOLUME_MOUNTED_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_image_volume_mounted_errors_total",
        "Number of failed image volume mounts.",
        &[],
    ))
);
metric!(
    /// `kubelet_evented_pleg_connection_success_count`: container event streams opened.
    EVENTED_PLEG_CONN: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_evented_pleg_connection_success_count",
        "The number of times a streaming client was obtained to receive CRI Events.",
        &[],
    ))
);
metric!(
    /// `kubelet_evented_pleg_connection_error_count`: container event streams that failed to open or broke.
    EVENTED_PLEG_CONN_ERR: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_evented_pleg_connection_error_count",
        "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
        &[],
    ))
);
metric!(
    /// `kubelet_evented_pleg_connection_latency_seconds`: a container event's creation → its arrival.
    EVENTED_PLEG_CONN_LATENCY: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_evented_pleg_connection_latency_seconds",
            "The latency of streaming connection with the CRI runtime, measured in seconds.",
            &[],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);

metric!(
    /// `kubelet_device_plugin_registration_total{resource_name}`: `Register` calls, refused ones too.
    DEVICE_PLUGIN_REGISTRATION: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_device_plugin_registration_total",
        "Cumulative number of device plugin registrations. Broken down by resource name.",
        &["resource_name"],
    ))
);
metric!(
    /// `kubelet_device_plugin_alloc_duration_seconds{resource_name}`: each `Allocate` call.
    DEVICE_PLUGIN_ALLOC_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "kubelet_device_plugin_alloc_duration_seconds",
            "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
            &["resource_name"],
        ),
        DEFAULT_BUCKETS.to_vec(),
    )
);

metric!(
    /// `plugin_manager_total_plugins{socket_path, state}`: the plugin sockets of the plugin manager's desired and
    /// actual states (no `kubelet_` prefix, as upstream's).
    PLUGIN_MANAGER_TOTAL_PLUGINS: GaugeVec = GaugeVec::new(Opts::alpha(
        "plugin_manager_total_plugins",
        "Number of plugins in Plugin Manager",
        &["socket_path", "state"],
    ))
);

metric!(
    /// `kubelet_pod_resources_endpoint_requests_total{server_api_version}`: every call of either version.
    POD_RESOURCES_REQUESTS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_requests_total",
        "Cumulative number of requests to the PodResource endpoint. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_requests_list{server_api_version}`: `v1` `List` calls.
    POD_RESOURCES_REQUESTS_LIST: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_requests_list",
        "Number of requests to the PodResource List endpoint. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version}`: `v1` `GetAllocatableResources` calls.
    POD_RESOURCES_REQUESTS_GET_ALLOCATABLE: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_requests_get_allocatable",
        "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_errors_list{server_api_version}`: never counted, as upstream's.
    POD_RESOURCES_ERRORS_LIST: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_errors_list",
        "Number of requests to the PodResource List endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_errors_get_allocatable{server_api_version}`: never counted, as upstream's.
    POD_RESOURCES_ERRORS_GET_ALLOCATABLE: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_errors_get_allocatable",
        "Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_requests_get{server_api_version}`: `v1` `Get` calls.
    POD_RESOURCES_REQUESTS_GET: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_requests_get",
        "Number of requests to the PodResource Get endpoint. Broken down by server api version.",
        &["server_api_version"],
    ))
);
metric!(
    /// `kubelet_pod_resources_endpoint_errors_get{server_api_version}`: `v1` `Get` calls for a pod the kubelet does not have.
    POD_RESOURCES_ERRORS_GET: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_resources_endpoint_errors_get",
        "Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.",
        &["server_api_version"],
    ))
);

/// `DRADurationBuckets`: 0.1 s to 40 s in 15 steps.
fn dra_buckets() -> Vec<f64> {
    exponential_buckets_range(0.1, 40.0, 15)
}

metric!(
    /// `dra_operations_duration_seconds{operation_name,is_error}`: preparing or unpreparing all claims of a pod.
    DRA_OPERATIONS_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "dra_operations_duration_seconds",
            "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
            &["is_error", "operation_name"],
        ),
        dra_buckets(),
    )
);
metric!(
    /// `dra_grpc_operations_duration_seconds{driver_name,grpc_status_code,method_name}`: one call of a DRA driver.
    DRA_GRPC_OPERATIONS_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "dra_grpc_operations_duration_seconds",
            "Duration in seconds of the DRA gRPC operations",
            &["driver_name", "grpc_status_code", "method_name"],
        ),
        dra_buckets(),
    )
);
metric!(
    /// `dra_resource_claims_in_use{driver_name}`: prepared claims by driver, and across drivers as `<any>`.
    DRA_RESOURCE_CLAIMS_IN_USE: GaugeVec = GaugeVec::new(Opts::alpha(
        "dra_resource_claims_in_use",
        "The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.",
        &["driver_name"],
    ))
);

metric!(
    /// `kubelet_volume_stats_capacity_bytes{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_CAPACITY_BYTES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_available_bytes{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_AVAILABLE_BYTES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_available_bytes", "Number of available bytes in the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_used_bytes{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_USED_BYTES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_inodes{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_INODES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_inodes_free{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_INODES_FREE: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_inodes_used{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_INODES_USED: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", &["namespace", "persistentvolumeclaim"]))
);
metric!(
    /// `kubelet_volume_stats_health_status_abnormal{namespace, persistentvolumeclaim}`: a claim's volume as its driver last reported it.
    VOLUME_STATS_HEALTH_ABNORMAL: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_volume_stats_health_status_abnormal", "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy", &["namespace", "persistentvolumeclaim"]))
);

metric!(
    /// `csi_operations_seconds{driver_name, grpc_status_code, method_name, migrated}`: each call of a CSI driver.
    CSI_OPERATIONS_SECONDS: HistogramVec = HistogramVec::new(
        Opts::alpha(
            "csi_operations_seconds",
            "Container Storage Interface operation duration with gRPC error code status total",
            &["driver_name", "grpc_status_code", "method_name", "migrated"],
        ),
        vec![0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0],
    )
);

/// `podResizeDurationBuckets`.
pub const POD_RESIZE_DURATION_BUCKETS: [f64; 14] = [
    10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 30000.0, 60000.0, 120000.0, 300000.0, 600000.0,
];

metric!(
    /// `kubelet_container_requested_resizes_total{resource, requirement, operation}`.
    CONTAINER_REQUESTED_RESIZES: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_container_requested_resizes_total",
        "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
        &["operation", "requirement", "resource"],
    ))
);
metric!(
    /// `kubelet_pod_resize_duration_milliseconds{success}`: one actuation of a pod's resize.
    POD_RESIZE_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha("kubelet_pod_resize_duration_milliseconds", "Duration in milliseconds to actuate a pod resize", &["success"]),
        POD_RESIZE_DURATION_BUCKETS.to_vec(),
    )
);
metric!(
    /// `kubelet_pod_pending_resizes{reason}`: pods whose resize waits (`deferred`, `infeasible`).
    POD_PENDING_RESIZES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_pod_pending_resizes", "Number of pending resizes for pods.", &["reason"]))
);
metric!(
    /// `kubelet_pod_infeasible_resizes_total{reason_detail}`.
    POD_INFEASIBLE_RESIZES: CounterVec =
        CounterVec::new(Opts::alpha("kubelet_pod_infeasible_resizes_total", "Number of infeasible resizes for pods.", &["reason_detail"]))
);
metric!(
    /// `kubelet_pod_in_progress_resizes`.
    POD_IN_PROGRESS_RESIZES: GaugeVec =
        GaugeVec::new(Opts::alpha("kubelet_pod_in_progress_resizes", "Number of in-progress resizes for pods.", &[]))
);
metric!(
    /// `kubelet_pod_deferred_accepted_resizes_total{retry_trigger}`.
    POD_DEFERRED_ACCEPTED_RESIZES: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_pod_deferred_accepted_resizes_total",
        "Cumulative number of resizes that were accepted after being deferred.",
        &["retry_trigger"],
    ))
);

metric!(
    /// `kubelet_graceful_shutdown_start_time_seconds`.
    GRACEFUL_SHUTDOWN_START_TIME: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_graceful_shutdown_start_time_seconds",
        "Last graceful shutdown start time since unix epoch in seconds",
        &[],
    ))
);
metric!(
    /// `kubelet_graceful_shutdown_end_time_seconds`.
    GRACEFUL_SHUTDOWN_END_TIME: GaugeVec = GaugeVec::new(Opts::alpha(
        "kubelet_graceful_shutdown_end_time_seconds",
        "Last graceful shutdown end time since unix epoch in seconds",
        &[],
    ))
);

metric!(
    /// `kubelet_topology_manager_admission_requests_total`.
    TOPOLOGY_ADMISSION_REQUESTS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_topology_manager_admission_requests_total",
        "The number of admission requests where resources have to be aligned.",
        &[],
    ))
);
metric!(
    /// `kubelet_topology_manager_admission_errors_total`.
    TOPOLOGY_ADMISSION_ERRORS: CounterVec = CounterVec::new(Opts::alpha(
        "kubelet_topology_manager_admission_errors_total",
        "The number of admission request failures where resources could not be aligned.",
        &[],
    ))
);
metric!(
    /// `kubelet_topology_manager_admission_duration_ms`.
    TOPOLOGY_ADMISSION_DURATION: HistogramVec = HistogramVec::new(
        Opts::alpha("kubelet_topology_manager_admission_duration_ms", "Duration in milliseconds to serve a pod admission request.", &[]),
        exponential_buckets(0.05, 2.0, 15),
    )
);

/// Registers every kubelet metric and the process collector in [`crate::global`] (idempotent).
pub fn register_all() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        LazyLock::force(&POD_START_DURATION);
        LazyLock::force(&TOPOLOGY_ADMISSION_REQUESTS);
        LazyLock::force(&TOPOLOGY_ADMISSION_ERRORS);
        LazyLock::force(&TOPOLOGY_ADMISSION_DURATION);
        LazyLock::force(&GRACEFUL_SHUTDOWN_START_TIME);
        LazyLock::force(&GRACEFUL_SHUTDOWN_END_TIME);
        LazyLock::force(&CONTAINER_REQUESTED_RESIZES);
        LazyLock::force(&POD_RESIZE_DURATION);
        LazyLock::force(&POD_PENDING_RESIZES);
        LazyLock::force(&POD_INFEASIBLE_RESIZES);
        LazyLock::force(&POD_IN_PROGRESS_RESIZES);
        LazyLock::force(&POD_DEFERRED_ACCEPTED_RESIZES);
        LazyLock::force(&DRA_OPERATIONS_DURATION);
        LazyLock::force(&DRA_GRPC_OPERATIONS_DURATION);
        LazyLock::force(&DRA_RESOURCE_CLAIMS_IN_USE);
        LazyLock::force(&CSI_OPERATIONS_SECONDS);
        LazyLock::force(&VOLUME_STATS_CAPACITY_BYTES);
        LazyLock::force(&VOLUME_STATS_AVAILABLE_BYTES);
        LazyLock::force(&VOLUME_STATS_USED_BYTES);
        LazyLock::force(&VOLUME_STATS_INODES);
        LazyLock::force(&VOLUME_STATS_INODES_FREE);
        LazyLock::force(&VOLUME_STATS_INODES_USED);
        LazyLock::force(&VOLUME_STATS_HEALTH_ABNORMAL);
        LazyLock::force(&POD_START_SLI_DURATION);
        LazyLock::force(&POD_START_TOTAL_DURATION);
        LazyLock::force(&POD_WORKER_DURATION);
        LazyLock::force(&POD_WORKER_START_DURATION);
        LazyLock::force(&PLEG_RELIST_DURATION);
        LazyLock::force(&PLEG_RELIST_INTERVAL);
        LazyLock::force(&PLEG_LAST_SEEN);
        LazyLock::force(&PLEG_DISCARD_EVENTS);
        LazyLock::force(&RUNNING_PODS);
        LazyLock::force(&RUNNING_CONTAINERS);
        LazyLock::force(&RUNTIME_OPERATIONS);
        LazyLock::force(&RUNTIME_OPERATIONS_DURATION);
        LazyLock::force(&RUNTIME_OPERATIONS_ERRORS);
        LazyLock::force(&STARTED_PODS);
        LazyLock::force(&STARTED_PODS_ERRORS);
        LazyLock::force(&STARTED_CONTAINERS);
        LazyLock::force(&STARTED_CONTAINERS_ERRORS);
        LazyLock::force(&NODE_NAME);
        LazyLock::force(&DESIRED_PODS);
        LazyLock::force(&MIRROR_PODS);
        LazyLock::force(&IMAGE_PULL_DURATION);
        LazyLock::force(&HTTP_REQUESTS);
        LazyLock::force(&HTTP_REQUESTS_DURATION);
        LazyLock::force(&HTTP_INFLIGHT);
        LazyLock::force(&EVICTIONS);
        LazyLock::force(&PREEMPTIONS);
        LazyLock::force(&EVICTION_STATS_AGE);
        LazyLock::force(&IMAGE_GARBAGE_COLLECTED);
        LazyLock::force(&STARTED_USER_NAMESPACED_PODS);
        LazyLock::force(&STARTED_USER_NAMESPACED_PODS_ERRORS);
        LazyLock::force(&IMAGE_VOLUME_REQUESTED);
        LazyLock::force(&IMAGE_VOLUME_MOUNTED_SUCCEED);
        LazyLock::force(&IMAGE_VOLUME_MOUNTED_ERRORS);
        LazyLock::force(&EVENTED_PLEG_CONN);
        LazyLock::force(&EVENTED_PLEG_CONN_ERR);
        LazyLock::force(&EVENTED_PLEG_CONN_LATENCY);
        LazyLock::force(&DEVICE_PLUGIN_REGISTRATION);
        LazyLock::force(&DEVICE_PLUGIN_ALLOC_DURATION);
        LazyLock::force(&PLUGIN_MANAGER_TOTAL_PLUGINS);
        LazyLock::force(&POD_RESOURCES_REQUESTS);
        LazyLock::force(&POD_RESOURCES_REQUESTS_LIST);
        LazyLock::force(&POD_RESOURCES_REQUESTS_GET_ALLOCATABLE);
        LazyLock::force(&POD_RESOURCES_ERRORS_LIST);
        LazyLock::force(&POD_RESOURCES_ERRORS_GET_ALLOCATABLE);
        LazyLock::force(&POD_RESOURCES_REQUESTS_GET);
        LazyLock::force(&POD_RESOURCES_ERRORS_GET);
        crate::global().register(Arc::new(crate::process::ProcessCollector));
    });
}

/// The `image_size_in_bytes` label of an image pull (`GetImageSizeBucket`): the highest bucket whose lower bound
/// the size exceeds, `N/A` for an unknown (zero) size.
pub fn image_size_bucket(bytes: u64) -> &'static str {
    const MB: u64 = 1024 * 1024;
    const GB: u64 = 1024 * MB;
    const BUCKETS: [(u64, &str); 12] = [
        (100 * GB, "GT100GB"),
        (60 * GB, "60GB-100GB"),
        (40 * GB, "40GB-60GB"),
        (30 * GB, "30GB-40GB"),
        (20 * GB, "20GB-30GB"),
        (10 * GB, "10GB-20GB"),
        (5 * GB, "5GB-10GB"),
        (GB, "1GB-5GB"),
        (500 * MB, "500MB-1GB"),
        (100 * MB, "100MB-500MB"),
        (10 * MB, "10MB-100MB"),
        (0, "0-10MB"),
    ];
    if bytes == 0 {
        return "N/A";
    }
    BUCKETS.iter().find(|(lower, _)| bytes > *lower).map(|(_, l)| *l).unwrap_or("0-10MB")
}

/// A CRI method name as upstream's `operation_type` spells it: `RunPodSandbox` → `run_podsandbox`,
/// `ListContainerStats` → `list_container_stats`, `UpdateContainerResources` → `update_container`.
pub fn operation_type(cri_method: &str) -> String {
    if cri_method == "UpdateContainerResources" {
        return "update_container".into();
    }
    let m = cri_method.replace("PodSandbox", "Podsandbox");
    let mut out = String::with_capacity(m.len() + 4);
    for (i, c) in m.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Records one runtime call (`instrumentedRuntimeService`).
pub fn record_runtime_operation(cri_method: &str, seconds: f64, ok: bool) {
    let op = operation_type(cri_method);
    RUNTIME_OPERATIONS.inc(&[&op]);
    RUNTIME_OPERATIONS_DURATION.observe(&[&op], seconds);
    if !ok {
        RUNTIME_OPERATIONS_ERRORS.inc(&[&op]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_types_are_upstreams() {
        for (m, want) in [
            ("RunPodSandbox", "run_podsandbox"),
            ("ListPodSandboxStats", "list_podsandbox_stats"),
            ("PodSandboxStatus", "podsandbox_status"),
            ("ListContainers", "list_containers"),
            ("ExecSync", "exec_sync"),
            ("PortForward", "port_forward"),
            ("ImageFsInfo", "image_fs_info"),
            ("ReopenContainerLog", "reopen_container_log"),
            ("UpdateContainerResources", "update_container"),
            ("Version", "version"),
        ] {
            assert_eq!(operation_type(m), want);
        }
    }

    #[test]
    fn image_sizes_fall_in_upstreams_buckets() {
        assert_eq!(image_size_bucket(0), "N/A");
        assert_eq!(image_size_bucket(5 << 20), "0-10MB");
        assert_eq!(image_size_bucket(10 << 20), "0-10MB", "the bound itself is not exceeded");
        assert_eq!(image_size_bucket((10 << 20) + 1), "10MB-100MB");
        assert_eq!(image_size_bucket(3 << 30), "1GB-5GB");
        assert_eq!(image_size_bucket(200 << 30), "GT100GB");
    }

    #[test]
    fn every_kubelet_metric_renders_with_its_stability() {
        register_all();
        record_runtime_operation("ListPodSandbox", 0.002, true);
        let text = crate::global().gather();
        for name in [
            "kubelet_pod_start_duration_seconds",
            "kubelet_pod_worker_start_duration_seconds",
            "kubelet_pleg_relist_duration_seconds",
            "kubelet_pleg_relist_interval_seconds",
            "kubelet_pleg_last_seen_seconds",
            "kubelet_running_pods",
            "kubelet_started_pods_total",
            "kubelet_runtime_operations_total",
            "process_resident_memory_bytes",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing:\n{text}");
        }
        assert!(text.contains("kubelet_runtime_operations_total{operation_type=\"list_podsandbox\"} 1\n"), "{text}");
        assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"list_podsandbox\",le=\"0.005\"} 1\n"), "{text}");
        assert!(!text.contains("kubelet_pod_start_sli_duration_seconds"), "a vector is hidden until used");
        assert!(text.contains("# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox\n"));
    }
}

//! The pod resources API over its real socket with in-memory providers: which pods and containers `List` and
//! `v1alpha1.List` answer and in which order, `Get` of a pod the kubelet does not have, the allocatable devices,
//! the devices of gone pods freed before a `List`; and the rate limit's bucket on the paused clock.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
use kubelet_proto::podresources::v1alpha1 as alpha;
use tonic::transport::Channel;

use super::server::Limiter;
use super::*;

fn pod(uid: &str, name: &str, phase: &str, inits: &[(&str, bool)], containers: &[&str]) -> Arc<Pod> {
    let c = |n: &str| Container { name: n.into(), ..Default::default() };
    let inits = inits
        .iter()
        .map(|(n, sidecar)| Container { restart_policy: sidecar.then(|| "Always".into()), ..c(n) })
        .collect();
    Arc::new(Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some(uid.into()),
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(inits),
            containers: containers.iter().map(|n| c(n)).collect(),
            ..Default::default()
        }),
        status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
    })
}

struct Pods(Vec<Arc<Pod>>);

impl PodsProvider for Pods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.iter().filter(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Running")).cloned().collect()
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.0.clone()
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.0
            .iter()
            .find(|p| p.metadata.namespace.as_deref() == Some(namespace) && p.metadata.name.as_deref() == Some(name))
            .cloned()
    }
    fn sources_ready(&self) -> bool {
        true
    }
}

/// Devices of (pod UID, container); the active UIDs it was last told.
#[derive(Default)]
struct Devices {
    told: Mutex<Vec<BTreeSet<String>>>,
}

fn dev(id: &str, numa: Option<i64>) -> pb::ContainerDevices {
    pb::ContainerDevices {
        resource_name: "example.com/r".into(),
        device_ids: vec![id.into()],
        topology: numa.map(|id| pb::TopologyInfo { nodes: vec![pb::NumaNode { id }] }),
    }
}

impl DevicesProvider for Devices {
    fn update_allocated_devices(&self, active: &BTreeSet<String>) {
        self.told.lock().unwrap().push(active.clone());
    }
    fn devices(&self, pod_uid: &str, container: &str) -> Vec<pb::ContainerDevices> {
        match (pod_uid, container) {
            ("u1", "main") => vec![dev("d1", Some(0))],
            ("u1", "side") => vec![dev("d2", None)],
            _ => vec![],
        }
    }
    fn allocatable_devices(&self) -> Vec<pb::ContainerDevices> {
        vec![dev("d1", Some(0)), dev("d2", None)]
    }
}

async fn channel(socket: &Path) -> Channel {
    let path = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(&path).await?))
            }
        }))
        .await
        .unwrap()
}

#[tokio::test]
async fn list_get_and_allocatable_answer_as_upstreams_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(POD_RESOURCES_DIR);
    let pods = Arc::new(Pods(vec![
        pod("u1", "web", "Running", &[("init", false), ("side", true)], &["main"]),
        pod("u2", "done", "Succeeded", &[], &["main"]),
    ]));
    let devices = Arc::new(Devices::default());
    let stop = CancellationToken::new();
    let (d, ds, st) = (dir.clone(), devices.clone(), stop.clone());
    let served = tokio::spawn(async move { serve(&d, pods, ds, st).await });
    let socket = dir.join(SOCKET);
    tokio::time::timeout(Duration::from_secs(10), async {
        while !socket.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the socket is made");
    let ch = channel(&socket).await;
    let mut v1 = pb::pod_resources_lister_client::PodResourcesListerClient::new(ch.clone());

    let list = v1.list(pb::ListPodResourcesRequest {}).await.unwrap().into_inner();
    assert_eq!(list.pod_resources.len(), 1, "only the active pod: {list:?}");
    let web = &list.pod_resources[0];
    assert_eq!((web.name.as_str(), web.namespace.as_str()), ("web", "ns"));
    let names: Vec<&str> = web.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["side", "main"], "the sidecar, then the containers; not the init container");
    assert_eq!(web.containers[1].devices, [dev("d1", Some(0))]);
    assert_eq!(*devices.told.lock().unwrap(), [BTreeSet::from(["u1".to_string()])], "gone pods' devices freed");

    let got = v1
        .get(pb::GetPodResourcesRequest { pod_name: "done".into(), pod_namespace: "ns".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.unwrap().name, "done", "Get answers any pod the kubelet has");
    let e =
        v1.get(pb::GetPodResourcesRequest { pod_name: "nope".into(), pod_namespace: "ns".into() }).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::Unknown, "pod nope in namespace ns not found"));

    let all = v1.get_allocatable_resources(pb::AllocatableResourcesRequest {}).await.unwrap().into_inner();
    assert_eq!(all.devices, [dev("d1", Some(0)), dev("d2", None)]);
    assert!(all.cpu_ids.is_empty() && all.memory.is_empty());

    let mut old = alpha::pod_resources_lister_client::PodResourcesListerClient::new(ch);
    let list = old.list(alpha::ListPodResourcesRequest {}).await.unwrap().into_inner();
    let names: Vec<(&str, Vec<&str>)> = list
        .pod_resources
        .iter()
        .map(|p| (p.name.as_str(), p.containers.iter().map(|c| c.name.as_str()).collect()))
        .collect();
    assert_eq!(names, [("web", vec!["main"]), ("done", vec!["main"])], "v1alpha1: every pod, regular containers");
    assert_eq!(
        list.pod_resources[0].containers[0].devices,
        [alpha::ContainerDevices { resource_name: "example.com/r".into(), device_ids: vec!["d1".into()] }]
    );

    stop.cancel();
    served.await.unwrap().unwrap();
    assert!(!socket.exists(), "the socket goes with the server");
}

#[tokio::test(start_paused = true)]
async fn the_bucket_holds_ten_and_refills_at_a_hundred_a_second() {
    let l = Limiter::new(QPS, BURST);
    assert_eq!((0..11).filter(|_| l.allow()).count(), 10, "a burst of 10");
    tokio::time::advance(Duration::from_millis(10)).await;
    assert!(l.allow(), "one more after 10 ms");
    assert!(!l.allow());
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!((0..20).filter(|_| l.allow()).count(), 10, "never more than the burst");
}

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, Secret, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_apiclient::fake::FakeApi;
use kubelet_runtime::env::{EnvInputs, NoObjects, NodeFacts, ObjectSource, make_environment};

use super::*;

fn svc(ns: &str, name: &str, ip: &str) -> Service {
    Service {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn names(cache: &ServiceCache, ns: &str) -> Vec<String> {
    cache.list(ns).into_iter().filter_map(|s| s.metadata.name).collect()
}

/// Waits (on the paused clock) until `cond` holds, at most a minute of fake time; how long it took.
async fn until(what: &str, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    start.elapsed()
}

fn calls(api: &FakeApi, prefix: &str) -> usize {
    api.calls().iter().filter(|c| c.starts_with(prefix)).count()
}

/// A cache over `api`, started, and its task's cancellation.
fn started(api: &Arc<FakeApi>) -> (Arc<ServiceCache>, CancellationToken, TaskTracker) {
    let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
    let cache = ServiceCache::start(api.clone(), &tracker, &cancel);
    (cache, cancel, tracker)
}

async fn stop(cancel: CancellationToken, tracker: TaskTracker) {
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test(start_paused = true)]
async fn a_service_created_after_sync_is_seen_at_once_and_a_deleted_one_goes() {
    let api = Arc::new(FakeApi::new());
    api.put_service(svc("default", "kubernetes", "10.96.0.1"));
    let (cache, cancel, tracker) = started(&api);
    assert!(!cache.has_synced(), "nothing was listed yet");
    until("the first list", || cache.has_synced()).await;
    assert_eq!(names(&cache, "default"), ["kubernetes"]);
    assert!(cache.list("app").is_empty());

    api.put_service(svc("app", "fooservice", "10.96.0.10"));
    let took = until("fooservice in the cache", || names(&cache, "app") == ["fooservice"]).await;
    assert!(took <= Duration::from_millis(1), "seen as soon as the watch delivers it, not after a TTL: {took:?}");
    api.put_service(svc("app", "fooservice", "10.96.0.11"));
    until("the update", || cache.list("app")[0].spec.as_ref().unwrap().cluster_ip.as_deref() == Some("10.96.0.11"))
        .await;
    api.remove_service("app", "fooservice");
    let took = until("fooservice gone", || cache.list("app").is_empty()).await;
    assert!(took <= Duration::from_millis(1), "{took:?}");
    assert_eq!(names(&cache, "default"), ["kubernetes"], "other namespaces are untouched");
    assert_eq!(calls(&api, "list_services"), 1, "one list; every change came from the watch");
    stop(cancel, tracker).await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_ends_resumes_and_one_that_fails_with_gone_lists_again() {
    let api = Arc::new(FakeApi::new());
    let (cache, cancel, tracker) = started(&api);
    until("the first list", || cache.has_synced()).await;

    // The server ends the watch (its timeout): the next one starts from the last version seen, nothing is missed.
    api.put_service(svc("app", "a", "10.96.0.2"));
    until("a", || names(&cache, "app") == ["a"]).await;
    api.end_watches();
    api.put_service(svc("app", "b", "10.96.0.3"));
    until("b after the watch ended", || names(&cache, "app") == ["a", "b"]).await;
    assert_eq!(calls(&api, "list_services"), 1, "an ended watch is resumed, not replaced by a list");
    let watches = api.calls().into_iter().filter(|c| c.starts_with("watch_services")).collect::<Vec<_>>();
    assert_eq!(watches.len(), 2, "{watches:?}");
    assert_ne!(watches[0], watches[1], "resumed from a later version: {watches:?}");

    // The version expired (410 Gone): the cache lists again, and the list drops what was deleted meanwhile.
    api.expire_watches();
    api.remove_service("app", "a");
    api.remove_service("app", "b");
    api.put_service(svc("other", "c", "10.96.0.4"));
    until("the relist", || calls(&api, "list_services") == 2).await;
    until("the relisted state", || names(&cache, "other") == ["c"]).await;
    assert_eq!(names(&cache, "app"), Vec::<String>::new(), "deleted while no watch ran");
    assert!(cache.has_synced());
    api.put_service(svc("app", "d", "10.96.0.5"));
    until("d from the new watch", || names(&cache, "app") == ["d"]).await;
    stop(cancel, tracker).await;
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_apiserver_is_retried_with_backoff_and_the_last_state_is_kept() {
    let api = Arc::new(FakeApi::new());
    api.put_service(svc("app", "a", "10.96.0.2"));
    api.set_down(true);
    let (cache, cancel, tracker) = started(&api);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!cache.has_synced(), "not synced while no list succeeded");
    api.set_down(false);
    let took = until("the list after the outage", || cache.has_synced()).await;
    assert!(took > Duration::ZERO && took <= MAX_BACKOFF, "retried after a back-off, not in a tight loop: {took:?}");
    assert_eq!(names(&cache, "app"), ["a"]);

    // The watch breaks while the apiserver is down: the last state is served, and the cache catches up after.
    api.set_down(true);
    api.end_watches();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(cache.has_synced(), "synced once is synced for good");
    assert_eq!(names(&cache, "app"), ["a"], "the last state while the apiserver is down");
    api.set_down(false);
    api.put_service(svc("app", "b", "10.96.0.3"));
    let took = until("b after the outage", || names(&cache, "app") == ["a", "b"]).await;
    assert!(took <= MAX_BACKOFF, "{took:?}");
    stop(cancel, tracker).await;
}

/// The runtime's view of the cache, as the binary's objects source gives it.
struct Services(Arc<ServiceCache>);

#[async_trait]
impl ObjectSource for Services {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        NoObjects.config_map(ns, name).await
    }
    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        NoObjects.secret(ns, name).await
    }
    async fn services(&self, ns: &str) -> Result<Vec<Service>, String> {
        Ok(self.0.list(ns))
    }
    fn services_synced(&self) -> bool {
        self.0.has_synced()
    }
}

fn pod(annotations: &[(&str, &str)]) -> Pod {
    let annotations: BTreeMap<String, String> =
        annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Pod {
        metadata: ObjectMeta {
            namespace: Some("app".into()),
            name: Some("web".into()),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container { name: "c".into(), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn env_of(objects: &Services, pod: &Pod) -> Result<Vec<String>, String> {
    let node = NodeFacts::default();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let env = make_environment(EnvInputs { pod, container, pod_ips: &[], node: &node, objects }).await?;
    Ok(env.vars.into_iter().map(|(k, _)| k).filter(|k| k.ends_with("_SERVICE_HOST")).collect())
}

#[tokio::test(start_paused = true)]
async fn before_the_first_list_only_static_pods_get_an_environment() {
    let api = Arc::new(FakeApi::new());
    api.put_service(svc("default", "kubernetes", "10.96.0.1"));
    api.put_service(svc("app", "fooservice", "10.96.0.10"));
    api.set_down(true);
    let (cache, cancel, tracker) = started(&api);
    let objects = Services(cache.clone());
    let from_api = pod(&[("kubernetes.io/config.source", "api")]);
    let from_file = pod(&[("kubernetes.io/config.source", "file")]);
    assert_eq!(
        env_of(&objects, &from_api).await.unwrap_err(),
        "services have not yet been read at least once, cannot construct envvars"
    );
    assert_eq!(env_of(&objects, &from_file).await.unwrap(), Vec::<String>::new(), "a static pod is not held back");

    api.set_down(false);
    until("the first list", || cache.has_synced()).await;
    let want = ["FOOSERVICE_SERVICE_HOST", "KUBERNETES_SERVICE_HOST"];
    assert_eq!(env_of(&objects, &from_api).await.unwrap(), want);
    assert_eq!(env_of(&objects, &from_file).await.unwrap(), want);
    stop(cancel, tracker).await;
}

//! In-place resize against the in-memory runtime and a recording pod cgroup (`doPodResizeAction`): the pod cgroup is
//! grown before its containers and shrunk after them, memory before CPU, the containers' resources reach
//! `UpdateContainerResources` and are recorded as actuated, the status reports them, and a memory limit below what
//! the pod uses is refused before anything changes.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{Env, env_built, pod_p, status};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_runtime::resize::{PodCgroupConfig, PodCgroupResizer};

/// A pod cgroup that records what is written to it, in order.
#[derive(Default)]
struct Cgroup {
    config: Mutex<PodCgroupConfig>,
    writes: Mutex<Vec<String>>,
    usage: Mutex<u64>,
}

impl PodCgroupResizer for Cgroup {
    fn pod_config(&self, _: &Pod) -> std::io::Result<PodCgroupConfig> {
        Ok(*self.config.lock().unwrap())
    }
    fn set_pod_config(&self, _: &Pod, c: &PodCgroupConfig) -> std::io::Result<()> {
        let mut cur = self.config.lock().unwrap();
        let mut w = self.writes.lock().unwrap();
        if let Some(m) = c.memory {
            cur.memory = Some(m);
            w.push(format!("pod memory {m}"));
        }
        if let Some(q) = c.cpu_quota {
            cur.cpu_quota = Some(q);
            w.push(format!("pod quota {q}"));
        }
        if let Some(s) = c.cpu_shares {
            cur.cpu_shares = Some(s);
            w.push(format!("pod shares {s}"));
        }
        Ok(())
    }
    fn pod_memory_usage(&self, _: &Pod) -> std::io::Result<Option<u64>> {
        Ok(Some(*self.usage.lock().unwrap()))
    }
}

fn res(cpu: &str, mem: &str) -> Option<ResourceRequirements> {
    let l: BTreeMap<String, Quantity> =
        [("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(mem.into()))].into();
    Some(ResourceRequirements { requests: Some(l.clone()), limits: Some(l), claims: None })
}

fn pod(cpu: &str, mem: &str) -> Pod {
    pod_p(PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: Some("busybox:1".into()),
            resources: res(cpu, mem),
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn setup() -> (Env, Arc<Cgroup>) {
    let cg = Arc::new(Cgroup::default());
    let c2 = cg.clone();
    let e = env_built(move |m| m.with_pod_cgroups(c2));
    (e, cg)
}

fn app_resources(e: &Env) -> (i64, i64) {
    let id = &e.fake.container_ids("app")[0];
    let r = e.fake.container_config(id).unwrap().linux.unwrap().resources.unwrap();
    (r.cpu_quota, r.memory_limit_in_bytes)
}

#[tokio::test(start_paused = true)]
async fn growing_sets_the_pod_cgroup_first_and_shrinking_last_and_the_container_gets_the_rest() {
    let (e, cg) = setup();
    let small = pod("500m", "64Mi");
    assert!(e.mgr.sync_pod(&small, &status(&e).await).await.ok());
    *cg.config.lock().unwrap() = PodCgroupConfig {
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        memory: Some(64 << 20),
    };
    assert_eq!(app_resources(&e), (50_000, 64 << 20));
    assert!(!e.mgr.is_pod_resize_in_progress(&small, &status(&e).await));

    let big = pod("1", "128Mi");
    let st = status(&e).await;
    assert!(e.mgr.is_pod_resize_in_progress(&big, &st), "allocated but not actuated");
    e.fake.set_record_calls(true);
    let r = e.mgr.sync_pod(&big, &st).await;
    assert!(r.ok() && r.changed, "{:?}", r.errors);
    assert_eq!(*cg.writes.lock().unwrap(), ["pod memory 134217728", "pod quota 100000", "pod shares 1024"]);
    assert_eq!(e.fake.calls().iter().filter(|c| **c == "UpdateContainerResources").count(), 2, "memory, then cpu");
    assert_eq!(app_resources(&e), (100_000, 128 << 20));
    let st = status(&e).await;
    assert!(!e.mgr.is_pod_resize_in_progress(&big, &st));
    let reported = st.container_statuses[0].resources.unwrap();
    assert_eq!(
        (reported.cpu_limit_milli, reported.memory_limit, reported.memory_request),
        (Some(1000), Some(128 << 20), Some(128 << 20))
    );
    assert_eq!(e.mgr.actuated("uid-1", "app").unwrap().limits.unwrap()["cpu"].0, "1");
    assert!(e.mgr.sync_pod(&big, &st).await.ok(), "nothing left to do");

    cg.writes.lock().unwrap().clear();
    let r = e.mgr.sync_pod(&small, &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(
        *cg.writes.lock().unwrap(),
        ["pod memory 67108864", "pod shares 512", "pod quota 50000"],
        "after the container"
    );
    assert_eq!(app_resources(&e), (50_000, 64 << 20));
}

#[tokio::test(start_paused = true)]
async fn a_memory_limit_below_the_pods_usage_is_refused_before_anything_changes() {
    let (e, cg) = setup();
    let big = pod("1", "128Mi");
    assert!(e.mgr.sync_pod(&big, &status(&e).await).await.ok());
    *cg.config.lock().unwrap() = PodCgroupConfig {
        cpu_shares: Some(1024),
        cpu_quota: Some(100_000),
        cpu_period: Some(100_000),
        memory: Some(128 << 20),
    };
    *cg.usage.lock().unwrap() = 100 << 20;
    let id = e.fake.container_ids("app")[0].clone();
    e.fake.set_usage(&id, 0, 90 << 20);
    let r = e.mgr.sync_pod(&pod("1", "64Mi"), &status(&e).await).await;
    let err = r.errors.iter().find(|e| e.action == kubelet_runtime::resize_run::RESIZE_ACTION).expect("a resize error");
    assert_eq!(
        err.message,
        "cannot decrease memory limits: [attempting to set pod memory limit (67108864) below current usage (104857600), \
         attempting to set container \"app\" memory limit (67108864) below current usage (94371840)]"
    );
    assert!(cg.writes.lock().unwrap().is_empty());
    assert_eq!(app_resources(&e), (100_000, 128 << 20));
    assert!(e.mgr.is_pod_resize_in_progress(&pod("1", "64Mi"), &status(&e).await), "still to do");
}

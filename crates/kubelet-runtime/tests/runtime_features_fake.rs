//! What the runtime manager sends for the features a runtime handler may or may not have (containerd 2 reports
//! them, 1.6 does not), read back from the in-memory runtime: user namespaces (`hostUsers: false`), devices and
//! CDI names from the device managers, and image volumes.

mod common;

use std::sync::Arc;

use common::{Env, env_built, pod_p, status};
use k8s_openapi::api::core::v1::{Container, ImageVolumeSource, Pod, PodSpec, Volume, VolumeMount};
use kubelet_cri::api;
use kubelet_runtime::RuntimeManager;
use kubelet_runtime::devices::{ContainerDevices, DeviceRunOptions};
use kubelet_runtime::runtime_handlers::{RuntimeHandlerInfo, RuntimeInfo};
use kubelet_runtime::userns::{KubeletMappings, UsernsManager};

fn app(mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: "app".into(),
        image: Some("busybox:1".into()),
        volume_mounts: Some(mounts).filter(|m| !m.is_empty()),
        ..Default::default()
    }
}

/// A manager whose runtime reports `handlers` and which allocates user namespaces below `dir`.
fn with_handlers(handlers: Vec<RuntimeHandlerInfo>, dir: &std::path::Path) -> Env {
    let (tx, rx) = tokio::sync::watch::channel(RuntimeInfo { handlers, supplemental_groups_policy: Some(true) });
    std::mem::forget(tx);
    let userns = UsernsManager::new(dir.to_path_buf(), 0, KubeletMappings::DEFAULT, 110, Box::new(|_| 0)).unwrap();
    env_built(|m: RuntimeManager| m.with_runtime_handlers(rx).with_user_namespaces(Arc::new(userns)))
}

fn userns_handler(supported: bool) -> Vec<RuntimeHandlerInfo> {
    vec![RuntimeHandlerInfo { name: "".into(), recursive_read_only_mounts: true, user_namespaces: supported }]
}

fn host_users_false() -> Pod {
    pod_p(PodSpec { host_users: Some(false), containers: vec![app(vec![])], ..Default::default() })
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_host_users_false_gets_its_own_range_in_the_sandbox_the_containers_and_their_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let e = with_handlers(userns_handler(true), dir.path());
    let r = e.mgr.sync_pod(&host_users_false(), &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    use kubelet_cri::RuntimeService;
    let sb = &e.fake.list_pod_sandbox(None).await.unwrap()[0];
    let sb_cfg = e.fake.sandbox_config(&sb.id).unwrap();
    let ns = sb_cfg.linux.unwrap().security_context.unwrap().namespace_options.unwrap().userns_options.unwrap();
    assert_eq!(ns.mode, api::NamespaceMode::Pod as i32);
    assert_eq!(ns.uids, vec![api::IdMapping { host_id: 65536, container_id: 0, length: 65536 }]);
    assert_eq!(ns.gids, ns.uids);
    let c = e.fake.container_config(&e.fake.container_ids("app")[0]).unwrap();
    let c_ns = c.linux.unwrap().security_context.unwrap().namespace_options.unwrap().userns_options.unwrap();
    assert_eq!(c_ns, ns, "the container shares the sandbox's user namespace");
    assert!(c.mounts.iter().all(|m| m.uid_mappings == ns.uids && m.gid_mappings == ns.gids), "{:?}", c.mounts);
    let saved = std::fs::read_to_string(dir.path().join("uid-1/userns")).unwrap();
    assert_eq!(
        saved,
        r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}"#
    );
    e.mgr.forget_terminated_pod(&kubelet_types::PodUid::from("uid-1"));
    assert!(!dir.path().join("uid-1/userns").exists(), "the range is freed with the pod");
}

#[tokio::test(start_paused = true)]
async fn a_handler_without_user_namespaces_fails_the_sandbox_with_upstreams_text_and_runs_nothing() {
    for handlers in [userns_handler(false), vec![]] {
        let dir = tempfile::tempdir().unwrap();
        let e = with_handlers(handlers, dir.path());
        let r = e.mgr.sync_pod(&host_users_false(), &status(&e).await).await;
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert_eq!(
            r.errors[0].message,
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert_eq!(e.fake.count("RunPodSandbox"), 0);
        assert!(e.fake.container_ids("app").is_empty());
    }
}

struct Cdi;

#[async_trait::async_trait]
impl ContainerDevices for Cdi {
    async fn run_options(&self, _: &Pod, c: &Container) -> Result<DeviceRunOptions, String> {
        Ok(DeviceRunOptions {
            envs: vec![("DEVICE".into(), format!("for-{}", c.name)), ("SHARED".into(), "device".into())],
            cdi_devices: vec!["example.com/resource=dev0".into()],
            ..Default::default()
        })
    }
}

#[tokio::test(start_paused = true)]
async fn the_device_managers_cdi_names_and_variables_reach_the_container() {
    let e = env_built(|m| m.with_devices(Arc::new(Cdi)));
    let mut c = app(vec![]);
    c.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: "SHARED".into(),
        value: Some("own".into()),
        ..Default::default()
    }]);
    let p = pod_p(PodSpec { containers: vec![c], ..Default::default() });
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    let cfg = e.fake.container_config(&e.fake.container_ids("app")[0]).unwrap();
    assert_eq!(cfg.cdi_devices, vec![api::CdiDevice { name: "example.com/resource=dev0".into() }]);
    let envs: Vec<(&str, &str)> = cfg.envs.iter().map(|kv| (kv.key.as_str(), kv.value.as_str())).collect();
    let device = envs.iter().position(|e| *e == ("DEVICE", "for-app")).expect("the device's variable");
    let shared: Vec<usize> = envs.iter().enumerate().filter(|(_, e)| e.0 == "SHARED").map(|(i, _)| i).collect();
    assert_eq!(envs[*shared.last().unwrap()], ("SHARED", "own"), "the container's own comes last: {envs:?}");
    assert!(device < *shared.last().unwrap());
}

fn image_volume_pod(reference: &str) -> Pod {
    let mount = |path: &str, sub: Option<&str>| VolumeMount {
        name: "tools".into(),
        mount_path: path.into(),
        sub_path: sub.map(str::to_string),
        ..Default::default()
    };
    let other = Container { name: "other".into(), image: Some("busybox:1".into()), ..Default::default() };
    pod_p(PodSpec {
        volumes: Some(vec![Volume {
            name: "tools".into(),
            image: Some(ImageVolumeSource {
                reference: Some(reference.into()),
                pull_policy: Some("IfNotPresent".into()),
            }),
            ..Default::default()
        }]),
        containers: vec![app(vec![mount("/img", None), mount("/sub", Some("bin"))]), other],
        ..Default::default()
    })
}

#[tokio::test(start_paused = true)]
async fn an_image_volume_is_mounted_by_the_runtime_read_only_with_its_subpath() {
    let e = common::env();
    let r = e.mgr.sync_pod(&image_volume_pod("busybox:1"), &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    let cfg = e.fake.container_config(&e.fake.container_ids("app")[0]).unwrap();
    let img: Vec<&api::Mount> = cfg.mounts.iter().filter(|m| m.image.is_some()).collect();
    assert_eq!(img.len(), 2, "{:?}", cfg.mounts);
    for m in &img {
        assert!(m.readonly && m.host_path.is_empty(), "{m:?}");
        assert_eq!(m.image.as_ref().unwrap().user_specified_image, "busybox:1");
    }
    assert_eq!(img.iter().map(|m| m.image_sub_path.as_str()).collect::<Vec<_>>(), ["", "bin"]);
    assert!(e.mgr.image_volumes_in_use().all().len() == 1, "the image is kept from garbage collection");
}

#[tokio::test(start_paused = true)]
async fn a_missing_image_volume_fails_only_the_containers_that_mount_it() {
    let e = common::env();
    let mut p = image_volume_pod("missing:1");
    p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0].image.as_mut().unwrap().pull_policy = Some("Never".into());
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert_eq!(r.errors[0].reason, "ErrImageNeverPull");
    assert_eq!(r.errors[0].target, "app");
    assert!(e.fake.container_ids("app").is_empty());
    assert_eq!(e.fake.container_ids("other").len(), 1, "a container without the volume starts");
}

#[tokio::test(start_paused = true)]
async fn a_failed_image_volume_is_an_event_per_mount_and_the_containers_own_image_is_not_pulled() {
    let events = Arc::new(common::Events::default());
    let ev = events.clone();
    let e = env_built(move |m| m.with_recorder(ev));
    let mut p = image_volume_pod("missing:1");
    p.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0].image.as_mut().unwrap().pull_policy = Some("Never".into());
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let events = events.0.lock().unwrap().clone();
    let failed: Vec<&(String, String)> = events.iter().filter(|(r, _)| r == "Failed").collect();
    let per_mount = ("Failed".to_string(), "Error: ErrImageNeverPull".to_string());
    assert_eq!(failed, [&per_mount, &per_mount], "one per mount of the volume (`/img`, `/sub`): {events:?}");
    let pulled = events.iter().filter(|(r, _)| r == "Pulled").count();
    assert_eq!(pulled, 1, "only the other container's image is looked at: {events:?}");
}

/// One volume `data`, a host folder.
struct OneVolume(std::path::PathBuf);

impl kubelet_types::objects::PodVolumes for OneVolume {
    fn volumes(
        &self,
        _: &kubelet_types::PodUid,
    ) -> std::collections::HashMap<String, kubelet_types::objects::MountedVolume> {
        let v = kubelet_types::objects::MountedVolume { host_path: self.0.clone(), read_only: false, block: false };
        [("data".to_string(), v)].into()
    }
}

fn rro_pod(mode: &str) -> Pod {
    let m = VolumeMount {
        name: "data".into(),
        mount_path: "/data".into(),
        read_only: Some(true),
        recursive_read_only: Some(mode.into()),
        ..Default::default()
    };
    pod_p(PodSpec { containers: vec![app(vec![m])], ..Default::default() })
}

#[tokio::test(start_paused = true)]
async fn recursive_read_only_reaches_the_mount_where_the_handler_can_and_fails_the_container_where_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    for (rro, mode, want) in
        [(true, "Enabled", Ok(true)), (false, "IfPossible", Ok(false)), (false, "Enabled", Err(()))]
    {
        let handlers =
            vec![RuntimeHandlerInfo { name: "".into(), recursive_read_only_mounts: rro, user_namespaces: true }];
        let (tx, rx) = tokio::sync::watch::channel(RuntimeInfo { handlers, supplemental_groups_policy: None });
        std::mem::forget(tx);
        let vol = Arc::new(OneVolume(dir.path().to_path_buf()));
        let e = env_built(move |m| m.with_runtime_handlers(rx).with_volumes(vol));
        let r = e.mgr.sync_pod(&rro_pod(mode), &status(&e).await).await;
        match want {
            Ok(flag) => {
                assert!(r.ok(), "{:?}", r.errors);
                let cfg = e.fake.container_config(&e.fake.container_ids("app")[0]).unwrap();
                let m = cfg.mounts.iter().find(|m| m.container_path == "/data").unwrap();
                assert_eq!((m.readonly, m.recursive_read_only), (true, flag), "{mode} with support {rro}");
            }
            Err(()) => {
                assert_eq!(r.errors[0].reason, "CreateContainerConfigError");
                assert_eq!(
                    r.errors[0].message,
                    "failed to resolve recursive read-only mode: volume \"data\" requested recursive read-only mode, \
                     but it is not supported by the runtime"
                );
                assert!(e.fake.container_ids("app").is_empty(), "never run with a writable submount");
            }
        }
    }
}

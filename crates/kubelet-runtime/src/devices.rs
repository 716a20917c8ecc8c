//! What the node's device managers give a container (`pkg/kubelet/cm/container_manager_linux.go` GetResources into
//! `RunContainerOptions`: device nodes, mounts, environment, annotations and CDI device names, from
//! `pkg/kubelet/cm/devicemanager/pod_devices.go` and `pkg/kubelet/cm/dra`).
//!
//! The runtime manager asks once per container it creates, before the container's own environment and mounts are
//! made: device environment variables and mounts come first (the container's own override them, as upstream
//! appends them after), annotations go under the kubelet's own keys, and CDI names reach the runtime as
//! `ContainerConfig.CDI_devices` (containerd 2 with `enable_cdi` resolves them against `/etc/cdi` and
//! `/var/run/cdi`; upstream no longer writes `cdi.k8s.io/` annotations itself), the DRA manager's before the device
//! manager's. An error fails the container with `CreateContainerConfigError` and is retried at the next sync. The
//! DRA manager's claims are prepared before the pod's sandbox ([`ContainerDevices::prepare`]) and unprepared once
//! its containers stopped.

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cri::api;

/// A container's devices, as the device managers allocated them (the device manager's own type).
pub use kubelet_cm::devicemanager::RunOptions as DeviceRunOptions;

/// The device managers as the runtime manager sees them.
#[async_trait::async_trait]
pub trait ContainerDevices: Send + Sync {
    /// The devices of container `c` of `pod`, or why they cannot be given (a plugin's `PreStartContainer` may run
    /// first).
    async fn run_options(&self, pod: &Pod, c: &Container) -> Result<DeviceRunOptions, String>;

    /// Frees the devices of a pod that will run nothing again (terminated or gone).
    fn release(&self, _pod_uid: &str) {}

    /// Prepares the pod's dynamic resources (its ResourceClaims) before its sandbox is made.
    async fn prepare(&self, _pod: &Pod) -> Result<(), String> {
        Ok(())
    }

    /// Unprepares them once the pod's containers all stopped.
    async fn unprepare(&self, _pod: &Pod) -> Result<(), String> {
        Ok(())
    }
}

/// A node without device managers: no container gets devices.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoDevices;

#[async_trait::async_trait]
impl ContainerDevices for NoDevices {
    async fn run_options(&self, _: &Pod, _: &Container) -> Result<DeviceRunOptions, String> {
        Ok(DeviceRunOptions::default())
    }
}

/// Puts a container's devices into its CRI config (`generateContainerConfig`): device nodes and CDI names, device
/// mounts before the others, device annotations under the kubelet's.
pub fn apply(config: &mut api::ContainerConfig, d: DeviceRunOptions) {
    config.devices = d.devices;
    config.cdi_devices = d.cdi_devices.into_iter().map(|name| api::CdiDevice { name }).collect();
    if !d.mounts.is_empty() {
        let own = std::mem::take(&mut config.mounts);
        config.mounts = d.mounts.into_iter().chain(own).collect();
    }
    for (k, v) in d.annotations {
        config.annotations.entry(k).or_insert(v);
    }
}

/// The raw block volumes of container `c` as CRI devices (`makeBlockVolumes`): each `volumeDevices` entry the pod's
/// link to its mapped device (the runtime resolves the link), `mrw`, or `r` for a read-only claim. Appended after
/// the device managers' devices, as upstream.
pub fn block_volumes(
    c: &Container,
    volumes: &std::collections::HashMap<String, kubelet_types::objects::MountedVolume>,
) -> Result<Vec<api::Device>, String> {
    let mut out = vec![];
    for d in c.volume_devices.iter().flatten() {
        if !d.device_path.starts_with('/') {
            return Err(format!("error DevicePath `{}` must be an absolute path", d.device_path));
        }
        let v = volumes
            .get(&d.name)
            .filter(|v| v.block)
            .ok_or_else(|| format!("cannot find volume {:?} to pass into container {:?}", d.name, c.name))?;
        out.push(api::Device {
            container_path: d.device_path.clone(),
            host_path: v.host_path.display().to_string(),
            permissions: if v.read_only { "r" } else { "mrw" }.into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_reach_the_config_with_the_kubelets_annotations_winning() {
        let mut config = api::ContainerConfig {
            mounts: vec![api::Mount { container_path: "/data".into(), ..Default::default() }],
            annotations: [("io.kubernetes.container.hash".to_string(), "abc".to_string())].into(),
            ..Default::default()
        };
        apply(
            &mut config,
            DeviceRunOptions {
                devices: vec![api::Device {
                    container_path: "/dev/fake0".into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                mounts: vec![api::Mount { container_path: "/dev/shm-dev".into(), ..Default::default() }],
                annotations: vec![
                    ("io.kubernetes.container.hash".into(), "device".into()),
                    ("vendor.com/device".into(), "0".into()),
                ],
                cdi_devices: vec!["example.com/resource=dev0".into()],
                envs: vec![],
            },
        );
        assert_eq!(config.cdi_devices, vec![api::CdiDevice { name: "example.com/resource=dev0".into() }]);
        assert_eq!(config.devices.len(), 1);
        let paths: Vec<&str> = config.mounts.iter().map(|m| m.container_path.as_str()).collect();
        assert_eq!(paths, ["/dev/shm-dev", "/data"], "device mounts first");
        assert_eq!(config.annotations["io.kubernetes.container.hash"], "abc");
        assert_eq!(config.annotations["vendor.com/device"], "0");
    }

    #[test]
    fn a_containers_block_volumes_are_its_links_with_upstreams_permissions_or_an_error() {
        use k8s_openapi::api::core::v1::VolumeDevice;
        use kubelet_types::objects::MountedVolume;
        let c = |devices: &[(&str, &str)]| Container {
            name: "app".into(),
            volume_devices: Some(
                devices.iter().map(|(n, p)| VolumeDevice { name: n.to_string(), device_path: p.to_string() }).collect(),
            ),
            ..Default::default()
        };
        let link = |p: &str, read_only, block| MountedVolume { host_path: p.into(), read_only, block };
        let volumes = std::collections::HashMap::from([
            ("disk".to_string(), link("/pods/u/volumeDevices/kubernetes.io~csi/pv-1", false, true)),
            ("ro".to_string(), link("/pods/u/volumeDevices/kubernetes.io~csi/pv-2", true, true)),
            ("files".to_string(), link("/pods/u/volumes/kubernetes.io~csi/pv-3/mount", false, false)),
        ]);
        let got = block_volumes(&c(&[("disk", "/dev/xvda"), ("ro", "/dev/xvdb")]), &volumes).unwrap();
        let got: Vec<(&str, &str, &str)> =
            got.iter().map(|d| (d.container_path.as_str(), d.host_path.as_str(), d.permissions.as_str())).collect();
        assert_eq!(
            got,
            [
                ("/dev/xvda", "/pods/u/volumeDevices/kubernetes.io~csi/pv-1", "mrw"),
                ("/dev/xvdb", "/pods/u/volumeDevices/kubernetes.io~csi/pv-2", "r"),
            ]
        );
        assert_eq!(
            block_volumes(&c(&[("files", "/dev/xvdc")]), &volumes).unwrap_err(),
            "cannot find volume \"files\" to pass into container \"app\""
        );
        assert_eq!(
            block_volumes(&c(&[("disk", "dev/xvda")]), &volumes).unwrap_err(),
            "error DevicePath `dev/xvda` must be an absolute path"
        );
    }
}

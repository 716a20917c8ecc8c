//! Setting up and tearing down the volumes of a pod (`volumemanager` reconciler with the plugins' SetUp/TearDown).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, ServiceAccountTokenProjection, Volume};
use kubelet_types::objects::{MountedVolume, ObjectSource, PodVolumes};
use kubelet_types::{PodUid, pod_update::pod_ref};
use tracing::{debug, info};

use crate::atomic_writer::{FileProjection, Ownership};
use crate::csi::plugin::CsiPlugin;
use crate::sources::{
    DEFAULT_MODE, DownwardValues, GatedProjections, KeyedSource, config_map_payload, downward_payload,
    gated_source_error, secret_payload,
};
use crate::token::{NoTokens, TokenManager};
use crate::{MOUNT_WAIT_TIMEOUT, MountFailure, MountFailures, VolumeError, atomic_writer, empty_dir, hostpath};

/// Mounting of tmpfs (memory-backed emptyDir, secret and projected volumes) and hugetlbfs (huge page emptyDir).
pub trait Mounter: Send + Sync + 'static {
    /// Mounts a tmpfs at `path`, of at most `size` bytes.
    fn mount_tmpfs(&self, path: &Path, size: Option<u64>) -> Result<(), String>;
    /// Mounts a hugetlbfs at `path` with `option` (`pagesize=2Mi`), as upstream's
    /// `mount -t hugetlbfs -o pagesize=2Mi nodev <path>`.
    fn mount_hugetlbfs(&self, path: &Path, option: &str) -> Result<(), String> {
        Err(format!("cannot mount hugetlbfs ({option}) at {}: not supported by this mounter", path.display()))
    }
    /// Unmounts `path` (lazily, as nothing of the pod runs any more).
    fn unmount(&self, path: &Path) -> Result<(), String>;
    /// Mount points at or below `path`.
    fn mounts_under(&self, path: &Path) -> Vec<PathBuf>;
    /// Bind-mounts `source` (a device file) onto the file `target` (`mount --bind`).
    fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        Err(format!("cannot bind {} to {}: not supported by this mounter", source.display(), target.display()))
    }
    /// Keeps the block device at `path` open with a loop device over it, unless one is there
    /// (`volumepathhandler.AttachFileDevice`: `losetup -f --show`).
    fn lock_device(&self, path: &Path) -> Result<(), String> {
        Err(format!("cannot lock {}: not supported by this mounter", path.display()))
    }
    /// Releases the loop device over `path`, if any (`DetachFileDevice`: `losetup -d`).
    fn unlock_device(&self, path: &Path) -> Result<(), String> {
        Err(format!("cannot unlock {}: not supported by this mounter", path.display()))
    }
}

/// The loop device backed by exactly `path`, if any (`getLoopDeviceFromSysfs`: each `/sys/block/loop*/loop/
/// backing_file`, compared as a path, so two pods' bind mounts of one device keep a loop each).
fn loop_device(path: &Path) -> Result<Option<String>, String> {
    let want = path.display().to_string();
    let rd = std::fs::read_dir("/sys/block").map_err(|e| format!("read /sys/block: {e}"))?;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).unwrap_or_default();
        if backing.trim_end() == want {
            return Ok(Some(format!("/dev/{name}")));
        }
    }
    Ok(None)
}

/// The real mounts, through mount(2) and /proc/self/mountinfo.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemMounter;

impl Mounter for SystemMounter {
    fn mount_tmpfs(&self, path: &Path, size: Option<u64>) -> Result<(), String> {
        use nix::mount::{MsFlags, mount};
        let data = size.map(|s| format!("size={s}"));
        mount(Some("tmpfs"), path, Some("tmpfs"), MsFlags::empty(), data.as_deref()).map_err(|e| e.to_string())
    }

    fn mount_hugetlbfs(&self, path: &Path, option: &str) -> Result<(), String> {
        use nix::mount::{MsFlags, mount};
        mount(Some("nodev"), path, Some("hugetlbfs"), MsFlags::empty(), Some(option)).map_err(|e| e.to_string())
    }

    fn unmount(&self, path: &Path) -> Result<(), String> {
        nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH).map_err(|e| e.to_string())
    }

    fn bind_mount(&self, source: &Path, target: &Path) -> Result<(), String> {
        use nix::mount::{MsFlags, mount};
        mount(Some(source), target, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(|e| e.to_string())
    }

    fn lock_device(&self, path: &Path) -> Result<(), String> {
        if loop_device(path)?.is_some() {
            return Ok(());
        }
        let out = std::process::Command::new("losetup")
            .args(["-f", "--show"])
            .arg(path)
            .output()
            .map_err(|e| format!("losetup -f --show {} failed: {e}", path.display()))?;
        if !out.status.success() {
            let e = String::from_utf8_lossy(&out.stderr);
            return Err(format!("losetup -f --show {} failed: {}", path.display(), e.trim()));
        }
        Ok(())
    }

    fn unlock_device(&self, path: &Path) -> Result<(), String> {
        let Some(dev) = loop_device(path)? else { return Ok(()) };
        let out = std::process::Command::new("losetup")
            .args(["-d", &dev])
            .output()
            .map_err(|e| format!("losetup -d {dev} failed: {e}"))?;
        if !out.status.success() {
            return Err(format!("losetup -d {dev} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(())
    }

    fn mounts_under(&self, path: &Path) -> Vec<PathBuf> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(|m| PathBuf::from(m.replace("\\040", " ")))
            .filter(|m| m.starts_with(path))
            .collect()
    }
}

/// What the manager keeps of a pod for its CSI volumes: its name (for the usage's events) and its claims backed
/// by CSI volumes, by volume name.
#[derive(Clone, Debug, Default)]
struct CsiPod {
    namespace: String,
    name: String,
    claims: BTreeMap<String, Claimed>,
}

/// A claim backed by a CSI volume.
#[derive(Clone, Debug)]
struct Claimed {
    /// `kubernetes.io/csi/<driver>^<handle>`.
    unique: String,
    driver: String,
    /// The PersistentVolumeClaim's name.
    claim: String,
}

/// The volume manager.
pub struct VolumeManager {
    pods_dir: PathBuf,
    objects: Arc<dyn ObjectSource>,
    downward: Arc<dyn DownwardValues>,
    mounter: Arc<dyn Mounter>,
    tokens: Arc<TokenManager>,
    gated: GatedProjections,
    csi: Option<Arc<CsiPlugin>>,
    /// The pods' CSI claims (for `volumesInUse`) and names (for the volume usage).
    csi_pods: Mutex<HashMap<PodUid, CsiPod>>,
    /// The Node as the node status last wrote it (its `volumesInUse` and the controller's `volumesAttached`).
    node: Option<tokio::sync::watch::Receiver<Option<k8s_openapi::api::core::v1::Node>>>,
    /// Bumped when the volumes in use change, so the node status reports them at once.
    in_use_changes: tokio::sync::watch::Sender<u64>,
    mounted: Mutex<HashMap<PodUid, HashMap<String, MountedVolume>>>,
    /// Pods whose volumes are not all set up, since when they wait (or the last timeout).
    waiting: Mutex<HashMap<PodUid, tokio::time::Instant>>,
}

impl std::fmt::Debug for VolumeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeManager").field("pods_dir", &self.pods_dir).finish()
    }
}

/// The plugin directory name and whether the volume lives on tmpfs.
fn plugin(v: &Volume) -> Result<Option<(&'static str, bool)>, VolumeError> {
    Ok(Some(if let Some(e) = &v.empty_dir {
        ("kubernetes.io~empty-dir", e.medium.as_deref() == Some("Memory"))
    } else if v.config_map.is_some() {
        ("kubernetes.io~configmap", false)
    } else if v.secret.is_some() {
        ("kubernetes.io~secret", true)
    } else if v.downward_api.is_some() {
        ("kubernetes.io~downward-api", false)
    } else if v.projected.is_some() {
        ("kubernetes.io~projected", true)
    } else if v.csi.is_some() || v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
        // The driver mounts `<this>/mount` (see `csi::plugin`; a claim's folder is named after its volume).
        (crate::csi::voldata::PLUGIN_DIR, false)
    } else if v.host_path.is_some() || v.image.is_some() {
        // hostPath is the host's folder; an image volume is mounted by the runtime (`pkg/volume/image`: no path).
        return Ok(None);
    } else {
        return Err(VolumeError::Unsupported { kind: volume_kind(v).into() });
    }))
}

/// The first volume of the pod whose type rkubelet cannot set up, with the type's API name.
pub fn unsupported_volume(pod: &Pod) -> Option<(String, &'static str)> {
    let vols = pod.spec.as_ref()?.volumes.as_ref()?;
    vols.iter().find(|v| plugin(v).is_err()).map(|v| (v.name.clone(), volume_kind(v)))
}

/// The API name of a volume's type, for messages.
pub fn volume_kind(v: &Volume) -> &'static str {
    let kinds: [(&str, bool); 25] = [
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("image", v.image.is_some()),
        ("fc", v.fc.is_some()),
        ("rbd", v.rbd.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("cinder", v.cinder.is_some()),
        ("flocker", v.flocker.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("storageos", v.storageos.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
        ("hostPath", v.host_path.is_some()),
    ];
    kinds.iter().find(|(_, set)| *set).map(|(k, _)| *k).unwrap_or("unknown")
}

/// `YYYY_MM_DD_HH_MM_SS` of now, for timestamped directories.
fn timestamp() -> String {
    #[allow(clippy::disallowed_methods)] // only names a directory; nothing is timed by it
    let now = std::time::SystemTime::now();
    let t = kubelet_types::clock::api_time(now).0;
    t.strftime("%Y_%m_%d_%H_%M_%S.%f").to_string()
}

/// The size of a memory-backed emptyDir (`calculateEmptyDirMemorySize`): the pod cgroup's memory limit
/// (`ResourceConfigForPod`: pod-level limits and overhead included) when it has one, the volume's `sizeLimit`
/// when smaller; None (the node's memory) without either.
fn tmpfs_size(pod: &Pod, v: &Volume) -> Option<u64> {
    let pod_limit = kubelet_types::qos::pod_resources(pod, false, 100_000).memory.filter(|m| *m > 0).map(|m| m as u64);
    let volume = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()).and_then(|q| parse_bytes(&q.0));
    match (pod_limit, volume.filter(|v| *v > 0)) {
        (Some(p), Some(v)) => Some(p.min(v)),
        (p, v) => v.or(p),
    }
}

/// The user every init and app container runs as, when they all run as the same declared user (`FsUserFrom`).
fn fs_user(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|c| c.run_as_user);
    let mut user = None;
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        let u = c.security_context.as_ref().and_then(|s| s.run_as_user).or(pod_user)?;
        if user.is_some_and(|x| x != u) {
            return None;
        }
        user = Some(u);
    }
    user.map(|u| u as u32)
}

fn parse_bytes(q: &str) -> Option<u64> {
    kubelet_types::quantity::parse_quantity(q).map(|v| v as u64)
}

impl VolumeManager {
    /// A manager of the volumes under `pods_dir` (`<root-dir>/pods`).
    pub fn new(
        pods_dir: PathBuf,
        objects: Arc<dyn ObjectSource>,
        downward: Arc<dyn DownwardValues>,
        mounter: Arc<dyn Mounter>,
    ) -> Self {
        let tokens = Arc::new(TokenManager::new(Arc::new(NoTokens), Arc::new(kubelet_types::clock::SystemClock)));
        Self {
            pods_dir,
            objects,
            downward,
            mounter,
            tokens,
            gated: GatedProjections::default(),
            csi: None,
            csi_pods: Mutex::default(),
            node: None,
            in_use_changes: tokio::sync::watch::channel(0).0,
            mounted: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// The same manager, with service account tokens from `tokens` (without: projected tokens fail to mount).
    pub fn with_tokens(mut self, tokens: Arc<TokenManager>) -> Self {
        self.tokens = tokens;
        self
    }

    /// The same manager, told which gated projected sources upstream would serve on this node (without: none, as
    /// with upstream's default feature gates); rkubelet fails their set-up either way, see
    /// [`gated_source_error`].
    pub fn with_gated_projections(mut self, gated: GatedProjections) -> Self {
        self.gated = gated;
        self
    }

    /// The same manager, with inline CSI volumes published through `csi` (without: their set-up fails).
    pub fn with_csi(mut self, csi: Arc<CsiPlugin>) -> Self {
        self.csi = Some(csi);
        self
    }

    /// The same manager, reading the Node from `node` to wait for attachments (without: attach-required volumes
    /// never mount).
    pub fn with_node(mut self, node: tokio::sync::watch::Receiver<Option<k8s_openapi::api::core::v1::Node>>) -> Self {
        self.node = Some(node);
        self
    }

    /// Changes of the volumes in use, for the node status to report them at once.
    pub fn in_use_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.in_use_changes.subscribe()
    }

    fn is_mount_point(&self, path: &Path) -> bool {
        self.mounter.mounts_under(path).iter().any(|m| m == path)
    }

    fn csi(&self) -> Result<&CsiPlugin, VolumeError> {
        self.csi
            .as_deref()
            .ok_or_else(|| VolumeError::Csi("kubernetes.io/csi: the CSI volume plugin is not set up".into()))
    }

    fn volumes_dir(&self, uid: &str) -> PathBuf {
        self.pods_dir.join(uid).join("volumes")
    }

    /// Sets up every volume of the pod (`WaitForAttachAndMount` with the plugins' SetUp) and refreshes the contents
    /// of those set up before. Each volume is tried. A volume that was never set up blocks the pod: the failures
    /// are returned as `Err`, naming each volume, and once the pod has waited [`MOUNT_WAIT_TIMEOUT`] they carry
    /// upstream's timeout text (again every timeout). A refresh that fails for a volume already set up does not
    /// block the pod (its last contents stay): such failures come back in `Ok`, for the caller to report, as
    /// upstream's reconciler does while the pod keeps being synced.
    pub async fn mount_pod(&self, pod: &Pod) -> Result<Vec<MountFailure>, MountFailures> {
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let (failures, refresh) = self.set_up_pod(pod, &uid).await;
        if failures.is_empty() {
            self.waiting.lock().unwrap().remove(&uid);
            return Ok(refresh);
        }
        let now = tokio::time::Instant::now();
        let mut waiting = self.waiting.lock().unwrap();
        let since = waiting.entry(uid).or_insert(now);
        let mut names: Vec<&str> = failures.iter().map(|f| f.volume.as_str()).collect();
        names.sort_unstable();
        let mut unattached: Vec<&str> = failures
            .iter()
            .filter(|f| matches!(f.error, VolumeError::Unattached(_)))
            .map(|f| f.volume.as_str())
            .collect();
        unattached.sort_unstable();
        let unprocessed: Vec<&MountFailure> =
            failures.iter().filter(|f| matches!(f.error, VolumeError::Process(_))).collect();
        let unable = if !unprocessed.is_empty() {
            // Upstream's wait ends at once with the populator's errors.
            let mut failed: Vec<&str> = unprocessed.iter().map(|f| f.volume.as_str()).collect();
            failed.sort_unstable();
            let errors: Vec<String> = unprocessed.iter().map(|f| f.error.to_string()).collect();
            Some(format!(
                "unmounted volumes=[{}], unattached volumes=[{}], failed to process volumes=[{}]: {}",
                names.join(" "),
                unattached.join(" "),
                failed.join(" "),
                errors.join("; ")
            ))
        } else {
            (now.duration_since(*since) >= MOUNT_WAIT_TIMEOUT).then(|| {
                *since = now;
                format!(
                    "unmounted volumes=[{}], unattached volumes=[{}], failed to process volumes=[]: context deadline \
                     exceeded",
                    names.join(" "),
                    unattached.join(" ")
                )
            })
        };
        let mut failures = failures;
        failures.extend(refresh);
        Err(MountFailures { failures, unable })
    }

    /// (failures of volumes never set up, failures of refreshes).
    async fn set_up_pod(&self, pod: &Pod, uid: &PodUid) -> (Vec<MountFailure>, Vec<MountFailure>) {
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let before = self.mounted.lock().unwrap().get(uid).cloned().unwrap_or_default();
        {
            let mut pods = self.csi_pods.lock().unwrap();
            let p = pods.entry(uid.clone()).or_default();
            p.namespace = ns.clone();
            p.name = pod.metadata.name.clone().unwrap_or_default();
        }
        let mut mounted = HashMap::new();
        let (mut failures, mut refresh) = (vec![], vec![]);
        for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
            // Set up before, by this process or (after a restart) by the last one.
            let known = before.get(&v.name).cloned().or_else(|| self.reconstruct(pod, v));
            let set_up = if crate::csi::persistent::claim_name(pod, v).is_some() {
                self.set_up_claim(pod, v, known.as_ref()).await
            } else {
                self.set_up_volume(pod, v, &ns, known.is_some()).await
            };
            match set_up {
                Ok(m) => {
                    mounted.insert(v.name.clone(), m);
                }
                Err(error) => match known {
                    Some(m) => {
                        mounted.insert(v.name.clone(), m);
                        refresh.push(MountFailure { volume: v.name.clone(), error });
                    }
                    None => failures.push(MountFailure { volume: v.name.clone(), error }),
                },
            }
        }
        self.mounted.lock().unwrap().insert(uid.clone(), mounted);
        (failures, refresh)
    }

    /// A volume a previous run of the kubelet set up (upstream's reconstruction from the pod directory): an
    /// emptyDir whose directory exists, an API-backed volume whose `..data` exists, in both cases on its tmpfs
    /// if it has one (after a reboot the directory is there, the mount is not). hostPath volumes are checked again.
    fn reconstruct(&self, pod: &Pod, v: &Volume) -> Option<MountedVolume> {
        if v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
            // Its folder is its PersistentVolume's: found once the claim is resolved (`set_up_claim`).
            return None;
        }
        if let Some(src) = &v.csi {
            let pod_dir = self.pods_dir.join(pod.metadata.uid.as_deref().unwrap_or_default());
            if !CsiPlugin::is_set_up(&pod_dir, &v.name, |p| self.is_mount_point(p)) {
                return None;
            }
            let host_path = crate::csi::voldata::mount_dir(&pod_dir, &v.name);
            info!(pod = %pod_ref(pod), volume = %v.name, path = %host_path.display(), "CSI volume reconstructed from vol_data.json and the mount table");
            return Some(MountedVolume { host_path, read_only: src.read_only == Some(true), block: false });
        }
        let (dir, tmpfs) = self.volume_dir(pod, v).ok()??;
        let done = if v.empty_dir.is_some() {
            dir.is_dir()
        } else {
            std::fs::symlink_metadata(dir.join(atomic_writer::DATA_DIR)).is_ok()
        };
        let hugetlbfs =
            v.empty_dir.as_ref().is_some_and(|e| matches!(empty_dir::medium(e), Ok(empty_dir::Medium::HugePages(_))));
        if !done || ((tmpfs || hugetlbfs) && !self.mounter.mounts_under(&dir).contains(&dir)) {
            return None;
        }
        info!(pod = %pod_ref(pod), volume = %v.name, path = %dir.display(), "volume reconstructed from the pod directory");
        Some(MountedVolume { host_path: dir, read_only: v.empty_dir.is_none(), block: false })
    }

    /// Where a volume with a plugin directory lives and whether it is on tmpfs (`None` for hostPath).
    fn volume_dir(&self, pod: &Pod, v: &Volume) -> Result<Option<(PathBuf, bool)>, VolumeError> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        Ok(plugin(v)?.map(|(dir_name, tmpfs)| (self.volumes_dir(uid).join(dir_name).join(&v.name), tmpfs)))
    }

    /// Sets up one volume (`SetUp`), or only refreshes its contents when it was set up before.
    async fn set_up_volume(
        &self,
        pod: &Pod,
        v: &Volume,
        ns: &str,
        already_set_up: bool,
    ) -> Result<MountedVolume, VolumeError> {
        if let Some(src) = &v.csi {
            // Published once; again at each sync only where the driver asks for it (`requiresRepublish`): a failure
            // then is a refresh failure, reported while the pod goes on.
            let read_only = src.read_only == Some(true);
            let pod_dir = self.pods_dir.join(pod.metadata.uid.as_deref().unwrap_or_default());
            if already_set_up && !self.csi()?.requires_republish(&src.driver) {
                return Ok(MountedVolume {
                    host_path: crate::csi::voldata::mount_dir(&pod_dir, &v.name),
                    read_only,
                    block: false,
                });
            }
            let mounted = |p: &Path| self.is_mount_point(p);
            let csi = self.csi()?;
            let host_path =
                csi.set_up(pod, &v.name, src, &pod_dir, self.objects.as_ref(), &self.tokens, mounted).await?;
            return Ok(MountedVolume { host_path, read_only, block: false });
        }
        let Some((dir, tmpfs)) = self.volume_dir(pod, v)? else {
            if v.image.is_some() {
                // Nothing to set up: the runtime mounts the image, read-only, when the container is created.
                return Ok(MountedVolume { host_path: PathBuf::new(), read_only: true, block: false });
            }
            let h = v.host_path.as_ref().expect("only hostPath and image volumes have no plugin directory");
            // hostPath needs no remount: checked once, as upstream's SetUp.
            if !already_set_up {
                hostpath::check_type(Path::new(&h.path), h.type_.as_deref().unwrap_or(""))
                    .map_err(VolumeError::HostPath)?;
            }
            return Ok(MountedVolume { host_path: PathBuf::from(&h.path), read_only: false, block: false });
        };
        // Set up once: later syncs only refresh the contents (no mount table read per sync).
        if !already_set_up {
            self.set_up_dir(&dir, tmpfs, v, pod)?;
        }
        let read_only = v.empty_dir.is_none();
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let ownership = psc.and_then(|c| c.fs_group).map(|gid| Ownership { gid: gid as u32, read_only });
        self.write_contents(&dir, v, pod, ns, ownership).await?;
        if let Some(o) = ownership {
            // Upstream sets ownership at each SetUp. New files of API-backed volumes got it before they became
            // visible; the volume's root (and an emptyDir's contents) are walked at the first set-up (unless
            // `fsGroupChangePolicy: OnRootMismatch` and the root matches), later only when the root does not match.
            let on_mismatch =
                already_set_up || psc.and_then(|c| c.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
            crate::ownership::set_volume_ownership(&dir, o.gid, o.read_only, on_mismatch)
                .map_err(|e| VolumeError::Io { path: dir.display().to_string(), message: e.to_string() })?;
        }
        Ok(MountedVolume { host_path: dir, read_only, block: false })
    }

    fn set_up_dir(&self, dir: &Path, tmpfs: bool, v: &Volume, pod: &Pod) -> Result<(), VolumeError> {
        let io = |e: std::io::Error| VolumeError::Io { path: dir.display().to_string(), message: e.to_string() };
        let medium = v.empty_dir.as_ref().map(empty_dir::medium).transpose().map_err(VolumeError::Medium)?;
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(io)?;
            // emptyDir is world-writable, as upstream (0777 with the sticky bit off).
            if v.empty_dir.is_some() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
            }
        }
        if let Some(empty_dir::Medium::HugePages(medium)) = &medium {
            // setupHugepages: the directory, then the mount unless it is there.
            if self.mounter.mounts_under(dir).iter().all(|m| m != dir) {
                let option = empty_dir::page_size_mount_option(medium, pod).map_err(VolumeError::Medium)?;
                self.mounter
                    .mount_hugetlbfs(dir, &option)
                    .map_err(|message| VolumeError::Mount { path: dir.display().to_string(), message })?;
                debug!(pod = %pod_ref(pod), volume = %v.name, path = %dir.display(), option, "mounted hugetlbfs");
            }
            return Ok(());
        }
        if tmpfs && self.mounter.mounts_under(dir).iter().all(|m| m != dir) {
            let size = tmpfs_size(pod, v);
            self.mounter
                .mount_tmpfs(dir, size)
                .map_err(|message| VolumeError::Mount { path: dir.display().to_string(), message })?;
            debug!(pod = %pod_ref(pod), volume = %v.name, path = %dir.display(), "mounted tmpfs");
        }
        Ok(())
    }

    /// Writes the volume's files (API-backed volumes); returns whether anything changed.
    async fn write_contents(
        &self,
        dir: &Path,
        v: &Volume,
        pod: &Pod,
        ns: &str,
        ownership: Option<Ownership>,
    ) -> Result<bool, VolumeError> {
        let objects = self.objects.as_ref();
        let payload = if let Some(c) = &v.config_map {
            let mode = c.default_mode.unwrap_or(DEFAULT_MODE);
            let src =
                KeyedSource { ns, name: &c.name, items: c.items.as_deref(), mode, optional: c.optional == Some(true) };
            config_map_payload(objects, src).await?
        } else if let Some(s) = &v.secret {
            let mode = s.default_mode.unwrap_or(DEFAULT_MODE);
            let name = s.secret_name.clone().unwrap_or_default();
            let src =
                KeyedSource { ns, name: &name, items: s.items.as_deref(), mode, optional: s.optional == Some(true) };
            secret_payload(objects, src).await?
        } else if let Some(d) = &v.downward_api {
            let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
            downward_payload(pod, d.items.as_deref().unwrap_or(&[]), mode, self.downward.as_ref())?
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
            let mut all = std::collections::BTreeMap::new();
            for src in p.sources.iter().flatten() {
                if let Some(c) = &src.config_map {
                    let optional = c.optional == Some(true);
                    let k = KeyedSource { ns, name: &c.name, items: c.items.as_deref(), mode, optional };
                    all.extend(config_map_payload(objects, k).await?);
                } else if let Some(s) = &src.secret {
                    let optional = s.optional == Some(true);
                    let k = KeyedSource { ns, name: &s.name, items: s.items.as_deref(), mode, optional };
                    all.extend(secret_payload(objects, k).await?);
                } else if let Some(d) = &src.downward_api {
                    all.extend(downward_payload(pod, d.items.as_deref().unwrap_or(&[]), mode, self.downward.as_ref())?);
                } else if let Some(t) = &src.service_account_token {
                    let (path, file) = self.token_file(pod, t, mode).await?;
                    all.insert(path, file);
                } else if let Some(e) = gated_source_error(src, self.gated) {
                    return Err(e);
                }
            }
            all
        } else {
            return Ok(false);
        };
        let changed = atomic_writer::write(dir, &payload, &timestamp(), ownership)?;
        if changed {
            info!(pod = %pod_ref(pod), volume = %v.name, files = payload.len(), "volume contents written");
        }
        Ok(changed)
    }

    /// The token file of a `serviceAccountToken` projection (`projected.go` collectData): a token of the pod's
    /// service account bound to the pod, 0600 and owned by the containers' common user when the pod has an
    /// `fsGroup` or such a user, else the volume's mode.
    async fn token_file(
        &self,
        pod: &Pod,
        t: &ServiceAccountTokenProjection,
        mode: i32,
    ) -> Result<(String, FileProjection), VolumeError> {
        let spec = pod.spec.as_ref();
        let fs_group = spec.and_then(|s| s.security_context.as_ref()).and_then(|c| c.fs_group);
        let fs_user = fs_user(pod);
        let mode = if fs_user.is_some() || fs_group.is_some() { 0o600 } else { mode as u32 };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let sa = spec.and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
        let audiences = t.audience.iter().filter(|a| !a.is_empty()).cloned().collect();
        let request = crate::token::pod_bound_request(pod, audiences, t.expiration_seconds);
        let tr = self.tokens.service_account_token(ns, sa, &request).await?;
        let token = tr.status.map(|s| s.token).unwrap_or_default();
        let file = FileProjection { data: token.into_bytes(), mode, owner: fs_user };
        Ok((t.path.clone(), file))
    }

    /// Tears down every volume of a pod whose containers are gone: its CSI volumes are unpublished by their
    /// drivers, then what is mounted below its volumes directory is unmounted and the directory removed. An error
    /// keeps what is left, for the next call.
    pub async fn unmount_pod(&self, uid: &PodUid) -> Result<(), VolumeError> {
        self.tokens.delete_pod_tokens(uid.as_str());
        self.waiting.lock().unwrap().remove(uid);
        // The subPath binds first: they show the volumes' content, so nothing below the pod directory may be
        // removed while one is mounted.
        crate::subpath::clean_subpaths(&self.pods_dir.join(uid.as_str()))
            .map_err(|e| VolumeError::Mount { path: uid.as_str().to_string(), message: e.to_string() })?;
        // Raw block volumes first: unmapped (their loop locks released, their bind mounts gone), unpublished, and
        // unstaged after their last pod.
        let pod_dir = self.pods_dir.join(uid.as_str());
        let links = crate::csi::block::pod_links_dir(&pod_dir);
        if let Ok(rd) = std::fs::read_dir(&links) {
            for e in rd.flatten() {
                let spec = e.file_name().to_string_lossy().into_owned();
                self.csi()?.unmap_block(&pod_dir, uid.as_str(), &spec, self.mounter.as_ref()).await?;
            }
            let _ = std::fs::remove_dir_all(pod_dir.join("volumeDevices"));
        }
        let dir = self.volumes_dir(uid.as_str());
        if let Ok(rd) = std::fs::read_dir(dir.join(crate::csi::voldata::PLUGIN_DIR)) {
            for e in rd.flatten() {
                self.csi()?.tear_down(&e.path(), |p| self.is_mount_point(p)).await?;
            }
        }
        // Volumes staged for set-ups that never published (their pods gone) are unstaged too.
        if let Some(csi) = &self.csi {
            csi.sweep_staged(|p| self.is_mount_point(p)).await;
        }
        if !dir.exists() {
            self.forget_pod(uid);
            return Ok(());
        }
        let mut mounts = self.mounter.mounts_under(&dir);
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in mounts {
            self.mounter
                .unmount(&m)
                .map_err(|message| VolumeError::Mount { path: m.display().to_string(), message })?;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(VolumeError::Io { path: dir.display().to_string(), message: e.to_string() }),
        }
        self.forget_pod(uid);
        Ok(())
    }

    /// Forgets a torn-down pod's volumes and claims.
    fn forget_pod(&self, uid: &PodUid) {
        self.mounted.lock().unwrap().remove(uid);
        if self.csi_pods.lock().unwrap().remove(uid).is_some_and(|p| !p.claims.is_empty()) {
            self.in_use_changes.send_modify(|n| *n += 1);
        }
    }
}

impl PodVolumes for VolumeManager {
    fn volumes(&self, uid: &PodUid) -> HashMap<String, MountedVolume> {
        self.mounted.lock().unwrap().get(uid).cloned().unwrap_or_default()
    }
}

mod claims;
pub use claims::CsiVolumeStat;
#[cfg(test)]
mod tests;

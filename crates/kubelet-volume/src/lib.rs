//! The volume manager (`pkg/kubelet/volumemanager`, `pkg/volume/{emptydir,hostpath,configmap,secret,downwardapi,
//! projected}`): sets up a pod's volumes under `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` before
//! its containers start, and tears them down after they stopped.
//!
//! Contract: the pod worker calls [`VolumeManager::mount_pod`] at every sync of a running pod (idempotent; it also
//! rewrites ConfigMap, Secret and downward API contents that changed) and [`VolumeManager::unmount_pod`] once the
//! pod's containers are gone. The runtime manager reads the mounted volumes through
//! [`kubelet_types::objects::PodVolumes`]. Errors name the volume and are returned for the caller to report
//! (`FailedMount`) and retry; volume types rkubelet does not support are refused with an error naming the type.

pub mod atomic_writer;
pub mod csi;
pub mod empty_dir;
pub mod hostpath;
mod manager;
pub mod mountinfo;
pub mod ownership;
pub mod sources;
pub mod subpath;
pub mod token;

pub use manager::{CsiVolumeStat, Mounter, SystemMounter, VolumeManager, unsupported_volume, volume_kind};
pub use sources::{DownwardValues, GatedProjections};
pub use token::{NoTokens, TokenFetcher, TokenManager};

/// Why a volume could not be set up or torn down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// A file system operation failed.
    #[error("{path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        message: String,
    },
    /// A payload path is not allowed (absolute, `..`).
    #[error("invalid path {path:?}: {message}")]
    InvalidPath {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// The object behind a volume could not be read or lacks a key.
    #[error("{source_kind} {name}: {message}")]
    Source {
        /// `configmap`, `secret`, `downwardAPI`.
        source_kind: &'static str,
        /// The object's name.
        name: String,
        /// Why.
        message: String,
    },
    /// No service account token could be had.
    #[error(transparent)]
    Token(#[from] token::TokenError),
    /// A hostPath `type` check failed.
    #[error("{0}")]
    HostPath(String),
    /// A mount or unmount failed.
    #[error("mount {path}: {message}")]
    Mount {
        /// The mount point.
        path: String,
        /// The error.
        message: String,
    },
    /// A projected source whose feature is not served on this node (`clusterTrustBundle`, `podCertificate`), in
    /// upstream's words while its feature gate is off.
    #[error("{0}")]
    Unavailable(String),
    /// An emptyDir medium that cannot be set up (unknown, or huge pages the pod does not ask for), in upstream's
    /// words.
    #[error("{0}")]
    Medium(String),
    /// A CSI driver or the CSI volume plugin failed, in upstream's words (`kubernetes.io/csi: ...`, or the
    /// driver's gRPC status).
    #[error("{0}")]
    Csi(String),
    /// A volume operation on a PersistentVolume failed (`MountVolume.MountDevice`, `MountVolume.SetUp`,
    /// `UnmountDevice`), in upstream's words; `spec` is the PersistentVolume's name, as upstream's events name it.
    #[error("{message}")]
    Operation {
        /// The operation.
        operation: &'static str,
        /// The volume's spec name.
        spec: String,
        /// The error.
        message: String,
    },
    /// The volume could not be processed (its claim or PersistentVolume): upstream's populator error, reported as
    /// `Unable to attach or mount volumes` at once.
    #[error("{0}")]
    Process(String),
    /// The volume is not attached to the node yet (upstream's `VerifyControllerAttachedVolume`, which records no
    /// event: the pod's wait names it among the `unattached volumes`).
    #[error("{0}")]
    Unattached(String),
    /// A volume type rkubelet does not support.
    #[error("volume type {kind} is not supported by rkubelet")]
    Unsupported {
        /// The type (`persistentVolumeClaim`, `csi`, ...).
        kind: String,
    },
}

/// A volume that failed, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("volume {volume:?}: {error}")]
pub struct MountFailure {
    /// The volume's name in the pod.
    pub volume: String,
    /// What failed.
    pub error: VolumeError,
}

impl MountFailure {
    /// The text of its `FailedMount` event, as upstream's operation generator words it (`MountVolume.SetUp failed
    /// for volume "data" : ...`, naming a PersistentVolume by its name); none for a volume that could not be
    /// processed (reported in [`MountFailures::unable`] instead).
    pub fn event(&self) -> Option<String> {
        match &self.error {
            VolumeError::Process(_) | VolumeError::Unattached(_) => None,
            VolumeError::Operation { operation, spec, message } => {
                Some(format!("{operation} failed for volume {spec:?} : {message}"))
            }
            e => Some(format!("MountVolume.SetUp failed for volume {:?} : {e}", self.volume)),
        }
    }
}

/// How long a pod waits for its volumes before upstream's `Unable to attach or mount volumes` (`podAttachAndMountTimeout`).
pub const MOUNT_WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(123);

/// The volumes of a pod that could not be set up (each tried; the others are set up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unmounted volumes=[{}]", .failures.iter().map(|f| f.volume.as_str()).collect::<Vec<_>>().join(" "))]
pub struct MountFailures {
    /// Each failed volume (the reconciler's `MountVolume.SetUp failed` events).
    pub failures: Vec<MountFailure>,
    /// Upstream's `WaitForAttachAndMount` error, for its `Unable to attach or mount volumes` event: at once when a
    /// volume could not be processed (`unmounted volumes=[data], unattached volumes=[], failed to process
    /// volumes=[data]: error processing PVC ns/data: PVC is not bound`), else each time the pod has waited
    /// [`MOUNT_WAIT_TIMEOUT`] (`...: context deadline exceeded`).
    pub unable: Option<String>,
}

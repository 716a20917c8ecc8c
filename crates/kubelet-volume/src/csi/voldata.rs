//! Where a CSI volume of a pod lives and what the kubelet writes beside it (`pkg/volume/csi/csi_mounter.go`,
//! `csi_util.go`): the publish target `<root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount`, the
//! `vol_data.json` beside it (compact JSON, sorted keys, a trailing newline, as Go's `json.Encoder` writes a
//! `map[string]string`), the volume handle of an inline ephemeral volume and the attachment name, and the removal of
//! the folder once nothing is mounted on it. Used by [`super::plugin`]. Pure, but for the file functions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The file's name (`volDataFileName`).
pub const VOL_DATA_FILE: &str = "vol_data.json";
/// The plugin's folder name under a pod's `volumes` (`kubernetes.io/csi`, escaped).
pub const PLUGIN_DIR: &str = "kubernetes.io~csi";

fn log(text: String) -> String {
    format!("kubernetes.io/csi: {text}")
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The handle of an inline ephemeral volume (`makeVolumeHandle`): `csi-` and the SHA-256 of the pod UID and the
/// volume name, joined without a separator.
pub fn ephemeral_volume_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume}")))
}

/// The name of a volume's VolumeAttachment (`getAttachmentName`).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// The folder of a pod's CSI volume (`<pod dir>/volumes/kubernetes.io~csi/<volume>`, `/` in the name escaped as `~`).
pub fn volume_dir(pod_dir: &Path, volume: &str) -> PathBuf {
    pod_dir.join("volumes").join(PLUGIN_DIR).join(volume.replace('/', "~"))
}

/// The publish target inside it.
pub fn mount_dir(pod_dir: &Path, volume: &str) -> PathBuf {
    volume_dir(pod_dir, volume).join("mount")
}

/// What `vol_data.json` holds: upstream's keys (`specVolID`, `volumeHandle`, `driverName`, `nodeName`,
/// `attachmentID`, `volumeLifecycleMode`, and `seLinuxMountContext` where one was used) and any other a newer
/// kubelet wrote.
pub type VolumeData = BTreeMap<String, String>;

/// The data of a published volume (`specVolID`: the volume's or PersistentVolume's name; `mode`: `Ephemeral` or
/// `Persistent`).
pub fn volume_data(spec_name: &str, handle: &str, driver: &str, node: &str, mode: &str) -> VolumeData {
    BTreeMap::from([
        ("attachmentID".to_string(), attachment_name(handle, driver, node)),
        ("driverName".to_string(), driver.to_string()),
        ("nodeName".to_string(), node.to_string()),
        ("specVolID".to_string(), spec_name.to_string()),
        ("volumeHandle".to_string(), handle.to_string()),
        ("volumeLifecycleMode".to_string(), mode.to_string()),
    ])
}

/// The data of an inline ephemeral volume.
pub fn ephemeral_volume_data(pod_uid: &str, volume: &str, driver: &str, node: &str) -> VolumeData {
    volume_data(volume, &ephemeral_volume_handle(pod_uid, volume), driver, node, "Ephemeral")
}

/// The staging path of a persistent volume (`makeDeviceMountPath`):
/// `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`.
pub fn staging_path(root: &Path, driver: &str, handle: &str) -> PathBuf {
    root.join("plugins/kubernetes.io/csi").join(driver).join(sha256_hex(handle)).join("globalmount")
}

/// The file's text, as Go's encoder writes it.
pub fn encode(data: &VolumeData) -> String {
    let text = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    format!("{}\n", kubelet_types::go_json::escape(&text))
}

/// Writes `vol_data.json` into `dir` (`saveVolumeData`).
pub fn save(dir: &Path, data: &VolumeData) -> Result<(), String> {
    let path = dir.join(VOL_DATA_FILE);
    std::fs::write(&path, encode(data))
        .map_err(|e| log(format!("failed to save volume data file {}: {e}", path.display())))
}

/// Reads `vol_data.json` from `dir` (`loadVolumeData`), with upstream's errors.
pub fn load(dir: &Path) -> Result<VolumeData, String> {
    let path = dir.join(VOL_DATA_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| log(format!("failed to open volume data file [{}]: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| log(format!("failed to parse volume data file [{}]: {e}", path.display())))
}

/// Removes the publish target, `vol_data.json` and the volume's folder once nothing is mounted on the target
/// (`removeMountDir`); a target still mounted is left alone. Missing entries are fine.
pub fn remove_mount_dir(mount: &Path, is_mounted: impl Fn(&Path) -> bool) -> Result<(), String> {
    if mount.exists() && is_mounted(mount) {
        return Ok(());
    }
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    let parent = mount.parent().unwrap_or(mount);
    gone(std::fs::remove_dir(mount)).map_err(|e| log(format!("failed to remove dir [{}]: {e}", mount.display())))?;
    let file = parent.join(VOL_DATA_FILE);
    gone(std::fs::remove_file(&file))
        .map_err(|e| log(format!("failed to delete volume data file [{}]: {e}", file.display())))?;
    gone(std::fs::remove_dir(parent))
        .map_err(|e| log(format!("failed to delete volume path [{}]: {e}", parent.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_volumes_handle_path_and_data_are_upstreams() {
        // sha256("uid-1" + "data"), as `echo -n uid-1data | sha256sum` gives it.
        let handle = ephemeral_volume_handle("uid-1", "data");
        assert_eq!(handle.len(), 68);
        assert_eq!(handle, format!("csi-{}", sha256_hex("uid-1data")));
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "the SHA-256 test vector"
        );
        let pod = Path::new("/var/lib/kubelet/pods/uid-1");
        assert_eq!(
            mount_dir(pod, "data"),
            Path::new("/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/data/mount")
        );
        let data = ephemeral_volume_data("uid-1", "data", "hostpath.csi.k8s.io", "node-a");
        let text = encode(&data);
        assert!(
            text.starts_with("{\"attachmentID\":\"csi-") && text.ends_with("\"volumeLifecycleMode\":\"Ephemeral\"}\n")
        );
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["attachmentID", "driverName", "nodeName", "specVolID", "volumeHandle", "volumeLifecycleMode"]
        );
    }

    #[test]
    fn the_file_round_trips_and_the_folder_goes_only_once_unmounted() {
        let root = tempfile::tempdir().unwrap();
        let mount = mount_dir(root.path(), "data");
        std::fs::create_dir_all(&mount).unwrap();
        let dir = mount.parent().unwrap();
        let data = ephemeral_volume_data("u", "data", "d", "n");
        save(dir, &data).unwrap();
        assert_eq!(load(dir).unwrap(), data);
        remove_mount_dir(&mount, |_| true).unwrap();
        assert!(mount.exists(), "a mounted target stays");
        remove_mount_dir(&mount, |_| false).unwrap();
        assert!(!dir.exists(), "target, file and folder gone");
        remove_mount_dir(&mount, |_| false).unwrap();
        let e = load(dir).unwrap_err();
        assert!(e.starts_with("kubernetes.io/csi: failed to open volume data file ["), "{e}");
    }
}

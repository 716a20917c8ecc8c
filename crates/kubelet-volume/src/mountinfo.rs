//! The mount table as the kubelet reads it (`k8s.io/mount-utils` ParseMountInfo, IsNotMountPoint;
//! `pkg/volume/util/hostutil/hostutil_linux.go` findMountInfo, isShared, DoMakeRShared).
//!
//! Callers: the subpath code (is a bind target already mounted, and of what) and start-up (`<root-dir>` made a
//! shared mount). Every call reads `/proc/self/mountinfo` afresh; nothing is cached.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// The path of the mounted directory within its file system (field 4).
    pub root: PathBuf,
    /// Where it is mounted (field 5).
    pub mount_point: PathBuf,
    /// The optional fields (`shared:N`, `master:N`, ...).
    pub optional: Vec<String>,
    /// The file system type.
    pub fs_type: String,
}

/// Undoes the kernel's octal escapes (`\040` for a space) of a mountinfo path.
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Parses a mountinfo text; malformed lines are skipped.
pub fn parse(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            if f.len() < 7 || sep < 6 || f.len() < sep + 2 {
                return None;
            }
            Some(MountInfo {
                root: unescape(f[3]),
                mount_point: unescape(f[4]),
                optional: f[6..sep].iter().map(|s| s.to_string()).collect(),
                fs_type: f[sep + 1].to_string(),
            })
        })
        .collect()
}

/// The mount table of this process.
pub fn read() -> std::io::Result<Vec<MountInfo>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// Whether `path` is a mount point (`mount.IsNotMountPoint` negated). A bind mount of a directory of the same
/// file system has the same device as its parent, so the mount table is asked, not stat.
pub fn is_mount_point(table: &[MountInfo], path: &Path) -> bool {
    table.iter().any(|m| m.mount_point == path)
}

/// The mount `path` lives on: the last mount whose mount point is a prefix of it (`findMountInfo`).
pub fn mount_of<'a>(table: &'a [MountInfo], path: &Path) -> Option<&'a MountInfo> {
    table.iter().rev().find(|m| path.starts_with(&m.mount_point))
}

/// Whether the mount `path` lives on propagates as shared (`isShared`).
pub fn is_shared(table: &[MountInfo], path: &Path) -> bool {
    mount_of(table, path).is_some_and(|m| m.optional.iter().any(|o| o.starts_with("shared:")))
}

/// Why `<root-dir>` could not be made a shared mount.
#[derive(Debug, thiserror::Error)]
pub enum RsharedError {
    /// The mount table could not be read.
    #[error("error configuring root directory {path}: read /proc/self/mountinfo: {source}")]
    MountTable {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A mount call failed.
    #[error("error configuring root directory {path}: failed to {action} {path}: {source}")]
    Mount {
        /// The directory.
        path: String,
        /// `bind-mount` or `make shared`.
        action: &'static str,
        /// Why.
        source: nix::Error,
    },
}

/// What [`make_rshared`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rshared {
    /// The directory was on a shared mount already (an operator's or an earlier run's): nothing was changed.
    AlreadyShared,
    /// The directory was bind-mounted onto itself and made rshared.
    Made,
}

/// Makes `path` (an existing directory) a shared mount, as upstream's kubelet does with its root directory at
/// start-up (`DoMakeRShared`): nothing when it already is on a shared mount, else `mount --bind path path` and
/// `mount --make-rshared path`. Nothing is undone at exit, as upstream.
pub fn make_rshared(path: &Path) -> Result<Rshared, RsharedError> {
    use nix::mount::{MsFlags, mount};
    let shown = path.display().to_string();
    let table = read().map_err(|source| RsharedError::MountTable { path: shown.clone(), source })?;
    if is_shared(&table, path) {
        return Ok(Rshared::AlreadyShared);
    }
    mount(Some(path), path, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(|source| RsharedError::Mount {
        path: shown.clone(),
        action: "bind-mount",
        source,
    })?;
    mount(None::<&str>, path, None::<&str>, MsFlags::MS_SHARED | MsFlags::MS_REC, None::<&str>)
        .map_err(|source| RsharedError::Mount { path: shown, action: "make shared", source })?;
    Ok(Rshared::Made)
}

/// Unmounts (lazily) every mount at or below `dir`, deepest first, and returns how many: for whoever removes a
/// kubelet's root directory wholesale (tests, benchmarks), so that a recursive removal never walks into a
/// volume through a bind and no mount is left behind.
pub fn unmount_below(dir: &Path) -> usize {
    let Ok(table) = read() else { return 0 };
    let mut points: Vec<&Path> = table.iter().map(|m| m.mount_point.as_path()).filter(|m| m.starts_with(dir)).collect();
    // Stacked mounts appear once each: the same path is unmounted as often as it is mounted.
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.iter().filter(|p| nix::mount::umount2(**p, nix::mount::MntFlags::MNT_DETACH).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:25 / /var/lib/kubelet rw,relatime - ext4 /dev/vda rw
31 30 0:26 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s rw shared:7 master:2 - tmpfs tmpfs rw
40 30 254:0 /data/vol/a /var/lib/kubelet/pods/u/volume-subpaths/v/app/0 rw - ext4 /dev/vda rw
41 22 0:30 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

    #[test]
    fn mountinfo_lines_give_root_mount_point_and_propagation() {
        let t = parse(TABLE);
        assert_eq!(t.len(), 5);
        assert_eq!(t[3].root, Path::new("/data/vol/a"));
        assert_eq!(t[3].mount_point, Path::new("/var/lib/kubelet/pods/u/volume-subpaths/v/app/0"));
        assert_eq!(t[2].optional, vec!["shared:7", "master:2"]);
        assert_eq!(t[2].fs_type, "tmpfs");
        assert_eq!(t[4].mount_point, Path::new("/mnt/with space"));
        assert!(parse("garbage\n1 2 3\n").is_empty());
    }

    #[test]
    fn shared_is_the_propagation_of_the_mount_a_path_lives_on() {
        let t = parse(TABLE);
        assert!(is_shared(&t, Path::new("/usr/bin")), "on / (shared:1)");
        assert!(!is_shared(&t, Path::new("/var/lib/kubelet")), "its own private mount");
        assert!(!is_shared(&t, Path::new("/var/lib/kubelet/pods/u")), "below the private mount");
        assert!(is_shared(&t, Path::new("/var/lib/kubelet/pods/u/volumes/kubernetes.io~secret/s/key")));
        assert!(is_mount_point(&t, Path::new("/var/lib/kubelet/pods/u/volume-subpaths/v/app/0")));
        assert!(!is_mount_point(&t, Path::new("/var/lib/kubelet/pods/u")));
    }
}

//! Safe subPath mounts (`pkg/volume/util/subpath/subpath_linux.go`, the fix of CVE-2017-1002101).
//!
//! A container that can write to a volume can turn any component of a subPath into a symlink at any moment. So
//! nothing here trusts a path after it has been checked: the subPath is opened component by component from the
//! volume's root with `openat(O_NOFOLLOW)`, missing directories are made with `mkdirat` in the same walk, and the
//! directory (or file) finally opened is bind-mounted through its `/proc/self/fd/N` onto a kubelet-owned target,
//! `<pod-dir>/volume-subpaths/<volume>/<container>/<volumeMount index>`, which is what the runtime mounts into the
//! container. Whatever the volume's content does after the open, the mount is of the object that was opened.
//!
//! Contract: the runtime manager calls [`safe_make_dir`] and [`prepare_safe_subpath`] for each subPath mount at
//! every start of a container (an existing bind of the same object is reused); the volume manager calls
//! [`clean_subpaths`] when the pod's volumes are torn down (also for pods found orphaned after a restart), before
//! anything below the pod directory is removed. Errors carry the host paths: callers log them and show the user
//! only a message that names the volume mount and container, as upstream.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, fstatat, mkdirat};

use crate::mountinfo;

/// The directory below a pod's directory that holds the subPath bind mounts (`containerSubPathDirectoryName`).
pub const SUBPATHS_DIR: &str = "volume-subpaths";

/// A subPath failure; the message names the host paths (for the log, not for the pod's status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SubpathError(pub String);

fn err(msg: String) -> SubpathError {
    SubpathError(msg)
}

/// One subPath mount of a container (`subpath.Subpath`).
#[derive(Debug, Clone)]
pub struct Subpath<'a> {
    /// The index of the mount in the container's volumeMounts.
    pub volume_mount_index: usize,
    /// The volume's host path joined with the subPath.
    pub path: PathBuf,
    /// The volume's name in the pod.
    pub volume_name: &'a str,
    /// The volume's host path.
    pub volume_path: PathBuf,
    /// `<root-dir>/pods/<uid>`.
    pub pod_dir: PathBuf,
    /// The container's name.
    pub container_name: &'a str,
}

/// `mount.PathWithinBase`: `path` is `base` or below it (both cleaned and absolute).
fn within(path: &Path, base: &Path) -> bool {
    path.starts_with(base)
}

/// The relative segments of `path` below `base` (`filepath.Rel` split); `.` for the base itself.
fn segments(path: &Path, base: &Path) -> Result<Vec<std::ffi::OsString>, SubpathError> {
    let rel = path
        .strip_prefix(base)
        .map_err(|_| err(format!("path {} is outside of allowed base {}", path.display(), base.display())))?;
    let segs: Vec<_> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(Ok(s.to_os_string())),
            Component::CurDir => None,
            _ => Some(Err(err(format!("path {} is outside of allowed base {}", path.display(), base.display())))),
        })
        .collect::<Result<_, _>>()?;
    Ok(if segs.is_empty() { vec![".".into()] } else { segs })
}

fn real_path(p: &Path) -> Result<PathBuf, SubpathError> {
    std::fs::canonicalize(p).map_err(|e| err(format!("error resolving symlinks in {:?}: {e}", p.display().to_string())))
}

/// Opens `base` (never through a symlink) read-only.
fn open_base(base: &Path) -> Result<OwnedFd, SubpathError> {
    nix::fcntl::open(base, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| err(format!("cannot open directory {}: {e}", base.display())))
}

/// Opens the entry `name` of the directory `parent` (at `shown`) without following a link.
fn open_child(parent: &OwnedFd, name: &OsStr, flags: OFlag, shown: &Path) -> Result<OwnedFd, SubpathError> {
    openat(parent.as_fd(), name, flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| err(format!("cannot open {}: {e}", shown.display())))
}

/// Opens `path` below `base` one component at a time, each with `O_NOFOLLOW`: a symlink anywhere on the way is an
/// error, whatever it points to (`doSafeOpen`). The result is an `O_PATH` descriptor.
pub fn safe_open(path: &Path, base: &Path) -> Result<OwnedFd, SubpathError> {
    let segs = segments(path, base)?;
    let mut parent = open_base(base)?;
    let mut current = base.to_path_buf();
    for seg in segs {
        current.push(&seg);
        if !within(&current, base) {
            return Err(err(format!("path {} is outside of allowed base {}", current.display(), base.display())));
        }
        // Trigger an automount first (a trailing slash is needed for that); errors do not matter.
        let mut slash = seg.clone();
        slash.push("/");
        let _ = fstatat(parent.as_fd(), slash.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW);
        let child = open_child(&parent, &seg, OFlag::O_PATH, &current)?;
        let st =
            fstat(child.as_fd()).map_err(|e| err(format!("error running fstat on {} with {e}", current.display())))?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFLNK {
            return Err(err(format!("unexpected symlink found {}", current.display())));
        }
        parent = child;
    }
    Ok(parent)
}

/// The existing part of `path` below `base` and the segments still to be made (`findExistingPrefix`); symlinks
/// inside are followed here, the result is checked by the caller.
fn existing_prefix(base: &Path, path: &Path) -> Result<(PathBuf, Vec<std::ffi::OsString>), SubpathError> {
    let segs = segments(path, base)?;
    let mut fd = nix::fcntl::open(base, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| err(format!("error opening {}: {e}", base.display())))?;
    let mut current = base.to_path_buf();
    for (i, seg) in segs.iter().enumerate() {
        // O_PATH: a directory swapped for a fifo cannot hang the open.
        match openat(fd.as_fd(), seg.as_os_str(), OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(child) => fd = child,
            Err(nix::Error::ENOENT) => return Ok((current, segs[i..].to_vec())),
            Err(e) => return Err(err(format!("error opening {}: {e}", current.join(seg).display()))),
        }
        current.push(seg);
    }
    Ok((path.to_path_buf(), vec![]))
}

/// Makes the directory `subdir` below the volume at `base` with mode `perm` (the volume's; a setgid bit is kept),
/// never outside it (`SafeMakeDir`/`doSafeMakeDir`): each missing directory is made with `mkdirat` relative to
/// the descriptor of its parent, opened without following symlinks, then chmod-ed through its own descriptor.
pub fn safe_make_dir(subdir: &Path, base: &Path, perm: u32) -> Result<(), SubpathError> {
    let base = real_path(base)?;
    let path = base.join(subdir);
    if !within(&path, &base) {
        return Err(err(format!("path {} is outside of allowed base {}", path.display(), base.display())));
    }
    if let Ok(m) = std::fs::metadata(&path) {
        return if m.is_dir() { Ok(()) } else { Err(err(format!("mkdir {}: not a directory", path.display()))) };
    }
    let (existing, to_create) =
        existing_prefix(&base, &path).map_err(|e| err(format!("error opening directory {}: {e}", path.display())))?;
    let full_existing = real_path(&existing)?;
    if !within(&full_existing, &base) {
        return Err(err(format!("path {} is outside of allowed base {}", full_existing.display(), base.display())));
    }
    // An O_PATH descriptor serves as the directory of mkdirat/openat.
    let mut parent = safe_open(&full_existing, &base)
        .map_err(|e| err(format!("cannot open directory {}: {e}", existing.display())))?;
    let kernel_perm = Mode::from_bits_truncate(perm & 0o2777);
    let mut current = full_existing;
    for dir in to_create {
        current.push(&dir);
        mkdirat(parent.as_fd(), dir.as_os_str(), kernel_perm)
            .map_err(|e| err(format!("cannot create directory {}: {e}", current.display())))?;
        let child = open_child(&parent, &dir, OFlag::O_RDONLY, &current)?;
        nix::unistd::fsync(child.as_fd()).map_err(|e| err(format!("cannot fsync {}: {e}", current.display())))?;
        // mkdirat went through the umask: the directory the container will see gets the volume's mode.
        fchmod(child.as_fd(), kernel_perm).map_err(|e| err(format!("chmod {:?} failed: {e}", current.display())))?;
        parent = child;
    }
    Ok(())
}

fn proc_fd(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The bind target of a subPath mount (`getSubpathBindTarget`).
pub fn bind_target(sp: &Subpath<'_>) -> PathBuf {
    sp.pod_dir.join(SUBPATHS_DIR).join(sp.volume_name).join(sp.container_name).join(sp.volume_mount_index.to_string())
}

fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Makes the bind target ready (`prepareSubpathTarget`): `Ok(true)` when it is already a bind of the same object
/// (reused), else an empty directory or file to mount onto, an outdated bind unmounted first.
fn prepare_target(sp: &Subpath<'_>, target: &Path) -> Result<bool, SubpathError> {
    let table =
        mountinfo::read().map_err(|e| err(format!("error checking path {} for mount: {e}", target.display())))?;
    if mountinfo::is_mount_point(&table, target) {
        let s =
            std::fs::symlink_metadata(&sp.path).map_err(|e| err(format!("stat {} failed: {e}", sp.path.display())))?;
        let t =
            std::fs::symlink_metadata(target).map_err(|e| err(format!("lstat {} failed: {e}", target.display())))?;
        if same_file(&s, &t) {
            return Ok(true);
        }
        nix::mount::umount(target).map_err(|e| err(format!("error ummounting {}: {e}", target.display())))?;
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(parent)
        .map_err(|e| err(format!("error creating directory {}: {e}", parent.display())))?;
    let t = std::fs::symlink_metadata(&sp.path).map_err(|e| err(format!("lstat {} failed: {e}", sp.path.display())))?;
    if t.is_dir() {
        match std::fs::DirBuilder::new().mode(0o750).create(target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(format!("error creating directory {}: {e}", target.display()))),
        }
    } else {
        // A file is a target for anything that is not a directory (file, device, socket, ...).
        std::fs::write(target, b"").map_err(|e| err(format!("error creating file {}: {e}", target.display())))?;
        let _ = std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o640));
    }
    Ok(false)
}

/// Bind-mounts the subPath safely and returns the path to give the runtime (`PrepareSafeSubpath`/
/// `doBindSubPath`). Symlinks are resolved once up front (a configMap's keys are links into its data
/// directory), the result must lie inside the volume, and it is then opened without following any link.
pub fn prepare_safe_subpath(sp: &Subpath<'_>) -> Result<PathBuf, SubpathError> {
    let volume_path = real_path(&sp.volume_path)?;
    let path = real_path(&sp.path)?;
    let sp = Subpath { volume_path, path, ..sp.clone() };
    if !within(&sp.path, &sp.volume_path) {
        return Err(err(format!(
            "error opening subpath {}: subpath {:?} not within volume path {:?}",
            sp.path.display(),
            sp.path.display().to_string(),
            sp.volume_path.display().to_string()
        )));
    }
    let fd = safe_open(&sp.path, &sp.volume_path)
        .map_err(|e| err(format!("error opening subpath {}: {e}", sp.path.display())))?;
    let target = bind_target(&sp);
    if prepare_target(&sp, &target)? {
        return Ok(target);
    }
    let source = proc_fd(&fd);
    if let Err(e) = nix::mount::mount(Some(&source), &target, None::<&str>, nix::mount::MsFlags::MS_BIND, None::<&str>)
    {
        clean_one(&sp.pod_dir, &target);
        return Err(err(format!("error mounting {}: {e}", sp.path.display())));
    }
    Ok(target)
}

/// Removes a target that could not be mounted onto, and its parents while empty (`cleanSubPath`).
fn clean_one(pod_dir: &Path, target: &Path) {
    let _ = std::fs::remove_dir(target).or_else(|_| std::fs::remove_file(target));
    let stop = pod_dir.join(SUBPATHS_DIR);
    let mut dir = target.parent();
    while let Some(d) = dir {
        if !d.starts_with(&stop) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Unmounts `path` if it is a mount point and removes it (`mount.CleanupMountPoint`): an empty directory or file,
/// never recursively, so nothing of a volume is removed through a bind that is still there.
fn cleanup_mount_point(table: &[mountinfo::MountInfo], path: &Path) -> Result<(), SubpathError> {
    if mountinfo::is_mount_point(table, path) {
        nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| err(format!("error cleaning subpath mount {}: {e}", path.display())))?;
    }
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.map_err(|e| err(format!("error cleaning subpath mount {}: {e}", path.display())))
}

fn entries(dir: &Path) -> Result<Vec<(PathBuf, bool)>, SubpathError> {
    match std::fs::read_dir(dir) {
        Ok(rd) => Ok(rd.flatten().map(|e| (e.path(), e.file_type().map(|t| t.is_dir()).unwrap_or(false))).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(e) => Err(err(format!("error reading {}: {e}", dir.display()))),
    }
}

fn remove_dir(dir: &Path) -> Result<(), SubpathError> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(format!("error deleting {}: {e}", dir.display()))),
    }
}

/// Tears down every subPath bind mount of the pod at `pod_dir`, of all its volumes (`CleanSubPaths` for each
/// volume): `<pod-dir>/volume-subpaths/<volume>/<container>/<index>` unmounted and removed, then the emptied
/// directories. Safe to call again; nothing is removed recursively.
pub fn clean_subpaths(pod_dir: &Path) -> Result<(), SubpathError> {
    let root = pod_dir.join(SUBPATHS_DIR);
    if !root.exists() {
        return Ok(());
    }
    let table = mountinfo::read().map_err(|e| err(format!("error reading {}: {e}", root.display())))?;
    for (volume, is_dir) in entries(&root)? {
        if !is_dir {
            continue;
        }
        for (container, is_dir) in entries(&volume)? {
            if !is_dir {
                continue;
            }
            for (index, _) in entries(&container)? {
                cleanup_mount_point(&table, &index)?;
            }
            remove_dir(&container)?;
        }
        remove_dir(&volume)?;
    }
    remove_dir(&root)
}

/// The mode of the volume at `path` (`hostutil.GetMode`), with the setgid bit.
pub fn volume_mode(path: &Path) -> std::io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o2777)
}

/// Whether `name` is a plain relative path without `..` (the subPath rule of the API and of `makeMounts`).
pub fn is_relative_without_backsteps(name: &str) -> bool {
    let p = Path::new(name);
    !name.is_empty() && !p.is_absolute() && !p.components().any(|c| c == Component::ParentDir)
}

#[cfg(test)]
#[path = "subpath_tests.rs"]
mod tests;

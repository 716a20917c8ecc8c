//! The atomic writer of ConfigMap, Secret, downward API and projected volumes
//! (`pkg/volume/util/atomic_writer.go`): the files of an update go into a new timestamped directory, a `..data`
//! link is swapped to it with one rename, and the user-visible names are links through `..data`. A reader sees
//! either the old set of files or the new one, never a mix.

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use crate::VolumeError;

/// The link to the current timestamped directory.
pub const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a volume: content, mode and owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    /// Content.
    pub data: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
    /// The owning user (`FsUser`, for service account tokens); root when unset.
    pub owner: Option<u32>,
}

impl FileProjection {
    /// A root-owned file.
    pub fn new(data: Vec<u8>, mode: u32) -> Self {
        Self { data, mode, owner: None }
    }
}

/// Checks a payload path as upstream's `validatePath`, in its order and with its messages: not empty, relative, at
/// most 4096 bytes, no `..` element, no element longer than 255, and a first element not starting with `..`.
pub fn validate_path(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("invalid path: must not be empty: \"\"".into());
    }
    if p.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {p}"));
    }
    if p.len() > 4096 {
        return Err("invalid path: must be less than or equal to 4096 characters".into());
    }
    let items: Vec<&str> = p.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {p}"));
        }
        if item.len() > 255 {
            return Err("invalid path: filenames must be less than or equal to 255 characters".into());
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {p}"));
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> VolumeError {
    VolumeError::Io { path: path.display().to_string(), message: e.to_string() }
}

/// What `..data` holds now: relative path -> content.
fn current(dir: &Path) -> Option<BTreeMap<String, Vec<u8>>> {
    let data = dir.join(DATA_DIR);
    std::fs::read_link(&data).ok()?;
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(data.join(&rel)).ok()?.flatten() {
            let r = rel.join(e.file_name());
            let meta = e.metadata().ok()?;
            if meta.is_dir() {
                stack.push(r);
            } else {
                out.insert(r.to_string_lossy().into_owned(), std::fs::read(e.path()).ok()?);
            }
        }
    }
    Some(out)
}

/// The user-visible top-level names of a payload (`a/b` is visible as `a`).
fn top_level<'a>(paths: impl Iterator<Item = &'a String>) -> std::collections::BTreeSet<String> {
    paths.map(|k| k.split('/').next().unwrap_or(k).to_string()).collect()
}

/// The `fsGroup` ownership of a volume's files: the group and whether the volume is read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// The group.
    pub gid: u32,
    /// Read-only volume (group read, not write).
    pub read_only: bool,
}

/// Writes `payload` into the volume directory `dir` (`AtomicWriter.Write`); returns whether anything changed.
/// As upstream, only the set of paths and their contents are compared: a mode change alone (or the group bits
/// `fsGroup` ownership added) rewrites nothing. With `ownership`, the new files get it before they become visible
/// (upstream's `setPerms` before the swap), so a reader never sees them without it.
pub fn write(
    dir: &Path,
    payload: &BTreeMap<String, FileProjection>,
    timestamp: &str,
    ownership: Option<Ownership>,
) -> Result<bool, VolumeError> {
    for k in payload.keys() {
        validate_path(k).map_err(|message| VolumeError::InvalidPath { path: k.clone(), message })?;
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let old = current(dir);
    if let Some(old) = &old
        && old.len() == payload.len()
        && payload.iter().all(|(k, f)| old.get(k) == Some(&f.data))
    {
        return Ok(false);
    }
    let old_target = std::fs::read_link(dir.join(DATA_DIR)).ok();
    // A new timestamped directory with the files.
    let mut n = 0;
    let ts = loop {
        let candidate = dir.join(format!("..{timestamp}.{n}"));
        match std::fs::create_dir(&candidate) {
            Ok(()) => break candidate,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(io(&candidate, e)),
        }
    };
    // A payload that cannot be written whole (a full disk) leaves nothing behind: each retry would otherwise leave
    // another timestamped directory of partial files (upstream removes it only when the swap fails).
    let tmp = dir.join(DATA_DIR_TMP);
    if let Err(e) = fill_and_swap(dir, &ts, &tmp, payload, ownership) {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_dir_all(&ts);
        return Err(e);
    }
    // User-visible links through `..data`, then what the new payload no longer has.
    let new_top = top_level(payload.keys());
    for t in &new_top {
        let link = dir.join(t);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_DIR).join(t), &link).map_err(|e| io(&link, e))?;
        }
    }
    if let Some(old) = old {
        for t in top_level(old.keys()).difference(&new_top) {
            let _ = std::fs::remove_file(dir.join(t));
        }
    }
    if let Some(t) = old_target {
        let _ = std::fs::remove_dir_all(dir.join(t));
    }
    Ok(true)
}

/// Writes the payload into the new timestamped directory `ts` and swaps `..data` to it in one rename (through the
/// link `tmp`).
fn fill_and_swap(
    dir: &Path,
    ts: &Path,
    tmp: &Path,
    payload: &BTreeMap<String, FileProjection>,
    ownership: Option<Ownership>,
) -> Result<(), VolumeError> {
    std::fs::set_permissions(ts, std::fs::Permissions::from_mode(0o755)).map_err(|e| io(ts, e))?;
    for (k, f) in payload {
        let path = ts.join(k);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&path, &f.data).map_err(|e| io(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode)).map_err(|e| io(&path, e))?;
        if let Some(uid) = f.owner {
            std::os::unix::fs::chown(&path, Some(uid), None).map_err(|e| io(&path, e))?;
        }
    }
    if let Some(o) = ownership {
        crate::ownership::set_volume_ownership(ts, o.gid, o.read_only, false).map_err(|e| io(ts, e))?;
    }
    let _ = std::fs::remove_file(tmp);
    let name = ts.file_name().expect("timestamped dir has a name");
    symlink(name, tmp).map_err(|e| io(tmp, e))?;
    std::fs::rename(tmp, dir.join(DATA_DIR)).map_err(|e| io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(items: &[(&str, &str, u32)]) -> BTreeMap<String, FileProjection> {
        items.iter().map(|(k, v, m)| (k.to_string(), FileProjection::new(v.as_bytes().to_vec(), *m))).collect()
    }

    #[test]
    fn paths_validated_as_upstream() {
        for ok in ["a", "a/b", "a..b", ".hidden", "a/..b", "a/...", "."] {
            assert_eq!(validate_path(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/abs", "..", "../x", "a/../b", "..a", "...", &"x".repeat(256)] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
        // Upstream's order: a `..` element is named before a `..` prefix.
        assert_eq!(validate_path("../escape").unwrap_err(), "invalid path: must not contain '..': ../escape");
        assert_eq!(validate_path("..x/y").unwrap_err(), "invalid path: must not start with '..': ..x/y");
    }

    #[test]
    fn updates_swap_data_atomically_and_drop_stale_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        assert!(write(&dir, &payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)]), "t1", None).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        assert_eq!(std::fs::metadata(dir.join("sub/b")).unwrap().permissions().mode() & 0o777, 0o400);
        assert_eq!(std::fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        let first = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        assert!(!write(&dir, &payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)]), "t2", None).unwrap(), "no change");
        assert!(write(&dir, &payload(&[("a", "one", 0o644)]), "t3", None).unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "one");
        assert!(std::fs::symlink_metadata(dir.join("sub")).is_err(), "a key gone from the payload is gone");
        assert!(!dir.join(first).exists(), "the old timestamped directory is removed");
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 3, "a, ..data and one timestamped dir: {names:?}");
        assert!(matches!(
            write(&dir, &payload(&[("../x", "", 0o644)]), "t4", None),
            Err(VolumeError::InvalidPath { .. })
        ));
    }

    #[test]
    fn a_payload_that_cannot_be_written_whole_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        assert!(write(&dir, &payload(&[("a", "1", 0o644)]), "t1", None).unwrap());
        let before = std::fs::read_link(dir.join(DATA_DIR)).unwrap();
        // `b` is written as a file, then `b/c` needs it as a directory: the write fails half-way, as on a full disk.
        let broken = payload(&[("a", "2", 0o644), ("b", "x", 0o644), ("b/c", "y", 0o644)]);
        for round in ["t2", "t3", "t4"] {
            assert!(matches!(write(&dir, &broken, round, None), Err(VolumeError::Io { .. })), "{round}");
        }
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["..data", &before.to_string_lossy(), "a"], "no timestamped directory of a failed write");
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1", "the last contents stay");
        assert!(write(&dir, &payload(&[("a", "3", 0o644)]), "t5", None).unwrap(), "written once it can be");
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "3");
    }
}

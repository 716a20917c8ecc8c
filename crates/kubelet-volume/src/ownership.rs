//! Volume ownership for `fsGroup` (`pkg/volume/volume_linux.go` SetVolumeOwnership): every file and directory of
//! the volume gets the group, group read (and write, unless the volume is read-only), directories the setgid and
//! execute bits. With `fsGroupChangePolicy: OnRootMismatch` nothing is walked when the volume's root already has
//! them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

fn wanted(mode: u32, dir: bool, read_only: bool) -> u32 {
    let mut m = if read_only { RO_MASK } else { RW_MASK };
    if dir {
        m |= SETGID | EXEC_MASK;
    }
    mode | m
}

fn root_matches(dir: &Path, gid: u32, read_only: bool) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| {
        let mode = m.permissions().mode() & 0o7777;
        m.gid() == gid && wanted(mode, true, read_only) == mode
    })
}

fn change(path: &Path, gid: u32, read_only: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode() & 0o7777;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted(mode, meta.is_dir(), read_only)))
}

/// Gives the volume at `dir` to group `gid`, as upstream; `on_root_mismatch` skips a volume whose root is right.
pub fn set_volume_ownership(dir: &Path, gid: u32, read_only: bool, on_root_mismatch: bool) -> std::io::Result<()> {
    if on_root_mismatch && root_matches(dir, gid, read_only) {
        return Ok(());
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        change(&p, gid, read_only)?;
        let meta = std::fs::symlink_metadata(&p)?;
        if meta.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_and_modes_as_upstream() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vol");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(dir.join("sub/f"), std::fs::Permissions::from_mode(0o400)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        set_volume_ownership(&dir, 2000, false, false).unwrap();
        let f = std::fs::metadata(dir.join("sub/f")).unwrap();
        assert_eq!((f.gid(), f.permissions().mode() & 0o7777), (2000, 0o660));
        let d = std::fs::metadata(&dir).unwrap();
        assert_eq!((d.gid(), d.permissions().mode() & 0o7777), (2000, 0o2775));
        assert!(root_matches(&dir, 2000, false));
        // Read-only volumes get group read only.
        let ro = tmp.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::write(ro.join("s"), "x").unwrap();
        std::fs::set_permissions(ro.join("s"), std::fs::Permissions::from_mode(0o400)).unwrap();
        set_volume_ownership(&ro, 3000, true, false).unwrap();
        assert_eq!(std::fs::metadata(ro.join("s")).unwrap().permissions().mode() & 0o7777, 0o440);
    }
}

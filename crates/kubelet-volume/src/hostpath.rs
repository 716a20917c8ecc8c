//! hostPath volumes (`pkg/volume/hostpath`): the `type` check before mounting, creating what `*OrCreate` asks for.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// Checks (and for `DirectoryOrCreate` / `FileOrCreate`, creates) `path` as `kind` demands.
pub fn check_type(path: &Path, kind: &str) -> Result<(), String> {
    let p = path.display();
    let meta = std::fs::metadata(path);
    let fail = |what: &str| Err(format!("hostPath type check failed: {p} is not a {what}"));
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match meta {
            Err(_) => {
                std::fs::create_dir_all(path).map_err(|e| format!("create {p}: {e}"))?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
            }
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => fail("directory"),
        },
        "FileOrCreate" => match meta {
            Err(_) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
                }
                std::fs::File::create(path).map_err(|e| format!("create {p}: {e}"))?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(|e| e.to_string())
            }
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => fail("file"),
        },
        _ => {
            let Ok(m) = meta else { return Err(format!("hostPath type check failed: {p} does not exist")) };
            let t = m.file_type();
            match kind {
                "Directory" if t.is_dir() => Ok(()),
                "Directory" => fail("directory"),
                "File" if t.is_file() => Ok(()),
                "File" => fail("file"),
                "Socket" if t.is_socket() => Ok(()),
                "Socket" => fail("socket file"),
                "CharDevice" if t.is_char_device() => Ok(()),
                "CharDevice" => fail("character device"),
                "BlockDevice" if t.is_block_device() => Ok(()),
                "BlockDevice" => fail("block device"),
                other => Err(format!("hostPath type {other:?} is not known")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_checked_as_upstream() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("made/dir");
        check_type(&d, "DirectoryOrCreate").unwrap();
        assert!(d.is_dir());
        let f = tmp.path().join("made/file");
        check_type(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        assert_eq!(check_type(&d, "Directory"), Ok(()));
        assert_eq!(check_type(&f, "File"), Ok(()));
        assert_eq!(
            check_type(&f, "Directory"),
            Err(format!("hostPath type check failed: {} is not a directory", f.display()))
        );
        assert_eq!(
            check_type(&d, "FileOrCreate"),
            Err(format!("hostPath type check failed: {} is not a file", d.display()))
        );
        assert!(check_type(&tmp.path().join("absent"), "File").unwrap_err().ends_with("does not exist"));
        assert_eq!(check_type(Path::new("/dev/null"), "CharDevice"), Ok(()));
        assert!(check_type(Path::new("/dev/null"), "Socket").unwrap_err().ends_with("is not a socket file"));
        assert_eq!(check_type(&tmp.path().join("absent"), ""), Ok(()), "unset: no check");
    }
}

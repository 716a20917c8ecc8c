//! Opening files only within a folder, for what `/logs/` and `/containerLogs/` read.
//!
//! Upstream serves `/logs/` with Go's `http.FileServer(http.Dir("/var/log"))`, which keeps `..` from leaving the
//! folder but follows symbolic links wherever they lead, and reads container logs at the path the runtime reports
//! after `filepath.EvalSymlinks`, wherever that leads. A pod that can write under `/var/log` (a hostPath mount of
//! its own log folder, say) could so have the kubelet serve any file of the host. Here a file is opened (following
//! links, as upstream) and then what was opened is checked: its real path, read back from the open descriptor,
//! must lie within the folder (itself resolved), so no link, and no link swapped in between a check and the open,
//! leads out. Only regular files and folders are served, and a FIFO does not block the open.

use std::fs::{File, Metadata};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a path was not opened.
#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    /// Opening failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// It leads out of the folder.
    #[error("{path:?} resolves to {real:?}, outside {root:?}")]
    Outside {
        /// The path asked for.
        path: PathBuf,
        /// Where it leads.
        real: PathBuf,
        /// The folder.
        root: PathBuf,
    },
    /// Neither a regular file nor a folder.
    #[error("{0:?} is not a regular file")]
    NotAFile(PathBuf),
}

/// An open file or folder within a root.
#[derive(Debug)]
pub struct Opened {
    /// The open file.
    pub file: File,
    /// Where it really is.
    pub real: PathBuf,
    /// Its metadata.
    pub meta: Metadata,
}

impl Opened {
    /// A path that names the open folder itself (for listing it without opening it again by name).
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// Opens `path`, which must lead to a regular file or a folder within `root`.
pub fn open(path: &Path, root: &Path) -> Result<Opened, ConfinedError> {
    let root = std::fs::canonicalize(root)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    if !real.starts_with(&root) {
        return Err(ConfinedError::Outside { path: path.to_path_buf(), real, root });
    }
    let meta = file.metadata()?;
    if !meta.is_file() && !meta.is_dir() {
        return Err(ConfinedError::NotAFile(path.to_path_buf()));
    }
    Ok(Opened { file, real, meta })
}

/// [`open`] on the blocking pool.
pub async fn open_async(path: &Path, root: &Path) -> Result<Opened, ConfinedError> {
    let (path, root) = (path.to_path_buf(), root.to_path_buf());
    tokio::task::spawn_blocking(move || open(&path, &root))
        .await
        .unwrap_or_else(|e| Err(ConfinedError::Io(std::io::Error::other(e))))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn only_what_lies_within_the_root_is_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("log");
        let outside = tmp.path().join("secret");
        std::fs::create_dir_all(root.join("pods/a")).unwrap();
        std::fs::write(&outside, "marker").unwrap();
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        std::fs::write(root.join("pods/a/0.log"), "x").unwrap();
        symlink(root.join("pods/a/0.log"), root.join("inside")).unwrap();
        symlink(&outside, root.join("out")).unwrap();
        symlink("../secret", root.join("relative-out")).unwrap();
        symlink(tmp.path().join("elsewhere"), root.join("dir-out")).unwrap();
        std::fs::write(tmp.path().join("elsewhere/f"), "marker").unwrap();

        let ok = open(&root.join("pods/a/0.log"), &root).unwrap();
        assert!(ok.meta.is_file() && ok.real.ends_with("pods/a/0.log"));
        assert!(open(&root.join("inside"), &root).is_ok(), "a link that stays inside is followed");
        assert!(open(&root.join("pods"), &root).unwrap().meta.is_dir());
        for p in ["out", "relative-out", "dir-out", "dir-out/f", "pods/../../secret"] {
            match open(&root.join(p), &root) {
                Err(ConfinedError::Outside { real, .. }) => assert!(!real.starts_with(&root), "{p}: {real:?}"),
                other => panic!("{p}: {other:?}"),
            }
        }
        assert!(
            matches!(open(&root.join("nope"), &root), Err(ConfinedError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
        );
        // A root reached through a link is resolved before the check.
        symlink(&root, tmp.path().join("log-link")).unwrap();
        assert!(open(&root.join("pods/a/0.log"), &tmp.path().join("log-link")).is_ok());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(open(&fifo, tmp.path()), Err(ConfinedError::NotAFile(_))));
    }
}

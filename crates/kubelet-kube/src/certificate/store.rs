//! The certificate file store (client-go `util/certificate/certificate_store.go`).
//!
//! A pair lives in `<dir>/<prefix>-<timestamp>.pem` (certificate then key, mode 0600) and
//! `<dir>/<prefix>-current.pem` links to the one in use; an update writes a new file and swaps the link with a
//! rename, so a reader sees the old pair or the new one, never half of either. Without a current link the store
//! falls back to the configured certificate and key files (a kubeconfig's or `tlsCertFile`'s), as upstream.
//! Called by the certificate managers only: at start ([`FileStore::current`]) and after each issued certificate
//! ([`FileStore::update`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::pair::{Pair, PairError};

/// Why the store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A file holds no usable pair.
    #[error("{path}: {source}")]
    Pair {
        /// The file.
        path: String,
        /// What is wrong.
        source: PairError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.display().to_string(), source }
}

/// Pairs of one kind (`kubelet-client`, `kubelet-server`) in one folder.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: String,
    fallback: Option<(PathBuf, PathBuf)>,
}

impl FileStore {
    /// The store of `<dir>/<prefix>-*.pem`, falling back to `cert_file`/`key_file` when both are given.
    pub fn new(dir: impl Into<PathBuf>, prefix: &str, cert_file: Option<PathBuf>, key_file: Option<PathBuf>) -> Self {
        let fallback = cert_file.zip(key_file).filter(|(c, k)| !c.as_os_str().is_empty() && !k.as_os_str().is_empty());
        Self { dir: dir.into(), prefix: prefix.to_string(), fallback }
    }

    /// `<dir>/<prefix>-current.pem`.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The pair in use: the current link's, else the fallback files', else none.
    pub fn current(&self) -> Result<Option<Pair>, StoreError> {
        let cur = self.current_path();
        if cur.exists() {
            let data = std::fs::read(&cur).map_err(io(&cur))?;
            return Pair::from_pem(&data, &data)
                .map(Some)
                .map_err(|source| StoreError::Pair { path: cur.display().to_string(), source });
        }
        let Some((c, k)) = &self.fallback else { return Ok(None) };
        if !c.exists() || !k.exists() {
            return Ok(None);
        }
        let cert = std::fs::read(c).map_err(io(c))?;
        let key = std::fs::read(k).map_err(io(k))?;
        Pair::from_pem(&cert, &key)
            .map(Some)
            .map_err(|source| StoreError::Pair { path: c.display().to_string(), source })
    }

    /// Writes a new pair and makes it current; returns it parsed.
    pub fn update(&self, cert_pem: &[u8], key_pem: &[u8], now: SystemTime) -> Result<(Pair, PathBuf), StoreError> {
        let ts = k8s_openapi::jiff::Timestamp::try_from(now)
            .map(|t| t.strftime("%Y-%m-%d-%H-%M-%S").to_string())
            .unwrap_or_else(|_| "0".into());
        let mut data = cert_pem.to_vec();
        if !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        data.extend_from_slice(key_pem);
        let pair = Pair::from_pem(&data, &data)
            .map_err(|source| StoreError::Pair { path: format!("the {} certificate issued", self.prefix), source })?;
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let mut file = self.dir.join(format!("{}-{ts}.pem", self.prefix));
        // Two updates in one second keep both files, as each may still be read through an open link.
        let mut n = 1;
        while file.exists() {
            file = self.dir.join(format!("{}-{ts}.{n}.pem", self.prefix));
            n += 1;
        }
        write_private(&file, &data)?;
        let link = self.current_path();
        let tmp = self.dir.join(format!(".{}-updated.pem", self.prefix));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&file, &tmp).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &link).map_err(io(&link))?;
        Ok((pair, file))
    }
}

/// Writes `data` to `path` with mode 0600 through a temporary file and a rename.
pub fn write_private(path: &Path, data: &[u8]) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f =
        std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&tmp).map_err(io(&tmp))?;
    std::io::Write::write_all(&mut f, data).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::pair::tests::issue;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn updates_swap_the_current_link_and_keep_older_files() {
        let dir = tempfile::tempdir().unwrap();
        let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (fc, fk) = issue("fallback", t, Duration::from_secs(60), &[]);
        let (cf, kf) = (dir.path().join("kubelet.crt"), dir.path().join("kubelet.key"));
        std::fs::write(&cf, &fc).unwrap();
        std::fs::write(&kf, &fk).unwrap();
        let store = FileStore::new(dir.path(), "kubelet-server", Some(cf), Some(kf));
        assert_eq!(store.current().unwrap().unwrap().common_name, "fallback", "no link yet: the configured files");

        let (c1, k1) = issue("one", t, Duration::from_secs(60), &[]);
        let (p1, f1) = store.update(c1.as_bytes(), k1.as_bytes(), t).unwrap();
        assert_eq!(f1.file_name().unwrap(), "kubelet-server-2027-01-15-08-00-00.pem");
        assert_eq!(p1.common_name, "one");
        let (c2, k2) = issue("two", t, Duration::from_secs(60), &[]);
        let (_, f2) = store.update(c2.as_bytes(), k2.as_bytes(), t).unwrap();
        assert_ne!(f1, f2, "a second update in the same second gets its own file");
        assert!(f1.exists());
        assert_eq!(std::fs::read_link(store.current_path()).unwrap(), f2);
        assert_eq!(store.current().unwrap().unwrap().common_name, "two");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&f2).unwrap().permissions().mode() & 0o777, 0o600);

        let empty = FileStore::new(dir.path().join("none"), "kubelet-client", None, None);
        assert!(empty.current().unwrap().is_none());
        std::fs::write(dir.path().join("bad-current.pem"), "garbage").unwrap();
        let bad = FileStore::new(dir.path(), "bad", None, None);
        let e = bad.current().unwrap_err().to_string();
        assert!(e.contains("bad-current.pem") && e.contains("no PEM certificate"), "{e}");
    }
}

//! The node's own docker credentials: upstream's `ReadDockerConfigFile`, `ReadDockerConfigJSONFile`,
//! `ReadDockercfgFile` and their search paths (`pkg/credentialprovider/config.go`), read through
//! `defaultDockerConfigProvider` wrapped in `CachingDockerConfigProvider` with a 5 minute lifetime, as
//! `NewDefaultDockerKeyring` builds it (`pkg/credentialprovider/provider.go`).
//!
//! Contract: `config.json` is looked for in the preferred directory (the kubelet's `--root-dir`, which
//! `SetPreferredDockercfgPath` sets), the working directory, `$HOME/.docker` and `/.docker`, in that order; the
//! first one that reads and decodes wins. Only when none does is the legacy `.dockercfg` looked for in the
//! preferred directory, the working directory, `$HOME` and `/`. A file that is missing, unreadable or does not
//! decode is skipped (logged at debug level, without its contents). The result, found or empty, is kept for
//! [`NODE_CONFIG_LIFETIME`] (monotonic `tokio::time`); credentials from these files have no source: every pod
//! of the node may use them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::auth::TrackedAuthConfig;
use crate::docker_config::DockerConfig;
use crate::keyring::BasicDockerKeyring;

/// How long the node's docker config is cached (`NewDefaultDockerKeyring`'s `Lifetime`).
pub const NODE_CONFIG_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// `configJSONFileName`.
pub const CONFIG_JSON_FILE_NAME: &str = "config.json";
/// `configFileName`: the legacy file.
pub const DOCKERCFG_FILE_NAME: &str = ".dockercfg";

/// The directories searched for the node's docker config files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfigSearchPaths {
    /// The preferred directory: the kubelet's root directory. Empty means the working directory, as upstream's
    /// unset preferred path.
    pub preferred: PathBuf,
    /// The user's home directory (`os.UserHomeDir`: `$HOME`); empty when unknown.
    pub home: PathBuf,
}

impl DockerConfigSearchPaths {
    /// The search paths of a kubelet whose root directory is `root_dir`, with `$HOME` from the environment.
    pub fn for_root_dir(root_dir: impl Into<PathBuf>) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        Self { preferred: root_dir.into(), home }
    }

    /// `DefaultDockerConfigJSONPaths`: preferred, working directory, `$HOME/.docker`, `/.docker`.
    pub fn config_json_dirs(&self) -> Vec<PathBuf> {
        vec![self.preferred.clone(), PathBuf::new(), self.home.join(".docker"), PathBuf::from("/.docker")]
    }

    /// `DefaultDockercfgPaths`: preferred, working directory, `$HOME`, `/`.
    pub fn dockercfg_dirs(&self) -> Vec<PathBuf> {
        vec![self.preferred.clone(), PathBuf::new(), self.home.clone(), PathBuf::from("/")]
    }
}

/// No valid docker config file was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't find valid {file} after checking in {searched:?}")]
pub struct NotFound {
    /// The file name looked for.
    pub file: &'static str,
    /// The directories searched.
    pub searched: Vec<PathBuf>,
}

/// `filepath.Abs(filepath.Join(dir, name))`: an empty directory is the working directory.
fn absolute_file(dir: &Path, name: &str) -> Option<PathBuf> {
    match std::path::absolute(dir.join(name)) {
        Ok(path) => Some(path),
        Err(err) => {
            tracing::error!(dir = %dir.display(), error = %err, "while trying to canonicalize docker config path");
            None
        }
    }
}

fn read_first(
    dirs: &[PathBuf],
    file: &'static str,
    decode: fn(&[u8]) -> Result<DockerConfig, crate::DockerConfigError>,
) -> Result<DockerConfig, NotFound> {
    for dir in dirs {
        let Some(path) = absolute_file(dir, file) else { continue };
        tracing::trace!(path = %path.display(), "looking for {file}");
        let contents = match std::fs::read(&path) {
            Ok(contents) => contents,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                tracing::debug!(path = %path.display(), error = %err, "while trying to read {file}");
                continue;
            }
        };
        match decode(&contents) {
            Ok(config) => {
                tracing::debug!(path = %path.display(), "found valid {file}");
                return Ok(config);
            }
            Err(err) => tracing::debug!(path = %path.display(), error = %err, "couldn't get the config from {file}"),
        }
    }
    Err(NotFound { file, searched: dirs.to_vec() })
}

/// `ReadDockerConfigJSONFile`: the `auths` of the first `config.json` in `dirs` that decodes.
pub fn read_docker_config_json_file(dirs: &[PathBuf]) -> Result<DockerConfig, NotFound> {
    read_first(dirs, CONFIG_JSON_FILE_NAME, DockerConfig::from_config_json_bytes)
}

/// `ReadDockercfgFile`: the first legacy `.dockercfg` in `dirs` that decodes.
pub fn read_dockercfg_file(dirs: &[PathBuf]) -> Result<DockerConfig, NotFound> {
    read_first(dirs, DOCKERCFG_FILE_NAME, DockerConfig::from_dockercfg_bytes)
}

/// `ReadDockerConfigFile`: `config.json` from the search paths, else the legacy `.dockercfg`.
pub fn read_docker_config_file(paths: &DockerConfigSearchPaths) -> Result<DockerConfig, NotFound> {
    read_docker_config_json_file(&paths.config_json_dirs()).or_else(|_| read_dockercfg_file(&paths.dockercfg_dirs()))
}

/// The node keyring (`NewDefaultDockerKeyring`): the node's docker config files, cached.
#[derive(Debug)]
pub struct NodeKeyring {
    paths: DockerConfigSearchPaths,
    lifetime: Duration,
    cache: Mutex<Option<(DockerConfig, Instant)>>,
}

impl NodeKeyring {
    /// A keyring reading `paths`, caching for [`NODE_CONFIG_LIFETIME`].
    pub fn new(paths: DockerConfigSearchPaths) -> Self {
        Self { paths, lifetime: NODE_CONFIG_LIFETIME, cache: Mutex::new(None) }
    }

    /// A keyring that never finds a credential (no file is read).
    pub fn empty() -> Self {
        let mut keyring = Self::new(DockerConfigSearchPaths { preferred: PathBuf::new(), home: PathBuf::new() });
        keyring.cache = Mutex::new(Some((DockerConfig::default(), far_future())));
        keyring.lifetime = Duration::MAX;
        keyring
    }

    /// The node's docker config: the cached one while it is fresh, else read again (`CachingDockerConfigProvider`
    /// over `defaultDockerConfigProvider`; a failed read caches the empty config).
    pub fn provide(&self) -> DockerConfig {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some((config, expiration)) = cache.as_ref()
            && now < *expiration
        {
            return config.clone();
        }
        tracing::debug!("refreshing cache for the node's docker config files");
        let config = read_docker_config_file(&self.paths).unwrap_or_else(|err| {
            tracing::debug!(error = %err, "docker config file not found");
            DockerConfig::default()
        });
        let expiration = now.checked_add(self.lifetime).unwrap_or_else(far_future);
        *cache = Some((config.clone(), expiration));
        config
    }

    /// Credentials of the node's docker config files for `image` (`providersDockerKeyring.Lookup`).
    pub fn lookup(&self, image: &str) -> Vec<TrackedAuthConfig> {
        BasicDockerKeyring::from_config(None, &self.provide()).lookup(image)
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, contents: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), contents).unwrap();
    }

    fn config_json(user: &str) -> String {
        format!(r#"{{"auths": {{"registry.io": {{"username": "{user}", "password": "pw"}}}}}}"#)
    }

    fn dockercfg(user: &str) -> String {
        format!(r#"{{"registry.io": {{"username": "{user}", "password": "pw"}}}}"#)
    }

    fn paths(tmp: &Path) -> DockerConfigSearchPaths {
        DockerConfigSearchPaths { preferred: tmp.join("root"), home: tmp.join("home") }
    }

    fn user(config: &DockerConfig) -> Option<&str> {
        config.0.get("registry.io").map(|e| e.username.as_str())
    }

    #[test]
    fn search_order_and_fallbacks() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = paths(tmp.path());
        // $HOME/.dockercfg is used when there is no config.json anywhere.
        write(&paths.home, DOCKERCFG_FILE_NAME, &dockercfg("legacy-home"));
        assert_eq!(user(&read_docker_config_file(&paths).unwrap()), Some("legacy-home"));
        // A legacy file in the preferred directory comes before the one in $HOME.
        write(&paths.preferred, DOCKERCFG_FILE_NAME, &dockercfg("legacy-root"));
        assert_eq!(user(&read_docker_config_file(&paths).unwrap()), Some("legacy-root"));
        // Any config.json beats every .dockercfg: $HOME/.docker/config.json first.
        write(&paths.home.join(".docker"), CONFIG_JSON_FILE_NAME, &config_json("json-home"));
        assert_eq!(user(&read_docker_config_file(&paths).unwrap()), Some("json-home"));
        // An invalid config.json in the preferred directory is skipped.
        write(&paths.preferred, CONFIG_JSON_FILE_NAME, "{not json");
        assert_eq!(user(&read_docker_config_file(&paths).unwrap()), Some("json-home"));
        write(&paths.preferred, CONFIG_JSON_FILE_NAME, &config_json("json-root"));
        assert_eq!(user(&read_docker_config_file(&paths).unwrap()), Some("json-root"));
    }

    #[test]
    fn default_paths_are_upstreams() {
        let paths = DockerConfigSearchPaths { preferred: "/var/lib/kubelet".into(), home: "/root".into() };
        let strs = |v: Vec<PathBuf>| v.into_iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        assert_eq!(strs(paths.config_json_dirs()), ["/var/lib/kubelet", "", "/root/.docker", "/.docker"]);
        assert_eq!(strs(paths.dockercfg_dirs()), ["/var/lib/kubelet", "", "/root", "/"]);
        let err = read_dockercfg_file(&[PathBuf::from("/nonexistent-dir")]).unwrap_err();
        assert_eq!(err.to_string(), r#"couldn't find valid .dockercfg after checking in ["/nonexistent-dir"]"#);
        assert!(NodeKeyring::empty().lookup("docker.io/library/nginx").is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn node_keyring_caches_for_five_minutes() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = paths(tmp.path());
        let keyring = NodeKeyring::new(paths.clone());
        // Nothing yet: the empty result is cached too.
        assert!(keyring.lookup("registry.io/app").is_empty());
        write(&paths.preferred, CONFIG_JSON_FILE_NAME, &config_json("first"));
        tokio::time::advance(NODE_CONFIG_LIFETIME - Duration::from_secs(1)).await;
        assert!(keyring.lookup("registry.io/app").is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        let found = keyring.lookup("registry.io/app");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].auth.username, "first");
        assert_eq!(found[0].source, None);
        // A change is seen only after the next expiry.
        write(&paths.preferred, CONFIG_JSON_FILE_NAME, &config_json("second"));
        assert_eq!(keyring.lookup("registry.io/app")[0].auth.username, "first");
        tokio::time::advance(NODE_CONFIG_LIFETIME).await;
        assert_eq!(keyring.lookup("registry.io/app")[0].auth.username, "second");
        assert!(keyring.lookup("other.io/app").is_empty());
    }
}

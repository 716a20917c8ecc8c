//! Container log rotation (`pkg/kubelet/logs/container_log_manager.go`).
//!
//! [`ContainerLogManager::run`] lists the containers every `containerLogMonitorInterval` (first pass at once) and
//! checks each running one, `containerLogMaxWorkers` at a time: a log at `containerLogMaxSize` or more is rotated.
//! The log of a container the kubelet created is found from its labels (`podLogsDir` layout), without upstream's
//! `ContainerStatus` call per running container per pass; other containers are asked for theirs.
//! A rotation removes leftovers of an interrupted one (`.tmp` files, uncompressed files whose `.gz` exists), keeps
//! the newest `containerLogMaxFiles - 2` rotated files, compresses the older uncompressed ones to `<file>.gz`,
//! renames the log to `<log>.<YYYYMMDD-hhmmss>` and asks the runtime to reopen it (`ReopenContainerLog`); if the
//! runtime refuses, the rename is undone and the next pass tries again. A log that is missing is reopened first
//! (a rotation interrupted between rename and reopen). Errors are logged per container, never fatal; nothing is
//! kept across restarts. Ends when cancelled.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kubelet_cri::{RuntimeService, api};
use kubelet_types::Clock;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Settings (`containerLogMaxSize`, `containerLogMaxFiles`, `containerLogMaxWorkers`,
/// `containerLogMonitorInterval`).
#[derive(Debug, Clone)]
pub struct LogRotationConfig {
    /// Rotate at this many bytes.
    pub max_size: u64,
    /// Files kept per container, the current one included.
    pub max_files: usize,
    /// Containers checked at once.
    pub workers: usize,
    /// Between passes.
    pub interval: Duration,
    /// `podLogsDir`: where the kubelet's containers log (`<dir>/<ns>_<pod>_<uid>/<container>/<restart>.log`).
    pub pod_logs_dir: PathBuf,
}

/// The rotated files' timestamp (`timestampFormat`).
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// The log manager.
pub struct ContainerLogManager {
    runtime: Arc<dyn RuntimeService>,
    cfg: LogRotationConfig,
    clock: Arc<dyn Clock>,
}

/// The rotated files of `log` (`<log>.*`), sorted by name (oldest first).
fn rotated(log: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else { return vec![] };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).map(|e| e.path()).collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Removes a container's log and its rotated files (`Clean`); missing files are fine.
pub fn remove_logs(log: &Path) {
    for f in rotated(log).into_iter().chain(std::iter::once(log.to_path_buf())) {
        match std::fs::remove_file(&f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                warn!(path = %f.display(), error = %e, "failed to remove container log")
            }
            _ => {}
        }
    }
}

fn has_suffix(p: &Path, s: &str) -> bool {
    p.to_string_lossy().ends_with(s)
}

fn with_suffix(p: &Path, s: &str) -> PathBuf {
    PathBuf::from(format!("{}{s}", p.display()))
}

/// Compresses `file` to `<file>.gz` through `<file>.tmp` (`compressLog`).
fn compress(file: &Path) -> std::io::Result<()> {
    let tmp = with_suffix(file, ".tmp");
    let result = (|| {
        let mut input = std::fs::File::open(file)?;
        let mode = std::fs::metadata(file)?.permissions();
        let out = std::fs::File::create(&tmp)?;
        out.set_permissions(mode)?;
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        std::io::copy(&mut input, &mut gz)?;
        gz.finish()?.flush()?;
        std::fs::rename(&tmp, with_suffix(file, ".gz"))?;
        std::fs::remove_file(file)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

impl ContainerLogManager {
    /// A manager.
    pub fn new(runtime: Arc<dyn RuntimeService>, cfg: LogRotationConfig, clock: Arc<dyn Clock>) -> Self {
        Self { runtime, cfg, clock }
    }

    /// Runs until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        info!(maxSize = self.cfg.max_size, maxFiles = self.cfg.max_files, "container log rotation started");
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.rotate_logs().await {
                warn!(error = %e, "failed to rotate container logs");
            }
        }
    }

    /// One pass over the running containers (`rotateLogs`).
    pub async fn rotate_logs(&self) -> Result<(), kubelet_cri::CriError> {
        let running: Vec<(String, Option<PathBuf>)> = self
            .runtime
            .list_containers(None)
            .await?
            .into_iter()
            .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
            .map(|c| {
                let path = self.log_path(&c.labels, &c.annotations);
                (c.id, path)
            })
            .collect();
        futures::stream::iter(running)
            .for_each_concurrent(self.cfg.workers.max(1), |(id, path)| async move { self.process(&id, path).await })
            .await;
        Ok(())
    }

    /// The log of a container the kubelet created, from its labels: upstream asks the runtime for each running
    /// container's status every pass (one call per container every 10 s); the path is known without asking.
    fn log_path(
        &self,
        labels: &std::collections::HashMap<String, String>,
        annotations: &std::collections::HashMap<String, String>,
    ) -> Option<PathBuf> {
        let info = crate::labels::container_info(labels, annotations);
        if info.pod_uid.is_empty() || info.name.is_empty() {
            return None;
        }
        let pod = format!("{}_{}_{}", info.pod_namespace, info.pod_name, info.pod_uid);
        Some(self.cfg.pod_logs_dir.join(pod).join(&info.name).join(format!("{}.log", info.restart_count)))
    }

    async fn process(&self, id: &str, known: Option<PathBuf>) {
        let log = match known {
            Some(p) => p,
            None => match self.runtime.container_status(id).await {
                Ok(s) if !s.log_path.is_empty() => PathBuf::from(&s.log_path),
                Ok(_) => return,
                Err(e) => {
                    debug!(containerID = %id, error = %e, "failed to get container status");
                    return;
                }
            },
        };
        let size = match std::fs::metadata(&log) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A rotation interrupted between the rename and the reopen.
                if let Err(e) = self.runtime.reopen_container_log(id).await {
                    warn!(containerID = %id, path = %log.display(), error = %e, "container log doesn't exist, reopen container log failed");
                    return;
                }
                match std::fs::metadata(&log) {
                    Ok(m) => m.len(),
                    Err(e) => {
                        warn!(containerID = %id, path = %log.display(), error = %e, "failed to stat container log after reopen");
                        return;
                    }
                }
            }
            Err(e) => {
                warn!(containerID = %id, path = %log.display(), error = %e, "failed to stat container log");
                return;
            }
        };
        if size < self.cfg.max_size {
            return;
        }
        if let Err(e) = self.rotate(id, &log).await {
            warn!(containerID = %id, path = %log.display(), error = %e, "failed to rotate log for container");
        }
    }

    /// Rotates `log` of container `id` (`rotateLog`).
    pub async fn rotate(&self, id: &str, log: &Path) -> Result<(), String> {
        let mut files = rotated(log);
        // Leftovers of an interrupted rotation.
        let names: Vec<PathBuf> = files.clone();
        files.retain(|f| {
            let unused = has_suffix(f, ".tmp") || (!has_suffix(f, ".gz") && names.contains(&with_suffix(f, ".gz")));
            if unused && let Err(e) = std::fs::remove_file(f) {
                warn!(path = %f.display(), error = %e, "failed to remove unused log");
            }
            !unused
        });
        // Room for the file about to be rotated and the new one.
        let keep = self.cfg.max_files.saturating_sub(2);
        let excess = files.len().saturating_sub(keep);
        for f in files.drain(..excess) {
            std::fs::remove_file(&f).map_err(|e| format!("failed to remove excess log {}: {e}", f.display()))?;
        }
        for f in files.iter().filter(|f| !has_suffix(f, ".gz")) {
            compress(f).map_err(|e| format!("failed to compress log {}: {e}", f.display()))?;
        }
        let ts = chrono::DateTime::<chrono::Local>::from(self.clock.now()).format(TIMESTAMP_FORMAT);
        let to = with_suffix(log, &format!(".{ts}"));
        std::fs::rename(log, &to).map_err(|e| format!("failed to rotate log {}: {e}", log.display()))?;
        if let Err(e) = self.runtime.reopen_container_log(id).await {
            if let Err(re) = std::fs::rename(&to, log) {
                warn!(from = %to.display(), to = %log.display(), error = %re, "failed to rename rotated log");
            }
            return Err(format!("failed to reopen container log {id:?}: {e}"));
        }
        debug!(containerID = %id, rotated = %to.display(), "container log rotated");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::FakeRuntime;
    use kubelet_types::TestClock;

    async fn running(fake: &FakeRuntime, log: &Path) -> String {
        let sandbox = fake.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            log_path: log.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let id = fake.create_container(&sandbox, config, api::PodSandboxConfig::default()).await.unwrap();
        fake.start_container(&id).await.unwrap();
        id
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn rotates_at_the_size_keeps_max_files_and_compresses_all_but_the_newest() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("0.log");
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let id = running(&fake, &log).await;
        let clock = Arc::new(TestClock::fixed());
        let cfg = LogRotationConfig {
            max_size: 100,
            max_files: 3,
            workers: 1,
            interval: Duration::from_secs(10),
            pod_logs_dir: tmp.path().into(),
        };
        let m = ContainerLogManager::new(fake.clone(), cfg, clock.clone());
        std::fs::write(&log, vec![b'a'; 99]).unwrap();
        m.rotate_logs().await.unwrap();
        assert_eq!(names(tmp.path()), ["0.log"], "under the size: untouched");
        for round in 0..3u8 {
            std::fs::write(&log, vec![b'b' + round; 100]).unwrap();
            tokio::time::advance(Duration::from_secs(1)).await;
            m.rotate_logs().await.unwrap();
        }
        let files = names(tmp.path());
        // maxFiles 3: the new log, the newest rotated file uncompressed, one older compressed.
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(files[0], "0.log");
        assert!(files[1].ends_with(".gz") && !files[2].ends_with(".gz"), "{files:?}");
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 0, "the runtime reopened an empty log");
        let newest = std::fs::read(tmp.path().join(&files[2])).unwrap();
        assert_eq!(newest, vec![b'd'; 100]);
        let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(tmp.path().join(&files[1])).unwrap());
        let mut older = vec![];
        std::io::Read::read_to_end(&mut gz, &mut older).unwrap();
        assert_eq!(older, vec![b'c'; 100]);

        // The runtime refusing to reopen undoes the rename.
        fake.exit_container(&id, 0);
        std::fs::write(&log, vec![b'z'; 200]).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(m.rotate(&id, &log).await.is_err());
        assert_eq!(std::fs::read(&log).unwrap(), vec![b'z'; 200]);
    }
}

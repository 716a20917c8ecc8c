//! The real rkubelet binary as a child process: its config file, flags and log in a temporary folder, its CPU and
//! RSS from `/proc`, and a SIGTERM stop that waits for the exit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::procstat;

/// Where the rkubelet binary is: `--rkubelet`, else beside this program (cargo puts both in one target folder).
pub fn default_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("rkubelet")))
        .unwrap_or_else(|| PathBuf::from("rkubelet"))
}

/// How to start one rkubelet.
pub struct NodeSpec<'a> {
    /// The binary.
    pub binary: &'a Path,
    /// CRI endpoint (`unix:///...`).
    pub endpoint: String,
    /// The kubeconfig of the test apiserver, if the node joins it.
    pub kubeconfig: Option<PathBuf>,
    /// Extra KubeletConfiguration lines (YAML, top level).
    pub extra_config: String,
    /// `RKUBELET_LOG` (tracing filter); `None` keeps the binary's default (info).
    pub log_filter: Option<String>,
    /// The node's name (default [`NODE`]).
    pub node_name: Option<String>,
}

/// A running rkubelet.
pub struct BinNode {
    /// Its folder (config, manifests, root, log).
    pub dir: tempfile::TempDir,
    child: Child,
}

/// The secure port (HTTPS; anonymous requests are allowed on this loopback-only benchmark node).
pub const SECURE_PORT: u16 = 21250;

/// Node name every benchmark node registers as.
pub const NODE: &str = "bench-node";

impl BinNode {
    /// Writes the config and starts the binary.
    pub fn start(spec: &NodeSpec<'_>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("rkubelet-bench-").tempdir()?;
        let p = dir.path();
        std::fs::create_dir_all(p.join("manifests"))?;
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: {}\nstaticPodPath: {}\npodLogsDir: {}\n\
             healthzBindAddress: 127.0.0.1\nhealthzPort: 21248\naddress: 127.0.0.1\nport: 21250\nreadOnlyPort: 21255\n\
             failSwapOn: false\nresolvConf: /etc/resolv.conf\n\
             authentication:\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: false\n\
             authorization:\n  mode: AlwaysAllow\n\
             evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1Gi\n  nodefs.inodesFree: 1%\n  imagefs.available: 1Gi\n{}",
            spec.endpoint,
            p.join("manifests").display(),
            p.join("pod-logs").display(),
            spec.extra_config
        );
        std::fs::write(p.join("config.yaml"), config)?;
        let log = std::fs::File::create(p.join("rkubelet.log"))?;
        let mut cmd = Command::new(spec.binary);
        cmd.arg(format!("--config={}", p.join("config.yaml").display()))
            .arg(format!("--root-dir={}", p.join("root").display()))
            .arg(format!("--cert-dir={}", p.join("pki").display()))
            .arg(format!("--hostname-override={}", spec.node_name.as_deref().unwrap_or(NODE)))
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        if let Some(k) = &spec.kubeconfig {
            cmd.arg(format!("--kubeconfig={}", k.display()));
        }
        match &spec.log_filter {
            Some(f) => cmd.env("RKUBELET_LOG", f),
            None => cmd.env_remove("RKUBELET_LOG"),
        };
        let child = cmd.spawn().with_context(|| format!("start {}", spec.binary.display()))?;
        Ok(Self { dir, child })
    }

    /// The static pod folder.
    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// The log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("rkubelet.log")
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time so far.
    pub fn cpu(&mut self) -> anyhow::Result<Duration> {
        self.check_alive()?;
        procstat::cpu_of(self.pid()).context("read the CPU time of rkubelet")
    }

    /// RSS now.
    pub fn rss(&mut self) -> anyhow::Result<u64> {
        self.check_alive()?;
        procstat::rss_of(self.pid()).context("read the RSS of rkubelet")
    }

    /// Fails (with the log's tail) when the binary has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(st) = self.child.try_wait()? {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
            anyhow::bail!("rkubelet exited ({st}); its log ends:\n{}", tail.join("\n"));
        }
        Ok(())
    }

    /// Millicores used over `window` (sleeps through it).
    pub async fn millicores_over(&mut self, window: Duration) -> anyhow::Result<f64> {
        let c0 = self.cpu()?;
        tokio::time::sleep(window).await;
        let c1 = self.cpu()?;
        Ok((c1 - c0).as_secs_f64() * 1000.0 / window.as_secs_f64())
    }

    /// SIGTERM, then waits (up to 30 s, then SIGKILL); returns how long the exit took.
    pub async fn stop(mut self) -> Duration {
        let t0 = tokio::time::Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        while t0.elapsed() < Duration::from_secs(30) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return t0.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        t0.elapsed()
    }
}

impl Drop for BinNode {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Its root directory is a shared bind of itself (and may hold volume mounts): unmounted before removal.
        kubelet_volume::mountinfo::unmount_below(self.dir.path());
        // The folder goes with the node: keep its log where it can be read after a failed run.
        let keep = std::env::temp_dir().join(format!("rkubelet-bench-{}.log", self.child.id()));
        if std::fs::copy(self.log_path(), &keep).is_ok() {
            eprintln!("rkubelet's log: {}", keep.display());
        }
    }
}

//! A containerd of a test's own on a filesystem of its own, for the tests whose figures must not depend on the
//! machine's shared disk (disk pressure): a tmpfs of a fixed size is mounted on the node's root dir, and a second
//! containerd keeps its root and state below it, so the node's root dir (nodefs) and the runtime's writable layers
//! and images (imagefs) are one small filesystem that nothing else on the machine writes to.
//!
//! The containerd runs with the shared one's configuration (same CNI network, so pod IPs never collide), its
//! paths and socket moved; the project's images are imported from the tarballs `scripts/node-setup.sh` built.
//! Dropping it removes every pod through CRI (so CNI releases their addresses), stops containerd, and unmounts
//! and removes the filesystem, also when the test failed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kubelet_cri::{RemoteRuntime, RuntimeService};

use super::{runtime_program, workdir};

/// The runtime and its filesystem.
pub struct PrivateRuntime {
    /// The mounted filesystem (the node's root dir).
    pub root: PathBuf,
    /// `unix://...` of its CRI socket.
    pub endpoint: String,
    child: Option<Child>,
    /// The rkubelet using it, killed first when dropped.
    user: Option<i32>,
}

impl PrivateRuntime {
    /// Mounts a tmpfs of `size` (e.g. `1536m`) on `root`, starts containerd below it and imports the images.
    /// Blocking: call it where the node's configuration is written (before rkubelet starts).
    #[allow(clippy::disallowed_methods)] // a blocking wait for another process, outside any async context
    pub fn start(root: &Path, size: &str) -> Self {
        use nix::mount::{MsFlags, mount};
        std::fs::create_dir_all(root).unwrap();
        let data = format!("size={size},mode=0755");
        mount(Some("tmpfs"), root, Some("tmpfs"), MsFlags::empty(), Some(data.as_str()))
            .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", root.display()));
        let dir = root.join("runtime");
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("containerd.sock");
        let shared = workdir();
        let config = std::fs::read_to_string(shared.join("containerd.toml"))
            .expect("the shared containerd's configuration (run scripts/node-setup.sh first)");
        let moved = |s: &str, what: &str| {
            s.replace(&format!("\"{}/{what}", shared.display()), &format!("\"{}/{what}", dir.display()))
        };
        let config = moved(&moved(&moved(&config, "root\""), "state\""), "containerd.sock");
        assert!(config.contains(&dir.display().to_string()), "paths moved in {config}");
        let config_path = dir.join("containerd.toml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        // The shared runtime's programs (containerd finds its shim, the shim its runc, through PATH).
        let path = format!("{}:{}", workdir().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let child = Command::new(runtime_program("containerd"))
            .env("PATH", path)
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start containerd");
        let me = PrivateRuntime {
            root: root.to_path_buf(),
            endpoint: format!("unix://{}", sock.display()),
            child: Some(child),
            user: None,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !ctr(&sock, &["version"]) {
            assert!(std::time::Instant::now() < deadline, "the private containerd did not answer within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        for image in ["pause", "busybox"] {
            let tar = shared.join("images").join(format!("{image}.oci.tar"));
            assert!(
                ctr(
                    &sock,
                    &["-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", &tar.display().to_string()]
                ),
                "import {}",
                tar.display()
            );
        }
        let out = Command::new(runtime_program("ctr"))
            .arg("-a")
            .arg(&sock)
            .args(["-n", "k8s.io", "images", "ls", "-q"])
            .output()
            .unwrap();
        let list = String::from_utf8_lossy(&out.stdout);
        for want in ["localhost/pause:1", "localhost/busybox:1"] {
            assert!(list.lines().any(|l| l == want), "{want} imported into the private containerd: {list}");
        }
        me
    }

    /// Kills process `pid` (the node's rkubelet) first when dropped: nothing recreates pods while they are removed.
    pub fn stop_first(&mut self, pid: i32) {
        self.user = Some(pid);
    }

    /// A CRI client of it.
    pub fn client(&self) -> RemoteRuntime {
        RemoteRuntime::new(&self.endpoint, Duration::from_secs(30)).expect("endpoint")
    }
}

fn ctr(sock: &Path, args: &[&str]) -> bool {
    Command::new(runtime_program("ctr"))
        .arg("-a")
        .arg(sock)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for PrivateRuntime {
    #[allow(clippy::disallowed_methods)] // waits for containerd to exit, outside any async context
    fn drop(&mut self) {
        if let Some(pid) = self.user {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        // Pods go through CRI (their network torn down by CNI), on a thread of its own: drop may run in a runtime.
        let client = self.client();
        let cleaned = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                for s in client.list_pod_sandbox(None).await.unwrap_or_default() {
                    let _ = client.stop_pod_sandbox(&s.id).await;
                    let _ = client.remove_pod_sandbox(&s.id).await;
                }
                for c in client.list_containers(None).await.unwrap_or_default() {
                    let _ = client.remove_container(&c.id).await;
                }
            })
        })
        .join();
        if cleaned.is_err() {
            eprintln!("private containerd: removing its pods failed");
        }
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while c.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        kubelet_volume::mountinfo::unmount_below(&self.root);
        let _ = std::fs::remove_dir(&self.root);
    }
}

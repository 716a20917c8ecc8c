//! The end-to-end harness: the real `rkubelet` binary against the real containerd started by
//! `scripts/node-setup.sh`, observed through CRI (the project's own client) and rkubelet's read-only API.
//!
//! Every test takes [`serial`] first: one rkubelet owns the runtime at a time, as on a real node, and each test
//! starts from a runtime with no pods.

#![allow(dead_code)]

pub mod cluster;
pub mod drill;
pub mod kubeadm_node;
pub mod kubelet_api;
pub mod private_runtime;
pub mod prometheus;
pub mod registry;
pub mod systemd_ns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use kubelet_cri::{RemoteRuntime, RuntimeService, api};
use serde_json::Value;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Holds the runtime for one test: the process-wide lock, and a lock file in the containerd's workdir that keeps
/// every other test binary using it (another `cargo test`, another checkout, the same lane) away meanwhile.
pub struct Serial {
    _process: tokio::sync::MutexGuard<'static, ()>,
    _machine: std::fs::File,
    since: Instant,
}

impl Drop for Serial {
    /// Prints how long the test held its lane (`scripts/test.sh` balances the lanes by these).
    fn drop(&mut self) {
        use std::io::Write;
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let held = self.since.elapsed().as_secs_f64();
        let _ = writeln!(std::io::stderr().lock(), "e2e: {test} held lane {} for {held:.1} s", lane());
    }
}

/// Runs the tests of one containerd (one lane, see [`lane`]) one at a time, across test binaries too.
pub async fn serial() -> Serial {
    let process = SERIAL.lock().await;
    let machine = tokio::task::spawn_blocking(|| {
        use std::os::fd::AsRawFd;
        let path = workdir().join("e2e.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // SAFETY: flock on a descriptor we own; released when the file is closed with the guard.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "lock {}", path.display());
        f
    })
    .await
    .unwrap();
    Serial { _process: process, _machine: machine, since: Instant::now() }
}

/// Whether the long scenarios run at full length (`scripts/test.sh --long` sets `RKUBELET_E2E_LONG=1`): more
/// rounds, more pods, outages and hangs as long as upstream's thresholds. The suite runs each scenario once, at
/// the smallest size that still proves it.
pub fn long() -> bool {
    std::env::var("RKUBELET_E2E_LONG").is_ok_and(|v| v == "1")
}

/// `suite` normally, `long` with [`long`].
pub fn by_mode<T>(suite: T, long_value: T) -> T {
    if long() { long_value } else { suite }
}

/// An environment entry naming a program rkubelet is started through (e.g. into systemd's namespaces).
pub const WRAPPER_ENV: &str = "RKUBELET_E2E_WRAPPER";

/// The test containerd's work folder (`scripts/node-setup.sh`): `$RKUBELET_WORKDIR` or the default.
pub fn workdir() -> PathBuf {
    std::env::var_os("RKUBELET_WORKDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/lib/rkubelet-dev".into())
}

/// A setting `scripts/node-setup.sh` recorded for the test containerd in `<workdir>/runtime.env`.
fn runtime_env(key: &str) -> Option<String> {
    let text = std::fs::read_to_string(workdir().join("runtime.env")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

/// Which containerd the tests run against: `1.6` (Debian's) or `2.3` (`../shared/runtimes`).
pub fn containerd_version() -> String {
    runtime_env("RK_CONTAINERD").unwrap_or_else(|| "1.6".into())
}

/// One of the test containerd's programs (`containerd`, `ctr`, `runc`): the link node-setup made to the right
/// runtime's, else the one in PATH.
pub fn runtime_program(name: &str) -> PathBuf {
    let linked = workdir().join("bin").join(name);
    if linked.exists() { linked } else { PathBuf::from(name) }
}

/// The name of the test containerd's CNI network (`rkubelet` on 1.6, `rkubelet2` on 2.3, `rkubelet3` on lane 1).
pub fn cni_network() -> String {
    runtime_env("RK_CNI_NETWORK").unwrap_or_else(|| "rkubelet".into())
}

/// Whether `ip` is in the pod subnet of the test containerd's CNI network (10.88.0.0/16 on 1.6, 10.89.0.0/16 on
/// 2.3).
pub fn in_pod_cidr(ip: &str) -> bool {
    let cidr = runtime_env("RK_POD_CIDR").unwrap_or_else(|| "10.88.0.0/16".into());
    let prefix: Vec<&str> = cidr.split('/').next().unwrap_or_default().split('.').take(2).collect();
    ip.starts_with(&format!("{}.", prefix.join(".")))
}

/// The CRI endpoint of the test containerd.
pub fn endpoint() -> String {
    std::env::var("RKUBELET_E2E_ENDPOINT").unwrap_or_else(|_| "unix:///var/lib/rkubelet-dev/containerd.sock".into())
}

/// A CRI client of the test containerd; fails the test with a hint when containerd is not running.
pub async fn runtime() -> RemoteRuntime {
    let rt = RemoteRuntime::new(&endpoint(), Duration::from_secs(30)).expect("endpoint");
    if let Err(e) = rt.version().await {
        panic!("containerd at {} does not answer ({e}); run scripts/node-setup.sh first", endpoint());
    }
    rt
}

/// The start of every runtime test: the serial lock, a CRI client, and a runtime without pods.
pub async fn fresh_runtime() -> (Serial, RemoteRuntime) {
    let guard = serial().await;
    let rt = runtime().await;
    clean_runtime(&rt).await;
    (guard, rt)
}

/// Stops and removes every pod sandbox and container of the runtime.
pub async fn clean_runtime(rt: &RemoteRuntime) {
    for s in rt.list_pod_sandbox(None).await.unwrap() {
        let _ = rt.stop_pod_sandbox(&s.id).await;
        let mut removed = rt.remove_pod_sandbox(&s.id).await;
        for _ in 0..5 {
            let Err(e) = &removed else { break };
            // containerd 1.6 keeps the task of a start cancelled by a killed client, and no CRI call deletes it.
            let msg = e.to_string();
            let Some(task) = msg.split("cannot delete running task ").nth(1) else { break };
            let task: String = task.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            delete_task(&task);
            removed = rt.remove_pod_sandbox(&s.id).await;
        }
        removed.unwrap();
    }
    for c in rt.list_containers(None).await.unwrap() {
        let _ = rt.remove_container(&c.id).await;
    }
}

/// Deletes a container's task with containerd's own client (`ctr tasks delete -f`): the way out of containerd
/// 1.6's leak of a start cancelled by its client, which no CRI call can remove.
pub fn delete_task(id: &str) {
    let sock = endpoint().trim_start_matches("unix://").to_string();
    let _ =
        Command::new(runtime_program("ctr")).args(["-a", &sock, "-n", "k8s.io", "tasks", "delete", "-f", id]).output();
}

/// The lane of this test run (`RKUBELET_E2E_LANE`, 0 when unset). `scripts/test.sh` runs two lanes at once, each
/// against its own containerd (`RKUBELET_WORKDIR`) with its own ports and cgroup root, so the tests of one lane never
/// see the other's node; the tests of one lane run one at a time ([`serial`] locks the lane's workdir).
pub fn lane() -> u16 {
    std::env::var("RKUBELET_E2E_LANE").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The healthz port of the test node (apart from a developer's rkubelet on the defaults; 100 more per lane).
pub fn healthz_port() -> u16 {
    20248 + 100 * lane()
}

/// The read-only API port of the test node.
pub fn read_only_port() -> u16 {
    20255 + 100 * lane()
}

/// The kubelet API (HTTPS) port of the test node.
pub fn secure_port() -> u16 {
    20250 + 100 * lane()
}

/// The `cgroupRoot` of the lane's nodes: the default (`/`) on lane 0, `/rk-e2e-lane<N>` on the others, so each lane's
/// rkubelet owns its own `kubepods` tree (an rkubelet removes the pod cgroups it does not know under its own).
pub fn cgroup_root() -> Option<String> {
    (lane() > 0).then(|| format!("/rk-e2e-lane{}", lane()))
}

/// The `kubepods` folder of the lane's nodes relative to a cgroup hierarchy, and its two QoS folders.
pub fn kubepods_dirs() -> [String; 3] {
    let top = match cgroup_root() {
        Some(root) => format!("{}/kubepods", root.trim_start_matches('/')),
        None => "kubepods".into(),
    };
    [top.clone(), format!("{top}/burstable"), format!("{top}/besteffort")]
}

/// Makes the lane's cgroup root in every mounted v1 hierarchy (the kubelet requires it to exist). Idempotent;
/// `scripts/node-teardown.sh` removes it.
fn ensure_cgroup_root() {
    let Some(root) = cgroup_root() else { return };
    for h in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        if h.path().join("cgroup.procs").exists() {
            std::fs::create_dir_all(h.path().join(root.trim_start_matches('/'))).unwrap();
        }
    }
}
/// Node name of the test node.
pub const NODE: &str = "e2e-node";

/// A running rkubelet with its folders.
pub struct Node {
    /// The node name (`--hostname-override`).
    pub name: String,
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub root: PathBuf,
    pub logs: PathBuf,
    pub config: PathBuf,
    log: PathBuf,
    /// Extra flags (e.g. `--kubeconfig`).
    pub extra_args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// The binary to run instead of the one built with the tests (an upgrade drill's copy).
    pub binary: Option<PathBuf>,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

/// The test nodes' `evictionHard`: absolute amounts well below what a test machine has free. Upstream's defaults are
/// percentages (`imagefs.available<15%`), which a build machine's fuller disk crosses at once: every test node
/// would start under DiskPressure. The pressure tests replace this block with thresholds near what is free.
pub const EVICTION_HARD: &str = "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1Gi\n  \
                                 nodefs.inodesFree: 1%\n  imagefs.available: 1Gi\n";

fn config_yaml(manifests: &Path, logs: &Path) -> String {
    ensure_cgroup_root();
    let root = cgroup_root().map(|r| format!("cgroupRoot: {r}\n")).unwrap_or_default();
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerRuntimeEndpoint: {}\nstaticPodPath: {}\npodLogsDir: {}\nfileCheckFrequency: 20s\n\
         healthzBindAddress: 127.0.0.1\nhealthzPort: {}\naddress: 127.0.0.1\nport: {}\nreadOnlyPort: {}\n{root}\
         failSwapOn: false\nresolvConf: /etc/resolv.conf\nauthentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false\n\
         authorization:\n  mode: AlwaysAllow\n{EVICTION_HARD}",
        endpoint(),
        manifests.display(),
        logs.display(),
        healthz_port(),
        secure_port(),
        read_only_port(),
    )
}

impl Node {
    /// A node with `manifests` (file name, content) in its static pod folder, started.
    pub fn start(manifests: &[(&str, &str)]) -> Node {
        Self::start_with(manifests, |n| std::fs::read_to_string(&n.config).unwrap())
    }

    /// As [`Node::start`], with the config file rewritten by `edit` before start.
    pub fn start_with(manifests: &[(&str, &str)], edit: impl FnOnce(&Node) -> String) -> Node {
        Self::start_full(manifests, edit, vec![])
    }

    pub fn start_full(manifests: &[(&str, &str)], edit: impl FnOnce(&Node) -> String, extra_args: Vec<String>) -> Node {
        Self::start_named(NODE, manifests, edit, extra_args)
    }

    /// As [`Node::start_full`], for node `name`.
    pub fn start_named(
        name: &str,
        manifests: &[(&str, &str)],
        edit: impl FnOnce(&Node) -> String,
        extra_args: Vec<String>,
    ) -> Node {
        Self::start_named_env(name, manifests, edit, extra_args, vec![])
    }

    /// As [`Node::start_named`], with extra environment variables for the binary.
    pub fn start_named_env(
        name: &str,
        manifests: &[(&str, &str)],
        edit: impl FnOnce(&Node) -> String,
        extra_args: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Node {
        let tmp = tempfile::Builder::new().prefix("rkubelet-e2e-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mut n = Node {
            name: name.to_string(),
            manifests: dir.join("manifests"),
            root: dir.join("root"),
            logs: dir.join("pod-logs"),
            config: dir.join("config.yaml"),
            log: dir.join("rkubelet.log"),
            extra_args: vec![],
            env,
            binary: None,
            dir,
            child: None,
            _tmp: Some(tmp),
        };
        std::fs::create_dir_all(&n.manifests).unwrap();
        std::fs::write(&n.config, config_yaml(&n.manifests, &n.logs)).unwrap();
        for (f, c) in manifests {
            n.write_manifest(f, c);
        }
        let cfg = edit(&n);
        std::fs::write(&n.config, cfg).unwrap();
        n.extra_args = extra_args;
        if let Some((_, w)) = n.env.iter().find(|(k, _)| k == WRAPPER_ENV) {
            n.binary = Some(w.into());
        }
        n.spawn();
        n
    }

    /// Starts the binary (again); with [`WRAPPER_ENV`] among its environment, through that program (which gets
    /// the binary's path as its first argument).
    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let bin = self.binary.clone().unwrap_or_else(|| env!("CARGO_BIN_EXE_rkubelet").into());
        let mut cmd = Command::new(&bin);
        if self.env.iter().any(|(k, _)| k == WRAPPER_ENV) {
            cmd.arg(env!("CARGO_BIN_EXE_rkubelet"));
        }
        let child = cmd
            .arg(format!("--config={}", self.config.display()))
            .arg(format!("--root-dir={}", self.root.display()))
            .arg(format!("--cert-dir={}", self.dir.join("pki").display()))
            .arg(format!("--hostname-override={}", self.name))
            .arg("--v=3")
            .args(&self.extra_args)
            .env(
                "RKUBELET_LOG",
                "debug,h2=info,hyper=info,hyper_util=info,tower=info,tonic=info,kube_client=info,rustls=info",
            )
            .envs(self.env.iter().map(|(k, v)| (k, v))) // a test's own RKUBELET_LOG wins
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start rkubelet");
        self.child = Some(child);
    }

    /// Writes (or replaces) a manifest atomically.
    pub fn write_manifest(&self, name: &str, content: &str) {
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, self.manifests.join(name)).unwrap();
    }

    /// Removes a manifest.
    pub fn remove_manifest(&self, name: &str) {
        std::fs::remove_file(self.manifests.join(name)).unwrap();
    }

    /// Where rkubelet logs.
    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    /// rkubelet's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The pid of the running binary.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// Kills the binary with SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "rkubelet did not exit within 20s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout` for the binary to exit on its own; its exit status.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.as_mut().expect("started").try_wait().unwrap() {
                self.child = None;
                return st;
            }
            assert!(Instant::now() < deadline, "rkubelet still runs after {timeout:?}:\n{}", tail(&self.log(), 30));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails with the log when the binary has exited.
    pub fn assert_alive(&mut self) {
        if let Some(c) = self.child.as_mut()
            && let Some(st) = c.try_wait().unwrap()
        {
            panic!("rkubelet exited with {st}; log:\n{}", tail(&self.log(), 60));
        }
    }

    /// Waits for `f` to return `Some`, polling every 100 ms, up to `timeout`; fails with `what` and the log tail.
    pub async fn wait_for<T, F, Fut>(&mut self, what: &str, timeout: Duration, mut f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f().await {
                return v;
            }
            self.assert_alive();
            if Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}; rkubelet log:\n{}", excerpt(&self.log()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the static pod `name` (e.g. `web-e2e-node`) runs with every container ready.
    pub async fn wait_running(&mut self, name: &str) -> Value {
        self.wait_for(&format!("pod {name} Running"), Duration::from_secs(60), || async {
            pod(name).await.filter(all_running)
        })
        .await
    }

    /// Waits until the static pod `name` reports `phase` (e.g. `Succeeded`).
    pub async fn wait_phase(&mut self, name: &str, phase: &str) -> Value {
        self.wait_for(&format!("pod {name} {phase}"), Duration::from_secs(60), || async {
            pod(name).await.filter(|p| p["status"]["phase"] == phase)
        })
        .await
    }

    /// The CRI log file of the first instance of `container` of `pod` (as reported on the read-only API).
    pub fn container_log(&self, pod: &Value, container: &str) -> String {
        let m = &pod["metadata"];
        let dir = format!(
            "{}_{}_{}",
            m["namespace"].as_str().unwrap(),
            m["name"].as_str().unwrap(),
            m["uid"].as_str().unwrap()
        );
        let path = self.logs.join(dir).join(container).join("0.log");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    }

    /// Waits until `/healthz` answers ok.
    pub async fn wait_healthy(&mut self) {
        self.wait_for("healthz ok", Duration::from_secs(30), || async {
            http_get(healthz_port(), "/healthz").await.filter(|(code, body)| *code == 200 && body == "ok").map(|_| ())
        })
        .await
    }

    /// Stops rkubelet and removes every pod from the runtime.
    pub async fn stop_and_clean(mut self, rt: &RemoteRuntime) {
        self.kill9();
        clean_runtime(rt).await;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
        // The root directory is a shared bind of itself and may hold volume and subPath mounts: unmount them all
        // before the temporary directory is removed.
        kubelet_volume::mountinfo::unmount_below(&self.dir);
        if std::thread::panicking() {
            eprintln!("rkubelet log ({}):\n{}", self.log.display(), tail(&self.log(), 120));
        }
    }
}

/// What a failed wait shows of rkubelet's log: its last 60 lines above DEBUG (the debug lines of CRI calls and
/// housekeeping otherwise fill any tail), then its last 20 lines whatever their level.
pub fn excerpt(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let notable: Vec<&str> =
        lines.iter().copied().filter(|l| !l.contains(" DEBUG ") && !l.contains(" TRACE ")).collect();
    format!(
        "--- the last 60 lines above DEBUG ---\n{}\n--- the last 20 lines ---\n{}",
        notable[notable.len().saturating_sub(60)..].join("\n"),
        lines[lines.len().saturating_sub(20)..].join("\n")
    )
}

/// Runs a command; its stdout, failing the test with its output on a non-zero exit.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Awaits `f` until it gives a value, checking every 100 ms; fails the test after `timeout`.
pub async fn wait_until<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Imports an image tarball into the test containerd's `k8s.io` namespace.
pub fn import(tar: &Path) {
    let sock = endpoint().trim_start_matches("unix://").to_string();
    let out = Command::new(runtime_program("ctr"))
        .args(["-a", &sock, "-n", "k8s.io", "images", "import"])
        .arg(tar)
        .output()
        .unwrap();
    assert!(out.status.success(), "ctr import: {}", String::from_utf8_lossy(&out.stderr));
}

/// Imports again the optional images node-setup built (`<workdir>/images`) that a test's image GC may have
/// collected: the device plugin's, the DRA driver's and the CSI components'.
pub fn restore_node_images() {
    for name in
        ["sample-device-plugin", "dra-test-driver", "hostpathplugin", "csi-node-driver-registrar", "csi-provisioner"]
    {
        let tar = workdir().join(format!("images/{name}.oci.tar"));
        if tar.exists() {
            import(&tar);
        }
    }
}

/// `crictl inspect[p] -o json <id>` against the test's containerd.
pub fn crictl(what: &str, id: &str) -> Value {
    let crictl = test_cluster::unpacked_binary("CRICTL", "tools/bin/crictl").expect("crictl from ../shared");
    let out = Command::new(crictl)
        .args(["--runtime-endpoint", &endpoint(), what, "-o", "json", id])
        .output()
        .expect("run crictl");
    assert!(out.status.success(), "crictl {what} {id}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An unlabelled series' value in a Prometheus text page (`name value`).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(&format!("{name} "))).and_then(|l| l.split(' ').nth(1)?.parse().ok())
}

/// A metric of the node under test, from its read-only port's `/metrics` (0 when absent).
pub async fn node_metric(name: &str) -> f64 {
    let text = http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default();
    metric(&text, name).unwrap_or(0.0)
}

/// A plain HTTP GET on loopback: (status, body).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await.ok()?.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The pods rkubelet reports on its read-only API.
pub async fn pods() -> Vec<Value> {
    let Some((200, body)) = http_get(read_only_port(), "/pods").await else { return vec![] };
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The pod named `name` (full static pod name, e.g. `web-e2e-node`).
pub async fn pod(name: &str) -> Option<Value> {
    pods().await.into_iter().find(|p| p["metadata"]["name"] == name)
}

/// The status of container `c` of a pod.
pub fn container_status<'a>(pod: &'a Value, c: &str) -> Option<&'a Value> {
    pod["status"]["containerStatuses"].as_array()?.iter().find(|s| s["name"] == c)
}

/// Whether the pod is Running with every container running and ready.
pub fn all_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["ready"] == true && c["state"]["running"].is_object()))
}

/// Containers of the runtime whose pod name label is `pod`, newest first.
pub async fn containers_of(rt: &RemoteRuntime, pod: &str) -> Vec<api::Container> {
    let filter = api::ContainerFilter {
        label_selector: [("io.kubernetes.pod.name".to_string(), pod.to_string())].into(),
        ..Default::default()
    };
    let mut v = rt.list_containers(Some(filter)).await.unwrap();
    v.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    v
}

/// Sandboxes of the runtime whose pod name label is `pod`.
pub async fn sandboxes_of(rt: &RemoteRuntime, pod: &str) -> Vec<api::PodSandbox> {
    let filter = api::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.name".to_string(), pod.to_string())].into(),
        ..Default::default()
    };
    rt.list_pod_sandbox(Some(filter)).await.unwrap()
}

/// Whether any cgroup folder of the pod is left in any hierarchy.
pub fn pod_cgroup_exists(uid: &str) -> bool {
    let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else { return false };
    rd.flatten().any(|h| kubepods_dirs().iter().any(|q| h.path().join(q).join(format!("pod{uid}")).exists()))
}

/// A static pod manifest with busybox containers: `(name, shell script)` pairs, init containers first.
pub fn manifest(name: &str, inits: &[(&str, &str)], apps: &[(&str, &str)], extra_spec: &str) -> String {
    let c = |list: &[(&str, &str)]| {
        list.iter()
            .map(|(n, script)| {
                format!(
                    "  - name: {n}\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", {}]\n",
                    serde_json::to_string(script).unwrap()
                )
            })
            .collect::<String>()
    };
    let mut s =
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    test: e2e\nspec:\n{extra_spec}");
    if !inits.is_empty() {
        s.push_str("  initContainers:\n");
        s.push_str(&c(inits));
    }
    s.push_str("  containers:\n");
    s.push_str(&c(apps));
    s
}

/// A container script that runs until SIGTERM and exits 0 on it.
pub const SERVE: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

/// The texts of a CRI log's lines (`<time> <stream> <tag> <text>`).
pub fn texts(log: &str) -> Vec<String> {
    log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(str::to_string).collect()
}

/// Runs kubectl; returns stdout, failing the test with stderr on a non-zero exit.
pub async fn kubectl(kc: &Path, args: &[&str]) -> String {
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(args)
        .output()
        .await
        .expect("run kubectl");
    assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl get ... -o json`, or None when it is not found.
pub async fn get_json(kc: &Path, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(&a)
        .output()
        .await
        .ok()?;
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

/// Removes from the node the image names starting with `prefix` (names only, with `ctr`: CRI RemoveImage would
/// remove every name of an image, `localhost/busybox:1` included, when the content is shared); the names removed.
pub fn remove_image_names(prefix: &str) -> Vec<String> {
    let sock = endpoint().trim_start_matches("unix://").to_string();
    let ctr = |args: &[&str]| {
        Command::new(runtime_program("ctr")).args(["-a", &sock, "-n", "k8s.io", "images"]).args(args).output()
    };
    let Ok(out) = ctr(&["ls", "-q"]) else { return vec![] };
    let ours: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with(prefix)).map(String::from).collect();
    if !ours.is_empty() {
        let mut args = vec!["rm"];
        args.extend(ours.iter().map(String::as_str));
        let _ = ctr(&args);
    }
    ours
}

/// rkubelet's environment for its highest verbosity: every target of rkubelet and of its libraries at trace.
pub fn loudest_log() -> Vec<(String, String)> {
    vec![("RKUBELET_LOG".into(), "trace".into())]
}

/// Fails when rkubelet's log holds any of `secrets`, plainly or base64-encoded (as a Secret's `data` carries them),
/// naming the line; the log must have been written at trace level.
pub fn assert_secrets_not_logged(log: &str, secrets: &[&str]) {
    use base64::Engine;
    assert!(log.contains(" TRACE "), "rkubelet ran at its highest verbosity");
    for s in secrets {
        for form in [s.to_string(), base64::engine::general_purpose::STANDARD.encode(s)] {
            if let Some(line) = log.lines().find(|l| l.contains(&form)) {
                panic!("rkubelet logged the secret value {s:?} (as {form:?}): {line}");
            }
        }
    }
}

/// A client of the node's pod resources API, as a monitoring agent on the node dials it.
pub async fn pod_resources(
    node: &Node,
) -> kubelet_proto::podresources::v1::pod_resources_lister_client::PodResourcesListerClient<tonic::transport::Channel> {
    let path = node.root.join("pod-resources/kubelet.sock");
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .expect("the pod resources socket answers");
    kubelet_proto::podresources::v1::pod_resources_lister_client::PodResourcesListerClient::new(channel)
}

//! A real Kubernetes control plane for the end-to-end tests: etcd (Debian's `etcd-server`), and the upstream
//! `kube-apiserver`, `kube-controller-manager` and `kube-scheduler` (found through `KUBE_APISERVER` /
//! `KUBE_CONTROLLER_MANAGER` / `KUBE_SCHEDULER`, then `../shared/k8s/bin/` beside the project), configured as `kubeadm init` configures a cluster:
//! `--authorization-mode=Node,RBAC`, the `NodeRestriction` admission plugin, bootstrap tokens, the RBAC bindings
//! kubeadm creates for TLS bootstrap and automatic CSR approval, and the controller-manager's controllers
//! (service accounts and their tokens, `kube-root-ca.crt`, CSR approval and signing, garbage collection,
//! namespace deletion, node lifecycle, DaemonSets), and the scheduler binding pods that name no node.
//!
//! Contract: [`ControlPlane::ensure`] is called by every test binary (and by `scripts/test.sh` through the
//! `rkubelet-test-cluster up` command before the suite); the first call starts the processes detached and later
//! calls reuse them while the apiserver answers `/readyz` (an apiserver started with other flags by an
//! older build is restarted with today's), so one control plane serves the whole run (the
//! apiserver needs 5–10 s to start on two cores). Calls are serialised by a lock file in the state directory.
//! `rkubelet-test-cluster down` stops it. Everything listens on 127.0.0.1 only. The apiserver reaches kubelets by
//! their `Hostname` address: node names come from a pool ([`ControlPlane::next_node_name`]) that resolves to
//! 127.0.0.1 in the apiserver's own mount namespace, whose `/etc/hosts` is a file of the state directory.

pub mod pki;
pub mod procs;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;

pub use pki::{CertPair, Pki};
use procs::{Proc, http_status, https_get, wait_until};

/// Why the control plane could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A certificate could not be made.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// A program is missing or did not become ready.
    #[error("{0}")]
    Setup(String),
    /// A kubectl command failed.
    #[error("kubectl {args}: {stderr}")]
    Kubectl {
        /// Its arguments.
        args: String,
        /// What it printed on stderr.
        stderr: String,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io { path: path.display().to_string(), source }
    }
}

/// The loopback ports of the control plane (away from a developer's own cluster on the defaults).
pub const ETCD_CLIENT_PORT: u16 = 22379;
/// etcd's peer port.
pub const ETCD_PEER_PORT: u16 = 22380;
/// The apiserver's secure port.
pub const APISERVER_PORT: u16 = 26443;
/// The scheduler's secure port (its health).
pub const SCHEDULER_PORT: u16 = 20259;
/// Node names that resolve to 127.0.0.1 for the apiserver: `e2e-node-1` … `e2e-node-<NODE_POOL>`.
pub const NODE_POOL: u32 = 400;
/// The group kubeadm gives its default bootstrap tokens.
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// A running control plane and its files.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// The state directory: PKI, kubeconfigs, logs, pid files, etcd's data.
    pub dir: PathBuf,
    /// The PKI.
    pub pki: Pki,
}

/// The program the environment variable `env` names, if it is set.
fn from_env(env: &str) -> Option<Result<PathBuf, Error>> {
    let p = PathBuf::from(std::env::var_os(env).filter(|p| !p.is_empty())?);
    Some(if p.is_file() { Ok(p) } else { Err(Error::Setup(format!("{env}={} does not name a file", p.display()))) })
}

/// A program: the environment variable first, then the given places, then `PATH`.
fn find_binary(env: &str, name: &str, places: &[PathBuf]) -> Result<PathBuf, Error> {
    if let Some(p) = from_env(env) {
        return p;
    }
    let in_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    places.iter().chain(in_path.iter()).find(|p| p.is_file()).cloned().ok_or_else(|| {
        Error::Setup(format!(
            "{name} not found: set {env} to its path, or put it in ../shared/k8s/bin beside the project \
             (looked in {})",
            places.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ))
    })
}

/// Where the shared Kubernetes binaries are looked for: `../shared/k8s/bin` beside the project, and
/// `/work/shared/k8s/bin`.
fn k8s_places(name: &str) -> Vec<PathBuf> {
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    vec![project.join("../shared/k8s/bin").join(name), PathBuf::from("/work/shared/k8s/bin").join(name)]
}

/// A program of `../shared` that is kept xz-compressed there (`k8s/bin/kubeadm`, `tools/bin/crictl`, ...): `env`
/// names it if set, else `../shared/unpack.sh` (beside the project, or `/work/shared`) unpacks it into its cache
/// (`$RKUBELET_SHARED_BIN`, `/var/cache/rkubelet-shared`) and its path there is returned.
pub fn unpacked_binary(env: &str, rel: &str) -> Result<PathBuf, Error> {
    if let Some(p) = from_env(env) {
        return p;
    }
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = [project.join("../shared/unpack.sh"), PathBuf::from("/work/shared/unpack.sh")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Setup(format!("{rel} not found: set {env} to its path, or put shared/ beside the project"))
        })?;
    let out = std::process::Command::new("sh")
        .arg(&script)
        .output()
        .map_err(|e| Error::Setup(format!("{}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let dest = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let p = dest.join(rel);
    if p.is_file() { Ok(p) } else { Err(Error::Setup(format!("{} not unpacked by {}", p.display(), script.display()))) }
}

/// The kube-apiserver binary.
pub fn apiserver_binary() -> Result<PathBuf, Error> {
    find_binary("KUBE_APISERVER", "kube-apiserver", &k8s_places("kube-apiserver"))
}

/// The kube-controller-manager binary.
pub fn controller_manager_binary() -> Result<PathBuf, Error> {
    find_binary("KUBE_CONTROLLER_MANAGER", "kube-controller-manager", &k8s_places("kube-controller-manager"))
}

/// The kube-scheduler binary: `KUBE_SCHEDULER`, else `../shared/k8s/bin/kube-scheduler.xz` unpacked.
pub fn scheduler_binary() -> Result<PathBuf, Error> {
    unpacked_binary("KUBE_SCHEDULER", "k8s/bin/kube-scheduler")
}

/// The etcd binary (Debian's `etcd-server`).
pub fn etcd_binary() -> Result<PathBuf, Error> {
    find_binary("ETCD", "etcd", &[PathBuf::from("/usr/bin/etcd")])
}

/// The default state directory: `$RKUBELET_E2E_CLUSTER`, else `$RKUBELET_WORKDIR/cluster`, else
/// `/var/lib/rkubelet-dev/cluster`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RKUBELET_E2E_CLUSTER").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let work = std::env::var_os("RKUBELET_WORKDIR").filter(|d| !d.is_empty());
    work.map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/rkubelet-dev")).join("cluster")
}

/// An exclusive lock on `<dir>/lock`, held until dropped.
struct Lock(#[allow(dead_code)] std::fs::File);

impl Lock {
    fn take(dir: &Path) -> Result<Lock, Error> {
        let p = dir.join("lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| Error::io(&p, e))?;
        // SAFETY: flock on a descriptor we own; released when the file is closed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::io(&p, std::io::Error::last_os_error()));
        }
        Ok(Lock(f))
    }
}

impl ControlPlane {
    /// The control plane of `dir`: reused when its apiserver answers `/readyz` and its controller-manager runs,
    /// started (or restarted) otherwise.
    pub fn ensure(dir: &Path) -> Result<ControlPlane, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let _lock = Lock::take(dir)?;
        let pki = Pki::ensure(&dir.join("pki"))?;
        let cp = ControlPlane { dir: dir.to_path_buf(), pki };
        // A busy apiserver may miss one answer: only one that stays silent for a few seconds is taken for dead (a
        // restart wipes etcd's data).
        let running = || {
            cp.proc("kube-apiserver").running_pid().is_some()
                && cp.proc("kube-controller-manager").running_pid().is_some()
                && cp.proc("kube-scheduler").running_pid().is_some()
        };
        for attempt in 0..5 {
            if !running() {
                break;
            }
            if cp.apiserver_ready() {
                cp.restart_stale_apiserver()?;
                return Ok(cp);
            }
            if attempt < 4 {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        cp.stop_all();
        cp.start_all()?;
        Ok(cp)
    }

    /// Restarts an apiserver that runs with other flags than [`ControlPlane::apiserver_args`] (started by an older
    /// build of this crate) with today's, on the same etcd data: a change of its flags takes effect at the next
    /// test instead of at the next `rkubelet-test-cluster down`. Tests call this under the end-to-end lock, so no
    /// other test sees the short outage.
    fn restart_stale_apiserver(&self) -> Result<(), Error> {
        let p = self.proc("kube-apiserver");
        let Some(pid) = p.running_pid() else { return Ok(()) };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return Ok(()) };
        let running: Vec<String> =
            cmdline.split(|b| *b == 0).skip(1).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let want = self.apiserver_args();
        if running.iter().filter(|a| !a.is_empty()).eq(want.iter()) {
            return Ok(());
        }
        p.stop();
        self.start_apiserver_locked()
    }

    /// Stops every process of the control plane in `dir` and removes etcd's data (the PKI stays).
    pub fn down(dir: &Path) -> Result<(), Error> {
        if !dir.exists() {
            return Ok(());
        }
        let _lock = Lock::take(dir)?;
        let cp = ControlPlane { dir: dir.to_path_buf(), pki: Pki { dir: dir.join("pki") } };
        cp.stop_all();
        let data = dir.join("etcd-data");
        if data.exists() {
            std::fs::remove_dir_all(&data).map_err(|e| Error::io(&data, e))?;
        }
        Ok(())
    }

    fn proc(&self, name: &'static str) -> Proc {
        Proc { name, dir: self.dir.clone() }
    }

    fn stop_all(&self) {
        for name in ["kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"] {
            self.proc(name).stop();
        }
    }

    /// The apiserver's URL.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{APISERVER_PORT}")
    }

    /// The admin kubeconfig (`system:masters`), as kubeadm's `admin.conf`.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.conf")
    }

    /// The apiserver's log.
    pub fn apiserver_log(&self) -> PathBuf {
        self.proc("kube-apiserver").log()
    }

    /// The audit log: one JSON event per line for every request of a `system:nodes` or `system:bootstrappers`
    /// member (stages ResponseComplete and, for watches, ResponseStarted).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// The audit events of `user` so far.
    pub fn audit_events(&self, user: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.audit_log()).unwrap_or_default();
        // The log holds the whole run's nodes: only lines naming the user are parsed.
        let quoted = format!("\"{user}\"");
        text.lines()
            .filter(|l| l.contains(&quoted))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["user"]["username"] == user)
            .collect()
    }

    /// Whether the apiserver answers `/readyz`.
    pub fn apiserver_ready(&self) -> bool {
        let (Ok(ca), Ok(cert), Ok(key)) = (
            pki::read(&self.pki.path("ca.crt")),
            pki::read(&self.pki.path("admin.crt")),
            pki::read(&self.pki.path("admin.key")),
        ) else {
            return false;
        };
        https_get(APISERVER_PORT, "/readyz", &ca, &cert, &key).is_some_and(|(code, _)| code == 200)
    }

    /// Writes a kubeconfig for this cluster with a client certificate.
    pub fn write_kubeconfig(&self, path: &Path, user: &str, pair: &CertPair) -> Result<(), Error> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let auth =
            format!("    client-certificate-data: {}\n    client-key-data: {}\n", b64(&pair.cert), b64(&pair.key));
        self.write_kubeconfig_with(path, user, &auth)
    }

    /// Writes a kubeconfig for this cluster with a bearer token (a bootstrap kubeconfig, as kubeadm writes it).
    pub fn write_token_kubeconfig(&self, path: &Path, user: &str, token: &str) -> Result<(), Error> {
        self.write_kubeconfig_with(path, user, &format!("    token: {token}\n"))
    }

    fn write_kubeconfig_with(&self, path: &Path, user: &str, auth: &str) -> Result<(), Error> {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.pki.ca_pem()?);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\ncontexts:\n- name: {user}@e2e\n  context:\n    cluster: e2e\n    \
             user: {user}\ncurrent-context: {user}@e2e\nusers:\n- name: {user}\n  user:\n{auth}",
            self.server()
        );
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        std::fs::write(path, text).map_err(|e| Error::io(path, e))
    }

    /// Writes the kubeconfig of node `node` (`system:node:<node>` in `system:nodes`), as a kubelet has after its
    /// TLS bootstrap.
    pub fn write_node_kubeconfig(&self, path: &Path, node: &str) -> Result<(), Error> {
        let pair = self.pki.client(&format!("system:node:{node}"), Some("system:nodes"))?;
        self.write_kubeconfig(path, &format!("system:node:{node}"), &pair)
    }

    /// The next node name of the pool; after the last it starts again at the first (the user of a name removes
    /// a Node of an earlier turn, see the e2e harness's `TestEnv`).
    pub fn next_node_name(&self) -> Result<String, Error> {
        let _lock = Lock::take(&self.dir)?;
        let p = self.dir.join("node-counter");
        let n: u32 = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let next = n % NODE_POOL + 1;
        std::fs::write(&p, next.to_string()).map_err(|e| Error::io(&p, e))?;
        Ok(format!("e2e-node-{next}"))
    }

    /// Runs kubectl as the admin; stdout, or the error with stderr.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        let mut cmd = Command::new("kubectl");
        cmd.arg(format!("--kubeconfig={}", self.admin_kubeconfig().display()))
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| Error::Setup(format!("run kubectl: {e}")))?;
        if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
            w.write_all(text.as_bytes()).map_err(|e| Error::Setup(format!("kubectl stdin: {e}")))?;
        }
        let out = child.wait_with_output().map_err(|e| Error::Setup(format!("run kubectl: {e}")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Kubectl { args: args.join(" "), stderr: String::from_utf8_lossy(&out.stderr).into_owned() })
        }
    }

    /// Creates a bootstrap token as `kubeadm token create` does (a `bootstrap.kubernetes.io/token` Secret in
    /// `kube-system`, for authentication, in kubeadm's default group, valid an hour) and returns it.
    pub fn create_bootstrap_token(&self) -> Result<String, Error> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let pick =
            |n: usize| -> String { (0..n).map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char).collect() };
        let (id, secret) = (pick(6), pick(16));
        let expiration = (chrono::Utc::now() + chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
        let manifest = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bootstrap-token-{id}\n  namespace: kube-system\n\
             type: bootstrap.kubernetes.io/token\nstringData:\n  token-id: {id}\n  token-secret: {secret}\n  \
             expiration: {expiration}\n  usage-bootstrap-authentication: \"true\"\n  usage-bootstrap-signing: \"true\"\n  \
             auth-extra-groups: {BOOTSTRAP_GROUP}\n"
        );
        self.kubectl(&["create", "-f", "-"], Some(&manifest))?;
        Ok(format!("{id}.{secret}"))
    }

    /// Stops the apiserver for an outage that lasts until [`Outage::end`]. The control plane's lock is held
    /// meanwhile, so another test binary's [`ControlPlane::ensure`] waits for the outage to end instead of taking
    /// the stopped apiserver for a dead control plane and starting a new one.
    pub fn outage(&self) -> Result<Outage, Error> {
        let lock = Lock::take(&self.dir)?;
        self.proc("kube-apiserver").stop();
        Ok(Outage { cp: self.clone(), what: Stopped::Apiserver, ended: false, _lock: lock })
    }

    /// Restarts the apiserver with its history gone: while it is stopped, etcd is compacted up to its current
    /// revision, so the new apiserver's watch cache starts there and every watch resumed from an older
    /// resourceVersion gets 410 Gone, as after a long outage in a busy cluster.
    pub fn restart_apiserver_compacted(&self) -> Result<(), Error> {
        let outage = self.outage()?;
        let fail = |what: &str| Error::Setup(format!("compact etcd: {what}"));
        let (_, range) = procs::http_post(ETCD_CLIENT_PORT, "/v3/kv/range", r#"{"key":"AA=="}"#)
            .ok_or_else(|| fail("no answer to /v3/kv/range"))?;
        let v: serde_json::Value = serde_json::from_str(&range).map_err(|e| fail(&format!("{e}: {range}")))?;
        let rev = v["header"]["revision"].as_str().ok_or_else(|| fail(&format!("no revision in {range}")))?;
        let body = format!(r#"{{"revision":"{rev}","physical":true}}"#);
        match procs::http_post(ETCD_CLIENT_PORT, "/v3/kv/compaction", &body) {
            Some((200, _)) => {}
            other => return Err(fail(&format!("{other:?}"))),
        }
        outage.end()
    }

    /// Stops etcd under the running apiserver (which then answers errors or times out) until [`Outage::end`],
    /// which starts etcd again on the same data. The lock is held as for [`ControlPlane::outage`].
    pub fn etcd_outage(&self) -> Result<Outage, Error> {
        let lock = Lock::take(&self.dir)?;
        self.proc("etcd").stop();
        Ok(Outage { cp: self.clone(), what: Stopped::Etcd, ended: false, _lock: lock })
    }

    fn start_all(&self) -> Result<(), Error> {
        // Fail early, before anything starts, when a binary is missing.
        etcd_binary()?;
        apiserver_binary()?;
        controller_manager_binary()?;
        scheduler_binary()?;
        for name in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"] {
            let _ = std::fs::remove_file(self.proc(name).log());
        }
        let _ = std::fs::remove_file(self.audit_log());
        let _ = std::fs::remove_file(self.dir.join("node-counter"));
        let data = self.dir.join("etcd-data");
        if data.exists() {
            std::fs::remove_dir_all(&data).map_err(|e| Error::io(&data, e))?;
        }
        self.start_etcd_locked()?;

        self.write_support_files()?;
        self.start_apiserver_locked()?;
        self.kubectl(&["apply", "-f", "-"], Some(&kubeadm_rbac()))?;

        self.start_controller_manager_locked(None)?;
        self.start_scheduler_locked()
    }

    /// Starts the scheduler (as kubeadm's static pod runs it, on loopback, without leader election): pods without a
    /// `nodeName` are bound to Ready nodes that fit them, extended resources and resource claims included.
    fn start_scheduler_locked(&self) -> Result<(), Error> {
        let bin = scheduler_binary()?;
        let conf = self.dir.join("scheduler.conf");
        let args = vec![
            format!("--kubeconfig={}", conf.display()),
            format!("--authentication-kubeconfig={}", conf.display()),
            format!("--authorization-kubeconfig={}", conf.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={SCHEDULER_PORT}"),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ];
        let p = self.proc("kube-scheduler");
        p.start(&bin, &args, None)?;
        // Up once it serves (its certificate is its own: the log says it).
        let log = p.log();
        wait_until(&p, "serving", Duration::from_secs(60), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Serving securely"))
        })
    }

    /// Starts the controller-manager; `signing` sets `--cluster-signing-duration` (the lifetime of the
    /// certificates it signs; default a year).
    fn start_controller_manager_locked(&self, signing: Option<Duration>) -> Result<(), Error> {
        let kcm = controller_manager_binary()?;
        let cm_conf = self.dir.join("controller-manager.conf");
        let pki = |f: &str| self.pki.path(f).display().to_string();
        let mut args = vec![
            format!("--kubeconfig={}", cm_conf.display()),
            format!("--authentication-kubeconfig={}", cm_conf.display()),
            format!("--authorization-kubeconfig={}", cm_conf.display()),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            "--controllers=*,bootstrapsigner,tokencleaner".into(),
            "--use-service-account-credentials=true".into(),
            format!("--service-account-private-key-file={}", pki("sa.key")),
            format!("--root-ca-file={}", pki("ca.crt")),
            format!("--cluster-signing-cert-file={}", pki("ca.crt")),
            format!("--cluster-signing-key-file={}", pki("ca.key")),
            "--v=1".into(),
        ];
        if let Some(d) = signing {
            args.push(format!("--cluster-signing-duration={}s", d.as_secs()));
        }
        let p = self.proc("kube-controller-manager");
        p.start(&kcm, &args, None)?;
        // The service-account controller creating `default` in `default` says the controllers run.
        wait_until(&p, "running its controllers", Duration::from_secs(60), || {
            self.kubectl(&["get", "serviceaccount", "default", "-n", "default", "-o", "name"], None).is_ok()
                && self.kubectl(&["get", "configmap", "kube-root-ca.crt", "-n", "default", "-o", "name"], None).is_ok()
        })?;
        Ok(())
    }

    /// Restarts the controller-manager signing certificates for `lifetime` until the guard is dropped (then it
    /// is restarted with the default again).
    pub fn short_signing_duration(&self, lifetime: Duration) -> Result<SigningDuration, Error> {
        let p = self.proc("kube-controller-manager");
        p.stop();
        self.start_controller_manager_locked(Some(lifetime))?;
        Ok(SigningDuration { cp: self.clone() })
    }

    /// The kubeconfigs, the audit policy and the apiserver's hosts file.
    fn write_support_files(&self) -> Result<(), Error> {
        let admin =
            CertPair { cert: pki::read(&self.pki.path("admin.crt"))?, key: pki::read(&self.pki.path("admin.key"))? };
        self.write_kubeconfig(&self.admin_kubeconfig(), "kubernetes-admin", &admin)?;
        let kcm = CertPair {
            cert: pki::read(&self.pki.path("controller-manager.crt"))?,
            key: pki::read(&self.pki.path("controller-manager.key"))?,
        };
        self.write_kubeconfig(&self.dir.join("controller-manager.conf"), "system:kube-controller-manager", &kcm)?;
        let scheduler = CertPair {
            cert: pki::read(&self.pki.path("scheduler.crt"))?,
            key: pki::read(&self.pki.path("scheduler.key"))?,
        };
        self.write_kubeconfig(&self.dir.join("scheduler.conf"), "system:kube-scheduler", &scheduler)?;
        let policy = self.dir.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY).map_err(|e| Error::io(&policy, e))?;
        let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n");
        let names: Vec<String> = (1..=NODE_POOL).map(|i| format!("e2e-node-{i}")).collect();
        for chunk in names.chunks(8) {
            hosts.push_str(&format!("127.0.0.1 {}\n", chunk.join(" ")));
        }
        let h = self.dir.join("hosts");
        std::fs::write(&h, hosts).map_err(|e| Error::io(&h, e))
    }

    fn etcd_args(&self) -> Vec<String> {
        let data = self.dir.join("etcd-data");
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        vec![
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={}", url(ETCD_CLIENT_PORT)),
            format!("--advertise-client-urls={}", url(ETCD_CLIENT_PORT)),
            format!("--listen-peer-urls={}", url(ETCD_PEER_PORT)),
            format!("--initial-advertise-peer-urls={}", url(ETCD_PEER_PORT)),
            format!("--initial-cluster=default={}", url(ETCD_PEER_PORT)),
            "--name=default".into(),
            "--log-level=warn".into(),
        ]
    }

    fn start_etcd_locked(&self) -> Result<(), Error> {
        let p = self.proc("etcd");
        p.start(&etcd_binary()?, &self.etcd_args(), None)?;
        wait_until(&p, "healthy", Duration::from_secs(30), || http_status(ETCD_CLIENT_PORT, "/health") == Some(200))
    }

    fn apiserver_args(&self) -> Vec<String> {
        let pki = |f: &str| self.pki.path(f).display().to_string();
        vec![
            format!("--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={APISERVER_PORT}"),
            format!("--tls-cert-file={}", pki("apiserver.crt")),
            format!("--tls-private-key-file={}", pki("apiserver.key")),
            format!("--client-ca-file={}", pki("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", pki("sa.pub")),
            format!("--service-account-signing-key-file={}", pki("sa.key")),
            format!("--kubelet-client-certificate={}", pki("apiserver-kubelet-client.crt")),
            format!("--kubelet-client-key={}", pki("apiserver-kubelet-client.key")),
            "--kubelet-preferred-address-types=Hostname,InternalIP".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--service-cluster-ip-range=10.96.0.0/12".into(),
            "--enable-bootstrap-token-auth=true".into(),
            "--allow-privileged=true".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--audit-policy-file={}", self.dir.join("audit-policy.yaml").display()),
            format!("--audit-log-path={}", self.audit_log().display()),
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=500".into(),
            // Pods keep their `clusterTrustBundle` projections (dropped on create while the gate is off, beta and off
            // by default): the kubelet must then fail their mounts, which a test checks. Nothing else of the
            // apiserver reads this gate; the ClusterTrustBundle API itself stays off.
            "--feature-gates=ClusterTrustBundleProjection=true".into(),
        ]
    }

    fn start_apiserver_locked(&self) -> Result<(), Error> {
        let bin = apiserver_binary()?;
        let p = self.proc("kube-apiserver");
        p.start(&bin, &self.apiserver_args(), Some(&self.dir.join("hosts")))?;
        wait_until(&p, "ready", Duration::from_secs(90), || self.apiserver_ready())
    }
}

/// An apiserver outage (see [`ControlPlane::outage`]). Dropped without [`Outage::end`] (a test that failed
/// meanwhile), it starts the apiserver again, so the tests after it still have one.
pub struct Outage {
    cp: ControlPlane,
    what: Stopped,
    ended: bool,
    _lock: Lock,
}

impl Outage {
    /// Starts what was stopped again with the same flags and waits until the apiserver is ready.
    pub fn end(mut self) -> Result<(), Error> {
        self.ended = true;
        self.restart()
    }

    fn restart(&self) -> Result<(), Error> {
        match self.what {
            Stopped::Apiserver => self.cp.start_apiserver_locked(),
            Stopped::Etcd => {
                self.cp.start_etcd_locked()?;
                wait_until(&self.cp.proc("kube-apiserver"), "ready again", Duration::from_secs(90), || {
                    self.cp.apiserver_ready()
                })
            }
        }
    }
}

/// The controller-manager signing short-lived certificates; dropping it restores the default.
#[derive(Debug)]
pub struct SigningDuration {
    cp: ControlPlane,
}

impl Drop for SigningDuration {
    fn drop(&mut self) {
        self.cp.proc("kube-controller-manager").stop();
        let _ = self.cp.start_controller_manager_locked(None);
    }
}

/// What an [`Outage`] stopped.
#[derive(Clone, Copy, Debug)]
enum Stopped {
    Apiserver,
    Etcd,
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.restart();
        }
    }
}

/// What kubeadm creates for node TLS bootstrap (`kubeadm init phase bootstrap-token`): bootstrap tokens may
/// create CSRs and read nodes, their node-client CSRs are approved automatically, and nodes may renew their own
/// certificates.
fn kubeadm_rbac() -> String {
    let binding = |name: &str, role: &str, group: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {name}\nroleRef:\n  \
             apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {role}\nsubjects:\n- apiGroup: \
             rbac.authorization.k8s.io\n  kind: Group\n  name: {group}\n---\n"
        )
    };
    let mut yaml = String::new();
    yaml.push_str(&binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", BOOTSTRAP_GROUP));
    let nodeclient = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
    yaml.push_str(&binding("kubeadm:node-autoapprove-bootstrap", nodeclient, BOOTSTRAP_GROUP));
    let selfnode = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
    yaml.push_str(&binding("kubeadm:node-autoapprove-certificate-rotation", selfnode, "system:nodes"));
    yaml.push_str(&binding("kubeadm:get-nodes", "kubeadm:get-nodes", BOOTSTRAP_GROUP));
    yaml.push_str(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: kubeadm:get-nodes\nrules:\n\
         - apiGroups: [\"\"]\n  resources: [nodes]\n  verbs: [get]\n",
    );
    yaml
}

/// Audit what nodes and bootstrapping kubelets ask (so tests can check what a kubelet requested, as an operator
/// reads the audit log), nothing else.
const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [\"system:nodes\", \"system:bootstrappers\"]
- level: None
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeadm_rbac_is_five_objects() {
        let yaml = kubeadm_rbac();
        assert_eq!(yaml.matches("kind: ClusterRoleBinding").count(), 4);
        assert_eq!(yaml.matches("\nkind: ClusterRole\n").count(), 1);
        assert!(yaml.contains("  name: system:node-bootstrapper\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: system:bootstrappers:kubeadm:default-node-token\n"));
    }
}

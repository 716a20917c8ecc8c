//! A real image registry for the pull tests: Debian's `docker-registry` (distribution 2.8, installed by
//! `scripts/node-setup.sh`) on 127.0.0.1 behind TLS (a serving certificate of the test cluster's CA), with htpasswd
//! (bcrypt, made by `htpasswd -B`) authentication or none. containerd trusts it through
//! `<workdir>/certs.d/<host>/hosts.toml` (the CRI plugin's `config_path`, read at each pull), written here and
//! removed on drop with the process. Images are pushed with `ctr images push`, as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running registry.
pub struct Registry {
    /// `127.0.0.1:<port>`, the host part of its image names.
    pub host: String,
    child: Child,
    hosts_dir: PathBuf,
    /// Its log (stderr).
    pub log: PathBuf,
    _tmp: tempfile::TempDir,
}

/// The CRI plugin's `config_path` (`scripts/node-setup.sh`).
pub fn certs_dir() -> PathBuf {
    super::workdir().join("certs.d")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

use super::run_ok as run;

impl Registry {
    /// Starts a registry storing under `storage` (shared by registries of one test: a second one serves what was
    /// pushed to the first), with `user`/`password` required when given. `ca` signs its certificate (`pki`).
    pub async fn start(pki: &test_cluster::pki::Pki, storage: &Path, auth: Option<(&str, &str)>) -> Registry {
        let tmp = tempfile::Builder::new().prefix("rkubelet-e2e-registry-").tempdir().unwrap();
        let dir = tmp.path();
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let pair = pki.serving("rkubelet-test-registry", &["127.0.0.1"]).expect("registry certificate");
        std::fs::write(dir.join("tls.crt"), &pair.cert).unwrap();
        std::fs::write(dir.join("tls.key"), &pair.key).unwrap();
        let auth_section = match auth {
            Some((user, password)) => {
                let line = run(Command::new("htpasswd").args(["-Bbn", user, password]));
                std::fs::write(dir.join("htpasswd"), line.trim()).unwrap();
                format!("auth:\n  htpasswd:\n    realm: rkubelet-e2e\n    path: {}\n", dir.join("htpasswd").display())
            }
            None => String::new(),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {host}\n  tls:\n    certificate: {}\n    key: {}\n{auth_section}",
            storage.display(),
            dir.join("tls.crt").display(),
            dir.join("tls.key").display(),
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        // containerd trusts it from now on (hosts.toml is read at each pull).
        let hosts_dir = certs_dir().join(&host);
        std::fs::create_dir_all(&hosts_dir).unwrap();
        std::fs::write(
            hosts_dir.join("hosts.toml"),
            format!(
                "server = \"https://{host}\"\n\n[host.\"https://{host}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n  ca = \"{}\"\n",
                pki.path("ca.crt").display()
            ),
        )
        .unwrap();
        let log = dir.join("registry.log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("registry.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start docker-registry (scripts/node-setup.sh installs it)");
        let r = Registry { host, child, hosts_dir, log, _tmp: tmp };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the registry did not listen on {}: {}",
                r.host,
                std::fs::read_to_string(&r.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        r
    }

    /// Pushes the node's local image `local` as `<host>/<repo>` with `ctr images push`, as `user`.
    pub fn push(&self, local: &str, repo: &str, user: Option<(&str, &str)>) {
        let remote = format!("{}/{repo}", self.host);
        let sock = super::endpoint().trim_start_matches("unix://").to_string();
        let mut cmd = Command::new(super::runtime_program("ctr"));
        cmd.args(["-a", &sock, "-n", "k8s.io", "images", "push", "--hosts-dir"]).arg(certs_dir());
        if let Some((u, p)) = user {
            cmd.args(["--user", &format!("{u}:{p}")]);
        }
        run(cmd.args([&remote, local]));
    }

    /// The registry's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Registry {
    /// Stops the registry and removes the names of its images from the node: only the names (the content is shared
    /// with `localhost/busybox:1`, whose name CRI RemoveImage would remove too). Left behind, containerd would report
    /// such a name, first in its sort, as the image of later tests' containers.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
        super::remove_image_names(&format!("{}/", self.host));
    }
}

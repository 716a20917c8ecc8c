//! Machines for `kubeadm init` and `kubeadm join` on one host: each node is Debian's systemd as PID 1 of its own
//! namespaces (`scripts/lib/systemd-ns.sh`) in a network namespace of its own with an address on a bridge the test
//! makes, with its own `/etc/kubernetes`, `/var/lib/kubelet`, pod logs and host name, its own containerd (the lane's
//! programs, systemd cgroup driver, its own CNI range), and rkubelet installed as `kubelet.service` from the
//! project's unit and kubeadm drop-in. Everything is removed when dropped, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::runtime_program;

/// The bridge the nodes' network namespaces hang on, and its address (the host's side).
pub const BRIDGE: &str = "rkadm0";
const BRIDGE_ADDR: &str = "10.213.0.1";

/// The folders a node has of its own (bound from its state folder).
const PRIVATE: &str = "/etc/kubernetes /var/lib/kubelet /var/log/pods /var/log/containers /etc/systemd/system \
                       /var/lib/rkadm-etcd";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/systemd-ns.sh")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

use super::run_ok as ok;

/// One node: its number (1, 2, ...) gives its namespace `rkadm<N>`, address `10.213.0.1<N>`, cgroup name,
/// CNI range `10.214.<N>.0/24` and state folder `/tmp/rkadm-e2e-<N>`.
pub struct KubeadmNode {
    pub n: u8,
    pub name: String,
    pub dir: PathBuf,
    pub addr: String,
    pub socket: String,
}

impl KubeadmNode {
    fn netns(n: u8) -> String {
        format!("rkadm{n}")
    }

    fn state(n: u8) -> PathBuf {
        PathBuf::from(format!("/tmp/rkadm-e2e-{n}"))
    }

    /// The environment systemd-ns.sh reads for this node.
    fn env(n: u8, name: &str, hosts: &str) -> Vec<(&'static str, String)> {
        vec![
            ("RK_SYSTEMD_NETNS", Self::netns(n)),
            ("RK_SYSTEMD_PRIVATE", PRIVATE.into()),
            ("RK_SYSTEMD_HOSTNAME", name.into()),
            ("RK_SYSTEMD_HOSTS", hosts.into()),
            ("RK_SYSTEMD_CGROUP", format!("rkadm{n}")),
            ("RK_SYSTEMD_CNI_NETWORK", format!("rkadm{n}")),
            ("RK_SYSTEMD_CNI_BRIDGE", "rkadmcni0".into()),
            ("RK_SYSTEMD_CNI_SUBNET", format!("10.214.{n}.0/24")),
            ("RK_SYSTEMD_SANDBOX_IMAGE", "registry.k8s.io/pause:3.10.1".into()),
        ]
    }

    fn ns(n: u8, args: &[&str]) -> Command {
        let mut c = Command::new("bash");
        c.arg(script()).args(args).envs(Self::env(n, "", ""));
        c
    }

    /// Stops what a failed run of node `n` left (systemd and all in it, its namespace, its state).
    pub fn remove_leftovers(n: u8) {
        let dir = Self::state(n);
        if dir.exists() {
            let _ = run(&mut Self::ns(n, &["stop", dir.to_str().unwrap()]));
        }
        let _ = run(Command::new("ip").args(["netns", "delete", &Self::netns(n)]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Makes the bridge (once) and node `n`'s network namespace on it, then starts its systemd and containerd,
    /// imports `images`, and installs rkubelet (`kubelet`, a link in `bin`) as `kubelet.service`.
    pub fn start(n: u8, name: &str, hosts: &str, bin: &Path, images: &[PathBuf]) -> KubeadmNode {
        Self::remove_leftovers(n);
        if !run(Command::new("ip").args(["link", "show", BRIDGE])).status.success() {
            ok(Command::new("ip").args(["link", "add", BRIDGE, "type", "bridge"]));
            ok(Command::new("ip").args(["addr", "add", &format!("{BRIDGE_ADDR}/24"), "dev", BRIDGE]));
            ok(Command::new("ip").args(["link", "set", BRIDGE, "up"]));
        }
        let netns = Self::netns(n);
        let addr = format!("10.213.0.1{n}");
        let host_end = format!("rkadm{n}-h");
        ok(Command::new("ip").args(["netns", "add", &netns]));
        ok(Command::new("ip")
            .args(["link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &netns]));
        ok(Command::new("ip").args(["link", "set", &host_end, "master", BRIDGE, "up"]));
        let inside = |args: &[&str]| ok(Command::new("ip").args(["-n", &netns]).args(args));
        inside(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
        inside(&["link", "set", "eth0", "up"]);
        inside(&["link", "set", "lo", "up"]);
        inside(&["route", "add", "default", "via", BRIDGE_ADDR]);
        ok(Command::new("ip").args(["netns", "exec", &netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"]));

        let dir = Self::state(n);
        std::fs::create_dir_all(dir.join("units/kubelet.service.d")).unwrap();
        let d = dir.to_str().unwrap();
        let start = |args: &[&str]| {
            let mut c = Command::new("bash");
            c.arg(script()).args(args).envs(Self::env(n, name, hosts));
            ok(&mut c)
        };
        start(&["start", d]);
        let socket = start(&["containerd", d]).lines().last().unwrap_or_default().to_string();
        for tar in images {
            ok(Command::new(runtime_program("ctr")).args(["-a", &socket, "-n", "k8s.io", "images", "import"]).arg(tar));
        }
        // rkubelet as kubeadm expects the kubelet: kubelet.service with kubeadm's drop-in, the project's files.
        let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let kubelet = bin.join("kubelet");
        let unit = |from: &str, to: &str| {
            let text = std::fs::read_to_string(project.join(from)).unwrap();
            std::fs::write(dir.join(to), text.replace("/usr/local/bin/rkubelet", kubelet.to_str().unwrap())).unwrap();
        };
        unit("systemd/rkubelet.service", "units/kubelet.service");
        unit("systemd/rkubelet.service.d/10-kubeadm.conf", "units/kubelet.service.d/10-kubeadm.conf");
        // The test's own drop-in: rkubelet's output into a file (there is no journald in the namespace).
        std::fs::write(
            dir.join("units/kubelet.service.d/20-test.conf"),
            format!("[Service]\nStandardOutput=append:{d}/kubelet.log\nStandardError=append:{d}/kubelet.log\n"),
        )
        .unwrap();
        let node = KubeadmNode { n, name: name.into(), dir, addr, socket };
        node.exec_ok(&["systemctl", "daemon-reload"]);
        node
    }

    /// Runs a command inside the node (its namespaces, PATH with `bin` first); its output.
    pub fn exec(&self, bin: &Path, args: &[&str]) -> Output {
        let mut c = Self::ns(self.n, &["exec", self.dir.to_str().unwrap(), "env"]);
        c.arg(format!("PATH={}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display())).args(args);
        run(&mut c)
    }

    /// Runs a command inside the node; its stdout, failing the test on a non-zero exit.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let out = self.exec(Path::new("/nonexistent"), args);
        assert!(out.status.success(), "{args:?} on {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A file of the node's own filesystem (`/etc/kubernetes/...`), as the host sees it.
    pub fn path(&self, inside: &str) -> PathBuf {
        self.dir.join("root").join(inside.trim_start_matches('/'))
    }

    /// The node's rkubelet log.
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default()
    }

    /// `crictl` against the node's containerd.
    pub fn crictl(&self, args: &[&str]) -> String {
        let crictl = test_cluster::unpacked_binary("CRICTL", "tools/bin/crictl").expect("crictl from ../shared");
        let ep = format!("unix://{}", self.socket);
        ok(Command::new(crictl).args(["--runtime-endpoint", &ep, "--image-endpoint", &ep]).args(args))
    }
}

impl Drop for KubeadmNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("rkubelet log of {} (last lines):\n{}", self.name, super::tail(&self.kubelet_log(), 40));
        }
        Self::remove_leftovers(self.n);
    }
}

/// The bridge, removed when dropped (after the nodes).
pub struct Bridge;

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["link", "delete", BRIDGE]));
    }
}

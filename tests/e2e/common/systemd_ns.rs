//! Debian's systemd as PID 1 of its own namespaces (`scripts/lib/systemd-ns.sh`), for the tests of the systemd cgroup
//! driver and of graceful node shutdown (logind on the system bus inside).

use std::path::{Path, PathBuf};

use super::{Node, endpoint, runtime_program};

/// Debian's systemd as PID 1 of its own namespaces with a containerd inside on the systemd cgroup driver
/// (`scripts/lib/systemd-ns.sh`), stopped with everything in it when dropped.
pub struct SystemdNs {
    /// The namespace's state folder.
    dir: PathBuf,
    script: PathBuf,
    socket: String,
}

impl SystemdNs {
    /// Starts systemd and its containerd, with the node's images.
    pub fn start() -> SystemdNs {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lib/systemd-ns.sh");
        let dir = PathBuf::from("/tmp/rksd-e2e");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("bash").arg(&script).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "systemd-ns.sh {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let d = dir.to_str().unwrap();
        let _ = std::process::Command::new("bash").arg(&script).args(["stop", d]).output();
        run(&["start", d]);
        let socket = run(&["containerd", d]).lines().last().unwrap_or_default().to_string();
        // The images of the node's containerd (scripts/node-setup.sh), imported into this one.
        let node_dir = endpoint().trim_start_matches("unix://").rsplit_once('/').unwrap().0.to_string();
        for image in ["pause", "busybox"] {
            let tar = format!("{node_dir}/images/{image}.oci.tar");
            let st = std::process::Command::new(runtime_program("ctr"))
                .args(["-a", &socket, "-n", "k8s.io", "images", "import", &tar])
                .output()
                .unwrap();
            assert!(st.status.success(), "import {tar}: {}", String::from_utf8_lossy(&st.stderr));
        }
        SystemdNs { dir, script, socket }
    }

    /// Starts the system bus and systemd-logind inside (`systemd-ns.sh logind`).
    pub fn logind(&self) {
        let out = std::process::Command::new("bash").arg(&self.script).arg("logind").arg(&self.dir).output().unwrap();
        assert!(out.status.success(), "systemd-ns.sh logind: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Runs a command inside; its stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("bash")
            .arg(&self.script)
            .arg("exec")
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A program that starts its arguments inside (the node's wrapper).
    pub fn wrapper(&self) -> PathBuf {
        let w = self.dir.with_extension("wrapper.sh");
        std::fs::write(
            &w,
            format!("#!/bin/sh\nexec bash {} exec {} \"$@\"\n", self.script.display(), self.dir.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
        w
    }

    /// A unit's `ActiveState`.
    pub fn unit_state(&self, unit: &str) -> String {
        self.exec(&["systemctl", "show", "-p", "ActiveState", "--value", unit]).trim().to_string()
    }

    /// The node's config edit: this containerd, the systemd driver, then `extra`.
    pub fn node_config(&self, extra: &str) -> impl FnOnce(&Node) -> String + use<> {
        let (socket, extra) = (self.socket.clone(), extra.to_string());
        move |n: &Node| {
            std::fs::read_to_string(&n.config).unwrap().replace(
                &format!("containerRuntimeEndpoint: {}\n", endpoint()),
                &format!("containerRuntimeEndpoint: unix://{socket}\n"),
            ) + "cgroupDriver: systemd\n"
                + &extra
        }
    }
}

impl Drop for SystemdNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash").arg(&self.script).arg("stop").arg(&self.dir).output();
        let _ = std::fs::remove_file(self.dir.with_extension("wrapper.sh"));
    }
}

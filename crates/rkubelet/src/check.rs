//! `rkubelet check`: a preflight of the node before rkubelet runs (beyond upstream; kubeadm's preflight covers a
//! part of it). It loads the configuration as the kubelet would (flags, drop-ins, validation), then checks the
//! container runtime (its `Version` and `RuntimeConfig`, the cgroup driver it uses against the configuration's),
//! the cgroup version and the kernel's controllers, swap against `failSwapOn`, the certificates rkubelet would use
//! and their expiry, and that its ports are free. Each line says `ok`, `warn` or `FAIL`, what was found and, when
//! not ok, what to do. The exit status is 1 when anything failed.
//!
//! Called once by `main` for `rkubelet check [flags]`; it starts nothing and changes nothing.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kubelet_config::kubelet_config::KubeletConfiguration;
use kubelet_cri::{RemoteRuntime, RuntimeService};

use crate::cli::Cli;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    pub check: &'static str,
    pub detail: String,
    /// What to do, when not ok.
    pub fix: String,
}

fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
    Finding { verdict: Verdict::Ok, check, detail: detail.into(), fix: String::new() }
}

fn bad(verdict: Verdict, check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding { verdict, check, detail: detail.into(), fix: fix.into() }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        write!(f, "[{tag}] {}: {}", self.check, self.detail)?;
        if !self.fix.is_empty() {
            write!(f, "\n       fix: {}", self.fix)?;
        }
        Ok(())
    }
}

/// The cgroup controllers the kubelet needs, and whether the kernel has each enabled.
fn controllers(cgroup_root: &Path, proc: &Path) -> Vec<(&'static str, bool)> {
    let wanted = ["cpu", "cpuset", "memory", "pids"];
    let enabled: Vec<String> = match std::fs::read_to_string(cgroup_root.join("cgroup.controllers")) {
        Ok(v2) => v2.split_whitespace().map(String::from).collect(),
        Err(_) => std::fs::read_to_string(proc.join("cgroups"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(3) == Some(&"1")).then(|| f[0].to_string())
            })
            .collect(),
    };
    wanted.iter().map(|c| (*c, enabled.iter().any(|e| e == c))).collect()
}

/// The host checks: cgroups and swap.
pub fn host_findings(cfg: &KubeletConfiguration, cgroup_root: &Path, proc: &Path) -> Vec<Finding> {
    let mut out = vec![];
    let v2 = cgroup_root.join("cgroup.controllers").exists();
    if v2 {
        out.push(ok("cgroup version", "v2 (unified)"));
    } else if cfg.fail_cgroup_v1.unwrap_or(false) {
        // rkubelet does not refuse cgroup v1 yet; the upstream kubelet would, with this message.
        out.push(bad(
            Verdict::Warn,
            "cgroup version",
            "v1, and failCgroupV1 is true: the upstream kubelet is configured to not run on a host using cgroup v1 \
             (rkubelet runs)",
            "boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1), or set failCgroupV1: false",
        ));
    } else {
        out.push(bad(
            Verdict::Warn,
            "cgroup version",
            "v1: cgroup v1 support is in maintenance mode",
            "move the host to cgroup v2 (systemd.unified_cgroup_hierarchy=1) when you can",
        ));
    }
    let missing: Vec<&str> = controllers(cgroup_root, proc).into_iter().filter(|(_, on)| !on).map(|(c, _)| c).collect();
    if missing.is_empty() {
        out.push(ok("cgroup controllers", "cpu, cpuset, memory and pids enabled"));
    } else {
        out.push(bad(
            Verdict::Fail,
            "cgroup controllers",
            format!("not enabled: {}", missing.join(", ")),
            format!("enable them on the kernel command line (cgroup_enable={})", missing.join(",")),
        ));
    }
    match kubelet_runtime::swap::is_swap_on(proc) {
        Ok(true) if cfg.fail_swap_on.unwrap_or(true) => out.push(bad(
            Verdict::Fail,
            "swap",
            "swap is on and failSwapOn is true: running with swap on is not supported",
            "turn swap off (swapoff -a, and remove it from /etc/fstab), or set failSwapOn: false and \
             memorySwap.swapBehavior",
        )),
        Ok(true) => out.push(ok("swap", format!("on; swapBehavior {:?}", cfg.memory_swap.swap_behavior))),
        Ok(false) => out.push(ok("swap", "off")),
        Err(e) => out.push(bad(Verdict::Warn, "swap", format!("cannot tell: {e}"), "check /proc/swaps")),
    }
    out
}

/// A certificate file's expiry against `now`: fails when expired or unreadable, warns within 30 days.
pub fn certificate_finding(what: &'static str, path: &Path, now: SystemTime) -> Finding {
    let pem = match std::fs::read(path) {
        Ok(p) => p,
        Err(e) => {
            return bad(Verdict::Fail, what, format!("{}: {e}", path.display()), "create it, or fix the path");
        }
    };
    let Ok((_, p)) = x509_parser::pem::parse_x509_pem(&pem) else {
        return bad(Verdict::Fail, what, format!("{}: not a PEM certificate", path.display()), "replace the file");
    };
    let Ok(cert) = p.parse_x509() else {
        return bad(Verdict::Fail, what, format!("{}: not an X.509 certificate", path.display()), "replace the file");
    };
    let not_after = cert.validity().not_after.timestamp();
    let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let days = (not_after - now) / 86_400;
    let subject = cert.subject().to_string();
    if not_after <= now {
        bad(
            Verdict::Fail,
            what,
            format!("{} ({subject}) expired {} days ago", path.display(), -days),
            "renew it (kubeadm certs renew, or remove it to let rkubelet bootstrap or self-sign a new one)",
        )
    } else if days < 30 {
        bad(
            Verdict::Warn,
            what,
            format!("{} ({subject}) expires in {days} days", path.display()),
            "renew it soon, or turn on rotateCertificates/serverTLSBootstrap",
        )
    } else {
        ok(what, format!("{} ({subject}) valid for {days} more days", path.display()))
    }
}

/// Whether `addr` can be bound now.
pub fn port_finding(what: &'static str, field: &str, host: &str, port: i32) -> Finding {
    if port <= 0 {
        return ok(what, format!("{field} off"));
    }
    let addr = format!("{}:{port}", if host.contains(':') { format!("[{host}]") } else { host.to_string() });
    match std::net::TcpListener::bind(&addr) {
        Ok(_) => ok(what, format!("{addr} free")),
        Err(e) => bad(
            Verdict::Fail,
            what,
            format!("{addr} cannot be bound: {e}"),
            format!("stop what listens there (another kubelet? `ss -ltnp 'sport = :{port}'`) or change {field}"),
        ),
    }
}

/// The runtime: `Version`, then `RuntimeConfig`'s cgroup driver against the configuration's.
async fn runtime_findings(cfg: &KubeletConfiguration) -> Vec<Finding> {
    let endpoint = &cfg.container_runtime_endpoint;
    let fix = "start the container runtime (systemctl start containerd), or set containerRuntimeEndpoint \
               (--container-runtime-endpoint) to its socket";
    let runtime = match RemoteRuntime::new(endpoint, Duration::from_secs(5)) {
        Ok(r) => r,
        Err(e) => return vec![bad(Verdict::Fail, "container runtime", format!("{endpoint}: {e}"), fix)],
    };
    let mut out = vec![];
    match runtime.version().await {
        Ok(v) => out.push(ok(
            "container runtime",
            format!("{} {} (CRI {}) at {endpoint}", v.runtime_name, v.runtime_version, v.runtime_api_version),
        )),
        Err(e) => return vec![bad(Verdict::Fail, "container runtime", format!("{endpoint}: {e}"), fix)],
    }
    match runtime.runtime_config().await {
        Ok(resp) => {
            let theirs = match resp.linux.map(|l| l.cgroup_driver) {
                Some(d) if d == kubelet_cri::api::CgroupDriver::Systemd as i32 => "systemd",
                _ => "cgroupfs",
            };
            if theirs == cfg.cgroup_driver {
                out.push(ok("cgroup driver", format!("{theirs}, as the runtime uses")));
            } else {
                out.push(bad(
                    Verdict::Warn,
                    "cgroup driver",
                    format!(
                        "the runtime uses {theirs}, the configuration says {}: rkubelet will use the runtime's",
                        cfg.cgroup_driver
                    ),
                    format!("set cgroupDriver: {theirs} to say what happens"),
                ));
            }
        }
        Err(e) if e.code() == "Unimplemented" => out.push(bad(
            Verdict::Warn,
            "cgroup driver",
            format!("the runtime does not answer RuntimeConfig; cgroupDriver {} is used", cfg.cgroup_driver),
            "make sure it is the runtime's own (containerd: SystemdCgroup in its runc options); upgrade to \
             containerd 2",
        )),
        Err(e) => out.push(bad(Verdict::Fail, "cgroup driver", format!("RuntimeConfig: {e}"), fix)),
    }
    out
}

/// The serving certificate rkubelet would use, and the client certificate of the kubeconfig when it names a file.
fn certificate_findings(cfg: &KubeletConfiguration, cli: &Cli, now: SystemTime) -> Vec<Finding> {
    let mut out = vec![];
    let serving = if cfg.tls_cert_file.is_empty() {
        [cli.cert_dir.join("kubelet-server-current.pem"), cli.cert_dir.join("kubelet.crt")]
            .into_iter()
            .find(|p| p.exists())
    } else {
        Some(PathBuf::from(&cfg.tls_cert_file))
    };
    match serving {
        Some(p) => out.push(certificate_finding("serving certificate", &p, now)),
        None => out.push(ok("serving certificate", "none yet: rkubelet makes one at start")),
    }
    let client = cli.kubeconfig.as_ref().and_then(|k| {
        let text = std::fs::read_to_string(k).ok()?;
        let line = text.lines().find_map(|l| l.trim().strip_prefix("client-certificate:"))?;
        let p = PathBuf::from(line.trim().trim_matches('"'));
        Some(if p.is_absolute() { p } else { k.parent().unwrap_or(Path::new("/")).join(p) })
    });
    if let Some(p) = client {
        out.push(certificate_finding("client certificate", &p, now));
    }
    out
}

/// Runs every check; the report's text and whether anything failed.
pub async fn run(cli: &Cli, cfg: Result<KubeletConfiguration, String>, now: SystemTime) -> (String, bool) {
    let mut findings = vec![];
    match cfg {
        Err(e) => findings.push(bad(Verdict::Fail, "configuration", e, "correct the field named above")),
        Ok(cfg) => {
            findings.push(ok("configuration", "loaded and valid"));
            findings.extend(runtime_findings(&cfg).await);
            findings.extend(host_findings(&cfg, Path::new("/sys/fs/cgroup"), Path::new("/proc")));
            findings.extend(certificate_findings(&cfg, cli, now));
            findings.push(port_finding("kubelet API port", "port (--port)", &cfg.address, cfg.port));
            let healthz = cfg.healthz_port.unwrap_or(0);
            findings.push(port_finding("healthz port", "healthzPort", &cfg.healthz_bind_address, healthz));
            findings.push(port_finding("read-only port", "readOnlyPort", &cfg.address, cfg.read_only_port));
        }
    }
    let failed = findings.iter().any(|f| f.verdict == Verdict::Fail);
    let mut text: String = findings.iter().map(|f| format!("{f}\n")).collect();
    text.push_str(if failed { "rkubelet check: FAILED\n" } else { "rkubelet check: ok\n" });
    (text, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_checks_name_what_is_missing_and_what_to_do() {
        let t = tempfile::tempdir().unwrap();
        let (cg, proc) = (t.path().join("cg"), t.path().join("proc"));
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(cg.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        std::fs::write(proc.join("swaps"), "Filename Type Size Used Priority\n/swapfile file 1024 0 -2\n").unwrap();
        let mut cfg = KubeletConfiguration::default();
        cfg.set_defaults();
        let f = host_findings(&cfg, &cg, &proc);
        assert_eq!(f[0], ok("cgroup version", "v2 (unified)"));
        assert_eq!((f[1].verdict, f[1].detail.as_str()), (Verdict::Fail, "not enabled: cpuset"));
        assert!(f[1].fix.contains("cgroup_enable=cpuset"), "{}", f[1]);
        assert_eq!(f[2].verdict, Verdict::Fail, "swap on with failSwapOn: {}", f[2]);
        cfg.fail_swap_on = Some(false);
        assert_eq!(host_findings(&cfg, &cg, &proc)[2].verdict, Verdict::Ok);
    }

    #[test]
    fn certificates_fail_when_expired_and_warn_near_their_end() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("c.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["node".into()]).unwrap();
        std::fs::write(&path, cert.cert.pem()).unwrap();
        let parsed = x509_parser::pem::parse_x509_pem(cert.cert.pem().as_bytes()).unwrap().1;
        let not_after = parsed.parse_x509().unwrap().validity().not_after.timestamp() as u64;
        let at = |secs: u64| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(certificate_finding("serving certificate", &path, at(not_after - 90 * 86_400)).verdict, Verdict::Ok);
        let soon = certificate_finding("serving certificate", &path, at(not_after - 10 * 86_400));
        assert_eq!(soon.verdict, Verdict::Warn, "{soon}");
        let expired = certificate_finding("serving certificate", &path, at(not_after + 86_400));
        assert_eq!(expired.verdict, Verdict::Fail, "{expired}");
        assert!(expired.detail.contains("expired 1 days ago"), "{expired}");
        assert_eq!(certificate_finding("x", &t.path().join("none"), at(0)).verdict, Verdict::Fail);
    }

    #[test]
    fn a_port_in_use_is_named_with_its_field() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port() as i32;
        let f = port_finding("kubelet API port", "port (--port)", "127.0.0.1", port);
        assert_eq!(f.verdict, Verdict::Fail, "{f}");
        assert!(f.fix.contains("change port (--port)"), "{f}");
        drop(l);
        assert_eq!(port_finding("kubelet API port", "port (--port)", "127.0.0.1", port).verdict, Verdict::Ok);
        assert_eq!(port_finding("read-only port", "readOnlyPort", "0.0.0.0", 0).verdict, Verdict::Ok);
    }
}

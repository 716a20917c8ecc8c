//! The control plane's processes: started detached (their own session, output to a log file, a pid file beside
//! it) so that one control plane outlives the test binary that started it and serves the whole end-to-end run;
//! stopped by pid, after checking that the pid still runs the same program.

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::Error;

/// One program of the control plane.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Short name (`etcd`, `kube-apiserver`, ...): names the log and pid files.
    pub name: &'static str,
    /// The state directory.
    pub dir: PathBuf,
}

impl Proc {
    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join(format!("{}.pid", self.name))
    }

    /// The pid recorded at start, if that very process still runs: the pid file holds the pid and the process's
    /// start time (`/proc/<pid>/stat` field 22), so a pid reused by another program (a system etcd, after a reboot)
    /// is never taken for ours. A zombie does not count.
    pub fn running_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.pid_file()).ok()?;
        let mut fields = text.split_whitespace();
        let pid: i32 = fields.next()?.parse().ok()?;
        let started: u64 = fields.next()?.parse().ok()?;
        let (state, start) = stat(pid)?;
        (start == started && state != 'Z' && state != 'X').then_some(pid)
    }

    /// Starts `program args` detached. With `hosts`, the program gets its own mount namespace in which that
    /// file is bind-mounted over `/etc/hosts` (how the apiserver resolves the test nodes' names to 127.0.0.1
    /// without touching the machine's own file).
    pub fn start(&self, program: &Path, args: &[String], hosts: Option<&Path>) -> Result<i32, Error> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .map_err(|e| Error::io(&self.log(), e))?;
        let err = log.try_clone().map_err(|e| Error::io(&self.log(), e))?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::from(log)).stderr(Stdio::from(err));
        // Made before the fork: nothing may allocate between fork and exec.
        let bind = match hosts {
            Some(h) => Some((
                CString::new(h.as_os_str().as_encoded_bytes()).map_err(|_| Error::Setup("hosts path".into()))?,
                CString::new("/etc/hosts").unwrap_or_default(),
                CString::new("/").unwrap_or_default(),
            )),
            None => None,
        };
        // SAFETY: the closure runs between fork and exec and only makes async-signal-safe system calls on
        // memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((src, dst, root)) = &bind {
                    if libc::unshare(libc::CLONE_NEWNS) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let none = std::ptr::null();
                    if libc::mount(none, root.as_ptr(), none, libc::MS_REC | libc::MS_PRIVATE, none as _) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::mount(src.as_ptr(), dst.as_ptr(), none, libc::MS_BIND, none as _) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| Error::Setup(format!("start {}: {e}", program.display())))?;
        let pid = child.id() as i32;
        // Not waited for: the process outlives this one (it is reaped by init when we are gone).
        std::mem::forget(child);
        let (_, started) = stat(pid).ok_or_else(|| Error::Setup(format!("{} exited at once", self.name)))?;
        std::fs::write(self.pid_file(), format!("{pid} {started}\n")).map_err(|e| Error::io(&self.pid_file(), e))?;
        Ok(pid)
    }

    /// Stops the program (SIGTERM, SIGKILL after 10 s) and waits until it is gone.
    pub fn stop(&self) {
        let Some(pid) = self.running_pid() else {
            let _ = std::fs::remove_file(self.pid_file());
            return;
        };
        let p = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGTERM);
        for i in 0..200 {
            // Reap it if it is our child; otherwise init does.
            let _ = nix::sys::wait::waitpid(p, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
            if self.running_pid().is_none() {
                break;
            }
            if i == 100 {
                let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(self.pid_file());
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// The state letter and start time (clock ticks since boot) of a process, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ...`: the command may hold spaces and parentheses, so fields count from its last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 22 of the whole line is the 20th after the command.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// Polls `ready` every 200 ms until it holds, the process dies or `timeout` passes.
#[allow(clippy::disallowed_methods)] // blocking test tooling, never on a paused clock
pub fn wait_until(proc: &Proc, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<(), Error> {
    let start = std::time::Instant::now();
    loop {
        if ready() {
            return Ok(());
        }
        if proc.running_pid().is_none() {
            return Err(Error::Setup(format!(
                "{} exited before {what}; its log ({}):\n{}",
                proc.name,
                proc.log().display(),
                proc.log_tail(30)
            )));
        }
        if start.elapsed() > timeout {
            return Err(Error::Setup(format!(
                "{} not {what} after {timeout:?}; its log ({}):\n{}",
                proc.name,
                proc.log().display(),
                proc.log_tail(30)
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A plain HTTP GET on loopback: the status code, if the server answered.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

/// A plain HTTP POST of a JSON body on loopback: the status code and body, if the server answered.
pub fn http_post(port: u16, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// An HTTPS GET on loopback with a client certificate, verifying the server against `ca_pem`: status and body.
pub fn https_get(port: u16, path: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Option<(u16, String)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.ok()?).ok()?;
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>().ok()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .ok()?;
    let conn = rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("127.0.0.1").ok()?).ok()?;
    let tcp = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(tls, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    // A server that closes without close_notify still gave us the whole answer.
    let _ = tls.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

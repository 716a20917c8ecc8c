//! A minimal D-Bus client for systemd's manager API (what upstream reaches through go-systemd's `dbus` package) and
//! logind's (godbus in `pkg/kubelet/nodeshutdown/systemd`): method calls with the few argument types
//! `StartTransientUnit`, `SetUnitProperties`, `StopUnit`, `KillUnit`, `Inhibit` and `Properties.Get` take, over
//! systemd's private socket (`/run/systemd/private`, peer to peer, no bus daemon) or the system bus; on the system
//! bus, unix file descriptors are negotiated (logind's inhibitor lock is one) and signals can be waited for
//! (`PrepareForShutdown`).
//!
//! Wire format (D-Bus specification, "Message Protocol"): little-endian messages, a fixed 12-byte header, the
//! header fields `a(yv)`, padding to 8, the body; every value aligned to its own size, structs to 8. Only what
//! the kubelet sends is encoded; replies are read far enough to get the error name and message or the returned
//! object path. Authentication is EXTERNAL with the process's uid. One call at a time per connection; the
//! caller serializes (the cgroup manager owns the connection behind a mutex) and reconnects after an error.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long a reply is waited for: systemd answers a local call in milliseconds; a hung one must not hold a pod
/// worker for good.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    /// The socket could not be reached or broke.
    #[error("d-bus {path}: {source}")]
    Io {
        /// The socket.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Authentication was refused.
    #[error("d-bus {path}: authentication refused: {line}")]
    Auth {
        /// The socket.
        path: String,
        /// What the peer said.
        line: String,
    },
    /// The peer answered with an error.
    #[error("{name}: {message}")]
    Remote {
        /// The D-Bus error name (`org.freedesktop.systemd1.UnitExists`).
        name: String,
        /// Its message.
        message: String,
    },
    /// A reply could not be parsed.
    #[error("d-bus: malformed reply: {0}")]
    Protocol(String),
}

/// A value of a property (`(sv)`).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `b`.
    Bool(bool),
    /// `t`.
    U64(u64),
    /// `s`.
    Str(String),
    /// `as`.
    Strs(Vec<String>),
}

impl Value {
    fn signature(&self) -> &'static str {
        match self {
            Value::Bool(_) => "b",
            Value::U64(_) => "t",
            Value::Str(_) => "s",
            Value::Strs(_) => "as",
        }
    }
}

/// An argument of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `s`.
    Str(String),
    /// `b`.
    Bool(bool),
    /// `a(sv)`: unit properties.
    Props(Vec<(String, Value)>),
    /// `a(sa(sv))`: auxiliary units (always empty here).
    NoAux,
    /// `i`.
    I32(i32),
}

impl Arg {
    fn signature(&self) -> &'static str {
        match self {
            Arg::Str(_) => "s",
            Arg::Bool(_) => "b",
            Arg::Props(_) => "a(sv)",
            Arg::NoAux => "a(sa(sv))",
            Arg::I32(_) => "i",
        }
    }
}

/// Little-endian marshalling with D-Bus alignment (offsets from the start of the message or body, both 8-aligned).
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, n: usize) {
        while !self.buf.len().is_multiple_of(n) {
            self.buf.push(0);
        }
    }
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.pad(8);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    fn sig(&mut self, s: &str) {
        self.u8(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    /// An array whose elements align to `elem_align`; `f` writes the elements.
    fn array(&mut self, elem_align: usize, f: impl FnOnce(&mut Writer)) {
        self.pad(4);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.pad(elem_align);
        let start = self.buf.len();
        f(self);
        let len = (self.buf.len() - start) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    fn value(&mut self, v: &Value) {
        self.sig(v.signature());
        match v {
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::U64(n) => self.u64(*n),
            Value::Str(s) => self.str(s),
            Value::Strs(v) => self.array(4, |w| v.iter().for_each(|s| w.str(s))),
        }
    }
    fn arg(&mut self, a: &Arg) {
        match a {
            Arg::Str(s) => self.str(s),
            Arg::Bool(b) => self.u32(u32::from(*b)),
            Arg::Props(p) => self.array(8, |w| {
                for (k, v) in p {
                    w.pad(8);
                    w.str(k);
                    w.value(v);
                }
            }),
            Arg::NoAux => self.array(8, |_| {}),
            Arg::I32(v) => self.u32(*v as u32),
        }
    }
}

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;
const SIGNAL: u8 = 4;

/// The bytes of a method call.
fn method_call(serial: u32, dest: Option<&str>, path: &str, iface: &str, member: &str, args: &[Arg]) -> Vec<u8> {
    let mut body = Writer::default();
    for a in args {
        body.arg(a);
    }
    let signature: String = args.iter().map(Arg::signature).collect();
    let mut m = Writer::default();
    m.u8(b'l');
    m.u8(METHOD_CALL);
    m.u8(0);
    m.u8(1);
    m.u32(body.buf.len() as u32);
    m.u32(serial);
    m.array(8, |w| {
        let mut field = |code: u8, sig: &str, f: &dyn Fn(&mut Writer)| {
            w.pad(8);
            w.u8(code);
            w.sig(sig);
            f(w);
        };
        field(1, "o", &|w| w.str(path));
        field(2, "s", &|w| w.str(iface));
        field(3, "s", &|w| w.str(member));
        if let Some(d) = dest {
            field(6, "s", &|w| w.str(d));
        }
        if !signature.is_empty() {
            field(8, "g", &|w| w.sig(&signature));
        }
    });
    m.pad(8);
    m.buf.extend_from_slice(&body.buf);
    m.buf
}

/// A message as read: its kind, the serial it answers, the header fields the kubelet looks at, and its body.
#[derive(Debug, Default, PartialEq)]
pub struct Message {
    kind: u8,
    reply_serial: u32,
    error_name: String,
    /// The object path (`PATH`).
    pub path: String,
    /// The interface (`INTERFACE`).
    pub interface: String,
    /// The member (`MEMBER`): a signal's name.
    pub member: String,
    /// The body's signature.
    pub signature: String,
    body: Vec<u8>,
    first_string: Option<String>,
}

impl Message {
    /// The first value of the body when it is a boolean (`b`: a signal's argument).
    pub fn first_bool(&self) -> Option<bool> {
        self.signature.starts_with('b').then(|| le32(&self.body, 0).ok().map(|v| v != 0)).flatten()
    }

    /// The first value of the body when it is a variant holding a `t` (`Properties.Get` of a `uint64`).
    pub fn variant_u64(&self) -> Option<u64> {
        if !self.signature.starts_with('v') || self.body.get(..3) != Some(b"\x01t\0") {
            return None;
        }
        let b = self.body.get(8..16)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The first value of the body when it is a unix fd index (`h`).
    pub fn fd_index(&self) -> Option<u32> {
        self.signature.starts_with('h').then(|| le32(&self.body, 0).ok()).flatten()
    }
}

fn le32(b: &[u8], at: usize) -> Result<u32, DbusError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| DbusError::Protocol("truncated".into()))
}

/// The header fields (`a(yv)`) of a message, read into `m`.
fn parse_fields(fields: &[u8], base: usize, m: &mut Message) -> Result<(), DbusError> {
    let mut i = 0;
    let align = |i: usize, n: usize| {
        let abs = base + i;
        i + (n - abs % n) % n
    };
    while i < fields.len() {
        i = align(i, 8);
        if i >= fields.len() {
            break;
        }
        let code = fields[i];
        let slen = *fields.get(i + 1).ok_or_else(|| DbusError::Protocol("field signature".into()))? as usize;
        let vsig = fields.get(i + 2..i + 2 + slen).ok_or_else(|| DbusError::Protocol("field signature".into()))?;
        let vsig = String::from_utf8_lossy(vsig).into_owned();
        i += 2 + slen + 1;
        match vsig.as_str() {
            "u" => {
                i = align(i, 4);
                let v = le32(fields, i)?;
                i += 4;
                if code == 5 {
                    m.reply_serial = v;
                }
            }
            "s" | "o" => {
                i = align(i, 4);
                let n = le32(fields, i)? as usize;
                let s = fields.get(i + 4..i + 4 + n).ok_or_else(|| DbusError::Protocol("field string".into()))?;
                let s = String::from_utf8_lossy(s).into_owned();
                match code {
                    1 => m.path = s,
                    2 => m.interface = s,
                    3 => m.member = s,
                    4 => m.error_name = s,
                    _ => {}
                }
                i += 4 + n + 1;
            }
            "g" => {
                let n = *fields.get(i).ok_or_else(|| DbusError::Protocol("field signature".into()))? as usize;
                if code == 8 {
                    m.signature =
                        String::from_utf8_lossy(fields.get(i + 1..i + 1 + n).unwrap_or_default()).into_owned();
                }
                i += 1 + n + 1;
            }
            other => return Err(DbusError::Protocol(format!("unexpected header field type {other:?}"))),
        }
    }
    Ok(())
}

/// Parses one whole message.
fn parse_message(bytes: &[u8]) -> Result<Message, DbusError> {
    if bytes.first() != Some(&b'l') {
        return Err(DbusError::Protocol("only little-endian messages are read".into()));
    }
    let mut m = Message { kind: bytes[1], ..Default::default() };
    let body_len = le32(bytes, 4)? as usize;
    let fields_len = le32(bytes, 12)? as usize;
    let fields = bytes.get(16..16 + fields_len).ok_or_else(|| DbusError::Protocol("truncated fields".into()))?;
    parse_fields(fields, 16, &mut m)?;
    let body_at = (16 + fields_len).div_ceil(8) * 8;
    let body = bytes.get(body_at..body_at + body_len).ok_or_else(|| DbusError::Protocol("truncated body".into()))?;
    m.first_string = match m.signature.chars().next() {
        Some('s' | 'o') => {
            let n = le32(body, 0)? as usize;
            body.get(4..4 + n).map(|s| String::from_utf8_lossy(s).into_owned())
        }
        _ => None,
    };
    m.body = body.to_vec();
    Ok(m)
}

/// One connection.
pub struct Connection {
    stream: UnixStream,
    path: String,
    serial: u32,
    /// Unix fds received with the message being read.
    fds: Vec<std::os::fd::OwnedFd>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("path", &self.path).finish()
    }
}

/// The system bus socket (`DBUS_SYSTEM_BUS_ADDRESS`'s `unix:path=`, else `/run/dbus/system_bus_socket`).
pub fn system_bus_socket() -> std::path::PathBuf {
    std::env::var("DBUS_SYSTEM_BUS_ADDRESS")
        .ok()
        .and_then(|a| {
            a.split(';')
                .find_map(|a| a.strip_prefix("unix:path=").map(|p| p.split(',').next().unwrap_or(p).to_string()))
        })
        .unwrap_or_else(|| "/run/dbus/system_bus_socket".into())
        .into()
}

impl Connection {
    /// Connects and authenticates; `hello` for a bus daemon (not for systemd's private socket).
    pub fn connect(socket: &Path, hello: bool) -> Result<Connection, DbusError> {
        Self::open(socket, hello, false)
    }

    /// Connects to a bus daemon (the system bus) with unix fd passing.
    pub fn connect_bus(socket: &Path) -> Result<Connection, DbusError> {
        Self::open(socket, true, true)
    }

    fn open(socket: &Path, hello: bool, unix_fds: bool) -> Result<Connection, DbusError> {
        let path = socket.display().to_string();
        let io = |source| DbusError::Io { path: path.clone(), source };
        let mut stream = UnixStream::connect(socket).map_err(io)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        let uid = nix::unistd::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        stream.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes()).map_err(io)?;
        let read_line = |stream: &mut UnixStream| -> Result<String, DbusError> {
            let mut line = Vec::new();
            loop {
                let mut b = [0u8; 1];
                stream.read_exact(&mut b).map_err(io)?;
                line.push(b[0]);
                if line.ends_with(b"\r\n") || line.len() > 512 {
                    break;
                }
            }
            Ok(String::from_utf8_lossy(&line).trim().to_string())
        };
        let line = read_line(&mut stream)?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth { path, line });
        }
        if unix_fds {
            stream.write_all(b"NEGOTIATE_UNIX_FD\r\n").map_err(io)?;
            let line = read_line(&mut stream)?;
            if line != "AGREE_UNIX_FD" {
                return Err(DbusError::Auth { path, line });
            }
        }
        stream.write_all(b"BEGIN\r\n").map_err(io)?;
        let mut c = Connection { stream, path, serial: 0, fds: vec![] };
        if hello {
            c.call(Some("org.freedesktop.DBus"), "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", &[])?;
        }
        Ok(c)
    }

    /// Waits for replies and signals without a time limit (a connection that only listens for signals).
    pub fn without_timeout(self) -> Result<Self, DbusError> {
        let io = |source| DbusError::Io { path: self.path.clone(), source };
        self.stream.set_read_timeout(None).map_err(io)?;
        Ok(self)
    }

    /// Calls a method; returns the reply's first string or object path (the job of `StartTransientUnit`).
    pub fn call(
        &mut self,
        dest: Option<&str>,
        path: &str,
        iface: &str,
        member: &str,
        args: &[Arg],
    ) -> Result<Option<String>, DbusError> {
        Ok(self.call_message(dest, path, iface, member, args)?.0.first_string)
    }

    /// Calls a method; returns the whole reply and the unix fds that came with it.
    pub fn call_message(
        &mut self,
        dest: Option<&str>,
        path: &str,
        iface: &str,
        member: &str,
        args: &[Arg],
    ) -> Result<(Message, Vec<std::os::fd::OwnedFd>), DbusError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let msg = method_call(serial, dest, path, iface, member, args);
        let p = self.path.clone();
        self.stream.write_all(&msg).map_err(|source| DbusError::Io { path: p, source })?;
        loop {
            let (r, fds) = self.read_message()?;
            // Signals and replies to other calls are skipped.
            if r.reply_serial != serial || (r.kind != METHOD_RETURN && r.kind != ERROR) {
                continue;
            }
            if r.kind == ERROR {
                return Err(DbusError::Remote { name: r.error_name, message: r.first_string.unwrap_or_default() });
            }
            return Ok((r, fds));
        }
    }

    /// The next signal (other messages are skipped).
    pub fn next_signal(&mut self) -> Result<Message, DbusError> {
        loop {
            let (m, _) = self.read_message()?;
            if m.kind == SIGNAL {
                return Ok(m);
            }
        }
    }

    /// Reads `buf` whole, keeping the unix fds that arrive with it.
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), DbusError> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut at = 0;
        while at < buf.len() {
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 8]);
            let mut iov = [std::io::IoSliceMut::new(&mut buf[at..])];
            let r = recvmsg::<()>(self.stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC);
            let msg = match r {
                Ok(m) => m,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(DbusError::Io { path: self.path.clone(), source: e.into() }),
            };
            let n = msg.bytes;
            for c in msg.cmsgs().into_iter().flatten() {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel just gave these descriptors to this process; each is owned once.
                    self.fds.extend(fds.into_iter().map(|fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }));
                }
            }
            if n == 0 {
                let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed");
                return Err(DbusError::Io { path: self.path.clone(), source: eof });
            }
            at += n;
        }
        Ok(())
    }

    /// Reads one whole message and the fds that came with it.
    fn read_message(&mut self) -> Result<(Message, Vec<std::os::fd::OwnedFd>), DbusError> {
        let mut head = [0u8; 16];
        self.read_exact(&mut head)?;
        let body_len = le32(&head, 4)? as usize;
        let fields_len = le32(&head, 12)? as usize;
        let total = (16 + fields_len).div_ceil(8) * 8 + body_len;
        if total > 64 << 20 {
            return Err(DbusError::Protocol(format!("a {total}-byte message")));
        }
        let mut m = head.to_vec();
        m.resize(total, 0);
        self.read_exact(&mut m[16..])?;
        Ok((parse_message(&m)?, std::mem::take(&mut self.fds)))
    }
}

#[cfg(test)]
#[path = "dbus_tests.rs"]
mod tests;

//! A minimal D-Bus client for systemd's manager API (what upstream reaches through go-systemd's `dbus` package):
//! method calls with the few argument types `StartTransientUnit`, `SetUnitProperties` and `StopUnit` take, over
//! systemd's private socket (`/run/systemd/private`, peer to peer, no bus daemon) or the system bus.
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
}

impl Arg {
    fn signature(&self) -> &'static str {
        match self {
            Arg::Str(_) => "s",
            Arg::Bool(_) => "b",
            Arg::Props(_) => "a(sv)",
            Arg::NoAux => "a(sa(sv))",
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
        }
    }
}

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

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

/// A reply's kind, serial it answers, error name and first string or object path of its body.
#[derive(Debug, Default, PartialEq)]
struct Reply {
    kind: u8,
    reply_serial: u32,
    error_name: String,
    first_string: Option<String>,
}

fn le32(b: &[u8], at: usize) -> Result<u32, DbusError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| DbusError::Protocol("truncated".into()))
}

/// Reads the header fields (`a(yv)`) of a message: reply serial and error name.
fn parse_fields(fields: &[u8], base: usize) -> Result<(u32, String, String), DbusError> {
    let (mut serial, mut err, mut sig) = (0, String::new(), String::new());
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
                    serial = v;
                }
            }
            "s" | "o" => {
                i = align(i, 4);
                let n = le32(fields, i)? as usize;
                let s = fields.get(i + 4..i + 4 + n).ok_or_else(|| DbusError::Protocol("field string".into()))?;
                if code == 4 {
                    err = String::from_utf8_lossy(s).into_owned();
                }
                i += 4 + n + 1;
            }
            "g" => {
                let n = *fields.get(i).ok_or_else(|| DbusError::Protocol("field signature".into()))? as usize;
                if code == 8 {
                    sig = String::from_utf8_lossy(fields.get(i + 1..i + 1 + n).unwrap_or_default()).into_owned();
                }
                i += 1 + n + 1;
            }
            other => return Err(DbusError::Protocol(format!("unexpected header field type {other:?}"))),
        }
    }
    Ok((serial, err, sig))
}

/// Parses one whole message.
fn parse_message(m: &[u8]) -> Result<Reply, DbusError> {
    if m.first() != Some(&b'l') {
        return Err(DbusError::Protocol("only little-endian messages are read".into()));
    }
    let kind = m[1];
    let body_len = le32(m, 4)? as usize;
    let fields_len = le32(m, 12)? as usize;
    let fields = m.get(16..16 + fields_len).ok_or_else(|| DbusError::Protocol("truncated fields".into()))?;
    let (reply_serial, error_name, sig) = parse_fields(fields, 16)?;
    let body_at = (16 + fields_len).div_ceil(8) * 8;
    let body = m.get(body_at..body_at + body_len).ok_or_else(|| DbusError::Protocol("truncated body".into()))?;
    let first_string = match sig.chars().next() {
        Some('s' | 'o') => {
            let n = le32(body, 0)? as usize;
            body.get(4..4 + n).map(|s| String::from_utf8_lossy(s).into_owned())
        }
        _ => None,
    };
    Ok(Reply { kind, reply_serial, error_name, first_string })
}

/// One connection.
pub struct Connection {
    stream: UnixStream,
    path: String,
    serial: u32,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("path", &self.path).finish()
    }
}

impl Connection {
    /// Connects and authenticates; `hello` for a bus daemon (not for systemd's private socket).
    pub fn connect(socket: &Path, hello: bool) -> Result<Connection, DbusError> {
        let path = socket.display().to_string();
        let io = |source| DbusError::Io { path: path.clone(), source };
        let mut stream = UnixStream::connect(socket).map_err(io)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        let uid = nix::unistd::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        stream.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes()).map_err(io)?;
        let mut line = Vec::new();
        loop {
            let mut b = [0u8; 1];
            stream.read_exact(&mut b).map_err(io)?;
            line.push(b[0]);
            if line.ends_with(b"\r\n") || line.len() > 512 {
                break;
            }
        }
        let line = String::from_utf8_lossy(&line).trim().to_string();
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth { path, line });
        }
        stream.write_all(b"BEGIN\r\n").map_err(io)?;
        let mut c = Connection { stream, path, serial: 0 };
        if hello {
            c.call(Some("org.freedesktop.DBus"), "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", &[])?;
        }
        Ok(c)
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
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let msg = method_call(serial, dest, path, iface, member, args);
        let p = self.path.clone();
        let io = |source| DbusError::Io { path: p.clone(), source };
        self.stream.write_all(&msg).map_err(io)?;
        loop {
            let mut head = [0u8; 16];
            self.stream.read_exact(&mut head).map_err(io)?;
            let body_len = le32(&head, 4)? as usize;
            let fields_len = le32(&head, 12)? as usize;
            let total = (16 + fields_len).div_ceil(8) * 8 + body_len;
            if total > 64 << 20 {
                return Err(DbusError::Protocol(format!("a {total}-byte message")));
            }
            let mut m = head.to_vec();
            m.resize(total, 0);
            self.stream.read_exact(&mut m[16..]).map_err(io)?;
            let r = parse_message(&m)?;
            // Signals and replies to other calls are skipped.
            if r.reply_serial != serial || (r.kind != METHOD_RETURN && r.kind != ERROR) {
                continue;
            }
            if r.kind == ERROR {
                return Err(DbusError::Remote { name: r.error_name, message: r.first_string.unwrap_or_default() });
            }
            return Ok(r.first_string);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_transient_unit_call_is_marshalled_as_the_specification_says() {
        let m = method_call(
            7,
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StartTransientUnit",
            &[
                Arg::Str("kubepods.slice".into()),
                Arg::Str("replace".into()),
                Arg::Props(vec![
                    ("Description".into(), Value::Str("k".into())),
                    ("Wants".into(), Value::Strs(vec!["-.slice".into()])),
                    ("CPUShares".into(), Value::U64(1024)),
                    ("DefaultDependencies".into(), Value::Bool(false)),
                ]),
                Arg::NoAux,
            ],
        );
        assert_eq!(&m[..4], b"l\x01\x00\x01");
        assert_eq!(le32(&m, 8).unwrap(), 7, "serial");
        let fields_len = le32(&m, 12).unwrap() as usize;
        let body_at = (16 + fields_len).div_ceil(8) * 8;
        let body = &m[body_at..];
        assert_eq!(le32(&m, 4).unwrap() as usize, body.len());
        // "kubepods.slice": length 14, the bytes, NUL.
        assert_eq!(le32(body, 0).unwrap(), 14);
        assert_eq!(&body[4..19], b"kubepods.slice\0");
        // "replace" at 20 (aligned to 4).
        assert_eq!(le32(body, 20).unwrap(), 7);
        assert_eq!(&body[24..32], b"replace\0");
        // The properties array: its length at 32, elements from 40 (structs align to 8).
        let props_len = le32(body, 32).unwrap() as usize;
        assert_eq!(&body[40..44], &11u32.to_le_bytes(), "\"Description\"");
        assert_eq!(&body[44..56], b"Description\0");
        assert_eq!(&body[56..59], b"\x01s\0", "variant signature");
        // The empty aux array ends the body: a zero length, then the padding to its elements' alignment (8),
        // which the specification asks for even when the array is empty.
        let aux_at = (40 + props_len).div_ceil(4) * 4;
        assert_eq!(le32(body, aux_at).unwrap(), 0);
        assert_eq!(body.len(), (aux_at + 4).div_ceil(8) * 8);
        // The header names the signature.
        let fields = &m[16..16 + fields_len];
        let (_, _, sig) = parse_fields(fields, 16).unwrap();
        assert_eq!(sig, "ssa(sv)a(sa(sv))");
    }

    #[test]
    fn replies_and_errors_are_read() {
        // A METHOD_RETURN for serial 7 returning an object path, and an ERROR for serial 8, as systemd sends them.
        let reply = |kind: u8, serial: u32, fields: &dyn Fn(&mut Writer), sig: &str, body: &dyn Fn(&mut Writer)| {
            let mut b = Writer::default();
            body(&mut b);
            let mut m = Writer::default();
            m.u8(b'l');
            m.u8(kind);
            m.u8(1);
            m.u8(1);
            m.u32(b.buf.len() as u32);
            m.u32(99);
            m.array(8, |w| {
                w.pad(8);
                w.u8(5);
                w.sig("u");
                w.u32(serial);
                fields(w);
                w.pad(8);
                w.u8(8);
                w.sig("g");
                w.sig(sig);
            });
            m.pad(8);
            m.buf.extend_from_slice(&b.buf);
            m.buf
        };
        let ok = reply(METHOD_RETURN, 7, &|_| {}, "o", &|w| w.str("/org/freedesktop/systemd1/job/42"));
        let r = parse_message(&ok).unwrap();
        assert_eq!((r.kind, r.reply_serial), (METHOD_RETURN, 7));
        assert_eq!(r.first_string.as_deref(), Some("/org/freedesktop/systemd1/job/42"));
        let err = reply(
            ERROR,
            8,
            &|w| {
                w.pad(8);
                w.u8(4);
                w.sig("s");
                w.str("org.freedesktop.systemd1.UnitExists");
            },
            "s",
            &|w| w.str("Unit kubepods.slice already exists."),
        );
        let r = parse_message(&err).unwrap();
        assert_eq!(r.error_name, "org.freedesktop.systemd1.UnitExists");
        assert_eq!(r.first_string.as_deref(), Some("Unit kubepods.slice already exists."));
        assert!(parse_message(&err[..20]).is_err(), "a truncated message is an error, not a panic");
    }
}

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
    let mut parsed = Message::default();
    parse_fields(fields, 16, &mut parsed).unwrap();
    assert_eq!(parsed.signature, "ssa(sv)a(sa(sv))");
    assert_eq!((parsed.path.as_str(), parsed.member.as_str()), ("/org/freedesktop/systemd1", "StartTransientUnit"));
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

/// A message as a bus sends it: `kind`, replying to `serial`, with the body `sig` written by `body`.
fn message(kind: u8, serial: u32, member: &str, sig: &str, body: &dyn Fn(&mut Writer)) -> Vec<u8> {
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
        w.pad(8);
        w.u8(3);
        w.sig("s");
        w.str(member);
        w.pad(8);
        w.u8(8);
        w.sig("g");
        w.sig(sig);
    });
    m.pad(8);
    m.buf.extend_from_slice(&b.buf);
    m.buf
}

#[test]
fn a_unix_fd_a_variant_and_a_signal_are_read_as_logind_sends_them() {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::os::fd::AsRawFd;
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut c = Connection { stream: ours, path: "pair".into(), serial: 0, fds: vec![] };
    // Inhibit's reply: `h` 0, the descriptor itself in SCM_RIGHTS.
    let (lock, _other_end) = nix::unistd::pipe().unwrap();
    let reply = message(METHOD_RETURN, 1, "", "h", &|w| w.u32(0));
    let fds = [lock.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(theirs.as_raw_fd(), &[std::io::IoSlice::new(&reply)], &cmsg, MsgFlags::empty(), None).unwrap();
    let (m, got) = c.read_message().unwrap();
    assert_eq!((m.fd_index(), got.len()), (Some(0), 1));
    // Properties.Get of InhibitDelayMaxUSec: `v` holding `t`.
    let delay = message(METHOD_RETURN, 2, "", "v", &|w| {
        w.sig("t");
        w.u64(30_000_000);
    });
    let mut theirs = theirs;
    theirs.write_all(&delay).unwrap();
    assert_eq!(c.read_message().unwrap().0.variant_u64(), Some(30_000_000));
    // PrepareForShutdown(true), after a reply nobody waits for.
    theirs.write_all(&message(METHOD_RETURN, 9, "", "s", &|w| w.str("x"))).unwrap();
    theirs.write_all(&message(SIGNAL, 0, "PrepareForShutdown", "b", &|w| w.u32(1))).unwrap();
    let s = c.next_signal().unwrap();
    assert_eq!((s.member.as_str(), s.first_bool()), ("PrepareForShutdown", Some(true)));
    drop(theirs);
    assert!(matches!(c.next_signal(), Err(DbusError::Io { .. })), "a closed bus ends the wait");
}

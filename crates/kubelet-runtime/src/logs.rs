//! Container log files as the kubelet reads them (`kuberuntime_container.go` getTerminationMessage,
//! readLastStringFromContainerLogs, `calcRestartCountByLogDir`).

use kubelet_cri::api;

/// The restart count implied by the `<n>.log` files of a container's log folder: one more than the highest.
pub fn restart_count_from_log_dir(dir: &std::path::Path) -> i32 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse::<i32>().ok())
        .max()
        .map_or(0, |n| n + 1)
}

/// Largest termination message read from the file (`MaxContainerTerminationMessageLength`, 4 KiB).
const MAX_TERMINATION_MESSAGE: usize = 4096;
/// Lines and bytes of the log tail used as message by `FallbackToLogsOnError`.
const FALLBACK_LOG_LINES: usize = 80;
const FALLBACK_LOG_BYTES: usize = 2048;

/// How much of the end of a log the fallback message is looked for in: far more than 80 lines' worth of the 2 KiB
/// kept, and a bound however large the log grew (upstream reads the tail backwards).
const FALLBACK_LOG_WINDOW: u64 = 64 * 1024;

/// The last `max` bytes of a file (`tail.ReadAtMost`), and whether the file holds more before them. The file is
/// the container's to write: only the tail is read, however large it grew.
pub fn read_tail(path: &std::path::Path, max: u64) -> std::io::Result<(Vec<u8>, bool)> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max);
    f.seek(std::io::SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity(max.min(len) as usize);
    f.take(max).read_to_end(&mut buf)?;
    Ok((buf, start > 0))
}

/// The termination message of an exited container (`getTerminationMessage`): the last 4 KiB of the file mounted
/// at its `terminationMessagePath`, or with `fallback` and no file content, the tail of its log.
pub(crate) fn termination_message(st: &api::ContainerStatus, path: &str, fallback: bool) -> String {
    let from_file = st
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path)
        .and_then(|m| read_tail(std::path::Path::new(&m.host_path), MAX_TERMINATION_MESSAGE as u64).ok())
        .map(|(b, _)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if !from_file.is_empty() || !fallback {
        return from_file;
    }
    let Ok((mut log, cut)) = read_tail(std::path::Path::new(&st.log_path), FALLBACK_LOG_WINDOW) else {
        return String::new();
    };
    if cut {
        // The window starts inside a line: that line is not whole.
        let first = log.iter().position(|b| *b == b'\n').map_or(log.len(), |i| i + 1);
        log.drain(..first);
    }
    tail_of_cri_log(&String::from_utf8_lossy(&log), FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
}

/// The message text of the last `lines` lines of a CRI-format log, at most `bytes` bytes from the end.
pub fn tail_of_cri_log(log: &str, lines: usize, bytes: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    let mut out = String::new();
    for l in &all[all.len().saturating_sub(lines)..] {
        // `<timestamp> <stream> <P|F> <text>`: a partial (P) line continues on the next one.
        let mut f = l.splitn(4, ' ');
        let (_, _, tag, text) = (f.next(), f.next(), f.next(), f.next().unwrap_or(""));
        out.push_str(text);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    if out.len() > bytes {
        let mut cut = out.len() - bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    out
}

/// Creates a directory and its parents unless it already exists. A `stat` first: on slow disks a `mkdir` that
/// fails with EEXIST costs as much as a real one, and the kubelet ensures the same folders at every sync.
pub fn ensure_dir(path: &std::path::Path) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    std::fs::create_dir_all(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_count_continues_after_existing_logs() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(restart_count_from_log_dir(&d.path().join("missing")), 0);
        for f in ["0.log", "1.log", "4.log", "x.log", "3.log.gz"] {
            std::fs::write(d.path().join(f), "").unwrap();
        }
        assert_eq!(restart_count_from_log_dir(d.path()), 5);
    }

    #[test]
    fn termination_messages_read_only_the_tail_of_what_the_container_wrote() {
        // A container controls both files: a huge one must not be read whole (the file here is sparse, 1 GiB). As
        // upstream, the message is the file's last 4 KiB, and the log fallback its last lines.
        let d = tempfile::tempdir().unwrap();
        let (msg, log) = (d.path().join("termination-log"), d.path().join("0.log"));
        let f = std::fs::File::create(&msg).unwrap();
        f.set_len(1 << 30).unwrap();
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&msg).unwrap();
        f.write_all(b"the end\n").unwrap();
        let f = std::fs::File::create(&log).unwrap();
        f.set_len(1 << 30).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"\n2026-01-01T00:00:00Z stderr F last words\n").unwrap();
        let mount = api::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: msg.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let st = api::ContainerStatus {
            mounts: vec![mount],
            log_path: log.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let m = termination_message(&st, "/dev/termination-log", false);
        assert_eq!(m.len(), MAX_TERMINATION_MESSAGE);
        assert!(m.ends_with("the end\n"));
        assert_eq!(termination_message(&st, "/elsewhere", true), "last words\n");
    }

    #[test]
    fn log_tail_joins_partial_lines() {
        let log = "2026-01-01T00:00:00Z stdout F first\n2026-01-01T00:00:01Z stderr P par\n2026-01-01T00:00:01Z stderr F tial\n";
        assert_eq!(tail_of_cri_log(log, 80, 2048), "first\npartial\n");
        assert_eq!(tail_of_cri_log(log, 2, 2048), "partial\n");
        assert_eq!(tail_of_cri_log(log, 80, 4), "ial\n");
    }
}

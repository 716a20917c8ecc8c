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

/// The termination message of an exited container (`getTerminationMessage`): the file mounted at its
/// `terminationMessagePath`, or with `fallback` and no file content, the tail of its log.
pub(crate) fn termination_message(st: &api::ContainerStatus, path: &str, fallback: bool) -> String {
    let from_file = st
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path)
        .and_then(|m| std::fs::read(&m.host_path).ok())
        .map(|mut b| {
            b.truncate(MAX_TERMINATION_MESSAGE);
            String::from_utf8_lossy(&b).into_owned()
        })
        .unwrap_or_default();
    if !from_file.is_empty() || !fallback {
        return from_file;
    }
    let Ok(log) = std::fs::read_to_string(&st.log_path) else { return String::new() };
    tail_of_cri_log(&log, FALLBACK_LOG_LINES, FALLBACK_LOG_BYTES)
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
    fn log_tail_joins_partial_lines() {
        let log = "2026-01-01T00:00:00Z stdout F first\n2026-01-01T00:00:01Z stderr P par\n2026-01-01T00:00:01Z stderr F tial\n";
        assert_eq!(tail_of_cri_log(log, 80, 2048), "first\npartial\n");
        assert_eq!(tail_of_cri_log(log, 2, 2048), "partial\n");
        assert_eq!(tail_of_cri_log(log, 80, 4), "ial\n");
    }
}

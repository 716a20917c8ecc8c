//! `/containerLogs/{namespace}/{pod}/{container}` (`server.go` getContainerLogs, `kubelet_pods.go`
//! GetKubeletContainerLogs and validateContainerLogStatus, `cri-client/pkg/logs` ReadLogs).
//!
//! The query is a v1 `PodLogOptions` (`follow`, `previous`, `timestamps`, `sinceSeconds`, `sinceTime`,
//! `tailLines`, `limitBytes`, `stream`; the legacy `tail`): a value that does not parse is 400
//! `{"message": "Unable to decode query."}`, options that fail validation 422 `{"message": "Invalid request."}`.
//! The container is picked from the pod's status as upstream (current instance, or with `previous` the last
//! terminated one) and its CRI log file is read from the right place ([`cri`]).
//!
//! With `follow`, the reader waits at the end of the file for the runtime to write (inotify on the log's folder,
//! and a check at least every second), follows a rotation to the new file, and ends once the container is no
//! longer running and the file is drained. A client that goes away ends the reader at once; one that stops reading
//! holds the reader back (at most a few chunks wait for it), so a log is never gathered in memory.
//!
//! Unlike upstream, the file is read only when it really lies within `podLogsDir` ([`crate::confined`]): a pod that
//! can write to its log folder cannot make the kubelet serve another file of the host through a link.

pub mod cri;

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, BufReader};
use tokio::sync::mpsc;

use crate::handlers::Handlers;
use cri::{LineWriter, ReadOptions, Streams};

/// How often a followed log checks that its container still runs (`logForceCheckPeriod`).
const FORCE_CHECK: Duration = Duration::from_secs(1);
/// Bytes gathered before a chunk is sent while more is ready.
const CHUNK: usize = 32 * 1024;

/// The decoded query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogQuery {
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `sinceSeconds`.
    pub since_seconds: Option<i64>,
    /// `sinceTime`.
    pub since_time: Option<DateTime<Utc>>,
    /// `tailLines`.
    pub tail_lines: Option<i64>,
    /// `limitBytes`.
    pub limit_bytes: Option<i64>,
    /// `stream`.
    pub stream: Option<String>,
}

fn message(code: StatusCode, msg: &str) -> Response {
    (code, format!("{{\"message\": \"{msg}\"}}")).into_response()
}

/// A boolean as the conversion from URL values reads it: only `0` and `false` (any case) are false.
fn parse_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Decodes the query as the conversion of `PodLogOptions` from URL values does (the first value of a repeated
/// key counts, unknown keys are ignored, the legacy `tail` overrides `tailLines`).
pub fn decode(q: &[(String, String)]) -> Option<LogQuery> {
    let first = |key: &str| q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let int = |key: &str| -> Result<Option<i64>, ()> { first(key).map(|v| v.parse().map_err(|_| ())).transpose() };
    let mut o = LogQuery {
        follow: first("follow").is_some_and(parse_bool),
        previous: first("previous").is_some_and(parse_bool),
        timestamps: first("timestamps").is_some_and(parse_bool),
        since_seconds: int("sinceSeconds").ok()?,
        since_time: match first("sinceTime") {
            Some(v) => Some(DateTime::parse_from_rfc3339(v).ok()?.with_timezone(&Utc)),
            None => None,
        },
        tail_lines: int("tailLines").ok()?,
        limit_bytes: int("limitBytes").ok()?,
        stream: first("stream").map(String::from),
    };
    match first("tail") {
        Some("all") => o.tail_lines = None,
        Some(t) => o.tail_lines = Some(t.parse().ok()?),
        None => {}
    }
    Some(o)
}

/// `ValidatePodLogOptions`.
pub fn validate(o: &LogQuery) -> Result<Streams, String> {
    if o.tail_lines.is_some_and(|t| t < 0) {
        return Err("tailLines: must be greater than or equal to 0".into());
    }
    if o.limit_bytes.is_some_and(|l| l < 1) {
        return Err("limitBytes: must be greater than 0".into());
    }
    if o.since_seconds.is_some() && o.since_time.is_some() {
        return Err("at most one of `sinceTime` or `sinceSeconds` may be specified".into());
    }
    if o.since_seconds.is_some_and(|s| s < 1) {
        return Err("sinceSeconds: must be greater than 0".into());
    }
    let streams = match o.stream.as_deref() {
        None | Some("All") => Streams::All,
        Some("Stdout") => Streams::Stdout,
        Some("Stderr") => Streams::Stderr,
        Some(s) => return Err(format!("stream: unsupported value {s:?}")),
    };
    if streams != Streams::All && o.tail_lines.is_some() {
        return Err("`tailLines` and specific `stream` are mutually exclusive for now".into());
    }
    Ok(streams)
}

fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || spec.init_containers.iter().flatten().any(|c| c.name == name)
        || spec.ephemeral_containers.iter().flatten().any(|c| c.name == name)
}

fn strip_runtime(id: &str) -> &str {
    id.split_once("://").map(|(_, i)| i).unwrap_or(id)
}

/// The container ID whose log to read (`validateContainerLogStatus`), or the 400 message.
pub fn container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let st = pod.status.as_ref();
    let all: Vec<&ContainerStatus> = st
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
                .chain(s.ephemeral_container_statuses.iter().flatten())
        })
        .collect();
    let Some(cs) = all.into_iter().find(|c| c.name == container) else {
        return Err(format!("container {container:?} in pod {pod_name:?} is not available"));
    };
    let last_terminated = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let last_id = last_terminated.and_then(|t| t.container_id.clone()).filter(|i| !i.is_empty());
    if previous {
        return last_id
            .map(|i| strip_runtime(&i).to_string())
            .ok_or_else(|| format!("previous terminated container {container:?} in pod {pod_name:?} not found"));
    }
    let state = cs.state.as_ref();
    let terminated_err = || format!("container {container:?} in pod {pod_name:?} is terminated");
    if let Some(r) = state.and_then(|s| s.running.as_ref()) {
        let _ = r;
        return Ok(strip_runtime(cs.container_id.as_deref().unwrap_or("")).to_string());
    }
    if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
        let id = t.container_id.clone().filter(|i| !i.is_empty()).or(last_id);
        return id.map(|i| strip_runtime(&i).to_string()).ok_or_else(terminated_err);
    }
    if last_terminated.is_some() {
        return last_id.map(|i| strip_runtime(&i).to_string()).ok_or_else(terminated_err);
    }
    if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
        let why = match w.reason.as_deref().unwrap_or("") {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            r => r.to_string(),
        };
        return Err(format!("container {container:?} in pod {pod_name:?} is waiting to start: {why}"));
    }
    Err(format!("container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"))
}

pub(crate) async fn container_logs(
    State(h): State<Handlers>,
    Path((ns, pod_name, container)): Path<(String, String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let Some(o) = decode(&q) else { return message(StatusCode::BAD_REQUEST, "Unable to decode query.") };
    let streams = match validate(&o) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "invalid log options");
            return message(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.");
        }
    };
    let Some(pod) = h.pods.pod(&ns, &pod_name) else {
        return (StatusCode::NOT_FOUND, format!("pod {pod_name:?} does not exist\n")).into_response();
    };
    if !has_container(&pod, &container) {
        return (StatusCode::NOT_FOUND, format!("container {container:?} not found in pod {pod_name:?}\n"))
            .into_response();
    }
    let id = match container_id(&pod, &container, o.previous) {
        Ok(id) => id,
        Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
    };
    let since = o.since_time.or_else(|| {
        let now = DateTime::<Utc>::from(h.clock.now());
        o.since_seconds.map(|s| {
            chrono::TimeDelta::try_seconds(s)
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        })
    });
    let opts = ReadOptions { timestamps: o.timestamps, since, limit_bytes: o.limit_bytes.map(|l| l as u64), streams };
    let (tx, rx) = mpsc::channel::<Vec<u8>>(8);
    let reader = Reader {
        h: h.clone(),
        container_id: id,
        follow: o.follow,
        tail: o.tail_lines.map(|t| t as usize),
        writer: LineWriter::new(opts),
        tx,
    };
    tokio::spawn(reader.run());
    let body = Body::from_stream(FlushBeforeEnd::new(tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(rx),
        Ok::<_, std::io::Error>,
    )));
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// A body stream that, after its last chunk, reports "not ready" once before it ends, so the server flushes the
/// data before it writes the end of the chunked body, as upstream's kubelet (a flushing writer, then the handler
/// returns) does. kube-apiserver's WebSocket log reader (`wsstream` messageCopy) drops the bytes of a read that
/// also returns EOF, so a last chunk and the end of the body arriving together reach a WebSocket client as an
/// empty log.
struct FlushBeforeEnd<S> {
    inner: S,
    yielded: bool,
    held_end: bool,
}

impl<S> FlushBeforeEnd<S> {
    fn new(inner: S) -> Self {
        Self { inner, yielded: false, held_end: false }
    }
}

impl<S: futures::Stream + Unpin> futures::Stream for FlushBeforeEnd<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(item)) => {
                self.yielded = true;
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) if self.yielded && !self.held_end => {
                self.held_end = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other,
        }
    }
}

struct Reader {
    h: Handlers,
    container_id: String,
    follow: bool,
    tail: Option<usize>,
    writer: LineWriter,
    tx: mpsc::Sender<Vec<u8>>,
}

/// What woke a follower.
enum Wake {
    Changed,
    ClientGone,
}

impl Reader {
    async fn run(mut self) {
        let path = match self.h.containers.log_file(&self.container_id).await {
            Ok(p) => p,
            Err(e) => {
                // Upstream has answered 200 by now: the error is the body.
                let _ = self.tx.send(format!("{e}\n").into_bytes()).await;
                return;
            }
        };
        if let Err(e) = self.read(&path).await {
            tracing::debug!(path = %path.display(), error = %e, "reading container log ended");
            let _ = self.tx.send(format!("{e}\n").into_bytes()).await;
        }
    }

    async fn read(&mut self, path: &std::path::Path) -> Result<(), String> {
        let real = tokio::fs::canonicalize(path)
            .await
            .map_err(|e| format!("failed to try resolving symlinks in path {:?}: {e}", path.display().to_string()))?;
        // Only within the pod log folder (see `crate::confined`).
        let root = self.h.options.pod_logs_dir.clone();
        let open = |p: PathBuf| {
            let root = root.clone();
            async move {
                crate::confined::open_async(&p, &root)
                    .await
                    .map(|o| tokio::fs::File::from_std(o.file))
                    .map_err(|e| format!("failed to open log file {:?}: {e}", p.display().to_string()))
            }
        };
        let mut file = open(real.clone()).await?;
        let len = file.metadata().await.map_err(|e| e.to_string())?.len();
        if let Some(n) = self.tail {
            let at = cri::tail_offset(&mut file, len, n).await.map_err(|e| e.to_string())?;
            file.seek(std::io::SeekFrom::Start(at)).await.map_err(|e| e.to_string())?;
        }
        // Without follow, a tail reads that many lines and no more (lines written meanwhile are left out).
        let mut budget = if self.follow { None } else { self.tail };
        let mut reader = BufReader::with_capacity(CHUNK, file);
        let mut watch: Option<(notify::RecommendedWatcher, mpsc::Receiver<()>)> = None;
        let mut line = Vec::with_capacity(1024);
        let mut out = Vec::with_capacity(CHUNK);
        let mut ending = false;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).await.map_err(|e| e.to_string())?;
            let complete = line.last() == Some(&b'\n');
            if complete || (n > 0 && !self.follow) {
                if !self.writer.push(&line, &mut out) {
                    tracing::debug!(line = %String::from_utf8_lossy(&line), "failed to parse a log line; skipped");
                }
                if let Some(b) = budget.as_mut() {
                    *b = b.saturating_sub(1);
                }
                if self.writer.full() || budget == Some(0) {
                    break;
                }
                if out.len() >= CHUNK && !self.send(&mut out).await {
                    return Ok(());
                }
                continue;
            }
            // End of the file (an incomplete line is read again once it is complete).
            if n > 0 {
                reader.seek(std::io::SeekFrom::Current(-(n as i64))).await.map_err(|e| e.to_string())?;
            }
            if !self.send(&mut out).await {
                return Ok(());
            }
            if !self.follow || ending {
                break;
            }
            if watch.is_none() {
                watch = Some(watch_dir(&real)?);
                continue; // read once more: a write may have come before the watch.
            }
            if !self.h.containers.is_running(&self.container_id).await {
                ending = true; // drain what is left, then stop.
                continue;
            }
            let (_, events) = watch.as_mut().expect("set above");
            match self.wait(events).await {
                Wake::ClientGone => return Ok(()),
                Wake::Changed => {}
            }
            if rotated(&real, reader.get_ref()).await {
                // Drain the old file first, then go on with the new one.
                let mut rest = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut rest).await.map_err(|e| e.to_string())?;
                for l in rest.split_inclusive(|b| *b == b'\n').filter(|l| l.ends_with(b"\n")) {
                    self.writer.push(l, &mut out);
                }
                reader = BufReader::with_capacity(CHUNK, open(real.clone()).await?);
            }
        }
        self.send(&mut out).await;
        Ok(())
    }

    async fn send(&self, out: &mut Vec<u8>) -> bool {
        if out.is_empty() {
            return !self.tx.is_closed();
        }
        let chunk = std::mem::replace(out, Vec::with_capacity(CHUNK));
        self.tx.send(chunk).await.is_ok()
    }

    async fn wait(&self, events: &mut mpsc::Receiver<()>) -> Wake {
        tokio::select! {
            _ = self.tx.closed() => Wake::ClientGone,
            _ = events.recv() => Wake::Changed,
            _ = tokio::time::sleep(FORCE_CHECK) => Wake::Changed,
        }
    }
}

/// Watches the folder of `path` (as upstream: the runtime recreates the file on rotation).
fn watch_dir(path: &std::path::Path) -> Result<(notify::RecommendedWatcher, mpsc::Receiver<()>), String> {
    use notify::Watcher;
    let (tx, rx) = mpsc::channel(1);
    let mut w = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
        let _ = tx.try_send(());
    })
    .map_err(|e| format!("failed to create fsnotify watcher: {e}"))?;
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    w.watch(dir, notify::RecursiveMode::NonRecursive).map_err(|e| format!("failed to watch directory {dir:?}: {e}"))?;
    Ok((w, rx))
}

/// Whether `path` is now another file than the one open.
async fn rotated(path: &std::path::Path, open: &tokio::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (tokio::fs::metadata(path).await, open.metadata().await) {
        (Ok(a), Ok(b)) => a.ino() != b.ino() || a.dev() != b.dev(),
        _ => false,
    }
}

pub(crate) fn routes(r: axum::Router<Handlers>) -> axum::Router<Handlers> {
    r.route("/containerLogs/{ns}/{pod}/{container}", axum::routing::get(container_logs))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod flush_tests {
    use super::FlushBeforeEnd;
    use futures::Stream;
    use std::task::{Context, Poll, Waker};

    #[test]
    fn the_end_of_the_body_waits_one_poll_after_the_last_chunk() {
        let mut s = FlushBeforeEnd::new(tokio_stream::iter(vec![1, 2]));
        let mut cx = Context::from_waker(Waker::noop());
        let mut poll = || std::pin::Pin::new(&mut s).poll_next(&mut cx);
        assert_eq!(poll(), Poll::Ready(Some(1)));
        assert_eq!(poll(), Poll::Ready(Some(2)));
        assert_eq!(poll(), Poll::Pending, "the data is flushed before the end");
        assert_eq!(poll(), Poll::Ready(None));
        let mut empty = FlushBeforeEnd::new(tokio_stream::iter(Vec::<u8>::new()));
        assert_eq!(std::pin::Pin::new(&mut empty).poll_next(&mut cx), Poll::Ready(None), "nothing to flush");
    }
}

//! The static pod folder (`pkg/kubelet/config/file.go`, `file_linux.go`).
//!
//! [`FileSource::run`] reads every manifest in `staticPodPath` (a folder, or a single file) at start, again
//! every `fileCheckFrequency`, and shortly after any file-system event in the folder; each read sends the full
//! set to the merge. Hidden files (`.name`) are ignored, as upstream. A manifest that does not decode or fails the
//! apiserver's validation ([`crate::validation`]), or a second pod with the same name, is refused with a warning
//! naming the file and the reason; the refusal rides with the set to the merge, which records a `FailedValidation`
//! event, once: when the refusal first appears. The other pods are sent as usual, so they keep running. A folder that does not exist is an empty source (upstream logs and waits for it).
//! The task ends when its cancellation token fires.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubelet_types::{Pod, PodSource};
use notify::Watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::manifest::{MAX_MANIFEST_BYTES, READ_LIMIT_REACHED, static_pod_from_file};
use super::{RefusedManifest, SourceUpdate, drop_duplicates, fresh_refusals};

/// File-system events that arrive together are coalesced for this long before a re-read (an atomic rename comes as
/// several events); a file caught half-written is refused and read again at its next event, as upstream.
const EVENT_DEBOUNCE: Duration = Duration::from_millis(1);

/// The static pod folder source.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    node_name: String,
    period: Duration,
    out: mpsc::Sender<SourceUpdate>,
}

/// Result of reading the folder once.
#[derive(Debug, Default)]
pub struct ReadResult {
    /// Accepted pods.
    pub pods: Vec<Pod>,
    /// Refused manifests.
    pub refused: Vec<RefusedManifest>,
}

/// Reads every manifest under `path` (sorted by file name).
pub fn read_manifests(path: &Path, node_name: &str) -> ReadResult {
    let mut res = ReadResult::default();
    let files: Vec<PathBuf> = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => match std::fs::read_dir(path) {
            Ok(rd) => {
                let mut v: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .filter(|e| e.file_type().map(|t| t.is_file() || t.is_symlink()).unwrap_or(false))
                    .map(|e| e.path())
                    .collect();
                v.sort();
                v
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e, "unable to read static pod path");
                return res;
            }
        },
        Ok(_) => vec![path.to_path_buf()],
        Err(_) => return res,
    };
    let mut decoded = vec![];
    for f in files {
        let origin = f.to_string_lossy().into_owned();
        let text = match read_at_most(&f) {
            Ok(t) => t,
            Err(e) => {
                res.refused.push(RefusedManifest::new(origin.clone(), format!("{origin}: unable to read: {e}"), None));
                continue;
            }
        };
        match static_pod_from_file(&text, &origin, node_name) {
            Ok(pod) => decoded.push((origin, pod)),
            Err(e) => {
                let pod = e.pod().cloned();
                res.refused.push(RefusedManifest::new(origin, e.to_string(), pod));
            }
        }
    }
    let (pods, duplicates) = drop_duplicates(decoded, PodSource::File);
    res.pods = pods;
    res.refused.extend(duplicates);
    res
}

/// A manifest's text, read up to [`MAX_MANIFEST_BYTES`] (`utilio.ReadAtMost`: reaching the limit is an error).
fn read_at_most(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?.take(MAX_MANIFEST_BYTES as u64).read_to_end(&mut buf)?;
    if buf.len() >= MAX_MANIFEST_BYTES {
        return Err(std::io::Error::other(READ_LIMIT_REACHED));
    }
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Whether a file-system event can change the manifests (`file_linux.go` watches create, delete, modify, move
/// and attribute changes). Reads are not changes: the source's own reading must not trigger a re-read.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{MetadataKind, ModifyKind};
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

impl FileSource {
    /// A source reading `path` every `period`, for node `node_name`.
    pub fn new(path: PathBuf, node_name: String, period: Duration, out: mpsc::Sender<SourceUpdate>) -> Self {
        Self { path, node_name, period, out }
    }

    /// Reads the folder; logs the refusals that were not there at the previous read and returns them with the
    /// pods, so each is logged and becomes an event once, when it first appears, not at every period.
    pub(crate) fn read_and_log(&self, last_refused: &mut Vec<RefusedManifest>) -> (Vec<Pod>, Vec<RefusedManifest>) {
        let r = read_manifests(&self.path, &self.node_name);
        let new = fresh_refusals(last_refused, r.refused);
        for m in &new {
            warn!(file = %m.origin, reason = %m.reason, "static pod manifest refused; other pods are unaffected");
        }
        (r.pods, new)
    }

    /// Reads until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let (ev_tx, mut ev_rx) = mpsc::channel::<()>(1);
        let watch_dir = if self.path.is_dir() {
            self.path.clone()
        } else {
            self.path.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if res.is_ok_and(|e| is_change(&e.kind)) {
                let _ = ev_tx.try_send(());
            }
        })
        .ok();
        let mut watching = false;
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refused = vec![];
        loop {
            if !watching && let Some(w) = watcher.as_mut() {
                watching = w.watch(&watch_dir, notify::RecursiveMode::NonRecursive).is_ok();
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
                Some(()) = ev_rx.recv() => {
                    tokio::time::sleep(EVENT_DEBOUNCE).await;
                    while ev_rx.try_recv().is_ok() {}
                    debug!(path = %self.path.display(), "static pod path changed");
                }
            }
            let (pods, new_refusals) = self.read_and_log(&mut refused);
            let update =
                SourceUpdate::set(PodSource::File, pods.into_iter().map(Arc::new).collect()).with_refused(new_refusals);
            if self.out.send(update).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\nspec:\n  containers:\n  - name: app\n    image: busybox\n";

    #[test]
    fn bad_and_duplicate_manifests_are_refused_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), "kind: Pod\nspec: [").unwrap();
        std::fs::write(dir.path().join("c.yaml"), POD.replace("NAME", "a")).unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), POD.replace("NAME", "h")).unwrap();
        std::fs::write(dir.path().join("d.json"), r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"d"},"spec":{"containers":[{"name":"x","image":"y"}]}}"#).unwrap();
        let r = read_manifests(dir.path(), "n1");
        let names: Vec<_> = r.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, vec!["a-n1", "d-n1"]);
        assert_eq!(r.refused.len(), 2);
        assert!(r.refused[0].origin.ends_with("b.yaml"));
        assert!(r.refused[1].reason.contains("duplicate pod \"default/a-n1\""), "{}", r.refused[1].reason);
    }

    #[test]
    fn an_invalid_manifest_is_refused_once_and_the_others_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        let lots = POD.replace("NAME", "big") + "    resources:\n      limits:\n        memory: lots\n";
        std::fs::write(dir.path().join("big.yaml"), lots).unwrap();
        std::fs::write(dir.path().join("c.yaml"), POD.replace("NAME", "c")).unwrap();
        let (tx, _rx) = mpsc::channel(1);
        let src = FileSource::new(dir.path().to_path_buf(), "n1".into(), Duration::from_secs(20), tx);
        let mut last = vec![];
        let (pods, new) = src.read_and_log(&mut last);
        let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, vec!["a-n1", "c-n1"]);
        assert_eq!(new.len(), 1);
        let file = dir.path().join("big.yaml").to_string_lossy().into_owned();
        assert!(new[0].reason.starts_with(&format!("{file}: invalid pod: [")), "{}", new[0].reason);
        assert!(new[0].reason.contains("spec.containers[0].resources.limits[memory]: Invalid value: \"lots\""));
        assert_eq!(new[0].pod.as_ref().unwrap().name.as_deref(), Some("big-n1"));
        // The next read refuses it again but does not report it again.
        let (pods, new) = src.read_and_log(&mut last);
        assert_eq!((pods.len(), new.len()), (2, 0));
    }

    #[test]
    fn a_manifest_of_10_mib_or_more_is_refused_unread() {
        // As upstream's maxConfigLength; /dev/zero behind a link would otherwise be read until memory runs out.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        let big = POD.replace("NAME", "big") + &format!("# {}\n", "x".repeat(MAX_MANIFEST_BYTES));
        std::fs::write(dir.path().join("big.yaml"), big).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
        let r = read_manifests(dir.path(), "n1");
        assert_eq!(r.pods.len(), 1);
        assert_eq!(r.refused.len(), 2);
        for refused in &r.refused {
            assert!(refused.reason.ends_with("unable to read: the read limit is reached"), "{}", refused.reason);
        }
    }

    #[tokio::test]
    async fn sends_the_folder_and_its_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), POD.replace("NAME", "a")).unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let src = FileSource::new(dir.path().to_path_buf(), "n1".into(), Duration::from_secs(20), tx);
        let task = tokio::spawn(src.run(cancel.clone()));
        assert_eq!(rx.recv().await.unwrap().pods.len(), 1);
        std::fs::write(dir.path().join("b.yaml"), POD.replace("NAME", "b")).unwrap();
        // The file-system event triggers a re-read well before the 20 s period.
        let u = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let u = rx.recv().await.unwrap();
                if u.pods.len() == 2 {
                    return u;
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(u.source, PodSource::File);
        // Reading the folder is not a change: no re-read follows until the next event or period.
        let quiet = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
        assert!(quiet.is_err(), "the source re-read the folder without a change");
        cancel.cancel();
        task.await.unwrap();
    }
}

//! The apiserver pod source (`pkg/kubelet/config/apiserver.go`: a reflector on pods with
//! `spec.nodeName=<node>`).
//!
//! [`ApiSource::run`] lists and sends the complete set, then watches from the list's resourceVersion and sends
//! each event as a delta (the pod added or changed, or the pod removed). Upstream's UndeltaStore sends the whole set
//! after every event instead, which its merge walks in full: with N pods that is O(N) per event and O(N²) to start
//! N pods; a delta costs what it changes and the merge's result is the same. A watch that ends, breaks or cannot be opened because the
//! apiserver is unreachable is resumed from the last resourceVersion seen, with back-off (1 s doubling to 30 s), as
//! upstream's reflector does; one that expires (410 Gone) or fails otherwise is followed by a fresh list. Running pods are never disturbed by any of this: the merge only sees complete sets, and none is
//! sent while the apiserver is away. Ends when cancelled.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kubelet_apiclient::{ApiError, PodWatchApi, WatchEvent};
use kubelet_types::{PodSource, PodUid};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SourceUpdate;

const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The apiserver source.
pub struct ApiSource {
    api: Arc<dyn PodWatchApi>,
    node_name: String,
    out: mpsc::Sender<SourceUpdate>,
}

impl ApiSource {
    /// A source of the pods bound to `node_name`.
    pub fn new(api: Arc<dyn PodWatchApi>, node_name: String, out: mpsc::Sender<SourceUpdate>) -> Self {
        Self { api, node_name, out }
    }

    async fn send(&self, update: SourceUpdate) -> bool {
        self.out.send(update).await.is_ok()
    }

    /// Lists and watches until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let mut delay = BACKOFF_START;
        'relist: loop {
            let listed = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.api.list_pods(&self.node_name) => r,
            };
            let (items, mut rv) = match listed {
                Ok(r) => r,
                Err(e) => {
                    warn!(node = %self.node_name, error = %e, retryIn = ?delay, "failed to list pods from the apiserver");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            delay = BACKOFF_START;
            debug!(pods = items.len(), resourceVersion = %rv, "listed pods from the apiserver");
            if !self.send(SourceUpdate::set(PodSource::Api, items.into_iter().map(Arc::new).collect())).await {
                return;
            }
            loop {
                let watched = tokio::select! {
                    _ = cancel.cancelled() => return,
                    w = self.api.watch_pods(&self.node_name, &rv) => w,
                };
                let mut stream = match watched {
                    Ok(s) => s,
                    Err(ApiError::Gone(m)) => {
                        info!(message = %m, "watch of pods expired (410 Gone); listing again");
                        continue 'relist;
                    }
                    Err(e @ ApiError::Unavailable(_)) => {
                        // As upstream's reflector: an unreachable apiserver is waited for and the watch resumed
                        // from the same resourceVersion; only its expiry (410 Gone) costs a list.
                        warn!(error = %e, retryIn = ?delay, "failed to watch pods; resuming the watch");
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(delay) => {}
                        }
                        delay = (delay * 2).min(BACKOFF_MAX);
                        continue;
                    }
                    Err(e) => {
                        warn!(error = %e, "failed to watch pods; listing again");
                        continue 'relist;
                    }
                };
                loop {
                    let next = tokio::select! {
                        _ = cancel.cancelled() => return,
                        n = stream.next() => n,
                    };
                    let ev = match next {
                        // The server ended the watch (timeout): resume from where we are.
                        None => break,
                        Some(Ok(ev)) => ev,
                        Some(Err(ApiError::Gone(m))) => {
                            info!(message = %m, "watch of pods expired (410 Gone); listing again");
                            continue 'relist;
                        }
                        Some(Err(e @ ApiError::Unavailable(_))) => {
                            warn!(error = %e, "watch of pods broken; resuming it");
                            break;
                        }
                        Some(Err(e)) => {
                            warn!(error = %e, "watch of pods failed; listing again");
                            continue 'relist;
                        }
                    };
                    delay = BACKOFF_START;
                    let update = match ev {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                            rv = p.metadata.resource_version.clone().unwrap_or(rv);
                            SourceUpdate::delta(PodSource::Api, vec![Arc::new(p)], vec![])
                        }
                        WatchEvent::Deleted(p) => {
                            rv = p.metadata.resource_version.clone().unwrap_or(rv);
                            SourceUpdate::delta(
                                PodSource::Api,
                                vec![],
                                vec![PodUid(p.metadata.uid.unwrap_or_default())],
                            )
                        }
                        WatchEvent::Bookmark(v) => {
                            rv = v;
                            continue;
                        }
                    };
                    if !self.send(update).await {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use kubelet_apiclient::fake::FakeApi;
    use kubelet_types::Pod;

    fn pod(name: &str, node: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.spec = Some(PodSpec { node_name: Some(node.into()), ..Default::default() });
        p
    }

    #[tokio::test]
    async fn lists_then_follows_the_watch_and_survives_outages() {
        let api = Arc::new(FakeApi::new());
        let a = api.put_pod(pod("a", "n1"));
        api.put_pod(pod("x", "n2"));
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(ApiSource::new(api.clone(), "n1".into(), tx).run(cancel.clone()));
        let names = |u: &SourceUpdate| u.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        // The list: a complete set.
        let u = rx.recv().await.unwrap();
        assert_eq!((u.source, names(&u), u.removed), (PodSource::Api, vec!["a".to_string()], None));
        // Then each watch event as a delta.
        api.put_pod(pod("b", "n1"));
        let u = rx.recv().await.unwrap();
        assert_eq!((names(&u), u.removed), (vec!["b".to_string()], Some(vec![])));
        api.remove_pod("default", "a");
        let u = rx.recv().await.unwrap();
        assert_eq!((names(&u), u.removed), (vec![], Some(vec![PodUid(a.metadata.uid.clone().unwrap())])));
        // The watch ends and resuming it gets 410 Gone: the source lists again and sends the complete set.
        api.clear_calls();
        api.expire_watches();
        let u = rx.recv().await.unwrap();
        assert_eq!((names(&u), u.removed), (vec!["b".to_string()], None));
        assert!(api.calls().iter().any(|c| c.starts_with("list_pods")), "{:?}", api.calls());
        api.put_pod(pod("c", "n1"));
        assert_eq!(names(&rx.recv().await.unwrap()), vec!["c"], "watching again after the relist");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_apiserver_is_waited_for_and_the_watch_resumed_without_a_list() {
        let api = Arc::new(FakeApi::new());
        api.put_pod(pod("a", "n1"));
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(ApiSource::new(api.clone(), "n1".into(), tx).run(cancel.clone()));
        rx.recv().await.unwrap();
        api.put_pod(pod("b", "n1"));
        rx.recv().await.unwrap();
        api.clear_calls();
        // The apiserver goes away: the watch breaks and cannot be opened again for a while.
        api.set_down(true);
        api.end_watches();
        tokio::time::sleep(Duration::from_secs(20)).await;
        api.set_down(false);
        // The fake replays nothing: the pod is added once the watch is open again.
        while !api.calls().iter().any(|c| c.starts_with("watch_pods")) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        api.put_pod(pod("c", "n1"));
        let u = rx.recv().await.unwrap();
        let names: Vec<_> = u.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!((names, u.removed), (vec!["c".to_string()], Some(vec![])), "a delta of the resumed watch");
        let calls = api.calls();
        assert!(!calls.iter().any(|c| c.starts_with("list_pods")), "no list: {calls:?}");
        let resumed_at = calls[0].rsplit(' ').next().unwrap();
        assert!(calls.iter().all(|c| c.starts_with("watch_pods n1 ") && c.ends_with(resumed_at)), "{calls:?}");
        cancel.cancel();
        task.await.unwrap();
    }
}

//! The static pod URL (`pkg/kubelet/config/http.go`).
//!
//! [`HttpSource::run`] fetches `staticPodURL` at start and every `httpCheckFrequency`, with the
//! `staticPodURLHeader` headers. The body is a Pod or a PodList (YAML or JSON). A fetch failure is logged and the
//! previous set of pods is kept (nothing is sent); so is a body that does not decode or has a pod that fails the
//! apiserver's validation, whose refusal is sent alone, once, for its `FailedValidation` event. A second pod with
//! the same name is dropped, the others kept. An empty body sends an empty set, as upstream.
//! Only `http://` URLs are supported for now. The task ends when its cancellation token fires.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kubelet_types::{Pod, PodSource};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::manifest::{
    MAX_MANIFEST_BYTES, ManifestError, READ_LIMIT_REACHED, StaticOrigin, accept_static_pod, decode_pods,
};
use super::{RefusedManifest, SourceUpdate, drop_duplicates, fresh_refusals};

/// Fetches taking longer than this fail (upstream's client timeout).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The static pod URL source.
#[derive(Debug)]
pub struct HttpSource {
    url: String,
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    period: Duration,
    out: mpsc::Sender<SourceUpdate>,
}

/// Decodes, defaults, validates and normalises the pods of a URL response body.
pub fn pods_from_body(body: &str, url: &str, node_name: &str) -> Result<Vec<Pod>, ManifestError> {
    decode_pods(body, url)?.into_iter().map(|p| accept_static_pod(p, StaticOrigin::Url(url), node_name)).collect()
}

impl HttpSource {
    /// A source fetching `url` every `period`.
    pub fn new(
        url: String,
        headers: BTreeMap<String, Vec<String>>,
        node_name: String,
        period: Duration,
        out: mpsc::Sender<SourceUpdate>,
    ) -> Self {
        Self { url, headers, node_name, period, out }
    }

    async fn fetch(&self) -> Result<String, String> {
        let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut req = hyper::Request::get(&self.url);
        for (k, vs) in &self.headers {
            for v in vs {
                req = req.header(k, v);
            }
        }
        let req = req.body(Empty::new()).map_err(|e| format!("invalid request: {e}"))?;
        let resp = tokio::time::timeout(FETCH_TIMEOUT, client.request(req))
            .await
            .map_err(|_| format!("timed out after {FETCH_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        // At most MAX_MANIFEST_BYTES - 1 bytes, as upstream's ReadAtMost (reaching the limit is an error).
        let limited = http_body_util::Limited::new(resp.into_body(), MAX_MANIFEST_BYTES - 1);
        let body = limited
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() { READ_LIMIT_REACHED.to_string() } else { e.to_string() }
            })?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("{}: {}", status, String::from_utf8_lossy(&body)));
        }
        String::from_utf8(body.to_vec()).map_err(|e| format!("body is not UTF-8: {e}"))
    }

    /// Fetches until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_refused: Vec<RefusedManifest> = vec![];
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let body = match self.fetch().await {
                Ok(b) => b,
                Err(e) => {
                    warn!(url = %self.url, error = %e, "failed to read pods from URL");
                    continue;
                }
            };
            let pods = if body.trim().is_empty() {
                warn!(url = %self.url, "zero-length data received from the static pod URL");
                vec![]
            } else {
                match pods_from_body(&body, &self.url, &self.node_name) {
                    Ok(p) => p,
                    Err(e) => {
                        // Logged, and sent for its event, when it first appears; the previous pods stay.
                        let refused = RefusedManifest::new(self.url.clone(), e.to_string(), e.pod().cloned());
                        if !last_refused.contains(&refused) {
                            warn!(url = %self.url, reason = %e, "static pod URL content refused; keeping the previous pods");
                            last_refused = vec![refused.clone()];
                            if self.out.send(SourceUpdate::refusals(PodSource::Http, vec![refused])).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                }
            };
            let (pods, refused) =
                drop_duplicates(pods.into_iter().map(|p| (self.url.clone(), p)).collect(), PodSource::Http);
            let new = fresh_refusals(&mut last_refused, refused);
            for r in &new {
                warn!(url = %self.url, reason = %r.reason, "static pod refused; other pods are unaffected");
            }
            let update = SourceUpdate::set(PodSource::Http, pods.into_iter().map(Arc::new).collect()).with_refused(new);
            if self.out.send(update).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn fetches_with_headers() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).to_lowercase();
            let body = "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"u\"},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}";
            let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            s.write_all(resp.as_bytes()).await.unwrap();
            req.contains("x-token: t1")
        });
        let (tx, mut rx) = mpsc::channel(2);
        let headers = [("X-Token".to_string(), vec!["t1".to_string()])].into();
        let src = HttpSource::new(format!("http://{addr}/pods"), headers, "n1".into(), Duration::from_secs(20), tx);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(src.run(cancel.clone()));
        let u = rx.recv().await.unwrap();
        assert_eq!(u.source, PodSource::Http);
        assert_eq!(u.pods[0].metadata.name.as_deref(), Some("u-n1"));
        assert_eq!(u.pods[0].metadata.annotations.as_ref().unwrap()["kubernetes.io/config.source"], "http");
        assert!(server.await.unwrap(), "header was not sent");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_body_of_10_mib_or_more_is_refused() {
        // As upstream's maxConfigLength: an endless response must not take the kubelet's memory.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            s.write_all(head.as_bytes()).await.unwrap();
            let chunk = format!("100000\r\n{}\r\n", "#".repeat(0x100000));
            // 64 MiB unless the client hangs up first.
            for _ in 0..64 {
                if s.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
        let (tx, _rx) = mpsc::channel(2);
        let src = HttpSource::new(
            format!("http://{addr}/pods"),
            Default::default(),
            "n1".into(),
            Duration::from_secs(20),
            tx,
        );
        assert_eq!(src.fetch().await, Err(READ_LIMIT_REACHED.to_string()));
        server.await.unwrap();
    }
}

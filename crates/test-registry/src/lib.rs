//! A tiny OCI distribution registry for tests (the read side of the distribution spec: `/v2/`, manifests and
//! blobs by tag or digest, HEAD and GET). It serves the manifest of an OCI image layout on disk under any
//! repository and tag the test registers, on 127.0.0.1 over plain HTTP, which containerd accepts for
//! `localhost:PORT/...` names. It counts manifest requests per repository so a test can tell whether a pull
//! happened, and can be told to fail pulls.
//!
//! Started by the test that uses it and stopped when dropped. Nothing is pushed; nothing leaves the machine.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

#[derive(Default)]
struct State {
    /// "repo:tag" -> served.
    tags: HashMap<String, ()>,
    /// Manifest requests per repository.
    pulls: HashMap<String, usize>,
    /// Repositories whose pulls fail with 500.
    broken: HashMap<String, ()>,
}

/// A running registry.
pub struct Registry {
    port: u16,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reply(code: StatusCode, ctype: &str, digest: Option<&str>, body: Vec<u8>, head: bool) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(code).header("content-type", ctype).header("content-length", body.len());
    if let Some(d) = digest {
        r = r.header("docker-content-digest", d);
    }
    r = r.header("docker-distribution-api-version", "registry/2.0");
    r.body(Full::new(if head { Bytes::new() } else { Bytes::from(body) })).expect("valid response")
}

fn error(code: StatusCode, err: &str, head: bool) -> Response<Full<Bytes>> {
    let body = serde_json::json!({"errors": [{"code": err, "message": err.to_lowercase().replace('_', " ")}]});
    reply(code, "application/json", None, body.to_string().into_bytes(), head)
}

impl Registry {
    /// Serves the first manifest of the OCI layout at `layout` (a folder with `index.json` and `blobs/`).
    pub async fn start(layout: &Path) -> std::io::Result<Registry> {
        let index: serde_json::Value = serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
        let manifest = index["manifests"][0]["digest"].as_str().unwrap_or_default().to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new(State::default()));
        let (st, dir) = (state.clone(), layout.to_path_buf());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (st, dir, manifest) = (st.clone(), dir.clone(), manifest.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let resp = handle(&req, &st, &dir, &manifest);
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Registry { port, state, task })
    }

    /// The registry's host for image names: `localhost:PORT`.
    pub fn host(&self) -> String {
        format!("localhost:{}", self.port)
    }

    /// Serves the image as `repo:tag` from now on; returns the full image name.
    pub fn add(&self, repo: &str, tag: &str) -> String {
        self.state.lock().unwrap().tags.insert(format!("{repo}:{tag}"), ());
        format!("{}/{repo}:{tag}", self.host())
    }

    /// Makes every pull of `repo` fail with a server error (or work again).
    pub fn set_broken(&self, repo: &str, broken: bool) {
        let mut st = self.state.lock().unwrap();
        if broken {
            st.broken.insert(repo.to_string(), ());
        } else {
            st.broken.remove(repo);
        }
    }

    /// How many manifest requests `repo` has seen (a pull resolves its tag at least once).
    pub fn pulls(&self, repo: &str) -> usize {
        self.state.lock().unwrap().pulls.get(repo).copied().unwrap_or(0)
    }
}

fn blob(dir: &Path, digest: &str) -> Option<Vec<u8>> {
    let hex = digest.strip_prefix("sha256:")?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    std::fs::read(PathBuf::from(dir).join("blobs/sha256").join(hex)).ok()
}

fn handle(
    req: &Request<hyper::body::Incoming>,
    st: &Mutex<State>,
    dir: &Path,
    manifest: &str,
) -> Response<Full<Bytes>> {
    let head = req.method() == Method::HEAD;
    if req.method() != Method::GET && !head {
        return error(StatusCode::METHOD_NOT_ALLOWED, "UNSUPPORTED", head);
    }
    let path = req.uri().path();
    if path == "/v2/" || path == "/v2" {
        return reply(StatusCode::OK, "application/json", None, b"{}".to_vec(), head);
    }
    let Some(rest) = path.strip_prefix("/v2/") else { return error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", head) };
    if let Some((repo, reference)) = rest.rsplit_once("/manifests/") {
        let mut s = st.lock().unwrap();
        *s.pulls.entry(repo.to_string()).or_default() += 1;
        if s.broken.contains_key(repo) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", head);
        }
        let known = if reference.starts_with("sha256:") {
            reference == manifest && s.tags.keys().any(|t| t.starts_with(&format!("{repo}:")))
        } else {
            s.tags.contains_key(&format!("{repo}:{reference}"))
        };
        drop(s);
        return match known.then(|| blob(dir, manifest)).flatten() {
            Some(body) => reply(StatusCode::OK, MANIFEST_TYPE, Some(manifest), body, head),
            None => error(StatusCode::NOT_FOUND, "MANIFEST_UNKNOWN", head),
        };
    }
    if let Some((_repo, digest)) = rest.rsplit_once("/blobs/") {
        return match blob(dir, digest) {
            Some(body) => reply(StatusCode::OK, "application/octet-stream", Some(digest), body, head),
            None => error(StatusCode::NOT_FOUND, "BLOB_UNKNOWN", head),
        };
    }
    error(StatusCode::NOT_FOUND, "NAME_UNKNOWN", head)
}

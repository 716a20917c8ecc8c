//! `/logs/` (`InstallSystemLogHandler`, the kubelet's `logServer`): the files under `/var/log` as Go's
//! `http.FileServer` serves them: a folder as an HTML listing (a folder named without its trailing slash is
//! redirected to it), a file as it is, a missing path 404 `404 page not found`. Paths are cleaned first, so
//! `..` cannot leave the folder; unlike upstream, a symbolic link leading out of it is not followed either (it is
//! `404 page not found`, see [`crate::confined`]), and only regular files and folders are served. With
//! `enableSystemLogHandler: false` the endpoint answers 405 `logs endpoint is disabled.`. Range requests and the
//! `NodeLogQuery` journal queries are not served.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{Handlers, text};
use crate::auth::clean_path;
use crate::confined::{self, ConfinedError};

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&#34;").replace('\'', "&#39;")
}

fn escape_href(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn serve(h: Handlers, rel: String) -> Response {
    if !h.options.enable_system_log_handler {
        return text(StatusCode::METHOD_NOT_ALLOWED, "logs endpoint is disabled.\n");
    }
    let not_found = || text(StatusCode::NOT_FOUND, "404 page not found\n");
    if rel.split('/').any(|seg| seg == "..") {
        return not_found();
    }
    let cleaned = clean_path(&rel);
    let root = &h.options.system_log_dir;
    let path = root.join(cleaned.trim_start_matches('/'));
    let opened = match confined::open_async(&path, root).await {
        Ok(o) => o,
        Err(ConfinedError::Io(e)) => {
            return match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => not_found(),
                std::io::ErrorKind::PermissionDenied => text(StatusCode::FORBIDDEN, "403 Forbidden\n"),
                _ => text(StatusCode::INTERNAL_SERVER_ERROR, "500 Internal Server Error\n"),
            };
        }
        Err(e) => {
            tracing::debug!(error = %e, "refusing a system log path");
            return not_found();
        }
    };
    if opened.meta.is_dir() {
        if !rel.is_empty() && !rel.ends_with('/') {
            let last = rel.rsplit('/').next().unwrap_or("");
            return (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, format!("{last}/"))]).into_response();
        }
        let mut names = vec![];
        // The open folder itself is listed, not whatever its name leads to by now.
        let Ok(mut rd) = tokio::fs::read_dir(opened.fd_path()).await else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "Error reading directory\n");
        };
        while let Ok(Some(e)) = rd.next_entry().await {
            let mut n = e.file_name().to_string_lossy().into_owned();
            if e.file_type().await.is_ok_and(|t| t.is_dir()) {
                n.push('/');
            }
            names.push(n);
        }
        drop(opened);
        names.sort();
        let mut body =
            String::from("<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n");
        for n in names {
            body.push_str(&format!("<a href=\"{}\">{}</a>\n", escape_href(&n), escape_html(&n)));
        }
        body.push_str("</pre>\n");
        return ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    }
    let ctype =
        if path.extension().is_some_and(|e| e == "gz") { "application/gzip" } else { "text/plain; charset=utf-8" };
    let len = opened.meta.len().to_string();
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(opened.file)));
    ([(header::CONTENT_TYPE, ctype), (header::CONTENT_LENGTH, len.as_str())], body).into_response()
}

async fn root(State(h): State<Handlers>) -> Response {
    serve(h, String::new()).await
}

async fn sub(State(h): State<Handlers>, Path(rel): Path<String>) -> Response {
    serve(h, rel).await
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/logs/", get(root)).route("/logs/{*rel}", get(sub))
}

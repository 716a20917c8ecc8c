//! `rkubelet explain [NAMESPACE/NAME] [--server URL] [--token TOKEN | --token-file FILE]
//! [--client-certificate FILE --client-key FILE]`: asks a running rkubelet's `/debug/explain` where a pod (or every
//! pod of the node) stands and why, and prints it. The kubelet's serving certificate is not verified (it is usually
//! self-signed; the apiserver does not verify it by default either); the request is authenticated and authorized
//! like any other on the kubelet's port (`nodes/proxy`).

use std::sync::Arc;

use http_body_util::BodyExt;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

/// The command's options.
#[derive(Debug, Default, PartialEq)]
pub struct Options {
    pub server: String,
    pub token: Option<String>,
    pub cert: Option<(String, String)>,
    pub pod: Option<(String, String)>,
}

/// Parses the arguments after `explain`.
pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { server: "https://127.0.0.1:10250".into(), ..Default::default() };
    let (mut cert, mut key) = (None, None);
    let mut it = args.iter();
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{flag} needs a value"));
        match flag {
            "--server" => o.server = value()?.trim_end_matches('/').to_string(),
            "--token" => o.token = Some(value()?),
            "--token-file" => o.token = Some(read(&value()?)?.trim().to_string()),
            "--client-certificate" => cert = Some(read(&value()?)?),
            "--client-key" => key = Some(read(&value()?)?),
            f if f.starts_with('-') => return Err(format!("unknown flag {f}")),
            pod => {
                let (ns, name) = pod.split_once('/').ok_or(format!("{pod:?}: want NAMESPACE/NAME"))?;
                o.pod = Some((ns.to_string(), name.to_string()));
            }
        }
    }
    match (cert, key) {
        (Some(c), Some(k)) => o.cert = Some((c, k)),
        (None, None) => {}
        _ => return Err("--client-certificate and --client-key go together".into()),
    }
    Ok(o)
}

/// One explanation as text.
pub fn render(v: &serde_json::Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let head = format!("{}/{} ({}): {}", s("namespace"), s("name"), s("phase"), s("step"));
    let blocked = if v["blocked"].as_bool() == Some(true) { "BLOCKED " } else { "" };
    format!("{blocked}{head}\n    {}\n", s("detail"))
}

/// Runs the command: the text to print, or why it failed.
pub async fn run(o: &Options) -> Result<String, String> {
    let path = match &o.pod {
        Some((ns, name)) => format!("/debug/explain/{ns}/{name}"),
        None => "/debug/explain".into(),
    };
    let authority = o.server.strip_prefix("https://").ok_or("--server must be https://HOST:PORT")?.to_string();
    let host = authority.rsplit_once(':').map_or(authority.as_str(), |(h, _)| h).trim_matches(['[', ']']).to_string();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| b.dangerous().with_custom_certificate_verifier(Arc::new(kubelet_prober::http::NoVerify(provider))))
        .map_err(|e| e.to_string())?;
    let cfg = match &o.cert {
        Some((c, k)) => {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(c.as_bytes()).filter_map(Result::ok).collect();
            let key = PrivateKeyDer::from_pem_slice(k.as_bytes()).map_err(|e| format!("client key: {e}"))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(&authority).await.map_err(|e| format!("connect to {authority}: {e}"))?;
    let name = ServerName::try_from(host).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(&path).header("host", &authority);
    if let Some(t) = &o.token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(http_body_util::Empty::<hyper::body::Bytes>::new()).map_err(|e| e.to_string())?;
    let resp = tx.send_request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status();
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    if !code.is_success() {
        return Err(format!("{} {path}: {}", code.as_u16(), body.trim()));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {e}"))?;
    Ok(match v["items"].as_array() {
        Some(items) => items.iter().map(render).collect(),
        None => render(&v),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_rendering() {
        let args = |a: &[&str]| parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = args(&["default/web", "--server=https://10.0.0.1:10250", "--token", "t"]).unwrap();
        assert_eq!(o.pod, Some(("default".into(), "web".into())));
        assert_eq!((o.server.as_str(), o.token.as_deref()), ("https://10.0.0.1:10250", Some("t")));
        assert_eq!(args(&[]).unwrap().server, "https://127.0.0.1:10250");
        assert_eq!(args(&["web"]).unwrap_err(), "\"web\": want NAMESPACE/NAME");
        assert_eq!(args(&["--nope"]).unwrap_err(), "unknown flag --nope");
        let v = serde_json::json!({"namespace": "default", "name": "web", "phase": "Pending", "blocked": true,
            "step": "image pull back-off", "detail": "container app: ErrImagePull: not found"});
        assert_eq!(
            render(&v),
            "BLOCKED default/web (Pending): image pull back-off\n    container app: ErrImagePull: not found\n"
        );
    }
}

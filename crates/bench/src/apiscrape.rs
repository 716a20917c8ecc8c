//! The kubelet API under scrapes: response times of `/stats/summary`, `/metrics/resource` and `/metrics` on the
//! secure port, as Prometheus and metrics-server call them (one kept-alive HTTPS connection, requests one after
//! the other), and rkubelet's CPU per request from `/proc/<pid>/stat` around the series.

use std::time::Duration;

use tokio::time::Instant;

use anyhow::Context;
use http_body_util::BodyExt;
use rustls::pki_types::ServerName;

use crate::fakescale::Percentiles;
use crate::procstat;

/// The paths measured.
pub const PATHS: [&str; 3] = ["/stats/summary", "/metrics/resource", "/metrics"];

/// One endpoint's figures.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The path.
    pub path: &'static str,
    /// Response times (request sent → body read).
    pub latency: Percentiles,
    /// rkubelet's CPU per request.
    pub cpu_per_request: Duration,
    /// Size of the last response.
    pub bytes: usize,
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<hyper::body::Bytes>>;

async fn connect(port: u16) -> anyhow::Result<Sender> {
    let cfg = test_apiserver::proxy::kubelet_client_config(None);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.context("connect to the kubelet API")?;
    let tls = tokio_rustls::TlsConnector::from(cfg).connect(ServerName::try_from("127.0.0.1")?, tcp).await?;
    let (tx, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok(tx)
}

async fn get(tx: &mut Sender, path: &str) -> anyhow::Result<usize> {
    tx.ready().await?;
    let req = hyper::Request::get(path).header("host", "127.0.0.1").body(http_body_util::Empty::new())?;
    let resp = tx.send_request(req).await?;
    anyhow::ensure!(resp.status() == 200, "GET {path}: {}", resp.status());
    Ok(resp.into_body().collect().await?.to_bytes().len())
}

/// The body of one GET on the kubelet API's secure `port`.
pub async fn fetch(port: u16, path: &str) -> anyhow::Result<String> {
    let mut tx = connect(port).await?;
    tx.ready().await?;
    let req = hyper::Request::get(path).header("host", "127.0.0.1").body(http_body_util::Empty::new())?;
    let resp = tx.send_request(req).await?;
    anyhow::ensure!(resp.status() == 200, "GET {path}: {}", resp.status());
    Ok(String::from_utf8_lossy(&resp.into_body().collect().await?.to_bytes()).into_owned())
}

/// Measures each of [`PATHS`] `n` times (after 3 unmeasured requests) against the kubelet `pid` on `port`.
pub async fn measure(pid: u32, port: u16, n: usize) -> anyhow::Result<Vec<Endpoint>> {
    let mut tx = connect(port).await?;
    let mut out = vec![];
    for path in PATHS {
        for _ in 0..3 {
            get(&mut tx, path).await?;
        }
        let cpu0 = procstat::cpu_of(pid).context("rkubelet's CPU")?;
        let mut times = Vec::with_capacity(n);
        let mut bytes = 0;
        for _ in 0..n {
            let t = Instant::now();
            bytes = get(&mut tx, path).await?;
            times.push(t.elapsed());
        }
        let cpu = procstat::cpu_of(pid).context("rkubelet's CPU")?.saturating_sub(cpu0);
        out.push(Endpoint { path, latency: Percentiles::of(times), cpu_per_request: cpu / n.max(1) as u32, bytes });
    }
    Ok(out)
}

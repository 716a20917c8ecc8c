//! `test-apiserver [--port N] [--kubeconfig PATH] [--bootstrap-token ID.SECRET]... [--tls]
//! [--admin-kubeconfig PATH] [--auto-approve-node-csrs] [--no-anonymous]`: runs the test apiserver
//! until killed and prints its URL on the first line of stdout. With `--tls` it serves HTTPS with a
//! generated CA (in the kubeconfigs) and signs approved CSRs; `--admin-kubeconfig` writes a
//! kubeconfig with an admin client certificate.

use std::process::ExitCode;

use test_apiserver::{Options, TestApiServer};

fn usage() -> ExitCode {
    eprintln!(
        "usage: test-apiserver [--port N] [--kubeconfig PATH] [--bootstrap-token ID.SECRET]... [--tls] \
         [--admin-kubeconfig PATH] [--auto-approve-node-csrs] [--no-anonymous]"
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut opts = Options::default();
    let mut kubeconfig = None;
    let mut admin_kubeconfig = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next();
        match a.as_str() {
            "--port" => match value().and_then(|v| v.parse().ok()) {
                Some(p) => opts.port = p,
                None => return usage(),
            },
            "--kubeconfig" => match value() {
                Some(p) => kubeconfig = Some(p),
                None => return usage(),
            },
            "--bootstrap-token" => match value() {
                Some(t) => opts.bootstrap_tokens.push(t),
                None => return usage(),
            },
            "--admin-kubeconfig" => match value() {
                Some(p) => admin_kubeconfig = Some(p),
                None => return usage(),
            },
            "--tls" => opts.tls = Some(Default::default()),
            "--auto-approve-node-csrs" => opts.auto_approve_node_csrs = true,
            "--no-anonymous" => opts.anonymous = None,
            _ => return usage(),
        }
    }
    let server = match TestApiServer::start(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("test-apiserver: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(p) = kubeconfig
        && let Err(e) = server.kubeconfig(&p)
    {
        eprintln!("test-apiserver: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(p) = admin_kubeconfig
        && let Err(e) = server.admin_kubeconfig(&p)
    {
        eprintln!("test-apiserver: {e}");
        return ExitCode::FAILURE;
    }
    println!("{}", server.url());
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("test-apiserver: waiting for a signal: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

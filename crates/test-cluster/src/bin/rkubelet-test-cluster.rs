//! `rkubelet-test-cluster up|down|status|node-kubeconfig NODE PATH [--dir DIR]`: starts (or reuses) the end-to-end
//! tests' control plane and prints its state directory, stops it, says whether it runs, or writes the kubeconfig of
//! a node (`system:node:NODE`) for a kubelet run by hand. `scripts/test.sh` brings it up before the suite
//! and down afterwards; the tests reuse it (see the `test-cluster` crate).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut dir = test_cluster::default_dir();
    let mut cmd = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => match it.next() {
                Some(d) => dir = PathBuf::from(d),
                None => return usage("--dir needs a value"),
            },
            "up" | "down" | "status" => cmd = Some(a.clone()),
            "node-kubeconfig" => match (it.next(), it.next()) {
                (Some(node), Some(path)) => cmd = Some(format!("node-kubeconfig {node} {path}")),
                _ => return usage("node-kubeconfig needs NODE and PATH"),
            },
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let result = match cmd.as_deref() {
        Some("up") => test_cluster::ControlPlane::ensure(&dir).map(|cp| {
            println!("{}", cp.dir.display());
            eprintln!(
                "rkubelet-test-cluster: control plane ready at {}; admin kubeconfig {}",
                cp.server(),
                cp.admin_kubeconfig().display()
            );
        }),
        Some("down") => test_cluster::ControlPlane::down(&dir),
        Some("status") => {
            let cp = test_cluster::ControlPlane { dir: dir.clone(), pki: test_cluster::Pki { dir: dir.join("pki") } };
            if cp.apiserver_ready() {
                println!("running: {}", cp.server());
                Ok(())
            } else {
                println!("not running");
                return ExitCode::from(3);
            }
        }
        Some(c) if c.starts_with("node-kubeconfig ") => {
            let mut parts = c.splitn(3, ' ').skip(1);
            let (node, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
            test_cluster::ControlPlane::ensure(&dir)
                .and_then(|cp| cp.write_node_kubeconfig(std::path::Path::new(path), node))
        }
        _ => return usage("say up, down, status or node-kubeconfig NODE PATH"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rkubelet-test-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!(
        "rkubelet-test-cluster: {why}\nusage: rkubelet-test-cluster up|down|status|node-kubeconfig NODE PATH [--dir DIR]"
    );
    ExitCode::from(2)
}

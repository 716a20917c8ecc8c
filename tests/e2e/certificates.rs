//! Certificates that rotate themselves, as on a kubeadm node (`rotateCertificates`, `serverTLSBootstrap`), and
//! serving files replaced on disk: the real rkubelet, containerd, kube-apiserver and kube-controller-manager.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::TestEnv;
use common::kubelet_api::{pem_leaf, served_certificate};
use common::*;
use tokio::time::Instant;

/// `--cluster-signing-duration` for the rotation test. The signer backdates by 5 minutes, so a certificate
/// lives 450 s from notBefore and is renewed 15–105 s after it is issued (70–90 % of 450 s, minus 300 s).
const LIFETIME: Duration = Duration::from_secs(150);

fn pem_files(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.retain(|f| f.starts_with(&format!("{prefix}-20")) && f.ends_with(".pem"));
    v.sort();
    v
}

/// `sinceDeadlineMs` of every "certificate rotated" line of `kind` in the log.
fn rotation_delays(log: &str, kind: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("certificate rotated; the new one is in use") && l.contains(&format!("kind=\"{kind}\"")))
        .filter_map(|l| l.split("sinceDeadlineMs=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeadm_node_rotates_client_and_serving_certificates_while_pods_run() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let cp = env.cp.clone();
    let short = tokio::task::spawn_blocking(move || cp.short_signing_duration(LIFETIME)).await.unwrap().unwrap();
    let cp = env.cp.clone();
    let token = tokio::task::spawn_blocking(move || cp.create_bootstrap_token()).await.unwrap().unwrap();
    let bootstrap = env.path("bootstrap-kubelet.conf");
    env.cp.write_token_kubeconfig(&bootstrap, "kubelet-bootstrap", &token).unwrap();
    let kubelet_kc = env.path("kubelet-bootstrapped.conf");
    let cert_dir = env.path("pki");
    // kubeadm's kubelet configuration, both certificates rotated by the kubelet.
    let config = |n: &Node| env.kubeadm_config(n) + "rotateCertificates: true\nserverTLSBootstrap: true\n";
    let t0 = Instant::now();
    let mut node = Node::start_named(
        &env.node,
        &[],
        config,
        vec![
            format!("--bootstrap-kubeconfig={}", bootstrap.display()),
            format!("--kubeconfig={}", kubelet_kc.display()),
            format!("--cert-dir={}", cert_dir.display()),
        ],
    );
    // The serving CSRs are approved as a kubeadm operator's approver does: kubelet-serving requests of this
    // node only (the controller-manager approves client certificates alone).
    let approver = {
        let admin = env.admin.clone();
        let user = format!("system:node:{}", env.node);
        tokio::spawn(async move {
            let mut approved = 0usize;
            loop {
                if let Some(list) = get_json(&admin, &["csr"]).await {
                    for c in list["items"].as_array().into_iter().flatten() {
                        let pending = c["status"]["conditions"].as_array().is_none_or(|v| v.is_empty());
                        if pending
                            && c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                            && c["spec"]["username"] == user.as_str()
                        {
                            let name = c["metadata"]["name"].as_str().unwrap();
                            kubectl(&admin, &["certificate", "approve", name]).await;
                            approved += 1;
                            eprintln!("approved serving CSR {name} ({approved})");
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    env.wait_node_ready(&mut node).await;
    common::drill::report(format_args!("FIGURE join from a bootstrap token to Node Ready: {:?}", t0.elapsed()));
    assert!(!pem_files(&cert_dir, "kubelet-client").is_empty(), "bootstrapped");
    // Until its serving certificate is issued, the kubelet API refuses TLS, as upstream's.
    let refused = served_certificate(secure_port()).await;
    let issued = cert_dir.join("kubelet-server-current.pem");
    node.wait_for("the serving certificate", Duration::from_secs(60), || async { issued.exists().then_some(()) }).await;
    common::drill::report(format_args!(
        "FIGURE join to serving certificate issued: {:?} (a handshake before: {refused:?})",
        t0.elapsed()
    ));

    env.create(&env.pod_yaml("ticker", &[("app", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done")], ""))
        .await;
    let pod = env.wait_pod_running(&mut node, "ticker").await;
    let cid = container_status(&pod, "app").unwrap()["containerID"].clone();

    // Until each certificate was renewed (once in the suite, twice with `--long`: the first one plus the renewals
    // on disk), logs, exec and the served certificate are checked over and over.
    let files = by_mode(2, 3);
    let deadline = Instant::now() + Duration::from_secs(480);
    let (mut checks, mut served_checks) = (0, 0);
    loop {
        let clients = pem_files(&cert_dir, "kubelet-client");
        let servers = pem_files(&cert_dir, "kubelet-server");
        if clients.len() >= files && servers.len() >= files {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} rotation(s) each within 8 minutes: client {clients:?}, serving {servers:?}\n{}",
            files - 1,
            tail(&node.log(), 40)
        );
        node.assert_alive();
        let logs = env.kubectl(&["logs", "ticker", "--tail=1"]).await;
        assert!(logs.starts_with("tick "), "kubectl logs works: {logs:?}");
        let (ok, out, err) = env.kubectl_output(&["exec", "ticker", "--", "echo", "exec-ok"]).await;
        assert!(ok && out.trim() == "exec-ok", "kubectl exec works: {out} {err}");
        checks += 1;
        // The kubelet API serves the current serving certificate (a second after a swap at most).
        if let Some(current) = pem_leaf(&cert_dir.join("kubelet-server-current.pem")) {
            let served = served_certificate(secure_port()).await.expect("the kubelet API answers TLS");
            if served != current {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let current = pem_leaf(&cert_dir.join("kubelet-server-current.pem")).unwrap();
                assert_eq!(served_certificate(secure_port()).await.unwrap(), current, "the new certificate is served");
            }
            served_checks += 1;
        }
        let n = env.node_object().await.unwrap();
        assert_eq!(cluster::condition(&n, "Ready").as_deref(), Some("True"), "the node stays Ready");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    approver.abort();
    common::drill::report(format_args!(
        "FIGURE rotations done {:?} after Node Ready; {checks} logs+exec checks, {served_checks} served-certificate checks",
        t0.elapsed()
    ));

    // The pod never noticed.
    let pod = env.pod("ticker").await.unwrap();
    let st = container_status(&pod, "app").unwrap();
    assert_eq!(st["containerID"], cid);
    assert_eq!(st["restartCount"], 0);

    // Renewals of the client certificate were approved by the controller-manager (selfnodeclient).
    let csrs = get_json(&env.admin, &["csr"]).await.unwrap();
    let renewals: Vec<_> = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["spec"]["username"] == format!("system:node:{}", env.node)
                && c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        })
        .collect();
    assert!(renewals.len() >= files - 1, "{renewals:?}");
    for c in &renewals {
        let approved = c["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Approved").cloned();
        assert_eq!(approved.unwrap()["reason"], "AutoApproved");
        let usages: Vec<&str> = c["spec"]["usages"].as_array().unwrap().iter().filter_map(|u| u.as_str()).collect();
        assert_eq!(usages, ["digital signature", "client auth"]);
    }
    let serving: Vec<_> = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["spec"]["signerName"] == "kubernetes.io/kubelet-serving")
        .collect();
    let usages: Vec<&str> =
        serving[0]["spec"]["usages"].as_array().unwrap().iter().filter_map(|u| u.as_str()).collect();
    assert_eq!(usages, ["digital signature", "server auth"]);
    // The serving certificate names the node's addresses.
    let current = std::fs::read(cert_dir.join("kubelet-server-current.pem")).unwrap();
    let pair = kubelet_kube::certificate::Pair::from_pem(&current, &current).unwrap();
    assert_eq!(pair.common_name, format!("system:node:{}", env.node));
    assert_eq!(pair.organizations, ["system:nodes"]);
    assert!(pair.dns_names.contains(&env.node), "{pair:?} {:?}", pair.dns_names);
    assert!(!pair.ips.is_empty(), "{:?}", pair.ips);
    let kc = std::fs::read_to_string(&kubelet_kc).unwrap();
    assert!(kc.contains("kubelet-client-current.pem"), "{kc}");

    // Metrics as upstream's.
    let (_, m) = http_get(read_only_port(), "/metrics").await.unwrap();
    let ttl = metric(&m, "kubelet_certificate_manager_client_ttl_seconds").expect("client TTL gauge");
    assert!(ttl > 0.0 && ttl <= LIFETIME.as_secs_f64(), "{ttl}");
    let ttl = metric(&m, "kubelet_certificate_manager_server_ttl_seconds").expect("server TTL gauge");
    assert!(ttl > 0.0 && ttl <= LIFETIME.as_secs_f64(), "{ttl}");
    assert_eq!(metric(&m, "kubelet_certificate_manager_client_expiration_renew_errors"), Some(0.0));
    assert_eq!(metric(&m, "kubelet_server_expiration_renew_errors"), Some(0.0));
    assert!(metric(&m, "kubelet_certificate_manager_server_rotation_seconds_count").unwrap() >= (files - 1) as f64);

    let log = node.log();
    let (client, serving) = (rotation_delays(&log, "client"), rotation_delays(&log, "serving"));
    common::drill::report(format_args!(
        "FIGURE client rotations, ms from the rotation deadline to the new certificate in use: {client:?}"
    ));
    common::drill::report(format_args!(
        "FIGURE serving rotations, ms from the rotation deadline to the new certificate served: {serving:?}"
    ));
    assert!(client.len() >= files - 1 && serving.len() >= files, "{client:?} {serving:?}");
    assert!(log.contains("shutting down client connections to start using new credentials"));
    node.stop_and_clean(&rt).await;
    drop(short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_certificate_replaced_on_disk_is_served_without_a_restart() {
    let (_g, rt) = fresh_runtime().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("serving.crt"), dir.path().join("serving.key"));
    let write = |host: &str| {
        let (c, k) = kubelet_server::tls::self_signed(
            host,
            &[],
            std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        )
        .unwrap();
        // As cert-manager or an operator's script does it: new files renamed over the old ones.
        for (path, text) in [(&key, &k), (&cert, &c)] {
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, path).unwrap();
        }
    };
    write("first");
    let (c2, k2) = (cert.clone(), key.clone());
    let mut node = Node::start_with(&[], move |n| {
        std::fs::read_to_string(&n.config).unwrap()
            + &format!("tlsCertFile: {}\ntlsPrivateKeyFile: {}\n", c2.display(), k2.display())
    });
    node.wait_healthy().await;
    let first = node
        .wait_for("the secure port", Duration::from_secs(30), || async { served_certificate(secure_port()).await.ok() })
        .await;
    assert_eq!(Some(first.clone()), pem_leaf(&cert));
    let pid = node.pid();
    for host in ["second", "third"] {
        write(host);
        let want = pem_leaf(&cert).unwrap();
        let t0 = Instant::now();
        node.wait_for("the replaced certificate served", Duration::from_secs(10), || async {
            (served_certificate(secure_port()).await.ok() == Some(want.clone())).then_some(())
        })
        .await;
        common::drill::report(format_args!("FIGURE replaced serving certificate file served after {:?}", t0.elapsed()));
    }
    assert_eq!(node.pid(), pid, "no restart");
    assert!(node.log().contains("kubelet API serving TLS reloaded"));
    node.stop_and_clean(&rt).await;
}

//! End to end: image garbage collection in the real containerd. Two images built by the test (random layers, so
//! they share nothing with the node's images) are imported with `ctr`; an `imagefs.available` threshold above
//! what the disk has free puts the node under DiskPressure at once, and the eviction manager's node-level reclaim
//! removes the unused images — once they are older than `imageMinimumGCAge` — while the image a running pod uses
//! and the runtime's sandbox image stay. Prints the bytes freed by the run.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tokio::time::Instant;

use common::kubelet_api::KubeletApi;
use common::*;
use kubelet_cri::ImageService;
use sha2::{Digest, Sha256};

fn sha(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

fn put_blob(layout: &Path, bytes: &[u8]) -> String {
    let d = sha(bytes);
    std::fs::write(layout.join("blobs/sha256").join(d.trim_start_matches("sha256:")), bytes).unwrap();
    d
}

/// Builds an OCI image `name` whose one layer holds `size` random bytes, as a tar `ctr images import` reads.
fn build_image(dir: &Path, name: &str, size: usize) -> std::path::PathBuf {
    let root = dir.join(format!("{}-root", name.replace(['/', ':'], "_")));
    let layout = dir.join(format!("{}-layout", name.replace(['/', ':'], "_")));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let data: Vec<u8> = (0..size).map(|_| rand::random::<u8>()).collect();
    std::fs::write(root.join("payload"), data).unwrap();
    let layer_tar = dir.join("layer.tar");
    let ok = Command::new("tar")
        .args(["--sort=name", "--mtime=@0", "--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(&root)
        .arg("-cf")
        .arg(&layer_tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    let layer = std::fs::read(&layer_tar).unwrap();
    let layer_digest = put_blob(&layout, &layer);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/payload"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    })
    .to_string();
    let config_digest = put_blob(&layout, config.as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    })
    .to_string();
    let manifest_digest = put_blob(&layout, manifest.as_bytes());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
            "size": manifest.len(), "annotations": {"org.opencontainers.image.ref.name": name},
        }],
    });
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let out = dir.join(format!("{}.tar", name.replace(['/', ':'], "_")));
    assert!(Command::new("tar").arg("-C").arg(&layout).arg("-cf").arg(&out).arg(".").status().unwrap().success());
    out
}

async fn tags(rt: &kubelet_cri::RemoteRuntime) -> Vec<String> {
    rt.list_images(None).await.unwrap().into_iter().flat_map(|i| i.repo_tags).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_pressure_collects_unused_images_but_not_used_or_sandbox_ones() {
    let (_g, rt) = fresh_runtime().await;
    let tmp = tempfile::tempdir().unwrap();
    for (name, size) in [("localhost/gc-old:1", 12 << 20), ("localhost/gc-new:1", 4 << 20)] {
        import(&build_image(tmp.path(), name, size));
    }
    // containerd 2's CRI image store learns of an import through an event: the images show a moment later.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = tags(&rt).await;
        if before.contains(&"localhost/gc-old:1".to_string()) && before.contains(&"localhost/gc-new:1".to_string()) {
            break;
        }
        assert!(Instant::now() < deadline, "the imported images are not listed by CRI after 30 s: {before:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every image no pod uses is collected: the two made here, and whatever else node-setup imported that the test
    // node does not run (the device plugin's image), which is imported again afterwards for the tests that need it.
    let in_use = |t: &String| t.starts_with("localhost/busybox:") || t.starts_with("localhost/pause:");
    let unused: Vec<(Vec<String>, u64)> = rt
        .list_images(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|i| !i.repo_tags.iter().any(in_use))
        .map(|i| (i.repo_tags, i.size))
        .collect();
    let sizes: u64 = unused.iter().map(|(_, s)| s).sum();

    // imagefs.available above what is free: DiskPressure from the first pass.
    let s = nix::sys::statvfs::statvfs(tmp.path()).unwrap();
    let free_mi = (s.blocks_available() as u64 * s.fragment_size() as u64) >> 20;
    let eviction = format!(
        "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 1Gi\n  imagefs.available: {}Mi\n\
         imageMinimumGCAge: 5s\n",
        free_mi + 2048
    );
    let user = manifest("user", &[], &[("app", "trap 'exit 0' TERM; while true; do sleep 1; done")], "");
    let mut node = Node::start_with(&[("user.yaml", &user)], |n| {
        std::fs::read_to_string(&n.config).unwrap().replace(EVICTION_HARD, &eviction)
    });
    node.wait_running("user-e2e-node").await;
    node.wait_for("the unused images collected", Duration::from_secs(60), || async {
        let t = tags(&rt).await;
        (!t.iter().any(|t| t.starts_with("localhost/gc-"))).then_some(())
    })
    .await;
    // The run's log line follows the removals.
    let log_path = node.log_path();
    node.wait_for("the reclaim's log line", Duration::from_secs(10), || async {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let freed = |l: &str| l.contains("unused images deleted") && !l.trim_end().ends_with("bytesFreed=0");
        log.lines().any(freed).then_some(())
    })
    .await;
    let after = tags(&rt).await;
    assert!(after.contains(&"localhost/busybox:1".to_string()), "the image a running pod uses stays: {after:?}");
    assert!(after.contains(&"localhost/pause:1".to_string()), "the sandbox image stays: {after:?}");
    let log = node.log();
    let freed: u64 = log
        .lines()
        .filter(|l| l.contains("eviction manager: unused images deleted"))
        .filter_map(|l| l.split("bytesFreed=").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(freed, sizes, "the bytes freed are the collected images' sizes");
    assert!(
        log.contains("node pressure conditions changed conditions=[\"DiskPressure\"]"),
        "the node was under DiskPressure"
    );
    let metrics = reqwest_metrics().await;
    let collected = format!("kubelet_image_garbage_collected_total{{reason=\"space\"}} {}", unused.len());
    assert!(metrics.contains(&collected), "{}", tail(&metrics, 20));
    println!(
        "one image GC run freed {freed} bytes ({:.1} MiB) in {} images",
        freed as f64 / (1 << 20) as f64,
        unused.len()
    );
    node.assert_alive();
    restore_node_images();
}

/// The kubelet's `/metrics` on the read-only port.
async fn reqwest_metrics() -> String {
    http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default()
}

/// A container that writes about 200 KiB a second in numbered lines and exits after `lines` (0: never).
fn chatty(lines: u32) -> String {
    let pad = "x".repeat(100);
    format!(
        "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo \"line-$i {pad}\"; \
         [ $((i % 200)) = 0 ] && sleep 0.1; [ {lines} -gt 0 ] && [ $i -ge {lines} ] && exit 3; done"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_rotate_at_their_size_and_logs_keep_working() {
    let (_g, _rt) = fresh_runtime().await;
    let pod_yaml = manifest("chatty", &[], &[("app", &chatty(0)), ("restarter", &chatty(3000))], "");
    let mut node = Node::start_with(&[("chatty.yaml", &pod_yaml)], |n| {
        std::fs::read_to_string(&n.config)
            .unwrap()
            .replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true")
            + "containerLogMaxSize: 200Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n"
    });
    let p = node.wait_running("chatty-e2e-node").await;
    let m = &p["metadata"];
    let dir = node.logs.join(format!(
        "{}_{}_{}/app",
        m["namespace"].as_str().unwrap(),
        m["name"].as_str().unwrap(),
        m["uid"].as_str().unwrap()
    ));
    let files = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    // Rotated, then rotated again: one compressed, the newest plain, never more than 3 files.
    let seen = node
        .wait_for("a compressed rotated log", Duration::from_secs(60), || async {
            let f = files(&dir);
            assert!(f.len() <= 3, "containerLogMaxFiles is 3: {f:?}");
            f.iter().any(|n| n.ends_with(".gz")).then_some(f)
        })
        .await;
    let stamped = |n: &str| {
        n.strip_prefix("0.log.")
            .map(|s| s.trim_end_matches(".gz"))
            .is_some_and(|ts| ts.len() == 15 && ts.as_bytes()[8] == b'-')
    };
    assert!(seen.iter().filter(|n| *n != "0.log").all(|n| stamped(n)), "0.log.<YYYYMMDD-hhmmss>[.gz]: {seen:?}");
    let gz = seen.iter().find(|n| n.ends_with(".gz")).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(dir.join(gz)).unwrap()),
        &mut text,
    )
    .unwrap();
    assert!(text.lines().all(|l| l.contains(" stdout F line-")), "CRI log lines in the compressed file");

    // The kubelet API still serves the log (the current file), with lines later than the rotated ones.
    let api = KubeletApi::new(secure_port());
    let path = "/containerLogs/default/chatty-e2e-node/app?tailLines=1";
    // (Right after a rotation the current file may still be empty.)
    let n: u64 = node
        .wait_for("a line in the current log", Duration::from_secs(10), || async {
            let (code, last) = api.get(path).await;
            assert_eq!(code, 200);
            last.split_whitespace().next().and_then(|w| w.strip_prefix("line-")?.parse().ok())
        })
        .await;
    let rotated_last: u64 =
        text.lines().last().and_then(|l| l.split_whitespace().nth(3)?.strip_prefix("line-")?.parse().ok()).unwrap();
    assert!(n > rotated_last, "current log line {n} after the rotated {rotated_last}");

    // --previous across rotations: the restarter's first instance ended at line-3000.
    node.wait_for("the restarter restarted", Duration::from_secs(90), || async {
        pod("chatty-e2e-node")
            .await
            .and_then(|p| container_status(&p, "restarter").map(|s| s["restartCount"].as_u64() >= Some(1)))
            .filter(|r| *r)
    })
    .await;
    let (code, prev) = api.get("/containerLogs/default/chatty-e2e-node/restarter?previous=true&tailLines=1").await;
    assert_eq!(code, 200, "{prev}");
    assert!(prev.starts_with("line-3000 "), "{prev}");
    node.assert_alive();
}

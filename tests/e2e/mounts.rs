//! End to end: subPath mounts that cannot be turned against the host, and mount propagation (issue 34, points
//! 1 and 5) — the real rkubelet binary on the real containerd.
//!
//! - A subPath component is swapped for a link to `/` in a loop (`renameat2(RENAME_EXCHANGE)` by this test, what
//!   a container writing to the volume can do) while 50 containers start with that subPath: every start mounts
//!   the volume's directory or is refused, none ever mounts the host's `/`.
//! - subPath directories made by rkubelet get the volume's group (fsGroup) and mode; the binds under
//!   `<pod-dir>/volume-subpaths` go with the pod, also when it was removed while rkubelet was down.
//! - `<root-dir>` is a shared mount after start-up, and a mount made by a container in a `Bidirectional` emptyDir
//!   reaches the pod's other container and the host.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use kubelet_volume::mountinfo;

const START: Duration = Duration::from_secs(120);
const PODS: usize = 10;
const CONTAINERS: usize = 5;

fn uid(p: &serde_json::Value) -> String {
    p["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The subPath binds of this machine below `pods_root`, with the directory each one shows (mountinfo's root).
fn subpath_binds(pods_root: &Path) -> Vec<(PathBuf, PathBuf)> {
    mountinfo::read()
        .unwrap()
        .into_iter()
        .filter(|m| {
            m.mount_point.starts_with(pods_root) && m.mount_point.to_string_lossy().contains("/volume-subpaths/")
        })
        .map(|m| (m.mount_point, m.root))
        .collect()
}

/// A pod of `CONTAINERS` containers that each mount subPath `a` of the hostPath `vol` and succeed only when they
/// see the volume's `inside` file and nothing of the host's root.
fn racer(name: &str, vol: &Path) -> String {
    let mut containers = String::new();
    for i in 0..CONTAINERS {
        containers.push_str(&format!(
            "  - name: c{i}\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"[ -f /sub/inside ] && \
             [ ! -e /sub/etc ] && [ ! -e /sub/proc ]\"]\n    volumeMounts:\n    - name: vol\n      \
             mountPath: /sub\n      subPath: a\n"
        ));
    }
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  restartPolicy: Never\n  hostNetwork: true\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n{containers}  volumes:\n  - name: vol\n    hostPath:\n      \
         path: {}\n      type: Directory\n",
        vol.display()
    )
}

/// Swaps `<vol>/a` (a directory) and `<vol>/a.link` (a link to `/`) atomically until stopped: `a` is the
/// directory for 3 ms, then the link for 1 ms. Returns the number of swaps.
fn swapper(vol: PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicUsize>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        let (a, link) = (vol.join("a"), vol.join("a.link"));
        let mut is_dir = true;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(if is_dir { 3 } else { 1 }));
            renameat2(AT_FDCWD, &a, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
            is_dir = !is_dir;
            swaps.fetch_add(1, Ordering::Relaxed);
        }
        if !is_dir {
            renameat2(AT_FDCWD, &a, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
        }
    })
}

#[tokio::test]
async fn a_subpath_swapped_for_a_link_to_root_never_mounts_outside_the_volume() {
    let (_g, rt) = fresh_runtime().await;
    let host = tempfile::tempdir().unwrap();
    let vol = host.path().join("vol");
    std::fs::create_dir_all(vol.join("a")).unwrap();
    std::fs::write(vol.join("a/inside"), b"volume\n").unwrap();
    std::os::unix::fs::symlink("/", vol.join("a.link")).unwrap();
    let (stop, swaps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let swapping = swapper(vol.clone(), stop.clone(), swaps.clone());

    let manifests: Vec<(String, String)> =
        (0..PODS).map(|i| (format!("race{i}.yaml"), racer(&format!("race{i}"), &vol))).collect();
    let refs: Vec<(&str, &str)> = manifests.iter().map(|(f, m)| (f.as_str(), m.as_str())).collect();
    let mut node = Node::start(&refs);
    let pods_root = node.root.join("pods");
    let mut seen_binds = 0;
    let phases = node
        .wait_for("every racing pod finished", START, || {
            // Every bind that exists at any moment shows the volume's directory (wherever the swaps moved it).
            let binds = subpath_binds(&pods_root);
            for (point, root) in &binds {
                assert!(
                    root.ends_with("vol/a") || root.ends_with("vol/a.link"),
                    "{} shows {} instead of the volume's directory",
                    point.display(),
                    root.display()
                );
            }
            seen_binds = seen_binds.max(binds.len());
            async move {
                let mut phases = vec![];
                for i in 0..PODS {
                    let p = pod(&format!("race{i}-e2e-node")).await?;
                    let phase = p["status"]["phase"].as_str().unwrap_or("").to_string();
                    if phase != "Succeeded" && phase != "Failed" {
                        return None;
                    }
                    phases.push((i, phase));
                }
                Some(phases)
            }
        })
        .await;
    stop.store(true, Ordering::Relaxed);
    swapping.join().unwrap();
    let log = node.log();
    let refused = log.matches("failed to prepare subPath for volumeMount of the container").count()
        + log.matches("failed to create subPath directory for volumeMount of the container").count();
    eprintln!(
        "subpath race: {} swaps, {} container starts, {refused} start attempts refused, at most {seen_binds} binds at once",
        swaps.load(Ordering::Relaxed),
        PODS * CONTAINERS
    );
    for (i, phase) in &phases {
        assert_eq!(phase, "Succeeded", "pod race{i}: a container saw something else than the volume");
    }
    assert!(refused > 0, "no start attempt met the link: the race was not run");

    for (f, _) in &manifests {
        node.remove_manifest(f);
    }
    node.wait_for("every subPath bind gone with the pods", START, || async {
        let left = std::fs::read_dir(&pods_root).map(|d| d.count()).unwrap_or(0);
        (subpath_binds(&pods_root).is_empty() && left == 0).then_some(())
    })
    .await;
    assert!(vol.join("a/inside").exists(), "the volume's content is untouched");
    node.stop_and_clean(&rt).await;
}

fn subpath_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  securityContext:
    fsGroup: 4321
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo hi > /sub/written && sleep 3600"]
    volumeMounts:
    - name: data
      mountPath: /sub
      subPath: deep/er
  volumes:
  - name: data
    emptyDir: {{}}
"#
    )
}

#[tokio::test]
async fn subpath_directories_get_the_volumes_group_and_mode_and_their_binds_go_with_the_pod() {
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start(&[("one.yaml", &subpath_pod("one")), ("two.yaml", &subpath_pod("two"))]);
    let pods_root = node.root.join("pods");
    let one = uid(&node.wait_running("one-e2e-node").await);
    let two = uid(&node.wait_running("two-e2e-node").await);
    let data = pods_root.join(&one).join("volumes/kubernetes.io~empty-dir/data");
    node.wait_for("the container wrote through its subPath", START, || async {
        data.join("deep/er/written").exists().then_some(())
    })
    .await;
    let vol = std::fs::metadata(&data).unwrap();
    for d in ["deep", "deep/er"] {
        let m = std::fs::metadata(data.join(d)).unwrap();
        assert_eq!(m.gid(), 4321, "{d}: the volume's group (fsGroup)");
        assert_eq!(m.mode() & 0o7777, vol.mode() & 0o2777, "{d}: the volume's mode");
    }
    let bind = pods_root.join(&one).join("volume-subpaths/data/app/0");
    assert!(subpath_binds(&pods_root).iter().any(|(p, r)| p == &bind && r.ends_with("data/deep/er")));

    // Removed while rkubelet runs: its bind goes before its directory.
    node.remove_manifest("one.yaml");
    node.wait_for("pod one's bind and directory gone", START, || async {
        let gone = subpath_binds(&pods_root).iter().all(|(p, _)| !p.starts_with(pods_root.join(&one)));
        (gone && !pods_root.join(&one).exists()).then_some(())
    })
    .await;
    assert!(
        subpath_binds(&pods_root).iter().any(|(p, _)| p.starts_with(pods_root.join(&two))),
        "pod two keeps its bind"
    );

    // Removed while rkubelet is down: the next one cleans it up as an orphan.
    node.kill9();
    node.remove_manifest("two.yaml");
    node.spawn();
    node.wait_for("pod two's bind and directory gone after the restart", START, || async {
        (subpath_binds(&pods_root).is_empty() && !pods_root.join(&two).exists()).then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn the_root_dir_is_rshared_and_a_bidirectional_mount_reaches_the_other_container() {
    let (_g, rt) = fresh_runtime().await;
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: prop
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: maker
    image: localhost/busybox:1
    securityContext:
      privileged: true
    command: ["sh", "-c", "mkdir -p /shared/m && mount -t tmpfs tmpfs /shared/m && echo made-inside > /shared/m/f && sleep 3600"]
    volumeMounts:
    - name: shared
      mountPath: /shared
      mountPropagation: Bidirectional
  - name: reader
    image: localhost/busybox:1
    command: ["sh", "-c", "until [ -f /shared/m/f ]; do sleep 0.1; done; cat /shared/m/f; sleep 3600"]
    volumeMounts:
    - name: shared
      mountPath: /shared
      mountPropagation: HostToContainer
  volumes:
  - name: shared
    emptyDir: {}
"#;
    let mut node = Node::start(&[("prop.yaml", m)]);
    let p = node.wait_running("prop-e2e-node").await;
    let root = std::fs::canonicalize(&node.root).unwrap();
    assert!(mountinfo::is_shared(&mountinfo::read().unwrap(), &root), "{} is on a shared mount", root.display());
    let shared = root.join("pods").join(uid(&p)).join("volumes/kubernetes.io~empty-dir/shared");
    let reader_log = container_log_path(&node.logs, &p, "reader");
    node.wait_for("the reader saw the maker's mount", START, || {
        let log = std::fs::read_to_string(&reader_log).unwrap_or_default();
        async move { log.lines().any(|l| l.ends_with("made-inside")).then_some(()) }
    })
    .await;
    assert_eq!(std::fs::read_to_string(shared.join("m/f")).unwrap(), "made-inside\n", "the host sees it too");
    // A restart does not stack another bind on the root directory.
    node.kill9();
    node.spawn();
    node.wait_running("prop-e2e-node").await;
    let stacked = mountinfo::read().unwrap().iter().filter(|m| m.mount_point == root).count();
    assert_eq!(stacked, 1, "the root directory is bound onto itself once");
    node.remove_manifest("prop.yaml");
    node.wait_for("the propagated mount gone with the pod", START, || async {
        let table = mountinfo::read().unwrap();
        (!table.iter().any(|m| m.mount_point.starts_with(root.join("pods")))).then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

/// The CRI log file of the first instance of `container` of `pod`.
fn container_log_path(logs: &Path, pod: &serde_json::Value, container: &str) -> PathBuf {
    let m = &pod["metadata"];
    let dir = format!("{}_{}_{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap(), uid(pod));
    logs.join(dir).join(container).join("0.log")
}

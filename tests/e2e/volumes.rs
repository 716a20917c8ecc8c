//! End to end: volumes on the real containerd through the real rkubelet binary — emptyDir on disk and in memory,
//! hostPath with its type checks, the downward API with the atomic writer, ConfigMap/Secret/projected volumes
//! from the test apiserver, refusal of unsupported types, and nothing left behind (issue: volumes).

mod common;

use std::time::Duration;

use common::*;

const START: Duration = Duration::from_secs(60);

/// Mount points of this machine at or below `dir`.
fn mounts_under(dir: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(dir.to_str().unwrap()))
        .map(str::to_string)
        .collect()
}

/// A pod sleeping with one volume `data` (its source given as YAML under the volume) mounted at `/data`.
fn sleeper_with_volume(name: &str, source: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    \
         image: localhost/busybox:1\n    command: [\"sleep\", \"3600\"]\n    volumeMounts:\n    - name: data\n      \
         mountPath: /data\n  volumes:\n  - name: data\n    {source}\n"
    )
}

#[tokio::test]
async fn empty_dir_host_path_and_downward_api_volumes_are_mounted_and_cleaned_up() {
    let (_g, rt) = fresh_runtime().await;
    let host = tempfile::tempdir().unwrap();
    let created = host.path().join("made-by-kubelet");
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
  labels:
    app: web
  annotations:
    note: hi
spec:
  restartPolicy: Never
  securityContext:
    fsGroup: 2000
  initContainers:
  - name: writer
    image: localhost/busybox:1
    command: ["sh", "-c", "echo shared > /scratch/file"]
    volumeMounts:
    - name: scratch
      mountPath: /scratch
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "cat /scratch/file; grep -c ' /cache tmpfs ' /proc/mounts; echo host > /host/out; cat /info/labels; echo; cat /info/name; echo; cat /info/mem; echo; stat -c '%a' /info/..data/name; touch /info/x 2>/dev/null && echo info=rw || echo info=ro; stat -c '%g %a' /scratch; stat -L -c %g /info/name; ls /sub; echo y > /mine/x; ls /scratch/vols-e2e-node"]
    env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    resources:
      limits:
        memory: 64Mi
    volumeMounts:
    - name: scratch
      mountPath: /scratch
    - name: scratch
      mountPath: /sub
      subPath: deeper/dir
    - name: scratch
      mountPath: /mine
      subPathExpr: $(POD_NAME)
    - name: cache
      mountPath: /cache
    - name: host
      mountPath: /host
    - name: info
      mountPath: /info
  volumes:
  - name: scratch
    emptyDir: {{}}
  - name: cache
    emptyDir:
      medium: Memory
      sizeLimit: 8Mi
  - name: host
    hostPath:
      path: {}
      type: DirectoryOrCreate
  - name: info
    downwardAPI:
      defaultMode: 0440
      items:
      - path: labels
        fieldRef:
          fieldPath: metadata.labels
      - path: name
        fieldRef:
          fieldPath: metadata.name
      - path: mem
        resourceFieldRef:
          containerName: app
          resource: limits.memory
          divisor: 1Mi
"#,
        created.display()
    );
    let pvc = sleeper_with_volume("pvc", "persistentVolumeClaim:\n      claimName: data");
    let nfs = sleeper_with_volume("nfs", "nfs:\n      server: 192.0.2.1\n      path: /exports");
    let badfile = sleeper_with_volume("badfile", "hostPath:\n      path: /nonexistent/rkubelet-e2e\n      type: File");
    let badpath = sleeper_with_volume(
        "badpath",
        "downwardAPI:\n      items:\n      - path: ../escape\n        fieldRef:\n          fieldPath: metadata.name",
    );
    let mut node = Node::start(&[
        ("vols.yaml", &m),
        ("pvc.yaml", &pvc),
        ("nfs.yaml", &nfs),
        ("badfile.yaml", &badfile),
        ("badpath.yaml", &badpath),
    ]);
    let p = node.wait_phase("vols-e2e-node", "Succeeded").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let lines = texts(&node.container_log(&p, "app"));
    assert_eq!(
        lines,
        vec!["shared", "1", "app=\"web\"", "vols-e2e-node", "64", "440", "info=ro", "2000 2777", "2000", "x"],
        "emptyDir shared with the init container, memory emptyDir on tmpfs, downward API files with their mode, \
         read-only, fsGroup ownership with setgid directories, subPathExpr from the environment"
    );
    assert_eq!(std::fs::read_to_string(created.join("out")).unwrap(), "host\n", "hostPath DirectoryOrCreate");

    // A pod with a volume type rkubelet does not support is refused, its status naming the volume and the type.
    let refused = node.wait_phase("nfs-e2e-node", "Failed").await;
    assert_eq!(refused["status"]["reason"], "UnsupportedVolume");
    let msg = refused["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Pod was rejected: volume \"data\" has type nfs, which rkubelet does not support"),
        "{msg}"
    );
    // A static pod may not refer to API objects (upstream's PreventStaticPodAPIReferences): refused at decode.
    let pvc_file = node.manifests.join("pvc.yaml").display().to_string();
    assert!(
        node.log()
            .lines()
            .any(|l| l.contains(&pvc_file) && l.contains("static pods may not reference persistentvolumeclaims")),
        "the PVC manifest refused"
    );
    // A failing hostPath check is a FailedMount event naming the volume, retried (the file may appear).
    let log = node.log_path();
    let want = r#"reason="FailedMount" MountVolume.SetUp failed for volume "data" : hostPath type check failed: /nonexistent/rkubelet-e2e does not exist"#;
    node.wait_for("FailedMount for the hostPath", START, || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains(want).then_some(())
    })
    .await;
    // A payload path leaving the volume is refused as the apiserver validates a new pod (upstream names the field
    // `downwardAPI.path`, without the item index): the manifest is refused,
    // naming its file and the field, and nothing is mounted or written.
    let want = r#"spec.volumes[0].downwardAPI.path: Invalid value: "../escape": must not contain '..'"#;
    let file = node.manifests.join("badpath.yaml").display().to_string();
    node.wait_for("the manifest with the bad path refused", START, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().any(|l| l.contains(&file) && l.contains(want)).then_some(())
    })
    .await;
    assert!(containers_of(&rt, "badpath-e2e-node").await.is_empty(), "never started");
    assert!(std::fs::read_to_string(&log).unwrap().contains(r#"reason="UnsupportedVolume""#), "an event too");
    assert!(containers_of(&rt, "pvc-e2e-node").await.is_empty(), "never started");
    assert!(containers_of(&rt, "nfs-e2e-node").await.is_empty(), "never started");
    assert!(containers_of(&rt, "badfile-e2e-node").await.is_empty(), "never started");

    // Once the pod is gone, no mount and no directory of it remain.
    node.remove_manifest("vols.yaml");
    let pods_root = node.root.join("pods");
    let pod_dir = pods_root.join(&uid);
    node.wait_for("volumes of the removed pod gone", START, || async {
        (!pod_dir.exists() && mounts_under(&pods_root).iter().all(|m| !m.contains(&uid))).then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

/// A pod with a memory emptyDir writing `marker` into it, then sleeping.
fn tmpfs_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo {name} > /cache/marker; exec sleep 3600"]
    volumeMounts:
    - name: cache
      mountPath: /cache
  volumes:
  - name: cache
    emptyDir:
      medium: Memory
"#
    )
}

#[tokio::test]
async fn a_restarted_kubelet_keeps_running_pods_volumes_and_cleans_up_those_of_pods_removed_meanwhile() {
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start(&[("keep.yaml", &tmpfs_pod("keep")), ("gone.yaml", &tmpfs_pod("gone"))]);
    let keep = node.wait_running("keep-e2e-node").await;
    let gone = node.wait_running("gone-e2e-node").await;
    let uid = |p: &serde_json::Value| p["metadata"]["uid"].as_str().unwrap().to_string();
    let (keep_uid, gone_uid) = (uid(&keep), uid(&gone));
    let pods_root = node.root.join("pods");
    let keep_id = containers_of(&rt, "keep-e2e-node").await[0].id.clone();

    // rkubelet dies; one pod's manifest goes while it is down; it comes back.
    node.kill9();
    node.remove_manifest("gone.yaml");
    node.spawn();
    let gone_dir = pods_root.join(&gone_uid);
    node.wait_for("the removed pod's volumes and directory cleaned up", START, || async {
        (!gone_dir.exists() && mounts_under(&pods_root).iter().all(|m| !m.contains(&gone_uid))).then_some(())
    })
    .await;
    // The new process takes the running pod's volume over as it is (upstream's reconstruction).
    let log = node.log_path();
    node.wait_for("the kept pod's volume reconstructed", START, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().any(|l| l.contains("volume reconstructed") && l.contains("keep-e2e-node")).then_some(())
    })
    .await;
    let again = node.wait_running("keep-e2e-node").await;
    assert_eq!(uid(&again), keep_uid);
    let now = containers_of(&rt, "keep-e2e-node").await;
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].id, keep_id, "the running container was kept");
    // Read through the host: a second tmpfs stacked on the directory would hide the marker.
    let cache = pods_root.join(&keep_uid).join("volumes/kubernetes.io~empty-dir/cache");
    assert_eq!(std::fs::read_to_string(cache.join("marker")).unwrap(), "keep\n", "the tmpfs survived the restart");
    let keep_mounts: Vec<String> = mounts_under(&pods_root).into_iter().filter(|m| m.contains(&keep_uid)).collect();
    assert_eq!(keep_mounts.len(), 1, "mounted once, not again on top: {keep_mounts:?}");
    node.stop_and_clean(&rt).await;
}

const IMAGE_VOLUME: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: imgvol
spec:
  restartPolicy: Never
  volumes:
  - name: tools
    image:
      reference: localhost/busybox:1
      pullPolicy: IfNotPresent
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "test -x /img/bin/busybox && test -x /sub/busybox && ! touch /img/written && ! test -e /sub/bin"]
    volumeMounts:
    - name: tools
      mountPath: /img
    - name: tools
      mountPath: /sub
      subPath: bin
"#;

/// An image volume (ImageVolume, beta and on in v1.35): containerd 2.3 mounts the image's files read-only, and
/// a subPath inside it; the image is ensured with the volume's pull policy and its event names the pod. Containerd
/// 1.6 has no image mounts: the container fails at CreateContainer, as upstream's kubelet leaves it to the runtime.
#[tokio::test]
async fn an_image_volume_is_the_images_files_read_only_with_its_subpath() {
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start(&[("imgvol.yaml", IMAGE_VOLUME)]);
    if containerd_version() == "1.6" {
        let p = node
            .wait_for("the container fails at CreateContainer", Duration::from_secs(60), || async {
                pod("imgvol-e2e-node").await.filter(|p| {
                    p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerError"
                })
            })
            .await;
        assert!(containers_of(&rt, "imgvol-e2e-node").await.is_empty(), "{p}");
        node.stop_and_clean(&rt).await;
        return;
    }
    let p = node.wait_phase("imgvol-e2e-node", "Succeeded").await;
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0, "{p}");
    // The volume's image is ensured by its pull policy, with the pod (no container field) as the event's object.
    let log = node.log();
    assert!(
        log.lines().any(|l| l.contains(r#"fieldPath="""#)
            && l.contains(r#"Container image "localhost/busybox:1" already present on machine"#)),
        "{}",
        tail(&log, 30)
    );
    assert!(node_metric("kubelet_image_volume_requested_total").await >= 1.0);
    assert!(node_metric("kubelet_image_volume_mounted_succeed_total").await >= 1.0);
    assert_eq!(node_metric("kubelet_image_volume_mounted_errors_total").await, 0.0);
    node.stop_and_clean(&rt).await;
}

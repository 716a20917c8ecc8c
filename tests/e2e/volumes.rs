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
    let bad = r#"apiVersion: v1
kind: Pod
metadata:
  name: badvol
spec:
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    volumeMounts:
    - name: data
      mountPath: /data
    - name: file
      mountPath: /file
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: data
  - name: file
    hostPath:
      path: /nonexistent/rkubelet-e2e
      type: File
"#;
    let mut node = Node::start(&[("vols.yaml", &m), ("badvol.yaml", bad)]);
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

    // A pod with an unsupported volume type or a failing hostPath check is refused with an event naming it.
    let log = node.log_path();
    let want = r#"reason="FailedMount" MountVolume.SetUp failed for volume "data" : volume type persistentVolumeClaim is not supported by rkubelet"#;
    node.wait_for("FailedMount for the PVC", START, || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains(want).then_some(())
    })
    .await;
    assert!(containers_of(&rt, "badvol-e2e-node").await.is_empty(), "never started");

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

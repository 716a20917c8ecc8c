//! End to end: AppArmor and SELinux settings reach the runtime, or the pod is refused (the real rkubelet, the real
//! containerd, upstream's `crictl` reading back what containerd received).
//!
//! This kernel has no AppArmor and SELinux is off, which is the point of half of it: a pod that needs an AppArmor
//! profile enforced (RuntimeDefault or Localhost, in a field or the deprecated annotation) is refused with
//! upstream's `AppArmor` reason, never run unconfined. An `Unconfined` profile and `seLinuxOptions` (pod-level and
//! the container's own) reach the CRI request as upstream maps them, which `crictl inspect` shows from containerd's
//! side.

mod common;

use std::time::Duration;

use common::*;

const MAPPED: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: mapped
  annotations:
    container.apparmor.security.beta.kubernetes.io/annotated: unconfined
spec:
  securityContext:
    seLinuxOptions:
      user: system_u
      role: system_r
      type: container_t
      level: "s0:c1,c2"
    supplementalGroups: [4000]
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    securityContext:
      appArmorProfile:
        type: Unconfined
      seLinuxOptions:
        level: "s0:c3,c4"
  - name: annotated
    image: localhost/busybox:1
    command: ["sleep", "3600"]
"#;

fn needs_apparmor(name: &str, how: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{how}spec:\n  containers:\n  - name: app\n    \
         image: localhost/busybox:1\n    command: [\"sleep\", \"3600\"]\n"
    )
}

#[tokio::test]
async fn apparmor_and_selinux_reach_the_runtime_and_a_profile_the_node_cannot_enforce_is_refused() {
    let (_g, rt) = fresh_runtime().await;
    let runtime_default = "  annotations: {}\n";
    let field = needs_apparmor("field", runtime_default)
        .replace("spec:\n", "spec:\n  securityContext:\n    appArmorProfile:\n      type: RuntimeDefault\n");
    let annotation = needs_apparmor(
        "annotation",
        "  annotations:\n    container.apparmor.security.beta.kubernetes.io/app: localhost/k8s-apparmor-example\n",
    );
    let mut node = Node::start(&[("mapped.yaml", MAPPED), ("field.yaml", &field), ("annotation.yaml", &annotation)]);
    node.wait_running("mapped-e2e-node").await;

    if kubelet_runtime::security::host_app_armor_enabled() {
        // A kernel that enforces AppArmor (Debian's and Ubuntu's defaults): the runtime default profile applies.
        node.wait_running("field-e2e-node").await;
        let c = &containers_of(&rt, "field-e2e-node").await[0];
        let sc = &crictl("inspect", &c.id)["info"]["config"]["linux"]["security_context"];
        assert_eq!(sc["apparmor_profile"], "runtime/default", "{sc}");
        node.stop_and_clean(&rt).await;
        return;
    }
    for pod in ["field-e2e-node", "annotation-e2e-node"] {
        let p = node.wait_phase(pod, "Failed").await;
        assert_eq!(p["status"]["reason"], "AppArmor", "{p}");
        assert_eq!(
            p["status"]["message"], "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host",
            "{p}"
        );
        assert!(containers_of(&rt, pod).await.is_empty() && sandboxes_of(&rt, pod).await.is_empty(), "{pod} never ran");
    }

    // What containerd received (its verbose status carries the CRI config it was given).
    let sandbox = &sandboxes_of(&rt, "mapped-e2e-node").await[0];
    let sb = crictl("inspectp", &sandbox.id);
    let sb_sc = &sb["info"]["config"]["linux"]["security_context"];
    assert_eq!(
        sb_sc["selinux_options"],
        serde_json::json!({"user": "system_u", "role": "system_r", "type": "container_t", "level": "s0:c1,c2"}),
        "{sb_sc}"
    );
    let containers = containers_of(&rt, "mapped-e2e-node").await;
    for c in &containers {
        let name = c.metadata.as_ref().unwrap().name.as_str();
        let info = crictl("inspect", &c.id);
        let sc = &info["info"]["config"]["linux"]["security_context"];
        // The container's level replaces the pod's options whole, as upstream's DetermineEffectiveSecurityContext.
        let selinux = match name {
            "app" => serde_json::json!({"level": "s0:c3,c4"}),
            _ => {
                serde_json::json!({"user": "system_u", "role": "system_r", "type": "container_t", "level": "s0:c1,c2"})
            }
        };
        assert_eq!(sc["selinux_options"], selinux, "{name}: {sc}");
        // Unconfined from the field and from the annotation, with the deprecated string form beside it.
        assert_eq!(sc["apparmor"]["profile_type"], 1, "{name}: Unconfined is profile type 1: {sc}");
        assert_eq!(sc["apparmor_profile"], "unconfined", "{name}: {sc}");
        assert!(sc["supplemental_groups"].as_array().unwrap().contains(&serde_json::json!(4000)), "{sc}");
    }
    assert_eq!(containers.len(), 2);
    node.stop_and_clean(&rt).await;
}

/// A host folder with a tmpfs mounted below it (`sub`): what a recursive read-only mount makes read-only and a
/// plain read-only bind does not. Unmounted when dropped, also when the test fails.
struct SubmountedDir(tempfile::TempDir);

impl SubmountedDir {
    fn new() -> SubmountedDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let flags = nix::mount::MsFlags::empty();
        nix::mount::mount(Some("tmpfs"), &dir.path().join("sub"), Some("tmpfs"), flags, Some("size=1m")).unwrap();
        SubmountedDir(dir)
    }
}

impl Drop for SubmountedDir {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0.path().join("sub"), nix::mount::MntFlags::MNT_DETACH);
    }
}

fn rro_pod(dir: &std::path::Path, strict_mode: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rro\nspec:\n  restartPolicy: Never\n  volumes:\n  - name: v\n    \
         hostPath:\n      path: {}\n  containers:\n  - name: strict\n    image: localhost/busybox:1\n    \
         command: [\"sh\", \"-c\", \"! touch /v/sub/strict\"]\n    volumeMounts:\n    - name: v\n      mountPath: /v\n      \
         readOnly: true\n      recursiveReadOnly: {strict_mode}\n  - name: plain\n    image: localhost/busybox:1\n    \
         command: [\"sh\", \"-c\", \"touch /v/sub/plain\"]\n    volumeMounts:\n    - name: v\n      mountPath: /v\n      \
         readOnly: true\n",
        dir.display()
    )
}

/// The container's `status.volumeMounts` as `[name, readOnly, recursiveReadOnly]` triples.
fn mount_status(p: &serde_json::Value, container: &str) -> serde_json::Value {
    let cs = p["status"]["containerStatuses"].as_array().into_iter().flatten().find(|c| c["name"] == container);
    let mounts = cs.and_then(|c| c["volumeMounts"].as_array().cloned()).unwrap_or_default();
    mounts.iter().map(|m| serde_json::json!([m["name"], m["readOnly"], m["recursiveReadOnly"]])).collect()
}

/// Recursive read-only mounts as upstream's `resolveRecursiveReadOnly` with the runtime's handler features:
/// containerd 2.3 reports `recursiveReadOnlyMounts` for its handlers, so `Enabled` makes the tmpfs below the
/// volume read-only too, while a plain `readOnly` mount leaves it writable (the container `plain` proves the
/// difference). Containerd 1.6 reports no handlers: `Enabled` fails the container with upstream's text, never runs
/// it with a writable submount, and `IfPossible` falls back to the plain mount.
#[tokio::test]
async fn recursive_read_only_mounts_follow_the_runtime_handlers_features() {
    let (_g, rt) = fresh_runtime().await;
    let dir = SubmountedDir::new();
    if containerd_version() == "1.6" {
        let enabled = rro_pod(dir.0.path(), "Enabled");
        let if_possible = rro_pod(dir.0.path(), "IfPossible")
            .replace("name: rro", "name: rro-if-possible")
            .replace("/v/sub/strict", "/v/sub/if-possible")
            .replace("/v/sub/plain", "/v/sub/if-possible-plain");
        let mut node = Node::start(&[("rro.yaml", &enabled), ("if-possible.yaml", &if_possible)]);
        let p = node
            .wait_for("strict refused", Duration::from_secs(60), || async {
                pod("rro-e2e-node").await.filter(|p| {
                    p["status"]["containerStatuses"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| c["state"]["waiting"]["reason"] == "CreateContainerConfigError")
                    })
                })
            })
            .await;
        let strict = p["status"]["containerStatuses"].as_array().unwrap().iter().find(|c| c["name"] == "strict");
        assert_eq!(
            strict.unwrap()["state"]["waiting"]["message"],
            "failed to resolve recursive read-only mode: volume \"v\" requested recursive read-only mode, but it is \
             not supported by the runtime",
            "{p}"
        );
        assert!(!dir.0.path().join("sub/strict").exists());
        // IfPossible on a runtime that cannot: the plain read-only mount, its submount writable.
        let p = node.wait_phase("rro-if-possible-e2e-node", "Failed").await;
        let strict = p["status"]["containerStatuses"].as_array().unwrap().iter().find(|c| c["name"] == "strict");
        assert_eq!(strict.unwrap()["state"]["terminated"]["exitCode"], 1, "touch succeeded: {p}");
        assert_eq!(mount_status(&p, "strict"), serde_json::json!([["v", true, "Disabled"]]), "{p}");
        node.stop_and_clean(&rt).await;
        return;
    }
    let mut node = Node::start(&[("rro.yaml", &rro_pod(dir.0.path(), "Enabled"))]);
    let p = node.wait_phase("rro-e2e-node", "Succeeded").await;
    assert_eq!(mount_status(&p, "strict"), serde_json::json!([["v", true, "Enabled"]]), "{p}");
    assert_eq!(mount_status(&p, "plain"), serde_json::json!([["v", true, "Disabled"]]), "{p}");
    assert!(dir.0.path().join("sub/plain").exists() && !dir.0.path().join("sub/strict").exists(), "{p}");
    let strict =
        containers_of(&rt, "rro-e2e-node").await.into_iter().find(|c| c.metadata.as_ref().unwrap().name == "strict");
    let info = crictl("inspect", &strict.unwrap().id);
    let mounts = info["info"]["config"]["mounts"].as_array().cloned().unwrap_or_default();
    let v = mounts.iter().find(|m| m["container_path"] == "/v").expect("the volume's mount");
    assert_eq!(v["recursive_read_only"], true, "{v}");
    node.stop_and_clean(&rt).await;
}

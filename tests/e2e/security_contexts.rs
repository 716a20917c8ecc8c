//! End to end: AppArmor and SELinux settings reach the runtime, or the pod is refused (the real rkubelet, the real
//! containerd, upstream's `crictl` reading back what containerd received).
//!
//! This kernel has no AppArmor and SELinux is off, which is the point of half of it: a pod that needs an AppArmor
//! profile enforced (RuntimeDefault or Localhost, in a field or the deprecated annotation) is refused with
//! upstream's `AppArmor` reason, never run unconfined. An `Unconfined` profile and `seLinuxOptions` (pod-level and
//! the container's own) reach the CRI request as upstream maps them, which `crictl inspect` shows from containerd's
//! side.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

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

/// `crictl inspect[p] -o json <id>` against the test's containerd.
fn crictl(what: &str, id: &str) -> Value {
    let crictl = test_cluster::unpacked_binary("CRICTL", "tools/bin/crictl").expect("crictl from ../shared");
    let out = Command::new(crictl)
        .args(["--runtime-endpoint", &endpoint(), what, "-o", "json", id])
        .output()
        .expect("run crictl");
    assert!(out.status.success(), "crictl {what} {id}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
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

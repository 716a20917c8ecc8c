//! End to end: private images and runtime classes on a node of the real cluster (the real kube-apiserver with its
//! Node authorizer, NodeRestriction and RuntimeClass admission, the real containerd, Debian's registry).
//!
//! - A registry behind TLS with htpasswd authentication holds `private/busybox:1` and `provider/busybox:1`; a second
//!   registry on the same storage serves them without authentication (the "public" one). Pods pull with
//!   `imagePullPolicy: Always`, so each pull asks the registry. Without a secret, or with a wrong one, the pull
//!   fails with upstream's `ErrImagePull` and then `ImagePullBackOff` texts; with the pod's
//!   `kubernetes.io/dockerconfigjson` or `kubernetes.io/dockercfg` secret it succeeds; an image under `provider/`
//!   is pulled with what a kubelet credential provider plugin (a script the test writes) returns, the plugin given
//!   a service account token for its audience. No password reaches rkubelet's log.
//! - A RuntimeClass with handler `runc-alt` (a second runc handler `scripts/node-setup.sh` configures, through a
//!   wrapper that notes what it creates) and an overhead: the sandbox runs on that handler and the pod cgroup's
//!   memory limit counts the overhead. A class whose handler containerd lacks fails the sandbox with the runtime's
//!   message; a static pod naming a class that does not exist fails with upstream's "not found".

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, rand_suffix};
use common::registry::Registry;
use common::*;
use kubelet_cri::RuntimeService;
use serde_json::Value;

const USER: &str = "rk-puller";

fn dockerconfigjson(host: &str, user: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let auth = b64(&format!("{user}:{password}"));
    b64(&format!("{{\"auths\":{{\"{host}\":{{\"auth\":\"{auth}\"}}}}}}"))
}

fn dockercfg(host: &str, user: &str, password: &str) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    b64(&format!("{{\"https://{host}\":{{\"username\":\"{user}\",\"password\":\"{password}\"}}}}"))
}

fn secret_yaml(name: &str, kind: &str, key: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: {kind}\ndata:\n  {key}: {data}\n---\n")
}

/// A pod running `image` (always pulled), with the pull secret `secret` if any.
fn image_pod(env: &TestEnv, name: &str, image: &str, secret: Option<&str>) -> String {
    let secrets = secret.map(|s| format!("  imagePullSecrets:\n  - name: {s}\n")).unwrap_or_default();
    env.pod_yaml(name, &[("app", "sleep 3600")], &secrets)
        .replace("image: localhost/busybox:1", &format!("image: {image}\n    imagePullPolicy: Always"))
}

/// The pull duration in the pod's `Pulled` event ("Successfully pulled image "x" in 123ms (...)").
async fn pull_time(env: &TestEnv, pod: &str) -> String {
    let events = env.get(&["events", "--field-selector", &format!("involvedObject.name={pod},reason=Pulled")]).await;
    let items = events.as_ref().and_then(|e| e["items"].as_array().cloned()).unwrap_or_default();
    let msg = items.last().and_then(|e| e["message"].as_str()).unwrap_or_default().to_string();
    msg.split(" in ").nth(1).and_then(|s| s.split(' ').next()).unwrap_or("?").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_images_are_pulled_with_the_pods_secret_or_a_credential_provider_and_refused_without() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let password = format!("pw-{}", rand_suffix());
    let storage = tempfile::Builder::new().prefix("rkubelet-e2e-registry-data-").tempdir().unwrap();
    let private = Registry::start(&env.cp.pki, storage.path(), Some((USER, &password))).await;
    let public = Registry::start(&env.cp.pki, storage.path(), None).await;
    private.push("localhost/busybox:1", "private/busybox:1", Some((USER, &password)));
    private.push("localhost/busybox:1", "provider/busybox:1", Some((USER, &password)));
    let host = private.host.clone();

    // The credential provider: answers for <host>/provider with the registry's credentials, keeps each request.
    let bin = env.path("provider-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let requests = env.path("provider-requests");
    std::fs::create_dir_all(&requests).unwrap();
    let plugin = bin.join("rk-registry-credentials");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\ncat >{}/request-$$.json\necho '{{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\
             \"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Registry\",\"cacheDuration\":\"1m\",\
             \"auth\":{{\"{host}/provider\":{{\"username\":\"{USER}\",\"password\":\"{password}\"}}}}}}'\n",
            requests.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let audience = format!("rk-registry-{}", env.node);
    let provider_config = env.write(
        "credential-providers.yaml",
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
             - name: rk-registry-credentials\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  \
             matchImages:\n  - \"{host}/provider\"\n  defaultCacheDuration: 1m\n  tokenAttributes:\n    \
             serviceAccountTokenAudience: {audience}\n    requireServiceAccount: true\n    cacheType: ServiceAccount\n"
        ),
    );
    // The node may ask for tokens of that audience (the apiserver's node audience restriction).
    env.create(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {audience}\nrules:\n\
         - verbs: [\"request-serviceaccounts-token-audience\"]\n  apiGroups: [\"\"]\n  resources: [\"{audience}\"]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {audience}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {audience}\nsubjects:\n\
         - apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: system:node:{}\n",
        env.node
    ))
    .await;

    let args = vec![
        format!("--kubeconfig={}", env.kubelet_kubeconfig.display()),
        format!("--image-credential-provider-config={}", provider_config.display()),
        format!("--image-credential-provider-bin-dir={}", bin.display()),
    ];
    let mut node =
        Node::start_named_env(&env.node, &[], |n| std::fs::read_to_string(&n.config).unwrap(), args, loudest_log());
    env.wait_node_ready(&mut node).await;

    let image = format!("{host}/private/busybox:1");
    let mut yaml = secret_yaml(
        "good",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &dockerconfigjson(&host, USER, &password),
    );
    yaml += &secret_yaml("legacy", "kubernetes.io/dockercfg", ".dockercfg", &dockercfg(&host, USER, &password));
    yaml += &secret_yaml(
        "wrong",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &dockerconfigjson(&host, USER, "not-it"),
    );
    for (pod, secret) in [
        ("no-secret", None),
        ("wrong-secret", Some("wrong")),
        ("good-secret", Some("good")),
        ("legacy-secret", Some("legacy")),
    ] {
        yaml += &image_pod(&env, pod, &image, secret);
        yaml += "---\n";
    }
    yaml += &image_pod(&env, "provider", &format!("{host}/provider/busybox:1"), None);
    yaml += "---\n";
    yaml += &image_pod(&env, "public", &format!("{}/private/busybox:1", public.host), None);
    env.create(&yaml).await;

    for pod in ["good-secret", "legacy-secret", "provider", "public"] {
        env.wait_pod_running(&mut node, pod).await;
    }
    // Both pulls fail (ErrImagePull, with the Failed events); then a sync within the
    // back-off reports ImagePullBackOff with upstream's text (seen on one pod: the two run the same code).
    // The runtime's own words, as upstream passes them on: a wrong password is the registry's 401 on both; with no
    // credentials at all containerd 2 stops before asking (`no basic auth credentials`), 1.6 shows the 401.
    let anonymous = if containerd_version() == "1.6" { "401 Unauthorized" } else { "no basic auth credentials" };
    for (pod, refused) in [("no-secret", anonymous), ("wrong-secret", "401 Unauthorized")] {
        let selector = format!("involvedObject.name={pod},reason=Failed");
        let pulled = format!("Failed to pull image \\\"{image}\\\": ");
        node.wait_for(&format!("{pod}'s Failed events"), Duration::from_secs(60), || async {
            let failed = serde_json::to_string(&env.get(&["events", "--field-selector", &selector]).await?).ok()?;
            (failed.contains(&pulled) && failed.contains(refused) && failed.contains("Error: ErrImagePull"))
                .then_some(())
        })
        .await;
        let w = node
            .wait_for(&format!("{pod} waiting on its pull"), Duration::from_secs(60), || async {
                let p = env.pod(pod).await?;
                let w = container_status(&p, "app")?["state"]["waiting"].clone();
                (w["reason"] == "ErrImagePull" || w["reason"] == "ImagePullBackOff").then_some(w)
            })
            .await;
        assert!(w["message"].as_str().unwrap().contains(refused), "{pod}: {w}");
    }
    // A pod update syncs the pod at once (as upstream): inside the pull back-off, that sync backs off. (Each poll
    // updates the pod, so the test does not wait for the worker's 10 s resync.)
    let pokes = std::cell::Cell::new(0);
    let backoff = node
        .wait_for("no-secret waiting with ImagePullBackOff", Duration::from_secs(60), || async {
            pokes.set(pokes.get() + 1);
            env.kubectl(&["label", "--overwrite", "pod", "no-secret", &format!("poked={}", pokes.get())]).await;
            let p = env.pod("no-secret").await?;
            let w = container_status(&p, "app")?["state"]["waiting"].clone();
            (w["reason"] == "ImagePullBackOff").then_some(w)
        })
        .await;
    let m = backoff["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!("Back-off pulling image \"{image}\": ErrImagePull: ")) && m.contains(anonymous),
        "{m}"
    );

    // The wrong secret's credential did reach the registry (which refused it); no secret sends none.
    assert!(private.log().contains("authentication failure"), "the registry saw the wrong password");
    // The plugin was asked about the provider image only, with a token for its audience bound to the pod.
    let asked: Vec<Value> = std::fs::read_dir(&requests)
        .unwrap()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    assert!(!asked.is_empty(), "the credential provider was never run");
    for r in &asked {
        assert_eq!(r["kind"], "CredentialProviderRequest", "{r}");
        assert_eq!(r["apiVersion"], "credentialprovider.kubelet.k8s.io/v1", "{r}");
        // The repository, without the tag, as upstream's keyring looks it up.
        assert_eq!(r["image"], format!("{host}/provider/busybox"), "{r}");
        let token = r["serviceAccountToken"].as_str().unwrap_or_default();
        let claims = token.split('.').nth(1).expect("a JWT");
        use base64::Engine;
        let claims: Value =
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["aud"], serde_json::json!([audience]), "{claims}");
        assert_eq!(claims["kubernetes.io"]["pod"]["name"], "provider", "{claims}");
        assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "default", "{claims}");
    }

    let (private_pull, public_pull) = (pull_time(&env, "good-secret").await, pull_time(&env, "public").await);
    eprintln!("pull times: private with a secret {private_pull}, public {public_pull}");
    let log = node.log();
    assert_secrets_not_logged(&log, &[&password, &format!("{USER}:{password}")]);
    node.stop_and_clean(&rt).await;
    drop((private, public));
    env.kubectl(&["delete", "clusterrolebinding,clusterrole", &audience, "--ignore-not-found", "--wait=false"]).await;
}

/// The memory limit of the pod's cgroup (cgroup v1, cgroupfs driver), in any QoS class.
fn pod_memory_limit(uid: &str) -> Option<u64> {
    ["", "burstable/", "besteffort/"].iter().find_map(|q| {
        let p = format!("/sys/fs/cgroup/memory/kubepods/{q}pod{uid}/memory.limit_in_bytes");
        std::fs::read_to_string(p).ok()?.trim().parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_class_pod_runs_on_its_handler_with_its_overhead_and_an_unknown_class_fails_its_sandbox() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let class = format!("alt-{}", env.node);
    let broken = format!("broken-{}", env.node);
    env.create(&format!(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {class}\nhandler: runc-alt\n\
         overhead:\n  podFixed:\n    cpu: 250m\n    memory: 64Mi\n---\n\
         apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {broken}\nhandler: no-such-handler\n"
    ))
    .await;
    // A static pod naming a class that does not exist (static pods skip the apiserver's RuntimeClass admission).
    let missing = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: missing-class\nspec:\n  runtimeClassName: missing\n  \
                   containers:\n  - name: app\n    image: localhost/busybox:1\n    command: [\"sleep\", \"3600\"]\n";
    let mut node = env.start_node(&[("missing.yaml", missing)]);
    env.wait_node_ready(&mut node).await;

    let limits = "    resources:\n      limits:\n        cpu: 500m\n        memory: 64Mi\n";
    let pod = env.pod_yaml("alt", &[("app", "sleep 3600")], &format!("  runtimeClassName: {class}\n")) + limits;
    let bad = env.pod_yaml("broken", &[("app", "sleep 3600")], &format!("  runtimeClassName: {broken}\n"));
    env.create(&format!("{pod}---\n{bad}")).await;
    let p = env.wait_pod_running(&mut node, "alt").await;
    // The apiserver's RuntimeClass admission set the overhead.
    assert_eq!(p["spec"]["overhead"]["memory"], "64Mi", "{}", p["spec"]);

    let sandboxes = sandboxes_of(&rt, "alt").await;
    assert_eq!(sandboxes.len(), 1);
    let status = rt.pod_sandbox_status(&sandboxes[0].id).await.unwrap();
    assert_eq!(status.runtime_handler, "runc-alt");
    let created = std::fs::read_to_string(registry::certs_dir().with_file_name("runc-alt.created")).unwrap_or_default();
    assert!(created.lines().any(|l| l == sandboxes[0].id), "runc-alt did not create the sandbox: {created}");
    for c in containers_of(&rt, "alt").await {
        assert!(created.lines().any(|l| l == c.id), "runc-alt did not create container {}", c.id);
    }
    // The pod cgroup's memory limit: the container's 64Mi and the class's overhead of 64Mi.
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let limit = pod_memory_limit(uid).expect("the pod's cgroup");
    assert_eq!(limit, 128 << 20, "pod memory limit with the overhead");

    // The class whose handler the runtime lacks: the sandbox fails with the runtime's message, retried.
    node.wait_for("the broken class's sandbox failure", Duration::from_secs(60), || async {
        let events = env
            .get(&["events", "--field-selector", "involvedObject.name=broken,reason=FailedCreatePodSandBox"])
            .await?;
        let m = events["items"].as_array()?.first()?["message"].as_str()?.to_string();
        m.contains("no-such-handler").then_some(m)
    })
    .await;
    // The static pod's unknown class: upstream's not found, and never run on the default handler.
    let static_name = format!("missing-class-{}", env.node);
    let log_path = node.log_path();
    node.wait_for("the missing class's failure", Duration::from_secs(60), || async {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains(&format!("pod=default/{static_name} ")))
            .any(|l| {
                // The message as written, or with its quotes escaped (a quoted log field).
                l.contains("Failed to create pod sandbox: runtimeclass.node.k8s.io \"missing\" not found")
                    || l.contains(r#"Failed to create pod sandbox: runtimeclass.node.k8s.io \"missing\" not found"#)
            })
            .then_some(())
    })
    .await;
    // (Its mirror pod is refused by the apiserver's RuntimeClass admission; the static pod is the node's own.)
    assert!(sandboxes_of(&rt, &static_name).await.is_empty(), "no sandbox for a pod whose class is unknown");
    assert!(sandboxes_of(&rt, "broken").await.is_empty(), "no sandbox for the class whose handler is unknown");
    node.stop_and_clean(&rt).await;
    env.kubectl(&["delete", "runtimeclass", &class, &broken, "--ignore-not-found", "--wait=false"]).await;
}

//! End to end: what pods take from the real apiserver through rkubelet — ConfigMap and Secret references and
//! service links in the environment, ConfigMap/Secret/projected volumes and their updates, and service-account
//! tokens from the TokenRequest API — all within what the Node authorizer lets a node read (only objects of pods
//! bound to it).

mod common;

use std::time::Duration;

use base64::Engine;
use common::cluster::{TestEnv, audit_request};
use common::*;
use serde_json::Value;

/// Runs `sh -c cmd` in the running container of `pod` through CRI; its trimmed stdout.
async fn sh(rt: &kubelet_cri::RemoteRuntime, pod: &str, cmd: &str) -> String {
    let id = containers_of(rt, pod).await.into_iter().find(|c| c.state == 1).expect("a running container").id;
    let argv = vec!["sh".into(), "-c".into(), cmd.to_string()];
    let out = kubelet_cri::RuntimeService::exec_sync(rt, &id, argv, Duration::from_secs(10)).await.unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_and_secret_references_and_service_links_reach_the_environment() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node_env(|n| std::fs::read_to_string(&n.config).unwrap(), loudest_log());
    env.create(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: s3cr3t\n---\n\
         apiVersion: v1\nkind: Service\nmetadata:\n  name: my-db\nspec:\n  ports:\n  - name: pg\n    port: 5432\n",
    )
    .await;
    let svc = env.get(&["service", "my-db"]).await.unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: consumer
spec:
  nodeName: {}
  restartPolicy: Never
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "env | sort"]
    envFrom:
    - prefix: CFG_
      configMapRef:
        name: settings
    env:
    - name: MODE
      valueFrom:
        configMapKeyRef:
          name: settings
          key: mode
    - name: PASSWORD
      valueFrom:
        secretKeyRef:
          name: creds
          key: password
    - name: MAYBE
      valueFrom:
        configMapKeyRef:
          name: absent
          key: x
          optional: true
"#,
        env.node
    );
    env.create(&pod).await;
    // The ConfigMap does not exist yet: upstream's reason and message, and the pod keeps being retried.
    let p = node
        .wait_for("CreateContainerConfigError", Duration::from_secs(60), || async {
            env.pod("consumer").await.filter(|p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
            })
        })
        .await;
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["waiting"]["message"], "configmap \"settings\" not found");
    env.kubectl(&["create", "configmap", "settings", "--from-literal=mode=fast", "--from-literal=level=3"]).await;
    let p = node
        .wait_for("consumer Succeeded", Duration::from_secs(60), || async {
            env.pod("consumer").await.filter(|p| p["status"]["phase"] == "Succeeded")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let log = std::fs::read_to_string(node.logs.join(format!("{}_consumer_{uid}/app/0.log", env.ns))).unwrap();
    for want in [
        "MODE=fast".to_string(),
        "PASSWORD=s3cr3t".into(),
        "CFG_mode=fast".into(),
        "CFG_level=3".into(),
        format!("MY_DB_SERVICE_HOST={ip}"),
        "MY_DB_SERVICE_PORT=5432".into(),
        "MY_DB_SERVICE_PORT_PG=5432".into(),
        format!("MY_DB_PORT=tcp://{ip}:5432"),
        format!("MY_DB_PORT_5432_TCP_ADDR={ip}"),
        // The master service of the `default` namespace is in every pod's environment.
        "KUBERNETES_SERVICE_HOST=10.96.0.1".into(),
        "KUBERNETES_SERVICE_PORT=443".into(),
    ] {
        assert!(log.contains(&format!(" {want}\n")), "missing {want} in\n{log}");
    }
    assert!(!log.contains("MAYBE="), "an optional reference to a missing ConfigMap is skipped");
    assert_secrets_not_logged(&node.log(), &["s3cr3t"]);
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_secret_and_projected_volumes_are_mounted_and_configmap_updates_reach_the_pod() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node =
        env.start_node_env(|n| std::fs::read_to_string(&n.config).unwrap() + "syncFrequency: 5s\n", loudest_log());
    env.kubectl(&["create", "configmap", "app-config", "--from-literal=mode=fast", "--from-literal=level=3"]).await;
    env.kubectl(&["create", "secret", "generic", "app-secret", "--from-literal=password=s3cr3t"]).await;
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: mounted
  labels:
    tier: db
spec:
  nodeName: {}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    volumeMounts:
    - name: cfg
      mountPath: /cfg
    - name: sec
      mountPath: /sec
    - name: all
      mountPath: /all
  volumes:
  - name: cfg
    configMap:
      name: app-config
  - name: sec
    secret:
      secretName: app-secret
      defaultMode: 256
  - name: all
    projected:
      sources:
      - configMap:
          name: app-config
          items:
          - key: level
            path: conf/level
      - secret:
          name: app-secret
      - downwardAPI:
          items:
          - path: labels
            fieldRef:
              fieldPath: metadata.labels
"#,
        env.node
    );
    env.create(&pod).await;
    env.wait_pod_running(&mut node, "mounted").await;
    assert_eq!(sh(&rt, "mounted", "cat /cfg/mode; echo; cat /cfg/level").await, "fast\n3");
    assert_eq!(sh(&rt, "mounted", "cat /sec/password; echo; stat -L -c %a /sec/password").await, "s3cr3t\n400");
    assert_eq!(sh(&rt, "mounted", "grep -c ' /sec tmpfs ' /proc/mounts").await, "1", "secrets live on tmpfs");
    assert_eq!(
        sh(&rt, "mounted", "cat /all/conf/level /all/password; echo; cat /all/labels").await,
        "3s3cr3t\ntier=\"db\""
    );
    assert_eq!(sh(&rt, "mounted", "touch /cfg/new 2>/dev/null && echo rw || echo ro").await, "ro");

    // An update of the ConfigMap reaches the running container, in one atomic step.
    let updated = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\n  namespace: {}\ndata:\n  mode: slow\n  level: \"3\"\n",
        env.ns
    );
    let f = env.write("cm.yaml", &updated);
    env.kubectl(&["replace", "-f", f.to_str().unwrap()]).await;
    let t0 = tokio::time::Instant::now();
    node.wait_for("the update in the container", Duration::from_secs(30), || async {
        (sh(&rt, "mounted", "cat /cfg/mode").await == "slow").then_some(())
    })
    .await;
    eprintln!("FIGURE configmap update reached the container after {:?}", t0.elapsed());
    // It came through a watch of that one object (the default Watch strategy), not a GET at every sync, and the
    // node never asked for anything the Node authorizer refuses.
    // A watch is audited when its response starts; other requests when they complete.
    let requests: Vec<_> = env
        .node_requests()
        .into_iter()
        .filter(|e| e["stage"] == if e["verb"] == "watch" { "ResponseStarted" } else { "ResponseComplete" })
        .collect::<Vec<Value>>();
    let of = |verb: &str, res: &str, name: &str| {
        requests.iter().filter(|e| audit_request(e) == (verb.into(), res.into(), name.into())).count()
    };
    assert!(of("watch", "configmaps", "app-config") >= 1, "a watch of the ConfigMap");
    assert_eq!(of("get", "configmaps", "app-config"), 0, "no GET of the ConfigMap");
    let refused: Vec<_> = requests.iter().filter(|e| e["responseStatus"]["code"] == 403).collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");

    // A label change reaches the downward API file.
    env.kubectl(&["label", "pod", "mounted", "tier=cache", "--overwrite"]).await;
    node.wait_for("the label in the container", Duration::from_secs(30), || async {
        (sh(&rt, "mounted", "cat /all/labels").await == "tier=\"cache\"").then_some(())
    })
    .await;
    assert_secrets_not_logged(&node.log(), &["s3cr3t"]);
    node.stop_and_clean(&rt).await;
}

/// The payload of a JWT, decoded (not verified: a TokenReview does that).
fn jwt_claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// The apiserver's verdict on a token for `audiences` (a TokenReview).
async fn review(env: &TestEnv, token: &str, audiences: &[&str]) -> Value {
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences},
    });
    let f = env.write(&format!("review-{}.json", common::cluster::rand_suffix()), &review.to_string());
    let out = kubectl(&env.admin, &["create", "-f", f.to_str().unwrap(), "-o", "json"]).await;
    serde_json::from_str::<Value>(&out).unwrap()["status"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_come_from_the_token_request_api_and_are_bound_to_the_pod() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node_env(|n| std::fs::read_to_string(&n.config).unwrap(), loudest_log());
    // An ordinary pod: the ServiceAccount admission plugin adds the kube-api-access volume. A second volume asks
    // for a token for another audience, read by a non-root user.
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: sa
spec:
  nodeName: {}
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1234
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    volumeMounts:
    - name: vault
      mountPath: /vault
  volumes:
  - name: vault
    projected:
      sources:
      - serviceAccountToken:
          audience: vault
          expirationSeconds: 600
          path: vault-token
"#,
        env.node
    );
    env.create(&pod).await;
    let running = env.wait_pod_running(&mut node, "sa").await;
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let vol = running["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["name"].as_str().filter(|n| n.starts_with("kube-api-access-")))
        .expect("the admission plugin added the volume")
        .to_string();
    let sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(sh(&rt, "sa", &format!("cat {sa_dir}/namespace")).await, env.ns);
    assert_eq!(
        sh(&rt, "sa", &format!("cat {sa_dir}/ca.crt")).await,
        env.cp.pki.ca_pem().unwrap().trim(),
        "kube-root-ca.crt, published by the controller-manager"
    );
    let token = sh(&rt, "sa", &format!("cat {sa_dir}/token")).await;
    let verdict = review(&env, &token, &[]).await;
    assert_eq!(verdict["authenticated"], true, "{verdict}");
    assert_eq!(verdict["user"]["username"], format!("system:serviceaccount:{}:default", env.ns));
    assert_eq!(verdict["user"]["extra"]["authentication.kubernetes.io/pod-uid"][0], uid.as_str(), "bound to the pod");
    let claims = jwt_claims(&token);
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(claims["kubernetes.io"]["node"]["name"], env.node.as_str(), "the node is in the claims too");
    let vault = sh(&rt, "sa", "cat /vault/vault-token").await;
    let verdict = review(&env, &vault, &["vault"]).await;
    assert_eq!(verdict["authenticated"], true, "{verdict}");
    assert_eq!(verdict["audiences"], serde_json::json!(["vault"]));
    assert_eq!(jwt_claims(&vault)["aud"], serde_json::json!(["vault"]));
    // With a pod-level runAsUser, the token is the user's own, 0600.
    assert_eq!(sh(&rt, "sa", "stat -L -c '%u %a' /vault/vault-token").await, "1234 600");
    assert_eq!(sh(&rt, "sa", &format!("touch {sa_dir}/x 2>/dev/null && echo rw || echo ro")).await, "ro");
    // Asked of the TokenRequest API by the node itself, which the Node authorizer allows for its own pods.
    let requested = env
        .node_requests()
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["objectRef"]["subresource"] == "token")
        .map(|e| e["responseStatus"]["code"].as_i64())
        .collect::<Vec<_>>();
    assert!(requested.len() >= 2 && requested.iter().all(|c| *c == Some(201)), "{requested:?}");

    // After deletion the volumes, their tmpfs mounts and the pod directory are gone.
    env.kubectl(&["delete", "pod", "sa", "--wait=false"]).await;
    let pod_dir = node.root.join("pods").join(&uid);
    node.wait_for("the pod's directory removed", Duration::from_secs(60), || async {
        (!pod_dir.exists()).then_some(())
    })
    .await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&uid), "no mount of the pod remains");
    assert!(!mounts.contains(&vol));
    assert_secrets_not_logged(&node.log(), &[&token, &vault]);
    node.stop_and_clean(&rt).await;
}

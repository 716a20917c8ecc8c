//! End-to-end tests of a lookup: pull secrets, the node's files and a real shell-script plugin in token mode.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::auth::{SecretCoordinates, ServiceAccountCoordinates};
use crate::docker_config::DockerConfig;
use crate::plugin::service_account::{FakeServiceAccounts, ServiceAccountSource};
use crate::test_support::{PROCESS_LOCK, write_script};

const PLUGIN_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: acr-login
    matchImages: [\"registry.io\", \"*.registry.io\"]
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    env:
      - name: OUT_DIR
        value: __OUT__
    tokenAttributes:
      serviceAccountTokenAudience: registry.io
      cacheType: ServiceAccount
      requireServiceAccount: true
      requiredServiceAccountAnnotationKeys: [example.com/client-id]
";

const PLUGIN_REPLY: &str = r#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1","cacheKeyType":"Registry","auth":{"registry.io":{"username":"plugin","password":"p1"},"registry.io/team":{"username":"plugin-team","password":"p2"},"elsewhere.io":{"username":"unmatched","password":"p3"}}}"#;

struct Node {
    tmp: tempfile::TempDir,
}

impl Node {
    fn new() -> Self {
        let node = Self { tmp: tempfile::tempdir().unwrap() };
        for dir in ["root", "home", "bin"] {
            std::fs::create_dir(node.path(dir)).unwrap();
        }
        node
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn node_keyring(&self) -> NodeKeyring {
        NodeKeyring::new(DockerConfigSearchPaths { preferred: self.path("root"), home: self.path("home") })
    }

    fn write_plugin_config(&self, config: &str) -> PathBuf {
        let path = self.path("credential-providers.yaml");
        std::fs::write(&path, config.replace("__OUT__", &self.tmp.path().display().to_string())).unwrap();
        path
    }
}

fn pull_secret(name: &str, doc: &str) -> PullSecret {
    PullSecret {
        coordinates: SecretCoordinates { uid: format!("uid-{name}"), namespace: "ns".into(), name: name.into() },
        config: DockerConfig::from_dockercfg_bytes(doc.as_bytes()).unwrap(),
    }
}

#[tokio::test]
async fn secrets_then_node_then_plugins() {
    let _lock = PROCESS_LOCK.lock().await;
    let node = Node::new();
    let node_config = r#"{"auths": {"registry.io": {"username": "node", "password": "n"}}}"#;
    std::fs::write(node.path("root").join("config.json"), node_config).unwrap();
    write_script(
        &node.path("bin"),
        "acr-login",
        &format!("cat > \"$OUT_DIR/request.json\"\nprintf '%s' '{PLUGIN_REPLY}'"),
    );
    let accounts = Arc::new(FakeServiceAccounts::new());
    accounts.insert("ns", "builder", "uid-builder", &[("example.com/client-id", "42"), ("unrelated", "x")]);
    let source: Arc<dyn ServiceAccountSource> = accounts.clone();
    let options = PluginOptions { service_account_tokens: true, service_accounts: Some(source) };
    let plugins = PluginKeyring::load(&node.write_plugin_config(PLUGIN_CONFIG), &node.path("bin"), options).unwrap();
    assert_eq!(plugins.provider_names(), ["acr-login"]);
    assert!(plugins.config_hash().starts_with("sha256:"));
    let lookup = CredentialLookup::new(node.node_keyring(), Some(plugins));

    let secrets = [
        pull_secret("generic", r#"{"registry.io": {"username": "secret-generic", "password": "s1"}}"#),
        pull_secret("team", r#"{"registry.io/team": {"username": "secret-team", "password": "s2"}}"#),
    ];
    let pod = PodContext::new("ns", "web-0", "uid-web-0", "builder");
    let found = lookup.lookup("registry.io/team/app", &pod, &secrets).await;
    let users: Vec<_> = found.iter().map(|t| t.auth.username.as_str()).collect();
    assert_eq!(users, ["secret-team", "secret-generic", "node", "plugin-team", "plugin"]);
    let secret = |name: &str| {
        Some(CredentialSource::Secret(SecretCoordinates {
            uid: format!("uid-{name}"),
            namespace: "ns".into(),
            name: name.into(),
        }))
    };
    let service_account = Some(CredentialSource::ServiceAccount(ServiceAccountCoordinates {
        uid: "uid-builder".into(),
        namespace: "ns".into(),
        name: "builder".into(),
    }));
    let sources: Vec<_> = found.iter().map(|t| t.source.clone()).collect();
    assert_eq!(sources, [secret("team"), secret("generic"), None, service_account.clone(), service_account]);

    let request = std::fs::read_to_string(node.path("request.json")).unwrap();
    assert_eq!(
        request,
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"registry.io/team/app\",\"serviceAccountToken\":\"token-1\",\"serviceAccountAnnotations\":{\"example.com/client-id\":\"42\"}}\n"
    );
    // The response is cached per registry and service account: no second run, no token in any Debug output.
    std::fs::remove_file(node.path("request.json")).unwrap();
    let again = lookup.lookup("registry.io/other", &pod, &[]).await;
    assert_eq!(again.iter().map(|t| t.auth.username.as_str()).collect::<Vec<_>>(), ["node", "plugin"]);
    assert!(!node.path("request.json").exists());
    let debug = format!("{again:?}");
    assert!(!debug.contains("p1") && !debug.contains("\"n\"") && !debug.contains("token-1"), "{debug}");

    // A pod without a service account: the plugin requires one, so only the node's credentials remain.
    let found = lookup.lookup("registry.io/app", &PodContext::new("ns", "static", "u", ""), &[]).await;
    assert_eq!(found.iter().map(|t| t.auth.username.as_str()).collect::<Vec<_>>(), ["node"]);
}

#[tokio::test]
async fn registration_errors() {
    let _lock = PROCESS_LOCK.lock().await;
    let node = Node::new();
    let config = node.write_plugin_config(PLUGIN_CONFIG);
    let bin = node.path("bin");
    let load = |bin: &std::path::Path, options: PluginOptions| {
        PluginKeyring::load(&config, bin, options).unwrap_err().to_string()
    };

    let missing_dir = node.path("nope");
    assert_eq!(
        load(&missing_dir, PluginOptions::default()),
        format!("plugin binary directory {} did not exist", missing_dir.display())
    );
    let binary = bin.join("acr-login");
    assert_eq!(
        load(&bin, PluginOptions::default()),
        format!("plugin binary executable {} did not exist", binary.display())
    );
    std::fs::write(&binary, "#!/bin/sh\n").unwrap();
    assert_eq!(
        load(&bin, PluginOptions::default()),
        format!("error inspecting binary executable {}: permission denied", binary.display())
    );
    let gate_off = PluginOptions { service_account_tokens: false, service_accounts: None };
    assert_eq!(
        load(&bin, gate_off),
        "failed to validate credential provider config: providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"
    );

    // As the kubelet: no flags, no plugins; one flag without the other fails as upstream.
    let root = node.path("root");
    let empty = std::path::Path::new("");
    let lookup = CredentialLookup::for_kubelet(&root, empty, empty, PluginOptions::default()).unwrap();
    assert!(lookup.plugins().is_none());
    let err = CredentialLookup::for_kubelet(&root, &config, empty, PluginOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "plugin binary directory  did not exist");
    let err = CredentialLookup::for_kubelet(&root, empty, &bin, PluginOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "credential provider config path is empty");
}

#[tokio::test]
async fn without_plugins_node_and_docker_hub() {
    let node = Node::new();
    let hub = r#"{"auths": {"https://index.docker.io/v1/": {"auth": "aHViOmh1Yi1wYXNz"}}}"#;
    std::fs::write(node.path("root").join("config.json"), hub).unwrap();
    let lookup = CredentialLookup::new(node.node_keyring(), None);
    let image = crate::repository_to_pull("nginx:1.27").unwrap();
    let found = lookup.lookup(&image, &PodContext::default(), &[]).await;
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].auth.username.as_str(), found[0].auth.password.as_str()), ("hub", "hub-pass"));
    assert!(lookup.lookup("quay.io/app", &PodContext::default(), &[]).await.is_empty());
}

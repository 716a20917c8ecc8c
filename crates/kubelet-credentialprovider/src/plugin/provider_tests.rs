//! Tests of one plugin's provide: matching, caching on the paused clock, dedup, service account token mode.

use super::*;
use crate::plugin::service_account::FakeServiceAccounts;
use crate::test_support::{FakePlugin, response};

const HOUR: Duration = Duration::from_secs(3600);

fn provider(plugin: &Arc<FakePlugin>, default: Duration) -> PluginProvider {
    PluginProvider::new(
        "test".into(),
        vec!["*.registry.io".into(), "registry.io".into()],
        default,
        plugin.clone(),
        None,
        None,
    )
}

fn registry_response() -> CredentialProviderResponse {
    response("Registry", None, &[("registry.io", "user", "pass")])
}

fn no_pod() -> PodContext {
    PodContext::default()
}

async fn users(p: &PluginProvider, image: &str, pod: &PodContext) -> Vec<String> {
    let provided = p.provide(image, pod).await.unwrap_or_else(|e| panic!("{image}: {e}"));
    provided.config.0.values().map(|e| e.username.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn images_outside_match_images_never_run_the_plugin() {
    let plugin = Arc::new(FakePlugin::new(registry_response()));
    let p = provider(&plugin, HOUR);
    for image in ["other.io/app", "a.b.registry.io/app", "registry.io:5000/app"] {
        assert_eq!(p.provide(image, &no_pod()).await, Ok(Provided::default()), "{image}");
    }
    assert!(plugin.calls().is_empty());
    assert_eq!(users(&p, "a.registry.io/app", &no_pod()).await, ["user"]);
    assert_eq!(plugin.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cache_key_types() {
    // Registry: every image of the registry is served from the cache; another registry runs again.
    let plugin = Arc::new(FakePlugin::new(registry_response()));
    let p = provider(&plugin, HOUR);
    for image in ["registry.io/a", "registry.io/b", "registry.io/a/b"] {
        users(&p, image, &no_pod()).await;
    }
    assert_eq!(plugin.calls().len(), 1);
    users(&p, "eu.registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 2);

    // Image: per image.
    let plugin = Arc::new(FakePlugin::new(response("Image", None, &[("registry.io", "u", "p")])));
    let p = provider(&plugin, HOUR);
    for image in ["registry.io/a", "registry.io/a", "registry.io/b"] {
        users(&p, image, &no_pod()).await;
    }
    let images: Vec<_> = plugin.calls().into_iter().map(|c| c.image).collect();
    assert_eq!(images, ["registry.io/a", "registry.io/b"]);

    // Global: one run for everything the plugin matches.
    let plugin = Arc::new(FakePlugin::new(response("Global", None, &[("*.registry.io", "u", "p")])));
    let p = provider(&plugin, HOUR);
    for image in ["registry.io/a", "eu.registry.io/b", "us.registry.io/c"] {
        users(&p, image, &no_pod()).await;
    }
    assert_eq!(plugin.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn default_duration_and_response_duration_expire_on_the_clock() {
    let plugin = Arc::new(FakePlugin::new(registry_response()));
    let p = provider(&plugin, HOUR);
    users(&p, "registry.io/a", &no_pod()).await;
    tokio::time::advance(HOUR).await;
    users(&p, "registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 1, "still cached at the expiry instant");
    tokio::time::advance(Duration::from_millis(1)).await;
    users(&p, "registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 2);

    // The response's duration wins over the default.
    plugin.set_response(Ok(response("Registry", Some("1m"), &[("registry.io", "u", "p")])));
    users(&p, "eu.registry.io/a", &no_pod()).await;
    tokio::time::advance(Duration::from_secs(61)).await;
    users(&p, "eu.registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn zero_durations_do_not_cache() {
    let plugin = Arc::new(FakePlugin::new(response("Registry", Some("0s"), &[("registry.io", "u", "p")])));
    let p = provider(&plugin, HOUR);
    users(&p, "registry.io/a", &no_pod()).await;
    users(&p, "registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 2);
    // No duration in the response and a zero default.
    let plugin = Arc::new(FakePlugin::new(registry_response()));
    let p = provider(&plugin, Duration::ZERO);
    users(&p, "registry.io/a", &no_pod()).await;
    users(&p, "registry.io/a", &no_pod()).await;
    assert_eq!(plugin.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn unusable_responses_are_errors_and_not_cached() {
    let plugin = Arc::new(FakePlugin::new(response("Repository", None, &[("registry.io", "u", "p")])));
    let p = provider(&plugin, HOUR);
    assert_eq!(p.provide("registry.io/a", &no_pod()).await, Err(ProvideError::CacheKeyType("Repository".into())));
    plugin.set_response(Err(ExecError::Decode));
    let err = p.provide("registry.io/a", &no_pod()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to get credential from external registry credential provider: error decoding credential provider plugin response from stdout"
    );
    assert_eq!(plugin.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_for_one_image_share_one_run() {
    let (release, released) = tokio::sync::watch::channel(false);
    let plugin = Arc::new(FakePlugin::gated(response("Image", Some("0s"), &[("registry.io", "u", "p")]), released));
    let p = provider(&plugin, HOUR);
    let pod = no_pod();
    let release_when_waiting = async {
        while plugin.calls().is_empty() {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        release.send(true).unwrap();
    };
    let (a, b, c, ()) = tokio::join!(
        p.provide("registry.io/a", &pod),
        p.provide("registry.io/a", &pod),
        p.provide("registry.io/b", &pod),
        release_when_waiting
    );
    assert_eq!(a.unwrap(), b.unwrap());
    assert!(c.is_ok());
    let mut images: Vec<_> = plugin.calls().into_iter().map(|c| c.image).collect();
    images.sort();
    assert_eq!(images, ["registry.io/a", "registry.io/b"]);
}

fn token_provider(
    plugin: &Arc<FakePlugin>,
    accounts: &Arc<FakeServiceAccounts>,
    require: bool,
    cache_by_token: bool,
    required: &[&str],
) -> PluginProvider {
    let sa = ServiceAccountProvider {
        audience: "registry-audience".into(),
        require_service_account: require,
        required_annotation_keys: required.iter().map(|s| s.to_string()).collect(),
        optional_annotation_keys: vec!["example.com/optional".into()],
        cache_by_token,
    };
    let source: Arc<dyn ServiceAccountSource> = accounts.clone();
    PluginProvider::new("sa".into(), vec!["registry.io".into()], HOUR, plugin.clone(), Some(sa), Some(source))
}

fn accounts() -> Arc<FakeServiceAccounts> {
    let accounts = Arc::new(FakeServiceAccounts::new());
    accounts.insert("ns", "builder", "uid-builder", &[("example.com/role", "puller"), ("example.com/optional", "o")]);
    accounts.insert("ns", "other", "uid-other", &[("example.com/role", "reader")]);
    accounts
}

fn pod(name: &str, service_account: &str) -> PodContext {
    PodContext::new("ns", name, format!("uid-{name}"), service_account)
}

#[tokio::test(start_paused = true)]
async fn token_mode_sends_token_and_annotations_and_tags_the_service_account() {
    let plugin = Arc::new(FakePlugin::new(registry_response()));
    let accounts = accounts();
    let p = token_provider(&plugin, &accounts, true, false, &["example.com/role"]);
    let provided = p.provide("registry.io/app", &pod("web-0", "builder")).await.unwrap();
    assert_eq!(
        provided.coordinates,
        Some(ServiceAccountCoordinates { uid: "uid-builder".into(), namespace: "ns".into(), name: "builder".into() })
    );
    let calls = plugin.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].token.as_deref(), Some("token-1"));
    let annotations: Vec<_> = calls[0].annotations.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(annotations, ["example.com/optional=o", "example.com/role=puller"]);
    let request = &accounts.token_requests()[0];
    assert_eq!((request.pod_name.as_str(), request.pod_uid.as_str()), ("web-0", "uid-web-0"));
    assert_eq!(
        (request.service_account_uid.as_str(), request.audiences.as_slice()),
        ("uid-builder", &["registry-audience".to_string()][..])
    );

    // cacheType ServiceAccount: another pod of the same account is served from the cache, another account is not.
    p.provide("registry.io/app", &pod("web-1", "builder")).await.unwrap();
    assert_eq!(plugin.calls().len(), 1);
    p.provide("registry.io/app", &pod("web-2", "other")).await.unwrap();
    assert_eq!(plugin.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn token_cache_type_keys_on_the_token() {
    let plugin = Arc::new(FakePlugin::new(response("Registry", None, &[("registry.io", "u", "token-1")])));
    let accounts = accounts();
    let p = token_provider(&plugin, &accounts, true, true, &[]);
    // The fake token manager reuses a pod's token: cached.
    p.provide("registry.io/app", &pod("web-0", "builder")).await.unwrap();
    p.provide("registry.io/app", &pod("web-0", "builder")).await.unwrap();
    assert_eq!(plugin.calls().len(), 1);
    // Another pod gets another token: the plugin runs again. Echoing the token is allowed with cacheType Token.
    let provided = p.provide("registry.io/app", &pod("web-1", "builder")).await.unwrap();
    assert_eq!(plugin.calls().len(), 2);
    assert_eq!(provided.config.0["registry.io"].password, "token-1");
}

#[tokio::test(start_paused = true)]
async fn token_mode_skips_and_refusals() {
    let plugin = Arc::new(FakePlugin::new(response("Registry", None, &[("registry.io", "u", "token-1")])));
    let accounts = accounts();
    // A pod without a service account, when one is required; a missing required annotation.
    let p = token_provider(&plugin, &accounts, true, false, &["example.com/missing"]);
    assert_eq!(p.provide("registry.io/app", &pod("static", "")).await, Ok(Provided::default()));
    assert_eq!(p.provide("registry.io/app", &pod("web-0", "builder")).await, Ok(Provided::default()));
    assert!(plugin.calls().is_empty());
    // The token echoed as password with cacheType ServiceAccount.
    let p = token_provider(&plugin, &accounts, false, false, &[]);
    assert_eq!(p.provide("registry.io/app", &pod("web-0", "builder")).await, Err(ProvideError::TokenEchoed));
    // Not required: a pod without a service account runs the plugin without a token.
    let provided = p.provide("registry.io/app", &pod("static", "")).await.unwrap();
    assert_eq!(provided.coordinates, None);
    assert_eq!(plugin.calls().last().unwrap().token, None);
    // Failures of the apiserver side.
    let err = p.provide("registry.io/app", &pod("web-0", "ghost")).await.unwrap_err();
    assert_eq!(err.to_string(), r#"failed to get service account: serviceaccounts "ghost" not found in namespace ns"#);
    accounts.fail_tokens(Some("token request forbidden"));
    let err = p.provide("registry.io/app", &pod("web-9", "builder")).await.unwrap_err();
    assert_eq!(err.to_string(), "failed to get service account token: token request forbidden");
    let mut no_source = token_provider(&plugin, &accounts, true, false, &[]);
    no_source.source = None;
    assert_eq!(
        no_source.provide("registry.io/app", &pod("web-0", "builder")).await,
        Err(ProvideError::NoServiceAccountSource)
    );
}

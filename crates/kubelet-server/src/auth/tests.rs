use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo as ApiUser};
use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;
use kubelet_apiclient::ApiResult;

use super::*;

/// Accepts the token "good" as user "alice"; allows "alice" the `stats` subresource only; counts calls;
/// fails while `down` is set.
#[derive(Default)]
struct FakeReviews {
    token_calls: AtomicUsize,
    sar_calls: AtomicUsize,
    down: std::sync::atomic::AtomicBool,
    seen: Mutex<Vec<SubjectAccessReview>>,
}

#[async_trait]
impl ReviewApi for FakeReviews {
    async fn create_token_review(&self, review: &TokenReview) -> ApiResult<TokenReview> {
        self.token_calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(ApiError::Unavailable("connection refused".into()));
        }
        let mut r = review.clone();
        let ok = review.spec.token.as_deref() == Some("good");
        r.status = Some(TokenReviewStatus {
            authenticated: Some(ok),
            user: ok.then(|| ApiUser {
                username: Some("alice".into()),
                groups: Some(vec!["devs".into()]),
                ..Default::default()
            }),
            ..Default::default()
        });
        Ok(r)
    }

    async fn create_subject_access_review(&self, review: &SubjectAccessReview) -> ApiResult<SubjectAccessReview> {
        self.sar_calls.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(review.clone());
        if self.down.load(Ordering::SeqCst) {
            return Err(ApiError::Unavailable("connection refused".into()));
        }
        let ra = review.spec.resource_attributes.clone().unwrap();
        let allowed = review.spec.user.as_deref() == Some("alice") && ra.subresource.as_deref() == Some("stats");
        let mut r = review.clone();
        r.status = Some(SubjectAccessReviewStatus { allowed, ..Default::default() });
        Ok(r)
    }
}

fn authn(anonymous: bool, api: &Arc<FakeReviews>) -> Authenticator {
    Authenticator { anonymous, webhook: Some(TokenWebhook::new(api.clone(), Duration::from_secs(120))) }
}

#[tokio::test(start_paused = true)]
async fn tokens_are_reviewed_once_per_cache_ttl_and_refusals_are_cached_too() {
    let api = Arc::new(FakeReviews::default());
    let a = authn(false, &api);
    let u = a.authenticate(&PeerCert::None, Some("good")).await.unwrap();
    assert_eq!(u.name, "alice");
    assert_eq!(u.groups, vec!["devs".to_string(), AUTHENTICATED_GROUP.to_string()]);
    a.authenticate(&PeerCert::None, Some("good")).await.unwrap();
    assert_eq!(api.token_calls.load(Ordering::SeqCst), 1);
    assert_eq!(a.authenticate(&PeerCert::None, Some("bad")).await, Err(AuthnError::InvalidToken));
    assert!(a.authenticate(&PeerCert::None, Some("bad")).await.is_err());
    assert_eq!(api.token_calls.load(Ordering::SeqCst), 2, "a refusal is cached");
    tokio::time::advance(Duration::from_secs(121)).await;
    a.authenticate(&PeerCert::None, Some("good")).await.unwrap();
    assert_eq!(api.token_calls.load(Ordering::SeqCst), 3, "reviewed again after cacheTTL");
}

#[tokio::test(start_paused = true)]
async fn anonymous_only_without_credentials_and_only_when_enabled() {
    let api = Arc::new(FakeReviews::default());
    let on = authn(true, &api);
    let u = on.authenticate(&PeerCert::None, None).await.unwrap();
    assert_eq!((u.name.as_str(), u.groups.clone()), (ANONYMOUS_USER, vec![UNAUTHENTICATED_GROUP.to_string()]));
    assert!(on.authenticate(&PeerCert::None, Some("bad")).await.is_err(), "a refused token is 401 even then");
    assert!(
        on.authenticate(&PeerCert::Invalid(AuthnError::Certificate("x".into())), None).await.is_err(),
        "so is a foreign certificate"
    );
    assert!(authn(false, &api).authenticate(&PeerCert::None, None).await.is_err());
    let cert_user =
        UserInfo { name: "kube-apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() };
    let u = authn(false, &api).authenticate(&PeerCert::User(cert_user), Some("bad")).await.unwrap();
    assert_eq!(u.name, "kube-apiserver", "the certificate is tried first");
    assert_eq!(api.token_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn apiserver_outage_is_retried_then_fails_the_request_without_caching() {
    let api = Arc::new(FakeReviews::default());
    api.down.store(true, Ordering::SeqCst);
    let a = authn(false, &api);
    let t0 = Instant::now();
    assert!(a.authenticate(&PeerCert::None, Some("good")).await.is_err());
    assert_eq!(api.token_calls.load(Ordering::SeqCst), 5);
    // 0.5 + 0.75 + 1.125 + 1.6875 s of back-off (the paused clock counts whole milliseconds).
    let waited = t0.elapsed().as_millis();
    assert!((4062..=4064).contains(&waited), "{waited} ms");
    api.down.store(false, Ordering::SeqCst);
    assert_eq!(a.authenticate(&PeerCert::None, Some("good")).await.unwrap().name, "alice");
}

#[test]
fn bearer_tokens_come_from_the_header_or_the_websocket_protocol() {
    assert_eq!(bearer_token(Some("Bearer abc"), None).as_deref(), Some("abc"));
    assert_eq!(bearer_token(Some("bearer  abc"), None).as_deref(), Some("abc"));
    assert_eq!(bearer_token(Some("Basic abc"), None), None);
    assert_eq!(bearer_token(Some("Bearer"), None), None);
    let p = "v4.channel.k8s.io, base64url.bearer.authorization.k8s.io.dG9rLTE";
    assert_eq!(bearer_token(None, Some(p)).as_deref(), Some("tok-1"));
    assert_eq!(bearer_token(None, Some("base64url.bearer.authorization.k8s.io.!!")).as_deref(), Some(""));
}

#[test]
fn attributes_follow_the_path_and_method() {
    let a = |m, p| attributes(m, p, "node-a");
    assert_eq!(a("GET", "/stats/summary").subresources, vec!["stats"]);
    assert_eq!(a("GET", "/stats").subresources, vec!["stats"]);
    assert_eq!(a("GET", "/metrics/resource").subresources, vec!["metrics"]);
    assert_eq!(a("GET", "/metricsx").subresources, vec!["proxy"]);
    assert_eq!(a("GET", "/logs/syslog").subresources, vec!["log"]);
    assert_eq!(a("GET", "/containerLogs/ns/p/c").subresources, vec!["proxy"]);
    assert_eq!(a("GET", "/pods").subresources, vec!["pods", "proxy"]);
    assert_eq!(a("GET", "/runningpods/").subresources, vec!["pods", "proxy"]);
    assert_eq!(a("GET", "/healthz").subresources, vec!["healthz", "proxy"]);
    assert_eq!(a("GET", "/configz").subresources, vec!["configz", "proxy"]);
    assert_eq!(a("GET", "/a/../stats/summary").subresources, vec!["stats"], "paths are cleaned first");
    let e = a("POST", "/exec/ns/p/c");
    assert_eq!((e.verb.as_str(), e.name.as_str(), e.subresources.clone()), ("create", "node-a", vec!["proxy"]));
    assert_eq!(a("PUT", "/x").verb, "update");
    assert_eq!(a("DELETE", "/x").verb, "delete");
}

#[tokio::test(start_paused = true)]
async fn webhook_asks_per_subresource_and_caches_both_answers() {
    let api = Arc::new(FakeReviews::default());
    let z = Authorizer::Webhook(AccessWebhook::new(api.clone(), Duration::from_secs(300), Duration::from_secs(30)));
    let alice = UserInfo { name: "alice".into(), groups: vec!["devs".into()], ..Default::default() };
    assert_eq!(z.authorize(&alice, &attributes("GET", "/stats/summary", "node-a")).await, Decision::Allow);
    let sar = api.seen.lock().unwrap()[0].clone();
    assert_eq!(
        serde_json::to_value(&sar.spec).unwrap(),
        serde_json::json!({"user": "alice", "groups": ["devs"], "resourceAttributes":
            {"verb": "get", "version": "v1", "resource": "nodes", "subresource": "stats", "name": "node-a"}})
    );
    assert_eq!(
        z.authorize(&alice, &attributes("GET", "/pods", "node-a")).await,
        Decision::Forbidden("Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n".into())
    );
    assert_eq!(api.sar_calls.load(Ordering::SeqCst), 3, "pods, then proxy");
    z.authorize(&alice, &attributes("GET", "/stats/summary", "node-a")).await;
    z.authorize(&alice, &attributes("GET", "/pods", "node-a")).await;
    assert_eq!(api.sar_calls.load(Ordering::SeqCst), 3, "both answers cached");
    tokio::time::advance(Duration::from_secs(31)).await;
    z.authorize(&alice, &attributes("GET", "/stats/summary", "node-a")).await;
    z.authorize(&alice, &attributes("GET", "/pods", "node-a")).await;
    assert_eq!(api.sar_calls.load(Ordering::SeqCst), 5, "the denials expire after 30 s, the allowance later");
    api.down.store(true, Ordering::SeqCst);
    let d = z.authorize(&alice, &attributes("GET", "/configz", "node-a")).await;
    assert_eq!(
        d,
        Decision::Error("Authorization error (user=alice, verb=get, resource=nodes, subresource=configz)".into())
    );
    assert!(matches!(
        Authorizer::AlwaysAllow.authorize(&alice, &attributes("GET", "/pods", "n")).await,
        Decision::Allow
    ));
}

//! Tests of the plugin wire format (upstream's Test_encodeRequest, Test_decodeResponse) and of running a real
//! shell-script plugin.

use super::*;
use crate::test_support::{PROCESS_LOCK, write_script};

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

fn request<'a>(
    image: &'a str,
    token: Option<&'a ServiceAccountToken>,
    annotations: &'a BTreeMap<String, String>,
) -> PluginRequest<'a> {
    PluginRequest { image, token, annotations }
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn requests_encode_as_upstream() {
    for version in ["v1alpha1", "v1beta1", "v1"] {
        let api_version = format!("credentialprovider.kubelet.k8s.io/{version}");
        let want = format!(
            "{{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"{api_version}\",\"image\":\"test.registry.io/foobar\"}}\n"
        );
        assert_eq!(
            String::from_utf8(encode_request(&api_version, PluginRequest::image_only("test.registry.io/foobar")))
                .unwrap(),
            want
        );
    }
    let token = ServiceAccountToken::new("service-account-token");
    let one = annotations(&[("domain.io/annotation1", "value1")]);
    let with_token = encode_request(V1, request("test.registry.io/foobar", Some(&token), &one));
    assert_eq!(
        String::from_utf8(with_token).unwrap(),
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"test.registry.io/foobar\",\"serviceAccountToken\":\"service-account-token\",\"serviceAccountAnnotations\":{\"domain.io/annotation1\":\"value1\"}}\n"
    );
    // Older versions have no token fields.
    let old = encode_request("credentialprovider.kubelet.k8s.io/v1beta1", request("r.io/a", Some(&token), &one));
    assert!(!String::from_utf8(old).unwrap().contains("serviceAccount"));
}

fn response_json(api_version: &str, rest: &str) -> String {
    format!(
        r#"{{"kind":"CredentialProviderResponse","apiVersion":"{api_version}","cacheKeyType":"Registry","cacheDuration":"1m","auth":{{"*.registry.io":{{"username":"user","password":"password"}}}}{rest}}}"#
    )
}

#[test]
fn responses_decode_as_upstream() {
    for version in ["v1", "v1beta1", "v1alpha1"] {
        let api_version = format!("credentialprovider.kubelet.k8s.io/{version}");
        let decoded = decode_response(response_json(&api_version, "").as_bytes(), &api_version).unwrap();
        assert_eq!(decoded.cache_key_type, "Registry");
        assert_eq!(decoded.cache_duration.and_then(|d| d.as_std()), Some(Duration::from_secs(60)));
        let auth = &decoded.auth["*.registry.io"];
        assert_eq!((auth.username.as_deref(), auth.password.as_deref()), (Some("user"), Some("password")));
    }
    let minimal = format!(r#"{{"kind":"CredentialProviderResponse","apiVersion":"{V1}","cacheKeyType":"Image"}}"#);
    let decoded = decode_response(minimal.as_bytes(), V1).unwrap();
    assert_eq!((decoded.cache_duration, decoded.auth.len()), (None, 0));
}

#[test]
fn bad_responses() {
    let wrong_kind = response_json(V1, "").replace("CredentialProviderResponse", "WrongKind");
    assert_eq!(decode_response(wrong_kind.as_bytes(), V1), Err(ExecError::Decode));
    let wrong_group = "foobar.kubelet.k8s.io/v1beta1";
    assert_eq!(decode_response(response_json(wrong_group, "").as_bytes(), wrong_group), Err(ExecError::Decode));
    let err =
        decode_response(response_json(V1, "").as_bytes(), "credentialprovider.kubelet.k8s.io/v1beta1").unwrap_err();
    assert_eq!(
        err.to_string(),
        "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1beta1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1"
    );
    // Strict: an unknown field fails, and the message shows nothing of the response.
    let err = decode_response(response_json(V1, r#","extra":"password""#).as_bytes(), V1).unwrap_err();
    assert_eq!(err.to_string(), "error decoding credential provider plugin response from stdout");
    let bad_duration = response_json(V1, "").replace("\"1m\"", "\"soon\"");
    assert_eq!(decode_response(bad_duration.as_bytes(), V1), Err(ExecError::Decode));
    assert!(matches!(decode_response(b"not json", V1), Err(ExecError::Gvk(_))));
    assert!(matches!(decode_response(b"[]", V1), Err(ExecError::Gvk(_))));
}

fn exec_plugin(bin_dir: &std::path::Path, name: &str, timeout: Duration) -> ExecPlugin {
    ExecPlugin {
        name: name.into(),
        api_version: V1.into(),
        bin_dir: bin_dir.to_path_buf(),
        args: vec!["--region".into(), "eu west".into()],
        env: vec![
            ExecEnvVar { name: "OUT_DIR".into(), value: bin_dir.display().to_string() },
            ExecEnvVar { name: "HOME".into(), value: "/overridden".into() },
        ],
        timeout,
    }
}

#[tokio::test]
async fn runs_a_script_plugin() {
    let _lock = PROCESS_LOCK.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let reply = response_json(V1, "").replace("\"1m\"", "\"10m\"");
    write_script(
        tmp.path(),
        "ecr-login",
        &format!(
            r#"cat > "$OUT_DIR/request.json"
printf '%s\n' "$@" > "$OUT_DIR/args"
printf '%s|%s' "$HOME" "${{PATH:+path-set}}" > "$OUT_DIR/env"
printf '%s' '{reply}'"#
        ),
    );
    let plugin = exec_plugin(tmp.path(), "ecr-login", EXEC_TIMEOUT);
    let token = ServiceAccountToken::new("sa-token");
    let got = plugin.exec(request("registry.io/app", Some(&token), &annotations(&[("a.io/role", "x")]))).await.unwrap();
    assert_eq!(got.cache_duration.and_then(|d| d.as_std()), Some(Duration::from_secs(600)));
    assert_eq!(got.auth["*.registry.io"].password.as_deref(), Some("password"));
    let read = |name: &str| std::fs::read_to_string(tmp.path().join(name)).unwrap();
    assert_eq!(
        read("request.json"),
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"registry.io/app\",\"serviceAccountToken\":\"sa-token\",\"serviceAccountAnnotations\":{\"a.io/role\":\"x\"}}\n"
    );
    assert_eq!(read("args"), "--region\neu west\n");
    // The configured env wins over the kubelet's, which is otherwise inherited.
    assert_eq!(read("env"), "/overridden|path-set");
}

#[tokio::test]
async fn failing_and_hanging_plugins() {
    let _lock = PROCESS_LOCK.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    write_script(tmp.path(), "fails", "echo 'no credentials for you' >&2\nexit 3");
    let err = exec_plugin(tmp.path(), "fails", EXEC_TIMEOUT).exec(PluginRequest::image_only("registry.io/app")).await;
    assert_eq!(
        err.unwrap_err().to_string(),
        "error execing credential provider plugin fails for image registry.io/app: exit status 3: no credentials for you"
    );

    write_script(tmp.path(), "hangs", "exec sleep 30");
    let err = exec_plugin(tmp.path(), "hangs", Duration::from_millis(200))
        .exec(PluginRequest::image_only("registry.io/app"))
        .await;
    assert_eq!(
        err.unwrap_err().to_string(),
        "error execing credential provider plugin hangs for image registry.io/app: context deadline exceeded: "
    );

    write_script(
        tmp.path(),
        "wrong-version",
        &format!("printf '%s' '{}'", response_json("credentialprovider.kubelet.k8s.io/v1alpha1", "")),
    );
    let err =
        exec_plugin(tmp.path(), "wrong-version", EXEC_TIMEOUT).exec(PluginRequest::image_only("registry.io/app")).await;
    assert!(matches!(err, Err(ExecError::ApiVersion { .. })), "{err:?}");

    let err = exec_plugin(tmp.path(), "missing", EXEC_TIMEOUT).exec(PluginRequest::image_only("registry.io/app")).await;
    assert!(
        err.unwrap_err()
            .to_string()
            .starts_with("error execing credential provider plugin missing for image registry.io/app: ")
    );
}

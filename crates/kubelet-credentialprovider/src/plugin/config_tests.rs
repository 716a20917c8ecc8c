//! Tests of the plugin configuration, ported from upstream's `plugin/config_test.go` where possible.

use super::*;

/// upstream's "config with 1 plugin and 1 image matcher", byte for byte (its hash is upstream's).
const V1ALPHA1_YAML: &str = "---
kind: CredentialProviderConfig
apiVersion: kubelet.config.k8s.io/v1alpha1
providers:
  - name: test
    matchImages:
    - \"registry.io/foobar\"
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1alpha1
    args:
    - --v=5
    env:
    - name: FOO
      value: BAR";

fn test_provider(name: &str, image: &str, minutes: u64, api_version: &str) -> CredentialProvider {
    CredentialProvider {
        name: name.into(),
        match_images: vec![image.into()],
        default_cache_duration: Some(GoDuration::from_std(Duration::from_secs(minutes * 60))),
        api_version: api_version.into(),
        ..Default::default()
    }
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents).unwrap();
    }
}

#[test]
fn reads_a_yaml_file_with_upstreams_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.yaml");
    std::fs::write(&path, V1ALPHA1_YAML).unwrap();
    let loaded = read_credential_provider_config(&path).unwrap();
    let mut want = test_provider("test", "registry.io/foobar", 10, "credentialprovider.kubelet.k8s.io/v1alpha1");
    want.args = vec!["--v=5".into()];
    want.env = vec![ExecEnvVar { name: "FOO".into(), value: "BAR".into() }];
    assert_eq!(loaded.config, CredentialProviderConfig { providers: vec![want] });
    assert_eq!(loaded.hash, "sha256:8a62755289ba50c4ca9495baab69eb861068503f8bd49b853e8ba6cf95c72bb8");
}

#[test]
fn reads_json_and_v1_token_attributes() {
    let json = r#"{
        "kind": "CredentialProviderConfig", "apiVersion": "kubelet.config.k8s.io/v1",
        "providers": [{
            "name": "ecr", "matchImages": ["*.dkr.ecr.*.amazonaws.com"], "defaultCacheDuration": "12h",
            "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "tokenAttributes": {
                "serviceAccountTokenAudience": "aud", "cacheType": "ServiceAccount", "requireServiceAccount": true,
                "requiredServiceAccountAnnotationKeys": ["example.com/role"], "optionalServiceAccountAnnotationKeys": null
            }
        }]
    }"#;
    let config = decode_credential_provider_config(json.as_bytes()).unwrap();
    let attributes = config.providers[0].token_attributes.clone().unwrap();
    assert_eq!(
        attributes,
        ServiceAccountTokenAttributes {
            service_account_token_audience: "aud".into(),
            cache_type: "ServiceAccount".into(),
            require_service_account: Some(true),
            required_service_account_annotation_keys: vec!["example.com/role".into()],
            optional_service_account_annotation_keys: vec![],
        }
    );
    assert_eq!(config.providers[0].default_cache_duration.unwrap().as_std(), Some(Duration::from_secs(12 * 3600)));
    assert!(validate_credential_provider_config(&config, true).is_empty());
}

#[test]
fn decode_errors_read_as_upstream() {
    let with = |from: &str, to: &str| V1ALPHA1_YAML.replacen(from, to, 1);
    let cases = [
        (
            with("kind: CredentialProviderConfig", "kind: WrongKind"),
            r#"no kind "WrongKind" is registered for version "kubelet.config.k8s.io/v1alpha1""#,
        ),
        (
            with("apiVersion: kubelet.config.k8s.io/v1alpha1", "apiVersion: foobar/v1alpha1"),
            r#"no kind "CredentialProviderConfig" is registered for version "foobar/v1alpha1""#,
        ),
        (
            with("    defaultCacheDuration: 10m\n", "    defaultCacheDuration: 10m\n    unknownField: x # typo\n"),
            r#"strict decoding error: unknown field "providers[0].unknownField""#,
        ),
        (
            with("    args:", "    tokenAttributes:\n      serviceAccountTokenAudience: audience\n    args:"),
            r#"strict decoding error: unknown field "providers[0].tokenAttributes""#,
        ),
        (
            with("      value: BAR", "      value: BAR\n      other: x"),
            r#"strict decoding error: unknown field "providers[0].env[0].other""#,
        ),
        (with("kind: CredentialProviderConfig\n", ""), "Object 'Kind' is missing"),
        (
            with("defaultCacheDuration: 10m", "defaultCacheDuration: ten"),
            "providers[0].defaultCacheDuration: invalid duration",
        ),
    ];
    for (doc, want) in cases {
        let err = decode_credential_provider_config(doc.as_bytes()).unwrap_err();
        assert!(err.starts_with(want), "{err}\nwanted {want}");
    }
    let v1beta1 = V1ALPHA1_YAML.replace("v1alpha1", "v1beta1");
    let doc = v1beta1.replacen("    args:", "    tokenAttributes: {}\n    args:", 1);
    assert!(decode_credential_provider_config(doc.as_bytes()).unwrap_err().contains("providers[0].tokenAttributes"));
    // v1 has the field, but not unknown fields inside it.
    let v1 = V1ALPHA1_YAML.replacen("kubelet.config.k8s.io/v1alpha1", "kubelet.config.k8s.io/v1", 1);
    let doc = v1.replacen("    args:", "    tokenAttributes:\n      audience: x\n    args:", 1);
    let err = decode_credential_provider_config(doc.as_bytes()).unwrap_err();
    assert_eq!(err, r#"strict decoding error: unknown field "providers[0].tokenAttributes.audience""#);
}

#[test]
fn directory_files_merge_in_lexicographic_order() {
    let one = "---
kind: CredentialProviderConfig
apiVersion: kubelet.config.k8s.io/v1
providers:
  - name: test1
    matchImages:
    - \"registry.io/one\"
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1";
    let two = one.replace("test1", "test2").replace("registry.io/one", "registry.io/two").replace("10m", "5m");
    let tmp = tempfile::tempdir().unwrap();
    // Written in reverse, with files of other types beside them.
    write_files(
        tmp.path(),
        &[("config-001.yaml", &two), ("config-000.yaml", one), ("notes.txt", "x"), ("README.md", "x")],
    );
    std::fs::create_dir(tmp.path().join("sub.yaml")).unwrap();
    let loaded = read_credential_provider_config(tmp.path()).unwrap();
    let v1 = "credentialprovider.kubelet.k8s.io/v1";
    assert_eq!(
        loaded.config.providers,
        vec![test_provider("test1", "registry.io/one", 10, v1), test_provider("test2", "registry.io/two", 5, v1)]
    );
    assert_eq!(loaded.hash, "sha256:efef09979a19eee4802fe4b7aa46d5122f16687a8419443647182c1920f76ac9");

    write_files(tmp.path(), &[("config-002.yml", one)]);
    let err = read_credential_provider_config(tmp.path()).unwrap_err();
    assert_eq!(err.to_string(), r#"duplicate provider name "test1" found in configuration file(s)"#);
}

#[test]
fn read_errors() {
    let tmp = tempfile::tempdir().unwrap();
    write_files(tmp.path(), &[("config.txt", "x"), ("config.md", "x")]);
    let err = read_credential_provider_config(tmp.path()).unwrap_err();
    assert!(err.to_string().starts_with("no configuration files found in directory"), "{err}");
    assert_eq!(
        read_credential_provider_config(Path::new("")).unwrap_err().to_string(),
        "credential provider config path is empty"
    );
    let missing = tmp.path().join("missing.yaml");
    assert!(read_credential_provider_config(&missing).unwrap_err().to_string().starts_with("unable to access path"));
    write_files(tmp.path(), &[("bad.json", "{")]);
    let err = read_credential_provider_config(&tmp.path().join("bad.json")).unwrap_err();
    assert!(matches!(err, ConfigReadError::Decode { .. }), "{err}");
}

fn valid_provider() -> CredentialProvider {
    test_provider("foobar", "foobar.registry.io", 1, "credentialprovider.kubelet.k8s.io/v1alpha1")
}

fn token_provider(f: impl FnOnce(&mut ServiceAccountTokenAttributes)) -> CredentialProvider {
    let mut attributes = ServiceAccountTokenAttributes {
        service_account_token_audience: "audience".into(),
        cache_type: "ServiceAccount".into(),
        require_service_account: Some(true),
        ..Default::default()
    };
    f(&mut attributes);
    CredentialProvider { api_version: PLUGIN_API_V1.into(), token_attributes: Some(attributes), ..valid_provider() }
}

/// upstream's Test_validateCredentialProviderConfig, with its messages.
#[test]
fn validation_as_upstream() {
    let with = |f: fn(&mut CredentialProvider)| {
        let mut p = valid_provider();
        f(&mut p);
        vec![p]
    };
    let qualified = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let cases: Vec<(Vec<CredentialProvider>, bool, String)> = vec![
        (vec![], true, "providers: Required value: at least 1 item in plugins is required".into()),
        (
            with(|p| p.match_images.clear()),
            true,
            "providers.matchImages: Required value: at least 1 item in matchImages is required".into(),
        ),
        (with(|p| p.default_cache_duration = None), true, "providers.defaultCacheDuration: Required value".into()),
        (
            with(|p| p.name = "foo/../bar".into()),
            true,
            r#"providers.name: Invalid value: "foo/../bar": provider name cannot contain '/'"#.into(),
        ),
        (with(|p| p.name = ".".into()), true, r#"providers.name: Invalid value: ".": provider name cannot be '.'"#.into()),
        (with(|p| p.name = "..".into()), true, r#"providers.name: Invalid value: "..": provider name cannot be '..'"#.into()),
        (
            with(|p| p.name = "foo bar".into()),
            true,
            r#"providers.name: Invalid value: "foo bar": provider name cannot contain spaces"#.into(),
        ),
        (vec![valid_provider(), valid_provider()], true, r#"providers.name: Duplicate value: "foobar""#.into()),
        (with(|p| p.api_version.clear()), true, "providers.apiVersion: Required value".into()),
        (
            with(|p| p.api_version = "credentialprovider.kubelet.k8s.io/v1alpha0".into()),
            true,
            r#"providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v1alpha0": supported values: "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1""#.into(),
        ),
        (
            with(|p| p.default_cache_duration = Some(GoDuration::parse("-1m").unwrap())),
            true,
            r#"providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0"#.into(),
        ),
        (
            with(|p| p.match_images = vec!["%invalid%".into()]),
            true,
            r#"providers.matchImages: Invalid value: "%invalid%": match image is invalid: parse "https://%invalid%": invalid URL escape "%in""#.into(),
        ),
        (
            vec![token_provider(|_| {})],
            false,
            "providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled".into(),
        ),
        (
            vec![token_provider(|a| a.service_account_token_audience.clear())],
            true,
            "providers.tokenAttributes.serviceAccountTokenAudience: Required value".into(),
        ),
        (
            vec![token_provider(|a| a.cache_type.clear())],
            true,
            "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token".into(),
        ),
        (
            vec![token_provider(|a| a.cache_type = "invalid-cache-type".into())],
            true,
            r#"providers.tokenAttributes.cacheType: Unsupported value: "invalid-cache-type": supported values: "ServiceAccount", "Token""#.into(),
        ),
        (
            vec![token_provider(|a| a.require_service_account = None)],
            true,
            "providers.tokenAttributes.requireServiceAccount: Required value".into(),
        ),
        (
            vec![token_provider(|a| a.required_service_account_annotation_keys = vec!["cantendwithadash-".into()])],
            true,
            format!(r#"providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Invalid value: "cantendwithadash-": {qualified}"#),
        ),
        (
            vec![token_provider(|a| a.optional_service_account_annotation_keys = vec!["cantendwithadash-".into()])],
            true,
            format!(r#"providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: "cantendwithadash-": {qualified}"#),
        ),
        (
            vec![token_provider(|a| {
                a.required_service_account_annotation_keys = vec!["now-with-dashes/simple".into(), "now-with-dashes/simple".into()]
            })],
            true,
            r#"providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "now-with-dashes/simple""#.into(),
        ),
        (
            vec![token_provider(|a| {
                a.required_service_account_annotation_keys = vec!["now-with-dashes/simple-1".into(), "now-with-dashes/simple-2".into()];
                a.optional_service_account_annotation_keys = vec!["now-with-dashes/simple-2".into(), "now-with-dashes/simple-3".into()];
            })],
            true,
            r#"providers.tokenAttributes: Invalid value: ["now-with-dashes/simple-2"]: annotation keys cannot be both required and optional"#.into(),
        ),
        (
            vec![token_provider(|a| {
                a.require_service_account = Some(false);
                a.required_service_account_annotation_keys = vec!["now-with-dashes/simple".into()];
            })],
            true,
            "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set".into(),
        ),
        (
            vec![CredentialProvider { api_version: "credentialprovider.kubelet.k8s.io/v1alpha1".into(), ..token_provider(|_| {}) }],
            true,
            "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version".into(),
        ),
    ];
    for (providers, gate, want) in cases {
        let errs = validate_credential_provider_config(&CredentialProviderConfig { providers }, gate);
        assert_eq!(aggregate(&errs), want);
    }
    for valid in [vec![valid_provider()], vec![token_provider(|_| {})]] {
        let errs = validate_credential_provider_config(&CredentialProviderConfig { providers: valid }, true);
        assert!(errs.is_empty(), "{}", aggregate(&errs));
    }
}

#[test]
fn aggregate_lists_several_errors() {
    let mut p = valid_provider();
    p.name = "a/b c".into();
    let errs = validate_credential_provider_config(&CredentialProviderConfig { providers: vec![p] }, true);
    assert_eq!(
        aggregate(&errs),
        r#"[providers.name: Invalid value: "a/b c": provider name cannot contain '/', providers.name: Invalid value: "a/b c": provider name cannot contain spaces]"#
    );
    assert_eq!(aggregate(&ErrorList::default()), "");
}

#[test]
fn go_durations() {
    let d = GoDuration::parse("-1m").unwrap();
    assert_eq!((d.negative, d.as_std(), d.to_string()), (true, None, "-1m0s".to_string()));
    assert_eq!(GoDuration::parse("-0s").unwrap().as_std(), Some(Duration::ZERO));
    assert_eq!(GoDuration::parse("90s").unwrap().to_string(), "1m30s");
    assert!(GoDuration::parse("--1s").is_err());
}

//! Pulls with the pod's credentials and sandboxes on the pod's runtime class, against the in-memory runtime (whose
//! private image wants one user and password) on tokio's paused clock.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, LocalObjectReference, PodSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_credentialprovider::{CredentialLookup, NodeKeyring};
use kubelet_cri::RuntimeService;
use kubelet_types::objects::ObjectSource;

use common::{Events, env_built, pod_p, status};

const IMAGE: &str = "reg.example:5000/team/app:1";

/// Secrets by name, runtime classes by name.
#[derive(Default)]
struct Objects {
    secrets: BTreeMap<String, Secret>,
    classes: BTreeMap<String, String>,
}

#[async_trait]
impl ObjectSource for Objects {
    async fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, String> {
        Ok(None)
    }
    async fn secret(&self, _: &str, name: &str) -> Result<Option<Secret>, String> {
        Ok(self.secrets.get(name).cloned())
    }
    async fn services(&self, _: &str) -> Result<Vec<Service>, String> {
        Ok(vec![])
    }
    fn runtime_handler(&self, name: &str) -> Result<String, String> {
        self.classes.get(name).cloned().ok_or_else(|| format!("runtimeclass.node.k8s.io {name:?} not found"))
    }
}

fn pull_secret(name: &str, user: &str, password: &str) -> Secret {
    let json = format!(r#"{{"auths":{{"reg.example:5000":{{"username":"{user}","password":"{password}"}}}}}}"#);
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some([(".dockerconfigjson".to_string(), ByteString(json.into_bytes()))].into()),
        ..Default::default()
    }
}

fn spec(secrets: &[&str]) -> PodSpec {
    PodSpec {
        containers: vec![Container { name: "app".into(), image: Some(IMAGE.into()), ..Default::default() }],
        image_pull_secrets: Some(secrets.iter().map(|s| LocalObjectReference { name: s.to_string() }).collect()),
        ..Default::default()
    }
}

struct Setup {
    e: common::Env,
    events: Arc<Events>,
}

fn setup(objects: Objects) -> Setup {
    let events = Arc::new(Events::default());
    let lookup = Arc::new(CredentialLookup::new(NodeKeyring::empty(), None));
    let recorder = events.clone();
    let e = env_built(|m| m.with_objects(Arc::new(objects)).with_recorder(recorder).with_credentials(lookup));
    e.fake.require_credentials(IMAGE, "puller", "right");
    Setup { e, events }
}

/// Secrets `(name, user, password)` for reg.example:5000.
fn with_secrets(secrets: &[(&str, &str, &str)]) -> Objects {
    let mut objects = Objects::default();
    for (name, user, password) in secrets {
        objects.secrets.insert(name.to_string(), pull_secret(name, user, password));
    }
    objects
}

#[tokio::test(start_paused = true)]
async fn each_secret_is_tried_in_order_until_one_pulls_and_a_missing_one_is_an_event() {
    let s = setup(with_secrets(&[("wrong", "intruder", "guess"), ("good", "puller", "right")]));
    let mut p = pod_p(spec(&["missing", "wrong", "good"]));
    p.metadata.annotations = Some([("team".to_string(), "payments".to_string())].into());
    let r = s.e.mgr.sync_pod(&p, &status(&s.e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(r.started, vec!["app"]);
    let pulls = s.e.fake.pulls();
    assert_eq!(pulls, vec![(IMAGE.to_string(), "intruder".to_string()), (IMAGE.to_string(), "puller".to_string())]);
    let events = s.events.0.lock().unwrap().clone();
    assert!(
        events.contains(&(
            "FailedToRetrieveImagePullSecret".into(),
            "Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed."
                .into()
        )),
        "{events:?}"
    );
    let failed: Vec<_> = events.iter().filter(|(r, _)| r == "Failed").collect();
    assert!(failed.is_empty(), "one credential pulled: no failure event: {failed:?}");
    // The pod's annotations go with the pull, as upstream's ImageSpec carries them.
    let specs = s.e.fake.pulled_specs();
    assert!(specs.iter().all(|i| i.annotations.get("team").map(String::as_str) == Some("payments")), "{specs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pull_secret_that_does_not_decode_and_a_bad_image_name_fail_before_any_pull() {
    let mut broken = pull_secret("broken", "u", "p");
    broken.data = Some([(".dockerconfigjson".to_string(), ByteString(b"{not json".to_vec()))].into());
    let mut objects = Objects::default();
    objects.secrets.insert("broken".into(), broken);
    let s = setup(objects);
    let r = s.e.mgr.sync_pod(&pod_p(spec(&["broken"])), &status(&s.e).await).await;
    let e = &r.errors[0];
    assert!(e.message.starts_with("secret default/broken: invalid .dockerconfigjson"), "{e:?}");
    assert_eq!(e.reason, e.message, "upstream's waiting reason is the keyring's error itself");
    assert!(s.e.fake.pulls().is_empty(), "no pull, so no back-off either");

    let s = setup(Objects::default());
    let mut sp = spec(&[]);
    sp.containers[0].image = Some("UPPER/Case:1".into());
    let r = s.e.mgr.sync_pod(&pod_p(sp), &status(&s.e).await).await;
    assert_eq!(r.errors[0].reason, "InvalidImageName");
    assert!(r.errors[0].message.starts_with("Failed to apply default image tag \"UPPER/Case:1\": "), "{:?}", r.errors);
    assert!(s.events.0.lock().unwrap().iter().any(|(r, _)| r == "InspectFailed"));
    assert!(s.e.fake.pulls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn without_a_working_credential_the_pull_fails_with_every_answer_and_no_secret_in_it() {
    let s = setup(with_secrets(&[("wrong", "intruder", "guess-1"), ("also-wrong", "intruder2", "guess-2")]));
    let r = s.e.mgr.sync_pod(&pod_p(spec(&["wrong", "also-wrong"])), &status(&s.e).await).await;
    assert_eq!(r.errors[0].reason, "ErrImagePull");
    // An Unknown status is shown by its message alone, and the same answer twice once (upstream's aggregate).
    let one = format!("failed to pull and unpack image {IMAGE:?}: 401 Unauthorized");
    assert_eq!(r.errors[0].message, one);
    assert_eq!(s.e.fake.pulls().len(), 2, "both credentials were tried");
    for secret in ["guess-1", "guess-2"] {
        assert!(!r.errors[0].message.contains(secret));
        assert!(s.events.0.lock().unwrap().iter().all(|(_, m)| !m.contains(secret)));
    }
    // Without any secret: one anonymous pull, the runtime's answer as it is.
    let s = setup(Objects::default());
    let r = s.e.mgr.sync_pod(&pod_p(spec(&[])), &status(&s.e).await).await;
    assert_eq!(r.errors[0].reason, "ErrImagePull");
    assert_eq!(r.errors[0].message, one);
    assert_eq!(s.e.fake.pulls(), vec![(IMAGE.to_string(), String::new())]);
}

#[tokio::test(start_paused = true)]
async fn the_sandbox_runs_on_the_classes_handler_and_an_unknown_class_fails_without_a_sandbox() {
    let mut objects = Objects::default();
    objects.classes.insert("sandboxed".into(), "runsc".into());
    let s = setup(objects);
    s.e.fake.add_image(IMAGE);
    let mut sp = spec(&[]);
    sp.runtime_class_name = Some("sandboxed".into());
    sp.containers[0].image = Some("busybox:1".into());
    let r = s.e.mgr.sync_pod(&pod_p(sp.clone()), &status(&s.e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    let st = status(&s.e).await;
    let sandbox = s.e.fake.pod_sandbox_status(&st.sandbox_statuses[0].id).await.unwrap();
    assert_eq!(sandbox.runtime_handler, "runsc");

    let s = setup(Objects::default());
    sp.runtime_class_name = Some("nope".into());
    let r = s.e.mgr.sync_pod(&pod_p(sp), &status(&s.e).await).await;
    assert_eq!(r.errors[0].reason, "CreatePodSandboxError");
    assert_eq!(r.errors[0].message, "Failed to create pod sandbox: runtimeclass.node.k8s.io \"nope\" not found");
    assert_eq!(s.e.fake.count("RunPodSandbox"), 0, "never the default handler");
    let events = s.events.0.lock().unwrap().clone();
    assert!(
        events.iter().any(|(r, m)| r == "FailedCreatePodSandBox" && m.contains("\"nope\" not found")),
        "{events:?}"
    );
}

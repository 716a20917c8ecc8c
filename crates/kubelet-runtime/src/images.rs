//! Images a pod needs (`pkg/kubelet/images/image_manager.go` EnsureImageExists): its containers' images, and the
//! images of its image volumes (`kuberuntime_manager.go` getImageVolumes; ImageVolume, beta and on in v1.35).
//!
//! Called by the pod's sync: image volumes once per sync after the sandbox exists, each container's image before it
//! is created. A failure is the container's (`ErrImagePull`, `ImagePullBackOff`, ...) with upstream's events; an
//! image volume's failure fails only the containers that mount it.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use kubelet_cri::api;
use kubelet_types::events::{NORMAL, WARNING, container_reference, pod_reference, reason};
use kubelet_types::pod_update::pod_ref;
use tracing::{info, warn};

use crate::config_gen;
use crate::container::{default_pull_policy, go_duration, start_error};
use crate::manager::{RuntimeManager, SyncError};

/// An image to make present, and whom its events are about.
pub(crate) struct Wanted<'a> {
    /// The image as the pod names it.
    pub image: &'a str,
    /// `Always`, `IfNotPresent` or `Never`.
    pub policy: &'a str,
    /// The container, or the pod for an image volume.
    pub object: ObjectReference,
    /// The container's name for logs (empty for an image volume).
    pub container: &'a str,
}

/// Per image volume of a pod: the image the runtime mounts, or why its pull failed (reason, message).
pub(crate) type ImageVolumes = HashMap<String, Result<api::ImageSpec, (String, String)>>;

/// The images each pod mounts as image volumes: written by the pod's sync, forgotten with the pod, read by the
/// image garbage collector (which must keep them; containers' own images it finds through the runtime).
#[derive(Debug, Default)]
pub struct ImageVolumesInUse(std::sync::Mutex<HashMap<String, Vec<String>>>);

impl ImageVolumesInUse {
    /// Records the images pod `uid` mounts, with those recorded before when `keep_previous` (a pull failed).
    pub fn record(&self, uid: &str, mut images: Vec<String>, keep_previous: bool) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if keep_previous {
            images.extend(m.get(uid).into_iter().flatten().cloned());
            images.sort();
            images.dedup();
        }
        if images.is_empty() {
            m.remove(uid);
        } else {
            m.insert(uid.to_string(), images);
        }
    }

    /// Forgets the images of pod `uid` (it terminated).
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(uid);
    }

    /// Every image some pod mounts.
    pub fn all(&self) -> std::collections::HashSet<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).values().flatten().cloned().collect()
    }
}

impl RuntimeManager {
    /// Makes sure the container's image is present, and returns the user the image runs as, from the same
    /// ImageStatus (`getImageUser`).
    pub(crate) async fn ensure_image(
        &self,
        pod: &Pod,
        c: &Container,
        sandbox_config: &api::PodSandboxConfig,
        pull_secrets: &[k8s_openapi::api::core::v1::Secret],
    ) -> Result<config_gen::ImageUser, SyncError> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| default_pull_policy(&image).to_string());
        let want =
            Wanted { image: &image, policy: &policy, object: container_reference(pod, &c.name), container: &c.name };
        match self.ensure_image_exists(pod, want, sandbox_config, pull_secrets).await {
            Ok(img) => Ok(image_user(img.as_ref())),
            Err((reason, message)) => Err(start_error(c, &reason, message)),
        }
    }

    /// Makes sure an image is present (`EnsureImageExists`): by pull policy, with pull back-off per pod and image,
    /// pulls limited by `serializeImagePulls` / `maxParallelImagePulls`, and upstream's events on `want.object`.
    /// Returns the image's status (None only where the runtime does not tell), or the failure's reason and
    /// message.
    pub(crate) async fn ensure_image_exists(
        &self,
        pod: &Pod,
        want: Wanted<'_>,
        sandbox_config: &api::PodSandboxConfig,
        pull_secrets: &[k8s_openapi::api::core::v1::Secret],
    ) -> Result<Option<api::Image>, (String, String)> {
        let image = want.image.to_string();
        let err = |reason: &str, message: String| (reason.to_string(), message);
        let cref = want.object.clone();
        // `applyDefaultImageTag`: a name that does not parse is InvalidImageName, with an InspectFailed event.
        let repo = if image.is_empty() {
            Err(format!("couldn't parse image name {image:?}: invalid reference format"))
        } else {
            kubelet_credentialprovider::repository_to_pull(&image).map_err(|e| e.to_string())
        };
        let repo = match repo {
            Ok(r) => r,
            Err(e) => {
                let m = format!("Failed to apply default image tag {image:?}: {e}");
                self.recorder.event(&cref, WARNING, "InspectFailed", m.clone());
                return Err(err("InvalidImageName", m));
            }
        };
        // The pod's annotations go with the image, as upstream's ImageSpec carries them to the runtime.
        let annotations = pod.metadata.annotations.clone().unwrap_or_default().into_iter().collect();
        let spec = api::ImageSpec {
            image: image.clone(),
            user_specified_image: image.clone(),
            annotations,
            ..Default::default()
        };
        let present =
            self.images.image_status(spec.clone()).await.map_err(|e| {
                err("ImageInspectError", format!("Failed to inspect image {image:?}: {}", e.grpc_text()))
            })?;
        match (want.policy, present) {
            ("Never", None) => {
                let m = format!("Container image {image:?} is not present with pull policy of Never");
                self.recorder.event(&cref, WARNING, "ErrImageNeverPull", m.clone());
                return Err(err("ErrImageNeverPull", m));
            }
            ("Never" | "IfNotPresent", Some(img)) => {
                let m = format!("Container image {image:?} already present on machine");
                self.recorder.event(&cref, NORMAL, reason::PULLED, m);
                return Ok(Some(img));
            }
            _ => {}
        }
        // The keyring is consulted before the back-off and the pull queue, as upstream's EnsureImageExists; a pull
        // secret that does not decode fails the start with its text (upstream's MakeDockerKeyring error).
        let credentials = self.credentials_for(pod, &repo, pull_secrets).await.map_err(|m| err(&m, m.clone()))?;
        let key = format!("{}_{image}", pod.metadata.uid.as_deref().unwrap_or(""));
        if self.image_backoff.is_in_backoff_since_update(&key) {
            let m = format!("Back-off pulling image {image:?}");
            self.recorder.event(&cref, NORMAL, reason::BACKOFF, m.clone());
            let prev = self.pull_errors.lock().unwrap().get(&key).cloned();
            return Err(err(
                "ImagePullBackOff",
                match prev {
                    Some(p) => format!("{m}: {p}"),
                    None => m,
                },
            ));
        }
        self.pull_errors.lock().unwrap().remove(&key);
        info!(pod = %pod_ref(pod), containerName = %want.container, image = %image, "pulling image");
        self.recorder.event(&cref, NORMAL, reason::PULLING, format!("Pulling image {image:?}"));
        let waiting_since = tokio::time::Instant::now();
        let permit = self.pulls.clone().acquire_owned().await;
        let started = tokio::time::Instant::now();
        let uid = kubelet_types::PodUid(pod.metadata.uid.clone().unwrap_or_default());
        self.pull_windows.lock().unwrap().entry(uid.clone()).or_insert((started, started));
        let res = self.pull_with_credentials(pod, &spec, &credentials, sandbox_config).await;
        drop(permit);
        if let Some(w) = self.pull_windows.lock().unwrap().get_mut(&uid) {
            w.1 = tokio::time::Instant::now();
        }
        match res {
            Ok(_) => {
                self.image_backoff.reset(&key);
                let pulled = self.images.image_status(spec).await.ok().flatten();
                let size = pulled.as_ref().map(|i| i.size).unwrap_or(0);
                kubelet_metrics::kubelet::IMAGE_PULL_DURATION
                    .observe(&[kubelet_metrics::kubelet::image_size_bucket(size)], started.elapsed().as_secs_f64());
                self.recorder.event(
                    &cref,
                    NORMAL,
                    reason::PULLED,
                    format!(
                        "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                        go_duration(started.elapsed()),
                        go_duration(waiting_since.elapsed())
                    ),
                );
                Ok(pulled)
            }
            Err(errors) => {
                let (text, why) = crate::pull::pull_failure(&image, &errors);
                self.recorder.event(&cref, WARNING, reason::FAILED, format!("Failed to pull image {image:?}: {text}"));
                self.image_backoff.next(&key, self.clock.now());
                self.pull_errors.lock().unwrap().insert(key, format!("{why}: {text}"));
                Err(err(why, text))
            }
        }
    }

    /// The images of the pod's image volumes (`getImageVolumes`), pulled once per sync by each volume's pull
    /// policy with the pod as the events' object. A pull that fails is kept per volume, so only the containers
    /// mounting it fail.
    pub(crate) async fn image_volumes(
        &self,
        pod: &Pod,
        sandbox_config: &api::PodSandboxConfig,
        pull_secrets: &[k8s_openapi::api::core::v1::Secret],
    ) -> ImageVolumes {
        let mut out = ImageVolumes::new();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        // The image is mounted for the pod's handler, never the default one when the class cannot be resolved.
        let handler = match self.pod_runtime_handler(pod) {
            Ok(h) => h,
            Err(e) => {
                let failed =
                    ("CreateContainerConfigError".to_string(), format!("failed to get pod runtime handler: {e}"));
                for v in volumes.into_iter().flatten().filter(|v| v.image.is_some()) {
                    out.insert(v.name.clone(), Err(failed.clone()));
                }
                return out;
            }
        };
        for v in volumes.into_iter().flatten() {
            let Some(src) = &v.image else { continue };
            let reference = src.reference.clone().unwrap_or_default();
            let policy = src.pull_policy.clone().unwrap_or_else(|| default_pull_policy(&reference).to_string());
            let want = Wanted { image: &reference, policy: &policy, object: pod_reference(pod), container: "" };
            let res = match self.ensure_image_exists(pod, want, sandbox_config, pull_secrets).await {
                Ok(img) => Ok(api::ImageSpec {
                    image: img.map(|i| i.id).filter(|id| !id.is_empty()).unwrap_or_else(|| reference.clone()),
                    user_specified_image: reference.clone(),
                    runtime_handler: handler.clone(),
                    annotations: pod.metadata.annotations.clone().unwrap_or_default().into_iter().collect(),
                }),
                Err(e) => {
                    warn!(pod = %pod_ref(pod), volume = %v.name, image = %reference, error = %e.1, "failed to ensure image");
                    Err(e)
                }
            };
            out.insert(v.name.clone(), res);
        }
        // An image whose re-pull failed may still be mounted by a running container: kept until the pod goes.
        let images = out.values().filter_map(|r| r.as_ref().ok()).map(|s| s.image.clone()).collect();
        let keep_previous = out.values().any(Result::is_err);
        self.image_volumes_in_use.record(pod.metadata.uid.as_deref().unwrap_or_default(), images, keep_previous);
        out
    }
}

fn image_user(img: Option<&api::Image>) -> config_gen::ImageUser {
    match img {
        Some(i) if i.uid.is_some() || !i.username.is_empty() => {
            config_gen::ImageUser { uid: i.uid.as_ref().map(|u| u.value), username: i.username.clone() }
        }
        _ => config_gen::ImageUser { uid: Some(0), username: String::new() },
    }
}

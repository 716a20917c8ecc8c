//! Image garbage collection (`pkg/kubelet/images/image_gc_manager.go`).
//!
//! [`ImageGcManager::garbage_collect`] runs every 5 minutes (`ImageGCPeriod`, driven by the caller) and
//! [`ImageGcManager::delete_unused_images`] when the eviction manager reclaims disk. Each pass lists the images and
//! every container (running or not): an image a container uses is in use and its last use is now; images seen
//! for the first time get their detection time. Images unused for longer than `imageMaximumGCAge` (when set) go
//! first; then, when the image filesystem is used at `imageGCHighThresholdPercent` or more, the least recently used
//! images go until usage is down to `imageGCLowThresholdPercent`. An image in use, a pinned image (the sandbox
//! image) and an image first seen less than `imageMinimumGCAge` ago are never removed. Not freeing enough records
//! `FreeDiskSpaceFailed`; the caller records `ImageGCFailed` when two passes in a row fail. Runtime errors are
//! returned, never fatal.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_cri::{ImageService, RuntimeService, api};
use kubelet_types::events::{Recorder, WARNING};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// How often the caller runs a pass (`ImageGCPeriod`).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// The policy (`ImageGCPolicy`).
#[derive(Debug, Clone, Copy)]
pub struct ImageGcPolicy {
    /// `imageGCHighThresholdPercent`.
    pub high_threshold_percent: i32,
    /// `imageGCLowThresholdPercent`.
    pub low_threshold_percent: i32,
    /// `imageMinimumGCAge`.
    pub min_age: Duration,
    /// `imageMaximumGCAge` (zero: off).
    pub max_age: Duration,
}

#[derive(Debug, Clone)]
struct Record {
    first_detected: Instant,
    last_used: Instant,
    size: u64,
    pinned: bool,
    name: String,
}

/// An image garbage collection error.
#[derive(Debug, thiserror::Error)]
pub enum ImageGcError {
    /// A runtime call failed.
    #[error("{what}: {source}")]
    Runtime {
        /// What was asked.
        what: &'static str,
        /// The runtime's error.
        source: kubelet_cri::CriError,
    },
    /// The image filesystem reported no capacity.
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Not enough could be freed.
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnough {
        /// Bytes wanted.
        wanted: i64,
        /// Bytes freed.
        freed: i64,
    },
}

/// The image garbage collector.
pub struct ImageGcManager {
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    policy: ImageGcPolicy,
    recorder: Arc<dyn Recorder>,
    node_ref: ObjectReference,
    records: Mutex<HashMap<String, Record>>,
    /// One pass at a time (the periodic one and eviction's may overlap).
    pass: tokio::sync::Mutex<()>,
    /// The images of the pods' image volumes.
    image_volumes: Arc<crate::images::ImageVolumesInUse>,
}

fn cri(what: &'static str) -> impl FnOnce(kubelet_cri::CriError) -> ImageGcError {
    move |source| ImageGcError::Runtime { what, source }
}

impl ImageGcManager {
    /// A collector with `policy`.
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        policy: ImageGcPolicy,
        recorder: Arc<dyn Recorder>,
        node_ref: ObjectReference,
    ) -> Self {
        Self {
            runtime,
            images,
            policy,
            recorder,
            node_ref,
            records: Mutex::new(HashMap::new()),
            pass: tokio::sync::Mutex::new(()),
            image_volumes: Default::default(),
        }
    }

    /// Keeps the images pods mount as image volumes (the runtime manager's record of them).
    pub fn with_image_volumes(mut self, in_use: Arc<crate::images::ImageVolumesInUse>) -> Self {
        self.image_volumes = in_use;
        self
    }

    /// Refreshes the records (`detectImages`); returns the images in use.
    async fn detect(&self, now: Instant) -> Result<HashSet<String>, ImageGcError> {
        let images = self.images.list_images(None).await.map_err(cri("list images"))?;
        let containers = self.runtime.list_containers(None).await.map_err(cri("list containers"))?;
        let mut in_use = HashSet::new();
        for c in &containers {
            in_use.insert(c.image_ref.clone());
            if let Some(spec) = &c.image {
                in_use.insert(spec.image.clone());
            }
        }
        // The images pods mount as image volumes (`handleImageVolumes`), as the runtime manager recorded them.
        in_use.extend(self.image_volumes.all());
        // The sandbox image is never collected: containerd 1.6 does not report it pinned, and sandboxes are not
        // containers, so nothing would mark it in use.
        let sandbox = self.runtime.sandbox_image().await.unwrap_or_else(|e| {
            debug!(error = %e, "unable to ask the runtime for its sandbox image");
            None
        });
        let mut records = self.records.lock().unwrap();
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        records.retain(|id, _| present.contains(id.as_str()));
        let mut used = HashSet::new();
        for i in &images {
            let is_used =
                in_use.contains(&i.id) || i.repo_tags.iter().chain(&i.repo_digests).any(|t| in_use.contains(t));
            let r = records.entry(i.id.clone()).or_insert_with(|| Record {
                first_detected: now,
                last_used: now,
                size: i.size,
                pinned: false,
                name: i.repo_tags.first().cloned().unwrap_or_else(|| i.id.clone()),
            });
            r.size = i.size;
            r.pinned = i.pinned || sandbox.as_ref().is_some_and(|s| *s == i.id || i.repo_tags.contains(s));
            if is_used {
                r.last_used = now;
                used.insert(i.id.clone());
            }
        }
        Ok(used)
    }

    /// The images that may go, least recently used first (`imagesInEvictionOrder`).
    fn eviction_order(&self, in_use: &HashSet<String>, now: Instant) -> Vec<(String, Record)> {
        let records = self.records.lock().unwrap();
        let mut out: Vec<(String, Record)> = records
            .iter()
            .filter(|(id, r)| {
                if in_use.contains(*id) || r.pinned {
                    return false;
                }
                if now.duration_since(r.first_detected) < self.policy.min_age {
                    debug!(image = %r.name, "image's age is less than the policy's minAge, not eligible for garbage collection");
                    return false;
                }
                true
            })
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect();
        out.sort_by_key(|(_, r)| (r.last_used, r.first_detected));
        out
    }

    async fn remove(&self, id: &str, r: &Record, reason: &str) -> Result<(), ImageGcError> {
        info!(image = %r.name, imageID = %id, size = r.size, reason, "removing image to free bytes");
        self.images
            .remove_image(api::ImageSpec { image: id.to_string(), ..Default::default() })
            .await
            .map_err(cri("remove image"))?;
        self.records.lock().unwrap().remove(id);
        kubelet_metrics::kubelet::IMAGE_GARBAGE_COLLECTED.inc(&[reason]);
        Ok(())
    }

    /// Removes images in order until `wanted` bytes are freed (`freeSpace`); returns the bytes freed.
    async fn free_space(&self, wanted: i64, order: Vec<(String, Record)>) -> Result<i64, ImageGcError> {
        let mut freed = 0i64;
        let mut last_err = None;
        for (id, r) in order {
            if freed >= wanted {
                break;
            }
            match self.remove(&id, &r, "space").await {
                Ok(()) => freed += r.size as i64,
                Err(e) => {
                    warn!(image = %r.name, error = %e, "failed to remove image");
                    last_err = Some(e);
                }
            }
        }
        match last_err {
            Some(e) if freed < wanted => Err(e),
            _ => Ok(freed),
        }
    }

    /// One periodic pass (`GarbageCollect`), traced as upstream's `Images/GarbageCollect`; returns the bytes freed.
    pub async fn garbage_collect(&self) -> Result<i64, ImageGcError> {
        let span = kubelet_trace::internal_span(kubelet_trace::IMAGES_SCOPE, "Images/GarbageCollect");
        let res = kubelet_trace::within(&span, self.collect_pass()).await;
        if let Err(e) = &res {
            span.fail(&e.to_string());
        }
        res
    }

    async fn collect_pass(&self) -> Result<i64, ImageGcError> {
        let _pass = self.pass.lock().await;
        let now = Instant::now();
        let in_use = self.detect(now).await?;
        let mut order = self.eviction_order(&in_use, now);
        let mut freed = 0i64;
        if !self.policy.max_age.is_zero() {
            let mut kept = vec![];
            for (id, r) in order {
                if now.duration_since(r.last_used) > self.policy.max_age {
                    self.remove(&id, &r, "age").await?;
                    freed += r.size as i64;
                } else {
                    kept.push((id, r));
                }
            }
            order = kept;
        }
        let info = self.images.image_fs_info().await.map_err(cri("get image filesystem stats"))?;
        let fs = info.image_filesystems.first();
        let mountpoint = fs.and_then(|f| f.fs_id.as_ref()).map(|f| f.mountpoint.clone()).unwrap_or_default();
        let (capacity, available) = match nix::sys::statvfs::statvfs(mountpoint.as_str()) {
            Ok(s) => {
                let frsize = s.fragment_size() as i64;
                (s.blocks() as i64 * frsize, s.blocks_available() as i64 * frsize)
            }
            Err(_) => (0, 0),
        };
        let available = available.min(capacity);
        if capacity == 0 {
            let e = ImageGcError::InvalidCapacity;
            self.recorder.event(&self.node_ref, WARNING, "InvalidDiskCapacity", e.to_string());
            return Err(e);
        }
        let usage = 100 - (available * 100 / capacity) as i32;
        if usage >= self.policy.high_threshold_percent {
            let wanted = capacity * (100 - self.policy.low_threshold_percent as i64) / 100 - available;
            info!(
                usage,
                highThreshold = self.policy.high_threshold_percent,
                amountToFree = wanted,
                lowThreshold = self.policy.low_threshold_percent,
                "disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
            );
            let got = self.free_space(wanted, order).await?;
            freed += got;
            if got < wanted {
                let e = ImageGcError::NotEnough { wanted, freed: got };
                self.recorder.event(&self.node_ref, WARNING, "FreeDiskSpaceFailed", e.to_string());
                return Err(e);
            }
        }
        Ok(freed)
    }

    /// Removes every image that may go (`DeleteUnusedImages`, for eviction); returns the bytes freed.
    pub async fn delete_unused_images(&self) -> Result<i64, ImageGcError> {
        let _pass = self.pass.lock().await;
        let now = Instant::now();
        let in_use = self.detect(now).await?;
        let order = self.eviction_order(&in_use, now);
        self.free_space(i64::MAX, order).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::FakeRuntime;

    #[derive(Default)]
    struct Events(Mutex<Vec<(String, String)>>);
    impl Recorder for Events {
        fn event(&self, _: &ObjectReference, _: &str, reason: &str, message: String) {
            self.0.lock().unwrap().push((reason.into(), message));
        }
    }

    fn names(f: &FakeRuntime) -> Vec<String> {
        let mut v: Vec<String> = f.image_names();
        v.sort();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn unused_images_go_least_recently_used_first_never_in_use_pinned_or_young() {
        let fake = Arc::new(FakeRuntime::new(&["old:1", "used:1", "pause:3.9", "young:1"]));
        fake.pin_image("pause:3.9");
        let sandbox = fake.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let config = api::ContainerConfig {
            image: Some(api::ImageSpec { image: "used:1".into(), ..Default::default() }),
            ..Default::default()
        };
        let id = fake.create_container(&sandbox, config, api::PodSandboxConfig::default()).await.unwrap();
        fake.exit_container(&id, 0);
        let events = Arc::new(Events::default());
        // Collect whatever the disk holds: with both thresholds at 0 every eligible image is wanted.
        let policy = ImageGcPolicy {
            high_threshold_percent: 0,
            low_threshold_percent: 0,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        };
        let gc = ImageGcManager::new(fake.clone(), fake.clone(), policy, events.clone(), ObjectReference::default());
        // Nothing is old enough at first sight.
        assert!(matches!(gc.garbage_collect().await, Err(ImageGcError::NotEnough { freed: 0, .. })));
        assert_eq!(names(&fake), ["old:1", "pause:3.9", "used:1", "young:1"]);
        tokio::time::advance(Duration::from_secs(121)).await;
        fake.add_image("young:2");
        let freed = gc.delete_unused_images().await.unwrap();
        assert_eq!(freed, 2 * 1024, "old:1 and young:1, each 1 KiB");
        assert_eq!(names(&fake), ["pause:3.9", "used:1", "young:2"], "in use, pinned and younger than minAge stay");
        let ev = events.0.lock().unwrap().clone();
        assert_eq!(ev[0].0, "FreeDiskSpaceFailed");
        assert!(
            ev[0].1.starts_with("Failed to garbage collect required amount of images. Attempted to free "),
            "{}",
            ev[0].1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn images_unused_past_the_maximum_age_go_whatever_the_disk() {
        let fake = Arc::new(FakeRuntime::new(&["stale:1"]));
        // Above any usage the machine's disk can reach (even a full one), so only the age counts.
        let policy = ImageGcPolicy {
            high_threshold_percent: 101,
            low_threshold_percent: 99,
            min_age: Duration::ZERO,
            max_age: Duration::from_secs(3600),
        };
        let gc = ImageGcManager::new(
            fake.clone(),
            fake.clone(),
            policy,
            Arc::new(Events::default()),
            ObjectReference::default(),
        );
        assert_eq!(gc.garbage_collect().await.unwrap(), 0);
        tokio::time::advance(Duration::from_secs(3601)).await;
        assert_eq!(gc.garbage_collect().await.unwrap(), 1024);
        assert!(names(&fake).is_empty());
    }
}

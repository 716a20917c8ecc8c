//! The CSI volumes' usage in the Summary API and the `kubelet_volume_stats_*` metrics
//! (`pkg/kubelet/server/stats/volume_stat_calculator.go` for CSI volumes, `pkg/kubelet/metrics/collectors/
//! volume_stats.go`): every `volumeStatsAggPeriod` the drivers are asked for their published volumes' usage; the
//! summary's pod volumes and the metrics read the last answers. A volume's claim becomes its `pvcRef` and the
//! metrics' `{namespace, persistentvolumeclaim}`; an abnormal condition (`CSIVolumeHealth`) is a
//! `VolumeConditionAbnormal` event on the pod, as upstream's.
//!
//! Contract: [`CsiVolumes::refresh`] runs in the stats task, one pass at a time, each driver call up to 2 minutes;
//! [`CsiVolumes::of_pod`] never waits.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_server::stats::{FsStats, PvcReference, Time, VolumeHealthStats, VolumeStats};
use kubelet_types::events::{Recorder, WARNING};
use kubelet_volume::CsiVolumeStat;

/// Where the usage comes from (the volume manager).
#[async_trait]
pub trait CsiVolumeSource: Send + Sync + 'static {
    /// The usage of the published CSI volumes; their condition where `health`.
    async fn csi_volume_stats(&self, health: bool) -> Vec<CsiVolumeStat>;
}

#[async_trait]
impl CsiVolumeSource for kubelet_volume::VolumeManager {
    async fn csi_volume_stats(&self, health: bool) -> Vec<CsiVolumeStat> {
        kubelet_volume::VolumeManager::csi_volume_stats(self, health).await
    }
}

/// The last usage of the CSI volumes, by pod UID.
pub struct CsiVolumes {
    source: Arc<dyn CsiVolumeSource>,
    recorder: Arc<dyn Recorder>,
    /// `CSIVolumeHealth`.
    health: bool,
    last: Mutex<HashMap<String, Vec<VolumeStats>>>,
    refreshing: AtomicBool,
}

impl CsiVolumes {
    /// Usage from `source`, conditions asked for where `health`, events through `recorder`.
    pub fn new(source: Arc<dyn CsiVolumeSource>, recorder: Arc<dyn Recorder>, health: bool) -> Self {
        Self { source, recorder, health, last: Mutex::default(), refreshing: AtomicBool::new(false) }
    }

    /// The last usage of the pod `uid`'s CSI volumes.
    pub fn of_pod(&self, uid: &str) -> Vec<VolumeStats> {
        self.last.lock().unwrap().get(uid).cloned().unwrap_or_default()
    }

    /// Asks the drivers again (skipped while a pass runs) and updates the metrics; `now` stamps the figures.
    pub async fn refresh(&self, now: Time) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let stats = self.source.csi_volume_stats(self.health).await;
        let mut by_pod: HashMap<String, Vec<VolumeStats>> = HashMap::new();
        use kubelet_metrics::kubelet as m;
        let gauges = [
            &m::VOLUME_STATS_CAPACITY_BYTES,
            &m::VOLUME_STATS_AVAILABLE_BYTES,
            &m::VOLUME_STATS_USED_BYTES,
            &m::VOLUME_STATS_INODES,
            &m::VOLUME_STATS_INODES_FREE,
            &m::VOLUME_STATS_INODES_USED,
            &m::VOLUME_STATS_HEALTH_ABNORMAL,
        ];
        gauges.iter().for_each(|g| g.reset());
        let mut seen = HashSet::new();
        for s in stats {
            let pvc_ref = s.claim.clone().map(|name| PvcReference { name, namespace: s.namespace.clone() });
            if let Some(r) = pvc_ref.as_ref().filter(|r| seen.insert((*r).clone())) {
                let labels = [r.namespace.as_str(), r.name.as_str()];
                let values =
                    [s.capacity_bytes, s.available_bytes, s.used_bytes, s.inodes, s.inodes_free, s.inodes_used];
                for (g, v) in gauges.iter().zip(values) {
                    g.set(&labels, v as f64);
                }
                if let Some((abnormal, _)) = &s.condition {
                    m::VOLUME_STATS_HEALTH_ABNORMAL.set(&labels, if *abnormal { 1.0 } else { 0.0 });
                }
            }
            if let Some((true, message)) = &s.condition {
                let pod = ObjectReference {
                    kind: Some("Pod".into()),
                    api_version: Some("v1".into()),
                    namespace: Some(s.namespace.clone()),
                    name: Some(s.pod_name.clone()),
                    uid: Some(s.pod_uid.clone()),
                    ..Default::default()
                };
                self.recorder.event(
                    &pod,
                    WARNING,
                    "VolumeConditionAbnormal",
                    format!("Volume {}: {message}", s.volume),
                );
            }
            by_pod.entry(s.pod_uid.clone()).or_default().push(VolumeStats {
                fs: FsStats {
                    time: now,
                    available_bytes: Some(s.available_bytes),
                    capacity_bytes: Some(s.capacity_bytes),
                    used_bytes: Some(s.used_bytes),
                    inodes_free: Some(s.inodes_free),
                    inodes: Some(s.inodes),
                    inodes_used: Some(s.inodes_used),
                },
                name: s.volume,
                pvc_ref,
                volume_health_stats: s.condition.map(|(abnormal, _)| VolumeHealthStats { abnormal }),
            });
        }
        *self.last.lock().unwrap() = by_pod;
        self.refreshing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<CsiVolumeStat>);

    #[async_trait]
    impl CsiVolumeSource for Fixed {
        async fn csi_volume_stats(&self, health: bool) -> Vec<CsiVolumeStat> {
            self.0
                .iter()
                .cloned()
                .map(|mut s| {
                    if health {
                        s
                    } else {
                        s.condition = None;
                        s
                    }
                })
                .collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_claims_usage_is_in_the_summary_and_the_metrics_and_an_abnormal_volume_is_an_event() {
        let stat = |volume: &str, claim: Option<&str>, used: u64| CsiVolumeStat {
            pod_uid: "uid-1".into(),
            namespace: "ns".into(),
            pod_name: "web".into(),
            volume: volume.into(),
            claim: claim.map(Into::into),
            capacity_bytes: 100,
            available_bytes: 100 - used,
            used_bytes: used,
            inodes: 10,
            inodes_free: 9,
            inodes_used: 1,
            condition: Some((true, "the disk is gone".into())),
        };
        let source = Arc::new(Fixed(vec![stat("data", Some("data-claim"), 30), stat("inline", None, 5)]));
        let recorder = Arc::new(kubelet_types::events::RecordingRecorder::default());
        let plain = CsiVolumes::new(source.clone(), recorder.clone(), false);
        plain.refresh(Time::default()).await;
        let vols = plain.of_pod("uid-1");
        assert_eq!(vols.len(), 2);
        let json = serde_json::to_value(&vols[0]).unwrap();
        assert_eq!(json["name"], "data");
        assert_eq!(json["pvcRef"], serde_json::json!({"name": "data-claim", "namespace": "ns"}));
        assert_eq!(json["usedBytes"], 30);
        assert!(json.get("volumeHealthStats").is_none(), "CSIVolumeHealth is off");
        assert!(serde_json::to_value(&vols[1]).unwrap().get("pvcRef").is_none());
        let text = kubelet_metrics::global().gather();
        assert!(
            text.contains("kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"data-claim\"} 30"),
            "{text}"
        );
        assert!(!text.contains("kubelet_volume_stats_health_status_abnormal{"));
        assert!(recorder.events().is_empty(), "no event with the gate off");

        let health = CsiVolumes::new(source, recorder.clone(), true);
        health.refresh(Time::default()).await;
        assert_eq!(serde_json::to_value(&health.of_pod("uid-1")[0]).unwrap()["volumeHealthStats"]["abnormal"], true);
        let text = kubelet_metrics::global().gather();
        assert!(text.contains(
            "kubelet_volume_stats_health_status_abnormal{namespace=\"ns\",persistentvolumeclaim=\"data-claim\"} 1"
        ));
        let events = recorder.events();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].reason, "VolumeConditionAbnormal");
        assert_eq!(events[0].message, "Volume data: the disk is gone");
    }
}

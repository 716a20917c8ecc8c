//! Containers the kernel killed at their memory limit, as the kubelet's OOM watcher read them from the kernel log
//! (`crates/kubelet/src/oom.rs`).
//!
//! The runtime's own reason can miss such a kill: containerd 1.6 sets `OOMKilled` only when its OOM event is handled
//! before the task's exit, and under load it reports `Error` for a container the kernel OOM-killed. The OOM watcher
//! records the container of every kill inside a container's memory limit here; the runtime manager's inspection
//! reports an exited container with exit code 137 that is recorded as `OOMKilled`, whatever the runtime said. The
//! last [`KEEP`] containers are kept; recording and lookups never block for long (one mutex, no I/O).

use std::collections::VecDeque;
use std::sync::Mutex;

/// How many killed containers are remembered.
pub const KEEP: usize = 1024;

/// The containers OOM-killed lately.
#[derive(Debug, Default)]
pub struct OomKills(Mutex<VecDeque<String>>);

impl OomKills {
    /// Records the container of the kill whose victim's memcg is `task_memcg`; ignores a memcg that names no
    /// container (a pod's or the node's own).
    pub fn record_memcg(&self, task_memcg: &str) {
        let Some(id) = container_id_of_memcg(task_memcg) else { return };
        let mut q = self.0.lock().unwrap();
        if !q.iter().any(|c| c == id) {
            q.push_back(id.to_string());
            if q.len() > KEEP {
                q.pop_front();
            }
        }
    }

    /// Whether container `id` was OOM-killed.
    pub fn contains(&self, id: &str) -> bool {
        self.0.lock().unwrap().iter().any(|c| c == id)
    }
}

/// The container ID a memcg path ends with: `/kubepods/burstable/pod<uid>/<id>` (cgroupfs) or
/// `.../cri-containerd-<id>.scope` (systemd); None for a pod's, a QoS class's or the root memcg (a name that is
/// no container's ID never matches one anyway).
pub fn container_id_of_memcg(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    let id = match last.strip_suffix(".scope") {
        Some(scope) => scope.rsplit('-').next()?,
        None => last,
    };
    let not_a_container = id.is_empty() || id.starts_with("pod") || id.ends_with(".slice") || id == "kubepods";
    (!not_a_container).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn container_ids_are_read_from_both_cgroup_layouts_and_nothing_else() {
        assert_eq!(container_id_of_memcg(&format!("/kubepods/burstable/pod9/{ID}")), Some(ID));
        let systemd =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod9.slice/cri-containerd-{ID}.scope");
        assert_eq!(container_id_of_memcg(&systemd), Some(ID));
        assert_eq!(container_id_of_memcg("/kubepods/burstable/pod9"), None);
        assert_eq!(container_id_of_memcg("/"), None);
        let kills = OomKills::default();
        kills.record_memcg("/kubepods/burstable/pod9");
        assert!(!kills.contains("pod9"));
        kills.record_memcg(&format!("/kubepods/burstable/pod9/{ID}"));
        assert!(kills.contains(ID));
    }
}

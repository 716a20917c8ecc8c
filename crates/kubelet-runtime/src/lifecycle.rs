//! Lifecycle hooks (`pkg/kubelet/lifecycle/handlers.go`) and the order in which a pod's containers stop
//! (`kuberuntime_termination_order.go`).
//!
//! postStart runs right after StartContainer and may take as long as it likes (a failure kills the container);
//! preStop runs before the stop signal and is bounded by what is left of the grace period. Sidecars
//! (`restartPolicy: Always` init containers) stop after every app container, in reverse order of declaration.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kubelet_cri::RuntimeService;
use kubelet_prober::handlers::http_target;
use tokio::sync::watch;

/// HTTP hooks have no deadline of their own upstream; this bounds a hook nobody answers.
const HTTP_HOOK_TIMEOUT: Duration = Duration::from_secs(3600);

/// `name_namespace(uid)`, as upstream's `format.Pod`.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// Go's `%v` of a string slice: `[sh -c exit 1]`.
fn go_slice(v: &[String]) -> String {
    format!("[{}]", v.join(" "))
}

/// Runs a hook handler; `Err` carries upstream's message for the `FailedPostStartHook` / `FailedPreStopHook`
/// event.
pub async fn run_handler(
    runtime: &dyn RuntimeService,
    pod: &Pod,
    c: &Container,
    container_id: &str,
    handler: &LifecycleHandler,
    pod_ip: &str,
) -> Result<(), String> {
    let who = format!("Container {:?} in Pod {:?}", c.name, format_pod(pod));
    if let Some(e) = &handler.exec {
        // As upstream, the command runs as written: `$(VAR)` is expanded only in a container's command and args
        // and in subPathExpr, never in a hook.
        let cmd = e.command.clone().unwrap_or_default();
        let failure = match runtime.exec_sync(container_id, cmd.clone(), Duration::ZERO).await {
            Ok(o) if o.exit_code == 0 => return Ok(()),
            Ok(o) => {
                let mut out = o.stdout.clone();
                out.extend_from_slice(&o.stderr);
                (
                    format!(
                        "command '{}' exited with {}: {}",
                        cmd.join(" "),
                        o.exit_code,
                        String::from_utf8_lossy(&o.stderr)
                    ),
                    String::from_utf8_lossy(&out).into_owned(),
                )
            }
            Err(e) => (e.to_string(), String::new()),
        };
        return Err(format!(
            "Exec lifecycle hook ({}) for {who} failed - error: {}, message: {:?}",
            go_slice(&cmd),
            failure.0,
            failure.1
        ));
    }
    if let Some(h) = &handler.http_get {
        let path = h.path.clone().unwrap_or_default();
        let target = http_target(h, pod_ip, c)
            .map_err(|e| format!("HTTP lifecycle hook ({path}) for {who} failed - error: {e}"))?;
        return kubelet_prober::http::get(&target, kubelet_prober::USER_AGENT, HTTP_HOOK_TIMEOUT)
            .await
            .map(|_| ())
            .map_err(|e| format!("HTTP lifecycle hook ({path}) for {who} failed - error: {e}"));
    }
    if let Some(s) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
        return Ok(());
    }
    // tcpSocket is accepted by validation for compatibility and never run, as upstream.
    Err("Cannot run handler: invalid handler".to_string())
}

/// Who waits for whom while a pod with sidecars stops (`terminationOrdering`).
#[derive(Debug)]
pub struct TerminationOrdering {
    terminated: HashMap<String, watch::Sender<bool>>,
    prereqs: HashMap<String, Vec<String>>,
}

impl TerminationOrdering {
    /// The ordering for `pod` whose running containers are `running`: each sidecar waits for every app container
    /// and for the sidecars declared after it.
    pub fn new(pod: &Pod, running: &[&str]) -> Self {
        let spec = pod.spec.as_ref();
        let mut terminated = HashMap::new();
        let mut prereqs: HashMap<String, Vec<String>> = HashMap::new();
        let mut mains = vec![];
        for c in spec.into_iter().flat_map(|s| s.containers.iter()) {
            terminated.insert(c.name.clone(), watch::channel(!running.contains(&c.name.as_str())).0);
            mains.push(c.name.clone());
        }
        let mut later_sidecar: Option<String> = None;
        for ic in spec.into_iter().flat_map(|s| s.init_containers.iter().flatten()).rev() {
            terminated.insert(ic.name.clone(), watch::channel(!running.contains(&ic.name.as_str())).0);
            if ic.restart_policy.as_deref() == Some("Always") {
                let p = prereqs.entry(ic.name.clone()).or_default();
                p.extend(mains.iter().cloned());
                p.extend(later_sidecar.iter().cloned());
                later_sidecar = Some(ic.name.clone());
            }
        }
        Self { terminated, prereqs }
    }

    /// Waits until every container `name` waits for has stopped, at most `grace` seconds; returns the whole
    /// seconds waited.
    pub async fn wait_for_turn(&self, name: &str, grace: i64) -> i64 {
        let start = tokio::time::Instant::now();
        let waits = self.prereqs.get(name).into_iter().flatten().filter_map(|p| self.terminated.get(p)).map(|tx| {
            let mut rx = tx.subscribe();
            async move {
                let _ = rx.wait_for(|done| *done).await;
            }
        });
        let all = futures::future::join_all(waits);
        let _ = tokio::time::timeout(Duration::from_secs(grace.max(0) as u64), all).await;
        start.elapsed().as_secs() as i64
    }

    /// Marks a container stopped.
    pub fn container_terminated(&self, name: &str) {
        if let Some(tx) = self.terminated.get(name) {
            tx.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_the_app_then_for_later_sidecars() {
        let mk = |n: &str, side: bool| Container {
            name: n.into(),
            restart_policy: side.then(|| "Always".into()),
            ..Default::default()
        };
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![mk("s1", true), mk("init", false), mk("s2", true)]),
                containers: vec![mk("app", false)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let o = std::sync::Arc::new(TerminationOrdering::new(&pod, &["s1", "s2", "app"]));
        let order = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let mut tasks = vec![];
        for name in ["s1", "s2"] {
            let (o, order) = (o.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                o.wait_for_turn(name, 30).await;
                order.lock().unwrap().push(name);
                o.container_terminated(name);
            }));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(order.lock().unwrap().is_empty(), "sidecars wait for the app");
        o.container_terminated("app");
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["s2", "s1"]);
        // Nobody waits longer than the grace period.
        let o = TerminationOrdering::new(&pod, &["s1", "app"]);
        assert_eq!(o.wait_for_turn("s1", 3).await, 3);
        assert_eq!(o.wait_for_turn("app", 3).await, 0);
    }
}

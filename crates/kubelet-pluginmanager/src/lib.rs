//! The plugin manager (`pkg/kubelet/pluginmanager`): node plugins — device plugins, DRA drivers, CSI drivers —
//! announce themselves by serving the registration API (`pluginregistration` v1) on a unix socket in
//! `<root-dir>/plugins_registry`; the manager finds each socket, asks the plugin what it is (`GetInfo`), hands it to
//! the handler of its type, tells the plugin the outcome (`NotifyRegistrationStatus`), and deregisters it when its
//! socket goes. A plugin that restarts on the same path is deregistered and registered again.
//!
//! Contract:
//! - The binary builds [`PluginManager::new`] with rkubelet's registration folder, adds one [`PluginHandler`] per
//!   plugin type ([`DEVICE_PLUGIN`], [`DRA_PLUGIN`]; [`CSI_PLUGIN`] comes with the CSI volume plugin) and spawns
//!   [`PluginManager::run`], which owns the states until cancelled; running operations are dropped with it.
//! - Operations for one socket run one at a time, each on a task of its own, so a slow plugin delays no other. A
//!   plugin that cannot be dialled, does not answer `GetInfo` within a second, names a type nobody handles or is
//!   refused by its handler is not registered: a warning names the socket and upstream's error, a
//!   `FailedPluginRegistration` event goes on the Node (upstream records none), and the registration is tried
//!   again after upstream's back-off (500 ms doubling to 2 min 2 s) while the socket stays.
//! - Unlike upstream's reconciler, which looks every second, the manager acts as soon as the watcher reports a
//!   change (and when a back-off ends), so a new plugin is registered within milliseconds of its socket.

pub mod client;
pub mod reconciler;
pub mod watcher;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_types::events::{Recorder, WARNING};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use client::PluginClient;
use reconciler::{Op, Outcome, Reconciler, Registered};

/// The registration folder's name under the root directory (`DefaultKubeletPluginsRegistrationDirName`).
pub const PLUGINS_REGISTRY_DIR: &str = "plugins_registry";
/// The type of device plugins.
pub const DEVICE_PLUGIN: &str = "DevicePlugin";
/// The type of DRA drivers.
pub const DRA_PLUGIN: &str = "DRAPlugin";
/// The type of CSI drivers.
pub const CSI_PLUGIN: &str = "CSIPlugin";
/// The reason of the Node event of a refused plugin.
pub const REFUSED_REASON: &str = "FailedPluginRegistration";

/// What takes the plugins of one type (`cache.PluginHandler`). Calls for one socket never overlap.
#[async_trait]
pub trait PluginHandler: Send + Sync + 'static {
    /// Whether the plugin may register: its name and the versions it speaks (`ValidatePlugin`).
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String>;
    /// Takes the plugin (`RegisterPlugin`): typically dials `endpoint`.
    async fn register(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String>;
    /// Lets it go: its socket went or it restarted (`DeRegisterPlugin`).
    async fn deregister(&self, name: &str, endpoint: &str);
}

/// Where refusals are recorded: the recorder and the Node.
#[derive(Clone)]
pub struct Events {
    /// The recorder.
    pub recorder: Arc<dyn Recorder>,
    /// The Node.
    pub node: ObjectReference,
}

/// The plugin manager: the registration folder and the handlers by plugin type.
pub struct PluginManager {
    dir: PathBuf,
    handlers: BTreeMap<String, Arc<dyn PluginHandler>>,
    events: Option<Events>,
}

impl PluginManager {
    /// A manager of the registration folder `dir` (`<root-dir>/plugins_registry`), without handlers.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), handlers: BTreeMap::new(), events: None }
    }

    /// Adds the handler of `plugin_type` (`AddHandler`).
    pub fn add_handler(&mut self, plugin_type: &str, handler: Arc<dyn PluginHandler>) {
        self.handlers.insert(plugin_type.to_string(), handler);
    }

    /// Records refusals as Node events.
    pub fn with_events(mut self, events: Events) -> Self {
        self.events = Some(events);
        self
    }

    /// Watches the folder and keeps the plugins registered until `cancel` fires. Fails only when the folder cannot
    /// be made or watched (no plugin can register then).
    pub async fn run(self, cancel: CancellationToken) -> Result<(), watcher::WatchError> {
        let (tx, mut changes) = mpsc::unbounded_channel();
        let _watch = watcher::start(&self.dir, tx)?;
        info!(path = %self.dir.display(), "Starting Kubelet Plugin Manager");
        let ctx = Arc::new(OpContext { handlers: self.handlers, events: self.events });
        let (done_tx, mut done) = mpsc::unbounded_channel::<(PathBuf, Outcome)>();
        let mut tasks = JoinSet::new();
        let mut rec = Reconciler::default();
        loop {
            let retry = rec.next_retry();
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(change) = changes.recv() => match change {
                    watcher::Change::Added(p) => rec.add(&p),
                    watcher::Change::Removed(p) => rec.remove(&p),
                },
                Some((socket, outcome)) = done.recv() => rec.finished(&socket, outcome, Instant::now()),
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = sleep_until(retry), if retry.is_some() => {}
            }
            for op in rec.plan(Instant::now()) {
                let report = Report { tx: done_tx.clone(), socket: socket_of(&op).to_path_buf(), sent: false };
                tasks.spawn(run_op(ctx.clone(), op, report));
            }
            publish(&rec);
        }
        info!("Shutting down Kubelet Plugin Manager");
        Ok(())
    }
}

async fn sleep_until(t: Option<Instant>) {
    if let Some(t) = t {
        tokio::time::sleep_until(t).await;
    }
}

fn socket_of(op: &Op) -> &Path {
    match op {
        Op::Register { socket, .. } | Op::Unregister { socket, .. } => socket,
    }
}

/// `plugin_manager_total_plugins{socket_path, state}`: one per socket of each state.
fn publish(rec: &Reconciler) {
    let m = &kubelet_metrics::kubelet::PLUGIN_MANAGER_TOTAL_PLUGINS;
    m.reset();
    for s in rec.desired() {
        m.add(&[&s.display().to_string(), "desired_state_of_world"], 1.0);
    }
    for (s, _) in rec.actual() {
        m.add(&[&s.display().to_string(), "actual_state_of_world"], 1.0);
    }
}

/// What the operations share.
struct OpContext {
    handlers: BTreeMap<String, Arc<dyn PluginHandler>>,
    events: Option<Events>,
}

/// Sends an operation's outcome to the manager once; a task that ends without one (it panicked) reports a failure.
struct Report {
    tx: mpsc::UnboundedSender<(PathBuf, Outcome)>,
    socket: PathBuf,
    sent: bool,
}

impl Report {
    fn send(mut self, outcome: Outcome) {
        self.sent = true;
        let _ = self.tx.send((self.socket.clone(), outcome));
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        if !self.sent {
            let _ = self.tx.send((self.socket.clone(), Outcome::Failed));
        }
    }
}

async fn run_op(ctx: Arc<OpContext>, op: Op, report: Report) {
    let outcome = match op {
        Op::Register { socket, uuid } => register(&ctx, &socket, uuid).await,
        Op::Unregister { socket, registered } => {
            if let Some(h) = ctx.handlers.get(&registered.plugin_type) {
                h.deregister(&registered.name, &registered.endpoint).await;
            }
            info!(socket = %socket.display(), pluginType = %registered.plugin_type, pluginName = %registered.name, "plugin deregistered");
            Outcome::Unregistered
        }
    };
    report.send(outcome);
}

/// The registration of the plugin of `socket` (`GenerateRegisterPluginFunc`).
async fn register(ctx: &OpContext, socket: &Path, uuid: u64) -> Outcome {
    let s = socket.display();
    let mut client = match PluginClient::dial(socket).await {
        Ok(c) => c,
        Err(e) => return ctx.refused(socket, format!("RegisterPlugin error -- dial failed at socket {s}, err: {e}")),
    };
    let info = match client.get_info().await {
        Ok(i) => i,
        Err(e) => {
            return ctx.refused(
                socket,
                format!("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {s}, err: {e}"),
            );
        }
    };
    debug!(socket = %s, pluginType = %info.r#type, pluginName = %info.name, versions = ?info.supported_versions, "plugin info");
    let Some(handler) = ctx.handlers.get(&info.r#type) else {
        let why =
            format!("RegisterPlugin error -- no handler registered for plugin type: {} at socket {s}", info.r#type);
        return ctx.refused_and_told(&mut client, socket, why).await;
    };
    let endpoint = if info.endpoint.is_empty() { socket.display().to_string() } else { info.endpoint.clone() };
    if let Err(e) = handler.validate(&info.name, &endpoint, &info.supported_versions) {
        let why = format!("RegisterPlugin error -- plugin validation failed with err: {e}");
        return ctx.refused_and_told(&mut client, socket, why).await;
    }
    let registered = Registered { uuid, plugin_type: info.r#type.clone(), name: info.name.clone(), endpoint };
    if let Err(e) = handler.register(&info.name, &registered.endpoint, &info.supported_versions).await {
        let why = format!("RegisterPlugin error -- plugin registration failed with err: {e}");
        ctx.refused_and_told(&mut client, socket, why).await;
        return Outcome::HandlerFailed(registered);
    }
    info!(socket = %s, pluginType = %info.r#type, pluginName = %info.name, endpoint = %registered.endpoint, "plugin registered");
    if let Err(e) = client.notify(true, "").await {
        warn!(socket = %s, error = %e, "RegisterPlugin error -- failed to send registration status");
    }
    Outcome::Registered(registered)
}

impl OpContext {
    /// A plugin not registered: the warning and the event.
    fn refused(&self, socket: &Path, why: String) -> Outcome {
        warn!(socket = %socket.display(), error = %why, "OperationExecutor.RegisterPlugin failed");
        if let Some(e) = &self.events {
            e.recorder.event(&e.node, WARNING, REFUSED_REASON, format!("plugin socket {}: {why}", socket.display()));
        }
        Outcome::Failed
    }

    /// As [`OpContext::refused`], after telling the plugin (`notifyPlugin(false, ...)`).
    async fn refused_and_told(&self, client: &mut PluginClient, socket: &Path, why: String) -> Outcome {
        let why = match client.notify(false, &why).await {
            Ok(()) => why,
            Err(e) => format!("{why}: {e}"),
        };
        self.refused(socket, why)
    }
}

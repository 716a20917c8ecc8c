//! The plugin manager against in-process plugins serving the registration API on unix sockets in a temporary
//! registration folder, as upstream's `pluginwatcher/example_plugin.go`: registration, the status the plugin is
//! told, deregistration when the socket goes, a restart on the same path, and plugins that never answer, name an
//! unknown type or are refused, beside a good one. Real sockets and inotify, so real time: every wait is on an event
//! with a bound.

use std::sync::Mutex;
use std::time::Duration;

use kubelet_proto::pluginregistration::v1 as pb;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::*;

/// A plugin: what it answers to `GetInfo` (never, with `hang`), and the statuses it is told.
#[derive(Clone)]
struct Plugin {
    info: pb::PluginInfo,
    hang: bool,
    told: UnboundedSender<pb::RegistrationStatus>,
}

#[tonic::async_trait]
impl pb::registration_server::Registration for Plugin {
    async fn get_info(
        &self,
        _: tonic::Request<pb::InfoRequest>,
    ) -> Result<tonic::Response<pb::PluginInfo>, tonic::Status> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        Ok(tonic::Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        req: tonic::Request<pb::RegistrationStatus>,
    ) -> Result<tonic::Response<pb::RegistrationStatusResponse>, tonic::Status> {
        let _ = self.told.send(req.into_inner());
        Ok(tonic::Response::new(pb::RegistrationStatusResponse {}))
    }
}

/// Serves `plugin` on `socket` until the returned token is cancelled (then the socket is removed).
fn serve(socket: &Path, plugin: Plugin) -> CancellationToken {
    let stop = CancellationToken::new();
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let (path, s) = (socket.to_path_buf(), stop.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(pb::registration_server::RegistrationServer::new(plugin))
            .serve_with_incoming_shutdown(incoming, s.cancelled_owned())
            .await;
        let _ = std::fs::remove_file(path);
    });
    stop
}

/// A handler that records its calls and refuses the names in `refuse`.
#[derive(Default)]
struct Handler {
    calls: Mutex<Option<UnboundedSender<String>>>,
    refuse: Vec<String>,
}

impl Handler {
    fn call(&self, c: String) {
        if let Some(tx) = self.calls.lock().unwrap().as_ref() {
            let _ = tx.send(c);
        }
    }
}

#[async_trait]
impl PluginHandler for Handler {
    fn validate(&self, name: &str, _: &str, versions: &[String]) -> Result<(), String> {
        if self.refuse.iter().any(|r| r == name) {
            return Err(format!("{name} is refused (versions {versions:?})"));
        }
        Ok(())
    }
    async fn register(&self, name: &str, endpoint: &str, _: &[String]) -> Result<(), String> {
        self.call(format!("register {name} {endpoint}"));
        Ok(())
    }
    async fn deregister(&self, name: &str, endpoint: &str) {
        self.call(format!("deregister {name} {endpoint}"));
    }
}

/// Events recorded: (reason, message).
#[derive(Default)]
struct Recorded(Mutex<Option<UnboundedSender<(String, String)>>>);

impl Recorder for Recorded {
    fn event(&self, _: &ObjectReference, _: &str, reason: &str, message: String) {
        if let Some(tx) = self.0.lock().unwrap().as_ref() {
            let _ = tx.send((reason.to_string(), message));
        }
    }
}

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    calls: UnboundedReceiver<String>,
    events: UnboundedReceiver<(String, String)>,
    stop: CancellationToken,
}

fn start(refuse: &[&str]) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(PLUGINS_REGISTRY_DIR);
    let (ctx, calls) = unbounded_channel();
    let (etx, events) = unbounded_channel();
    let handler = Handler { calls: Mutex::new(Some(ctx)), refuse: refuse.iter().map(|s| s.to_string()).collect() };
    let recorder = Arc::new(Recorded(Mutex::new(Some(etx))));
    let mut m = PluginManager::new(&dir).with_events(Events { recorder, node: ObjectReference::default() });
    m.add_handler(DEVICE_PLUGIN, Arc::new(handler));
    let stop = CancellationToken::new();
    tokio::spawn(m.run(stop.clone()));
    Setup { _tmp: tmp, dir, calls, events, stop }
}

async fn next<T>(rx: &mut UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what} within 10 s"))
        .unwrap()
}

fn plugin(name: &str, plugin_type: &str) -> (Plugin, UnboundedReceiver<pb::RegistrationStatus>) {
    let (told, rx) = unbounded_channel();
    let info = pb::PluginInfo {
        r#type: plugin_type.into(),
        name: name.into(),
        endpoint: String::new(),
        supported_versions: vec!["v1beta1".into()],
    };
    (Plugin { info, hang: false, told }, rx)
}

async fn wait_folder(dir: &Path) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !dir.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the registration folder is made");
}

#[tokio::test]
async fn a_plugin_is_registered_told_so_deregistered_when_its_socket_goes_and_again_after_a_restart() {
    let mut s = start(&[]);
    wait_folder(&s.dir).await;
    let socket = s.dir.join("example.sock");
    let (p, mut told) = plugin("example.com/r", DEVICE_PLUGIN);
    let stop = serve(&socket, p.clone());
    let at = socket.display().to_string();
    assert_eq!(
        next(&mut s.calls, "registration").await,
        format!("register example.com/r {at}"),
        "endpoint: the socket"
    );
    let status = next(&mut told, "the status").await;
    assert!(status.plugin_registered && status.error.is_empty(), "{status:?}");

    // The plugin stops (its socket goes), then comes back on the same path.
    stop.cancel();
    assert_eq!(next(&mut s.calls, "deregistration").await, format!("deregister example.com/r {at}"));
    let _again = serve(&socket, p);
    assert_eq!(next(&mut s.calls, "registration again").await, format!("register example.com/r {at}"));
    assert!(next(&mut told, "the second status").await.plugin_registered);
    s.stop.cancel();
}

#[tokio::test]
async fn silent_unknown_and_refused_plugins_are_told_why_recorded_and_hold_nobody_up() {
    let mut s = start(&["example.com/refused"]);
    wait_folder(&s.dir).await;
    // Never answers GetInfo.
    let (mut silent, _) = plugin("example.com/silent", DEVICE_PLUGIN);
    silent.hang = true;
    let _a = serve(&s.dir.join("a-silent.sock"), silent);
    let (unknown, mut unknown_told) = plugin("x", "GPUPlugin");
    let _b = serve(&s.dir.join("b-unknown.sock"), unknown);
    let (refused, mut refused_told) = plugin("example.com/refused", DEVICE_PLUGIN);
    let _c = serve(&s.dir.join("c-refused.sock"), refused);
    let (good, _) = plugin("example.com/good", DEVICE_PLUGIN);
    let _d = serve(&s.dir.join("d-good.sock"), good);

    let t = Instant::now();
    let good_at = s.dir.join("d-good.sock").display().to_string();
    assert_eq!(
        next(&mut s.calls, "the good plugin's registration").await,
        format!("register example.com/good {good_at}")
    );

    let unknown = next(&mut unknown_told, "the unknown type's status").await;
    assert!(!unknown.plugin_registered);
    assert_eq!(
        unknown.error,
        format!(
            "RegisterPlugin error -- no handler registered for plugin type: GPUPlugin at socket {}",
            s.dir.join("b-unknown.sock").display()
        )
    );
    let refused = next(&mut refused_told, "the refused plugin's status").await;
    assert!(!refused.plugin_registered);
    assert_eq!(
        refused.error,
        "RegisterPlugin error -- plugin validation failed with err: example.com/refused is refused (versions [\"v1beta1\"])"
    );

    // Each refusal recorded (the fast ones again as their back-off ends), the silent one's after GetInfo's
    // one-second deadline.
    let mut seen: Vec<String> = vec![];
    while !["a-silent", "b-unknown", "c-refused"].iter().all(|p| seen.iter().any(|m| m.contains(p))) {
        let (reason, message) = next(&mut s.events, "the refusal events").await;
        assert_eq!(reason, REFUSED_REASON);
        seen.push(message);
    }
    let silent = seen.iter().find(|m| m.contains("a-silent.sock")).unwrap();
    assert!(silent.contains("failed to get plugin info using RPC GetInfo") && silent.contains("deadline"), "{silent}");
    assert!(t.elapsed() < Duration::from_secs(5), "nothing waited past the deadlines: {:?}", t.elapsed());
    assert!(s.calls.try_recv().is_err(), "only the good plugin reached the handler");
    s.stop.cancel();
}

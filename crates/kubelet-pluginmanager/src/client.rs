//! The kubelet's side of the plugin registration API (`pluginregistration` v1, the calls of
//! `operationexecutor/operation_generator.go`): each plugin serves `GetInfo` and `NotifyRegistrationStatus` on its
//! socket in the registration folder. Upstream's deadlines: 10 s to dial, 1 s for `GetInfo`, 5 s for
//! `NotifyRegistrationStatus`, so a plugin that never answers costs a registration attempt at most 16 s.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kubelet_proto::pluginregistration::v1 as pb;
use pb::registration_client::RegistrationClient;
use tonic::transport::{Channel, Endpoint};

/// How long dialling a plugin may take (`dialTimeoutDuration`).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// `GetInfo`'s deadline.
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// `NotifyRegistrationStatus`'s deadline (`notifyTimeoutDuration`).
pub const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one plugin's registration service.
#[derive(Clone, Debug)]
pub struct PluginClient {
    socket: PathBuf,
    client: RegistrationClient<Channel>,
}

impl PluginClient {
    /// Dials `socket` within [`DIAL_TIMEOUT`].
    pub async fn dial(socket: &Path) -> Result<Self, String> {
        let channel = match uds_channel(socket, DIAL_TIMEOUT).await {
            Ok(c) => c,
            Err(Some(e)) => {
                return Err(format!("failed to dial socket {}, err: {}", socket.display(), source_chain(&e)));
            }
            Err(None) => return Err(format!("failed to dial socket {}, err: {DEADLINE_EXCEEDED}", socket.display())),
        };
        Ok(Self { socket: socket.to_path_buf(), client: RegistrationClient::new(channel) })
    }

    /// The plugin's type, name, endpoint and versions.
    pub async fn get_info(&mut self) -> Result<pb::PluginInfo, String> {
        match tokio::time::timeout(GET_INFO_TIMEOUT, self.client.get_info(pb::InfoRequest {})).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(status_text(&s)),
            Err(_) => Err(DEADLINE_EXCEEDED.into()),
        }
    }

    /// Tells the plugin whether it is registered and why not.
    pub async fn notify(&mut self, registered: bool, error: &str) -> Result<(), String> {
        let req = pb::RegistrationStatus { plugin_registered: registered, error: error.to_string() };
        match tokio::time::timeout(NOTIFY_TIMEOUT, self.client.notify_registration_status(req)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(s)) => Err(status_text(&s)),
            Err(_) => Err(DEADLINE_EXCEEDED.into()),
        }
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

/// A gRPC channel to the server on the unix socket `socket`, connected within `timeout` (None: it was not); the
/// device manager dials its plugins the same way.
pub async fn uds_channel(socket: &Path, timeout: Duration) -> Result<Channel, Option<tonic::transport::Error>> {
    let endpoint = Endpoint::from_static("http://localhost").connect_timeout(timeout);
    let connect = endpoint.connect_with_connector(uds_connector(socket));
    tokio::time::timeout(timeout, connect).await.map_err(|_| None)?.map_err(Some)
}

/// A gRPC channel to the server on the unix socket `socket`, dialled at its first call and again after a broken
/// connection (`grpc.NewClient`): DRA drivers are called this way.
pub fn uds_channel_lazy(socket: &Path) -> Channel {
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(uds_connector(socket))
}

/// Connects to the unix socket `socket`, whatever the URI.
fn uds_connector(
    socket: &Path,
) -> impl tower::Service<
    tonic::transport::Uri,
    Response = TokioIo<tokio::net::UnixStream>,
    Error = std::io::Error,
    Future = impl Future<Output = std::io::Result<TokioIo<tokio::net::UnixStream>>> + Send,
> + Clone
+ Send
+ 'static {
    let path = socket.to_path_buf();
    tower::service_fn(move |_: tonic::transport::Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(&path).await?)) }
    })
}

/// What gRPC-Go says of a call past its deadline.
const DEADLINE_EXCEEDED: &str = "rpc error: code = DeadlineExceeded desc = context deadline exceeded";

/// A gRPC code as gRPC-Go names it (`codes.Code.String`).
pub fn code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".into(),
        tonic::Code::Cancelled => "Canceled".into(),
        c => format!("{c:?}"),
    }
}

/// A status as gRPC-Go prints one: `rpc error: code = <Code> desc = <message>`; node plugins' callers use it too.
pub fn status_text(s: &tonic::Status) -> String {
    format!("rpc error: code = {} desc = {}", code_name(s.code()), s.message())
}

/// An error with its causes, `: `-separated.
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

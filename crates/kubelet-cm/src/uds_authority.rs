//! gRPC servers on unix sockets that Go clients reach with their socket path as `:authority`.
//!
//! grpc-go clients that dial a plain socket path (upstream's device plugin stub, and plugins built on older grpc-go)
//! send that path as the HTTP/2 `:authority`; hyper's HTTP/2 server refuses such a request (`PROTOCOL_ERROR`), where
//! grpc-go's server takes it. Each accepted connection therefore passes through a frame relay: the client's frames
//! are decoded, a `:authority` that is not an authority (the path, percent-encoded by grpc-go) becomes `localhost`, as a
//! unix-socket client of the kubelet itself sends, and everything else goes through unchanged in both directions.
//!
//! Used by the servers the kubelet offers on unix sockets (device plugin registration); the relay ends with either
//! side's connection.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use h2::frame::{BytesStr, Frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::UnixStream;
use tracing::debug;

/// The HTTP/2 client preface.
const PREFACE: usize = 24;
/// The relay's buffer.
const BUFFER: usize = 64 * 1024;

/// The server's side of a relay for `client`: serve it as the accepted connection.
pub fn relay(client: UnixStream) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(BUFFER);
    tokio::spawn(async move {
        if let Err(e) = run(client, theirs).await {
            debug!(error = %e, "unix socket gRPC connection ended");
        }
    });
    ours
}

async fn run(mut client: UnixStream, mut server: DuplexStream) -> std::io::Result<()> {
    let mut preface = [0u8; PREFACE];
    client.read_exact(&mut preface).await?;
    server.write_all(&preface).await?;
    let mut from_client = h2::Codec::<_, Bytes>::new(client);
    let mut from_server = h2::Codec::<_, Bytes>::new(server);
    let io = |e: h2::SendError| std::io::Error::other(e.to_string());
    loop {
        tokio::select! {
            f = from_client.next() => {
                let Some(Ok(mut f)) = f else { return Ok(()) };
                if let Frame::Headers(h) = &mut f {
                    let p = h.pseudo_mut();
                    if p.authority.as_deref().is_some_and(|a| http::uri::Authority::try_from(a).is_err()) {
                        p.authority = BytesStr::try_from(Bytes::from_static(b"localhost")).ok();
                    }
                }
                from_server.send(f).await.map_err(io)?;
            }
            f = from_server.next() => {
                let Some(Ok(f)) = f else { return Ok(()) };
                from_client.send(f).await.map_err(io)?;
            }
        }
    }
}

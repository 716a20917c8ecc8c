use axum::body::Body;
use axum::response::Response;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A route that answers at once, one whose body never ends, and one that upgrades to an echo.
fn router() -> Router {
    async fn upgrade(mut req: Request) -> Response {
        let on = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(u) = on.await {
                let (mut r, mut w) = tokio::io::split(TokioIo::new(u));
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
        Response::builder()
            .status(101)
            .header("connection", "upgrade")
            .header("upgrade", "echo")
            .body(Body::empty())
            .unwrap()
    }
    Router::new()
        .route("/x", get(|| async { "ok" }).post(|| async { "ok" }))
        .route(
            "/hold",
            get(|| async { Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>()) }),
        )
        .route("/up", get(upgrade))
}

async fn start(limits: Limits) -> (SocketAddr, CancellationToken) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let cancel = CancellationToken::new();
    tokio::spawn(serve(l, None, router(), limits, cancel.clone()));
    (addr, cancel)
}

/// Reads until the end of a response head.
async fn head(c: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match c.read(&mut b).await {
            Ok(1) => buf.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// `GET path` on a new connection, closed after the answer: the whole response, or "" when refused.
async fn get_once(addr: SocketAddr, path: &str) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let _ = c.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut buf)).await.expect("an answer or a close");
    String::from_utf8_lossy(&buf).into_owned()
}

/// Whether the server closed `c` (reading gives EOF or an error) within 10 s.
async fn closed(c: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_header_timeout() {
    let (addr, cancel) = start(Limits { header_timeout: Duration::from_millis(300), ..Default::default() }).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n").await.unwrap(); // never finishes its headers
    assert!(closed(&mut c).await, "the server closed the connection");
    let mut quiet = TcpStream::connect(addr).await.unwrap(); // sends nothing at all
    assert!(closed(&mut quiet).await, "a connection that never sends is closed too");
    let ok = get_once(addr, "/x").await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "a well-behaved client is still served: {ok}");
    cancel.cancel();
}

#[tokio::test]
async fn the_connection_idle_the_longest_makes_room_for_a_new_one() {
    let (addr, cancel) = start(Limits { max_connections_per_ip: 2, ..Default::default() }).await;
    let mut oldest = TcpStream::connect(addr).await.unwrap();
    let mut other = TcpStream::connect(addr).await.unwrap();
    let ok = get_once(addr, "/x").await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "{ok}");
    assert!(closed(&mut oldest).await, "the idle connection that came first was closed");
    other.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    assert!(head(&mut other).await.starts_with("HTTP/1.1 200"), "the other one is still served");
    cancel.cancel();
}

#[tokio::test]
async fn busy_connections_are_kept_and_new_ones_closed_until_one_is_free() {
    let (addr, cancel) = start(Limits { max_connections: 2, ..Default::default() }).await;
    let mut streams = vec![];
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /hold HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
        assert!(head(&mut c).await.starts_with("HTTP/1.1 200"));
        streams.push(c);
    }
    assert_eq!(get_once(addr, "/x").await, "", "closed without an answer while both are streaming");
    drop(streams.pop());
    // The place comes back once the server has seen the client go.
    let mut ok = String::new();
    for _ in 0..100 {
        ok = get_once(addr, "/x").await;
        if !ok.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "served again: {ok}");
    let mut buf = [0u8; 1];
    let still = tokio::time::timeout(Duration::from_millis(200), streams[0].read(&mut buf)).await;
    assert!(still.is_err(), "the remaining stream is untouched: {still:?}");
    cancel.cancel();
}

#[tokio::test]
async fn an_upgraded_stream_leaves_the_connection_bounds() {
    let (addr, cancel) = start(Limits { max_connections_per_ip: 1, ..Default::default() }).await;
    let mut up = TcpStream::connect(addr).await.unwrap();
    up.write_all(b"GET /up HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n").await.unwrap();
    assert!(head(&mut up).await.starts_with("HTTP/1.1 101"));
    let ok = get_once(addr, "/x").await;
    assert!(ok.ends_with("ok"), "{ok}");
    up.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), up.read_exact(&mut buf)).await.unwrap().unwrap();
    assert_eq!(&buf, b"ping", "the upgraded stream was not closed to make room");
    cancel.cancel();
}

/// Sends a request head with a header of `n` bytes (without waiting for the server), then reads what comes
/// back until the server closes.
async fn big_header(addr: SocketAddr, n: usize) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = c.split();
    let mut req = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Big: ".to_vec();
    req.resize(req.len() + n, b'a');
    req.extend_from_slice(b"\r\n\r\n");
    let write = async {
        let _ = w.write_all(&req).await;
    };
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut buf).await {
            out.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), futures::future::join(write, read)).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn headers_up_to_upstreams_limit_are_read_and_larger_ones_get_431() {
    let (addr, cancel) = start(Limits::default()).await;
    let ok = big_header(addr, (1 << 20) - 100).await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "1 MiB of headers, as Go's MaxHeaderBytes: {ok:.80}");
    let refused = big_header(addr, 2 << 20).await;
    assert!(refused.starts_with("HTTP/1.1 431 Request Header Fields Too Large"), "{refused:.80}");
    cancel.cancel();
}

#[tokio::test]
async fn the_connection_holding_the_most_header_memory_is_closed_past_the_budget() {
    let (addr, cancel) = start(Limits { max_header_memory: 64 << 10, ..Default::default() }).await;
    assert_eq!(big_header(addr, 200 << 10).await, "", "closed without an answer");
    let ok = get_once(addr, "/x").await;
    assert!(ok.ends_with("ok"), "small requests are still served: {ok}");
    cancel.cancel();
}

#[tokio::test]
async fn a_request_body_that_never_ends_is_not_read_and_the_connection_is_cut() {
    let (addr, cancel) = start(Limits::default()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = c.split();
    w.write_all(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n").await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "b".repeat(64 << 10));
    let mut sent = 0usize;
    let write = async {
        while w.write_all(chunk.as_bytes()).await.is_ok() {
            sent += chunk.len();
        }
    };
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut buf).await {
            out.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), futures::future::join(write, read))
        .await
        .expect("the server cuts the connection");
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok"), "answered without reading the body: {out}");
    assert!(sent < 64 << 20, "cut before the client sent 64 MiB ({sent} bytes)");
    cancel.cancel();
}

fn limits(max: usize, per_ip: usize, header_memory: usize) -> Limits {
    Limits {
        max_connections: max,
        max_connections_per_ip: per_ip,
        max_header_memory: header_memory,
        ..Default::default()
    }
}

fn from(ip: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, ip], port))
}

#[tokio::test(start_paused = true)]
async fn admission_closes_the_connection_idle_the_longest_and_never_a_busy_one() {
    let a = Admission::new(&limits(3, 2, 1 << 20));
    let here = from(1, 10250);
    let c1 = a.admit(&here, &from(2, 1)).unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let c2 = a.admit(&here, &from(2, 2)).unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let busy = Busy::start(c1.clone());
    // The address is at its bound: its idle connection goes, not the older busy one.
    let c3 = a.admit(&here, &from(2, 3)).unwrap();
    assert!(c2.state.evict.is_cancelled() && !c1.state.evict.is_cancelled());
    tokio::time::advance(Duration::from_secs(1)).await;
    drop(busy); // c1 idle from now on: c3 has been idle longer.
    tokio::time::advance(Duration::from_secs(1)).await;
    let c4 = a.admit(&here, &from(2, 4)).unwrap();
    assert!(c3.state.evict.is_cancelled() && !c1.state.evict.is_cancelled());
    // Other addresses share the global bound.
    let _b1 = Busy::start(c1.clone());
    let _b4 = Busy::start(c4.clone());
    let c5 = a.admit(&here, &from(3, 1)).unwrap();
    let c6 = a.admit(&here, &from(4, 1)).expect("c5 made room");
    assert!(c5.state.evict.is_cancelled());
    let _b6 = Busy::start(c6.clone());
    assert!(a.admit(&here, &from(5, 1)).is_none(), "every connection is busy");
    assert_eq!(a.registry().conns.len(), 3);
}

#[tokio::test]
async fn header_memory_past_the_budget_closes_the_idle_connection_holding_the_most() {
    let a = Admission::new(&limits(10, 10, 100));
    let here = from(1, 10250);
    let (c1, c2, c3) = (
        a.admit(&here, &from(2, 1)).unwrap(),
        a.admit(&here, &from(2, 2)).unwrap(),
        a.admit(&here, &from(2, 3)).unwrap(),
    );
    assert!(a.charge(&c1.state, 60));
    assert!(a.charge(&c2.state, 30));
    assert!(a.charge(&c2.state, 20), "c1 holds the most: it goes");
    assert!(c1.state.evict.is_cancelled());
    assert_eq!(a.held.load(Ordering::Acquire), 50);
    let busy = Busy::start(c3.clone());
    assert!(a.charge(&c3.state, 1000), "a request body is not header memory");
    assert_eq!(a.held.load(Ordering::Acquire), 50);
    drop(busy);
    assert!(!a.charge(&c2.state, 60), "c2 now holds the most: its own read fails");
    drop(c2);
    assert_eq!(a.held.load(Ordering::Acquire), 0, "its share is given back when it closes");
    // A connection keeps its largest head as its charge (its buffer keeps that size), across requests.
    assert!(a.charge(&c3.state, 40));
    drop(Busy::start(c3.clone()));
    assert!(a.charge(&c3.state, 10));
    assert_eq!(a.held.load(Ordering::Acquire), 40);
}

#[tokio::test]
async fn memory_is_given_back_once_a_burst_of_connections_is_gone() {
    let a = Admission::new(&limits(4096, 4096, 1 << 20));
    let here = from(1, 10250);
    let mut conns: Vec<_> = (0..400).map(|i| a.admit(&here, &from(2, i)).unwrap()).collect();
    assert_eq!(a.registry().high_water, 400);
    conns.truncate(101);
    assert_eq!(a.registry().high_water, 400, "not yet: more than a quarter remain");
    conns.truncate(100);
    assert_eq!(a.registry().high_water, 100, "given back at a quarter; the next time at a quarter of that");
    conns.clear();
    assert_eq!(a.registry().high_water, 100, "bursts under 256 connections are not worth it");
}

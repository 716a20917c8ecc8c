//! A minimal HTTP/1.1 client over raw TCP for the protocol tests: whole responses, and watch streams
//! decoded from chunked transfer encoding line by line.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub async fn send(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.expect("write");
    s
}

/// One whole request: status code and JSON body.
pub async fn call(port: u16, method: &str, path: &str, ctype: &str, body: Option<&str>) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = if ctype.is_empty() { vec![] } else { vec![("Content-Type", ctype)] };
    call_h(port, method, path, &headers, body).await
}

pub async fn call_h(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, Value) {
    let mut s = send(port, method, path, headers, body).await;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").expect("headers");
    let code: u16 = head.split(' ').nth(1).expect("status").parse().expect("code");
    let v = serde_json::from_str(body).unwrap_or(Value::String(body.to_string()));
    (code, v)
}

pub async fn get(port: u16, path: &str) -> (u16, Value) {
    call(port, "GET", path, "", None).await
}

pub async fn post(port: u16, path: &str, body: &Value) -> (u16, Value) {
    call(port, "POST", path, "application/json", Some(&body.to_string())).await
}

/// A watch stream.
pub struct Watch {
    r: BufReader<TcpStream>,
    pending: Vec<u8>,
    pub code: u16,
}

impl Watch {
    pub async fn open(port: u16, path: &str) -> Watch {
        let s = send(port, "GET", path, &[], None).await;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).await.expect("status line");
        let code = line.split(' ').nth(1).expect("status").parse().expect("code");
        loop {
            line.clear();
            r.read_line(&mut line).await.expect("header");
            if line == "\r\n" {
                break;
            }
        }
        Watch { r, pending: Vec::new(), code }
    }

    /// The next event, `None` at the end of the stream; panics after 10 s.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_within(Duration::from_secs(10)).await.expect("a watch event in time")
    }

    /// The next event within `d`: `Err` on timeout, `Ok(None)` at the end of the stream.
    pub async fn next_within(&mut self, d: Duration) -> Result<Option<Value>, ()> {
        tokio::time::timeout(d, self.read_event()).await.map_err(|_| ())
    }

    async fn read_event(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).expect("event JSON"));
            }
            let mut size = String::new();
            if self.r.read_line(&mut size).await.ok()? == 0 {
                return None;
            }
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            if n == 0 {
                return None;
            }
            let mut chunk = vec![0; n + 2];
            self.r.read_exact(&mut chunk).await.ok()?;
            chunk.truncate(n);
            self.pending.extend_from_slice(&chunk);
        }
    }
}

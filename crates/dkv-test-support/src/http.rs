//! Plain HTTP/1.1 GETs written by hand, so nothing is hidden between a test
//! and what a server answers.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Status code and body of a raw HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let code = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

/// A GET of `path`, with a bearer `token` if given; the server closes the
/// connection after answering.
pub fn request(path: &str, token: Option<&str>) -> String {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n")
}

/// GET `path` from `addr` in plaintext; `None` when nothing answers.
pub async fn plain_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut tcp = TcpStream::connect(addr).await.ok()?;
    tcp.write_all(request(path, None).as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut raw)).await;
    parse_response(&raw)
}

//! The kubelet's end of `kubectl port-forward`: upgrades the connection the API server handed through and runs a
//! [`port_forward_session`](super::port_forward_session) over it, dialing the pod's address.
//!
//! Two transports carry the same SPDY/3.1 session:
//! * WebSocket (kubectl ≥ 1.31 tries it first, KEP 4006): a `GET` with `Upgrade: websocket` and the subprotocol
//!   `SPDY/3.1+portforward.k8s.io`; the SPDY bytes travel in binary messages, split anywhere;
//! * plain SPDY (the fallback, and `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`): a `POST` with `Connection: Upgrade`,
//!   `Upgrade: SPDY/3.1` and `X-Stream-Protocol-Version: portforward.k8s.io`, answered 101 Switching Protocols with
//!   the same headers; then the connection is the SPDY session.
//!
//! The API server checks the request and the pod and proxies the upgrade to the pod's node's kubelet
//! (the API server's `pod_exec`), which calls [`accept`] from its `/portForward/{namespace}/{pod}` route; so a pod on a node
//! that is down cannot be forwarded to, as on a cluster.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::extract::Request;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use http::{HeaderValue, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::port_forward_session;
pub(crate) use super::port_forward_session::Target;

/// The stream protocol, negotiated in `X-Stream-Protocol-Version` (plain SPDY) or as the suffix of the WebSocket
/// subprotocol.
const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of SPDY tunnelled in WebSocket (KEP 4006).
const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// Encoded frames waiting for the transport; a full queue stops the session's readers.
const OUTPUT_QUEUE: usize = 64;
/// Frames coalesced into one write (or one WebSocket message) when several are waiting.
const COALESCE: usize = 256 * 1024;

/// Upgrades `req` (WebSocket or plain SPDY) and runs a session forwarding to `target`; `Err` is why the request is
/// not a port-forward upgrade this side serves (the kubelet answers it 400).
pub(crate) async fn accept(req: Request, target: Target) -> Result<Response, String> {
    let target = Arc::new(target);
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if upgrade.split(',').any(|u| u.trim() == "websocket") {
        websocket(req, target).await
    } else if upgrade.split(',').any(|u| u.trim() == "spdy/3.1") {
        spdy(req, target)
    } else {
        Err("unable to upgrade: missing upgrade headers in request".into())
    }
}

/// Whether a comma-separated header offers `wanted`.
fn offers(req: &Request, name: &str, wanted: &str) -> bool {
    req.headers()
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == wanted)
}

/// SPDY tunnelled in WebSocket binary messages.
async fn websocket(req: Request, target: Arc<Target>) -> Result<Response, String> {
    if !offers(&req, "sec-websocket-protocol", TUNNEL_PROTOCOL) {
        return Err(format!(
            "unable to upgrade: the WebSocket subprotocol {TUNNEL_PROTOCOL} was not requested"
        ));
    }
    let (mut parts, _body) = req.into_parts();
    let ws = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| format!("unable to upgrade: {}", e.body_text()))?;
    Ok(ws
        .protocols([TUNNEL_PROTOCOL])
        .on_upgrade(move |socket| tunnel(socket, target)))
}

/// Runs a session over a WebSocket: binary messages in, frames out coalesced into binary messages.
async fn tunnel(socket: WebSocket, target: Arc<Target>) {
    let (mut sink, stream) = socket.split();
    let input = stream.filter_map(|m| async move {
        match m {
            Ok(Message::Binary(b)) => Some(Ok(b)),
            Ok(Message::Text(_)) => Some(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a text message in a SPDY tunnel",
            ))),
            Ok(Message::Ping(_) | Message::Pong(_)) => None,
            Ok(Message::Close(_)) => Some(Err(std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => Some(Err(std::io::Error::other(e))),
        }
    });
    // A Close message ends the session like the end of the connection does.
    let input = input.take_while(|r| {
        let go = !matches!(r, Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof);
        async move { go }
    });
    let (tx, mut rx) = mpsc::channel::<Bytes>(OUTPUT_QUEUE);
    let writer = async move {
        while let Some(first) = rx.recv().await {
            let message = coalesce(first, &mut rx);
            if sink.send(Message::Binary(message)).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    let session = port_forward_session::run(Box::pin(input), tx, target);
    let (result, ()) = tokio::join!(session, writer);
    if let Err(e) = result {
        tracing::debug!(error = %e, "port-forward session over WebSocket ended");
    }
}

/// `first` and whatever else is already queued, up to [`COALESCE`] bytes, as one buffer.
fn coalesce(first: Bytes, rx: &mut mpsc::Receiver<Bytes>) -> Bytes {
    let mut more = match rx.try_recv() {
        Ok(b) => b,
        Err(_) => return first,
    };
    let mut buf = BytesMut::from(first.as_ref());
    loop {
        buf.extend_from_slice(&more);
        if buf.len() >= COALESCE {
            break;
        }
        match rx.try_recv() {
            Ok(b) => more = b,
            Err(_) => break,
        }
    }
    buf.freeze()
}

/// Plain SPDY after an HTTP/1.1 upgrade.
fn spdy(mut req: Request, target: Arc<Target>) -> Result<Response, String> {
    if req.headers().contains_key("x-stream-protocol-version")
        && !offers(&req, "x-stream-protocol-version", PROTOCOL)
    {
        return Err(format!(
            "unable to upgrade: unable to negotiate protocol: server supports [{PROTOCOL}]"
        ));
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "port-forward: the SPDY upgrade failed");
                return;
            }
        };
        let (reader, mut writer) = tokio::io::split(upgraded);
        let (tx, mut rx) = mpsc::channel::<Bytes>(OUTPUT_QUEUE);
        let write = async move {
            while let Some(first) = rx.recv().await {
                let bytes = coalesce(first, &mut rx);
                if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err() {
                    return;
                }
            }
            let _ = writer.shutdown().await;
        };
        let read = read_stream(reader);
        let (result, ()) = tokio::join!(port_forward_session::run(read, tx, target), write);
        if let Err(e) = result {
            tracing::debug!(error = %e, "port-forward session over SPDY ended");
        }
    });
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    headers.insert(
        "x-stream-protocol-version",
        HeaderValue::from_static(PROTOCOL),
    );
    Ok(resp)
}

/// The bytes of `reader` as a stream of chunks, ending at end of stream.
fn read_stream<R>(
    reader: R,
) -> std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<Bytes>> + Send>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    Box::pin(futures::stream::unfold(reader, |mut reader| async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        match reader.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), reader)),
            Err(e) => Some((Err(e), reader)),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queued_frames_are_coalesced_up_to_the_limit() {
        let (tx, mut rx) = mpsc::channel(8);
        let big = Bytes::from(vec![7u8; COALESCE]);
        for b in [
            Bytes::from_static(b"b"),
            big.clone(),
            Bytes::from_static(b"c"),
        ] {
            tx.send(b).await.unwrap();
        }
        let first = coalesce(Bytes::from_static(b"a"), &mut rx);
        assert_eq!(first.len(), 2 + COALESCE);
        assert_eq!(&first[..2], b"ab");
        // What did not fit stays queued, and a lone frame is passed through as is.
        let second = coalesce(rx.recv().await.unwrap(), &mut rx);
        assert_eq!(second.as_ref(), b"c");
    }
}
